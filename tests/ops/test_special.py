"""Special functions (gamma, zeta, incomplete gamma, error functions, Bessel and Airy functions, orthogonal
polynomials) and floating-point manipulation ops against eager PyTorch."""

from __future__ import annotations

import pytest
import torch
from torch import randn

import onnxport
from onnxport.translate.registry import ops
from tests.ops._runner import OpCase, params, run_case

aten = ops.aten  # an op this torch lacks is an AbsentOp: its cases are skipped
S = torch.special
f16, f32, f64 = torch.float16, torch.float32, torch.float64
FD, FDH = (f32, f64), (f32, f64, f16)
inf, nan = float("inf"), float("nan")
N = torch.export.Dim("n", min=2)


def grid(lo: float, hi: float, steps: int, *extra: float) -> torch.Tensor:
    """Evenly spaced points plus the edge values ``extra``."""
    return torch.cat([torch.linspace(lo, hi, steps), torch.tensor(extra, dtype=torch.float32)])


# gamma family: poles at 0 and the negative integers, the roots of lgamma at 1 and 2, infinities
GAMMA_X = grid(-12.3, 25.0, 400, 0.0, -0.0, 1.0, 2.0, -1.0, -3.0, -2.5, 1e-6, -1e-6, 1.4616321, 1e20, inf, -inf, nan)
POLYGAMMA_X = grid(-8.7, 9.3, 181, 0.5, 1.0, 2.0, 1e-3, 30.0)
ERF_X = grid(-10.0, 10.0, 401, 0.0, -0.0, 1.0, -1.0, 8.0, 27.0, inf, -inf, nan)
ERFCX_X = grid(-9.0, 60.0, 400, 0.0, 1.0, 8.0, 50.0, 1e4, 1e8, 1e30, inf, nan)
UNIT = grid(-0.9999, 0.9999, 401, 0.0, 0.99999, -0.99999, 1.0, -1.0, 1.5, nan)
PROB = grid(1e-4, 1 - 1e-4, 401, 0.0, 1.0, 1e-10, 1e-30, 0.13533528, 0.86466472, 1.5, -0.1, nan)
BESSEL_X = grid(-40.0, 40.0, 801, 0.0, -0.0, 1e-6, 2.0, 2.09, -2.09, 5.0, 8.0, -8.0, 120.0, 1e3, inf, -inf, nan)


def pos_bessel() -> tuple[torch.Tensor]:
    return (grid(1e-3, 40.0, 400, 0.0, 2.0, 1e3, -1.0, inf, nan),)


def zeta_args() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.rand(12, 1) * 9 + 1.1, torch.cat([torch.linspace(-6.7, 12.0, 20), torch.tensor([0.3, 2.0, 1e5])])


def zeta_edges() -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.tensor([1.0, 0.5, 2.0, 3.0, 2.5, 2.0, 4.0, 30.0, 2.0, inf, nan])
    q = torch.tensor([1.0, 1.0, -3.0, -2.5, -2.5, 0.0, 1e-8, 0.7, 1e6, 2.0, 1.0])
    return x, q


def igamma_args() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.rand(15, 1) * 30 + 1e-3, torch.rand(1, 20) * 40


def igamma_edges() -> tuple[torch.Tensor, torch.Tensor]:
    a = torch.tensor([0.0, 0.0, 1.0, -1.0, 2.0, inf, inf, 3.0, 1e3, 1e4, 150.0, 1e-3, nan, 5.0])
    x = torch.tensor([1.0, 0.0, 0.0, 1.0, -1.0, 2.0, inf, inf, 1010.0, 9.9e3, 140.0, 1e-3, 1.0, 1e-30])
    return a, x


def poly_args() -> tuple[torch.Tensor, torch.Tensor]:
    x = grid(-1.4, 1.4, 29, 1.0, -1.0, 0.0, 0.5, 0.999, -0.999, 3.0, -8.5, inf).reshape(-1, 1)
    n = torch.tensor([-1.7, -1.0, 0.0, 0.6, 1.0, 2.0, 3.6, 5.0, 7.0, 8.0, 9.0, 12.0, 30.0, 129.0, nan, inf])
    return x, n.reshape(1, -1)


