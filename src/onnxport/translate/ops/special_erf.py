"""The error-function family: erfc, erfcx, erfinv and ndtri (log_ndtr decomposes into erfc and erfcx).

Rational approximations are those of the Cephes Math Library (S. L. Moshier, BSD licence): ``ndtr.c``
for erfc and erf, ``ndtri.c`` for the normal quantile; erfinv is torch's recipe (a rational first guess
polished by two Newton steps). float16 and bfloat16 are computed in float32 and cast back. ONNX ``Erf``
is used in float32; onnxruntime has no float64 ``Erf``, so float64 uses Cephes' erf instead.
"""

from __future__ import annotations

import math

import onnx_ir as ir

from onnxport.translate.builder import Ctx
from onnxport.translate.ops._special import F64, c, polevl, rational, select, unary
from onnxport.translate.registry import aten, ops

aten_ = ops.aten

# erfc(x) = exp(-x^2) P(x)/Q(x) on [1, 8) and exp(-x^2) R(x)/S(x) from 8 up; erf(x) = x T(x^2)/U(x^2) on |x| < 1
_P = (2.46196981473530512524e-10, 5.64189564831068821977e-1, 7.46321056442269912687e0, 4.86371970985681366614e1,
      1.96520832956077098242e2, 5.26445194995477358631e2, 9.34528527171957607540e2, 1.02755188689515710272e3,
      5.57535335369399327526e2)
_Q = (1.0, 1.32281951154744992508e1, 8.67072140885989742329e1, 3.54937778887819891062e2, 9.75708501743205489753e2,
      1.82390916687909736289e3, 2.24633760818710981792e3, 1.65666309194161350182e3, 5.57535340817727675546e2)
_R = (5.64189583547755073984e-1, 1.27536670759978104416e0, 5.01905042251180477414e0, 6.16021097993053585195e0,
      7.40974269950448939160e0, 2.97886665372100240670e0)
_S = (1.0, 2.26052863220117276590e0, 9.39603524938001434673e0, 1.20489539808096656605e1, 1.70814450747565897222e1,
      9.60896809063285878198e0, 3.36907645100081516050e0)
_T = (9.60497373987051638749e0, 9.00260197203842689217e1, 2.23200534594684319226e3, 7.00332514112805075473e3,
      5.55923013010394962768e4)
_U = (1.0, 3.35617141647503099647e1, 5.21357949780152679795e2, 4.59432382970980127987e3, 2.26290000613890934246e4,
      4.92673942608635921086e4)

# ndtri: y - 1/2 on |y - 1/2| <= 3/8, then z = sqrt(-2 log y) on [2, 8) and [8, 64)
_NDTRI_P0 = (-5.99633501014107895267e1, 9.80010754185999661536e1, -5.66762857469070293439e1,
             1.39312609387279679503e1, -1.23916583867381258016e0)
_NDTRI_Q0 = (1.0, 1.95448858338141759834e0, 4.67627912898881538453e0, 8.63602421390890590575e1,
             -2.25462687854119370527e2, 2.00260212380060660359e2, -8.20372256168333339912e1,
             1.59056225126211695515e1, -1.18331621121330003142e0)
_NDTRI_P1 = (4.05544892305962419923e0, 3.15251094599893866154e1, 5.71628192246421288162e1, 4.40805073893200834700e1,
             1.46849561928858024014e1, 2.18663306850790267539e0, -1.40256079171354495875e-1,
             -3.50424626827848203418e-2, -8.57456785154685413611e-4)
_NDTRI_Q1 = (1.0, 1.57799883256466749731e1, 4.53907635128879210584e1, 4.13172038254672030440e1,
             1.50425385692907503408e1, 2.50464946208309415979e0, -1.42182922854787788574e-1,
             -3.80806407691578277194e-2, -9.33259480895457427372e-4)
_NDTRI_P2 = (3.23774891776946035970e0, 6.91522889068984211695e0, 3.93881025292474443415e0, 1.33303460815807542389e0,
             2.01485389549179081538e-1, 1.23716634817820021358e-2, 3.01581553508235416007e-4,
             2.65806974686737550832e-6, 6.23974539184983293730e-9)
_NDTRI_Q2 = (1.0, 6.02427039364742014255e0, 3.67983563856160859403e0, 1.37702099489081330271e0,
             2.16236993594496635890e-1, 1.34204006088543189037e-2, 3.28014464682127739104e-4,
             2.89247864745380683936e-6, 6.79019408009981274425e-9)

