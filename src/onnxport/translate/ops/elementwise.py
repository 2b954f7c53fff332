"""Elementwise arithmetic, comparison and logic, and unary math."""

from __future__ import annotations

import math
from collections.abc import Callable

import onnx_ir as ir
import torch

from onnxport.translate.builder import Ctx
from onnxport.translate.ops._common import FLOAT_TYPES, compute_dtype, loop, promote
from onnxport.translate.registry import aten, ops

aten_ = ops.aten

_BOOL = ir.DataType.BOOL
Scalar = float | int | bool


def _schema(*targets: torch._ops.OpOverload) -> str:
    return "\n".join(str(t._schema).removeprefix("aten::") for t in targets)


def _is_float(x: ir.Value) -> bool:
    return x.dtype in FLOAT_TYPES


def _trunc(ctx: Ctx, x: ir.Value) -> ir.Value:
    # ONNX has no Trunc: round toward zero is Ceil below zero and Floor above (keeps inf and -0.0)
    if not _is_float(x):
        return x
    return ctx.op.Where(ctx.op.Less(x, ctx.const(0, like=x)), ctx.op.Ceil(x), ctx.op.Floor(x))


# -- arithmetic -------------------------------------------------------------------------------------


@aten(aten_.add.Tensor, aten_.add.Scalar)
def add(ctx: Ctx, x: ir.Value, other: ir.Value | float, *, alpha: float = 1) -> ir.Value:
    """add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"""
    x, other = promote(ctx, ctx.out_dtype(), x, other)
    if x.dtype == ir.DataType.BOOL:
        return ctx.op.Or(x, other)
    if alpha != 1:
        other = ctx.op.Mul(other, ctx.const(alpha, like=other))
    return ctx.op.Add(x, other)


@aten(aten_.sub.Tensor, aten_.sub.Scalar)
def sub(ctx: Ctx, x: ir.Value, other: ir.Value | float, *, alpha: float = 1) -> ir.Value:
    """sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"""
    x, other = promote(ctx, ctx.out_dtype(), x, other)
    if alpha != 1:
        other = ctx.op.Mul(other, ctx.const(alpha, like=other))
    return ctx.op.Sub(x, other)


@aten(aten_.rsub.Tensor, aten_.rsub.Scalar)
def rsub(ctx: Ctx, x: ir.Value, other: ir.Value | float, *, alpha: float = 1) -> ir.Value:
    """rsub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"""
    return sub(ctx, other, x, alpha=alpha)


@aten(aten_.mul.Tensor, aten_.mul.Scalar)
def mul(ctx: Ctx, x: ir.Value, other: ir.Value | float) -> ir.Value:
    """mul.Tensor(Tensor self, Tensor other) -> Tensor"""
    x, other = promote(ctx, ctx.out_dtype(), x, other)
    if x.dtype == ir.DataType.BOOL:
        return ctx.op.And(x, other)
    return ctx.op.Mul(x, other)


def _floor_div(ctx: Ctx, x: ir.Value, other: ir.Value) -> ir.Value:
    if _is_float(x):
        return _floor_div_float(ctx, x, other)
    # integer Div truncates; removing the python-style remainder first makes it exact floor division
    return ctx.op.Div(ctx.op.Sub(x, ctx.op.Mod(x, other, fmod=0)), other)


