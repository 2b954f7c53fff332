"""Dims an older torch's shape functions guard on (torch 2.10) stay dynamic, as later torch keeps them: each
cause alone, at a size other than the example's, on every torch; and the replacements are undone after."""

from __future__ import annotations

import importlib

import torch
import torch.nn.functional as F
from torch import nn
from torch._higher_order_ops.map import map as hop_map
from torch.export import Dim

import onnxport
from onnxport.capture import _older_torch


def _export_and_check(model: nn.Module, example: tuple, dynamic_shapes: tuple, others: list[tuple]) -> None:
    """Export from ``example`` (verified there and at sizes of its own), then compare with eager at ``others``."""
    prog = onnxport.export(model, example, dynamic_shapes=dynamic_shapes)
    assert prog.report.verification.ok, str(prog.report.verification)
    for args in others:
        with torch.no_grad():
            expected = model(*args)
        torch.testing.assert_close(prog(*args), expected, atol=1e-5, rtol=1e-5)


def test_pooling_of_odd_and_even_sizes():
    """torch 2.10's pooling shape function guards ``(h - 1) % 2 == 0`` on an odd example (``div_rtn``)."""
    model = nn.Sequential(nn.MaxPool2d(3, stride=2, padding=1), nn.AvgPool2d(2)).eval()
    _export_and_check(model, (torch.randn(2, 3, 11, 9),), ({0: Dim("n", min=2), 2: Dim("h", min=4), 3: Dim("w", min=4)},),
                      [(torch.randn(3, 3, 12, 15),), (torch.randn(2, 3, 8, 8),)])


def test_convolution_of_a_dim_without_maximum():
    """torch 2.10's fake convolution bounds a sample's elements by ``2**31 - 1`` (``4*l <= 2147483647``) and
    its solver for dynamic dims then fails on that bound."""
    torch.manual_seed(0)
    model = nn.Conv1d(3, 4, 4, padding="same").eval()
    _export_and_check(model, (torch.randn(3, 3, 11),), ({0: Dim("n", min=2), 2: Dim("l", min=4)},),
                      [(torch.randn(2, 3, 20),)])


class _MaskedAttention(nn.Module):
    def forward(self, q: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, q, q, attn_mask=mask[:, None, None, :])


def test_attention_with_a_batch_one_mask():
    """torch 2.10's choice of a CPU attention kernel tests a 4-d mask's batch against 1 with a guard: a batch-1
    example fixed the batch at 1 even in size-oblivious capture."""
    batch = Dim("batch")
    mask = torch.ones(1, 5, dtype=torch.bool)
    _export_and_check(_MaskedAttention().eval(), (torch.randn(1, 2, 5, 8), mask), ({0: batch}, {0: batch}),
                      [(torch.randn(2, 2, 5, 8), torch.rand(2, 5) > 0.3)])


class _RepeatedMask(nn.Module):
    def forward(self, mask: torch.Tensor) -> torch.Tensor:
        mask = mask.unsqueeze(1)
        return mask.repeat_interleave(2, dim=0, output_size=mask.shape[0] * 2) * 3  # as diffusers' attention does


def test_repeat_interleave_with_output_size():
    """torch 2.10 reads ``output_size`` of a number of repeats as an int, fixing the batch (``2*batch == 4``)."""
    _export_and_check(_RepeatedMask().eval(), (torch.randn(2, 7),), ({0: Dim("batch")},), [(torch.randn(5, 7),)])


class _Mapped(nn.Module):
    def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return hop_map(lambda row, w: torch.tanh(row @ w) + 1, x, w)


def test_map_over_a_dynamic_dim():
    """torch 2.10's map traces its body and its fake output by iterating the mapped dim, fixing it."""
    _export_and_check(_Mapped().eval(), (torch.randn(4, 3), torch.randn(3, 2)), ({0: Dim("n")}, None),
                      [(torch.randn(7, 3), torch.randn(3, 2))])


def test_replacements_are_undone():
    """Whatever this torch needs replaced is replaced inside the block only; ``torch.Tensor``'s method, inherited
    from ``TensorBase``, is inherited again after."""
    meta = importlib.import_module("torch._meta_registrations")
    hop = importlib.import_module("torch._higher_order_ops.map")
    owners = [(meta, "div_rtn"), (torch._C, "_select_conv_backend"), (torch, "repeat_interleave"),
              (torch.Tensor, "repeat_interleave"), (hop, "trace_map"), (hop, "map_dense")]
    before = [getattr(owner, name, None) for owner, name in owners]
    inherited = "repeat_interleave" not in vars(torch.Tensor)
    flash = torch.backends.cuda.flash_sdp_enabled()
    with _older_torch.patched():
        pass
    assert [getattr(owner, name, None) for owner, name in owners] == before
    assert ("repeat_interleave" not in vars(torch.Tensor)) == inherited
    assert torch.backends.cuda.flash_sdp_enabled() == flash
