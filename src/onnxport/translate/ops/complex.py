"""Complex tensors. In the graph a complex tensor is a real one with a trailing dim of 2 (real, imaginary part),
the layout of ONNX DFT and STFT: onnxruntime has hardly any complex kernels.

The driver sends every node that reads or makes a complex tensor to ``complex_translator``, never to a
real translator unchanged. Ops written for complex values register with ``@complex_aten`` (in the one
registry, ``onnxport.translate.registry``, beside ``@aten``); ops that act on the real and imaginary parts
alike reuse their real translator through a lift (``ops/_complex.py``, with the layout helpers).
"""

from __future__ import annotations

import math
from typing import Any

import onnx_ir as ir
import torch

from onnxport.translate.builder import Ctx
from onnxport.translate.ops._common import FLOAT_TYPES
from onnxport.translate.ops._complex import (
    abs2,
    arg_vals,
    conjugate,
    is_complex,
    join,
    keep_part,
    lift_for,
    operands,
    part,
    proxy_node,
    run_real,
    times_i,
    to_complex,
)
from onnxport.translate.ops.elementwise import atan2
from onnxport.translate.registry import COMPLEX, Translator, aten, complex_aten, lookup, ops

__all__ = ["complex_translator", "is_complex", "join", "part", "to_complex", "touches_complex"]

aten_ = ops.aten
INT64 = ir.DataType.INT64
def touches_complex(node: torch.fx.Node) -> bool:
    """Whether an ATen node reads or makes a complex tensor (or takes a complex Python number)."""
    if not isinstance(node.target, torch._ops.OpOverload):
        return False  # higher-order ops and symbolic arithmetic carry values through whatever their layout
    vals = [node.meta.get("val"), *(n.meta.get("val") for n in node.all_input_nodes)]
    leaves = torch.utils._pytree.tree_leaves([vals, node.args, node.kwargs])
    return any(is_complex(v) for v in leaves)


def complex_translator(target: Any) -> Translator | None:
    """The translator of ``target`` for a node with complex tensors: written for them, or a lift, or None."""
    fn = COMPLEX.get(target)
    if fn is not None:
        return fn
    lift = lift_for(target)
    if lift is None:
        return None

    def translate(ctx: Ctx, *args: Any, **kwargs: Any) -> Any:
        return lift(ctx, target, args, kwargs)  # target: the table's key (the functional op of an in-place one)

    translate.__doc__ = f"{target}: the real translator, lifted to complex values ({lift.__name__})"
    return translate


# -- conversions -----------------------------------------------------------------------------------------


@complex_aten(aten_.view_as_complex.default, aten_.view_as_real.default)
def view_as_complex(ctx: Ctx, x: ir.Value) -> ir.Value:
    """view_as_complex(Tensor(a) self) -> Tensor(a) (and view_as_real): the layout already is the pair"""
    return x


@complex_aten(aten_.complex.default)
def complex_(ctx: Ctx, real: ir.Value, imag: ir.Value) -> ir.Value:
    """complex(Tensor real, Tensor imag) -> Tensor"""
    return join(ctx, real, imag)


@complex_aten(aten_.polar.default)
def polar(ctx: Ctx, abs: ir.Value, angle: ir.Value) -> ir.Value:
    """polar(Tensor abs, Tensor angle) -> Tensor"""
    return join(ctx, ctx.op.Mul(abs, ctx.op.Cos(angle)), ctx.op.Mul(abs, ctx.op.Sin(angle)))


@complex_aten(aten_.real.default)
def real(ctx: Ctx, z: ir.Value) -> ir.Value:
    """real(Tensor(a) self) -> Tensor(a)"""
    return part(ctx, z, 0)


@complex_aten(aten_.imag.default)
def imag(ctx: Ctx, z: ir.Value) -> ir.Value:
    """imag(Tensor(a) self) -> Tensor(a)"""
    return part(ctx, z, 1)


@complex_aten(aten_._to_copy.default, aten_.to.dtype, aten_.to.dtype_layout, aten_.to.other, aten_.to.device,
              aten_.type_as.default)
def to(ctx: Ctx, x: ir.Value, *_: Any, **__: Any) -> ir.Value:
    """_to_copy(Tensor self, *, ScalarType? dtype=None, ...) -> Tensor"""
    source, target = arg_vals(ctx)[0], ctx.node.meta.get("val")
    if is_complex(target):
        return to_complex(ctx, x, ctx.out_dtype(), complex_=is_complex(source))
    return ctx.cast(part(ctx, x, 0), ctx.out_dtype())  # torch drops the imaginary part (and warns)


# -- conjugation and angles --------------------------------------------------------------------------------


@complex_aten(aten_.conj.default, aten_._conj.default, aten_.conj_physical.default, aten_._conj_physical.default,
              aten_._conj_copy.default)
