"""Verification of models that draw noise: torch's standard draws (randn, rand, their _like forms) are fed eager
PyTorch's own on each set, so that what the model computes from them is compared value for value, and a wrong
translation after a draw is caught; noise of other kinds keeps the outputs compared by shape and dtype."""

from __future__ import annotations

import onnx_ir as ir
import pytest
import torch
from torch.export import Dim

import onnxport
from onnxport.translate.opset import DEFAULT_OPSET
from onnxport.verify.draws import mismatch


class Noisy(torch.nn.Module):
    """A latent drawn around a mean, and a length drawn from noisy durations (as VITS's are)."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        latent = x + torch.exp(torch.randn_like(x) * 0.5) * 0.3
        durations = torch.ceil(torch.rand(x.shape[0], 3) * 4).sum(-1)
        return latent, durations


@pytest.mark.parametrize("opset", [21, DEFAULT_OPSET])
def test_outputs_computed_from_draws_are_compared_value_for_value(opset: int) -> None:
    x = torch.randn(3, 5)
    prog = onnxport.export(Noisy(), (x,), opset=opset, dynamic_shapes={"x": {0: Dim("n")}})
    result = prog.report.verification
    assert result.ok and result.draws_fed == 2
    assert [c.random for c in result.outputs] == [False, False]
    assert result.outputs[0].max_abs < 1e-5 and result.outputs[1].max_abs == 0
    assert "fed eager PyTorch's own" in str(result)
    assert len(result.runs) > 1  # the made-up sizes too, each with its own draws
    first, second = prog(x), prog(x)
    assert not torch.equal(first[0], second[0]), "the file draws its own noise"


def test_a_wrong_translation_after_a_draw_is_caught() -> None:
    def wrong_exp(ctx, x):  # Sigmoid where exp is meant
        return ctx.op.Sigmoid(x)

    with pytest.raises(onnxport.VerificationError, match="does not match eager"):
        onnxport.export(Noisy(), (torch.randn(3, 5),), custom_translations={torch.ops.aten.exp.default: wrong_exp})


def test_noise_of_another_kind_keeps_to_shapes() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x * torch.bernoulli(torch.full_like(x, 0.5)) + torch.randn_like(x)

    prog = onnxport.export(fn, (torch.randn(4, 3),))
    result = prog.report.verification
    assert result.ok and result.draws_fed == 0
    assert [c.random for c in result.outputs] == [True]


def test_draws_eager_pytorch_did_not_make_are_named() -> None:
    draws = [ir.Value(name="randn", shape=ir.Shape([2, 3])), ir.Value(name="rand", shape=ir.Shape([4]))]
    assert "drew 1 random tensors where the ONNX graph draws 2" in mismatch(draws, [torch.zeros(2, 3)])
    assert "has 2 dims" in mismatch(draws, [torch.zeros(2, 3), torch.zeros(4, 1)])
    assert mismatch(draws, [torch.zeros(5, 3), torch.zeros(7)]) is None  # other sizes: the dynamic dims
