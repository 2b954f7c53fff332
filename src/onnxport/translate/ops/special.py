"""The gamma family: lgamma, digamma, polygamma, the Hurwitz zeta function and the incomplete gammas.

float16 and bfloat16 inputs are computed in float32 and cast back. The zeta function (so polygamma of
order 2 and up) and the incomplete gamma functions are computed in float64, as torch's kernels do, and
run an ONNX ``Loop`` whose length depends on the data (a series that is summed until it converges).
"""

from __future__ import annotations

import math

import onnx_ir as ir

from onnxport.translate.builder import Ctx
from onnxport.translate.ops._common import loop
from onnxport.translate.ops._special import F64, I64, any_true, broadcast, c, is_integer, polevl, select, unary
from onnxport.translate.registry import aten, ops

aten_ = ops.aten

# Stirling's series of lgamma: the coefficients B_2k / (2k (2k-1)) of y^-(2k-1), highest power first.
_STIRLING = (1 / 156, -691 / 360360, 1 / 1188, -1 / 1680, 1 / 1260, -1 / 360, 1 / 12)
# The asymptotic series of digamma in 1/y^2 (Cephes psi).
_PSI = (8.33333333333333333333e-2, -2.10927960927960927961e-2, 7.57575757575757575758e-3,
        -4.16666666666666666667e-3, 3.96825396825396825397e-3, -8.33333333333333333333e-3,
        8.33333333333333333333e-2)
# (2k)! / B_2k: the Euler-Maclaurin tail of the Hurwitz zeta function (Cephes zeta).
_ZETA_EM = (12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9, 7.47242496e10,
            -2.950130727918164224e12, 1.1646782814350067249e14, -4.5979787224074726105e15,
            1.8152105401943546773e17, -7.1661652561756670113e18)
_IGAMMA_MAX_ITER = 20000  # enough for a ~ x up to about 1e7; the loop stops as soon as all elements converge
_ZETA_MAX_TERMS = 1 << 20  # direct terms of zeta(x, q): q down to about -1e6


def _sin_pi_abs(ctx: Ctx, x: ir.Value) -> ir.Value:
    """``|sin(pi x)|``, reduced to ``|x - round(x)| <= 1/2`` first so that it is exact near integers."""
    r = ctx.op.Abs(ctx.op.Sub(x, ctx.op.Round(x)))
    return ctx.op.Sin(ctx.op.Mul(r, c(ctx, math.pi, x)))


def lgamma_of(ctx: Ctx, x: ir.Value) -> ir.Value:
    """``log|Gamma(x)|``: Stirling's series after shifting x up to 8, reflection below 0."""
    zero, one, eight = c(ctx, 0.0, x), c(ctx, 1.0, x), c(ctx, 8.0, x)
    negative = ctx.op.Less(x, zero)
    z = ctx.op.Where(negative, ctx.op.Sub(one, x), x)
    small = ctx.op.Less(z, eight)
    zs = ctx.op.Where(small, z, one)
    prod = zs
    for k in range(1, 8):
        prod = ctx.op.Mul(prod, ctx.op.Add(zs, c(ctx, float(k), x)))
    y = ctx.op.Where(small, ctx.op.Add(zs, eight), z)
    iy = ctx.op.Reciprocal(y)
    series = ctx.op.Mul(iy, polevl(ctx, ctx.op.Mul(iy, iy), _STIRLING))
    stirling = ctx.op.Sub(ctx.op.Mul(ctx.op.Sub(y, c(ctx, 0.5, x)), ctx.op.Log(y)), y)
    stirling = ctx.op.Add(ctx.op.Add(stirling, c(ctx, 0.5 * math.log(2 * math.pi), x)), series)
    lg = ctx.op.Sub(stirling, ctx.op.Where(small, ctx.op.Log(prod), zero))
    # log|Gamma(x)| = log(pi / |sin(pi x)|) - log|Gamma(1 - x)|; poles (sin = 0) give +inf
    reflected = ctx.op.Sub(ctx.op.Log(ctx.op.Div(c(ctx, math.pi, x), _sin_pi_abs(ctx, x))), lg)
    out = ctx.op.Where(negative, reflected, lg)
    return ctx.op.Where(ctx.op.IsInf(x), c(ctx, math.inf, x), out)


@aten(aten_.lgamma.default)
def lgamma(ctx: Ctx, x: ir.Value) -> ir.Value:
    """lgamma(Tensor self) -> Tensor"""
    return unary(ctx, x, lgamma_of)


