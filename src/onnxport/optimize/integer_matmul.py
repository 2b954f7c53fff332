"""IntegerMatMulPass: a quantized linear layer with a float output multiplies its integer operands.

A PT2E quantizer that leaves a linear layer's output in float (the X86 Inductor quantizer's BERT, its CNN's
head) gives ``MatMul(DequantizeLinear(a), DequantizeLinear(W))`` with no ``QuantizeLinear`` after: onnxruntime
fuses a product into its integer kernels only where the output is quantized again, so it dequantizes the whole
weight at every run and multiplies in float, slower than the float model (2x on a BERT). This pass writes

    MatMulInteger(a, W, a_zero_point, W_zero_points) -> Cast(float) -> Mul(W_scales) -> Mul(a_scale)

which computes the same sum of products, exactly in int32 before the scaling (torch's float product rounds
each term: the two differ by float rounding), on onnxruntime's integer GEMM: 0.5x the float model's time on
that BERT. The scales stay apart, as the dequantizations had them, so that verification can write the product
back as ``MatMul(DequantizeLinear(a), DequantizeLinear(W))`` from the file's own constants
(``onnxport.verify.integer.float_products``) and compare it with eager PyTorch's float arithmetic exactly. It applies where the activation's scale and zero point are constants (static quantization; a scale
computed at run time is onnxruntime's own ``DynamicQuantizeLinear`` form), the weight is a constant dequantized
per tensor or per output column (``LinearWeightLayoutPass`` stores PT2E weights ``[in, out]``, scales along axis
1), and the product's output is not quantized again (that one onnxruntime fuses into ``QGemm``). Only for the
runtimes whose releases all run ``MatMulInteger`` (``Forms.allows("MatMulInteger")``): TensorRT reads
quantized products only as ``QuantizeLinear``/``DequantizeLinear``.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxport.optimize import _match as m
from onnxport.targets import Forms

__all__ = ["IntegerMatMulPass"]

_INTEGERS = (ir.DataType.UINT8, ir.DataType.INT8)
_LAYOUT = ("Reshape", "Squeeze", "Unsqueeze", "Flatten")  # what may stand between the activation and the product


class IntegerMatMulPass(ir.passes.InPlacePass):
    def __init__(self, forms: Forms) -> None:
        super().__init__()
        self.forms = forms

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        if not self.forms.allows("MatMulInteger"):
            return ir.passes.PassResult(model, modified=False)
        graph = model.graph
        done = 0
        for node in list(graph):
            if node.op_type == "MatMul" and not node.domain and len(node.inputs) == 2:
                done += _rewrite(graph, node)
        return ir.passes.PassResult(model, modified=done > 0)


def _rewrite(graph: ir.Graph, matmul: ir.Node) -> int:
    weight = _weight(matmul.inputs[1])
    activation = _activation(matmul.inputs[0])
    if weight is None or activation is None or _requantized(matmul.outputs[0]):
        return 0
    codes, weight_scales, weight_zeros = weight
    (a_codes, a_scale, a_zero), layout = activation
    for step in reversed(layout):  # the same layout ops, on the integer codes
        copy = ir.Node("", step.op_type, [a_codes, *step.inputs[1:]], attributes=list(step.attributes.values()))
        copy.outputs[0].dtype, copy.outputs[0].shape = a_codes.dtype, step.outputs[0].shape
        graph.insert_before(matmul, copy)
        a_codes = copy.outputs[0]
    base = matmul.name or "matmul"
    w_scale_value = m.new_initializer(graph, f"{base}.weight_scale", weight_scales.astype(np.float32))
    a_scale_value = m.new_initializer(graph, f"{base}.input_scale", np.array(a_scale, dtype=np.float32))
    a_zero_value = m.new_initializer(graph, f"{base}.input_zero_point", np.array(a_zero, dtype=a_codes.dtype.numpy()))
    inputs = [a_codes, codes, a_zero_value]
    if weight_zeros is not None and np.any(weight_zeros != 0):
        inputs.append(m.new_initializer(graph, f"{base}.weight_zero_points", weight_zeros.astype(codes.dtype.numpy())))
    product = ir.Node("", "MatMulInteger", inputs, name=f"{base}_integer")
    product.outputs[0].dtype, product.outputs[0].shape = ir.DataType.INT32, matmul.outputs[0].shape
    cast = ir.Node("", "Cast", [product.outputs[0]], attributes=[ir.AttrInt64("to", ir.DataType.FLOAT)],
                   name=f"{base}_float")
    cast.outputs[0].dtype, cast.outputs[0].shape = ir.DataType.FLOAT, matmul.outputs[0].shape
    by_weight = ir.Node("", "Mul", [cast.outputs[0], w_scale_value], name=f"{base}_weight_scaled")
    by_weight.outputs[0].dtype, by_weight.outputs[0].shape = ir.DataType.FLOAT, matmul.outputs[0].shape
    graph.insert_before(matmul, [product, cast, by_weight])
    scaled = ir.Node("", "Mul", [by_weight.outputs[0], a_scale_value], name=f"{base}_scaled")
    m.replace_node(graph, matmul, scaled, [matmul])
    return 1


def _weight(value: ir.Value | None) -> tuple[ir.Value, np.ndarray, np.ndarray | None] | None:
    """A 2-D integer initializer dequantized per tensor or per output column: (codes, scales, zero points)."""
    node = m.producer(value, "DequantizeLinear")
    if node is None or m.attr(node, "block_size") not in (None, 0):
        return None
    codes = node.inputs[0]
    if codes is None or codes.const_value is None or codes.dtype not in _INTEGERS or len(codes.const_value.shape) != 2:
        return None
    scales = _constant(node.inputs[1])
    zeros = _constant(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] is not None else None
    if scales is None or (len(node.inputs) > 2 and node.inputs[2] is not None and zeros is None):
        return None
    if scales.ndim == 1 and m.attr(node, "axis", 1) not in (1, -1):
        return None  # per input row: not a scale of the output
    return codes, scales, zeros


def _activation(value: ir.Value | None) -> tuple[tuple[ir.Value, float, int], list[ir.Node]] | None:
    """An activation dequantized per tensor with constant scale and zero point, through layout-only ops:
    ((codes, scale, zero point), the layout ops from the codes' side)."""
    layout = []
    node = value.producer() if value is not None else None
    while node is not None and not node.domain and node.op_type in _LAYOUT:
        layout.append(node)
        node = node.inputs[0].producer() if node.inputs and node.inputs[0] is not None else None
    if node is None or node.domain or node.op_type != "DequantizeLinear":
        return None
    codes = node.inputs[0]
    scale = _constant(node.inputs[1])
    zero = _constant(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] is not None else np.zeros(())
    if codes is None or codes.dtype not in _INTEGERS or scale is None or zero is None or scale.size != 1 \
            or zero.size != 1:
        return None
    return (codes, float(scale.reshape(())), int(zero.reshape(()))), layout


def _constant(value: ir.Value | None) -> np.ndarray | None:
    tensor = m.const_tensor(value) if value is not None else None
    return None if tensor is None else np.asarray(tensor.numpy())


def _requantized(value: ir.Value, depth: int = 4) -> bool:
    """Whether the product's output is quantized again, through a bias ``Add`` and layout ops (the 2-D product
    reshaped back to ``[batch, tokens, width]``): onnxruntime fuses that one into ``QGemm``."""
    for use in value.uses():
        node = use.node
        if node.op_type == "QuantizeLinear" and not node.domain:
            return True
        passes_on = node.op_type == "Add" or (node.op_type in ("Transpose", *_LAYOUT) and use.idx == 0)
        if depth > 0 and not node.domain and passes_on and _requantized(node.outputs[0], depth - 1):
            return True
    return False
