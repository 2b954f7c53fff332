"""Searching and order statistics against eager PyTorch (nonzero, masked_select and unique: test_unique.py;
histograms: test_histogram.py)."""

import pytest
import torch
from torch import randn
from torch.export import Dim

from onnxport.translate.registry import ops
from tests.ops._runner import OpCase, params, run_case

aten = ops.aten  # an op this torch lacks is an AbsentOp: its cases are skipped
f32, f16, f64 = torch.float32, torch.float16, torch.float64
NAN = float("nan")


def dyn(*specs):
    """A dynamic_shapes spec for the runner's wrapper, whose forward takes ``*args``."""
    return (specs,)


def distinct(*shape: int) -> torch.Tensor:
    """Values without ties, so that indices are unambiguous."""
    n = 1
    for s in shape:
        n *= s
    return (torch.randperm(n).float() - n / 2).reshape(shape) / 4


def ints(*shape: int, high: int = 4) -> torch.Tensor:
    return torch.randint(-high, high, shape)


def with_nans(x: torch.Tensor, every: int = 3) -> torch.Tensor:
    flat = x.clone().reshape(-1)
    flat[::every] = NAN
    return flat.reshape(x.shape)


def searchsorted_right(s, v): return torch.searchsorted(s, v, side="right")
def searchsorted_sorter(s, v, order): return torch.searchsorted(s, v, sorter=order)
def bucketize_int32(x, b): return torch.bucketize(x, b, out_int32=True, right=True)
def isin_invert(x, t): return torch.isin(x, t, invert=True)
def isin_scalar(x): return torch.isin(x, 2)
def mode_last(x): return torch.mode(x)
def kth_values(x): return torch.kthvalue(x, 4).values
def nanmedian_all(x): return torch.nanmedian(x)
def nanmedian_rows(x): return torch.nanmedian(x, dim=1, keepdim=True)


SORTED = torch.tensor([-2.0, -1.0, -1.0, 0.5, 3.0])
PROBES = torch.tensor([[-3.0, -1.0, 0.0], [0.5, 3.0, NAN]])

