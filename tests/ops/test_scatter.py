"""Scatters into segments and bags, and bincount, against eager PyTorch (distances and products of several
operands: test_distance.py)."""

import pytest
import torch
import torch.nn.functional as F
from torch import randn
from torch.export import Dim

from onnxport.translate.registry import ops
from tests.ops._runner import OpCase, params, run_case

aten = ops.aten  # an op this torch lacks is an AbsentOp: its cases are skipped
f32, f16 = torch.float32, torch.float16


def dyn(*specs):
    """A dynamic_shapes spec for the runner's wrapper, whose forward takes ``*args``."""
    return (specs,)


def idx(*shape, high=3): return torch.randint(0, high, shape)


def index_reduce(x, i, s, *, reduce, include_self):
    return x.index_reduce(1, i, s, reduce, include_self=include_self)


def segments(data, lengths, *, reduce, initial=None, axis=0):
    return aten.segment_reduce(data, reduce, lengths=lengths, axis=axis, initial=initial, unsafe=True)


def segments_offsets(data, offsets, *, reduce):
    return aten.segment_reduce(data, reduce, offsets=offsets)


def put_(x, i, s, *, accumulate): return x.put(i, s, accumulate=accumulate)
def masked_scatter(x, m, s): return x.masked_scatter(m, s)


def bag(w, i, o, **kwargs): return F.embedding_bag(i, w, o, **kwargs)
def bag_2d(w, i, **kwargs): return F.embedding_bag(i, w, **kwargs)
def bag_weighted(w, i, o, psw, **kwargs): return F.embedding_bag(i, w, o, per_sample_weights=psw, **kwargs)


def bag_max_norm(w, i, o):
    w = w.clone()  # embedding_bag renormalises the rows it reads, in place
    return F.embedding_bag(i, w, o, max_norm=1.0, mode="mean"), w




BAG_INDICES = torch.tensor([3, 1, 4, 1, 5, 0, 2, 6, 5])
BAG_OFFSETS = torch.tensor([0, 2, 2, 6])  # bag 1 is empty
LENGTHS = torch.tensor([2, 0, 3, 1])

def bincount_weighted(x, w): return torch.bincount(x, w, minlength=12)


