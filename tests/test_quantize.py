"""Weight-only quantization (onnxport.quantize): every form computes exactly the model whose weights are
the dequantized codes, the program API leaves the float program alone, an LLM's logits stay close to
eager PyTorch's, and bad options are refused before any work."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
from torch.export import Dim

import onnxport
from onnxport.quantize.kernels import dequantized, quantize_blocks
from onnxport.verify import OrtRunner
from tests import tiny_models
from tests.quantize_models import Mlp


def _reference(model: Mlp, x: torch.Tensor, bits: int, block_size: int, symmetric: bool) -> np.ndarray:
    """The MLP with each weight replaced by its dequantized codes, in float64."""
    h = x.double().numpy()
    for layer in (model.up, model.down):
        w = layer.weight.detach().double().numpy()
        codes, scales, zeros = quantize_blocks(w, bits, block_size, symmetric)
        scales = scales.astype(np.float32).astype(np.float64)  # the file keeps them in float32
        h = h @ dequantized(codes, scales, zeros, bits, w.shape[1]).T + layer.bias.detach().double().numpy()
        if layer is model.up:
            h = np.maximum(h, 0.0)
    return h


def _ops(prog: onnxport.OnnxProgram) -> Counter:
    return Counter(node.op_type for node in prog.model.graph)


@pytest.mark.parametrize("form", ["matmulnbits", "dequantize"])
@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("block_size", [16, 64])
def test_each_form_computes_the_dequantized_weights(form: str, bits: int, symmetric: bool, block_size: int) -> None:
    torch.manual_seed(bits + block_size)
    model = Mlp().eval()
    x = torch.randn(2, 5, 40)
    prog = onnxport.export(model, (x,), target="onnxruntime>=1.23", dynamic_shapes=({0: Dim("batch"), 1: Dim("seq")},))
    quantized = prog.quantize(bits=bits, block_size=block_size, symmetric=symmetric, form=form, accuracy_level=0)
    result = quantized.report.quantization
    assert result.quantized == ["up.weight", "down.weight"] and not result.left
    assert result.bytes_after < result.bytes_before / (2 if bits == 8 else 3)
    ops = _ops(quantized)
    if form == "matmulnbits":
        assert ops["MatMulNBits"] == 2 and ops["MatMul"] == 0
    else:
        assert ops["DequantizeLinear"] == 2 and ops["MatMul"] == 2
    x2 = torch.randn(3, 4, 40)
    # At level "all" onnxruntime fuses DequantizeLinear + MatMul into MatMulNBits with int8 activations
    # (accuracy level 4, its default for the fusion): "basic" keeps the exact product.
    (actual,) = OrtRunner(quantized.model, optimization="basic").run([x2])
    np.testing.assert_allclose(actual.numpy(), _reference(model, x2, bits, block_size, symmetric), rtol=1e-5, atol=1e-5)


def test_the_float_program_is_left_as_it_was() -> None:
    torch.manual_seed(0)
    model = Mlp().eval()
    x = torch.randn(2, 40)
    prog = onnxport.export(model, (x,))
    before = prog(x)
    quantized = prog.quantize()
    assert _ops(prog)["MatMul"] == 2 and _ops(quantized)["MatMulNBits"] == 2
    torch.testing.assert_close(prog(x), before)
    assert prog.report.quantization is None and quantized.report.quantization is not None
    assert not torch.equal(quantized(x), before)  # int4 weights: close, not equal


def test_a_saved_quantized_model_loads_and_computes_as_the_program(tmp_path) -> None:
    import onnxruntime as ort

    torch.manual_seed(0)
    model = Mlp().eval()
    x = torch.randn(3, 40)
    quantized = onnxport.export(model, (x,)).quantize(bits=4, symmetric=False)
    path = tmp_path / "mlp.onnx"
    quantized.save(path)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (out,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    np.testing.assert_allclose(out, quantized(x).numpy(), rtol=1e-5, atol=1e-5)


def test_export_measures_the_quantized_model_against_eager() -> None:
    pytest.importorskip("transformers")
    llama = tiny_models.llama(hidden_size=128, intermediate_size=256, vocab_size=512)

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.llama = llama

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            return self.llama(input_ids=input_ids, use_cache=False).logits

    ids = torch.randint(0, 512, (1, 12))
    int4 = onnxport.export(Logits().eval(), (ids,), quantize=True)
    int8 = onnxport.export(Logits().eval(), (ids,), quantize={"bits": 8, "skip": ["lm_head"]},
                           target="onnxruntime>=1.23")  # MatMulNBits of 8 bits: 1.23 on
    # per layer q+k+v (one product), o, gate+up (one product), down; and the LM head
    assert _ops(int4)["MatMulNBits"] == 2 * 4 + 1 and len(int4.report.quantization.quantized) == 2 * 7 + 1
    assert int8.report.quantization.left == {"llama.lm_head.weight": "skipped by name"}
    (check4,), (check8,) = int4.report.quantization.checks, int8.report.quantization.checks
    assert 0.95 < check4.cosine < 0.9999 and check4.top1 is not None and check4.top5 >= check4.top1
    assert check8.cosine > 0.999 and check8.max_abs < check4.max_abs
    assert (check4.tolerance, check8.tolerance) == (0.98, 0.999) and check4.ok and check8.ok
    assert "cosine similarity" in str(int4.report)


@pytest.mark.parametrize("options, match", [
    ({"bits": 3}, "bits must be 4 or 8"),
    ({"block_size": 48}, "power of two"),
    ({"form": "gguf"}, "form must be one of"),
    ({"accuracy_level": 7}, "accuracy_level"),
])
def test_bad_options_are_refused(options: dict, match: str) -> None:
    prog = onnxport.export(Mlp().eval(), (torch.randn(2, 40),), verify=False)
    with pytest.raises(onnxport.OnnxportError, match=match):
        prog.quantize(**options)
    with pytest.raises(onnxport.OnnxportError, match=match):
        onnxport.export(Mlp().eval(), (torch.randn(2, 40),), quantize=options)


def test_the_portable_form_needs_opset_21_and_unknown_keys_are_named() -> None:
    prog = onnxport.export(Mlp().eval(), (torch.randn(2, 40),), opset=18, verify=False)
    with pytest.raises(onnxport.OnnxportError, match="opset 21"):
        prog.quantize(form="dequantize")
    with pytest.raises(onnxport.OnnxportError, match="quantize must be True or a dict"):
        onnxport.export(Mlp().eval(), (torch.randn(2, 40),), quantize={"bitz": 4})


def test_a_quantization_below_its_stated_tolerance_is_a_warning() -> None:
    """An outlier in each row's only block (blocks of 256) rounds every other weight to 0: the output is
    far from eager's, which the report says, naming what to try; the export itself is not refused."""
    model = torch.nn.Linear(256, 64).eval()
    with torch.no_grad():
        model.weight[:, 0] = 1000.0
    x = torch.randn(4, 256)
    x[:, 0] = 0.0  # the outlier's input: the layer's output comes from the weights rounded away
    prog = onnxport.export(model, (x,), quantize={"block_size": 256})
    (check,) = prog.report.quantization.checks
    assert not check.ok and check.cosine < 0.98 and "BELOW the 0.98 stated" in str(check)
    assert any("below the 0.98 stated" in w and "method='gptq'" in w for w in prog.report.warnings)


