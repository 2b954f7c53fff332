"""Int8 activation quantization of an exported model's linear layers (and, static, its convolutions), in
the patterns onnxruntime's CPU graph optimizer fuses into its integer kernels.

Two modes, both with int8 weights (symmetric, per output channel by default) and uint8 activations
(asymmetric, so a ReLU's or a softmax's output keeps all 256 levels).

The weights' codes lie in ``[-64, 64]`` by default (``reduce_range``), not ``[-127, 127]``: onnxruntime's
x86 kernels for uint8 x int8 products on CPUs with AVX2 but without VNNI (VPMADDUBSW) add each pair of
products in int16, which 255 * 127 * 2 overflows, and the sums saturate; with codes of at most 64 a pair
is at most 32640 and every CPU computes the same exact product. ``reduce_range=False`` keeps the full
range, one bit more of weight precision, for files that only run on CPUs with VNNI, on ARM or on GPUs.

The two modes:

- dynamic (``quantize_dynamic_model``): each layer's input is quantized at run time, from its own range::

      DynamicQuantizeLinear(x) -> MatMulInteger(xq, Wq, x_zero) -> Cast(float) -> Mul(x_scale * w_scale) [-> Add(bias)]

  which onnxruntime fuses into ``com.microsoft::DynamicQuantizeMatMul`` (quantization, integer product,
  scaling and bias in one kernel, the weight prepacked at load). No calibration; the usual choice for
  transformers, whose activations' ranges vary from input to input.
- static (``quantize_static_model``): each layer's input gets a fixed scale and zero point, measured on
  a calibration set (``onnxport.quantize.calibrate``), as a QuantizeLinear/DequantizeLinear pair in the
  graph, the weight as DequantizeLinear of its int8 initializer::

      x -> QuantizeLinear -> DequantizeLinear -> MatMul <- DequantizeLinear <- Wq    [-> Add(bias)]
      x -> QuantizeLinear -> DequantizeLinear -> Conv <- DequantizeLinear <- Wq, DequantizeLinear <- int32 bias
        -> QuantizeLinear -> DequantizeLinear -> (the Conv's readers)

  onnxruntime fuses the first into ``com.microsoft::MatMulIntegerToFloat`` and the second into
  ``QLinearConv``. The file is standard ONNX (opset 13 and later) that other runtimes with QDQ support
  read too. onnxruntime turns a MatMul followed by the Add of a ``[N]`` bias into a float Gemm before
  its QDQ fusions run, which would leave the layer in float on dequantized weights (and 10x slower): so
  the bias is stored ``[1, ..., 1, N]`` of the product's rank, and a 2-D layer with a bias (a Gemm's)
  computes in 3-D, ``Unsqueeze`` before its QuantizeLinear and ``Squeeze`` after its Add.

Linear layers are found in the three forms onnxport writes (``layers.find_linear``). Weights in float16
stay as they are (DynamicQuantizeLinear takes float32 only). ``skip`` names weights left in float (an
LM head, say) by substring. A weight shared with another node (an embedding tied to the LM head) gets
an int8 copy for the layer, the float one staying for the other reader.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np
import onnx_ir as ir
from onnx_ir.passes import common as common_passes

from onnxport.errors import InvalidInputError
from onnxport.optimize._match import new_initializer
from onnxport.quantize.calibrate import MinMax, check_feeds, ranges
from onnxport.quantize.layers import Linear, const_dims, find_linear
from onnxport.quantize.weights import QuantizedCheck, left_text

__all__ = ["ActivationQuantizeResult", "quantize_dynamic_model", "quantize_static_model"]

RANGE_METHODS = ("minmax", "percentile")  # what a static scale covers
_MIN_OPSET = 13  # per-axis QuantizeLinear/DequantizeLinear


@dataclasses.dataclass
class ActivationQuantizeResult:
    """What ``quantize_dynamic_model``/``quantize_static_model`` did: the layers quantized (weight
    names), those left in float and why, and the weights' bytes before and after."""

    mode: str
    per_channel: bool
    reduce_range: bool = True
    quantized: list[str] = dataclasses.field(default_factory=list)
    left: dict[str, str] = dataclasses.field(default_factory=dict)
    bytes_before: int = 0
    bytes_after: int = 0
    calibration: str = ""  # static: how the ranges were measured
    checks: list[QuantizedCheck] = dataclasses.field(default_factory=list)  # against eager PyTorch, if measured

    def __str__(self) -> str:
        weights = "per-channel" if self.per_channel else "per-tensor"
        weights += ", codes in [-64, 64]" if self.reduce_range else ""
        text = (f"int8 {self.mode} activations, int8 {weights} weights: {len(self.quantized)} layer(s), "
                f"{self.bytes_before / 1e6:.1f} MB -> {self.bytes_after / 1e6:.1f} MB")
        if self.calibration:
            text += f" (ranges: {self.calibration})"
        text += left_text(self.left)
        return "\n".join([text, *(f"  {c}" for c in self.checks)])


