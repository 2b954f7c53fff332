"""Inputs shared by the special-function op tests (test_special*.py): grids with each function's edge values
(poles, roots, infinities, NaN), the argument builders, and the op tables."""

from __future__ import annotations

import torch
from torch import randn

from onnxport.translate.registry import ops
from tests.ops._runner import OpCase

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
