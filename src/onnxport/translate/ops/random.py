"""Random ops: dropout (identity at inference)."""

from __future__ import annotations

import onnx_ir as ir
import torch

from onnxport.translate.builder import Ctx
from onnxport.translate.registry import aten

aten_ = torch.ops.aten


@aten(aten_.dropout.default, aten_.feature_dropout.default, aten_.alpha_dropout.default)
def dropout(ctx: Ctx, x: ir.Value, p: float, train: bool | None) -> ir.Value:
    """dropout(Tensor input, float p, bool train) -> Tensor"""
    if not train or p == 0:
        return x
    ratio = ctx.const(float(p), ir.DataType.FLOAT)
    return ctx.op.Dropout(x, ratio, ctx.const(True, ir.DataType.BOOL))


@aten(aten_.native_dropout.default)
def native_dropout(ctx: Ctx, x: ir.Value, p: float, train: bool | None) -> tuple[ir.Value, ir.Value]:
    """native_dropout(Tensor input, float p, bool? train) -> (Tensor, Tensor)"""
    if not train or p == 0:
        mask = ctx.op.Expand(ctx.const(True, ir.DataType.BOOL), ctx.op.Shape(x))
        return x, mask
    return ctx.op.Dropout(x, ctx.const(float(p), ir.DataType.FLOAT), ctx.const(True, ir.DataType.BOOL), _outputs=2)
