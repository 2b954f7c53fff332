"""Orthogonal polynomials of degree n: Chebyshev T, U, V, W (plain and shifted to [0, 1]), Hermite H and
He, Laguerre L and Legendre P.

Each is evaluated as torch does: the degree is truncated to an integer, negative degrees give 0, a few
special points and (for Chebyshev, on (-1, 1) at high degree) trigonometric closed forms are taken
directly, and everything else runs the three-term recurrence. A constant degree is unrolled; a degree
given as a tensor runs the recurrence in an ONNX ``Loop`` up to the largest degree present, stopping
early once every element has its value (or has overflowed to NaN). float16 and bfloat16 are computed
in float32; float64 skips the closed forms (onnxruntime has no float64 ``Acos``) and recurs instead.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import onnx_ir as ir
import torch

from onnxport.translate.builder import Ctx
from onnxport.translate.ops._common import loop
from onnxport.translate.ops._special import F64, I64, any_true, broadcast, c, compute_type, select, trunc
from onnxport.translate.registry import aten, ops

aten_ = ops.aten

_UNROLL_MAX = 32  # constant degrees up to this are unrolled; larger ones loop
_HERMITE_LIMIT = {ir.DataType.FLOAT: 128, ir.DataType.DOUBLE: 512}  # torch gives NaN past these degrees

Cases = list[tuple[ir.Value, ir.Value | float]]


@dataclasses.dataclass(frozen=True)
class _Family:
    """One polynomial family: P1 of the recurrence variable, the step P_(j+1) from P_(j-1) and P_j, and the
    special cases torch checks before recurring (in its order)."""

    first: Callable[[Ctx, ir.Value], ir.Value]
    step: Callable[[Ctx, ir.Value, ir.Value, ir.Value, ir.Value], ir.Value]
    cases: Callable[[Ctx, ir.Value, ir.Value, ir.Value], Cases]
    shifted: bool = False


def _even(ctx: Ctx, n: ir.Value) -> ir.Value:
    return ctx.op.Equal(ctx.op.Mod(n, c(ctx, 2.0, n), fmod=1), c(ctx, 0.0, n))


def _signed(ctx: Ctx, positive: ir.Value, value: ir.Value | float, x: ir.Value) -> ir.Value:
    """``value`` where ``positive``, else ``-value``."""
    value = ctx.as_value(value, like=x)
    return ctx.op.Where(positive, value, ctx.op.Neg(value))


def _chebyshev_step(ctx: Ctx, v: ir.Value, j: ir.Value, p: ir.Value, q: ir.Value) -> ir.Value:
    return ctx.op.Sub(ctx.op.Mul(ctx.op.Add(v, v), q), p)


def _chebyshev_cases(kind: str, shifted: bool) -> Callable[[Ctx, ir.Value, ir.Value, ir.Value], Cases]:
    """torch's end points and closed forms of the Chebyshev polynomial ``kind`` (t, u, v or w)."""

    def cases(ctx: Ctx, x: ir.Value, v: ir.Value, n: ir.Value) -> Cases:
        op, one = ctx.op, c(ctx, 1.0, x)
        n1, n2 = op.Add(n, one), op.Add(op.Add(n, n), one)  # n + 1 and 2n + 1
        even = _even(ctx, n)
        if shifted:  # v = 2x - 1 is +-1 exactly where x is 1 or 0
            at_one, at_minus_one = op.Equal(x, one), op.Equal(x, c(ctx, 0.0, x))
        else:
            at_one, at_minus_one = op.Equal(x, one), op.Equal(x, c(ctx, -1.0, x))
        value_at_one = {"t": one, "u": n1, "v": one, "w": n2}[kind]
        value_at_minus_one = {"t": _signed(ctx, even, one, x), "u": _signed(ctx, even, n1, x),
                              "v": _signed(ctx, even, n2, x), "w": _signed(ctx, even, one, x)}[kind]
        out: Cases = [(op.Less(n, c(ctx, 0.0, x)), 0.0), (at_one, value_at_one), (at_minus_one, value_at_minus_one)]
        if x.dtype != F64:
            threshold = 4.0 if shifted and kind == "w" else 6.0 if shifted or kind == "t" else 8.0
            inside = op.And(op.Greater(n, c(ctx, threshold, x)), op.Less(op.Abs(v), one))
            out.append((inside, _closed_form(ctx, kind, x, v, n, shifted)))
        return out

    return cases


