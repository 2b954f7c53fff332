"""onnxruntime's own quantization tools on onnxport's float files: ``MatMulNBitsQuantizer`` (int4),
``quantize_dynamic`` and ``quantize_static`` (int8) each quantize every linear layer of a Llama, as
onnxport's quantizer does, and give a model that loads and stays close to the float one."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
import torch

import onnxport
from tests import tiny_models

pytestmark = pytest.mark.transformers
quantization = pytest.importorskip("onnxruntime.quantization")
ort = pytest.importorskip("onnxruntime")

LAYERS = 2
LINEARS = 7 * LAYERS + 1  # q, k, v, o, gate, up, down per layer, and the LM head
SIZES = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": LAYERS, "vocab_size": 256}


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    model = tiny_models.llama(**SIZES)
    torch.manual_seed(1)
    ids = torch.randint(0, 256, (1, 12))
    prog = onnxport.export(model, (ids,), verify=False)
    path = str(tmp_path_factory.mktemp("llama") / "llama.onnx")
    prog.save(path)
    feeds = {name: t.numpy() for name, t in zip(prog.input_names, prog.flatten_inputs((ids,)))}
    return prog, path, feeds


def _ops(model: onnx.ModelProto) -> Counter:
    return Counter(n.op_type for n in model.graph.node)


def _close(path: str, feeds: dict, expected: np.ndarray, cosine: float) -> None:
    (logits,) = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(["logits"], feeds)
    a, b = logits.reshape(-1).astype(np.float64), expected.reshape(-1).astype(np.float64)
    assert float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b))) > cosine


def test_the_float_file_has_one_matmul_on_an_initializer_per_linear_layer(llama) -> None:
    prog, path, _ = llama
    model = onnx.load(path)
    weights = {t.name for t in model.graph.initializer}
    products = [n for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in weights]
    assert len(products) == LINEARS and _ops(model)["Gemm"] == 0
    assert len(prog.quantize(bits=4).report.quantization.quantized) == LINEARS  # onnxport's own, alike


def test_matmul_nbits_quantizer_quantizes_every_linear_layer(llama, tmp_path) -> None:
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    prog, path, feeds = llama
    quantizer = MatMulNBitsQuantizer(onnx.load(path), block_size=32, is_symmetric=True)
    quantizer.process()
    out = str(tmp_path / "int4.onnx")
    onnx.save(quantizer.model.model, out)
    assert _ops(quantizer.model.model)["MatMulNBits"] == LINEARS
    _close(out, feeds, ort.InferenceSession(path).run(["logits"], feeds)[0], 0.98)


def test_quantize_dynamic_and_static_quantize_every_linear_layer(llama, tmp_path) -> None:
    prog, path, feeds = llama
    expected = ort.InferenceSession(path).run(["logits"], feeds)[0]
    dynamic = str(tmp_path / "dynamic.onnx")
    quantization.quantize_dynamic(path, dynamic)  # its defaults
    assert _ops(onnx.load(dynamic))["MatMulInteger"] == LINEARS
    _close(dynamic, feeds, expected, 0.99)

    class Reader(quantization.CalibrationDataReader):
        def __init__(self) -> None:
            self.left = [feeds] * 3

        def get_next(self) -> dict | None:
            return self.left.pop() if self.left else None

    static = str(tmp_path / "static.onnx")
    quantization.quantize_static(path, static, Reader())  # every op type it knows: loads, all linears QDQ
    model = onnx.load(static)
    dequantized = {n.output[0] for n in model.graph.node if n.op_type == "DequantizeLinear"}
    products = [n for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in dequantized]
    assert len(products) >= LINEARS
    ort.InferenceSession(static).run(["logits"], feeds)
    # Its defaults also quantize the attention mask's adds and the softmax, whose range holds finfo.min:
    # the usual choice is the linear layers alone. Of an opset-21 file, that model fails to load at
    # onnxruntime's "extended" level (1.32: its QDQ propagation gives a QuantizeLinear an output_dtype
    # that disagrees with its zero point), so this goes through an opset-20 file, as docs/quantization.md says.
    older = str(tmp_path / "opset20.onnx")
    assert prog.model.opset_imports[""] == 21  # the fixture's: the same model again at opset 20
    ids = torch.from_numpy(feeds["input_ids"])
    onnxport.export(tiny_models.llama(**SIZES), (ids,), verify=False, opset=20).save(older)
    weights = {t.name for t in onnx.load(older).graph.initializer}
    linears = [n.name for n in onnx.load(older).graph.node if n.op_type == "MatMul" and n.input[1] in weights]
    assert len(linears) == LINEARS
    linear_only = str(tmp_path / "static_linear.onnx")
    quantization.quantize_static(older, linear_only, Reader(), nodes_to_quantize=linears)
    _close(linear_only, feeds, expected, 0.98)


def test_static_exclusions_keep_the_masked_scores_in_float(llama, tmp_path) -> None:
    """quantize_static calibrates the attention mask's sum with the scores by default: its range spans the
    mask's lowest value, and the scores round to one step. Leaving the nodes ``static_exclusions`` names in
    float brings the logits closer to the float model's."""
    _, _, feeds = llama
    model = tiny_models.llama(**SIZES)
    with torch.no_grad():  # peaked attention: where each token attends matters, as in a trained model
        for name, param in model.named_parameters():
            if name.endswith(("q_proj.weight", "k_proj.weight")):
                param.mul_(8)
    prog = onnxport.export(model, (torch.from_numpy(feeds["input_ids"]),))
    path = str(tmp_path / "peaked.onnx")
    prog.save(path)
    expected = ort.InferenceSession(path).run(["logits"], feeds)[0]
    excluded = onnxport.quantize.static_exclusions(path)
    softmax = [n.name for n in onnx.load(path).graph.node if n.op_type == "Softmax"]
    assert len(softmax) == LAYERS and set(softmax) < set(excluded) and len(excluded) == 2 * LAYERS
    assert excluded == onnxport.quantize.static_exclusions(prog)

    class Reader(quantization.CalibrationDataReader):
        def __init__(self) -> None:
            g = np.random.default_rng(0)
            self.left = [{**feeds, "input_ids": g.integers(0, 256, feeds["input_ids"].shape)} for _ in range(4)]

        def get_next(self) -> dict | None:
            return self.left.pop() if self.left else None

    errors = []
    for exclude in ([], excluded):
        out = str(tmp_path / f"static-{len(exclude)}.onnx")
        quantization.quantize_static(path, out, Reader(), nodes_to_exclude=exclude)
        (logits,) = ort.InferenceSession(out, providers=["CPUExecutionProvider"]).run(["logits"], feeds)
        errors.append(float(np.abs(logits - expected).max()))
    assert errors[1] < errors[0] / 2, errors
    with pytest.raises(onnxport.InvalidInputError, match="cannot read"):
        onnxport.quantize.static_exclusions(str(tmp_path / "missing.onnx"))
