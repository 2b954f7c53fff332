"""Special functions of the gamma family (translate/ops/special.py: gamma, digamma, polygamma, zeta, incomplete
gamma) against eager PyTorch; the error functions, Bessel functions, orthogonal polynomials and floating-point
ops have test files of their modules' names."""

from __future__ import annotations

import pytest
import torch
from torch import randn

from tests.ops._runner import OpCase, params, run_case
from tests.ops._special_inputs import (
    FD,
    FDH,
    GAMMA_X,
    POLYGAMMA_X,
    N,
    aten,
    f16,
    igamma_args,
    igamma_edges,
    mvlgamma3,
    polygamma_fn,
    special_zeta_scalar_x,
    unary_case,
    zeta_args,
    zeta_edges,
)

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
    OpCase(aten.lgamma.default, args=lambda: (torch.arange(-3, 30),), name="int"),
]


@pytest.mark.parametrize(("case", "dtype"), params(CASES))
def test_op(case: OpCase, dtype: torch.dtype | None) -> None:
    run_case(case, dtype)