@pytest.mark.parametrize("symmetric", [True, False])
def test_rows_quantized_a_few_at_a_time_give_the_same_codes(symmetric: bool, monkeypatch) -> None:
    from onnxport.quantize import kernels

    w = np.random.default_rng(0).standard_normal((37, 80)).astype(np.float32)
    whole = kernels.quantize_blocks(w.astype(np.float64), 4, 32, symmetric)
    monkeypatch.setattr(kernels, "_ROWS_AT_ONCE", 3 * 80)  # three rows a pass: 13 passes, the last of one row
    pieces = kernels.quantize_rows(w, 4, 32, symmetric)
    for a, b in zip(whole, pieces):
        assert (a is None and b is None) or np.array_equal(a, b)


def test_one_options_object_reaches_every_entry_point_alike(tmp_path) -> None:
    """``QuantizeOptions`` is what export, OnnxProgram.quantize and the CLI read: the same options give the same
    file whichever way they are passed, and fields are changed by name."""
    torch.manual_seed(0)
    model, x = Mlp().eval(), torch.randn(2, 40)
    options = onnxport.QuantizeOptions(block_size=16, symmetric=False, skip=("down",))
    assert options.skip == ("down",) and onnxport.QuantizeOptions(skip="down").skip == ("down",)  # one name
    prog = onnxport.export(model, (x,), verify=False)
    by_object = prog.quantize(options)
    by_names = prog.quantize(block_size=16, symmetric=False, skip=["down"])
    by_export = onnxport.export(model, (x,), quantize=options, verify=False)
    by_dict = onnxport.export(model, (x,), quantize={"block_size": 16, "symmetric": False, "skip": ["down"]}, verify=False)
    files = {prog_.model_proto.SerializeToString() for prog_ in (by_object, by_names, by_export, by_dict)}
    assert len(files) == 1
    assert by_object.report.quantization.quantized == ["up.weight"] and not by_object.report.quantization.symmetric
    changed = prog.quantize(options, skip=())  # the object with a field changed
    assert sorted(changed.report.quantization.quantized) == ["down.weight", "up.weight"]
    with pytest.raises(onnxport.InvalidInputError, match="bitz is not an option of quantization") as caught:
        prog.quantize(options, bitz=4)
    assert "QuantizeOptions" in caught.value.fix
    with pytest.raises(onnxport.InvalidInputError, match="bits must be 4 or 8"):
        options.changed(bits=3)  # checked again


def test_the_options_a_quantize_argument_names() -> None:
    """What ``quantize=`` sets itself (a GPTQ checkpoint keeps its own bits and groups where it sets none)."""
    named = onnxport.QuantizeOptions.named
    assert named({"block_size": 32}) == {"block_size"} and named("int4") == {"bits"} and named(True) == set()
    assert named(onnxport.QuantizeOptions(symmetric=False)) == {"symmetric"}
    assert onnxport.QuantizeOptions.of(None) is None and onnxport.QuantizeOptions.of("int8").bits == 8
    assert onnxport.QuantizeOptions().form_for("openvino") == "dequantize"
    assert onnxport.QuantizeOptions().form_for(None) == "matmulnbits"
