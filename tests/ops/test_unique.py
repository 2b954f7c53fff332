"""Data-dependent sizes (translate/ops/unique.py: nonzero, nonzero_static, masked_select, unique,
unique_consecutive) against eager PyTorch: row-major coordinates, sorted values, inverses in the input's
shape, counts."""

import pytest
import torch
from torch import randn
from torch.export import Dim

from onnxport.translate.registry import ops
from tests.ops._runner import OpCase, params, run_case

aten = ops.aten  # an op this torch lacks is an AbsentOp: its cases are skipped
f16, f32, f64 = torch.float16, torch.float32, torch.float64
NAN = float("nan")


def dyn(*specs):
    """A dynamic_shapes spec for the runner's wrapper, whose forward takes ``*args``."""
    return (specs,)


def ints(*shape: int, high: int = 4) -> torch.Tensor:
    return torch.randint(-high, high, shape)


def nonzero_tuple(x): return torch.nonzero(x, as_tuple=True)
def argwhere(x): return torch.argwhere(x)
def unique_all(x): return torch.unique(x, return_inverse=True, return_counts=True)
def unique_rows(x): return torch.unique(x, dim=0, return_inverse=True, return_counts=True)
def unique_cols(x): return torch.unique(x, dim=1, return_inverse=True, return_counts=True)
def runs(x): return torch.unique_consecutive(x, return_inverse=True, return_counts=True)
def runs_rows(x): return torch.unique_consecutive(x, return_inverse=True, return_counts=True, dim=0)


CASES = [
    # nonzero and friends: row-major coordinates, a size known only at run time
    OpCase(aten.nonzero.default, args=lambda: (ints(3, 4, high=2),), expect_ops=["NonZero"]),
    OpCase(aten.nonzero.default, args=lambda: (torch.tensor(1.5),), name="scalar"),
    OpCase(aten.nonzero.default, args=lambda: (torch.zeros(0, 3),), name="empty"),
    OpCase(aten.nonzero.default, args=lambda: (torch.tensor([[0.0, NAN], [-0.0, 2.0]], dtype=f64),), name="float64"),
    OpCase(nonzero_tuple, args=lambda: (randn(4, 5) > 0,)),
    OpCase(argwhere, args=lambda: (ints(2, 3, 2, high=2),)),
    OpCase(argwhere, args=lambda: (randn(5, 3) > 0,), name="dyn", dynamic_shapes=dyn({0: Dim("n", min=2)})),
    OpCase(aten.nonzero_static.default, args=lambda: (ints(4, 3, high=2),), kwargs={"size": 20}, name="padded"),
    OpCase(aten.nonzero_static.default, args=lambda: (ints(4, 3, high=2),), kwargs={"size": 2, "fill_value": 7},
           name="truncated"),
    OpCase(aten.masked_select.default, args=lambda: (randn(3, 4), randn(3, 4) > 0), expect_ops=["Compress"],
           dtypes=(f32, f16)),
    OpCase(aten.masked_select.default, args=lambda: (randn(3, 1, 4), randn(5, 1) > 0), name="broadcast"),
    OpCase(aten.masked_select.default, args=lambda: (ints(4), torch.tensor(True)), name="scalar_mask"),
    # unique: sorted, inverse in the input's shape, counts
    OpCase(unique_all, args=lambda: (ints(4, 5),), expect_ops=["Unique"]),
    OpCase(unique_all, args=lambda: (torch.tensor([2.5, -1.0, 2.5, 0.0, -1.0]),), name="float", dtypes=(f32, f16)),
    OpCase(unique_all, args=lambda: (randn(3, 4) > 0,), name="bool"),
    OpCase(unique_all, args=lambda: (ints(4, 3).int(),), name="int32"),
    OpCase(unique_rows, args=lambda: (torch.tensor([[1, 2], [0, 5], [1, 2], [0, 1]]),)),
    OpCase(unique_cols, args=lambda: (torch.tensor([[1.0, 0.0, 1.0], [3.0, 2.0, 3.0]]),)),
    OpCase(runs, args=lambda: (torch.tensor([[1, 1, 2], [2, 2, 0], [0, 1, 1]]),)),
    OpCase(runs, args=lambda: (torch.tensor(3.0),), name="scalar"),
    OpCase(runs, args=lambda: (torch.zeros(0),), name="empty"),
    OpCase(runs_rows, args=lambda: (torch.tensor([[1, 2], [1, 2], [0, 2], [1, 2]]),)),
    OpCase(runs, args=lambda: (ints(9, high=2),), name="dyn", dynamic_shapes=dyn({0: Dim("n", min=2)})),
]


@pytest.mark.parametrize(("case", "dtype"), params(CASES))
def test_op(case: OpCase, dtype: torch.dtype | None) -> None:
    run_case(case, dtype)