CASES = [
    # index_reduce: the 1-D index spread over source along dim
    *[
        OpCase(index_reduce, args=lambda: (randn(3, 5), idx(6, high=5), randn(3, 6)),
               kwargs={"reduce": reduce, "include_self": include}, name=f"{reduce}_self{int(include)}",
               expect_ops=["ScatterElements"])
        for reduce in ("prod", "mean", "amax", "amin") for include in (True, False)
    ],
    OpCase(index_reduce, args=lambda: (torch.randint(-9, 9, (2, 4)), torch.tensor([0, 0, 3]),
                                       torch.randint(-9, 9, (2, 3))),
           kwargs={"reduce": "mean", "include_self": True}, name="int_mean"),
    OpCase(aten.index_reduce.default, args=lambda: (torch.tensor(2.0), 0, torch.tensor([0]), torch.tensor(5.0),
                                                    "amax"), name="scalar"),
    # segment_reduce: lengths or offsets, batched lengths, initial, empty segments
    *[
        OpCase(segments, args=lambda: (randn(6, 3), LENGTHS), kwargs={"reduce": reduce}, name=reduce,
               equal_nan=True)
        for reduce in ("sum", "mean", "prod", "max", "min")
    ],
    *[
        OpCase(segments, args=lambda: (randn(6), LENGTHS), kwargs={"reduce": reduce, "initial": 2.0},
               name=f"{reduce}_initial")
        for reduce in ("sum", "mean", "max")
    ],
    OpCase(segments, args=lambda: (randn(7, 2), LENGTHS), kwargs={"reduce": "sum"}, name="short_lengths"),
    OpCase(segments, args=lambda: (randn(2, 5), torch.tensor([[1, 4, 0], [2, 2, 1]])),
           kwargs={"reduce": "max", "axis": 1, "initial": 0.0}, name="batched"),
    OpCase(segments_offsets, args=lambda: (randn(6, 2), torch.tensor([0, 1, 1, 4, 6])), kwargs={"reduce": "mean"},
           equal_nan=True),
    # put / masked_scatter
    OpCase(put_, args=lambda: (randn(3, 4), torch.tensor([[0, -1], [5, 7]]), randn(2, 2)),
           kwargs={"accumulate": False}, expect_ops=["ScatterElements"]),
    OpCase(put_, args=lambda: (randn(3, 4), torch.tensor([1, 1, -12, 3]), randn(4)), kwargs={"accumulate": True},
           name="accumulate"),
    OpCase(put_, args=lambda: (torch.arange(6).reshape(2, 3), torch.tensor([5, 0]), torch.tensor([-1, -2])),
           kwargs={"accumulate": True}, name="int"),
    OpCase(masked_scatter, args=lambda: (randn(3, 4), randn(3, 4) > 0, randn(20)), expect_ops=["CumSum"],
           dtypes=(f32, f16)),
    OpCase(masked_scatter, args=lambda: (randn(4), randn(3, 1) > 0, randn(3, 5)), name="broadcast"),
    OpCase(masked_scatter, args=lambda: (randn(3, 4) > 0, randn(3, 4) > 0, randn(12) > 0), name="bool"),
    OpCase(masked_scatter, args=lambda: (randn(2, 3), torch.zeros(2, 3, dtype=torch.bool), torch.zeros(0)),
           name="none"),
    # embedding_bag: modes, offsets with an empty bag, 2-D input, weights, padding, the last offset
    *[
        OpCase(bag, args=lambda: (randn(7, 3), BAG_INDICES, BAG_OFFSETS), kwargs={"mode": mode}, name=mode,
               expect_ops=["ScatterElements"])
        for mode in ("sum", "mean", "max")
    ],
    *[
        OpCase(bag, args=lambda: (randn(7, 3), BAG_INDICES, BAG_OFFSETS), kwargs={"mode": mode, "padding_idx": 1},
               name=f"{mode}_padding")
        for mode in ("sum", "mean", "max")
    ],
    # entries past the last offset: left out of sums, kept in max and in a mean's divisor, as torch does
    *[
        OpCase(bag, args=lambda: (randn(7, 3), BAG_INDICES, torch.tensor([0, 4, 6, 8])),
               kwargs={"mode": mode, "include_last_offset": True}, name=f"{mode}_last_offset")
        for mode in ("sum", "mean", "max")
    ],
    OpCase(bag_2d, args=lambda: (randn(7, 3), idx(4, 3, high=7)), kwargs={"mode": "max"}, name="2d"),
    OpCase(bag_weighted, args=lambda: (randn(7, 3), BAG_INDICES, BAG_OFFSETS, torch.rand(9)),
           kwargs={"mode": "sum", "padding_idx": 5}),
    OpCase(bag, args=lambda: (randn(7, 3), BAG_INDICES, BAG_OFFSETS), kwargs={"mode": "sum"}, name="f16",
           dtypes=(f16,)),
    OpCase(bag_max_norm, args=lambda: (randn(7, 3) * 2, BAG_INDICES, BAG_OFFSETS)),
    OpCase(bag, args=lambda: (randn(7, 3), idx(9, high=7), torch.tensor([0, 3])), kwargs={"mode": "mean"},
           name="dyn", dynamic_shapes=dyn(None, {0: Dim("n", min=4)}, None)),
    OpCase(torch.bincount, args=lambda: (torch.randint(0, 9, (20,)),), expect_ops=["ScatterElements"]),
    OpCase(bincount_weighted, args=lambda: (torch.randint(0, 9, (20,)), torch.rand(20)), name="weighted_minlength"),
    OpCase(torch.bincount, args=lambda: (torch.zeros(0, dtype=torch.int64),), name="empty"),
    # int64 counts of a uint8 input, float64 sums of int32 weights (torch 2.10's metadata has the input's dtype)
    OpCase(torch.bincount, args=lambda: (torch.randint(0, 9, (20,), dtype=torch.uint8),), name="uint8"),
    OpCase(torch.bincount, args=lambda: (torch.randint(0, 9, (20,)).int(), torch.randint(0, 3, (20,)).int()),
           name="int_weights"),
]


@pytest.mark.parametrize(("case", "dtype"), params(CASES))
def test_op(case: OpCase, dtype: torch.dtype | None) -> None:
    run_case(case, dtype)


def test_embedding_bag_bookkeeping_outputs_refused() -> None:
    """embedding_bag's offset2bag/bag_size/max_indices are torch's backward bookkeeping: reading them is
    refused with a reason, never exported wrong."""
    import onnxport

    class Sizes(torch.nn.Module):
        def forward(self, w, i, o):
            return aten._embedding_bag_forward_only(w, i, o, False, 1)[2]

    with pytest.raises(onnxport.OnnxportError, match="bag_size"):
        onnxport.export(Sizes(), (randn(7, 3), BAG_INDICES, BAG_OFFSETS), verify=False)