def _closed_form(ctx: Ctx, kind: str, x: ir.Value, v: ir.Value, n: ir.Value, shifted: bool) -> ir.Value:
    """T_n = cos(n t), U_n = sin((n+1) t) / sin t, V_n = cos((n+1/2) t) / cos(t/2), W_n = sin((n+1/2) t) / sin(t/2)
    with t = acos(v); where the denominator rounds to 0 (v next to an end point), torch's limits instead."""
    op, one = ctx.op, c(ctx, 1.0, v)
    theta = op.Acos(v)
    if kind == "t":
        return op.Cos(op.Mul(n, theta))
    n1, n2, even = op.Add(n, one), op.Add(op.Add(n, n), one), _even(ctx, n)
    if kind == "u":
        sin = op.Sin(theta)
        limit = op.Div(op.Mul(n1, op.Cos(op.Mul(n1, theta))), v)
        return op.Where(op.Equal(sin, c(ctx, 0.0, v)), limit, op.Div(op.Sin(op.Mul(n1, theta)), sin))
    angle = op.Mul(op.Add(n, c(ctx, 0.5, v)), theta)
    half = op.Div(theta, c(ctx, 2.0, v))
    if kind == "v":
        closed = op.Div(op.Cos(angle), op.Cos(half))
        return op.Where(op.Equal(op.Sin(half), one), _signed(ctx, even, n2, v), closed)
    limit = _signed(ctx, even, one, v)
    if not shifted:
        limit = op.Where(op.Greater(x, c(ctx, 0.0, x)), n2, limit)
    return op.Where(op.Equal(op.Cos(half), one), limit, op.Div(op.Sin(angle), op.Sin(half)))


def _chebyshev(kind: str, shifted: bool = False) -> _Family:
    first: Callable[[Ctx, ir.Value], ir.Value] = {
        "t": lambda ctx, v: v,
        "u": lambda ctx, v: ctx.op.Add(v, v),
        "v": lambda ctx, v: ctx.op.Sub(ctx.op.Add(v, v), c(ctx, 1.0, v)),
        "w": lambda ctx, v: ctx.op.Add(ctx.op.Add(v, v), c(ctx, 1.0, v)),
    }[kind]
    return _Family(first, _chebyshev_step, _chebyshev_cases(kind, shifted), shifted)


def _hermite_cases(ctx: Ctx, x: ir.Value, v: ir.Value, n: ir.Value) -> Cases:
    limit = float(_HERMITE_LIMIT.get(x.dtype, 128))
    return [(ctx.op.Less(n, c(ctx, 0.0, x)), 0.0), (ctx.op.Greater(n, c(ctx, limit, x)), math.nan)]


def _laguerre_cases(ctx: Ctx, x: ir.Value, v: ir.Value, n: ir.Value) -> Cases:
    return [(ctx.op.Less(n, c(ctx, 0.0, x)), 0.0), (ctx.op.Equal(x, c(ctx, 0.0, x)), 1.0)]


def _legendre_cases(ctx: Ctx, x: ir.Value, v: ir.Value, n: ir.Value) -> Cases:
    op, one = ctx.op, c(ctx, 1.0, x)
    at_edge = op.Equal(op.Abs(x), one)
    positive = op.Or(op.Greater(x, c(ctx, 0.0, x)), _even(ctx, n))
    return [(op.Less(n, c(ctx, 0.0, x)), 0.0), (at_edge, _signed(ctx, positive, one, x))]


def _frac_step(ctx: Ctx, j: ir.Value, top: ir.Value, p: ir.Value) -> ir.Value:
    """``(top - j p) / (j + 1)``."""
    return ctx.op.Div(ctx.op.Sub(top, ctx.op.Mul(j, p)), ctx.op.Add(j, c(ctx, 1.0, j)))


_FAMILIES = {
    aten_.special_chebyshev_polynomial_t: _chebyshev("t"),
    aten_.special_chebyshev_polynomial_u: _chebyshev("u"),
    aten_.special_chebyshev_polynomial_v: _chebyshev("v"),
    aten_.special_chebyshev_polynomial_w: _chebyshev("w"),
    aten_.special_shifted_chebyshev_polynomial_t: _chebyshev("t", shifted=True),
    aten_.special_shifted_chebyshev_polynomial_u: _chebyshev("u", shifted=True),
    aten_.special_shifted_chebyshev_polynomial_v: _chebyshev("v", shifted=True),
    aten_.special_shifted_chebyshev_polynomial_w: _chebyshev("w", shifted=True),
    aten_.special_hermite_polynomial_h: _Family(
        lambda ctx, x: ctx.op.Add(x, x),
        lambda ctx, x, j, p, q: ctx.op.Sub(ctx.op.Mul(ctx.op.Add(x, x), q), ctx.op.Mul(ctx.op.Add(j, j), p)),
        _hermite_cases,
    ),
    aten_.special_hermite_polynomial_he: _Family(
        lambda ctx, x: x,
        lambda ctx, x, j, p, q: ctx.op.Sub(ctx.op.Mul(x, q), ctx.op.Mul(j, p)),
        _hermite_cases,
    ),
    aten_.special_laguerre_polynomial_l: _Family(
        lambda ctx, x: ctx.op.Sub(c(ctx, 1.0, x), x),
        lambda ctx, x, j, p, q: _frac_step(
            ctx, j, ctx.op.Mul(ctx.op.Add(ctx.op.Add(j, j), ctx.op.Sub(c(ctx, 1.0, x), x)), q), p),
        _laguerre_cases,
    ),
    aten_.special_legendre_polynomial_p: _Family(
        lambda ctx, x: x,
        lambda ctx, x, j, p, q: _frac_step(
            ctx, j, ctx.op.Mul(ctx.op.Mul(ctx.op.Add(ctx.op.Add(j, j), c(ctx, 1.0, j)), x), q), p),
        _legendre_cases,
    ),
}


