"""Size checks torch cannot prove (``onnxport.capture._deferred``): taken where they hold at every size, an error
where they decide something."""

from __future__ import annotations

import pytest
import sympy
import torch
from torch.utils._sympy.functions import FloorDiv, PythonMod
from torch.utils._sympy.value_ranges import ValueRanges

import onnxport
from onnxport.capture._deferred import _holds
from onnxport.errors import CaptureError

LENGTH = sympy.Symbol("s0", integer=True, positive=True)
RANGES = {LENGTH: ValueRanges(2, sympy.oo)}


def test_a_check_true_at_every_size_holds() -> None:
    """Speech2Text's: its states, ``(length - 1) // 4`` long and 6 more, reshaped (sympy does not factor it)."""
    states = FloorDiv(LENGTH - 1, 4)
    assert _holds(sympy.Eq(PythonMod(32 * states + 192, states + 6), 0), RANGES)


@pytest.mark.parametrize("expr", [sympy.Eq(PythonMod(LENGTH, 2), 0), sympy.Ne(LENGTH, 65536),
                                  sympy.Ne(FloorDiv(LENGTH, 4096), 3)],
                         ids=["odd lengths", "one length past the dense sizes", "lengths past the dense sizes"])
def test_a_check_false_at_some_size_does_not_hold(expr) -> None:
    assert not _holds(expr, RANGES)


class Pairs(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0], -1, 2).sum(-1)  # an even length only


def test_a_check_that_decides_stays_an_error() -> None:
    with pytest.raises(CaptureError, match="2\\*_length"):
        onnxport.export(Pairs(), (torch.randn(2, 50),),
                        dynamic_shapes=({0: torch.export.Dim("batch"), 1: torch.export.Dim("length")},))
