"""Quantized models stay quantized: PT2E's quantize/dequantize ops become QuantizeLinear/DequantizeLinear that
onnxruntime fuses into integer kernels, torchao's weight-only layers keep integer weights, and both compute
what the eager quantized model computes.

Tolerances: onnxruntime at its "basic" level runs the QDQ graph as written, torch's own arithmetic (quantize,
dequantize, float conv/matmul), except that torch quantizes ``x * (1 / scale)`` where QuantizeLinear computes
``x / scale``: a value within a rounding error of a rounding boundary lands one step away, so nearly every
output matches and the rest are one output step off. At the default
"all" level the integer kernels (QLinearConv, QGemm) requantize with integer arithmetic and round each
intermediate activation independently, so a value may land one quantization step away; those compounded over
the layers stay within two steps of the output's quantization.
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
import torch

import onnxport
from onnxport.errors import TranslationError
from onnxport.optimize.constant_fold import ConstantFoldPass
from onnxport.verify.integer import quantized_output_steps

pytest.importorskip("torchao")

from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e  # noqa: E402


class Cnn(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1, self.b1 = torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16)
        self.c2, self.b2 = torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.BatchNorm2d(32)
        self.fc = torch.nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.nn.functional.max_pool2d(torch.relu(self.b1(self.c1(x))), 2)
        x = torch.relu(self.b2(self.c2(x)))
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1))


def _xnnpack(per_channel: bool = True, weight_limit: int = 64):
    """XNNPACK's symmetric int8 quantizer, its weights' codes within ``weight_limit`` (64: exact in
    onnxruntime's integer kernels on every x86 CPU; 127, its default, overflows the int16 pair sums of the
    AVX2 kernels on CPUs without VNNI: see onnxport.verify.integer)."""
    from torchao.testing.pt2e._xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config

    config = get_symmetric_quantization_config(is_per_channel=per_channel, weight_qmin=-weight_limit,
                                               weight_qmax=weight_limit)
    return XNNPACKQuantizer().set_global(config)


def _x86():
    from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as x86

    return x86.X86InductorQuantizer().set_global(x86.get_default_x86_inductor_quantization_config())


def _pt2e(model: torch.nn.Module, example: tuple, quantizer, calibration: list[tuple],
          strict: bool = False, dynamic_shapes: object = None) -> torch.nn.Module:
    captured = torch.export.export(model.eval(), example, strict=strict, dynamic_shapes=dynamic_shapes)
    prepared = prepare_pt2e(captured.module(), quantizer)
    for batch in calibration:
        prepared(*batch)
    return convert_pt2e(prepared)


def _cnn(quantizer, strict: bool = False, dynamic: bool = False) -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = Cnn().eval()
    with torch.no_grad():
        for bn in (model.b1, model.b2):
            bn.running_mean.uniform_(-0.2, 0.2)
            bn.running_var.uniform_(0.5, 2.0)
    x = torch.randn(2, 3, 16, 16)
    dims = ({0: torch.export.Dim("batch")},) if dynamic else None
    return _pt2e(model, (x,), quantizer, [(torch.randn(2, 3, 16, 16),) for _ in range(3)], strict, dims), x


def _session(proto: onnx.ModelProto, level: str = "all", save_optimized: str | None = None) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = {"all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
                                        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC}[level]
    if save_optimized:
        options.optimized_model_filepath = save_optimized
    return ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _run(session: ort.InferenceSession, *args: torch.Tensor) -> np.ndarray:
    names = [i.name for i in session.get_inputs()]
    return session.run(None, dict(zip(names, [a.numpy() for a in args])))[0]


def _fused_ops(proto: onnx.ModelProto) -> Counter:
    """The op types of onnxruntime's optimized graph of ``proto``."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "optimized.onnx")
        _session(proto, save_optimized=path)
        return Counter(n.op_type for n in onnx.load(path).graph.node)


