"""Floating-point manipulation (translate/ops/special_float.py: copysign, signbit, ldexp, hypot, nextafter,
fmax/fmin, frexp, logcumsumexp, positive) against eager PyTorch."""

from __future__ import annotations

import pytest
import torch
from torch import randn

import onnxport
from tests.ops._runner import OpCase, params, run_case
from tests.ops._special_inputs import FD, FDH, N, aten, f16, f32, f64, float_pair, floats, logcumsumexp_input

CASES = [
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
