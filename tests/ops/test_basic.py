"""The ops the foundation itself needs: add, mul, comparisons, linear, sum, relu."""

import pytest
import torch
from torch import randn

from onnxport.translate.registry import ops
from tests.ops._runner import OpCase, params, run_case

aten = ops.aten  # an op this torch lacks is an AbsentOp: its cases are skipped
f32, f16 = torch.float32, torch.float16

CASES = [
    OpCase(aten.add.Tensor, args=lambda: (randn(2, 3), randn(2, 3)), expect_ops=["Add"], dtypes=(f32, f16)),
    OpCase(aten.add.Tensor, args=lambda: (randn(2, 3), 2.5), name="python_scalar"),
    OpCase(aten.add.Tensor, args=lambda: (randn(2, 3), randn(3)), kwargs={"alpha": 2}, name="alpha_broadcast"),
    OpCase(aten.add.Tensor, args=lambda: (torch.arange(6).reshape(2, 3), 1.5), name="int_plus_float"),
    OpCase(aten.mul.Tensor, args=lambda: (randn(4, 1), randn(1, 5)), expect_ops=["Mul"]),
    OpCase(aten.mul.Tensor, args=lambda: (randn(2, 2) > 0, randn(2, 2) > 0), name="bool", expect_ops=["And"]),
    OpCase(aten.gt.Scalar, args=lambda: (randn(3, 3), 0.1), expect_ops=["Greater"]),
    OpCase(aten.ne.Tensor, args=lambda: (torch.tensor([1, 2, 3]), torch.tensor([1, 0, 3])), expect_ops=["Not"]),
    OpCase(aten.linear.default, args=lambda: (randn(4, 3), randn(5, 3), randn(5)), name="2d", expect_ops=["MatMul"]),
    OpCase(aten.linear.default, args=lambda: (randn(2, 4, 3), randn(5, 3)), name="3d_nobias", expect_ops=["MatMul"]),
    OpCase(aten.sum.default, args=lambda: (randn(3, 4),), expect_ops=["ReduceSum"]),
    OpCase(aten.sum.dim_IntList, args=lambda: (randn(3, 4, 5), [0, -1], True), name="keepdim"),
    OpCase(aten.relu.default, args=lambda: (randn(3, 4),), expect_ops=["Relu"]),
]


@pytest.mark.parametrize(("case", "dtype"), params(CASES))
def test_op(case: OpCase, dtype: torch.dtype | None) -> None:
    run_case(case, dtype)