def _ops(prog: onnxport.OnnxProgram) -> Counter:
    return Counter(node.op_type for node in prog.model.graph)


def _within_one_step(got: np.ndarray, expected: np.ndarray, step: float) -> None:
    """At most one quantization step off, and nearly every element exact (see the module's docstring)."""
    diff = np.abs(got - expected)
    assert diff.max() <= step * 1.001 + 1e-6, diff.max()
    assert (diff < 1e-5).mean() >= 0.75, (diff < 1e-5).mean()


def _last_step(model: torch.fx.GraphModule) -> float:
    scales = [n.args[1] for n in model.graph.nodes if "quantize_per_tensor" in str(n.target)]
    return float(scales[-1])


# -- PT2E ---------------------------------------------------------------------------------------------------------


def test_pt2e_cnn_runs_as_integer_kernels_and_matches_eager() -> None:
    model, x = _cnn(_xnnpack())
    prog = onnxport.export(model, (x,))  # verified against eager PyTorch on the example
    ops = _ops(prog)
    assert ops["QuantizeLinear"] >= 5 and ops["DequantizeLinear"] >= 8
    assert not {"Round", "Clip", "Floor"} & set(ops), ops  # no quantization arithmetic
    int8 = [v for v in prog.model.graph.initializers.values() if v.dtype == ir.DataType.INT8]
    assert len(int8) == 3  # both convolutions' and the linear layer's weights stay int8
    assert not any(v.dtype == ir.DataType.FLOAT and len(v.shape) == 4 for v in prog.model.graph.initializers.values())
    proto = prog.model_proto
    fused = _fused_ops(proto)
    assert fused["QLinearConv"] == 2 and fused["QGemm"] == 1, fused
    x2 = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        expected = model(x2).numpy()
    step = _last_step(model)
    _within_one_step(_run(_session(proto, "basic"), x2), expected, step)
    assert np.abs(_run(_session(proto), x2) - expected).max() <= 2 * step + 1e-6


def test_full_range_weights_on_a_cpu_whose_integer_kernels_saturate_name_the_cause() -> None:
    # Where onnxruntime's uint8 x int8 kernel saturates (x86 without VNNI), the fused QLinearConv/QGemm of
    # full-range weights computes the model several steps off: verification says so, names the cause and
    # the fix; elsewhere the same model verifies.
    from onnxport.errors import VerificationError
    from onnxport.verify.integer import saturating_integer_products

    model, x = _cnn(_xnnpack(weight_limit=127))
    if not saturating_integer_products():
        assert onnxport.export(model, (x,)).report.verification.ok
        return
    with pytest.raises(VerificationError) as caught:
        onnxport.export(model, (x,))
    assert "AVX2 and no VNNI" in caught.value.fix and "[-64, 64]" in caught.value.fix, caught.value.fix


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic-batch"])
def test_pt2e_x86_quantizer_uint8_activations(dynamic) -> None:
    """Verified by default: the X86 quantizer leaves the head's output in float, so verification bounds its
    difference by the steps of the last quantized activation scaled by the head's weights (it was a false alarm
    at float tolerances)."""
    # The X86 quantizer finds convolutions and linear layers with torch's get_source_partitions, which on torch
    # 2.10 reads only the source_fn_stack that strict export records (2.13 falls back to nn_module_stack): a
    # non-strict capture there leaves the model unquantized.
    model, x = _cnn(_x86(), strict=True, dynamic=dynamic)
    prog = onnxport.export(model, (x,), dynamic_shapes=({0: torch.export.Dim("batch")},) if dynamic else None)
    assert prog.report.verification.ok
    bound = quantized_output_steps(prog.model)[prog.model.graph.outputs[0].name]
    assert 1e-4 < bound < 0.05  # the steps of the head's input through its weights: far below a wrong scale's
    zero_points = [n.inputs[2].dtype for n in prog.model.graph if n.op_type == "QuantizeLinear"]
    assert zero_points and set(zero_points) == {ir.DataType.UINT8}
    assert _fused_ops(prog.model_proto)["QLinearConv"] >= 1
    with torch.no_grad():
        expected = model(x).numpy()
    assert np.abs(_run(_session(prog.model_proto, "basic"), x) - expected).max() < bound