def _floor_div_float(ctx: Ctx, x: ir.Value, other: ir.Value) -> ir.Value:
    """Floor division of floats by torch's rule, not ``Floor(Div)``: the quotient of ``x`` less its ``fmod``
    remainder, one less where that remainder's sign is not the divisor's, floored and then rounded up where more
    than half a step was left; a zero divisor gives the IEEE quotient (a zero result's sign is not kept).
    ``Floor(x / y)`` rounds the quotient first: at ``x`` a multiple of ``y`` in float (``n * 0.7``) it lands one
    off torch (386 of 1000 such multiples)."""
    op = ctx.op
    zero = ctx.const(0, like=x)
    quotient = op.Div(x, other)
    mod = op.Mod(x, other, fmod=1)
    div = op.Div(op.Sub(x, mod), other)
    signs_differ = op.And(op.Not(op.Equal(mod, zero)), op.Xor(op.Less(other, zero), op.Less(mod, zero)))
    div = op.Sub(div, ctx.cast(signs_differ, x.dtype))
    floor = op.Floor(div)
    floor = op.Add(floor, ctx.cast(op.Greater(op.Sub(div, floor), ctx.const(0.5, like=x)), x.dtype))
    return op.Where(op.Equal(other, zero), quotient, floor)


@aten(aten_.div.Tensor, aten_.div.Scalar, aten_.div.Tensor_mode, aten_.div.Scalar_mode,
      aten_.true_divide.Tensor, aten_.true_divide.Scalar)
def div(ctx: Ctx, x: ir.Value, other: ir.Value | float, *, rounding_mode: str | None = None) -> ir.Value:
    """div.Tensor_mode(Tensor self, Tensor other, *, str? rounding_mode) -> Tensor"""
    # the output dtype already says float for true division of integers
    x, other = promote(ctx, ctx.out_dtype(), x, other)
    if rounding_mode == "floor":
        return _floor_div(ctx, x, other)
    quotient = ctx.op.Div(x, other)
    return _trunc(ctx, quotient) if rounding_mode == "trunc" else quotient


@aten(aten_.floor_divide.default, aten_.floor_divide.Scalar)
def floor_divide(ctx: Ctx, x: ir.Value, other: ir.Value | float) -> ir.Value:
    """floor_divide(Tensor self, Tensor other) -> Tensor"""
    return _floor_div(ctx, *promote(ctx, ctx.out_dtype(), x, other))


@aten(aten_.remainder.Tensor, aten_.remainder.Scalar, aten_.remainder.Scalar_Tensor)
def remainder(ctx: Ctx, x: ir.Value | float, other: ir.Value | float) -> ir.Value:
    """remainder.Tensor(Tensor self, Tensor other) -> Tensor"""
    x, other = promote(ctx, ctx.out_dtype(), x, other)
    if not _is_float(x):
        return ctx.op.Mod(x, other, fmod=0)  # integer Mod with fmod=0 takes the divisor's sign
    # float Mod needs fmod=1 (C fmod, dividend's sign); shift by the divisor where the signs differ
    mod = ctx.op.Mod(x, other, fmod=1)
    zero = ctx.const(0, like=mod)
    fix = ctx.op.And(ctx.op.Not(ctx.op.Equal(mod, zero)), ctx.op.Xor(ctx.op.Less(other, zero), ctx.op.Less(mod, zero)))
    return ctx.op.Where(fix, ctx.op.Add(mod, other), mod)


@aten(aten_.fmod.Tensor, aten_.fmod.Scalar)
def fmod(ctx: Ctx, x: ir.Value, other: ir.Value | float) -> ir.Value:
    """fmod.Tensor(Tensor self, Tensor other) -> Tensor"""
    return ctx.op.Mod(*promote(ctx, ctx.out_dtype(), x, other), fmod=1)


@aten(aten_.pow.Tensor_Tensor, aten_.pow.Tensor_Scalar, aten_.pow.Scalar)
def pow_(ctx: Ctx, x: ir.Value | float, exponent: ir.Value | float) -> ir.Value:
    """pow.Tensor_Scalar(Tensor self, Scalar exponent) -> Tensor"""
    dtype = ctx.out_dtype()
    if isinstance(x, ir.Value) and isinstance(exponent, (int, float)) and not isinstance(exponent, bool):
        x = ctx.cast(x, dtype)
        if exponent == 1:
            return x
        if exponent == 2:  # a multiply is exact and cheaper than Pow
            return ctx.op.Mul(x, x)
        # x ** 3 stays a Pow: onnxruntime fuses the tanh-GELU pattern (x + 0.044715 * Pow(x, 3)) only then.
        if exponent == 0.5 and _is_float(x):
            return ctx.op.Sqrt(x)
        if exponent == -1 and _is_float(x):
            return ctx.op.Reciprocal(x)
    x, exponent = promote(ctx, dtype, x, exponent)
    return ctx.op.Pow(x, exponent)