def _digamma(ctx: Ctx, x: ir.Value) -> ir.Value:
    zero, one, ten = c(ctx, 0.0, x), c(ctx, 1.0, x), c(ctx, 10.0, x)
    negative = ctx.op.Less(x, zero)
    z = ctx.op.Where(negative, ctx.op.Sub(one, x), x)
    # psi(z) = psi(z + 10) - sum_{k<10} 1/(z + k), then the asymptotic series from 10 up
    small = ctx.op.Less(z, ten)
    zs = ctx.op.Where(small, z, one)
    shift = ctx.op.Reciprocal(zs)
    for k in range(1, 10):
        shift = ctx.op.Add(shift, ctx.op.Reciprocal(ctx.op.Add(zs, c(ctx, float(k), x))))
    y = ctx.op.Where(small, ctx.op.Add(zs, ten), z)
    iy2 = ctx.op.Reciprocal(ctx.op.Mul(y, y))
    psi = ctx.op.Sub(ctx.op.Log(y), ctx.op.Div(c(ctx, 0.5, x), y))
    psi = ctx.op.Sub(psi, ctx.op.Mul(iy2, polevl(ctx, iy2, _PSI)))
    psi = ctx.op.Sub(psi, ctx.op.Where(small, shift, zero))
    # reflection psi(x) = psi(1 - x) - pi / tan(pi x); tan has period pi, so x - round(x) gives the same
    # value, exactly near the poles (torch reduces the same way, then works in float64)
    angle = ctx.op.Mul(ctx.op.Sub(x, ctx.op.Round(x)), c(ctx, math.pi, x))
    cot = ctx.op.Div(ctx.op.Cos(angle), ctx.op.Sin(angle))
    reflected = ctx.op.Sub(psi, ctx.op.Mul(c(ctx, math.pi, x), cot))
    out = ctx.op.Where(negative, reflected, psi)
    pole = ctx.op.And(negative, is_integer(ctx, x))
    # digamma(+-0) = -+inf, which is -1/x
    return select(ctx, out, (pole, math.nan), (ctx.op.Equal(x, zero), ctx.op.Neg(ctx.op.Reciprocal(x))))


@aten(aten_.digamma.default)
def digamma(ctx: Ctx, x: ir.Value) -> ir.Value:
    """digamma(Tensor self) -> Tensor"""
    return unary(ctx, x, _digamma)


def _trigamma(ctx: Ctx, x: ir.Value) -> ir.Value:
    # torch's recipe: reflect below 1/2, six recurrence steps, then the asymptotic series
    one, pi = c(ctx, 1.0, x), c(ctx, math.pi, x)
    reflect = ctx.op.Less(x, c(ctx, 0.5, x))
    sin = ctx.op.Sin(ctx.op.Mul(pi, x))
    lead = ctx.op.Div(ctx.op.Mul(pi, pi), ctx.op.Mul(sin, sin))
    z = ctx.op.Where(reflect, ctx.op.Sub(one, x), x)
    acc = None
    for k in range(6):
        zk = ctx.op.Add(z, c(ctx, float(k), x)) if k else z
        term = ctx.op.Reciprocal(ctx.op.Mul(zk, zk))
        acc = term if acc is None else ctx.op.Add(acc, term)
    y = ctx.op.Add(z, c(ctx, 6.0, x))
    ixx = ctx.op.Reciprocal(ctx.op.Mul(y, y))
    inner = ctx.op.Sub(c(ctx, 1 / 30, x), ctx.op.Mul(ixx, c(ctx, 1 / 42, x)))
    inner = ctx.op.Mul(ixx, ctx.op.Sub(c(ctx, 1 / 6, x), ctx.op.Mul(ixx, inner)))
    tail = ctx.op.Add(ctx.op.Add(one, ctx.op.Reciprocal(ctx.op.Add(y, y))), inner)
    result = ctx.op.Add(acc, ctx.op.Div(tail, y))
    return ctx.op.Where(reflect, ctx.op.Sub(lead, result), result)


