"""Int8 activation quantization (onnxport.quantize.activations) and calibration (onnxport.quantize.calibrate):
the three forms of linear layer are found, the quantized files hold the ops claimed, onnxruntime fuses them
into its integer kernels (DynamicQuantizeMatMul / MatMulIntegerToFloat / QLinearConv), outputs stay close to
the float model's, saved files load, calibration reduces what it is asked to, and bad input is refused."""

from __future__ import annotations

import os
import tempfile
from collections import Counter

import numpy as np
import onnx
import onnx_ir as ir
import pytest
import torch
from torch.export import Dim

import onnxport
from onnxport.errors import InvalidInputError
from onnxport.quantize.activations import quantize_dynamic_model, quantize_static_model
from onnxport.quantize.calibrate import MinMax, Sample, collect, ranges
from onnxport.quantize.layers import find_linear, linear_layers
from tests import tiny_models
from tests.quantize_models import Mlp

FLOAT = ir.DataType.FLOAT
INTEGER_KERNELS = ("DynamicQuantizeMatMul", "MatMulIntegerToFloat")


class Cnn(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, padding=1, bias=False)
        self.head = torch.nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.conv2(torch.relu(self.conv1(x))))
        return self.head(h.mean(dim=(2, 3)))


def _ops(model: ir.Model) -> Counter:
    return Counter(node.op_type for node in model.graph)


def _session(model: ir.Model, optimized_path: str | None = None):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    if optimized_path is not None:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        options.optimized_model_filepath = optimized_path
    proto = ir.serde.serialize_model(model)
    return ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _optimized_ops(model: ir.Model) -> Counter:
    """The op types of the graph onnxruntime's CPU optimizer (extended level) makes of ``model``."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "optimized.onnx")
        _session(model, path)
        return Counter(node.op_type for node in onnx.load(path).graph.node)


def _run(model: ir.Model, feed: dict[str, np.ndarray]) -> np.ndarray:
    return _session(model).run(None, feed)[0]


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _copy(model: ir.Model) -> ir.Model:
    return ir.serde.deserialize_model(ir.serde.serialize_model(model))


# ---------------------------------------------------------------------------------------------
# A hand-built graph with the three forms of linear layer.

K, N, VOCAB = 16, 12, 20


def _three_forms() -> ir.Model:
    """``Gemm(x, W1[N, K], b1, transB=1)`` -> ``MatMul(., W2[K=N, N]) + b2`` -> plus an embedding ->
    ``MatMul(., Transpose(E[VOCAB, N]))``, E shared with the embedding's Gather."""
    rng = np.random.default_rng(0)

    def init(name: str, array: np.ndarray) -> ir.Value:
        tensor = ir.Tensor(np.ascontiguousarray(array, dtype=array.dtype), name=name)
        return ir.Value(name=name, shape=ir.Shape(tensor.shape), type=ir.TensorType(tensor.dtype), const_value=tensor)

    x = ir.Value(name="x", type=ir.TensorType(FLOAT), shape=ir.Shape([6, K]))
    ids = ir.Value(name="ids", type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([2, 3]))
    w1 = init("gemm.weight", rng.standard_normal((N, K)).astype(np.float32) / 4)
    b1 = init("gemm.bias", rng.standard_normal(N).astype(np.float32))
    w2 = init("matmul.weight", rng.standard_normal((N, N)).astype(np.float32) / 4)
    b2 = init("matmul.bias", rng.standard_normal(N).astype(np.float32))
    emb = init("embed.weight", rng.standard_normal((VOCAB, N)).astype(np.float32))
    shape = init("shape", np.array([6, N], dtype=np.int64))
    gemm = ir.Node("", "Gemm", [x, w1, b1], attributes=[ir.AttrInt64("transB", 1)], name="gemm")
    matmul = ir.Node("", "MatMul", [gemm.outputs[0], w2], name="matmul")
    add = ir.Node("", "Add", [matmul.outputs[0], b2], name="matmul_bias")
    gather = ir.Node("", "Gather", [emb, ids], name="embed")
    flat = ir.Node("", "Reshape", [gather.outputs[0], shape], name="flat")
    mix = ir.Node("", "Add", [add.outputs[0], flat.outputs[0]], name="mix")
    transpose = ir.Node("", "Transpose", [emb], attributes=[ir.AttrInt64s("perm", [1, 0])], name="embed_t")
    head = ir.Node("", "MatMul", [mix.outputs[0], transpose.outputs[0]], name="head")
    head.outputs[0].name = "logits"
    head.outputs[0].dtype, head.outputs[0].shape = FLOAT, ir.Shape([6, VOCAB])
    for node in (gemm, matmul, add, gather, flat, mix, transpose):
        node.outputs[0].dtype = FLOAT
    graph = ir.Graph([x, ids], [head.outputs[0]], nodes=[gemm, matmul, add, gather, flat, mix, transpose, head],
                     initializers=[w1, b1, w2, b2, emb, shape], opset_imports={"": 21}, name="three_forms")
    return ir.Model(graph, ir_version=10)


