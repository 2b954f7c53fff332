"""More ``SymInt``/``SymFloat``/``SymBool`` arithmetic (see symbolic.py): pow, abs, boolean logic,
``sym_ite``/``sym_not``/``sym_sum``, math functions, and the stride/offset queries of a tensor.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence

import onnx_ir as ir
import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from onnxport.translate.builder import Ctx
from onnxport.translate.ops._common import arg_meta
from onnxport.translate.ops.symbolic import same_type, scalar_value
from onnxport.translate.registry import aten, ops

aten_ = ops.aten
INT64 = ir.DataType.INT64
FLOAT = ir.DataType.FLOAT
Scalar = ir.Value | int | float | bool


@aten(operator.pow)
def pow_(ctx: Ctx, a: Scalar, b: Scalar) -> ir.Value:
    """SymInt/SymFloat ** (int ** non-negative int stays int, like Python)"""
    a, b = same_type(ctx, a, b)
    if ctx.out_dtype() != INT64:
        a, b = ctx.cast(a, FLOAT), ctx.cast(b, FLOAT)
    return ctx.cast(ctx.op.Pow(a, b), ctx.out_dtype() or a.dtype)


@aten(operator.abs)
def abs_(ctx: Ctx, a: Scalar) -> ir.Value:
    """SymInt abs()"""
    return ctx.op.Abs(scalar_value(ctx, a))


def _logic(onnx_op: str):
    def translate(ctx: Ctx, a: Scalar, b: Scalar) -> ir.Value:
        a, b = (ctx.cast(scalar_value(ctx, v), ir.DataType.BOOL) for v in (a, b))
        return getattr(ctx.op, onnx_op)(a, b)

    translate.__doc__ = f"SymBool {onnx_op}"
    return translate


aten(operator.and_)(_logic("And"))
aten(operator.or_)(_logic("Or"))
aten(operator.xor)(_logic("Xor"))


@aten(torch.sym_not, operator.not_)
def sym_not(ctx: Ctx, a: Scalar) -> ir.Value:
    """sym_not(SymBool) -> SymBool"""
    return ctx.op.Not(ctx.cast(scalar_value(ctx, a), ir.DataType.BOOL))


@aten(torch.sym_ite)
def sym_ite(ctx: Ctx, cond: Scalar, then: Scalar, other: Scalar) -> ir.Value:
    """sym_ite(SymBool b, t, f): t if b else f"""
    then, other = same_type(ctx, then, other)
    return ctx.op.Where(ctx.cast(scalar_value(ctx, cond), ir.DataType.BOOL), then, other)


@aten(torch.sym_sum)
def sym_sum(ctx: Ctx, items: Sequence[Scalar]) -> ir.Value:
    """sym_sum(Sequence[SymInt]) -> SymInt"""
    total: ir.Value = scalar_value(ctx, 0)
    for item in items:
        total, item = same_type(ctx, total, item)
        total = ctx.op.Add(total, item)
    return total


def _math(onnx_op: str):
    def translate(ctx: Ctx, a: Scalar) -> ir.Value:
        return getattr(ctx.op, onnx_op)(ctx.cast(scalar_value(ctx, a), FLOAT))

    translate.__doc__ = f"math function of a SymInt/SymFloat -> SymFloat ({onnx_op})"
    return translate


aten(torch._sym_sqrt)(_math("Sqrt"))  # also torch.sym_sqrt (the same function)
aten(torch._sym_cos)(_math("Cos"))
aten(torch._sym_sin)(_math("Sin"))
aten(torch._sym_tan)(_math("Tan"))
aten(torch._sym_acos)(_math("Acos"))
aten(torch._sym_asin)(_math("Asin"))
aten(torch._sym_atan)(_math("Atan"))
aten(torch._sym_cosh)(_math("Cosh"))
aten(torch._sym_sinh)(_math("Sinh"))
aten(torch._sym_tanh)(_math("Tanh"))


@aten(torch._sym_log2)
def sym_log2(ctx: Ctx, a: Scalar) -> ir.Value:
    """math.log2 of a SymInt/SymFloat -> SymFloat"""
    return ctx.op.Div(ctx.op.Log(ctx.cast(scalar_value(ctx, a), FLOAT)), ctx.const(0.6931471805599453, FLOAT))


@aten(aten_.sym_stride.int)
def sym_stride(ctx: Ctx, x: ir.Value, dim: int) -> ir.Value:
    """sym_stride.int(Tensor self, int dim) -> SymInt"""
    # ONNX tensors are contiguous: the stride is the product of the later sizes (1 past the last dim)
    r = len(x.shape)
    dim = dim + r if dim < 0 else dim
    meta = arg_meta(ctx, 0)
    if isinstance(meta, torch.Tensor) and not statically_known_true(meta.stride(dim) == math.prod(meta.shape[dim + 1 :])):
        raise ctx.unsupported(
            f"stride({dim}) of a non-contiguous tensor (strides {meta.stride()}), which has no ONNX meaning",
            fix="call .contiguous() before reading .stride()",
        )
    if dim == r - 1:
        return ctx.const(1, INT64)
    return ctx.op.ReduceProd(ctx.op.Shape(x, start=dim + 1), keepdims=0)


@aten(aten_.sym_storage_offset.default)
def sym_storage_offset(ctx: Ctx, x: ir.Value) -> ir.Value:
    """sym_storage_offset(Tensor self) -> SymInt"""
    return ctx.const(0, INT64)  # every ONNX tensor starts its own storage