def test_pt2e_bert_encoder_fuses_quantized_matmuls() -> None:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=32)
    bert = transformers.BertModel(config, add_pooling_layer=False).eval()

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.bert(input_ids=ids).last_hidden_state

    ids = torch.randint(0, 100, (2, 8))
    model = _pt2e(Encoder(), (ids,), _xnnpack(), [(torch.randint(0, 100, (2, 8)),) for _ in range(2)])
    prog = onnxport.export(model, (ids,), verify=False)
    assert not {"Round", "Floor"} & set(_ops(prog))
    proto = prog.model_proto
    assert _fused_ops(proto)["QGemm"] == 6  # q, k, v, attention output, two feed-forward layers
    with torch.no_grad():
        expected = model(ids).numpy()
    np.testing.assert_allclose(_run(_session(proto, "basic"), ids), expected, atol=1e-4)
    # LayerNorm ends the encoder: one step of its input's quantization is scaled by about gamma / std.
    assert np.abs(_run(_session(proto), ids) - expected).max() < 0.1


def test_pt2e_x86_bert_with_a_dynamic_batch() -> None:
    """The X86 quantizer's BERT, exported with a dynamic batch: its quantized linear layers become 2-D products
    reshaped back to ``[batch, tokens, width]``, the batch a symbolic size (it was a foreign RuntimeError)."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=32)
    bert = transformers.BertModel(config, add_pooling_layer=False).eval()
    ids, mask = torch.randint(0, 100, (2, 8)), torch.ones(2, 8, dtype=torch.int64)
    batch = {0: torch.export.Dim("batch")}
    ep = torch.export.export(bert, (), {"input_ids": ids, "attention_mask": mask},
                             dynamic_shapes={"input_ids": batch, "attention_mask": batch}, strict=True)
    prepared = prepare_pt2e(ep.module(), _x86())  # strict: torch 2.10's quantizer reads its source_fn_stack
    for _ in range(2):
        prepared(input_ids=torch.randint(0, 100, (2, 8)), attention_mask=mask)
    model = convert_pt2e(prepared)
    prog = onnxport.export(model, (), {"input_ids": ids, "attention_mask": mask},
                           dynamic_shapes={"input_ids": batch, "attention_mask": batch})
    assert prog.report.verification.ok and _ops(prog)["QuantizeLinear"] >= 6
    # each quantized weight stored [in, out] for its MatMul: no Transpose of a dequantized weight at run time
    assert not [n for n in prog.model.graph if n.op_type == "Transpose" and n.inputs[0].producer() is not None
                and n.inputs[0].producer().op_type == "DequantizeLinear"]
    session = _session(prog.model_proto)
    three = torch.randint(0, 100, (3, 8))
    with torch.no_grad():
        expected = model(input_ids=three, attention_mask=torch.ones(3, 8, dtype=torch.int64)).last_hidden_state
    got = session.run(None, {"input_ids": three.numpy(), "attention_mask": np.ones((3, 8), dtype=np.int64)})[0]
    assert np.abs(got - expected.numpy()).max() < 0.1


class _Quantize(torch.nn.Module):
    def __init__(self, qmin: int, qmax: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.qmin, self.qmax, self.dtype = qmin, qmax, dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = torch.ops.quantized_decomposed.quantize_per_tensor(x, 0.05, 3, self.qmin, self.qmax, self.dtype)
        return q


def test_narrow_quantization_range_is_clipped() -> None:
    x = torch.randn(4, 50) * 10
    prog = onnxport.export(_Quantize(-127, 127, torch.int8), (x,))
    assert _ops(prog)["Clip"] == 1 and _ops(prog)["QuantizeLinear"] == 1
    got = prog(x)
    assert got.dtype == torch.int8 and int(got.min()) == -127
    assert torch.equal(got, _Quantize(-127, 127, torch.int8)(x))


def test_unsupported_quantized_dtype_is_refused() -> None:
    with pytest.raises(TranslationError, match="int32 has no ONNX QuantizeLinear"):
        onnxport.export(_Quantize(-1000, 1000, torch.int32), (torch.randn(3),), verify=False)


def test_per_channel_quantize_and_dynamic_qparams() -> None:
    class Dynamic(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            qd = torch.ops.quantized_decomposed
            scale, zero = qd.choose_qparams.tensor(x, 0, 255, torch.finfo(torch.float32).eps, torch.uint8)
            q = qd.quantize_per_tensor.tensor(x, scale, zero, 0, 255, torch.uint8)
            y = qd.dequantize_per_tensor.tensor(q, scale, zero, 0, 255, torch.uint8)
            scales, zeros = torch.tensor([0.1, 0.2, 0.05]), torch.tensor([0, 1, -2])
            w = qd.quantize_per_channel(y, scales, zeros, 1, -128, 127, torch.int8)
            return qd.dequantize_per_channel(w, scales, zeros, 1, -128, 127, torch.int8)

    x = torch.randn(4, 3, 5)
    prog = onnxport.export(Dynamic(), (x,))
    ops = _ops(prog)
    assert ops["QuantizeLinear"] == 2 and ops["DequantizeLinear"] == 2
    torch.testing.assert_close(prog(x), Dynamic()(x), atol=1e-6, rtol=0)


@pytest.mark.parametrize("axis", [0, 1])
def test_per_channel_dequantize_with_zero_points_that_are_not_integers(axis) -> None:
    """The embedding quantizer's rows: uint8 codes whose zero points are floats (160.87), which
    DequantizeLinear's integer zero point cannot hold (they were rounded: a step off)."""
    g = torch.Generator().manual_seed(0)
    codes = torch.randint(0, 256, (6, 5), dtype=torch.uint8, generator=g)
    size = codes.shape[axis]
    scales, zeros = torch.rand(size, generator=g) * 0.02 + 0.005, torch.rand(size, generator=g) * 200 + 20

    class Rows(torch.nn.Module):
        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            qd = torch.ops.quantized_decomposed
            table = qd.dequantize_per_channel(codes, scales, zeros, axis, 0, 255, torch.uint8)
            return torch.nn.functional.embedding(ids, table)

    ids = torch.tensor([[0, 5, 2], [1, 1, 4]])
    prog = onnxport.export(Rows(), (ids,))
    assert _ops(prog)["DequantizeLinear"] == 1
    torch.testing.assert_close(prog(ids), Rows()(ids), atol=1e-6, rtol=0)