def poly_x() -> tuple[torch.Tensor]:
    return (grid(-1.4, 1.4, 57, 1.0, -1.0, 0.0, 3.0, -8.5),)


def floats(*extra: float) -> torch.Tensor:
    special = [0.0, -0.0, 1.0, -1.0, 0.5, 3.0, inf, -inf, nan, 1e-45, -1e-45, 3.4e38, 2.0**-126, 2.0**-127, 2.0**100]
    return torch.cat([torch.tensor(special + list(extra)), randn(40) * 10])


def float_pair() -> tuple[torch.Tensor, torch.Tensor]:
    a = floats(7.0, 7.0)
    return a, a.flip(0)


def polygamma_fn(n: int):
    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.polygamma(n, x)

    fn.__name__ = f"polygamma_{n}"
    return fn


def logcumsumexp_input() -> tuple[torch.Tensor]:
    x = randn(4, 6, 5) * 3
    x[0, 0, 0], x[1, 2, 3], x[3, 1, 1] = 1e4, -inf, inf
    x[2, :, 1] = -inf
    return (x,)


def mvlgamma3(x: torch.Tensor) -> torch.Tensor:
    return torch.mvlgamma(x, 3)


def special_zeta_scalar_x(q: torch.Tensor) -> torch.Tensor:
    return S.zeta(3.0, q)


def unary_case(op, make, dtypes, **kw) -> OpCase:
    return OpCase(op, args=lambda: (make,), dtypes=dtypes, equal_nan=True, **kw)


BESSEL = {  # op -> (input, dtypes)
    aten.i0.default: (BESSEL_X, FDH), aten.special_i0e.default: (BESSEL_X, FDH),
    aten.special_i1.default: (BESSEL_X, FDH), aten.special_i1e.default: (BESSEL_X, FDH),
    aten.special_modified_bessel_i0.default: (BESSEL_X, FD),
    aten.special_modified_bessel_i1.default: (BESSEL_X, FD), aten.special_bessel_j0.default: (BESSEL_X, FD),
    aten.special_bessel_j1.default: (BESSEL_X, FD), aten.special_bessel_y0.default: (BESSEL_X, FD),
    aten.special_bessel_y1.default: (BESSEL_X, FD), aten.special_spherical_bessel_j0.default: (BESSEL_X, FD),
    aten.special_airy_ai.default: (BESSEL_X, FD),
}
K_BESSEL = (aten.special_modified_bessel_k0.default, aten.special_modified_bessel_k1.default,
            aten.special_scaled_modified_bessel_k0.default, aten.special_scaled_modified_bessel_k1.default)
POLYNOMIALS = (S.chebyshev_polynomial_t, S.chebyshev_polynomial_u, S.chebyshev_polynomial_v, S.chebyshev_polynomial_w,
               S.shifted_chebyshev_polynomial_t, S.shifted_chebyshev_polynomial_u, S.shifted_chebyshev_polynomial_v,
               S.shifted_chebyshev_polynomial_w, S.hermite_polynomial_h, S.hermite_polynomial_he,
               S.laguerre_polynomial_l, S.legendre_polynomial_p)

