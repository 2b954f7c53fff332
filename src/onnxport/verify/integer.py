"""Quantized models in onnxruntime: which models its CPU optimizer fuses into integer kernels, the error
their outputs may have, and whether those kernels compute exact products on this CPU.

Integer kernels (QLinearConv, QGemm, ...) requantize each layer's output with integer arithmetic, rounding
where PyTorch's quantize/dequantize ops round in float: a value on a rounding boundary lands one step away,
and such steps compound over the layers. An output that is a dequantized value is therefore compared with
eager PyTorch to within two of its quantization steps (``quantized_output_steps``), as onnxruntime's own
fused kernels give on the models tested; a wrong scale, zero point or layout errs far more.

On x86 CPUs with AVX2 but without VNNI, onnxruntime's uint8 x int8 kernels multiply with VPMADDUBSW, which
adds each pair of products in int16 with saturation: 255 * 127 * 2 does not fit, so full-range int8 weights
can give a product several quantization steps off, where a CPU with VNNI (or ARM) gives the exact one. At
its "basic" level onnxruntime runs the QuantizeLinear/DequantizeLinear graph in float and is exact everywhere.
"""

from __future__ import annotations

import functools

import numpy as np
import onnx_ir as ir

_QUANTIZED_OPS = frozenset({"QuantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "ConvInteger",
                            "QLinearConv", "QLinearMatMul"})


def integer_kernels(model: ir.Model) -> bool:
    """Whether ``model``'s main graph holds quantized activations, which onnxruntime runs on integer kernels."""
    return any(node.op_type in _QUANTIZED_OPS and node.domain in ("", "ai.onnx") for node in model.graph)


_LAYOUT_OPS = frozenset({"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose"})
_STEPS = 2


def quantized_output_steps(model: ir.Model) -> dict[str, float]:
    """Per graph output that is a DequantizeLinear's output (through layout-only ops), the absolute error
    the integer kernels may give it: two of its largest quantization step."""
    if not integer_kernels(model):
        return {}
    steps: dict[str, float] = {}
    for output in model.graph.outputs:
        node = output.producer()
        while node is not None and node.op_type in _LAYOUT_OPS and node.domain in ("", "ai.onnx") and node.inputs:
            node = node.inputs[0].producer() if node.inputs[0] is not None else None
        if node is None or node.op_type != "DequantizeLinear" or len(node.inputs) < 2 or node.inputs[1] is None:
            continue
        scale = ir.convenience.get_const_tensor(node.inputs[1])
        if scale is not None and output.name:
            steps[output.name] = _STEPS * float(np.abs(scale.numpy()).max())
    return steps


@functools.cache
def saturating_integer_products() -> bool:
    """Whether onnxruntime's CPU kernel for uint8 x int8 products saturates on this machine: one product
    whose pairs of terms overflow int16, run in onnxruntime and compared with the exact one."""
    import torch

    from onnxport.verify.session import OrtRunner

    k = 4
    x = ir.Value(name="a", type=ir.TensorType(ir.DataType.UINT8), shape=ir.Shape([1, k]))
    w = ir.Value(name="w", type=ir.TensorType(ir.DataType.INT8), shape=ir.Shape([k, 1]),
                 const_value=ir.Tensor(np.full((k, 1), 127, dtype=np.int8)))
    node = ir.Node("", "MatMulInteger", [x, w])
    node.outputs[0].name, node.outputs[0].dtype, node.outputs[0].shape = "y", ir.DataType.INT32, ir.Shape([1, 1])
    graph = ir.Graph([x], node.outputs, nodes=[node], initializers=[w], opset_imports={"": 13})
    try:
        (y,) = OrtRunner(ir.Model(graph, ir_version=8), threads=1).run([torch.full((1, k), 255, dtype=torch.uint8)])
    except Exception:  # noqa: BLE001 - onnxruntime's own exception types; no answer is "no"
        return False
    return int(y.flatten()[0]) != 255 * 127 * k