# -- torchao ------------------------------------------------------------------------------------------------------


class Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = torch.nn.Linear(64, 128), torch.nn.Linear(128, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


def _torchao(config) -> Mlp:
    from torchao.quantization import quantize_

    torch.manual_seed(0)
    model = Mlp().eval()
    quantize_(model, config)
    return model


def test_torchao_int8_weight_only_keeps_int8_weights() -> None:
    from torchao.quantization import Int8WeightOnlyConfig

    model = _torchao(Int8WeightOnlyConfig())
    x = torch.randn(3, 5, 64)
    dims = ({0: torch.export.Dim("batch"), 1: torch.export.Dim("seq")},)
    prog = onnxport.export(model, (x,), dynamic_shapes=dims)  # verified
    weights = {v.name: v.dtype for v in prog.model.graph.initializers.values()}
    assert weights["up.weight.qdata"] == ir.DataType.INT8 and weights["down.weight.qdata"] == ir.DataType.INT8
    assert not any(v.dtype == ir.DataType.FLOAT and len(v.shape) == 2 for v in prog.model.graph.initializers.values())
    assert "Cast" in _ops(prog)  # the codes dequantized in the graph, not folded into a float weight
    x2 = torch.randn(4, 2, 64)
    with torch.no_grad():
        torch.testing.assert_close(prog(x2), model(x2), atol=1e-5, rtol=1e-5)


def test_torchao_int4_weight_only_is_matmulnbits() -> None:
    from torchao.quantization import IntxWeightOnlyConfig, PerGroup

    model = _torchao(IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(32)))
    x = torch.randn(3, 64)
    prog = onnxport.export(model, (x,))
    assert _ops(prog)["MatMulNBits"] == 2
    packed = [v for v in prog.model.graph.initializers.values() if v.dtype == ir.DataType.UINT8]
    assert sorted(v.const_value.nbytes for v in packed) == [32 * 128 // 2, 128 * 64 // 2]  # two codes a byte
    with torch.no_grad():
        torch.testing.assert_close(prog(x), model(x), atol=1e-5, rtol=1e-5)


def test_torchao_int4_for_other_runtimes_is_int4_dequantization() -> None:
    from torchao.quantization import IntxWeightOnlyConfig, PerGroup

    model = _torchao(IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(32)))
    x = torch.randn(3, 64)
    prog = onnxport.export(model, (x,), target="onnxruntime-web>=1.22")
    assert "MatMulNBits" not in _ops(prog)
    assert sum(v.dtype == ir.DataType.INT4 for v in prog.model.graph.initializers.values()) == 2
    with torch.no_grad():
        torch.testing.assert_close(prog(x), model(x), atol=1e-5, rtol=1e-5)