# ---------------------------------------------------------------------------------------------
# Dynamic quantization.


def quantize_dynamic_model(model: ir.Model, *, skip: Sequence[str] = (), per_channel: bool = True,
                           reduce_range: bool = True) -> ActivationQuantizeResult:
    """Quantize the main graph's linear layers in place to int8 weights and run-time int8 activations
    (see the module's docstring)."""
    skip = _check(model, skip, per_channel, reduce_range)
    graph = model.graph
    result = ActivationQuantizeResult("dynamic", per_channel, reduce_range)
    weights = _Weights(graph, per_channel, reduce_range)
    for node in list(graph):  # found as the walk reaches them: a layer's input may be the last one's output
        layer = find_linear(graph, node) if node.graph is graph else None
        if layer is None:
            continue
        reason = _refused(layer.weight, skip)
        if reason:
            result.left[layer.name] = reason
            continue
        wq, w_scale = weights.get(layer, result)
        base = layer.nodes[0].name or layer.name
        quantize = ir.Node("", "DynamicQuantizeLinear", [layer.x], num_outputs=3, name=f"{base}.quantize_input")
        xq, x_scale, x_zero = quantize.outputs
        product = ir.Node("", "MatMulInteger", [xq, wq, x_zero], name=f"{base}.matmul_integer")
        to_float = ir.Node("", "Cast", [product.outputs[0]], attributes=[ir.AttrInt64("to", ir.DataType.FLOAT)],
                           name=f"{base}.cast")
        scale = ir.Node("", "Mul", [x_scale, w_scale], name=f"{base}.scale")  # input scale first: ORT's order
        scaled = ir.Node("", "Mul", [to_float.outputs[0], scale.outputs[0]], name=f"{base}.rescale")
        new = [quantize, product, to_float, scale, scaled]
        if layer.bias is not None:
            new.append(ir.Node("", "Add", [scaled.outputs[0], layer.bias], name=f"{base}.bias"))
        _types(new)
        _replace(graph, layer, new)
        result.quantized.append(layer.name)
    common_passes.RemoveUnusedNodesPass()(model)
    return result


# ---------------------------------------------------------------------------------------------
# Static quantization.