def conj(ctx: Ctx, z: ir.Value) -> ir.Value:
    """conj_physical(Tensor self) -> Tensor"""
    return conjugate(ctx, z)


@complex_aten(aten_.resolve_conj.default, aten_.resolve_neg.default)
@aten(aten_.conj.default, aten_._conj.default, aten_.conj_physical.default, aten_._conj_physical.default,
      aten_._conj_copy.default, aten_.resolve_conj.default, aten_.resolve_neg.default, aten_.real.default)
def resolve_conj(ctx: Ctx, x: ir.Value) -> ir.Value:
    """resolve_conj(Tensor(a) self) -> Tensor(a): values carry no lazy conjugation; a real tensor is its own conj"""
    return x


@complex_aten(aten_.mH.default, aten_.matrix_H.default, aten_.adjoint.default)
def mH(ctx: Ctx, z: ir.Value) -> ir.Value:
    """mH(Tensor(a) self) -> Tensor(a): the conjugate transpose of the last two dims"""
    r = len(z.shape) - 1
    perm = list(range(r + 1))
    perm[r - 2], perm[r - 1] = r - 1, r - 2
    return conjugate(ctx, ctx.op.Transpose(z, perm=perm))


@aten(aten_.mH.default, aten_.matrix_H.default)
def mH_real(ctx: Ctx, x: ir.Value) -> ir.Value:
    """mH(Tensor(a) self) -> Tensor(a): of a real tensor, the transpose of the last two dims"""
    return lookup(aten_.mT.default)(ctx, x)


@complex_aten(aten_.angle.default)
def angle(ctx: Ctx, z: ir.Value) -> ir.Value:
    """angle(Tensor self) -> Tensor"""
    return atan2(ctx, part(ctx, z, 1), part(ctx, z, 0))


@aten(aten_.angle.default)
def angle_real(ctx: Ctx, x: ir.Value) -> ir.Value:
    """angle(Tensor self) -> Tensor: of a real tensor, pi below zero, else 0 (NaN stays NaN)"""
    x = ctx.cast(x, ctx.out_dtype())
    zero = ctx.const(0, like=x)
    out = ctx.op.Where(ctx.op.Less(x, zero), ctx.const(math.pi, like=x), zero)
    return ctx.op.Where(ctx.op.IsNaN(x), x, out) if x.dtype in FLOAT_TYPES else out


@complex_aten(aten_.abs.default)
def abs_(ctx: Ctx, z: ir.Value) -> ir.Value:
    """abs(Tensor self) -> Tensor"""
    return ctx.op.Sqrt(abs2(ctx, z, keepdims=False))


@complex_aten(aten_.linalg_vector_norm.default)
def linalg_vector_norm(ctx: Ctx, z: ir.Value, *args: Any, **kwargs: Any) -> ir.Value:
    """linalg_vector_norm(Tensor self, Scalar ord=2, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None)
    -> Tensor: the real norm of |z|"""
    size = abs_(ctx, z)
    size.shape = ir.Shape(list(z.shape)[:-1])
    proxy = proxy_node(ctx.node, lambda v: v.abs())
    return run_real(ctx, proxy, lambda fx, v: size if v is z else v, (z, *args), kwargs)


@complex_aten(aten_.sym_numel.default)
def sym_numel(ctx: Ctx, z: ir.Value) -> ir.Value:
    """sym_numel(Tensor self) -> SymInt: half the pairs' size"""
    return ctx.op.Div(ctx.op.Size(z), ctx.const(2, INT64))


@complex_aten(aten_.sgn.default)
def sgn(ctx: Ctx, z: ir.Value) -> ir.Value:
    """sgn(Tensor self) -> Tensor: z / |z|, 0 at 0"""
    size = ctx.op.Sqrt(abs2(ctx, z, keepdims=True))
    zero = ctx.const(0, like=size)
    return ctx.op.Where(ctx.op.Equal(size, zero), zero, ctx.op.Div(z, size))


# -- arithmetic --------------------------------------------------------------------------------------------


def _sum(ctx: Ctx, op: str, x: Any, other: Any, alpha: Any) -> ir.Value:
    dtype, cx, co = operands(ctx, x, other)
    x, other = to_complex(ctx, x, dtype, complex_=cx), to_complex(ctx, other, dtype, complex_=co)
    if alpha != 1:
        other = _product(ctx, other, alpha, dtype, True, isinstance(alpha, complex))
    return getattr(ctx.op, op)(x, other)


@complex_aten(aten_.add.Tensor, aten_.add.Scalar)
def add(ctx: Ctx, x: Any, other: Any, *, alpha: Any = 1) -> ir.Value:
    """add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"""
    return _sum(ctx, "Add", x, other, alpha)