CASES = [
    # searchsorted / bucketize: counting, with torch's NaN placement
    OpCase(aten.searchsorted.Tensor, args=lambda: (SORTED, PROBES), expect_ops=["ReduceSum"]),
    OpCase(searchsorted_right, args=lambda: (SORTED, PROBES)),
    OpCase(aten.searchsorted.Tensor, args=lambda: (torch.sort(randn(3, 6))[0], randn(3, 4)), name="rows"),
    OpCase(searchsorted_sorter, args=lambda: (torch.tensor([3.0, -1.0, 0.5]), randn(2, 3),
                                              torch.tensor([1, 2, 0]))),
    OpCase(aten.searchsorted.Scalar, args=lambda: (torch.arange(6), 3), kwargs={"right": True}, name="scalar"),
    OpCase(aten.searchsorted.Tensor, args=lambda: (torch.arange(0, 12, 2), ints(3, 4, high=13)),
           kwargs={"out_int32": True}, name="int"),
    OpCase(aten.bucketize.Tensor, args=lambda: (PROBES, SORTED)),
    OpCase(bucketize_int32, args=lambda: (randn(4, 5), torch.tensor([-1.0, 0.0, 1.0]))),
    OpCase(aten.bucketize.Tensor, args=lambda: (randn(7, 2), torch.tensor([-1.0, 0.0, 1.0])), name="dyn",
           dynamic_shapes=dyn({0: Dim("n", min=2)}, None)),
    # isin: every element against every test element
    OpCase(aten.isin.Tensor_Tensor, args=lambda: (ints(3, 4), ints(5)), expect_ops=["Equal"]),
    OpCase(isin_invert, args=lambda: (torch.tensor([1.0, NAN, 2.0]), torch.tensor([NAN, 2.0]))),
    OpCase(isin_scalar, args=lambda: (ints(6),)),
    OpCase(aten.isin.Scalar_Tensor, args=lambda: (3, ints(4)), name="scalar_element"),
    OpCase(aten.isin.Tensor_Tensor, args=lambda: (ints(3), torch.zeros(0, dtype=torch.int64)), name="no_tests"),
    # order statistics
    OpCase(kth_values, args=lambda: (ints(3, 9),), expect_ops=["TopK"], dtypes=(f32, f16)),
    # the index among ties is where torch's quickselect leaves it: that quickselect runs in a Loop
    OpCase(aten.kthvalue.default, args=lambda: (ints(4, 7, 3, high=2), 3, 1), name="ties", expect_ops=["Loop"]),
    OpCase(aten.kthvalue.default, args=lambda: (ints(6, 20, high=3).float(), 11), name="ties_float",
           dtypes=(f32, f16)),
    OpCase(aten.kthvalue.default, args=lambda: (with_nans(ints(5, 8).float(), 3), 6, -1, True), name="nan",
           equal_nan=True),
    OpCase(aten.kthvalue.default, args=lambda: (distinct(4, 3), 4, 0, True), name="keepdim"),
    OpCase(aten.kthvalue.default, args=lambda: (torch.tensor(2.0), 1), name="scalar"),
    OpCase(aten.kthvalue.default, args=lambda: (ints(9, 4), 3, 0), name="dyn",
           dynamic_shapes=dyn({0: Dim("n", min=3)}, None, None)),
    OpCase(mode_last, args=lambda: (torch.tensor([[3, 1, 2, 3, 1, 5, 1, 3], [0, 0, 4, 4, 4, 0, 2, 2]]),)),
    OpCase(aten.mode.default, args=lambda: (ints(3, 6, 2, high=2), 1, True), name="keepdim"),
    OpCase(aten.mode.default, args=lambda: (distinct(2, 7),), name="distinct"),
    OpCase(nanmedian_all, args=lambda: (with_nans(distinct(3, 5)),)),
    OpCase(nanmedian_all, args=lambda: (torch.full((4,), NAN),), name="all_nan", equal_nan=True),
    OpCase(nanmedian_rows, args=lambda: (torch.tensor([[NAN, NAN, NAN], [1.0, NAN, 3.0], [NAN, 2.0, 0.5]]),),
           equal_nan=True),
    OpCase(aten.nanmedian.dim, args=lambda: (ints(3, 4), 0), name="int"),
    OpCase(aten.nanmedian.dim, args=lambda: (with_nans(distinct(5, 3), 4), 0), name="dyn",
           dynamic_shapes=dyn({0: Dim("n", min=2)}, None)),
    # cummax / cummin: the index of the last running extreme, NaN sticking from where it appears
    OpCase(aten.cummax.default, args=lambda: (ints(3, 6), 1), expect_ops=["ReduceMax"]),
    OpCase(aten.cummin.default, args=lambda: (ints(5, 3), 0)),
    OpCase(aten.cummax.default, args=lambda: (torch.tensor([1.0, NAN, 2.0, NAN, 0.0, 3.0]), 0), name="nan",
           equal_nan=True),
    OpCase(aten.cummin.default, args=lambda: (randn(2, 4, 3), -2), name="float", dtypes=(f32, f16)),
    OpCase(aten.cummax.default, args=lambda: (randn(3, 4) > 0, 1), name="bool"),
    OpCase(aten.cummin.default, args=lambda: (torch.tensor(2.0), 0), name="scalar"),
    OpCase(aten.cummax.default, args=lambda: (ints(6, 2), 0), name="dyn",
           dynamic_shapes=dyn({0: Dim("n", min=2)}, None)),
]


@pytest.mark.parametrize(("case", "dtype"), params(CASES))
def test_op(case: OpCase, dtype: torch.dtype | None) -> None:
    run_case(case, dtype)
