"""Floating-point manipulation: copysign, signbit, ldexp, frexp, nextafter, hypot, fmax, fmin,
logcumsumexp, and the identity positive.

ONNX has no bit casts before opset 26, so sign bits and exponents are found arithmetically: a zero is
negative where its reciprocal is -inf (the sign of a NaN is not visible, so copysign and signbit treat
every NaN as positive), and exponents come from a logarithm corrected against exact powers of two.
"""

from __future__ import annotations

import math

import onnx_ir as ir

from onnxport.translate.builder import Ctx
from onnxport.translate.ops._common import FLOAT_TYPES, compute_dtype, loop, norm_axis, rank
from onnxport.translate.ops._special import F32, I64, c, compute_type, select
from onnxport.translate.registry import aten, ops

aten_ = ops.aten

# (significand bits, smallest normal exponent, largest finite value) of each float type
_FORMAT = {
    ir.DataType.FLOAT16: (11, -14, 65504.0),
    ir.DataType.BFLOAT16: (8, -126, 3.3895313892515355e38),
    ir.DataType.FLOAT: (24, -126, 3.4028234663852886e38),
    ir.DataType.DOUBLE: (53, -1022, 1.7976931348623157e308),
}


@aten(aten_.positive.default)
def positive(ctx: Ctx, x: ir.Value) -> ir.Value:
    """positive(Tensor(a) self) -> Tensor(a)"""
    return x


def _negative(ctx: Ctx, x: ir.Value) -> ir.Value:
    """Whether ``x`` has its sign bit set: below zero, or a zero whose reciprocal is -inf."""
    zero = c(ctx, 0.0, x)
    if x.dtype not in FLOAT_TYPES:
        return ctx.op.Less(x, zero)
    negative_zero = ctx.op.And(ctx.op.Equal(x, zero), ctx.op.Less(ctx.op.Reciprocal(x), zero))
    return ctx.op.Or(ctx.op.Less(x, zero), negative_zero)


@aten(aten_.signbit.default)
def signbit(ctx: Ctx, x: ir.Value) -> ir.Value:
    """signbit(Tensor self) -> Tensor"""
    if x.dtype == ir.DataType.BOOL:
        return ctx.op.Xor(x, x)  # all false, in x's shape
    return _negative(ctx, x)


@aten(aten_.copysign.Tensor, aten_.copysign.Scalar)
def copysign(ctx: Ctx, x: ir.Value, other: ir.Value | float) -> ir.Value:
    """copysign.Tensor(Tensor self, Tensor other) -> Tensor"""
    out = ctx.out_dtype()
    work = compute_type(out)
    x, other = ctx.cast(x, work), ctx.as_value(other, dtype=work)
    magnitude = ctx.op.Abs(x)
    return ctx.cast(ctx.op.Where(_negative(ctx, other), ctx.op.Neg(magnitude), magnitude), out)


@aten(aten_.ldexp.Tensor)
def ldexp(ctx: Ctx, x: ir.Value, other: ir.Value) -> ir.Value:
    """ldexp.Tensor(Tensor self, Tensor other) -> Tensor

    torch's ``self * 2 ** other``; float16 and bfloat16 multiply in float32, the power rounded to the
    type of a floating ``other`` first, as eager rounds it (so it overflows where eager's does).
    """
    out = ctx.out_dtype()
    work = compute_type(out)
    power_dtype = other.dtype if other.dtype in FLOAT_TYPES else work
    x, other = ctx.cast(x, work), ctx.cast(other, work)
    power = ctx.cast(ctx.cast(ctx.op.Pow(c(ctx, 2.0, x), other), power_dtype), work)
    return ctx.cast(ctx.op.Mul(x, power), out)


@aten(aten_.hypot.default)
def hypot(ctx: Ctx, x: ir.Value, other: ir.Value) -> ir.Value:
    """hypot(Tensor self, Tensor other) -> Tensor (scaled by the larger magnitude, so it cannot overflow early)"""
    out = ctx.out_dtype()
    a, b = ctx.op.Abs(ctx.cast(x, compute_type(out))), ctx.op.Abs(ctx.cast(other, compute_type(out)))
    zero = c(ctx, 0.0, a)
    big = ctx.op.Where(ctx.op.Greater(a, b), a, b)
    small = ctx.op.Where(ctx.op.Greater(a, b), b, a)
    ratio = ctx.op.Div(small, big)
    result = ctx.op.Mul(big, ctx.op.Sqrt(ctx.op.Add(c(ctx, 1.0, a), ctx.op.Mul(ratio, ratio))))
    result = select(ctx, result, (ctx.op.Or(ctx.op.IsInf(a), ctx.op.IsInf(b)), math.inf),
                    (ctx.op.Or(ctx.op.IsNaN(a), ctx.op.IsNaN(b)), math.nan), (ctx.op.Equal(big, zero), 0.0))
    return ctx.cast(result, out)


