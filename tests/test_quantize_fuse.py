"""Sibling MatMulNBits products (layers reading the same input) fused into one (onnxport.quantize.fuse):
the fused model computes exactly the dequantized weights' model, and what must not be fused is not."""

from __future__ import annotations

import copy
from collections import Counter

import numpy as np
import pytest
import torch
from torch.export import Dim

import onnxport
from onnxport.quantize.fuse import _joined
from onnxport.quantize.kernels import dequantized, quantize_blocks
from onnxport.verify import OrtRunner


class Block(torch.nn.Module):
    """q, k, v read x (K=40: padded blocks; k without bias); gate and up read their concatenation."""

    def __init__(self) -> None:
        super().__init__()
        self.q = torch.nn.Linear(40, 32)
        self.k = torch.nn.Linear(40, 16, bias=False)
        self.v = torch.nn.Linear(40, 16)
        self.gate = torch.nn.Linear(64, 48)
        self.up = torch.nn.Linear(64, 48)
        self.down = torch.nn.Linear(48, 24)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.cat([self.q(x), self.k(x) * 2, torch.tanh(self.v(x))], -1)
        return self.down(torch.nn.functional.silu(self.gate(h)) * self.up(h))


def _dequantized_model(model: torch.nn.Module, bits: int, block_size: int, symmetric: bool) -> torch.nn.Module:
    """The model with each linear weight replaced by its dequantized codes, in float64."""
    reference = copy.deepcopy(model).double()
    for module in reference.modules():
        if isinstance(module, torch.nn.Linear):
            w = module.weight.detach().numpy()
            codes, scales, zeros = quantize_blocks(w, bits, block_size, symmetric)
            scales = scales.astype(np.float32).astype(np.float64)  # the file keeps them in float32
            module.weight.data = torch.from_numpy(dequantized(codes, scales, zeros, bits, w.shape[1]))
    return reference


@pytest.mark.parametrize("bits,symmetric", [(4, True), (4, False), (8, False)])
def test_siblings_fuse_and_compute_the_dequantized_weights(bits: int, symmetric: bool) -> None:
    torch.manual_seed(bits)
    model = Block().eval()
    x = torch.randn(2, 5, 40)
    prog = onnxport.export(model, (x,), target="onnxruntime>=1.23", dynamic_shapes=({0: Dim("batch"), 1: Dim("seq")},))
    quantized = prog.quantize(bits=bits, block_size=16, symmetric=symmetric, accuracy_level=0)
    result = quantized.report.quantization
    assert result.fused == [["q.weight", "k.weight", "v.weight"], ["gate.weight", "up.weight"]]
    assert "6 layers" not in str(result) and "5 layers fused into 2 products" in str(result)
    ops = Counter(node.op_type for node in quantized.model.graph)
    assert ops["MatMulNBits"] == 3 and ops["Split"] == 2
    fused = [n for n in quantized.model.graph if n.op_type == "MatMulNBits" and n.attributes["N"].value == 64]
    assert len(fused) == 1 and fused[0].inputs[1].name == f"q+k+v.weight.q{bits}"
    x2 = torch.randn(3, 7, 40)
    (actual,) = OrtRunner(quantized.model).run([x2])
    with torch.no_grad():
        expected = _dequantized_model(model, bits, 16, symmetric)(x2.double())
    np.testing.assert_allclose(actual.numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)


class Heads(torch.nn.Module):
    """Two layers read x; one of them is a model output (its name must stay), so nothing fuses."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(32, 16)
        self.b = torch.nn.Linear(32, 16, bias=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.a(x).relu(), self.b(x)


def test_a_layer_the_model_returns_is_not_fused() -> None:
    torch.manual_seed(0)
    model = Heads().eval()
    x = torch.randn(4, 32)
    quantized = onnxport.export(model, (x,)).quantize(bits=4, block_size=16, lm_head=4, accuracy_level=0)
    assert quantized.report.quantization.fused == []
    assert Counter(node.op_type for node in quantized.model.graph)["MatMulNBits"] == 2


def test_a_layer_left_in_float_stays_out_of_its_group() -> None:
    torch.manual_seed(0)
    model = Block().eval()
    x = torch.randn(2, 40)
    quantized = onnxport.export(model, (x,)).quantize(bits=4, block_size=16, skip=["k.weight"], accuracy_level=0)
    # k left in float: only q and v fuse among x's readers
    assert quantized.report.quantization.fused == [["q.weight", "v.weight"], ["gate.weight", "up.weight"]]
    (actual,) = OrtRunner(quantized.model).run([x])
    with torch.no_grad():
        expected = model(x)
    assert torch.nn.functional.cosine_similarity(actual.reshape(-1), expected.reshape(-1), dim=0) > 0.99


def test_the_fused_weights_name_says_what_they_join() -> None:
    assert _joined(["m.layers.0.attn.q_proj.weight", "m.layers.0.attn.k_proj.weight", "m.layers.0.attn.v_proj.weight"]) \
        == "m.layers.0.attn.q_proj+k_proj+v_proj.weight"
    assert _joined(["gate", "up"]) == "gate+up"
    assert _joined(["a.weight", "b.c.weight"]) == "a+b.c.weight"
