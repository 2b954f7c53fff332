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
from typing import Any

import numpy as np
import onnx_ir as ir
from torch.utils._python_dispatch import TorchDispatchMode

from onnxport.verify.ahead import eager_outputs

_QUANTIZED_OPS = frozenset({"QuantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "ConvInteger",
                            "QLinearConv", "QLinearMatMul"})


def integer_kernels(model: ir.Model) -> bool:
    """Whether ``model``'s main graph holds quantized activations, which onnxruntime runs on integer kernels."""
    return any(node.op_type in _QUANTIZED_OPS and node.domain in ("", "ai.onnx") for node in model.graph)


_LAYOUT_OPS = frozenset({"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose"})
# Ops whose output errs no more than their first input does: a value off by e moves their output by e at most.
_NON_EXPANDING = _LAYOUT_OPS | {"Relu", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "ReduceMean",
                                "ReduceMax", "Dropout"}
_STEPS = 2
_DEPTH = 16  # ops followed back from an output before giving up


def quantized_output_steps(model: ir.Model) -> dict[str, float]:
    """Per graph output computed from dequantized values, the absolute error the integer kernels may give it:
    two of its largest quantization step for a DequantizeLinear's output (through layout-only ops), and that
    bound carried through what follows it up to the output (a float head after the last quantized activation,
    as the X86 quantizer leaves it): pooling and ReLU keep it, a product with constant weights scales it by their
    largest absolute column sum, adding a constant keeps it, a sum adds the bounds."""
    if not integer_kernels(model):
        return {}
    steps: dict[str, float] = {}
    for output in model.graph.outputs:
        bound = _bound(output, _DEPTH)
        if bound is not None and output.name:
            steps[output.name] = bound
    return steps


def _bound(value: ir.Value | None, depth: int) -> float | None:
    """The largest absolute error the integer kernels may give ``value``; None where it is not known."""
    node = value.producer() if value is not None else None
    if node is None or depth == 0 or node.domain not in ("", "ai.onnx") or not node.inputs:
        return None
    inputs = list(node.inputs)
    if node.op_type == "DequantizeLinear":
        scale = ir.convenience.get_const_tensor(inputs[1]) if len(inputs) > 1 and inputs[1] is not None else None
        return _STEPS * float(np.abs(scale.numpy()).max()) if scale is not None else None
    if node.op_type in _NON_EXPANDING:
        return _bound(inputs[0], depth - 1)
    if node.op_type in ("Add", "Sub") and len(inputs) == 2:
        bounds = [0.0 if _constant(x) is not None else _bound(x, depth - 1) for x in inputs]
        return None if None in bounds or bounds == [0.0, 0.0] else sum(bounds)
    product = _integer_product(node)
    if product is not None:  # an error of a step in the activation's codes, through the weights' codes
        _, codes, zeros, w_scales, a_scale, _ = product
        weights = np.abs(codes - zeros)  # [in, out]
        return float(_STEPS * abs(a_scale) * (weights.sum(axis=0) * np.abs(w_scales)).max())
    if node.op_type in ("MatMul", "Gemm", "Conv") and len(inputs) >= 2:
        weight = _constant(inputs[1])
        bound = _bound(inputs[0], depth - 1)
        if weight is None or bound is None or weight.ndim < 2:
            return None
        attrs = {a.name: a.value for a in node.attributes.values()}
        if node.op_type == "Conv":  # [out channels, in channels / groups, *kernel]: per output channel
            gain = np.abs(weight).reshape(weight.shape[0], -1).sum(axis=1).max()
        else:  # [in, out] (Gemm's transB: [out, in]): per output column
            gain = np.abs(weight).sum(axis=-1 if node.op_type == "Gemm" and attrs.get("transB") else -2).max()
        bias = inputs[2] if len(inputs) > 2 else None
        if bias is not None and _constant(bias) is None:
            return None
        return float(bound * gain * abs(attrs.get("alpha", 1.0)))
    return None


def _integer_product(scaled: ir.Node) -> tuple | None:
    """The chain ``MatMulInteger(a, W, a_zero, W_zeros) -> Cast(float) -> Mul(W_scales) -> Mul(a_scale)`` that
    ``IntegerMatMulPass`` writes for a quantized linear layer, ending in ``scaled``: (the MatMulInteger node, the
    weight's codes, its zero points, its scales, the activation's scale, the nodes from it to ``scaled``);
    None for other nodes."""
    if scaled.op_type != "Mul" or scaled.domain or len(scaled.inputs) != 2:
        return None
    by_weight = scaled.inputs[0].producer() if scaled.inputs[0] is not None else None
    a_scale = ir.convenience.get_const_tensor(scaled.inputs[1]) if scaled.inputs[1] is not None else None
    if by_weight is None or by_weight.op_type != "Mul" or by_weight.domain or a_scale is None or a_scale.size != 1:
        return None
    cast = by_weight.inputs[0].producer() if by_weight.inputs[0] is not None else None
    w_scales = ir.convenience.get_const_tensor(by_weight.inputs[1]) if by_weight.inputs[1] is not None else None
    if cast is None or cast.op_type != "Cast" or cast.domain or w_scales is None:
        return None
    product = cast.inputs[0].producer() if cast.inputs[0] is not None else None
    if product is None or product.op_type != "MatMulInteger" or product.domain:
        return None
    codes = ir.convenience.get_const_tensor(product.inputs[1])
    zero = product.inputs[3] if len(product.inputs) > 3 else None
    zeros = ir.convenience.get_const_tensor(zero) if zero is not None else None
    if codes is None or len(codes.shape) != 2 or (zero is not None and zeros is None):
        return None
    zeros_array = zeros.numpy().astype(np.float64) if zeros is not None else np.zeros(())
    return (product, codes.numpy().astype(np.float64), zeros_array, w_scales.numpy().astype(np.float64),
            float(a_scale.numpy().reshape(())), [cast, by_weight, scaled])