def _three_forms_feed(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((6, K)).astype(np.float32), "ids": rng.integers(0, VOCAB, (2, 3))}


def test_the_three_forms_of_linear_layer_are_found() -> None:
    model = _three_forms()
    graph = model.graph
    layers = linear_layers(graph)
    assert [layer.name for layer in layers] == ["gemm.weight", "matmul.weight", "embed.weight"]
    gemm, matmul, head = layers
    inits = graph.initializers
    np.testing.assert_array_equal(gemm.weight_nk(), inits["gemm.weight"].const_value.numpy())
    np.testing.assert_array_equal(matmul.weight_nk(), inits["matmul.weight"].const_value.numpy().T)
    np.testing.assert_array_equal(head.weight_nk(), inits["embed.weight"].const_value.numpy())
    assert gemm.bias is inits["gemm.bias"] and matmul.bias is inits["matmul.bias"] and head.bias is None
    assert [n.op_type for n in matmul.nodes] == ["MatMul", "Add"] and matmul.output is matmul.nodes[1].outputs[0]
    assert [n.op_type for n in gemm.nodes] == ["Gemm"] and [n.op_type for n in head.nodes] == ["MatMul"]
    assert head.output.name == "logits"
    # Not linear layers: a product of two activations, a Gemm with transA.
    activations = ir.Node("", "MatMul", [graph.inputs[0], graph.inputs[0]])
    assert find_linear(graph, activations) is None
    transposed_a = ir.Node("", "Gemm", [graph.inputs[0], inits["gemm.weight"]], attributes=[ir.AttrInt64("transA", 1)])
    assert find_linear(graph, transposed_a) is None


@pytest.mark.parametrize("mode", ["dynamic", "static"])
def test_the_three_forms_are_quantized_and_fused(mode: str) -> None:
    model = _three_forms()
    feed = _three_forms_feed(100)
    expected = _run(model, feed)
    if mode == "dynamic":
        result = quantize_dynamic_model(model)
    else:
        result = quantize_static_model(model, [_three_forms_feed(i) for i in range(16)])
    assert result.quantized == ["gemm.weight", "matmul.weight", "embed.weight"] and not result.left
    ops = _ops(model)
    assert ops["Gemm"] == 0 and ops["Transpose"] == 0 and ops["Gather"] == 1
    assert "embed.weight" in model.graph.initializers  # the embedding still reads the float table
    if mode == "dynamic":
        assert ops["DynamicQuantizeLinear"] == 3 and ops["MatMulInteger"] == 3 and ops["MatMul"] == 0
    else:
        assert ops["QuantizeLinear"] == 3 and ops["MatMul"] == 3 and ops["DequantizeLinear"] == 6
    fused = _optimized_ops(model)
    assert sum(fused[k] for k in INTEGER_KERNELS) == 3, fused
    assert fused["MatMulInteger"] == fused["MatMul"] == fused["Gemm"] == fused["DequantizeLinear"] == 0, fused
    actual = _run(model, feed)
    assert _cosine(actual, expected) > 0.999
    assert np.abs(actual - expected).max() < 0.05 * np.abs(expected).max()


