"""Histograms (translate/ops/histogram.py) against eager PyTorch: histc, histogram and histogramdd, torch's bins
with the edges on the nose included."""

import pytest
import torch
from torch import randn

from onnxport.translate.registry import ops
from tests.ops._runner import OpCase, params, run_case

aten = ops.aten  # an op this torch lacks is an AbsentOp: its cases are skipped
f16 = torch.float16


def histogram_range(x, w): return torch.histogram(x, 6, range=(-1.0, 1.0), weight=w, density=True)
def histogram_edges(x, b): return torch.histogram(x, b)
def histogramdd_cts(x): return torch.histogramdd(x, [3, 4], density=True)
def histogramdd_edges(x, a, b, w): return torch.histogramdd(x, [a, b], weight=w)


CASES = [
    OpCase(aten.histc.default, args=lambda: (randn(40),), kwargs={"bins": 7}, expect_ops=["ScatterElements"]),
    OpCase(aten.histc.default, args=lambda: (torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0, 5.0]),),
           kwargs={"bins": 5, "min": 0, "max": 5}, name="edges"),
    OpCase(aten.histc.default, args=lambda: (torch.full((3,), 2.0),), kwargs={"bins": 4}, name="one_value"),
    OpCase(aten.histogram.bin_ct, args=lambda: (randn(5, 6),), kwargs={"bins": 5}),
    OpCase(histogram_range, args=lambda: (randn(30), torch.rand(30))),
    OpCase(histogram_edges, args=lambda: (randn(30), torch.tensor([-1.0, -0.5, 0.0, 2.0]))),
    OpCase(histogramdd_cts, args=lambda: (randn(20, 2),)),
    OpCase(histogramdd_edges, args=lambda: (randn(4, 5, 2), torch.tensor([-1.0, 0.0, 1.0]),
                                            torch.tensor([-2.0, 0.0, 0.5, 2.0]), torch.rand(4, 5))),
    OpCase(aten.histc.default, args=lambda: (randn(40).double(),), kwargs={"bins": 9}, name="float64"),
    # float16 rounds each step of the bin arithmetic as torch does
    OpCase(aten.histc.default, args=lambda: (randn(60) * 4,), kwargs={"bins": 100, "min": -10, "max": 10},
           name="half", dtypes=(f16,)),
]


@pytest.mark.parametrize(("case", "dtype"), params(CASES))
def test_op(case: OpCase, dtype: torch.dtype | None) -> None:
    run_case(case, dtype)


def test_histogram_edges_match_linspace() -> None:
    """Edges rebuilt in the graph equal torch's linspace bit for bit, so an element on an edge lands in
    torch's bin: the data's own min and max are edges."""
    import onnxport

    class Hist(torch.nn.Module):
        def forward(self, x):
            return torch.histogram(x, 37)

    for seed in range(5):
        torch.manual_seed(seed)
        x = randn(50) * 10 ** (seed - 2)
        prog = onnxport.export(Hist(), (x,), verify=False)
        hist, edges = prog(x)
        expected = Hist()(x)
        assert torch.equal(edges, expected.bin_edges)
        assert torch.equal(hist, expected.hist)
