"""Matrix products."""

from __future__ import annotations

import onnx_ir as ir
import torch

from onnxport.translate.builder import Ctx
from onnxport.translate.ops._common import rank
from onnxport.translate.registry import aten

aten_ = torch.ops.aten


@aten(aten_.linear.default)
def linear(ctx: Ctx, x: ir.Value, weight: ir.Value, bias: ir.Value | None = None) -> ir.Value:
    """linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor"""
    if rank(x) == 2 and rank(weight) == 2 and bias is not None:
        return ctx.op.Gemm(x, weight, bias, transB=1)
    w_t = ctx.op.Transpose(weight, perm=[1, 0]) if rank(weight) == 2 else weight
    out = ctx.op.MatMul(x, w_t)
    return ctx.op.Add(out, bias) if bias is not None else out
