"""One OpInfo entry at one dtype through ``onnxport.export``: the census behind ``bench/opinfo.py`` and
``tests/test_opinfo.py``, shared so that the test and the census count the same way.

Each sample becomes a module whose inputs are the sample's tensors (other arguments are baked in); it is
exported (verification off), run in onnxruntime and compared with eager PyTorch. The statuses:
``matched`` (every sample eager accepts exports and matches), ``refused`` (onnxport refuses a sample with an
``OnnxportError``: an op without a translation, an argument ONNX cannot express), ``mismatch`` (exports but
differs, or onnxruntime refuses the model), ``not capturable`` (torch.export refuses), ``eager fails`` (eager
refuses every sample). Any other exception, or a ``TranslationError`` that calls itself an onnxport bug,
propagates: nothing but an ``OnnxportError`` may leave ``export``.
"""

from __future__ import annotations

import itertools
import re
import warnings
from typing import Any

import torch

import onnxport

DTYPES = {"float32": torch.float32, "float16": torch.float16, "float64": torch.float64, "int64": torch.int64,
          "int32": torch.int32, "bool": torch.bool, "bfloat16": torch.bfloat16}
# Ops whose output is uninitialised memory: only shapes and dtypes can be compared.
UNINITIALISED = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_permuted"}
BUG = "this is an onnxport bug"
_OP = re.compile(r"^\s+(\S+::\S+) x\d+", re.M)
_RANK = {"matched": 0, "random": 0, "not capturable": 1, "mismatch": 2, "refused": 3}


class _Call(torch.nn.Module):
    def __init__(self, op: Any, tensor_slots: list[int], template: tuple[list[Any], Any]) -> None:
        super().__init__()
        self.op, self.slots, self.template = op, tensor_slots, template

    def forward(self, *tensors: torch.Tensor) -> Any:
        leaves, spec = self.template
        leaves = list(leaves)
        for slot, tensor in zip(self.slots, tensors):
            leaves[slot] = tensor
        args, kwargs = torch.utils._pytree.tree_unflatten(leaves, spec)
        return self.op(*args, **kwargs)


def sample_model(info: Any, sample: Any) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """The sample as a module whose inputs are its tensors (other arguments are baked in), and those tensors."""
    structure = ((sample.input, *sample.args), dict(sample.kwargs))
    leaves, spec = torch.utils._pytree.tree_flatten(structure)
    slots = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    return _Call(info.op, slots, (leaves, spec)), tuple(leaves[i] for i in slots)


def entry_key(info: Any) -> str:
    """``name`` or ``name.variant``, as the census and the expectations name an entry."""
    return f"{info.name}.{info.variant_test_name}" if info.variant_test_name else info.name


def ci_dtype(info: Any) -> torch.dtype | None:
    """The dtype the OpInfo test runs an entry at: float32, else int64, else bool."""
    supported = info.supported_dtypes("cpu")
    return next((d for d in (torch.float32, torch.int64, torch.bool) if d in supported), None)


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


def _one(model: torch.nn.Module, tensors: tuple, expected: Any, info: Any) -> tuple[str, list[str], str]:
    try:
        prog = onnxport.export(model, tensors, verify=False)
    except onnxport.UnsupportedOpError as exc:
        return "refused", _OP.findall(str(exc)), str(exc).splitlines()[0][:200]
    except onnxport.CaptureError as exc:
        return "not capturable", [], str(exc).splitlines()[0][:200]
    except onnxport.OnnxportError as exc:
        if isinstance(exc, onnxport.TranslationError) and BUG in str(exc):
            raise
        return "refused", [], f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    try:
        actual = prog(*tensors)
    except Exception as exc:  # noqa: BLE001 - onnxruntime refuses the model
        return "mismatch", [], f"onnxruntime: {str(exc).splitlines()[0][:200]}"
    # A Python number (``.item()``, a size) comes back from onnxruntime as a 0-d tensor.
    kinds = (torch.Tensor, int, float, bool)
    exp = [torch.as_tensor(t) for t in torch.utils._pytree.tree_leaves(expected) if isinstance(t, kinds)]
    act = [torch.as_tensor(t) for t in torch.utils._pytree.tree_leaves(actual) if isinstance(t, kinds)]
    try:
        assert len(exp) == len(act), f"{len(act)} outputs, eager has {len(exp)}"
        for e, a in zip(exp, act):
            if prog.random_outputs or info.name in UNINITIALISED:
                assert (a.shape, a.dtype) == (e.shape, e.dtype), f"{a.shape} {a.dtype} != {e.shape} {e.dtype}"
                continue
            tol = 1e-2 if e.dtype in (torch.float16, torch.bfloat16) else 1e-4
            torch.testing.assert_close(a, e, atol=tol, rtol=tol, equal_nan=True)
    except AssertionError as exc:
        return "mismatch", [], str(exc).splitlines()[0][:200]
    return ("random" if prog.random_outputs else "matched"), [], ""