# ---------------------------------------------------------------------------------------------
# Exported models.


def _mlp_program(rank: int, dynamic: bool) -> tuple[Mlp, onnxport.OnnxProgram, tuple[int, ...]]:
    torch.manual_seed(0)
    model = Mlp().eval()
    shape = (6, 40) if rank == 2 else (2, 5, 40)
    dims = ({0: Dim("batch")} if rank == 2 else {0: Dim("batch"), 1: Dim("seq")},) if dynamic else None
    return model, onnxport.export(model, (torch.randn(*shape),), dynamic_shapes=dims), shape


@pytest.mark.parametrize("rank, dynamic", [(2, False), (2, True), (3, False), (3, True)])
def test_dynamic_mlp_is_fused_into_dynamic_quantize_matmul(rank: int, dynamic: bool) -> None:
    model, prog, shape = _mlp_program(rank, dynamic)
    quantized = _copy(prog.model)
    result = quantize_dynamic_model(quantized)
    assert result.quantized == ["up.weight", "down.weight"] and not result.left
    assert result.bytes_after < result.bytes_before / 3.5
    ops = _ops(quantized)
    assert ops["DynamicQuantizeLinear"] == ops["MatMulInteger"] == 2 and ops["Gemm"] == ops["MatMul"] == 0
    fused = _optimized_ops(quantized)
    assert fused["DynamicQuantizeMatMul"] == 2 and fused["MatMulInteger"] == 0 and fused["Add"] == 0, fused
    x = torch.randn(*shape)
    expected = model(x).detach().numpy()
    actual = _run(quantized, {"x": x.numpy()})
    assert _cosine(actual, expected) > 0.999
    np.testing.assert_allclose(actual, _dynamic_reference(model, x.numpy()), rtol=0, atol=2e-3)
    # the float program is untouched
    assert _ops(prog.model)["DynamicQuantizeLinear"] == 0


def _dynamic_reference(model: Mlp, x: np.ndarray) -> np.ndarray:
    """The MLP computed as the dynamic int8 graph does, in numpy (float64)."""

    def quantize(v: np.ndarray) -> tuple[np.ndarray, float, int]:
        low, high = min(float(v.min()), 0.0), max(float(v.max()), 0.0)
        scale = np.float32((high - low) / 255) or np.float32(1)
        zero = int(np.clip(np.rint(-low / scale), 0, 255))
        return np.clip(np.rint(v / scale) + zero, 0, 255), float(scale), zero

    h = x.astype(np.float32)
    for layer in (model.up, model.down):
        w = layer.weight.detach().numpy().astype(np.float64)
        w_scale = (np.abs(w).max(axis=1) / 64).astype(np.float32).astype(np.float64)
        wq = np.clip(np.rint(w / w_scale[:, None]), -64, 64)
        hq, h_scale, h_zero = quantize(h)
        h = ((hq - h_zero) @ wq.T) * (h_scale * w_scale) + layer.bias.detach().numpy()
        h = np.maximum(h, 0).astype(np.float32) if layer is model.up else h
    return h


@pytest.mark.parametrize("rank, dynamic", [(2, False), (2, True), (3, False), (3, True)])
def test_static_mlp_is_fused_into_matmul_integer_to_float(rank: int, dynamic: bool) -> None:
    model, prog, shape = _mlp_program(rank, dynamic)
    quantized = _copy(prog.model)
    feeds = [{"x": torch.randn(*shape).numpy()} for _ in range(16)]
    result = quantize_static_model(quantized, feeds)
    assert result.quantized == ["up.weight", "down.weight"] and "16 feed(s)" in result.calibration
    ops = _ops(quantized)
    assert ops["QuantizeLinear"] == 2 and ops["MatMul"] == 2 and ops["Gemm"] == 0
    fused = _optimized_ops(quantized)
    # both products run on int8; onnxruntime turns neither back into a float Gemm (see _static_linear)
    assert fused["MatMulIntegerToFloat"] == 2 and fused["Gemm"] == fused["MatMul"] == 0, fused
    assert fused["DequantizeLinear"] == 0, fused
    x = torch.randn(*shape)
    expected = model(x).detach().numpy()
    actual = _run(quantized, {"x": x.numpy()})
    assert actual.shape == expected.shape
    assert _cosine(actual, expected) > 0.999


