"""One OpInfo entry at one dtype through ``onnxport.export``: the census behind ``bench/opinfo.py`` and the
OpInfo test. Shared so that the test and the census count the same way."""

from __future__ import annotations

import itertools
import re
import warnings
from typing import Any

import torch

import onnxport
from tests.test_opinfo import sample_model

DTYPES = {"float32": torch.float32, "float16": torch.float16, "float64": torch.float64, "int64": torch.int64,
          "int32": torch.int32, "bool": torch.bool, "bfloat16": torch.bfloat16}
_OP = re.compile(r"^\s+(\S+::\S+) x\d+", re.M)


def census_entry(info: Any, dtype: torch.dtype, samples: int) -> dict[str, Any] | None:
    """``{"status", "ops", "detail"}`` for the first ``samples`` samples of ``info`` at ``dtype``; None when
    the entry does not support ``dtype`` on CPU."""
    if dtype not in info.supported_dtypes("cpu"):
        return None
    status, ops, detail = "eager fails", [], ""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            chosen = list(itertools.islice(info.sample_inputs("cpu", dtype, requires_grad=False), samples))
        except Exception as exc:  # noqa: BLE001 - some sample generators fail at some dtypes
            return {"status": "eager fails", "ops": [], "detail": f"samples: {type(exc).__name__}"}
        for sample in chosen:
            model, tensors = sample_model(info, sample)
            try:
                expected = model(*tensors)
            except Exception:  # noqa: BLE001 - eager refuses the sample
                continue
            outcome, sample_ops, sample_detail = _one(model, tensors, expected, info)
            if status in ("eager fails", "matched") or _RANK[outcome] > _RANK[status]:
                status, detail = outcome, sample_detail
            ops += [op for op in sample_ops if op not in ops]
    return {"status": status, "ops": ops, "detail": detail}


_RANK = {"matched": 0, "random": 0, "not capturable": 1, "mismatch": 2, "refused": 3}


def _one(model: torch.nn.Module, tensors: tuple, expected: Any, info: Any) -> tuple[str, list[str], str]:
    try:
        prog = onnxport.export(model, tensors, verify=False)
    except onnxport.UnsupportedOpError as exc:
        return "refused", _OP.findall(str(exc)), str(exc).splitlines()[0][:200]
    except onnxport.CaptureError as exc:
        return "not capturable", [], str(exc).splitlines()[0][:200]
    except onnxport.OnnxportError as exc:
        return "refused", [], f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    try:
        actual = prog(*tensors)
    except Exception as exc:  # noqa: BLE001 - onnxruntime refuses the model
        return "mismatch", [], f"onnxruntime: {str(exc).splitlines()[0][:200]}"
    if prog.random_outputs:
        return "random", [], ""
    # A Python number (``.item()``, a size) comes back from onnxruntime as a 0-d tensor.
    exp = [torch.as_tensor(t) for t in torch.utils._pytree.tree_leaves(expected) if isinstance(t, (torch.Tensor, int, float, bool))]
    act = [torch.as_tensor(t) for t in torch.utils._pytree.tree_leaves(actual) if isinstance(t, (torch.Tensor, int, float, bool))]
    try:
        assert len(exp) == len(act), f"{len(act)} outputs, eager has {len(exp)}"
        for e, a in zip(exp, act):
            tol = 1e-2 if e.dtype in (torch.float16, torch.bfloat16) else 1e-4
            torch.testing.assert_close(a, e, atol=tol, rtol=tol, equal_nan=True, check_dtype=True)
    except AssertionError as exc:
        return "mismatch", [], str(exc).splitlines()[0][:200]
    return "matched", [], ""
