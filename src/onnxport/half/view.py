"""Verifying a float16 export against the model in eager float32.

The verify stage runs the program it is given on the user's inputs and compares with eager PyTorch on the
same inputs. ``HalfView`` is the float16 program as that stage sees it: the float32 inputs are narrowed to
the float16 the ONNX model takes, and eager float32's outputs are rounded to the float16 it gives, so
the reference is the model in float32, not in float16. The outputs are held to the tolerance of float16
(``onnxport.verify.tolerance``: atol and rtol 1e-2); the whole models measured in bench/half.md stay
well within it.
"""

from __future__ import annotations

from typing import Any

import onnx_ir as ir
import torch

__all__ = ["HalfView"]


class HalfView:
    """``program`` with float inputs narrowed to the ONNX model's dtypes and expected outputs to its outputs'."""

    def __init__(self, program: Any):
        self._program = program

    def __getattr__(self, name: str) -> Any:
        return getattr(self._program, name)

    def flatten_inputs(self, args: Any = (), kwargs: dict[str, Any] | None = None) -> list[Any]:
        flat = self._program.flatten_inputs(args, kwargs)
        return [_as(t, v.dtype) for t, v in zip(flat, self._program.model.graph.inputs)]

    def onnx_leaves(self, outputs: Any) -> list[Any]:
        leaves = self._program.onnx_leaves(outputs)
        return [_as(t, v.dtype) for t, v in zip(leaves, self._program.model.graph.outputs)]


def _as(value: Any, dtype: ir.DataType | None) -> Any:
    if isinstance(value, torch.Tensor) and value.is_floating_point() and dtype == ir.DataType.FLOAT16:
        return value.to(torch.float16)
    return value
