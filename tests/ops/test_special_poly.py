"""Orthogonal polynomials (translate/ops/special_poly.py) against eager PyTorch: a tensor degree loops, a small
constant one unrolls, a large one loops."""

from __future__ import annotations

import pytest
import torch

import onnxport
from tests.ops._runner import OpCase, params, run_case
from tests.ops._special_inputs import FD, POLYNOMIALS, N, S, poly_args, poly_x

CASES = [
    # orthogonal polynomials: a tensor degree loops, a small constant one unrolls, a large one loops
    *[OpCase(p, args=poly_args, dtypes=FD, expect_ops=["Loop"], equal_nan=True) for p in POLYNOMIALS],
    *[OpCase(p, args=lambda: (*poly_x(), 7), name="n7", equal_nan=True) for p in POLYNOMIALS],
    *[OpCase(p, args=lambda: (*poly_x(), 45), name="n45", expect_ops=["Loop"], equal_nan=True) for p in POLYNOMIALS],
    *[OpCase(p, args=lambda: (0.3, torch.arange(-1.0, 14.0)), name="x_scalar") for p in POLYNOMIALS[::4]],
    OpCase(S.hermite_polynomial_h, args=lambda: (torch.arange(-3, 4), torch.arange(7)), name="int"),
    OpCase(S.chebyshev_polynomial_t, args=lambda: (torch.rand(3, 5) * 2 - 1, torch.tensor(9.0)), name="dynamic",
           dynamic_shapes=(({0: N}, None),)),
]


@pytest.mark.parametrize(("case", "dtype"), params(CASES))
def test_op(case: OpCase, dtype: torch.dtype | None) -> None:
    run_case(case, dtype)


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