@aten(aten_.square.default)
def square(ctx: Ctx, x: ir.Value) -> ir.Value:
    """square(Tensor self) -> Tensor"""
    x = ctx.cast(x, ctx.out_dtype())
    return ctx.op.Mul(x, x)


@aten(aten_.neg.default)
def neg(ctx: Ctx, x: ir.Value) -> ir.Value:
    """neg(Tensor self) -> Tensor"""
    return ctx.op.Neg(x)


def _unary(build: Callable[[Ctx, ir.Value], ir.Value], *targets: torch._ops.OpOverload) -> None:
    """Register a unary op computed in the output dtype (integer inputs of float ops become float)."""

    def translate(ctx: Ctx, x: ir.Value) -> ir.Value:
        return build(ctx, ctx.cast(x, ctx.out_dtype()))

    translate.__doc__ = _schema(*targets)
    translate.__name__ = translate.__qualname__ = targets[0].overloadpacket.__name__
    aten(*targets)(translate)


# unary ops that are one ONNX op (each registration names its op, so that grep finds it)
_SIMPLE = {
    aten_.abs.default: "Abs", aten_.sign.default: "Sign", aten_.reciprocal.default: "Reciprocal",
    aten_.sqrt.default: "Sqrt", aten_.exp.default: "Exp", aten_.log.default: "Log", aten_.sin.default: "Sin",
    aten_.cos.default: "Cos", aten_.tan.default: "Tan", aten_.asin.default: "Asin", aten_.acos.default: "Acos",
    aten_.atan.default: "Atan", aten_.sinh.default: "Sinh", aten_.cosh.default: "Cosh", aten_.tanh.default: "Tanh",
    aten_.asinh.default: "Asinh", aten_.acosh.default: "Acosh", aten_.atanh.default: "Atanh",
    aten_.erf.default: "Erf",
}
for _target, _op in _SIMPLE.items():
    _unary(lambda ctx, x, _op=_op: getattr(ctx.op, _op)(x), _target)

# rounding an integer tensor returns it unchanged; ONNX Floor/Ceil/Round accept floats only
for _target, _op in {aten_.floor.default: "Floor", aten_.ceil.default: "Ceil", aten_.round.default: "Round"}.items():
    _unary(lambda ctx, x, _op=_op: getattr(ctx.op, _op)(x) if _is_float(x) else x, _target)

_unary(lambda ctx, x: ctx.op.Reciprocal(ctx.op.Sqrt(x)), aten_.rsqrt.default)
_unary(lambda ctx, x: ctx.op.Pow(ctx.const(2, like=x), x), aten_.exp2.default)
_unary(lambda ctx, x: ctx.op.Div(ctx.op.Log(x), ctx.const(math.log(2), like=x)), aten_.log2.default)
_unary(lambda ctx, x: ctx.op.Div(ctx.op.Log(x), ctx.const(math.log(10), like=x)), aten_.log10.default)
_unary(lambda ctx, x: ctx.op.Log(ctx.op.Add(x, ctx.const(1, like=x))), aten_.log1p.default)
_unary(lambda ctx, x: ctx.op.Sub(ctx.op.Exp(x), ctx.const(1, like=x)), aten_.expm1.default)
_unary(_trunc, aten_.trunc.default, aten_.fix.default)
_unary(lambda ctx, x: ctx.op.Sub(x, _trunc(ctx, x)), aten_.frac.default)


