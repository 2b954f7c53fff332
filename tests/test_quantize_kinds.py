"""Per layer kind (``prog.quantize``): the output layer (an LM head) at its own width or in float, the
embedding tables in either form, a head tied to the embedding, activation quantization, and the forms a
target's oldest onnxruntime cannot run refused."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch

import onnxport
from onnxport.errors import InvalidInputError
from onnxport.quantize.kernels import dequantized, quantize_blocks
from onnxport.verify import OrtRunner

NEW = "onnxruntime>=1.32"  # every quantized form, 4-bit asymmetric embedding tables included


class Tied(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(50, 40)
        self.up = torch.nn.Linear(40, 64)
        self.head = torch.nn.Linear(40, 50, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        return self.head(h + self.up(h)[..., :40])


class Embedding(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(50, 40)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embed(ids) * 1.0


def _ops(prog: onnxport.OnnxProgram) -> Counter:
    return Counter(node.op_type for node in prog.model.graph)


def _ids() -> torch.Tensor:
    return torch.tensor([[0, 7, 49, 7], [3, 3, 12, 1]])


@pytest.mark.parametrize("form", ["matmulnbits", "dequantize"])
@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("symmetric", [True, False])
def test_an_embedding_table_gathers_exactly_its_dequantized_rows(form: str, bits: int, symmetric: bool) -> None:
    torch.manual_seed(bits)
    model = Embedding().eval()
    prog = onnxport.export(model, (_ids(),), target=NEW, verify=False)
    quantized = prog.quantize(bits=4, block_size=16, symmetric=symmetric, form=form, embeddings=bits)
    result = quantized.report.quantization
    assert result.tables == {"embed.weight": bits} and result.bytes_after < result.bytes_before / 2
    ops = _ops(quantized)
    assert ops["GatherBlockQuantized" if form == "matmulnbits" else "DequantizeLinear"] == 1
    table = model.embed.weight.detach().double().numpy()
    codes, scales, zeros = quantize_blocks(table, bits, 16, symmetric)
    expected = dequantized(codes, scales.astype(np.float32).astype(np.float64), zeros, bits, 40)[_ids().numpy()]
    (actual,) = OrtRunner(quantized.model).run([_ids()])
    np.testing.assert_allclose(actual.numpy(), expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("form", ["matmulnbits", "dequantize"])
def test_a_head_tied_to_the_embedding_is_quantized_and_the_table_kept(form: str) -> None:
    torch.manual_seed(0)
    model = Tied().eval()
    prog = onnxport.export(model, (_ids(),), target=NEW, verify=False)
    quantized = prog.quantize(bits=8, block_size=16, form=form, accuracy_level=0)
    result = quantized.report.quantization
    assert sorted(result.quantized) == ["head.weight", "up.weight"] or sorted(result.quantized) == [
        "embed.weight", "up.weight"]  # the tied table goes by one of its two names
    graph = quantized.model.graph
    assert [n.op_type for n in graph if n.op_type == "Gather"] == ["Gather"]  # the float table, for the rows
    (actual,) = OrtRunner(quantized.model, optimization="basic").run([_ids()])
    expected = model(_ids()).detach()
    assert torch.nn.functional.cosine_similarity(actual.reshape(-1), expected.reshape(-1), dim=0) > 0.999


def test_the_output_layer_gets_its_own_width_or_stays_float() -> None:
    torch.manual_seed(0)
    model = Tied().eval()
    prog = onnxport.export(model, (_ids(),), target=NEW, verify=False)
    mixed = prog.quantize(bits=4, block_size=16, lm_head=8)
    widths = {n.name: n.attributes["bits"].value for n in mixed.model.graph if n.op_type == "MatMulNBits"}
    assert sorted(widths.values()) == [4, 8]
    assert list(mixed.report.quantization.other_bits.values()) == [8]
    assert "int8" in str(mixed.report.quantization)
    kept = prog.quantize(bits=4, block_size=16, lm_head=0)
    assert kept.report.quantization.quantized == ["up.weight"]
    assert list(kept.report.quantization.left.values()) == ["left in float (lm_head=0)"]


def test_forms_the_target_cannot_run_are_refused() -> None:
    prog = onnxport.export(Tied().eval(), (_ids(),), verify=False)  # the default target, onnxruntime>=1.18
    with pytest.raises(InvalidInputError, match=r"8 bits: needs onnxruntime 1.23"):
        prog.quantize(bits=8)
    with pytest.raises(InvalidInputError, match=r"embedding tables .*needs onnxruntime 1.23"):
        prog.quantize(bits=4, embeddings=4)
    assert prog.quantize(bits=4).report.quantization.quantized  # MatMulNBits of 4 bits: every release
    newer = onnxport.export(Tied().eval(), (_ids(),), target="onnxruntime>=1.24", verify=False)
    with pytest.raises(InvalidInputError, match=r"asymmetric.*needs onnxruntime 1.32"):
        newer.quantize(bits=4, embeddings=4, symmetric=False)  # GatherBlockQuantized's 4-bit zero points


@pytest.mark.parametrize("options, match", [
    ({"lm_head": 3}, "lm_head must be"),
    ({"embeddings": True}, "embeddings must be"),
    ({"method": "awq"}, "method must be"),
    ({"method": "gptq"}, "needs calibration"),
    ({"activations": "int8"}, "activations must be"),
    ({"activations": "static"}, "needs calibration"),
    ({"method": "gptq", "calibration": "x"}, "non-empty list"),
])
def test_bad_kind_options_are_refused(options: dict, match: str) -> None:
    prog = onnxport.export(Tied().eval(), (_ids(),), verify=False)
    with pytest.raises(InvalidInputError, match=match):
        prog.quantize(**options)


@pytest.mark.parametrize("activations", ["dynamic", "static"])
def test_activation_quantization_through_the_program(activations: str) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 32)).eval()
    x = torch.randn(4, 64)
    prog = onnxport.export(model, (x,), verify=False)
    calibration = [(torch.randn(4, 64),) for _ in range(4)] if activations == "static" else None
    quantized = prog.quantize(activations=activations, calibration=calibration)
    assert quantized.report.quantization.mode == activations and len(quantized.report.quantization.quantized) == 2
    ops = _ops(quantized)
    assert ops["DynamicQuantizeLinear" if activations == "dynamic" else "QuantizeLinear"] >= 1
    actual, expected = quantized(x), model(x).detach()
    assert torch.nn.functional.cosine_similarity(actual.reshape(-1), expected.reshape(-1), dim=0) > 0.999
    torch.testing.assert_close(prog(x), expected, atol=1e-5, rtol=1e-5)  # the float program is unchanged


def test_bfloat16_weights_are_refused_naming_the_dtype() -> None:
    model = torch.nn.Linear(32, 16).to(torch.bfloat16).eval()
    prog = onnxport.export(model, (torch.randn(2, 32, dtype=torch.bfloat16),), verify=False)
    with pytest.raises(InvalidInputError, match="bfloat16"):
        prog.quantize()