def float_products(model: ir.Model) -> int:
    """Write each integer product of ``IntegerMatMulPass`` back as ``MatMul(DequantizeLinear(a),
    DequantizeLinear(W))`` from its own constants, in place: what eager PyTorch computes, term by term in float
    (the integer product is exact, so a value on a rounding boundary of the next quantization may land a step
    away from torch's). Verification compares that form at onnxruntime's level 'basic'. Returns how many."""
    done = 0
    for node in list(model.graph):
        found = _integer_product(node)
        if found is None:
            continue
        product, _, _, _, _, chain = found
        scaled = chain[-1]
        a_codes, w_codes, a_zero = product.inputs[:3]
        w_zero = product.inputs[3] if len(product.inputs) > 3 else None
        a_scale, w_scale = scaled.inputs[1], chain[1].inputs[1]
        weight = ir.Node("", "DequantizeLinear", [w_codes, w_scale, w_zero],
                         attributes=[ir.AttrInt64("axis", 1)] if w_scale.shape is not None and len(w_scale.shape)
                         else [])
        activation = ir.Node("", "DequantizeLinear", [a_codes, a_scale, a_zero])
        matmul = ir.Node("", "MatMul", [activation.outputs[0], weight.outputs[0]])
        for value in (*weight.outputs, *activation.outputs, *matmul.outputs):
            value.dtype = ir.DataType.FLOAT
        model.graph.insert_before(product, [weight, activation, matmul])
        out = scaled.outputs[0]
        matmul.outputs[0].shape = out.shape
        name, out.name = out.name, None
        ir.convenience.replace_all_uses_with(out, matmul.outputs[0], replace_graph_outputs=True)
        matmul.outputs[0].name = name
        model.graph.remove([scaled, chain[1], chain[0], product], safe=True)
        done += 1
    return done


def _constant(value: ir.Value | None) -> np.ndarray | None:
    """``value``'s array when it is a constant, or a constant dequantized (a quantized weight), else None."""
    if value is None:
        return None
    tensor = ir.convenience.get_const_tensor(value)
    if tensor is not None:
        return tensor.numpy().astype(np.float64)
    node = value.producer()
    if node is not None and node.op_type == "Transpose" and node.inputs:  # a weight laid out for its product
        inner = _constant(node.inputs[0])
        perm = node.attributes["perm"].value if "perm" in node.attributes else None
        return None if inner is None else np.transpose(inner, perm)
    if node is None or node.op_type != "DequantizeLinear" or len(node.inputs) < 2:
        return None
    q, scale = (ir.convenience.get_const_tensor(x) if x is not None else None for x in node.inputs[:2])
    zero = node.inputs[2] if len(node.inputs) > 2 else None
    zero = ir.convenience.get_const_tensor(zero) if zero is not None else None
    if q is None or scale is None:
        return None
    q = q.numpy().astype(np.float64)
    scale, zero = scale.numpy().astype(np.float64), zero.numpy().astype(np.float64) if zero is not None else 0.0
    axis = node.attributes["axis"].value if "axis" in node.attributes else 1
    if np.ndim(scale) == 1 and q.ndim > 1:  # per channel along axis
        shape = [1] * q.ndim
        shape[axis % q.ndim] = -1
        scale, zero = scale.reshape(shape), np.reshape(zero, shape) if np.ndim(zero) == 1 else zero
    return (q - zero) * scale


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


class _ActivationsUnquantized(TorchDispatchMode):
    """While active, a quantized model's activations stay in float: its quantize ops pass their float input
    through, and a dequantize of such a float passes it through too; weights stored as integer codes are still
    dequantized, so what remains is the float model with its rounded weights."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if getattr(func, "namespace", None) == "quantized_decomposed" and args:
            name = func.__name__
            if name.startswith("quantize_per"):
                return args[0]
            if name.startswith("dequantize_per") and args[0].is_floating_point():
                return args[0]
        return func(*args, **(kwargs or {}))


def activation_quantization_effect(model: Any, args: tuple, kwargs: dict[str, Any]) -> Any | None:
    """The model's outputs on ``args``/``kwargs`` with its activations left in float (see
    ``_ActivationsUnquantized``): beside its quantized outputs, what quantizing the activations moves them, the
    error a user accepted in quantizing. None where the model has no such ops or does not run so."""
    mode = _ActivationsUnquantized()
    try:
        with mode:
            return eager_outputs(model, args, kwargs)
    except Exception:  # noqa: BLE001 - a model that does not run with float activations: no measure
        return None
