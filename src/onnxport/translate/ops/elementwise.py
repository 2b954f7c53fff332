"""Elementwise arithmetic, comparison and logic, and unary math."""

from __future__ import annotations

import onnx_ir as ir
import torch

from onnxport.translate.builder import Ctx
from onnxport.translate.ops._common import compute_dtype, promote
from onnxport.translate.registry import aten

aten_ = torch.ops.aten


@aten(aten_.add.Tensor, aten_.add.Scalar)
def add(ctx: Ctx, x: ir.Value, other: ir.Value | float, *, alpha: float = 1) -> ir.Value:
    """add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"""
    x, other = promote(ctx, ctx.out_dtype(), x, other)
    if x.dtype == ir.DataType.BOOL:
        return ctx.op.Or(x, other)
    if alpha != 1:
        other = ctx.op.Mul(other, ctx.const(alpha, like=other))
    return ctx.op.Add(x, other)


@aten(aten_.mul.Tensor, aten_.mul.Scalar)
def mul(ctx: Ctx, x: ir.Value, other: ir.Value | float) -> ir.Value:
    """mul.Tensor(Tensor self, Tensor other) -> Tensor"""
    x, other = promote(ctx, ctx.out_dtype(), x, other)
    if x.dtype == ir.DataType.BOOL:
        return ctx.op.And(x, other)
    return ctx.op.Mul(x, other)


@aten(aten_.neg.default)
def neg(ctx: Ctx, x: ir.Value) -> ir.Value:
    """neg(Tensor self) -> Tensor"""
    return ctx.op.Neg(x)


def _compare(onnx_op: str, *, negate: bool = False):
    def translate(ctx: Ctx, x: ir.Value, other: ir.Value | float) -> ir.Value:
        x, other = promote(ctx, compute_dtype(ctx, 0, 1), x, other)
        out = getattr(ctx.op, onnx_op)(x, other)
        return ctx.op.Not(out) if negate else out

    translate.__doc__ = f"{onnx_op} comparison (Tensor self, Tensor|Scalar other) -> Tensor"
    return translate


aten(aten_.gt.Tensor, aten_.gt.Scalar)(_compare("Greater"))
aten(aten_.lt.Tensor, aten_.lt.Scalar)(_compare("Less"))
aten(aten_.ge.Tensor, aten_.ge.Scalar)(_compare("GreaterOrEqual"))
aten(aten_.le.Tensor, aten_.le.Scalar)(_compare("LessOrEqual"))
aten(aten_.eq.Tensor, aten_.eq.Scalar)(_compare("Equal"))
aten(aten_.ne.Tensor, aten_.ne.Scalar)(_compare("Equal", negate=True))