def test_static_cnn_is_fused_into_qlinearconv() -> None:
    torch.manual_seed(0)
    model = Cnn().eval()
    prog = onnxport.export(model, (torch.randn(1, 3, 16, 16),))
    quantized = _copy(prog.model)
    feeds = [{"x": torch.randn(1, 3, 16, 16).numpy()} for _ in range(8)]
    result = quantize_static_model(quantized, feeds)
    assert result.quantized == ["conv1.weight", "conv2.weight", "head.weight"], result
    ops = _ops(quantized)
    assert ops["QuantizeLinear"] == 5 and ops["Conv"] == 2  # inputs of 3 layers, outputs of 2 convolutions
    fused = _optimized_ops(quantized)
    assert fused["QLinearConv"] == 2 and fused["Conv"] == 0 and fused["MatMulIntegerToFloat"] == 1, fused
    x = torch.randn(1, 3, 16, 16)
    assert _cosine(_run(quantized, {"x": x.numpy()}), model(x).detach().numpy()) > 0.995
    # without conv=True the convolutions stay in float
    floats = _copy(prog.model)
    assert quantize_static_model(floats, feeds, conv=False).quantized == ["head.weight"]


def _tiny_llama(tie: bool) -> tuple[torch.nn.Module, onnxport.OnnxProgram]:
    pytest.importorskip("transformers")
    llama = tiny_models.llama(hidden_size=128, intermediate_size=256, vocab_size=512, tie_word_embeddings=tie)

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.llama = llama

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            return self.llama(input_ids=input_ids, use_cache=False).logits

    module = Logits().eval()
    ids = torch.randint(0, 512, (1, 12))
    return module, onnxport.export(module, (ids,), dynamic_shapes=({1: Dim("seq")},))


@pytest.mark.parametrize("mode", ["dynamic", "static"])
def test_tiny_llama_stays_close_and_runs_on_integer_kernels(mode: str) -> None:
    module, prog = _tiny_llama(tie=True)
    quantized = _copy(prog.model)
    if mode == "dynamic":
        result = quantize_dynamic_model(quantized)
    else:
        feeds = [{"input_ids": np.random.default_rng(i).integers(0, 512, (1, 16))} for i in range(8)]
        result = quantize_static_model(quantized, feeds)
    assert len(result.quantized) == 2 * 7 + 1 and not result.left  # q k v o gate up down, and the LM head
    fused = _optimized_ops(quantized)
    assert sum(fused[k] for k in INTEGER_KERNELS) == 15 and fused["MatMulInteger"] == 0, fused
    ids = torch.randint(0, 512, (1, 20))
    expected = module(ids).detach().numpy()
    actual = _run(quantized, {"input_ids": ids.numpy()})
    assert _cosine(actual, expected) > 0.999
    assert (actual.argmax(-1) == expected.argmax(-1)).mean() >= 0.9
    text = str(result)
    assert f"int8 {mode} activations" in text and "15 layer(s)" in text


def test_skip_leaves_layers_in_float_and_a_saved_model_loads(tmp_path) -> None:
    module, prog = _tiny_llama(tie=False)
    quantized = _copy(prog.model)
    result = quantize_dynamic_model(quantized, skip=["lm_head"])
    assert result.left == {"llama.lm_head.weight": "skipped by name"} and len(result.quantized) == 14
    assert "left in float: llama.lm_head.weight (skipped by name)" in str(result)
    path = tmp_path / "llama_int8.onnx"
    ir.save(quantized, str(path))
    onnx.checker.check_model(str(path))
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    ids = np.random.default_rng(0).integers(0, 512, (1, 9))
    (loaded,) = session.run(None, {"input_ids": ids})
    np.testing.assert_allclose(loaded, _run(quantized, {"input_ids": ids}), rtol=1e-5, atol=1e-5)


