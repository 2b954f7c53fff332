"""Input sets at other sizes are the example resized, so verification feeds only inputs the model takes."""

from __future__ import annotations

import pytest
import torch
from torch.export import Dim, export
from torch.utils import _pytree as pytree

import onnxport
from onnxport.capture import dynamic as dyn
from onnxport.verify.sizes import other_sizes, resize_keeping_ends


@pytest.mark.parametrize(
    ("row", "size", "expected"),
    [
        ([1, 1, 1, 1, 0, 0], 4, [1, 1, 0, 0]),              # right padding survives a cut
        ([0, 0, 1, 1, 1, 1], 4, [0, 0, 1, 1]),              # left padding too
        ([1, 1, 1, 1, 0, 0], 9, [1, 1, 1, 1, 1, 1, 1, 0, 0]),  # growing repeats the middle
        ([5, 6, 7], 2, [5, 7]),
        ([5, 6, 7], 5, [5, 6, 6, 6, 7]),
    ],
)
def test_resize_keeps_both_ends(row: list[int], size: int, expected: list[int]) -> None:
    t = torch.tensor([row, row])
    out = resize_keeping_ends(t, 1, size)
    assert out.tolist() == [expected, expected]
    assert resize_keeping_ends(t.T, 0, size).T.tolist() == [expected, expected]


class Masked(torch.nn.Module):
    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return (ids * mask).sum(-1)


def _sets(model, args, shapes):
    ep = export(model, args, dynamic_shapes=shapes)
    specs = dyn.input_dim_specs(model, args, {}, shapes)
    sets = other_sizes(ep, pytree.tree_leaves(args), specs)
    for inputs in sets:
        ep.module()(*inputs)
    return sets


def test_dims_equal_in_the_example_move_together() -> None:
    ids = torch.arange(12).reshape(2, 6)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]])
    sets = _sets(Masked(), (ids, mask), ({0: Dim.DYNAMIC, 1: Dim.DYNAMIC}, {0: Dim.DYNAMIC, 1: Dim.DYNAMIC}))
    assert len(sets) == 3
    for ids_, mask_ in sets:
        assert ids_.shape == mask_.shape != ids.shape
        assert bool(mask_[:, 0].all()) and mask_[-1, -1] == 0  # the padding pattern survives
        assert set(ids_.flatten().tolist()) <= set(ids.flatten().tolist())


class Pair(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x.sum(0) + y.sum(0)


def test_distinct_user_dims_move_apart() -> None:
    args = (torch.randn(3, 4), torch.randn(3, 4))
    sets = _sets(Pair(), args, ({0: Dim("a")}, {0: Dim("b")}))
    assert any(x.shape[0] != y.shape[0] for x, y in sets)
    together = _sets(Pair(), args, ({0: Dim.DYNAMIC}, {0: Dim.DYNAMIC}))
    assert all(x.shape[0] == y.shape[0] for x, y in together)


def test_report_says_how_each_set_was_made() -> None:
    ids = torch.arange(12).reshape(2, 6)
    mask = torch.ones_like(ids)
    mask[1, 4:] = 0
    prog = onnxport.export(Masked(), (ids, mask), dynamic_shapes=({0: Dim("batch"), 1: Dim("seq")},) * 2,
                           input_names=["ids", "mask"])
    # one set per group, in which that group alone moves: to 1, below torch.export's range (>= 2) but
    # within what Dim("batch") and Dim("seq") allow, and the size most deployments run
    assert prog.report.sizes_verified == ["batch=1", "seq=1"]
    text = str(prog.report)
    assert "example resized to batch=" in text and "example:" in text


class Halves(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x.reshape(-1, 2, 3).sum(1) + y


def test_size_one_comes_first_only_where_the_user_allows_it() -> None:
    """Size 1 (below torch.export's range) is tried first where the Dim allows it, whatever the example's
    size; not for a Dim(min=2), nor for a dim that a derived Dim ties to another."""
    args = (torch.randn(4, 3), torch.randn(2, 3))
    batch = Dim("batch")
    derived = onnxport.export(Halves(), args, dynamic_shapes=({0: 2 * batch}, {0: batch}))
    assert derived.report.sizes_verified == ["batch=3"]
    plain = onnxport.export(Pair(), (torch.randn(2, 4), torch.randn(2, 4)), dynamic_shapes=({0: batch}, {0: batch}))
    assert plain.report.sizes_verified == ["batch=1"]
    four = onnxport.export(Pair(), (torch.randn(4, 4), torch.randn(4, 4)), dynamic_shapes=({0: batch}, {0: batch}))
    assert four.report.sizes_verified == ["batch=1"]
    floor = Dim("batch", min=2)
    kept = onnxport.export(Pair(), (torch.randn(2, 4), torch.randn(2, 4)), dynamic_shapes=({0: floor}, {0: floor}))
    assert kept.report.sizes_verified == ["batch=3"]
    hint = Dim.DYNAMIC(min=2)  # a hint's own range holds too (export-hf's image sides)
    hinted = onnxport.export(Pair(), (torch.randn(2, 4), torch.randn(2, 4)), dynamic_shapes=({0: hint}, {0: hint}))
    assert hinted.report.sizes_verified == ["x_dim0=y_dim0=3"]