def zeta_of(ctx: Ctx, x: ir.Value, q: ir.Value) -> ir.Value:
    """The Hurwitz zeta function ``sum_k (q + k)^-x`` of two float64 values (Cephes' method).

    The first terms are summed directly (a ``Loop``: q < 0 needs as many as it takes to reach q + k >= 9),
    the rest by the Euler-Maclaurin formula at ``w = q + N``.
    """
    x, q = broadcast(ctx, x, q)
    zero, one, nine = c(ctx, 0.0, x), c(ctx, 1.0, x), c(ctx, 9.0, x)
    q_pole = ctx.op.And(ctx.op.LessOrEqual(q, zero), is_integer(ctx, q))
    q_bad = ctx.op.And(ctx.op.LessOrEqual(q, zero), ctx.op.Not(is_integer(ctx, x)))
    settled = ctx.op.Or(ctx.op.Or(q_pole, q_bad), ctx.op.Or(ctx.op.IsInf(q), ctx.op.IsNaN(q)))
    terms = ctx.op.Max(nine, ctx.op.Ceil(ctx.op.Sub(nine, q)))
    terms = ctx.op.Where(settled, nine, terms)
    terms = ctx.op.Min(terms, c(ctx, float(_ZETA_MAX_TERMS), x))
    padded = ctx.op.Concat(ctx.op.Reshape(terms, ctx.const([-1], I64)), ctx.const([0.0], F64), axis=0)
    trips = ctx.op.Cast(ctx.op.ReduceMax(padded, keepdims=0), to=int(I64))

    def step(body: Ctx, i: ir.Value, values: list[ir.Value]) -> tuple[list[ir.Value], None]:
        k = body.op.Cast(i, to=int(F64))
        term = body.op.Pow(body.op.Add(q, k), body.op.Neg(x))
        return [body.op.Add(values[0], body.op.Where(body.op.Less(k, terms), term, zero))], None

    (s,) = loop(ctx, "zeta_sum", trips, [ctx.op.Expand(zero, ctx.op.Shape(x))], step)
    w = ctx.op.Add(q, terms)
    b = ctx.op.Pow(w, ctx.op.Neg(x))
    s = ctx.op.Add(s, ctx.op.Div(ctx.op.Mul(b, w), ctx.op.Sub(x, one)))
    s = ctx.op.Add(s, ctx.op.Mul(c(ctx, 0.5, x), b))
    # the j-th Euler-Maclaurin term is a b B_(2j+2) / (2j+2)! with a = x (x+1) ... (x+2j), b = w^-(x+2j+1)
    a = x
    for j, coeff in enumerate(_ZETA_EM):
        if j:
            a = ctx.op.Mul(a, ctx.op.Mul(ctx.op.Add(x, c(ctx, 2.0 * j - 1, x)), ctx.op.Add(x, c(ctx, 2.0 * j, x))))
            b = ctx.op.Div(b, w)
        b = ctx.op.Div(b, w)
        s = ctx.op.Add(s, ctx.op.Div(ctx.op.Mul(a, b), c(ctx, coeff, x)))
    return select(ctx, s, (ctx.op.Equal(x, one), math.inf), (ctx.op.Less(x, one), math.nan),
                  (q_pole, math.inf), (q_bad, math.nan))


@aten(aten_.special_zeta.default, aten_.special_zeta.self_scalar, aten_.special_zeta.other_scalar)
def special_zeta(ctx: Ctx, x: ir.Value | float, q: ir.Value | float) -> ir.Value:
    """special_zeta(Tensor self, Tensor other) -> Tensor (computed in float64, as torch accumulates)"""
    x, q = ctx.as_value(x, dtype=F64), ctx.as_value(q, dtype=F64)
    return ctx.cast(zeta_of(ctx, x, q), ctx.out_dtype())


@aten(aten_.polygamma.default)
def polygamma(ctx: Ctx, n: int, x: ir.Value) -> ir.Value:
    """polygamma(int n, Tensor self) -> Tensor

    Orders 0 and 1 follow torch's digamma and trigamma recipes in the input's precision; higher orders are
    ``(-1)^(n+1) n! zeta(n + 1, x)``, the zeta function in float64.
    """
    if n < 0:
        raise ctx.unsupported(f"polygamma of negative order {n}", fix="polygamma is defined for n >= 0")
    if n <= 1:
        return unary(ctx, x, _digamma if n == 0 else _trigamma)

    def build(ctx: Ctx, x: ir.Value) -> ir.Value:
        # torch multiplies in the input's precision, where n! overflows from n = 35 on in float32
        factorial = float(math.factorial(n)) if n <= 170 else math.inf
        zeta = ctx.cast(zeta_of(ctx, ctx.const(float(n + 1), F64), ctx.cast(x, F64)), x.dtype)
        return ctx.op.Mul(c(ctx, factorial if n % 2 else -factorial, x), zeta)

    return unary(ctx, x, build)