def _fminmax(ctx: Ctx, x: ir.Value, other: ir.Value, greater: bool) -> ir.Value:
    out = compute_dtype(ctx, 0, 1)
    dtype = compute_type(out)
    x, other = ctx.cast(x, dtype), ctx.cast(other, dtype)
    better = ctx.op.Greater(other, x) if greater else ctx.op.Less(other, x)
    result = ctx.op.Where(better, other, x)  # ties keep self, as eager does for -0.0 and 0.0
    if dtype in FLOAT_TYPES:
        result = ctx.op.Where(ctx.op.IsNaN(x), other, ctx.op.Where(ctx.op.IsNaN(other), x, result))
    return ctx.cast(result, out)


@aten(aten_.fmax.default)
def fmax(ctx: Ctx, x: ir.Value, other: ir.Value) -> ir.Value:
    """fmax(Tensor self, Tensor other) -> Tensor (a NaN loses to a number)"""
    return _fminmax(ctx, x, other, greater=True)


@aten(aten_.fmin.default)
def fmin(ctx: Ctx, x: ir.Value, other: ir.Value) -> ir.Value:
    """fmin(Tensor self, Tensor other) -> Tensor (a NaN loses to a number)"""
    return _fminmax(ctx, x, other, greater=False)


def _exponent(ctx: Ctx, ax: ir.Value) -> ir.Value:
    """``floor(log2(ax))`` for finite ``ax > 0``, exact: the logarithm's guess moved by one where a power of two
    disagrees."""
    two = c(ctx, 2.0, ax)
    e = ctx.op.Floor(ctx.op.Div(ctx.op.Log(ax), c(ctx, math.log(2), ax)))
    e = ctx.op.Where(ctx.op.Greater(_pow2(ctx, e), ax), ctx.op.Sub(e, c(ctx, 1.0, ax)), e)
    return ctx.op.Where(ctx.op.LessOrEqual(ctx.op.Mul(two, _pow2(ctx, e)), ax), ctx.op.Add(e, c(ctx, 1.0, ax)), e)


def _pow2_parts(ctx: Ctx, e: ir.Value) -> tuple[ir.Value, ir.Value]:
    """Two powers of two whose product is ``2 ** e`` (integral ``e``), neither of which overflows alone."""
    half = ctx.op.Floor(ctx.op.Div(e, c(ctx, 2.0, e)))
    two = c(ctx, 2.0, e)
    return ctx.op.Pow(two, half), ctx.op.Pow(two, ctx.op.Sub(e, half))


def _pow2(ctx: Ctx, e: ir.Value) -> ir.Value:
    """``2 ** e`` for integral ``e`` (exact, subnormal results included)."""
    return ctx.op.Mul(*_pow2_parts(ctx, e))


@aten(aten_.frexp.Tensor)
def frexp(ctx: Ctx, x: ir.Value) -> tuple[ir.Value, ir.Value]:
    """frexp.Tensor(Tensor self) -> (Tensor mantissa, Tensor exponent)

    float16 and bfloat16 are decomposed in float32 (exactly: every value is representable there).
    """
    out = ctx.out_dtype(0)
    x = ctx.cast(x, compute_type(out))
    ax = ctx.op.Abs(x)
    zero = c(ctx, 0.0, x)
    special = ctx.op.Or(ctx.op.Or(ctx.op.Equal(ax, zero), ctx.op.IsInf(ax)), ctx.op.IsNaN(ax))
    safe = ctx.op.Where(special, c(ctx, 1.0, x), ax)
    e = ctx.op.Add(_exponent(ctx, safe), c(ctx, 1.0, x))
    first, second = _pow2_parts(ctx, e)
    mantissa = ctx.op.Div(ctx.op.Div(x, first), second)
    mantissa = ctx.op.Where(special, x, mantissa)
    exponent = ctx.op.Where(special, zero, e)
    return ctx.cast(mantissa, out), ctx.cast(exponent, ctx.out_dtype(1))


