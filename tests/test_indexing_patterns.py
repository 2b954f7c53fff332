"""The indexing patterns the TorchScript-era exporter could not export (seed 002, "Unsupported Tensor
Indexing Patterns"), as models exported through onnxport.export and compared with eager PyTorch.

Each pattern comes twice: with the indices written in the model, as the documentation shows them
(torch.export lifts them as constants), and with the same indices passed as inputs, so the ONNX model
has to handle their values (negative ones included) at run time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
import torch

import onnxport

T = torch.tensor


@dataclasses.dataclass
class IndexCase:
    """A model as a function, its example inputs, and why it is expected to fail (empty: it passes)."""

    name: str
    fn: Callable[..., torch.Tensor]
    args: Callable[[], tuple]
    other: Callable[[], tuple] | None = None  # more inputs to check: other index values than the example's
    xfail: str = ""


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)))


def _written(data, index, value):
    out = data.clone()
    out[index] = value
    return out


CASES = [
    # Reads: tensor indices with negative values.
    IndexCase(
        "read_negative_constant",
        lambda data: data[T([[1, 2], [2, -3]]), T([-2, 3])],
        lambda: (randn(3, 4, 5),),
    ),
    IndexCase(
        "read_negative_inputs",
        lambda data, i, j: data[i, j],
        lambda: (randn(3, 4, 5), T([[1, 2], [2, -3]]), T([-2, 3])),
        lambda: (randn(3, 4, 5), T([[-1, 0], [-2, 2]]), T([0, -1])),
    ),
    # Writes: several tensor indices, one of rank >= 2.
    IndexCase(
        "write_rank2_and_rank1_constant",
        lambda data, new: _written(data, (T([[1, 2], [2, 3]]), T([2, 3])), new),
        lambda: (randn(4, 4, 5), randn(2, 2, 5)),
    ),
    IndexCase(
        "write_rank2_and_rank1_inputs",
        lambda data, i, j, new: _written(data, (i, j), new),
        lambda: (randn(4, 4, 5), T([[1, 2], [2, 3]]), T([2, 3]), randn(2, 2, 5)),
        lambda: (randn(4, 4, 5), T([[0, -1], [3, -4]]), T([-1, 0]), randn(2, 2, 5)),
    ),
    # Writes: tensor indices that are not consecutive (the indexed dims go first in the value).
    IndexCase(
        "write_non_consecutive_constant",
        lambda data, new: _written(data, (T([2, 3]), slice(None), T([1, 2])), new),
        lambda: (randn(4, 3, 5), randn(2, 3)),
    ),
    IndexCase(
        "write_non_consecutive_inputs",
        lambda data, i, j, new: _written(data, (i, slice(None), j), new),
        lambda: (randn(4, 3, 5), T([2, 3]), T([1, 2]), randn(2, 3)),
        lambda: (randn(4, 3, 5), T([0, -1]), T([-5, 4]), randn(2, 3)),
    ),
    # Writes: tensor indices with negative values.
    IndexCase(
        "write_negative_constant",
        lambda data, new: _written(data, (T([1, -2]), T([-2, 3])), new),
        lambda: (randn(4, 4, 5), randn(2, 5)),
    ),
    IndexCase(
        "write_negative_inputs",
        lambda data, i, j, new: _written(data, (i, j), new),
        lambda: (randn(4, 4, 5), T([1, -2]), T([-2, 3]), randn(2, 5)),
        lambda: (randn(4, 4, 5), T([-4, 3]), T([-1, -4]), randn(2, 5)),
    ),
    # Writes: the value broadcast to the indexed shape ([5] -> [2, 2, 2, 5]).
    IndexCase(
        "write_broadcast_value_constant",
        lambda data, new: _written(data, (T([[0, 2], [1, 1]]), slice(1, 3)), new),
        lambda: (randn(3, 4, 5), randn(5)),
    ),
    IndexCase(
        "write_broadcast_value_inputs",
        lambda data, i, new: _written(data, (i, slice(1, 3)), new),
        lambda: (randn(3, 4, 5), T([[0, 2], [1, 1]]), randn(5)),
        lambda: (randn(3, 4, 5), T([[-1, -3], [0, 0]]), randn(5)),
    ),
]


class Wrapped(torch.nn.Module):
    def __init__(self, fn: Callable[..., torch.Tensor]):
        super().__init__()
        self.fn = fn

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return self.fn(*args)


def _params() -> list:
    return [
        pytest.param(case, id=case.name, marks=[pytest.mark.xfail(reason=case.xfail, strict=True)] * bool(case.xfail))
        for case in CASES
    ]


@pytest.mark.parametrize("case", _params())
def test_indexing_pattern_exports_and_matches_eager(case: IndexCase) -> None:
    model = Wrapped(case.fn)
    args = case.args()
    others = [case.other()] if case.other is not None else []
    prog = onnxport.export(model, args, verify_inputs=others)
    assert prog.report.verification.ok
    for inputs in (args, *others):
        torch.testing.assert_close(prog(*inputs), model(*inputs))


def test_in_place_write_into_the_input_like_the_documentation() -> None:
    """``data[...] = new_data`` on the model's input itself, the value broadcast, as the seed writes it."""

    class WritesInput(torch.nn.Module):
        def forward(self, data, new_data):
            data[torch.tensor([[0, 2], [1, 1]]), 1:3] = new_data
            return data

    data, new = randn(3, 4, 5), randn(5)
    prog = onnxport.export(WritesInput(), (data.clone(), new))
    expected = WritesInput()(data.clone(), new)
    torch.testing.assert_close(prog(data.clone(), new), expected)