# erfinv's first guess (torch): a rational function of y^2 on |y| <= 0.7, of sqrt(-log((1-|y|)/2)) beyond
_ERFINV_A = (-0.140543331, 0.914624893, -1.645349621, 0.886226899)
_ERFINV_B = (0.012229801, -0.329097515, 1.442710462, -2.118377725, 1.0)
_ERFINV_C = (1.641345311, 3.429567803, -1.624906493, -1.970840454)
_ERFINV_D = (1.637067800, 3.543889200, 1.0)

_INV_SQRT_PI = 1 / math.sqrt(math.pi)


def erf_of(ctx: Ctx, x: ir.Value) -> ir.Value:
    """erf: ONNX ``Erf``, or Cephes' rational approximations in float64 (no onnxruntime kernel there)."""
    if x.dtype != F64:
        return ctx.op.Erf(x)
    ax = ctx.op.Abs(x)
    x2 = ctx.op.Mul(x, x)
    small = ctx.op.Mul(x, rational(ctx, x2, _T, _U))
    large = ctx.op.Mul(ctx.op.Sign(x), ctx.op.Sub(c(ctx, 1.0, x), _erfc_tail(ctx, ax)))
    return ctx.op.Where(ctx.op.Less(ax, c(ctx, 1.0, x)), small, large)


def _erfcx_tail(ctx: Ctx, ax: ir.Value) -> ir.Value:
    """``exp(x^2) erfc(x)`` for x >= 1: Cephes' P/Q below 8 and R/S below 50, then the continued fraction
    ``1/sqrt(pi) / (x + 1/2/(x + 1/(x + 3/2/(x + 2/x))))`` and its first term (whose squares would overflow)."""
    x2 = ctx.op.Mul(ax, ax)
    cf_num = ctx.op.Add(ctx.op.Mul(x2, ctx.op.Add(x2, c(ctx, 4.5, ax))), c(ctx, 2.0, ax))
    cf_den = ctx.op.Mul(ax, ctx.op.Add(ctx.op.Mul(x2, ctx.op.Add(x2, c(ctx, 5.0, ax))), c(ctx, 3.75, ax)))
    cf = ctx.op.Mul(c(ctx, _INV_SQRT_PI, ax), ctx.op.Div(cf_num, cf_den))
    return select(
        ctx,
        ctx.op.Div(c(ctx, _INV_SQRT_PI, ax), ax),
        (ctx.op.Less(ax, c(ctx, 8.0, ax)), rational(ctx, ax, _P, _Q)),
        (ctx.op.Less(ax, c(ctx, 50.0, ax)), rational(ctx, ax, _R, _S)),
        (ctx.op.Less(ax, c(ctx, 5e7, ax)), cf),
    )


def _erfc_tail(ctx: Ctx, ax: ir.Value) -> ir.Value:
    """erfc(x) for x >= 1."""
    return ctx.op.Mul(ctx.op.Exp(ctx.op.Neg(ctx.op.Mul(ax, ax))), _erfcx_tail(ctx, ax))


def erfc_of(ctx: Ctx, x: ir.Value) -> ir.Value:
    """erfc: ``1 - erf`` below 1 in magnitude, else ``exp(-x^2)`` times a rational function (no cancellation)."""
    one = c(ctx, 1.0, x)
    ax = ctx.op.Abs(x)
    tail = _erfc_tail(ctx, ax)
    tail = ctx.op.Where(ctx.op.Less(x, c(ctx, 0.0, x)), ctx.op.Sub(c(ctx, 2.0, x), tail), tail)
    return ctx.op.Where(ctx.op.Less(ax, one), ctx.op.Sub(one, erf_of(ctx, x)), tail)


def _erfcx(ctx: Ctx, x: ir.Value) -> ir.Value:
    ax = ctx.op.Abs(x)
    ex2 = ctx.op.Exp(ctx.op.Mul(x, x))
    one = c(ctx, 1.0, x)
    near = ctx.op.Mul(ex2, ctx.op.Sub(one, erf_of(ctx, ax)))
    positive = ctx.op.Where(ctx.op.Less(ax, one), near, _erfcx_tail(ctx, ax))
    # erfcx(-x) = 2 exp(x^2) - erfcx(x)
    negative = ctx.op.Sub(ctx.op.Mul(c(ctx, 2.0, x), ex2), positive)
    return ctx.op.Where(ctx.op.Less(x, c(ctx, 0.0, x)), negative, positive)