def quantize_static_model(model: ir.Model, feeds: Sequence[Mapping[str, np.ndarray]], *, skip: Sequence[str] = (),
                          per_channel: bool = True, conv: bool = True, method: str = "minmax",
                          percentile: float = 99.999, reduce_range: bool = True) -> ActivationQuantizeResult:
    """Quantize the main graph's linear layers (and, ``conv``, its convolutions) in place to int8
    weights and uint8 activations with scales measured on ``feeds`` (a sequence of ``{input name:
    array}``, one per model run; see the module's docstring). ``method`` picks the range an activation's
    scale covers: ``"minmax"`` all values seen, ``"percentile"`` those between the ``100 - percentile``-th
    and ``percentile``-th percentiles."""
    skip = _check(model, skip, per_channel, reduce_range)
    if method not in RANGE_METHODS:
        raise InvalidInputError(f"method must be one of {', '.join(RANGE_METHODS)}, not {method!r}",
                                fix="pass method='minmax' (the full range seen) or 'percentile' (outliers clipped)")
    feeds = check_feeds(model, feeds)
    graph = model.graph
    result = ActivationQuantizeResult("static", per_channel, reduce_range)

    def found(node: ir.Node) -> Linear | ir.Node | None:
        layer = find_linear(graph, node) or (_conv(graph, node) if conv else None)
        if layer is None:
            return None
        weight = layer.weight if isinstance(layer, Linear) else layer.inputs[1]
        reason = _refused(weight, skip)
        if reason:
            result.left[weight.name or "?"] = reason
            return None
        return layer

    names: list[str] = []  # the values whose ranges the scales need: inputs of layers, outputs of convolutions
    for node in graph:
        layer = found(node)
        if isinstance(layer, Linear):
            names.append(layer.x.name)
        elif layer is not None:
            names += [layer.inputs[0].name, layer.outputs[0].name]
    measured = ranges(model, feeds, names, method=method, percentile=percentile) if names else {}
    result.calibration = f"{method}{f' {percentile}' if method == 'percentile' else ''} over {len(feeds)} feed(s)"
    weights = _Weights(graph, per_channel, reduce_range)
    quantizers: dict[tuple[str, bool], _Activation] = {}

    def activation(value: ir.Value, before: ir.Node, lift: bool = False) -> _Activation:
        if (value.name, lift) not in quantizers:
            quantizers[value.name, lift] = _Activation.quantizing(graph, value, measured[value.name], before, lift)
        return quantizers[value.name, lift]

    for node in list(graph):  # found again as the walk reaches them: a layer's input may be the last one's output
        layer = found(node) if node.graph is graph else None
        if isinstance(layer, Linear):
            # A 2-D product with a bias is computed in 3-D (see _static_linear), and so is one of unknown
            # rank (which onnxruntime's shape inference may find to be 2).
            lift = layer.bias is not None and _rank(layer) in (None, 2)
            _static_linear(graph, layer, activation(layer.x, layer.nodes[0], lift), weights, result)
        elif layer is not None:
            span = measured[layer.outputs[0].name]
            output = _static_conv(graph, layer, activation(layer.inputs[0], layer), span, result)
            # A layer reading the convolution's output reads its quantized form.
            measured[output.dequantized.name] = span
            quantizers[output.dequantized.name, False] = output.activation
    common_passes.RemoveUnusedNodesPass()(model)
    return result


@dataclasses.dataclass
class _Activation:
    """A value's uint8 quantization: its QuantizeLinear (one per value), scale and zero point."""

    quantized: ir.Value
    scale: ir.Value
    zero: ir.Value
    scale_value: float
    lifted: bool  # quantized with a leading dim of 1 added

    @classmethod
    def quantizing(cls, graph: ir.Graph, value: ir.Value, span: MinMax, before: ir.Node,
                   lift: bool = False) -> _Activation:
        scale, zero = _uint8_parameters(span)
        base = value.name or "activation"
        s = _constant(graph, f"{base}.scale", np.array(scale, dtype=np.float32))
        z = _constant(graph, f"{base}.zero_point", np.array(zero, dtype=np.uint8))
        nodes = []
        if lift:
            axes = _constant(graph, f"{base}.axes", np.array([0], dtype=np.int64))
            nodes.append(ir.Node("", "Unsqueeze", [value, axes], name=f"{base}.unsqueeze"))
            nodes[0].outputs[0].dtype = value.dtype
            nodes[0].outputs[0].shape = ir.Shape([1, *value.shape.dims]) if value.shape is not None else None
            value = nodes[0].outputs[0]
        nodes.append(ir.Node("", "QuantizeLinear", [value, s, z], name=f"{base}.quantize"))
        nodes[-1].outputs[0].dtype = ir.DataType.UINT8
        nodes[-1].outputs[0].shape = value.shape
        graph.insert_before(before, nodes)
        return cls(nodes[-1].outputs[0], s, z, float(np.float32(scale)), lift)

    def dequantized(self, name: str) -> ir.Node:
        node = ir.Node("", "DequantizeLinear", [self.quantized, self.scale, self.zero], name=name)
        node.outputs[0].dtype, node.outputs[0].shape = ir.DataType.FLOAT, self.quantized.shape
        return node


def _uint8_parameters(span: MinMax) -> tuple[float, int]:
    """Scale and zero point mapping ``span`` (widened to hold 0, which must be exact) onto [0, 255]."""
    low, high = min(span.low, 0.0), max(span.high, 0.0)
    scale = (high - low) / 255.0
    if not np.isfinite(scale) or scale <= 0.0:
        return 1.0, 0
    scale = float(np.float32(scale))
    return scale, int(np.clip(np.rint(-low / scale), 0, 255))