@aten(aten_.round.decimals)
def round_decimals(ctx: Ctx, x: ir.Value, *, decimals: int = 0) -> ir.Value:
    """round.decimals(Tensor self, *, int decimals) -> Tensor"""
    if decimals == 0 or not _is_float(x):
        return ctx.op.Round(x) if _is_float(x) else x
    # the same scaling as torch: multiply by 10**d for d > 0, divide by 10**-d for d < 0
    scale = ctx.const(10.0 ** abs(decimals), like=x)
    scale_op, unscale_op = (ctx.op.Mul, ctx.op.Div) if decimals > 0 else (ctx.op.Div, ctx.op.Mul)
    return unscale_op(ctx.op.Round(scale_op(x, scale)), scale)


@aten(aten_.atan2.default)
def atan2(ctx: Ctx, y: ir.Value, x: ir.Value) -> ir.Value:
    """atan2(Tensor self, Tensor other) -> Tensor"""
    y, x = promote(ctx, ctx.out_dtype(), y, x)
    zero, pi = ctx.const(0, like=x), ctx.const(math.pi, like=x)
    base = ctx.op.Atan(ctx.op.Div(y, x))
    # left half-plane: atan(y/x) is off by pi, toward the sign of y
    shift = ctx.op.Where(ctx.op.Less(y, zero), ctx.op.Neg(pi), pi)
    out = ctx.op.Where(ctx.op.Less(x, zero), ctx.op.Add(base, shift), base)
    origin = ctx.op.And(ctx.op.Equal(x, zero), ctx.op.Equal(y, zero))  # 0/0 is NaN; torch gives 0
    return ctx.op.Where(origin, zero, out)


@aten(aten_.clamp.default, aten_.clamp.Tensor)
def clamp(ctx: Ctx, x: ir.Value, min: ir.Value | float | None = None, max: ir.Value | float | None = None) -> ir.Value:
    """clamp(Tensor self, Scalar? min=None, Scalar? max=None) -> Tensor"""
    dtype = ctx.out_dtype()
    x = ctx.cast(x, dtype)
    if not isinstance(min, ir.Value) and not isinstance(max, ir.Value):
        lo = None if min is None else ctx.const(min, dtype)
        hi = None if max is None else ctx.const(max, dtype)
        return ctx.op.Clip(x, lo, hi)
    # Clip wants scalar bounds; tensor bounds broadcast through Max/Min (torch applies min first)
    if min is not None:
        x = ctx.op.Max(x, ctx.as_value(min, dtype=dtype))
    if max is not None:
        x = ctx.op.Min(x, ctx.as_value(max, dtype=dtype))
    return x


@aten(aten_.clamp_min.default, aten_.clamp_min.Tensor)
def clamp_min(ctx: Ctx, x: ir.Value, min: ir.Value | float) -> ir.Value:
    """clamp_min(Tensor self, Scalar min) -> Tensor"""
    return clamp(ctx, x, min, None)


@aten(aten_.clamp_max.default, aten_.clamp_max.Tensor)
def clamp_max(ctx: Ctx, x: ir.Value, max: ir.Value | float) -> ir.Value:
    """clamp_max(Tensor self, Scalar max) -> Tensor"""
    return clamp(ctx, x, None, max)


@aten(aten_.maximum.default, aten_.max.other)
def maximum(ctx: Ctx, x: ir.Value, other: ir.Value) -> ir.Value:
    """maximum(Tensor self, Tensor other) -> Tensor (also max.other)"""
    x, other = promote(ctx, ctx.out_dtype(), x, other)
    return ctx.op.Or(x, other) if x.dtype == _BOOL else ctx.op.Max(x, other)


@aten(aten_.minimum.default, aten_.min.other)
def minimum(ctx: Ctx, x: ir.Value, other: ir.Value) -> ir.Value:
    """minimum(Tensor self, Tensor other) -> Tensor (also min.other)"""
    x, other = promote(ctx, ctx.out_dtype(), x, other)
    return ctx.op.And(x, other) if x.dtype == _BOOL else ctx.op.Min(x, other)


