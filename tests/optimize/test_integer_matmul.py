"""IntegerMatMulPass: a quantized linear layer whose output stays float (the X86 quantizer's, a model's last
layer) multiplies its integer operands with ``MatMulInteger``; written back by ``float_products`` it is the
dequantized product torch computes; a product quantized again (onnxruntime's QGemm), and files for TensorRT,
keep their DequantizeLinear form."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import pytest
import torch

import onnxport
from onnxport.verify.integer import float_products, quantized_output_steps

pytest.importorskip("torchao")

from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e  # noqa: E402


class Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = torch.nn.Linear(32, 64), torch.nn.Linear(64, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


def _quantized(quantizer: str) -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    x = torch.randn(4, 32)
    if quantizer == "x86":
        from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as x86

        chosen = x86.X86InductorQuantizer().set_global(x86.get_default_x86_inductor_quantization_config())
    else:
        from torchao.testing.pt2e._xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config

        config = get_symmetric_quantization_config(is_per_channel=True, weight_qmin=-64, weight_qmax=64)
        chosen = XNNPACKQuantizer().set_global(config)
    batch = ({0: torch.export.Dim("batch")},)
    prepared = prepare_pt2e(torch.export.export(Mlp().eval(), (x,), dynamic_shapes=batch, strict=True).module(),
                            chosen)
    for _ in range(4):
        prepared(torch.randn(4, 32))
    return convert_pt2e(prepared), x


def _ops(model: ir.Model) -> Counter:
    return Counter(node.op_type for node in model.graph)


def _run(model: ir.Model, x: torch.Tensor, level: str) -> np.ndarray:
    options = ort.SessionOptions()
    options.graph_optimization_level = {"all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
                                        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC}[level]
    session = ort.InferenceSession(ir.to_proto(model).SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]


def test_float_output_products_are_integer_products_and_write_back_to_torchs() -> None:
    model, x = _quantized("x86")
    prog = onnxport.export(model, (x,), dynamic_shapes=({0: torch.export.Dim("batch")},))
    assert prog.report.verification.ok
    ops = _ops(prog.model)
    assert ops["MatMulInteger"] == 2 and ops["MatMul"] == 0 and ops["DequantizeLinear"] == 0, ops
    other = torch.randn(7, 32)
    with torch.no_grad():
        expected = model(other).numpy()
    # the head's bound: a step of its input's codes through the weights' codes and scales
    bound = quantized_output_steps(prog.model)[prog.model.graph.outputs[0].name]
    assert 1e-4 < bound < 0.5
    assert np.abs(_run(prog.model, other, "all") - expected).max() <= bound
    # written back from the file's own constants: torch's dequantized float products, to float tolerance
    copy = ir.from_proto(ir.to_proto(prog.model))
    assert float_products(copy) == 2
    ops = _ops(copy)
    assert ops["MatMulInteger"] == 0 and ops["MatMul"] == 2 and ops["DequantizeLinear"] == 4, ops
    np.testing.assert_allclose(_run(copy, other, "basic"), expected, atol=1e-5, rtol=1e-5)


def test_a_wrong_integer_product_fails_its_check_written_back() -> None:
    """The write-back reads the file's own zero points and scales: a wrong one shows at level 'basic'."""
    model, x = _quantized("x86")
    prog = onnxport.export(model, (x,), verify=False)
    with torch.no_grad():
        expected = model(x).numpy()
    copy = ir.from_proto(ir.to_proto(prog.model))
    (scale,) = [v for name, v in copy.graph.initializers.items() if name.endswith(".weight_scale")][:1]
    scale.const_value = ir.Tensor(scale.const_value.numpy() * 1.5, name=scale.name)
    float_products(copy)
    assert np.abs(_run(copy, x, "basic") - expected).max() > 1e-2


def test_requantized_products_and_tensorrt_files_keep_dequantize_linear() -> None:
    model, x = _quantized("xnnpack")  # the first linear's output quantized again (QGemm), the last's float
    prog = onnxport.export(model, (x,))
    ops = _ops(prog.model)
    assert prog.report.verification.ok and ops["MatMulInteger"] == 1 and ops["MatMul"] == 1, ops
    model, x = _quantized("x86")
    ops = _ops(onnxport.export(model, (x,), target="tensorrt>=10.0", verify=False).model)
    assert ops["MatMulInteger"] == 0 and ops["MatMul"] == 2 and ops["DequantizeLinear"] >= 2, ops