def _static_linear(graph: ir.Graph, layer: Linear, activation: _Activation, weights: _Weights,
                   result: ActivationQuantizeResult) -> None:
    wq, w_scale = weights.get(layer, result)
    base = layer.nodes[0].name or layer.name
    x = activation.dequantized(f"{base}.dequantize_input")
    w = ir.Node("", "DequantizeLinear", [wq, w_scale],
                attributes=[ir.AttrInt64("axis", 1)] if weights.per_channel else [], name=f"{base}.dequantize_weight")
    w.outputs[0].dtype, w.outputs[0].shape = ir.DataType.FLOAT, wq.shape
    product = ir.Node("", "MatMul", [x.outputs[0], w.outputs[0]], name=f"{base}.matmul")
    new = [x, w, product]
    if layer.bias is not None:
        # The bias as [1, ..., 1, N] of the product's rank: onnxruntime's MatMul+Add->Gemm fusion, which
        # runs before its QDQ fusions and would undo them, takes only [N] beside a product of rank 3+.
        rank = 3 if activation.lifted else _rank(layer)  # lifted: 3 or more, [1, 1, N] broadcasts alike
        array = np.asarray(ir.convenience.get_const_tensor(layer.bias).numpy())
        bias = _constant(graph, f"{layer.bias.name or base}.row", array.reshape([1] * (rank - 1) + [-1])) \
            if rank and rank >= 3 else layer.bias
        new.append(ir.Node("", "Add", [product.outputs[0], bias], name=f"{base}.bias"))
    if activation.lifted:  # back to the layer's rank 2
        axes = _constant(graph, f"{base}.axes", np.array([0], dtype=np.int64))
        new.append(ir.Node("", "Squeeze", [new[-1].outputs[0], axes], name=f"{base}.squeeze"))
    _types(new)
    _replace(graph, layer, new)
    result.quantized.append(layer.name)


def _rank(layer: Linear) -> int | None:
    """The rank of the layer's input (a Gemm's is 2), when known."""
    if layer.nodes[0].op_type == "Gemm":
        return 2
    return len(layer.x.shape) if layer.x.shape is not None else None


def _conv(graph: ir.Graph, node: ir.Node) -> ir.Node | None:
    """``node`` when it is a float32 Conv with a constant weight and (if any) constant 1-D bias."""
    if node.domain or node.op_type != "Conv" or len(node.inputs) < 2 or node.inputs[0] is None:
        return None
    weight = node.inputs[1]
    if weight is None or weight.is_graph_input() or graph.initializers.get(weight.name or "") is not weight:
        return None
    tensor = weight.const_value
    if tensor is None or tensor.dtype != ir.DataType.FLOAT or len(tensor.shape) < 3:
        return None
    bias = node.inputs[2] if len(node.inputs) > 2 else None
    if bias is not None and (ir.convenience.get_const_tensor(bias) is None or const_dims(bias) != [tensor.shape[0]]):
        return None
    if node.outputs[0].name is None:
        return None
    return node


