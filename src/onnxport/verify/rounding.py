"""Judge a float32 difference by the exact answer: eager PyTorch again, in float64.

A float32 output beyond its tolerance is either a wrong graph or two roundings of one computation: eager
PyTorch and onnxruntime sum in their own orders, pick their own convolution algorithms per batch size, and a
deep stack of convolutions or an output near zero shows the difference as a relative error no fixed tolerance
covers (a DAC decoder: 1 of 4096 samples 1.4e-4 off at batch 1, equal at batch 3). The model run in float64 on
the same inputs says which: where the ONNX model is no farther from the float64 outputs than eager float32 is
(within ``NOISE`` times, in as few elements beyond the tolerance), both are float32's rounding of one answer; a
wrong graph (a branch for another size, a floor one step off) is far from it while eager float32 is close.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch.utils import _pytree as pytree

from onnxport.memory import available_memory
from onnxport.verify.ahead import eager_outputs
from onnxport.verify.compare import OutputCheck

__all__ = ["NOISE", "float_rounding"]

# How much farther than eager float32 from the float64 answer the ONNX model may be.
NOISE = 4.0


def float_rounding(model: torch.nn.Module, names: list[str], onnx_leaves: Any,
                   runs: list[tuple[tuple, dict[str, Any], Any, Any]], differing: list[OutputCheck]) -> str:
    """Whether every differing float32 output of ``runs`` (args, kwargs, eager outputs, onnxruntime outputs)
    is float32 rounding, as the module docstring says: the report's sentence saying so, or "" when it is
    not (or cannot be told: a float64 copy too large, a model that does not run in float64)."""
    if not runs or not differing or any(c.dtype != "float32" or "out of tolerance" not in c.problem
                                        for c in differing):
        return ""
    free = available_memory()
    if not _all_float32(model) or free is None or 8 * sum(t.numel() for t in _tensors(model)) > free // 2:
        return ""  # (a float64 copy that would take half the free memory is not made)
    try:
        wide = copy.deepcopy(model).double()
    except Exception:  # noqa: BLE001 - a model that cannot be copied: no judgement
        return ""
    found = []
    try:
        for args, kwargs, expected, actual in runs:
            args64, kwargs64 = pytree.tree_map(_widen, (args, kwargs))
            exact = onnx_leaves(eager_outputs(wide, args64, kwargs64))
            eager = onnx_leaves(expected)
            for check in differing:
                i = names.index(check.name)
                truth = torch.as_tensor(exact[i]).double()
                ours, theirs = _off(actual[i], truth, check), _off(eager[i], truth, check)
                if ours[0] > NOISE * max(theirs[0], 0.0) or ours[1] > NOISE * max(theirs[1], 1):
                    return ""
                found.append((check.name, ours[0], theirs[0]))
    except Exception:  # noqa: BLE001 - the model refuses float64 (a kernel without it): no judgement
        return ""
    finally:
        del wide
    for check in differing:
        check.ok, check.problem = True, ""
        check.note = "float32 rounding: as near eager PyTorch's float64 result as eager float32 is"
    beyond = ", ".join(f"{c.name} max_abs={c.max_abs:.3g}" for c in differing)
    return (f"float32 outputs beyond their tolerance ({beyond}) judged by eager PyTorch in float64 on the sets that "
            "differed: the ONNX model is as near it as eager "
            "float32 is (" + ", ".join(f"{name}: {ours:.3g} off against eager float32's {theirs:.3g}"
                                      for name, ours, theirs in found[:3]) + ")")


def _tensors(model: torch.nn.Module) -> list[torch.Tensor]:
    return [*model.parameters(), *model.buffers()]


def _all_float32(model: torch.nn.Module) -> bool:
    """Float weights all float32 (a half or quantized model's difference is not float32's rounding)."""
    floats = [t for t in _tensors(model) if t.is_floating_point()]
    return bool(floats) and all(t.dtype == torch.float32 and not t.is_meta for t in floats)


def _widen(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.dtype == torch.float32:
        return value.double()
    return value


def _off(a: Any, truth: torch.Tensor, check: OutputCheck) -> tuple[float, int]:
    """The largest absolute difference of ``a`` from ``truth`` and how many elements lie beyond ``check``'s
    tolerance of it."""
    diff = (torch.as_tensor(a).double() - truth).abs()
    if not diff.numel():
        return 0.0, 0
    beyond = diff > check.atol + check.rtol * truth.abs()
    return float(diff.max()), int(beyond.sum())