def _igamma_series_cf(ctx: Ctx, a: ir.Value, x: ir.Value, settled: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(P, Q) of float64 ``a, x > 0``: the power series of P where x < a + 1, else Legendre's continued
    fraction of Q by Lentz's method, iterated in one ``Loop`` until every element has converged."""
    one, two = c(ctx, 1.0, a), c(ctx, 2.0, a)
    tiny, eps = c(ctx, 1e-300, a), c(ctx, 1e-15, a)
    use_series = ctx.op.Less(x, ctx.op.Add(a, one))
    inv_a = ctx.op.Reciprocal(a)
    b0 = ctx.op.Sub(ctx.op.Add(x, one), a)
    d0 = ctx.op.Reciprocal(b0)
    init = [a, inv_a, inv_a, b0, ctx.op.Expand(c(ctx, 1e300, a), ctx.op.Shape(a)), d0, d0]

    def step(body: Ctx, i: ir.Value, v: list[ir.Value]) -> tuple[list[ir.Value], ir.Value]:
        ap, term, total, b, cc, d, h = v
        op = body.op
        ap = op.Add(ap, one)
        term = op.Mul(term, op.Div(x, ap))
        total = op.Add(total, term)
        k = op.Add(op.Cast(i, to=int(F64)), one)
        an = op.Neg(op.Mul(k, op.Sub(k, a)))
        b = op.Add(b, two)
        d = op.Add(op.Mul(an, d), b)
        d = op.Where(op.Less(op.Abs(d), tiny), tiny, d)
        cc = op.Add(b, op.Div(an, cc))
        cc = op.Where(op.Less(op.Abs(cc), tiny), tiny, cc)
        d = op.Reciprocal(d)
        delta = op.Mul(d, cc)
        h = op.Mul(h, delta)
        series_done = op.LessOrEqual(op.Abs(term), op.Mul(op.Abs(total), eps))
        cf_done = op.LessOrEqual(op.Abs(op.Sub(delta, one)), eps)
        converged = op.Or(op.And(use_series, series_done), op.And(op.Not(use_series), cf_done))
        done = op.Or(converged, op.Or(settled, op.IsNaN(op.Add(total, h))))
        return [ap, term, total, b, cc, d, h], any_true(body, op.Not(done))

    trips = ctx.const(_IGAMMA_MAX_ITER, I64)
    total, h = (loop(ctx, "igamma_iter", trips, init, step)[i] for i in (2, 6))
    log_x = ctx.op.Log(ctx.op.Where(settled, one, x))
    prefactor = ctx.op.Exp(ctx.op.Sub(ctx.op.Sub(ctx.op.Mul(a, log_x), x), lgamma_of(ctx, a)))
    p_series = ctx.op.Mul(total, prefactor)
    q_cf = ctx.op.Mul(prefactor, h)
    p = ctx.op.Where(use_series, p_series, ctx.op.Sub(one, q_cf))
    q = ctx.op.Where(use_series, ctx.op.Sub(one, p_series), q_cf)
    return p, q


def _igamma(ctx: Ctx, a: ir.Value, x: ir.Value, upper: bool) -> ir.Value:
    """The regularized lower (P) or upper (Q) incomplete gamma function, with torch's boundary values."""
    a, x = broadcast(ctx, ctx.cast(a, F64), ctx.cast(x, F64))
    zero, nan = c(ctx, 0.0, a), c(ctx, math.nan, a)
    lo, hi = (1.0, 0.0) if upper else (0.0, 1.0)  # the values at x = 0 and x = inf
    invalid = ctx.op.Or(ctx.op.Less(x, zero), ctx.op.Less(a, zero))
    a_zero, x_zero = ctx.op.Equal(a, zero), ctx.op.Equal(x, zero)
    a_inf, x_inf = ctx.op.IsInf(a), ctx.op.IsInf(x)
    cases = [
        (invalid, nan),
        (a_zero, ctx.op.Where(ctx.op.Greater(x, zero), c(ctx, hi, a), nan)),
        (x_zero, c(ctx, lo, a)),
        (a_inf, ctx.op.Where(x_inf, nan, c(ctx, lo, a))),
        (x_inf, c(ctx, hi, a)),
    ]
    settled = cases[0][0]
    for cond, _ in cases[1:]:
        settled = ctx.op.Or(settled, cond)
    p, q = _igamma_series_cf(ctx, a, x, settled)
    return select(ctx, q if upper else p, *cases)


@aten(aten_.igamma.default)
def igamma(ctx: Ctx, a: ir.Value, x: ir.Value) -> ir.Value:
    """igamma(Tensor self, Tensor other) -> Tensor (computed in float64)"""
    return ctx.cast(_igamma(ctx, a, x, upper=False), ctx.out_dtype())


@aten(aten_.igammac.default)
def igammac(ctx: Ctx, a: ir.Value, x: ir.Value) -> ir.Value:
    """igammac(Tensor self, Tensor other) -> Tensor (computed in float64)"""
    return ctx.cast(_igamma(ctx, a, x, upper=True), ctx.out_dtype())