def test_per_tensor_weights_and_float16_weights() -> None:
    model = _three_forms()
    result = quantize_dynamic_model(model, per_channel=False)
    scales = [v for name, v in model.graph.initializers.items() if name.endswith(".scale")]
    assert len(scales) == 3 and all(v.const_value.shape == ir.Shape([]) for v in scales)
    assert "per-tensor" in str(result)
    half = _three_forms()
    value = half.graph.initializers["gemm.weight"]
    value.const_value = ir.Tensor(value.const_value.numpy().astype(np.float16), name="gemm.weight")
    half.graph.inputs[0].dtype = ir.DataType.FLOAT16
    result = quantize_dynamic_model(half)
    assert result.left == {"gemm.weight": "float16 weight: int8 activation quantization takes float32"}


def _pair_sums_saturate(a: np.ndarray, w: np.ndarray) -> bool:
    """Whether ``a @ w`` (uint8 ``[M, K]`` x int8 ``[K, N]``) goes wrong in a kernel that adds each pair of
    products along K in int16 with saturation, as x86's VPMADDUBSW does (onnxruntime's uint8 x int8
    products on CPUs with AVX2 and no VNNI)."""
    k = a.shape[1] + a.shape[1] % 2
    a = np.pad(a.astype(np.int64), ((0, 0), (0, k - a.shape[1])))
    w = np.pad(w.astype(np.int64), ((0, k - w.shape[0]), (0, 0)))
    pairs = a[:, 0::2, None] * w[None, 0::2, :] + a[:, 1::2, None] * w[None, 1::2, :]  # [M, K/2, N]
    return bool((np.clip(pairs, -32768, 32767) != pairs).any())


@pytest.mark.parametrize("mode", ["dynamic", "static"])
def test_int8_weights_never_saturate_avx2_pair_sums(mode: str) -> None:
    # The worst activation codes, 0 and 255 in every sign pattern the weights' pairs can meet, against each
    # quantized weight: codes in [-64, 64] never overflow a pair sum; the full range does.
    rng = np.random.default_rng(0)
    worst = np.concatenate([np.full((1, N), 255), rng.choice([0, 255], (64, N))]).astype(np.uint8)
    for reduce_range, saturates in ((True, False), (False, True)):
        model = _three_forms()
        if mode == "dynamic":
            quantize_dynamic_model(model, reduce_range=reduce_range)
        else:
            quantize_static_model(model, [_three_forms_feed(0)], reduce_range=reduce_range)
        codes = [v.const_value.numpy() for name, v in model.graph.initializers.items() if name.endswith(".int8")]
        assert len(codes) == 3 and all(c.dtype == np.int8 for c in codes)
        assert max(int(np.abs(c.astype(np.int64)).max()) for c in codes) == (64 if reduce_range else 127)
        found = [_pair_sums_saturate(np.resize(worst, (len(worst), c.shape[0])), c) for c in codes]
        assert any(found) is saturates, found


# ---------------------------------------------------------------------------------------------
# Calibration.


def test_collect_reduces_each_value_over_the_feeds() -> None:
    model = _three_forms()
    feeds = [_three_forms_feed(i) for i in range(5)]
    names = ["x", "gemm_out", "matmul.bias"]
    gemm_out = next(n for n in model.graph if n.name == "gemm").outputs[0]
    gemm_out.name = "gemm_out"
    outputs_before = list(model.graph.outputs)
    spans = collect(model, feeds, names, MinMax.reduce)
    assert list(model.graph.outputs) == outputs_before  # the extra outputs are gone again
    xs = np.stack([f["x"] for f in feeds])
    assert spans["x"] == MinMax(float(xs.min()), float(xs.max()))
    w1 = model.graph.initializers["gemm.weight"].const_value.numpy()
    b1 = model.graph.initializers["gemm.bias"].const_value.numpy()
    hidden = xs @ w1.T + b1
    assert spans["gemm_out"].low == pytest.approx(float(hidden.min()), abs=1e-5)
    assert spans["gemm_out"].high == pytest.approx(float(hidden.max()), abs=1e-5)
    bias = model.graph.initializers["matmul.bias"].const_value.numpy()
    assert spans["matmul.bias"] == MinMax(float(bias.min()), float(bias.max()))

    # A reduction of one's own: the Gram matrix X^T X of a layer's input (GPTQ's Hessian), and a count.
    def gram(name: str, x: np.ndarray, total: np.ndarray | None) -> np.ndarray:
        x = x.reshape(-1, x.shape[-1]).astype(np.float64)
        return (0.0 if total is None else total) + x.T @ x

    def count(name: str, x: np.ndarray, total: int | None) -> int:
        return (total or 0) + 1

    grams = collect(model, feeds, ["gemm_out", "x"], {"gemm_out": gram, "x": count})
    flat = hidden.reshape(-1, N).astype(np.float64)
    np.testing.assert_allclose(grams["gemm_out"], flat.T @ flat, rtol=1e-5)
    assert grams["x"] == 5