@aten(aten_.nextafter.default)
def nextafter(ctx: Ctx, x: ir.Value, other: ir.Value) -> ir.Value:
    """nextafter(Tensor self, Tensor other) -> Tensor

    The neighbour is x plus or minus one unit in the last place, found from x's exponent; float16 and
    bfloat16 step with their own precision, computed exactly in float32.
    """
    out = ctx.out_dtype()
    digits, min_exp, largest = _FORMAT[out]
    x, y = ctx.cast(x, compute_type(out)), ctx.cast(other, compute_type(out))
    zero, one = c(ctx, 0.0, x), c(ctx, 1.0, x)
    ax = ctx.op.Abs(x)
    finite = ctx.op.Not(ctx.op.Or(ctx.op.IsInf(ax), ctx.op.IsNaN(ax)))
    safe = ctx.op.Where(ctx.op.And(finite, ctx.op.Greater(ax, zero)), ax, one)
    e = ctx.op.Max(_exponent(ctx, safe), c(ctx, float(min_exp), x))
    ulp = _pow2(ctx, ctx.op.Sub(e, c(ctx, float(digits - 1), x)))
    # below an exact power of two (a normal one), the spacing halves
    at_power = ctx.op.And(ctx.op.Equal(safe, _pow2(ctx, e)), ctx.op.Greater(e, c(ctx, float(min_exp), x)))
    ulp_below = ctx.op.Where(at_power, ctx.op.Div(ulp, c(ctx, 2.0, x)), ulp)
    away = ctx.op.Not(ctx.op.Xor(ctx.op.Greater(y, x), ctx.op.Greater(x, zero)))  # moving away from zero
    magnitude = ctx.op.Where(away, ctx.op.Add(ax, ulp), ctx.op.Sub(ax, ulp_below))
    step = ctx.op.Where(ctx.op.Less(x, zero), ctx.op.Neg(magnitude), magnitude)
    smallest = c(ctx, 2.0 ** (min_exp - digits + 1), x)
    from_zero = ctx.op.Where(ctx.op.Greater(y, zero), smallest, ctx.op.Neg(smallest))
    from_inf = ctx.op.Where(ctx.op.Greater(x, zero), c(ctx, largest, x), c(ctx, -largest, x))
    result = select(ctx, step, (ctx.op.Or(ctx.op.IsNaN(x), ctx.op.IsNaN(y)), math.nan), (ctx.op.Equal(x, y), y),
                    (ctx.op.Equal(x, zero), from_zero), (ctx.op.IsInf(x), from_inf))
    return ctx.cast(result, out)


def _log_add_exp(ctx: Ctx, a: ir.Value, b: ir.Value) -> ir.Value:
    """``log(exp(a) + exp(b))`` as torch combines it: from the larger term; equal infinities stay as they are."""
    op = ctx.op
    hi = op.Where(op.Greater(a, b), a, b)
    lo = op.Where(op.Greater(a, b), b, a)
    both = op.Add(hi, op.Log(op.Add(c(ctx, 1.0, hi), op.Exp(op.Sub(lo, hi)))))
    return op.Where(op.And(op.Equal(lo, hi), op.IsInf(lo)), a, both)


def _shifted(ctx: Ctx, y: ir.Value, k: ir.Value, axis: int) -> ir.Value:
    """``y`` moved ``k`` places along ``axis``, -inf flowing in (a 1-D int64 ``k``)."""
    pads = ctx.op.Concat(k, ctx.const([0], I64), axis=0)
    padded = ctx.op.Pad(y, pads, c(ctx, -math.inf, y), ctx.const([axis], I64), mode="constant")
    return ctx.op.Slice(padded, ctx.const([0], I64), ctx.op.Neg(k), ctx.const([axis], I64))


@aten(aten_.logcumsumexp.default)
def logcumsumexp(ctx: Ctx, x: ir.Value, dim: int) -> ir.Value:
    """logcumsumexp(Tensor self, int dim) -> Tensor

    A parallel prefix (Hillis-Steele): after step j each element holds the log-sum-exp of the 2^j elements
    ending at it, so ceil(log2(n)) steps of a stable ``log(exp(a) + exp(b))`` cover the axis. A static length
    unrolls the steps, a symbolic one runs them in a ``Loop``. float16 and bfloat16 are computed in float32.
    """
    out = ctx.out_dtype()
    x = ctx.cast(x, compute_type(out))
    r = rank(x)
    if r == 0:
        return ctx.cast(x, out)
    axis = norm_axis(dim, r)
    length = x.shape[axis] if x.shape is not None else None
    if isinstance(length, int):
        k = 1
        while k < length:
            x = _log_add_exp(ctx, x, _shifted(ctx, x, ctx.const([k], I64), axis))
            k *= 2
        return ctx.cast(x, out)
    n = ctx.op.Cast(ctx.op.Shape(x, start=axis, end=axis + 1), to=int(F32))
    n = ctx.op.Max(n, ctx.const([1.0], F32))
    steps = ctx.op.Ceil(ctx.op.Div(ctx.op.Log(n), ctx.const(math.log(2), F32)))
    trips = ctx.op.Cast(ctx.op.Reshape(steps, ctx.const([], I64)), to=int(I64))

    def step(body: Ctx, i: ir.Value, values: list[ir.Value]) -> tuple[list[ir.Value], None]:
        k = body.op.Cast(body.op.Pow(body.const(2.0, F32), body.op.Cast(i, to=int(F32))), to=int(I64))
        k = body.op.Reshape(k, body.const([1], I64))
        (y,) = values
        return [_log_add_exp(body, y, _shifted(body, y, k, axis))], None

    (x,) = loop(ctx, "logcumsumexp_step", trips, [x], step)
    return ctx.cast(x, out)