def _static_conv(graph: ir.Graph, node: ir.Node, activation: _Activation, output_span: MinMax,
                 result: ActivationQuantizeResult) -> _Output:
    weight = node.inputs[1]
    array = np.asarray(weight.const_value.numpy())
    out_channels = array.shape[0]
    q, scales = _int8(array.reshape(out_channels, -1).astype(np.float64), True, result.reduce_range)
    base = weight.name or "conv"
    wq = _constant(graph, f"{base}.int8", q.reshape(array.shape))
    w_scale = _constant(graph, f"{base}.scale", scales)
    result.bytes_before += array.nbytes
    result.bytes_after += q.nbytes + scales.nbytes
    name = node.name or base
    x = activation.dequantized(f"{name}.dequantize_input")
    w = ir.Node("", "DequantizeLinear", [wq, w_scale], attributes=[ir.AttrInt64("axis", 0)],
                name=f"{name}.dequantize_weight")
    new = [x, w]
    inputs = [x.outputs[0], w.outputs[0]]
    bias = node.inputs[2] if len(node.inputs) > 2 else None
    if bias is not None:
        dq_bias = _int32_bias(graph, bias, activation.scale_value, w_scale, f"{name}.dequantize_bias", result)
        new.append(dq_bias)
        inputs.append(dq_bias.outputs[0])
    for n in new:
        n.outputs[0].dtype = ir.DataType.FLOAT
    graph.insert_before(node, new)
    for i, value in enumerate(inputs):
        node.replace_input_with(i, value)
    # The output, quantized and dequantized at the scale measured: the pattern QLinearConv replaces.
    y = node.outputs[0]
    y_scale, y_zero = _uint8_parameters(output_span)
    s = _constant(graph, f"{y.name}.scale", np.array(y_scale, dtype=np.float32))
    z = _constant(graph, f"{y.name}.zero_point", np.array(y_zero, dtype=np.uint8))
    quantize = ir.Node("", "QuantizeLinear", [y, s, z], name=f"{name}.quantize_output")
    dequantize = ir.Node("", "DequantizeLinear", [quantize.outputs[0], s, z], name=f"{name}.dequantize_output")
    quantize.outputs[0].dtype, quantize.outputs[0].shape = ir.DataType.UINT8, y.shape
    dequantize.outputs[0].dtype, dequantize.outputs[0].shape = y.dtype, y.shape
    graph.insert_after(node, [quantize, dequantize])
    for user, index in list(y.uses()):
        if user is not quantize:
            user.replace_input_with(index, dequantize.outputs[0])
    if y.is_graph_output():
        name_y, y.name = y.name, None
        for i, out in enumerate(graph.outputs):
            if out is y:
                graph.outputs[i] = dequantize.outputs[0]
        dequantize.outputs[0].name = name_y
    result.quantized.append(weight.name or "?")
    return _Output(dequantize.outputs[0], _Activation(quantize.outputs[0], s, z, float(np.float32(y_scale)), False))


@dataclasses.dataclass
class _Output:
    """A convolution's output after its QuantizeLinear/DequantizeLinear pair."""

    dequantized: ir.Value
    activation: _Activation


def _int32_bias(graph: ir.Graph, bias: ir.Value, x_scale: float, w_scale: ir.Value, name: str,
                result: ActivationQuantizeResult) -> ir.Node:
    """``DequantizeLinear`` of the bias as int32 at scale ``x_scale * w_scale``: what the integer kernels
    add to their int32 accumulators (QLinearConv, QGemm), and the form onnxruntime's QDQ fusions expect of
    a bias."""
    b = np.asarray(ir.convenience.get_const_tensor(bias).numpy(), dtype=np.float64)
    b_scale = (np.float64(x_scale) * np.asarray(w_scale.const_value.numpy(), dtype=np.float64)).astype(np.float32)
    b_scale = np.broadcast_to(b_scale, b.shape).copy()
    b_scale[b_scale == 0] = 1.0
    bq = np.clip(np.rint(b / b_scale.astype(np.float64)), -(2**31), 2**31 - 1).astype(np.int32)
    base = bias.name or name
    node = ir.Node("", "DequantizeLinear", [_constant(graph, f"{base}.int32", bq),
                                            _constant(graph, f"{base}.scale", b_scale)],
                   attributes=[ir.AttrInt64("axis", 0)], name=name)
    node.outputs[0].dtype, node.outputs[0].shape = ir.DataType.FLOAT, ir.Shape(b.shape)
    result.bytes_before += b.size * 4
    result.bytes_after += bq.nbytes + b_scale.nbytes
    return node


# ---------------------------------------------------------------------------------------------
# Shared pieces.


class _Weights:
    """The int8 ``[K, N]`` initializer and scale of each weight quantized, made once per weight (a
    weight read by several layers is quantized once)."""

    def __init__(self, graph: ir.Graph, per_channel: bool, reduce_range: bool) -> None:
        self.graph, self.per_channel, self.reduce_range = graph, per_channel, reduce_range
        self._made: dict[tuple[int, bool], tuple[ir.Value, ir.Value]] = {}

    def get(self, layer: Linear, result: ActivationQuantizeResult) -> tuple[ir.Value, ir.Value]:
        key = (id(layer.weight), layer.transposed)
        if key not in self._made:
            w_nk = layer.weight_nk()
            q, scales = _int8(w_nk.astype(np.float64), self.per_channel, self.reduce_range)
            base = layer.name
            wq = _constant(self.graph, f"{base}.int8", np.ascontiguousarray(q.T))  # [K, N]
            scale = _constant(self.graph, f"{base}.scale", scales)
            self._made[key] = (wq, scale)
            result.bytes_before += w_nk.nbytes
            result.bytes_after += q.nbytes + scales.nbytes
        return self._made[key]