def test_dequantize_affine_in_blocks() -> None:
    class Blocked(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.register_buffer("q", torch.randint(-8, 8, (6, 64), dtype=torch.int8))
            self.register_buffer("scale", torch.rand(6, 4) + 0.1)
            self.register_buffer("zero", torch.randint(-2, 3, (6, 4), dtype=torch.int8))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            w = torch.ops.torchao.dequantize_affine(self.q, [1, 16], self.scale, self.zero, torch.int8, -8, 7)
            return x * w

    model, x = Blocked(), torch.randn(6, 64)
    prog = onnxport.export(model, (x,))
    dq = [n for n in prog.model.graph if n.op_type == "DequantizeLinear"]
    assert len(dq) == 1 and dq[0].attributes["block_size"].value == 16 and dq[0].inputs[0].dtype == ir.DataType.INT4
    torch.testing.assert_close(prog(x), model(x), atol=1e-6, rtol=0)


# -- constant folding -----------------------------------------------------------------------------------------------


def test_constant_folding_keeps_dequantization() -> None:
    codes = ir.Value(name="codes")
    nodes = [ir.Node("", "Constant", [], [ir.AttrTensor("value", ir.tensor(np.arange(-4, 4, dtype=np.int8)))]),
             ir.Node("", "Constant", [], [ir.AttrTensor("value", ir.tensor(np.array(0.5, np.float32)))])]
    codes, scale = nodes[0].outputs[0], nodes[1].outputs[0]
    codes.dtype, scale.dtype = ir.DataType.INT8, ir.DataType.FLOAT
    dq = ir.Node("", "DequantizeLinear", [codes, scale])
    cast = ir.Node("", "Cast", [codes], [ir.AttrInt64("to", int(ir.DataType.FLOAT))])
    cast.outputs[0].dtype = dq.outputs[0].dtype = ir.DataType.FLOAT
    graph = ir.Graph([], [dq.outputs[0], cast.outputs[0]], nodes=[*nodes, dq, cast], opset_imports={"": 21})
    ConstantFoldPass()(ir.Model(graph, ir_version=10))
    assert [n.op_type for n in graph] == ["Constant", "Constant", "DequantizeLinear", "Cast"]
