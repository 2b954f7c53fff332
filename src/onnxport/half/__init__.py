"""Half precision: a float16 ONNX model with float32 islands where float16 is not safe.

``export(..., dtype=torch.float16)`` captures and translates the model as it is (float32), then converts
the ONNX graph (``HalfConvertPass``): float16 weights, inputs, outputs and arithmetic, with softmax and
summing reductions (and what feeds and finishes them) in float32 (``islands``). A model that is already
float16 (``model.half()``) gets the same islands around its float16 nodes, its own float32 kept. The
float16 export is verified against the model in eager float32 (``verify``).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import onnx_ir as ir
import torch

from onnxport.errors import InvalidInputError
from onnxport.half.half_convert import HalfConvertPass, HalfSummary
from onnxport.half.islands import SEED_OPS
from onnxport.half.view import HalfView

__all__ = ["SEED_OPS", "HalfConvertPass", "HalfSummary", "HalfView", "check_dtype", "is_half",
           "to_half"]

_DTYPES = (torch.float16,)


def check_dtype(dtype: Any) -> torch.dtype | None:
    """``dtype`` as export takes it: None (the model's own) or ``torch.float16``; ``torch.float32`` is None."""
    if dtype is None or dtype == torch.float32:
        return None
    if dtype == "float16":
        dtype = torch.float16
    if dtype not in _DTYPES:
        raise InvalidInputError(
            f"dtype={dtype!r} is not one onnxport exports to",
            fix="pass dtype=torch.float16 for a float16 model, or leave it out for the model's own dtypes",
        )
    return dtype


def is_half(model: ir.Model) -> bool:
    """Whether the model holds float16 weights (a ``model.half()``), so that its float32 values are its own."""
    return any(v.dtype == ir.DataType.FLOAT16 for v in model.graph.initializers.values())


def to_half(model: ir.Model, opset: int, *, from_float32: bool, weights: Collection[str] = (),
            keep_io: bool = False) -> HalfSummary:
    """Convert ``model`` in place (``HalfConvertPass``; ``weights``: the initializers that are parameters;
    ``keep_io``: float32 inputs and outputs stay float32); returns what was done."""
    convert = HalfConvertPass(opset, from_float32=from_float32, weights=weights, keep_io=keep_io)
    convert(model)
    return convert.summary
