"""Reductions."""

from __future__ import annotations

import onnx_ir as ir
import torch

from onnxport.translate.builder import Ctx
from onnxport.translate.ops._common import axes, rank
from onnxport.translate.registry import aten

aten_ = torch.ops.aten


@aten(aten_.sum.default, aten_.sum.dim_IntList)
def sum(ctx: Ctx, x: ir.Value, dim: list[int] | None = None, keepdim: bool = False, *, dtype: torch.dtype | None = None) -> ir.Value:
    """sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"""
    x = ctx.cast(x, ctx.out_dtype())
    if not dim:
        return ctx.op.ReduceSum(x, keepdims=int(keepdim))
    return ctx.op.ReduceSum(x, axes(ctx, dim, rank(x)), keepdims=int(keepdim))