@aten(aten_.where.self, aten_.where.ScalarSelf, aten_.where.ScalarOther, aten_.where.Scalar)
def where(ctx: Ctx, condition: ir.Value, x: ir.Value | Scalar, other: ir.Value | Scalar) -> ir.Value:
    """where.self(Tensor condition, Tensor self, Tensor other) -> Tensor"""
    x, other = promote(ctx, ctx.out_dtype(), x, other)
    return ctx.op.Where(ctx.cast(condition, _BOOL), x, other)


@aten(aten_.masked_fill.Scalar, aten_.masked_fill.Tensor)
def masked_fill(ctx: Ctx, x: ir.Value, mask: ir.Value, value: ir.Value | Scalar) -> ir.Value:
    """masked_fill.Scalar(Tensor self, Tensor mask, Scalar value) -> Tensor"""
    x, value = promote(ctx, ctx.out_dtype(), x, value)
    return ctx.op.Where(ctx.cast(mask, _BOOL), value, x)


@aten(aten_.lerp.Scalar, aten_.lerp.Tensor)
def lerp(ctx: Ctx, x: ir.Value, end: ir.Value, weight: ir.Value | float) -> ir.Value:
    """lerp.Scalar(Tensor self, Tensor end, Scalar weight) -> Tensor"""
    dtype = ctx.out_dtype()
    x, end, w = promote(ctx, dtype, x, end, weight)
    diff = ctx.op.Sub(end, x)
    # torch's two-sided form: start from the nearer end point so weight 1 returns end exactly
    if not isinstance(weight, ir.Value):
        if abs(weight) < 0.5:
            return ctx.op.Add(x, ctx.op.Mul(w, diff))
        return ctx.op.Sub(end, ctx.op.Mul(diff, ctx.const(1 - weight, dtype)))
    near_start = ctx.op.Less(ctx.op.Abs(w), ctx.const(0.5, dtype))
    from_start = ctx.op.Add(x, ctx.op.Mul(w, diff))
    from_end = ctx.op.Sub(end, ctx.op.Mul(diff, ctx.op.Sub(ctx.const(1, dtype), w)))
    return ctx.op.Where(near_start, from_start, from_end)


@aten(aten_.addcmul.default)
def addcmul(ctx: Ctx, x: ir.Value, tensor1: ir.Value, tensor2: ir.Value, *, value: float = 1) -> ir.Value:
    """addcmul(Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar value=1) -> Tensor"""
    x, t1, t2 = promote(ctx, ctx.out_dtype(), x, tensor1, tensor2)
    if value != 1:
        t1 = ctx.op.Mul(ctx.const(value, like=t1), t1)
    return ctx.op.Add(x, ctx.op.Mul(t1, t2))


@aten(aten_.addcdiv.default)
def addcdiv(ctx: Ctx, x: ir.Value, tensor1: ir.Value, tensor2: ir.Value, *, value: float = 1) -> ir.Value:
    """addcdiv(Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar value=1) -> Tensor"""
    x, t1, t2 = promote(ctx, ctx.out_dtype(), x, tensor1, tensor2)
    if value != 1:
        t1 = ctx.op.Mul(ctx.const(value, like=t1), t1)
    return ctx.op.Add(x, ctx.op.Div(t1, t2))


# -- comparison -------------------------------------------------------------------------------------


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


@aten(aten_.isnan.default)
def isnan(ctx: Ctx, x: ir.Value) -> ir.Value:
    """isnan(Tensor self) -> Tensor"""
    return ctx.op.IsNaN(x) if _is_float(x) else ctx.op.Not(ctx.op.Equal(x, x))


@aten(aten_.isinf.default)
def isinf(ctx: Ctx, x: ir.Value) -> ir.Value:
    """isinf(Tensor self) -> Tensor"""
    return ctx.op.IsInf(x) if _is_float(x) else ctx.op.Not(ctx.op.Equal(x, x))


