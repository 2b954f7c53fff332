"""Matrix products against eager PyTorch."""

import pytest
import torch
from torch import randn

from onnxport.translate.registry import ops
from tests.ops._runner import OpCase, params, run_case

aten = ops.aten  # an op this torch lacks is an AbsentOp: its cases are skipped
F = torch.nn.functional
f32, f16 = torch.float32, torch.float16
Dim = torch.export.Dim
F16_TOL = {f16: (2e-2, 2e-2)}


def ints(*shape: int) -> torch.Tensor:
    return torch.randint(-4, 5, shape)


def einsum_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.einsum("ij,jk->ik", a, b)


def einsum_batch_ellipsis(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.einsum("...ij, ...jk -> ...ik", a, b)


def einsum_implicit_trace(a: torch.Tensor) -> torch.Tensor:
    return torch.einsum("ii", a)


def einsum_three(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    return torch.einsum("bi,ij,bj->b", a, b, c)


def matmul_op(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b


CASES = [
    # linear
    OpCase(aten.linear.default, args=lambda: (randn(4, 3), randn(5, 3), randn(5)), name="2d", expect_ops=["MatMul"],
           dtypes=(f32, f16), tol=F16_TOL),
    OpCase(aten.linear.default, args=lambda: (randn(3), randn(5, 3), randn(5)), name="1d_input", expect_ops=["MatMul"]),
    OpCase(aten.linear.default, args=lambda: (randn(3), randn(5, 3)), name="1d_input_nobias"),
    OpCase(aten.linear.default, args=lambda: (randn(2, 4, 3), randn(5, 3), randn(5)), name="3d", dtypes=(f32, f16),
           tol=F16_TOL),
    OpCase(F.linear, args=lambda: (randn(2, 3, 4), randn(6, 4), randn(6)), name="dynamic",
           dynamic_shapes=(({0: Dim("b", min=2), 1: Dim("t", min=2)}, None, None),)),
    # matmul
    OpCase(aten.matmul.default, args=lambda: (randn(3, 4), randn(4, 5)), name="2d", expect_ops=["MatMul"],
           dtypes=(f32, f16), tol=F16_TOL),
    OpCase(aten.matmul.default, args=lambda: (randn(4), randn(4)), name="1d_1d"),
    OpCase(aten.matmul.default, args=lambda: (randn(3, 4), randn(4)), name="2d_1d"),
    OpCase(aten.matmul.default, args=lambda: (randn(4), randn(2, 4, 5)), name="1d_3d"),
    OpCase(aten.matmul.default, args=lambda: (randn(2, 1, 3, 4), randn(5, 4, 6)), name="broadcast", dtypes=(f32, f16),
           tol=F16_TOL),
    OpCase(aten.matmul.default, args=lambda: (ints(3, 4), ints(4, 2)), name="int"),
    OpCase(matmul_op, args=lambda: (randn(2, 3, 4), randn(4, 5)), name="dynamic",
           dynamic_shapes=(({0: Dim("b", min=2), 1: Dim("t", min=2)}, None),)),
    # mm / bmm / mv / dot / vdot / outer
    OpCase(aten.mm.default, args=lambda: (randn(3, 4), randn(4, 5)), expect_ops=["MatMul"], dtypes=(f32, f16),
           tol=F16_TOL),
    OpCase(aten.mm.default, args=lambda: (ints(3, 4), ints(4, 5)), name="int"),
    OpCase(aten.bmm.default, args=lambda: (randn(2, 3, 4), randn(2, 4, 5)), dtypes=(f32, f16), tol=F16_TOL),
    OpCase(aten.mv.default, args=lambda: (randn(3, 4), randn(4)), dtypes=(f32, f16), tol=F16_TOL),
    OpCase(aten.dot.default, args=lambda: (randn(5), randn(5)), dtypes=(f32, f16), tol=F16_TOL),
    OpCase(aten.dot.default, args=lambda: (ints(5), ints(5)), name="int"),
    OpCase(aten.vdot.default, args=lambda: (randn(5), randn(5))),
    OpCase(aten.outer.default, args=lambda: (randn(3), randn(4)), expect_ops=["Mul"], dtypes=(f32, f16)),
    OpCase(aten.outer.default, args=lambda: (ints(3), ints(2)), name="int"),
    OpCase(aten.outer.default, args=lambda: (randn(3) > 0, randn(2) > 0), name="bool"),
    # addmm / baddbmm / addmv
    OpCase(aten.addmm.default, args=lambda: (randn(3, 5), randn(3, 4), randn(4, 5)), expect_ops=["Gemm"],
           dtypes=(f32, f16), tol=F16_TOL),
    OpCase(aten.addmm.default, args=lambda: (randn(5), randn(3, 4), randn(4, 5)), kwargs={"beta": 0.5, "alpha": 2.0},
           name="beta_alpha_bcast"),
    OpCase(aten.addmm.default, args=lambda: (torch.full((3, 5), float("nan")), randn(3, 4), randn(4, 5)),
           kwargs={"beta": 0}, name="beta0_ignores_nan"),
    OpCase(aten.addmm.default, args=lambda: (ints(3, 5), ints(3, 4), ints(4, 5)), kwargs={"beta": 2, "alpha": 3},
           name="int", expect_ops=["MatMul"]),
    OpCase(aten.baddbmm.default, args=lambda: (randn(2, 3, 5), randn(2, 3, 4), randn(2, 4, 5)), dtypes=(f32, f16),
           tol=F16_TOL),
    OpCase(aten.baddbmm.default, args=lambda: (randn(3, 1), randn(2, 3, 4), randn(2, 4, 5)),
           kwargs={"beta": 0.25, "alpha": -1.5}, name="beta_alpha_bcast"),
    OpCase(aten.baddbmm.default, args=lambda: (torch.full((2, 3, 5), float("nan")), randn(2, 3, 4), randn(2, 4, 5)),
           kwargs={"beta": 0}, name="beta0"),
    OpCase(aten.addmv.default, args=lambda: (randn(3), randn(3, 4), randn(4)), kwargs={"beta": 2.0, "alpha": 0.5},
           dtypes=(f32, f16), tol=F16_TOL),
    OpCase(aten.addmv.default, args=lambda: (randn(3), randn(3, 4), randn(4)), name="default"),
    # einsum
    OpCase(einsum_mm, args=lambda: (randn(3, 4), randn(4, 5)), expect_ops=["Einsum"], dtypes=(f32, f16), tol=F16_TOL),
    OpCase(einsum_batch_ellipsis, args=lambda: (randn(2, 3, 4), randn(2, 4, 5))),
    OpCase(einsum_implicit_trace, args=lambda: (randn(4, 4),)),
    OpCase(einsum_three, args=lambda: (randn(2, 3), randn(3, 4), randn(2, 4))),
    OpCase(einsum_mm, args=lambda: (ints(3, 4), ints(4, 5)), name="int"),
]


@pytest.mark.parametrize(("case", "dtype"), params(CASES))
def test_op(case: OpCase, dtype: torch.dtype | None) -> None:
    run_case(case, dtype)