CASES = [
    # gamma family
    unary_case(aten.lgamma.default, GAMMA_X, FDH),
    unary_case(aten.digamma.default, GAMMA_X, FDH),
    *[OpCase(polygamma_fn(n), args=lambda: (POLYGAMMA_X,), dtypes=FD, equal_nan=True) for n in range(5)],
    OpCase(polygamma_fn(1), args=lambda: (GAMMA_X,), name="edges", equal_nan=True),
    OpCase(polygamma_fn(3), args=lambda: (POLYGAMMA_X,), name="half", dtypes=(f16,), equal_nan=True),
    OpCase(polygamma_fn(2), args=lambda: (randn(3, 4) * 4,), name="dynamic", expect_ops=["Loop"],
           dynamic_shapes=(({0: N},),)),
    OpCase(mvlgamma3, args=lambda: (torch.rand(5, 5) * 8 + 1.01,), dtypes=FD),
    OpCase(aten.special_zeta.default, args=zeta_args, dtypes=FD, expect_ops=["Loop"], equal_nan=True),
    OpCase(aten.special_zeta.default, args=zeta_edges, name="edges", dtypes=FD, equal_nan=True),
    OpCase(special_zeta_scalar_x, args=lambda: (torch.linspace(-4.5, 6.0, 12),)),
    OpCase(aten.special_zeta.other_scalar, args=lambda: (torch.rand(8) * 5 + 1.5, 0.5), name="q_scalar"),
    OpCase(aten.special_zeta.default, args=lambda: (torch.arange(2, 8), torch.arange(1, 7)), name="int"),
    OpCase(aten.igamma.default, args=igamma_args, dtypes=FD, expect_ops=["Loop"]),
    OpCase(aten.igammac.default, args=igamma_args, dtypes=FD),
    OpCase(aten.igamma.default, args=igamma_edges, name="edges", dtypes=FD, equal_nan=True),
    OpCase(aten.igammac.default, args=igamma_edges, name="edges", dtypes=FD, equal_nan=True),
    OpCase(aten.igamma.default, args=lambda: (torch.rand(6) * 4 + 0.1, torch.rand(6) * 5), name="half", dtypes=(f16,)),
    # error functions
    unary_case(aten.erfc.default, ERF_X, FDH),
    unary_case(aten.special_erfcx.default, ERFCX_X, FD),
    OpCase(S.log_ndtr, args=lambda: (grid(-40.0, 10.0, 300, -1.0, 0.0, inf, -inf, nan),), dtypes=FD, equal_nan=True),
    unary_case(aten.erfinv.default, UNIT, FDH),
    unary_case(aten.special_ndtri.default, PROB, FD),
    OpCase(aten.erfc.default, args=lambda: (torch.randint(-3, 4, (5,)),), name="int"),
    OpCase(aten.lgamma.default, args=lambda: (torch.arange(-3, 30),), name="int"),
    OpCase(aten.special_bessel_y0.default, args=lambda: (torch.arange(0, 30),), name="int"),
    # Bessel and Airy functions
    *[unary_case(op, x, dts) for op, (x, dts) in BESSEL.items()],
    *[OpCase(op, args=pos_bessel, dtypes=FD, equal_nan=True) for op in K_BESSEL],
    # orthogonal polynomials: a tensor degree loops, a small constant one unrolls, a large one loops
    *[OpCase(p, args=poly_args, dtypes=FD, expect_ops=["Loop"], equal_nan=True) for p in POLYNOMIALS],
    *[OpCase(p, args=lambda: (*poly_x(), 7), name="n7", equal_nan=True) for p in POLYNOMIALS],
    *[OpCase(p, args=lambda: (*poly_x(), 45), name="n45", expect_ops=["Loop"], equal_nan=True) for p in POLYNOMIALS],
    *[OpCase(p, args=lambda: (0.3, torch.arange(-1.0, 14.0)), name="x_scalar") for p in POLYNOMIALS[::4]],
    OpCase(S.hermite_polynomial_h, args=lambda: (torch.arange(-3, 4), torch.arange(7)), name="int"),
    OpCase(S.chebyshev_polynomial_t, args=lambda: (torch.rand(3, 5) * 2 - 1, torch.tensor(9.0)), name="dynamic",
           dynamic_shapes=(({0: N}, None),)),
    # floating-point manipulation
    OpCase(aten.copysign.Tensor, args=float_pair, dtypes=FDH, tol={f32: (0, 0)}, equal_nan=True),
    OpCase(aten.copysign.Scalar, args=lambda: (floats(), -0.0), equal_nan=True),
    OpCase(torch.copysign, args=lambda: (torch.randint(-5, 5, (10,)), randn(10)), name="int_float"),
    OpCase(aten.signbit.default, args=lambda: (floats(),), dtypes=FDH),
    OpCase(aten.signbit.default, args=lambda: (torch.randint(-5, 5, (10,)),), name="int"),
    OpCase(aten.ldexp.Tensor, args=lambda: (floats(), torch.randint(-20, 20, (55,))), dtypes=FDH, equal_nan=True,
           tol={f32: (0, 0)}),
    OpCase(aten.ldexp.Tensor, args=lambda: (randn(8), randn(8) * 4), name="float_exponent"),
    OpCase(aten.hypot.default, args=float_pair, dtypes=FDH, equal_nan=True, tol={f32: (0, 2e-7)}),
    OpCase(aten.nextafter.default, args=float_pair, dtypes=FDH, equal_nan=True, tol={f32: (0, 0), f64: (0, 0)}),
    OpCase(aten.nextafter.default, name="subnormal_and_powers", tol={f32: (0, 0)},
           args=lambda: (torch.tensor([2.0**-149, -(2.0**-126), 1.0, 2.0**127, 65504.0, 6e-8]), torch.zeros(6))),
    OpCase(aten.fmax.default, args=float_pair, dtypes=FDH, equal_nan=True, tol={f32: (0, 0)}),
    OpCase(aten.fmin.default, args=float_pair, dtypes=FDH, equal_nan=True, tol={f32: (0, 0)}),
    OpCase(aten.fmax.default, args=lambda: (torch.randint(-5, 5, (8,)), torch.randint(-5, 5, (8,))), name="int"),
    OpCase(torch.frexp, args=lambda: (floats(),), dtypes=FDH, equal_nan=True, tol={f32: (0, 0), f64: (0, 0)}),
    *[OpCase(torch.logcumsumexp, args=logcumsumexp_input, kwargs={"dim": d}, name=f"dim{d}", dtypes=FD)
      for d in (0, 1, -1)],
    OpCase(torch.logcumsumexp, args=lambda: (randn(300) * 10,), kwargs={"dim": 0}, name="long", dtypes=(f32, f16)),
    OpCase(torch.logcumsumexp, args=lambda: (torch.tensor(2.5),), kwargs={"dim": 0}, name="scalar"),
    OpCase(torch.logcumsumexp, args=lambda: (randn(3, 0, 2),), kwargs={"dim": 1}, name="empty"),
    OpCase(torch.logcumsumexp, args=lambda: (randn(9, 3),), kwargs={"dim": 0}, name="dynamic", expect_ops=["Loop"],
           dynamic_shapes=(({0: N},),)),
    OpCase(torch.positive, args=lambda: (randn(3, 4),)),
]