@aten(aten_.isfinite.default)
def isfinite(ctx: Ctx, x: ir.Value) -> ir.Value:
    """isfinite(Tensor self) -> Tensor"""
    if not _is_float(x):
        return ctx.op.Equal(x, x)  # all true, in x's shape
    return ctx.op.Not(ctx.op.Or(ctx.op.IsNaN(x), ctx.op.IsInf(x)))


# -- logic ------------------------------------------------------------------------------------------


def _logical(onnx_op: str, *targets: torch._ops.OpOverload) -> None:
    def translate(ctx: Ctx, x: ir.Value, other: ir.Value) -> ir.Value:
        x, other = promote(ctx, _BOOL, x, other)
        return getattr(ctx.op, onnx_op)(x, other)

    translate.__doc__ = _schema(*targets)
    aten(*targets)(translate)


_logical("And", aten_.logical_and.default)
_logical("Or", aten_.logical_or.default)
_logical("Xor", aten_.logical_xor.default)


@aten(aten_.logical_not.default)
def logical_not(ctx: Ctx, x: ir.Value) -> ir.Value:
    """logical_not(Tensor self) -> Tensor"""
    return ctx.op.Not(ctx.cast(x, _BOOL))


def _bitwise(bool_op: str, int_op: str, *targets: torch._ops.OpOverload) -> None:
    def translate(ctx: Ctx, x: ir.Value | Scalar, other: ir.Value | Scalar) -> ir.Value:
        x, other = promote(ctx, ctx.out_dtype(), x, other)
        return getattr(ctx.op, bool_op if x.dtype == _BOOL else int_op)(x, other)

    translate.__doc__ = _schema(*targets)
    aten(*targets)(translate)


_bitwise("And", "BitwiseAnd", aten_.bitwise_and.Tensor, aten_.bitwise_and.Scalar, aten_.bitwise_and.Scalar_Tensor,
         aten_.__and__.Tensor, aten_.__and__.Scalar)
_bitwise("Or", "BitwiseOr", aten_.bitwise_or.Tensor, aten_.bitwise_or.Scalar, aten_.bitwise_or.Scalar_Tensor,
         aten_.__or__.Tensor, aten_.__or__.Scalar)
_bitwise("Xor", "BitwiseXor", aten_.bitwise_xor.Tensor, aten_.bitwise_xor.Scalar, aten_.bitwise_xor.Scalar_Tensor,
         aten_.__xor__.Tensor, aten_.__xor__.Scalar)


_UNSIGNED = {ir.DataType.INT64: ir.DataType.UINT64, ir.DataType.INT32: ir.DataType.UINT32,
             ir.DataType.INT16: ir.DataType.UINT16, ir.DataType.INT8: ir.DataType.UINT8}


def _shift(ctx: Ctx, x: ir.Value | Scalar, other: ir.Value | Scalar, direction: str) -> ir.Value:
    x, other = promote(ctx, ctx.out_dtype(), x, other)
    dtype = x.dtype
    unsigned = _UNSIGNED.get(dtype, dtype)  # ONNX BitShift takes unsigned ints: same bits, then back
    bits = ir.DataType(unsigned).itemsize * 8
    count = ctx.op.Cast(other, to=unsigned)
    # An arithmetic right shift of a negative x is ~((~x) >> n); a shift by the width or more gives 0 (or -1).
    negative = ctx.op.Less(x, ctx.const(0, dtype)) if direction == "RIGHT" and unsigned != dtype else None
    source = ctx.op.Where(negative, ctx.op.BitwiseNot(x), x) if negative is not None else x
    shifted = ctx.op.Cast(ctx.op.BitShift(ctx.op.Cast(source, to=unsigned), count, direction=direction), to=dtype)
    wide = ctx.op.GreaterOrEqual(other, ctx.const(bits, other.dtype))  # onnxruntime has no unsigned Where
    shifted = ctx.op.Where(wide, ctx.const(0, dtype), shifted)
    return ctx.op.Where(negative, ctx.op.BitwiseNot(shifted), shifted) if negative is not None else shifted


