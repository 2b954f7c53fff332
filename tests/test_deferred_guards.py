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


@pytest.mark.transformers
def test_a_violation_torch_cannot_suggest_fixes_for_is_reported_as_a_violation(monkeypatch) -> None:
    """LongT5's local attention, as transformers writes it (without onnxport's capture patch of its blocks), pads
    its length to a multiple of its block: torch's solver then builds a Dim of an empty range while writing its
    suggested fixes (``Cannot create Dim with inconsistent min=0, max=-oo``); the capture says what the model
    requires of the length, not that torch failed in its own code."""
    import contextlib

    from onnxport.hf import patches

    transformers = pytest.importorskip("transformers")
    monkeypatch.setattr(patches, "blocks_of_any_length", contextlib.nullcontext)
    torch.manual_seed(0)
    config = transformers.LongT5Config(vocab_size=99, d_model=32, d_kv=8, d_ff=64, num_layers=1, num_heads=4,
                                       local_radius=4, decoder_start_token_id=0)
    encoder = transformers.LongT5EncoderModel(config).eval()
    ids = torch.randint(3, 99, (2, 8))
    length = torch.export.Dim("length")
    with pytest.raises(CaptureError, match=r"not all values of length = input_ids.shape\[1\]") as info:
        onnxport.export(encoder, (), {"input_ids": ids, "attention_mask": torch.ones_like(ids)},
                        dynamic_shapes={"input_ids": {1: length}, "attention_mask": {1: length}}, verify=False)
    assert "failing in its own code" not in str(info.value)