@aten(aten_.erfc.default)
def erfc(ctx: Ctx, x: ir.Value) -> ir.Value:
    """erfc(Tensor self) -> Tensor"""
    return unary(ctx, x, erfc_of)


@aten(aten_.special_erfcx.default)
def special_erfcx(ctx: Ctx, x: ir.Value) -> ir.Value:
    """special_erfcx(Tensor self) -> Tensor"""
    return unary(ctx, x, _erfcx)


def _erfinv(ctx: Ctx, y: ir.Value) -> ir.Value:
    one = c(ctx, 1.0, y)
    ay = ctx.op.Abs(y)
    y2 = ctx.op.Mul(y, y)
    central = ctx.op.Div(ctx.op.Mul(y, polevl(ctx, y2, _ERFINV_A)), polevl(ctx, y2, _ERFINV_B))
    z = ctx.op.Sqrt(ctx.op.Neg(ctx.op.Log(ctx.op.Div(ctx.op.Sub(one, ay), c(ctx, 2.0, y)))))
    outer = ctx.op.Mul(ctx.op.Sign(y), ctx.op.Div(polevl(ctx, z, _ERFINV_C), polevl(ctx, z, _ERFINV_D)))
    x = ctx.op.Where(ctx.op.LessOrEqual(ay, c(ctx, 0.7, y)), central, outer)
    slope = c(ctx, 2 / math.sqrt(math.pi), y)
    for _ in range(2):  # Newton: x -= (erf(x) - y) / erf'(x)
        deriv = ctx.op.Mul(slope, ctx.op.Exp(ctx.op.Neg(ctx.op.Mul(x, x))))
        x = ctx.op.Sub(x, ctx.op.Div(ctx.op.Sub(erf_of(ctx, x), y), deriv))
    edge = ctx.op.Mul(ctx.op.Sign(y), c(ctx, math.inf, y))
    return select(ctx, x, (ctx.op.Greater(ay, one), math.nan), (ctx.op.Equal(ay, one), edge))


@aten(aten_.erfinv.default)
def erfinv(ctx: Ctx, x: ir.Value) -> ir.Value:
    """erfinv(Tensor self) -> Tensor"""
    return unary(ctx, x, _erfinv)


def _ndtri(ctx: Ctx, y0: ir.Value) -> ir.Value:
    zero, one = c(ctx, 0.0, y0), c(ctx, 1.0, y0)
    e2 = c(ctx, 0.13533528323661269189, y0)  # exp(-2)
    flip = ctx.op.Greater(y0, ctx.op.Sub(one, e2))
    y = ctx.op.Where(flip, ctx.op.Sub(one, y0), y0)
    # |y - 1/2| <= 3/8: an odd rational function of y - 1/2
    h = ctx.op.Sub(y, c(ctx, 0.5, y0))
    h2 = ctx.op.Mul(h, h)
    mid = ctx.op.Add(h, ctx.op.Mul(h, ctx.op.Mul(h2, rational(ctx, h2, _NDTRI_P0, _NDTRI_Q0))))
    mid = ctx.op.Mul(mid, c(ctx, math.sqrt(2 * math.pi), y0))
    # tails: x = sqrt(-2 log y), corrected by a rational function of 1/x
    x = ctx.op.Sqrt(ctx.op.Mul(c(ctx, -2.0, y0), ctx.op.Log(y)))
    x0 = ctx.op.Sub(x, ctx.op.Div(ctx.op.Log(x), x))
    z = ctx.op.Reciprocal(x)
    near = ctx.op.Mul(z, rational(ctx, z, _NDTRI_P1, _NDTRI_Q1))
    far = ctx.op.Mul(z, rational(ctx, z, _NDTRI_P2, _NDTRI_Q2))
    tail = ctx.op.Sub(x0, ctx.op.Where(ctx.op.Less(x, c(ctx, 8.0, y0)), near, far))
    tail = ctx.op.Where(flip, tail, ctx.op.Neg(tail))
    out = ctx.op.Where(ctx.op.Greater(y, e2), mid, tail)
    return select(ctx, out, (ctx.op.Equal(y0, zero), -math.inf), (ctx.op.Equal(y0, one), math.inf),
                  (ctx.op.Or(ctx.op.Less(y0, zero), ctx.op.Greater(y0, one)), math.nan))


@aten(aten_.special_ndtri.default)
def special_ndtri(ctx: Ctx, x: ir.Value) -> ir.Value:
    """special_ndtri(Tensor self) -> Tensor"""
    return unary(ctx, x, _ndtri)