def test_percentile_ranges_clip_outliers() -> None:
    model = _three_forms()
    feeds = [_three_forms_feed(i) for i in range(4)]
    feeds[2]["x"][0, 0] = 1000.0  # one outlier
    full = ranges(model, feeds, ["x"])["x"]
    clipped = ranges(model, feeds, ["x"], method="percentile", percentile=99.0)["x"]
    assert full.high == 1000.0 and clipped.high < 5.0 and clipped.low < 0 < clipped.high
    sample = Sample(limit=100)
    for i in range(10):
        sample.add(np.full(50, float(i)))
    assert sample.values.size == 100 and sample.seen == 500 and (sample.low, sample.high) == (0.0, 9.0)
    assert len(set(sample.values.tolist())) > 5  # drawn from all arrays, not the last ones


@pytest.mark.parametrize("feeds, match", [
    ([], "calibration set is empty"),
    ({"x": np.zeros((6, K), np.float32)}, "one dict, not a sequence"),
    ([{"x": np.zeros((6, K), np.float32)}], "lacks 'ids'"),
    ([{"x": np.zeros((6, K), np.float32), "ids": np.zeros((2, 3), np.int64), "y": np.zeros(1)}], "'y', not an input"),
    ([{"x": np.zeros((6, K), np.float64), "ids": np.zeros((2, 3), np.int64)}], "feed 0 .* does not run"),
    ([np.zeros(3)], "not a dict"),
])
def test_bad_calibration_sets_are_refused(feeds: object, match: str) -> None:
    model = _three_forms()
    with pytest.raises(InvalidInputError, match=match) as caught:
        quantize_static_model(model, feeds)
    assert caught.value.fix
    assert _ops(model)["QuantizeLinear"] == 0  # refused before any change


def test_bad_options_are_refused() -> None:
    model = _three_forms()
    feeds = [_three_forms_feed(0)]
    with pytest.raises(InvalidInputError, match="method must be"):
        quantize_static_model(model, feeds, method="entropy")
    with pytest.raises(InvalidInputError, match="percentile must be"):
        quantize_static_model(model, feeds, method="percentile", percentile=40)
    with pytest.raises(InvalidInputError, match="no value of the model is named 'nope'"):
        collect(model, feeds, ["nope"], MinMax.reduce)
    with pytest.raises(InvalidInputError, match="expected an onnx_ir Model"):
        quantize_dynamic_model(onnx.ModelProto())
    with pytest.raises(InvalidInputError, match="per_channel must be"):
        quantize_dynamic_model(model, per_channel="yes")
    with pytest.raises(InvalidInputError, match="reduce_range must be"):
        quantize_static_model(model, feeds, reduce_range=1)
    old = _three_forms()
    old.opset_imports[""] = 12
    with pytest.raises(InvalidInputError, match="opset 13"):
        quantize_dynamic_model(old)
    assert _ops(model)["DynamicQuantizeLinear"] == 0
    # a single name is one name, not its characters
    assert quantize_dynamic_model(model, skip="embed").left == {"embed.weight": "skipped by name"}