def _constant(graph: ir.Graph, name: str, array: np.ndarray) -> ir.Value:
    """A new initializer holding ``array``, scalars kept scalars (per-tensor scales and zero points)."""
    array = np.asarray(array)
    return new_initializer(graph, name, ir.Tensor(array) if array.ndim == 0 else array)


def _int8(w: np.ndarray, per_channel: bool, reduce_range: bool) -> tuple[np.ndarray, np.ndarray]:
    """``w`` ``[N, ...]`` (float64) as symmetric int8 codes in [-64, 64] (``reduce_range``, see the module's
    docstring) or [-127, 127] and float32 scales, one per row (``[N]``) or one for all (a scalar): a value
    is ``code * scale``."""
    limit = 64 if reduce_range else 127
    flat = w.reshape(w.shape[0], -1)
    extreme = np.abs(flat).max(axis=1) if per_channel else np.array(np.abs(flat).max())
    scales = np.asarray(extreme / limit, dtype=np.float32)
    scales[scales == 0] = 1.0
    divisor = scales.astype(np.float64)[:, None] if per_channel else np.float64(scales)
    codes = np.clip(np.rint(flat / divisor), -limit, limit).astype(np.int8)
    return codes.reshape(w.shape), scales


def _refused(weight: ir.Value, skip: Sequence[str]) -> str:
    name = weight.name or ""
    if any(s and s in name for s in skip):
        return "skipped by name"
    if weight.const_value.dtype != ir.DataType.FLOAT:
        return f"{weight.const_value.dtype.name.lower()} weight: int8 activation quantization takes float32"
    return ""


def _check(model: ir.Model, skip: Sequence[str], per_channel: bool, reduce_range: bool) -> tuple[str, ...]:
    if not isinstance(model, ir.Model):
        raise InvalidInputError(f"expected an onnx_ir Model, got {type(model).__name__}",
                                fix="pass an exported program's .model (onnx_ir.Model), or ir.load(path)")
    opset = model.opset_imports.get("", 0)
    if opset < _MIN_OPSET:
        raise InvalidInputError(f"int8 activation quantization needs opset {_MIN_OPSET} or later "
                                f"(per-channel QuantizeLinear/DequantizeLinear); the model has {opset}",
                                fix=f"export with opset={_MIN_OPSET} or later (onnxport's default is fine)")
    if not isinstance(per_channel, bool):
        raise InvalidInputError(f"per_channel must be True or False, not {per_channel!r}",
                                fix="pass per_channel=True (one scale per output channel) or False (one per weight)")
    if not isinstance(reduce_range, bool):
        raise InvalidInputError(f"reduce_range must be True or False, not {reduce_range!r}",
                                fix="pass reduce_range=True (weight codes in [-64, 64], exact on every x86 CPU) or "
                                "False (the full int8 range, for CPUs with VNNI, ARM or GPUs)")
    if isinstance(skip, str):
        return (skip,)
    if not all(isinstance(s, str) for s in skip):
        raise InvalidInputError(f"skip must be a sequence of names (substrings of weight names), not {skip!r}",
                                fix="pass skip=['lm_head'], say")
    return tuple(skip)


def _types(nodes: list[ir.Node]) -> None:
    """Record the dtypes of the new nodes' outputs (onnxruntime infers them too; the IR's readers may not)."""
    for node in nodes:
        if node.op_type == "DynamicQuantizeLinear":
            kinds = (ir.DataType.UINT8, ir.DataType.FLOAT, ir.DataType.UINT8)
        elif node.op_type == "MatMulInteger":
            kinds = (ir.DataType.INT32,)
        else:
            kinds = (ir.DataType.FLOAT,)
        for out, kind in zip(node.outputs, kinds):
            out.dtype = kind


def _replace(graph: ir.Graph, layer: Linear, new: list[ir.Node]) -> None:
    """Put ``new`` in place of the layer's nodes, the last new node's output taking the layer's output's
    place (readers, name, graph output)."""
    ir.convenience.replace_nodes_and_values(graph, layer.nodes[-1], layer.nodes, new, [layer.output],
                                            [new[-1].outputs[0]])