@pytest.mark.parametrize(("case", "dtype"), params(CASES))
def test_op(case: OpCase, dtype: torch.dtype | None) -> None:
    run_case(case, dtype)


@pytest.mark.parametrize("length", [1, 2, 17, 64, 65])
def test_logcumsumexp_symbolic_length(length: int) -> None:
    """One export with a symbolic length runs the right number of doubling steps at every length."""

    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.logcumsumexp(x, 0)

    prog = onnxport.export(M(), (randn(9, 3),), dynamic_shapes=({0: torch.export.Dim("n")},), verify=False)
    x = randn(length, 3) * 4
    torch.testing.assert_close(prog(x), M()(x), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("fn", [S.chebyshev_polynomial_t, S.laguerre_polynomial_l], ids=lambda f: f.__name__)
def test_polynomial_degree_decided_at_run_time(fn) -> None:
    """A tensor degree is read when the model runs: one export serves degrees below and above the example's."""

    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
            return fn(x, n)

    x = torch.linspace(-1.2, 1.2, 25)
    prog = onnxport.export(M(), (x, torch.tensor(3.0)), verify=False)
    for degree in (0.0, 2.0, 11.0, 40.0):
        n = torch.tensor(degree)
        torch.testing.assert_close(prog(x, n), M()(x, n), atol=1e-4, rtol=1e-4)

