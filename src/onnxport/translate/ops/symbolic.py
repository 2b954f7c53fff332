"""Symbolic sizes: ``SymInt`` arithmetic becomes int64 scalar arithmetic in the graph."""

from __future__ import annotations

import math
import operator

import onnx_ir as ir
import torch

from onnxport.translate.builder import Ctx
from onnxport.translate.registry import aten, ops

aten_ = ops.aten
INT64 = ir.DataType.INT64


def scalar_value(ctx: Ctx, x: ir.Value | int | float | bool) -> ir.Value:
    if isinstance(x, ir.Value):
        return x
    if isinstance(x, bool):
        return ctx.const(x, ir.DataType.BOOL)
    return ctx.const(x, INT64 if isinstance(x, int) else ir.DataType.FLOAT)


def same_type(ctx: Ctx, a: ir.Value | int | float, b: ir.Value | int | float) -> tuple[ir.Value, ir.Value]:
    a, b = scalar_value(ctx, a), scalar_value(ctx, b)
    if a.dtype != b.dtype:
        floats = ir.DataType.FLOAT
        a, b = ctx.cast(a, floats), ctx.cast(b, floats)
    return a, b


@aten(aten_.sym_size.int)
def sym_size(ctx: Ctx, x: ir.Value, dim: int) -> ir.Value:
    """sym_size.int(Tensor self, int dim) -> SymInt"""
    dim = dim + len(x.shape) if dim < 0 else dim
    size = ctx.op.Shape(x, start=dim, end=dim + 1)
    return ctx.op.Squeeze(size, ctx.const([0], INT64))


@aten(aten_._local_scalar_dense.default)
def _local_scalar_dense(ctx: Ctx, x: ir.Value) -> ir.Value:
    """_local_scalar_dense(Tensor self) -> Scalar"""
    # ``.item()``: the value becomes an unbacked symbol (u0) in torch, a 0-d value here
    scalar = x if x.shape is not None and len(x.shape) == 0 else ctx.op.Reshape(x, ctx.const([], INT64))
    return ctx.cast(scalar, ctx.out_dtype() or scalar.dtype)


@aten(aten_.sym_numel.default)
def sym_numel(ctx: Ctx, x: ir.Value) -> ir.Value:
    """sym_numel(Tensor self) -> SymInt"""
    return ctx.op.Size(x)


def _binary(onnx_op: str):
    def translate(ctx: Ctx, a: ir.Value | int, b: ir.Value | int) -> ir.Value:
        a, b = same_type(ctx, a, b)
        return getattr(ctx.op, onnx_op)(a, b)

    translate.__doc__ = f"SymInt {onnx_op}"
    return translate


aten(operator.add)(_binary("Add"))
aten(operator.sub)(_binary("Sub"))
aten(operator.mul)(_binary("Mul"))
aten(operator.eq)(_binary("Equal"))
aten(operator.lt)(_binary("Less"))
aten(operator.le)(_binary("LessOrEqual"))
aten(operator.gt)(_binary("Greater"))
aten(operator.ge)(_binary("GreaterOrEqual"))
aten(torch.sym_max)(_binary("Max"))
aten(torch.sym_min)(_binary("Min"))


@aten(operator.ne)
def ne(ctx: Ctx, a: ir.Value | int, b: ir.Value | int) -> ir.Value:
    """SymInt !="""
    a, b = same_type(ctx, a, b)
    return ctx.op.Not(ctx.op.Equal(a, b))


@aten(operator.floordiv)
def floordiv(ctx: Ctx, a: ir.Value | int, b: ir.Value | int) -> ir.Value:
    """SymInt // (floor division, also for negative operands)"""
    a, b = same_type(ctx, a, b)
    if a.dtype != INT64:
        return ctx.op.Floor(ctx.op.Div(a, b))
    quotient = ctx.op.Div(a, b)  # truncates toward zero
    inexact = ctx.op.Not(ctx.op.Equal(ctx.op.Mul(quotient, b), a))
    signs_differ = ctx.op.Less(ctx.op.Mul(a, b), ctx.const(0, INT64))
    adjust = ctx.op.Cast(ctx.op.And(inexact, signs_differ), to=int(INT64))
    return ctx.op.Sub(quotient, adjust)


@aten(operator.mod)
def mod(ctx: Ctx, a: ir.Value | int, b: ir.Value | int) -> ir.Value:
    """SymInt % (sign of the divisor, like Python)"""
    a, b = same_type(ctx, a, b)
    return ctx.op.Mod(a, b, fmod=0 if a.dtype == INT64 else 1)


@aten(operator.truediv)
def truediv(ctx: Ctx, a: ir.Value | int, b: ir.Value | int) -> ir.Value:
    """SymInt / -> SymFloat"""
    floats = ir.DataType.FLOAT
    return ctx.op.Div(ctx.cast(scalar_value(ctx, a), floats), ctx.cast(scalar_value(ctx, b), floats))


@aten(operator.neg)
def neg(ctx: Ctx, a: ir.Value) -> ir.Value:
    """SymInt unary -"""
    return ctx.op.Neg(a)


@aten(torch.sym_float)
def sym_float(ctx: Ctx, a: ir.Value | int) -> ir.Value:
    """sym_float(SymInt) -> SymFloat"""
    return ctx.cast(scalar_value(ctx, a), ir.DataType.FLOAT)


@aten(torch.sym_int, math.floor, math.trunc)
def sym_int(ctx: Ctx, a: ir.Value | float) -> ir.Value:
    """sym_int(SymFloat) -> SymInt (truncation toward zero)"""
    a = scalar_value(ctx, a)
    if a.dtype == INT64:
        return a
    return ctx.cast(ctx.op.Floor(a) if ctx.node is not None and ctx.node.target is math.floor else a, INT64)


@aten(math.ceil)
def ceil(ctx: Ctx, a: ir.Value | float) -> ir.Value:
    """math.ceil(SymFloat) -> SymInt"""
    a = scalar_value(ctx, a)
    return a if a.dtype == INT64 else ctx.cast(ctx.op.Ceil(a), INT64)


@aten(
    aten_._assert_scalar.default,
    aten_.sym_constrain_range_for_size.default,
    aten_.sym_constrain_range.default,
    aten_._assert_tensor_metadata.default,
    aten_._assert_async.default,
    aten_._assert_async.msg,
)
def assertion(ctx: Ctx, *args: object, **kwargs: object) -> None:
    """Runtime checks that torch.export already proved or recorded as range constraints: no ONNX node.
    ``_assert_async`` checks a tensor's value (``one_hot``'s index range): ONNX cannot raise, so the model
    computes what eager computes whenever the check holds."""
    return None