def _degree(ctx: Ctx, n: ir.Value) -> ir.Value:
    """The degree as torch casts it to int64, kept as a float: truncated; NaN, infinities and values past
    the int64 range (which x86 casts to INT64_MIN) are negative."""
    in_range = ctx.op.Less(ctx.op.Abs(n), c(ctx, 2.0**63, n))  # false for NaN
    return ctx.op.Where(in_range, trunc(ctx, n), c(ctx, -1.0, n))


def _recur(ctx: Ctx, fam: _Family, v: ir.Value, n: ir.Value, steps: int | None, needs: ir.Value) -> ir.Value:
    """P_n(v) by the recurrence: ``steps`` unrolled steps for a constant degree, else a ``Loop``."""
    one = c(ctx, 1.0, v)
    p, q = one, fam.first(ctx, v)
    if steps is not None:
        for j in range(1, steps + 1):
            p, q = q, fam.step(ctx, v, c(ctx, float(j), v), p, q)
        return q
    v, n, needs, p, q = broadcast(ctx, v, n, needs, p, q)
    last = ctx.op.Where(needs, ctx.op.Sub(n, one), c(ctx, 0.0, v))  # steps each element needs
    padded = ctx.op.Concat(ctx.op.Reshape(last, ctx.const([-1], I64)), ctx.const([0.0], v.dtype), axis=0)
    trips = ctx.op.Cast(ctx.op.ReduceMax(padded, keepdims=0), to=int(I64))

    def step(body: Ctx, i: ir.Value, values: list[ir.Value]) -> tuple[list[ir.Value], ir.Value]:
        p, q = values
        j = body.op.Add(body.op.Cast(i, to=int(v.dtype)), one)
        active = body.op.Less(j, n)
        new = fam.step(body, v, j, p, q)
        p, q = body.op.Where(active, q, p), body.op.Where(active, new, q)
        more = body.op.And(body.op.And(needs, body.op.Less(body.op.Add(j, one), n)), body.op.Not(body.op.IsNaN(q)))
        return [p, q], any_true(body, more)

    return loop(ctx, "recurrence", trips, [p, q], step)[1]


def _polynomial(ctx: Ctx, fam: _Family, x: ir.Value | float, n: ir.Value | float) -> ir.Value:
    out = ctx.out_dtype()
    work = compute_type(out)
    x = ctx.as_value(x, dtype=work)
    n_value = _degree(ctx, ctx.as_value(n, dtype=work))
    v = ctx.op.Sub(ctx.op.Add(x, x), c(ctx, 1.0, x)) if fam.shifted else x
    cases = fam.cases(ctx, x, v, n_value) + [
        (ctx.op.Equal(n_value, c(ctx, 0.0, x)), 1.0),
        (ctx.op.Equal(n_value, c(ctx, 1.0, x)), fam.first(ctx, v)),
    ]
    settled = cases[0][0]
    for cond, _ in cases[1:]:
        settled = ctx.op.Or(settled, cond)
    steps = None
    if not isinstance(n, ir.Value):
        degree = int(n) if math.isfinite(n) else -1
        steps = max(degree - 1, 0) if degree <= _UNROLL_MAX else None
    recurred = _recur(ctx, fam, v, n_value, steps, ctx.op.Not(settled))
    return ctx.cast(select(ctx, recurred, *cases), out)


def _register(packet: torch._ops.OpOverloadPacket, fam: _Family) -> None:
    def translate(ctx: Ctx, x: ir.Value | float, n: ir.Value | float) -> ir.Value:
        return _polynomial(ctx, fam, x, n)

    name = packet.__name__
    translate.__doc__ = f"{name}(Tensor x, Tensor n) -> Tensor (also .x_scalar and .n_scalar)"
    translate.__name__ = translate.__qualname__ = name
    aten(packet.default, packet.x_scalar, packet.n_scalar)(translate)


for _packet, _family in _FAMILIES.items():
    _register(_packet, _family)