@complex_aten(aten_.sub.Tensor, aten_.sub.Scalar)
def sub(ctx: Ctx, x: Any, other: Any, *, alpha: Any = 1) -> ir.Value:
    """sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"""
    return _sum(ctx, "Sub", x, other, alpha)


@complex_aten(aten_.rsub.Tensor, aten_.rsub.Scalar)
def rsub(ctx: Ctx, x: Any, other: Any, *, alpha: Any = 1) -> ir.Value:
    """rsub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"""
    dtype, cx, co = operands(ctx, x, other)
    x, other = to_complex(ctx, x, dtype, complex_=cx), to_complex(ctx, other, dtype, complex_=co)
    if alpha != 1:
        x = _product(ctx, x, alpha, dtype, True, isinstance(alpha, complex))
    return ctx.op.Sub(other, x)


def _product(ctx: Ctx, x: Any, other: Any, dtype: ir.DataType, cx: bool, co: bool) -> ir.Value:
    """``x * other``, at least one of them complex: a real factor scales both parts."""
    if not cx:
        x, other, co = other, x, cx
    x = to_complex(ctx, x, dtype, complex_=True)
    if not co:
        scale = ctx.as_value(other, dtype=dtype)
        if isinstance(other, ir.Value) and scale.shape:
            scale = ctx.op.Unsqueeze(scale, ctx.const([-1], INT64))
        return ctx.op.Mul(x, scale)
    other = to_complex(ctx, other, dtype, complex_=True)
    # (a + bi)(c + di) = (a, b) * c + (-b, a) * d
    return ctx.op.Add(ctx.op.Mul(x, keep_part(ctx, other, 0)), ctx.op.Mul(times_i(ctx, x), keep_part(ctx, other, 1)))


@complex_aten(aten_.mul.Tensor, aten_.mul.Scalar)
def mul(ctx: Ctx, x: Any, other: Any) -> ir.Value:
    """mul.Tensor(Tensor self, Tensor other) -> Tensor"""
    return _product(ctx, x, other, *operands(ctx, x, other))


def _reciprocal(ctx: Ctx, z: ir.Value) -> ir.Value:
    """``1 / z``, scaled by max(|re|, |im|) first so that |z|^2 neither overflows nor underflows."""
    scale = ctx.op.ReduceMax(ctx.op.Abs(z), ctx.const([-1], INT64), keepdims=1)
    scaled = ctx.op.Div(z, scale)
    return ctx.op.Div(conjugate(ctx, scaled), ctx.op.Mul(abs2(ctx, scaled, keepdims=True), scale))


@complex_aten(aten_.div.Tensor, aten_.div.Scalar, aten_.true_divide.Tensor, aten_.true_divide.Scalar)
def div(ctx: Ctx, x: Any, other: Any) -> ir.Value:
    """div.Tensor(Tensor self, Tensor other) -> Tensor"""
    dtype, cx, co = operands(ctx, x, other)
    if not co:  # by a real divisor: each part
        x = to_complex(ctx, x, dtype, complex_=cx)
        other = ctx.as_value(other, dtype=dtype)
        return ctx.op.Div(x, ctx.op.Unsqueeze(other, ctx.const([-1], INT64)) if other.shape else other)
    if not isinstance(other, ir.Value):
        return _product(ctx, x, 1 / complex(other), dtype, cx, True)
    return _product(ctx, x, _reciprocal(ctx, ctx.cast(other, dtype)), dtype, cx, True)


@complex_aten(aten_.reciprocal.default)
def reciprocal(ctx: Ctx, z: ir.Value) -> ir.Value:
    """reciprocal(Tensor self) -> Tensor"""
    return _reciprocal(ctx, z)


@complex_aten(aten_.neg.default)
def neg(ctx: Ctx, z: ir.Value) -> ir.Value:
    """neg(Tensor self) -> Tensor"""
    return ctx.op.Neg(z)


@complex_aten(aten_.square.default)
def square(ctx: Ctx, z: ir.Value) -> ir.Value:
    """square(Tensor self) -> Tensor"""
    return _product(ctx, z, z, z.dtype, True, True)


@complex_aten(aten_.exp.default)
def exp(ctx: Ctx, z: ir.Value) -> ir.Value:
    """exp(Tensor self) -> Tensor: e^re (cos im, sin im)"""
    size, turn = ctx.op.Exp(part(ctx, z, 0)), part(ctx, z, 1)
    return join(ctx, ctx.op.Mul(size, ctx.op.Cos(turn)), ctx.op.Mul(size, ctx.op.Sin(turn)))


@complex_aten(aten_.log.default)
def log(ctx: Ctx, z: ir.Value) -> ir.Value:
    """log(Tensor self) -> Tensor: (log |z|, angle z)"""
    return join(ctx, ctx.op.Log(abs_(ctx, z)), angle(ctx, z))