@aten(aten_.bitwise_left_shift.Tensor, aten_.bitwise_left_shift.Tensor_Scalar, aten_.bitwise_left_shift.Scalar_Tensor,
      aten_.__lshift__.Tensor, aten_.__lshift__.Scalar)
def bitwise_left_shift(ctx: Ctx, x: ir.Value | Scalar, other: ir.Value | Scalar) -> ir.Value:
    """bitwise_left_shift.Tensor(Tensor self, Tensor other) -> Tensor (bits shifted past the width are lost)"""
    return _shift(ctx, x, other, "LEFT")


@aten(aten_.bitwise_right_shift.Tensor, aten_.bitwise_right_shift.Tensor_Scalar,
      aten_.bitwise_right_shift.Scalar_Tensor, aten_.__rshift__.Tensor, aten_.__rshift__.Scalar)
def bitwise_right_shift(ctx: Ctx, x: ir.Value | Scalar, other: ir.Value | Scalar) -> ir.Value:
    """bitwise_right_shift.Tensor(Tensor self, Tensor other) -> Tensor (arithmetic for signed ints)"""
    return _shift(ctx, x, other, "RIGHT")


def _gcd(ctx: Ctx, a: ir.Value, b: ir.Value) -> ir.Value:
    """Euclid's algorithm on |a|, |b| in an ONNX Loop, until every remainder is 0."""
    a, b = ctx.op.Abs(a), ctx.op.Abs(b)
    a, b = ctx.op.Expand(a, ctx.op.Shape(b)), ctx.op.Expand(b, ctx.op.Shape(a))
    zero = ctx.const(0, a.dtype)

    def step(body: Ctx, i: ir.Value, values: list[ir.Value]) -> tuple[list[ir.Value], ir.Value]:
        x, y = values
        done = body.op.Equal(y, zero)
        divisor = body.op.Where(done, body.const(1, y.dtype), y)  # no division by zero where y is done
        x, y = body.op.Where(done, x, y), body.op.Where(done, zero, body.op.Mod(x, divisor))
        pending = body.op.ReduceSum(body.op.Cast(body.op.Not(body.op.Equal(y, zero)), to=int(ir.DataType.INT64)),
                                    keepdims=0)
        return [x, y], body.op.Greater(pending, body.const(0, ir.DataType.INT64))

    return loop(ctx, "gcd", None, [a, b], step)[0]


@aten(aten_.gcd.default)
def gcd(ctx: Ctx, x: ir.Value, other: ir.Value) -> ir.Value:
    """gcd(Tensor self, Tensor other) -> Tensor"""
    return _gcd(ctx, *promote(ctx, ctx.out_dtype(), x, other))


@aten(aten_.lcm.default)
def lcm(ctx: Ctx, x: ir.Value, other: ir.Value) -> ir.Value:
    """lcm(Tensor self, Tensor other) -> Tensor: |x / gcd * other|, 0 where gcd is 0"""
    x, other = promote(ctx, ctx.out_dtype(), x, other)
    g = _gcd(ctx, x, other)
    zero = ctx.op.Equal(g, ctx.const(0, g.dtype))
    quotient = ctx.op.Div(x, ctx.op.Where(zero, ctx.const(1, g.dtype), g))
    return ctx.op.Where(zero, ctx.const(0, g.dtype), ctx.op.Abs(ctx.op.Mul(quotient, other)))


@aten(aten_.bitwise_not.default)
def bitwise_not(ctx: Ctx, x: ir.Value) -> ir.Value:
    """bitwise_not(Tensor self) -> Tensor"""
    return ctx.op.Not(x) if x.dtype == _BOOL else ctx.op.BitwiseNot(x)
