"""Quantized tensors: PT2E's ``quantized_decomposed`` ops and torchao's affine ops as ``QuantizeLinear`` and
``DequantizeLinear``.

A model quantized with ``prepare_pt2e``/``convert_pt2e`` holds its int8 weights as constants read by a
``dequantize_per_channel``, and quantizes activations with ``quantize_per_tensor`` followed by a
``dequantize_per_tensor``. Written as ``QuantizeLinear``/``DequantizeLinear`` with constant scales and zero
points (never as rounding arithmetic), the file keeps the integer weights, and onnxruntime fuses each
``DequantizeLinear -> Conv/MatMul -> QuantizeLinear`` group into its integer kernels (``QLinearConv``,
``QLinearMatMul``, ``MatMulIntegerToFloat``, ``MatMulNBits`` for weight-only layers).

torchao's ``dequantize_affine``/``quantize_affine`` take a ``block_size``: one scale for the whole tensor,
one per row or column, or one per block of a row (opset 21's blocked ``DequantizeLinear``). Constant 4-bit
weights (torchao keeps them in int8 storage, range [-8, 7]) are written as ``INT4``/``UINT4`` initializers.

Numerics follow torch's: quantization rounds half to even and saturates, then a ``quant_min``/``quant_max``
narrower than the integer type's range (XNNPACK's [-127, 127]) is applied with an integer ``Clip``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ml_dtypes
import numpy as np
import onnx_ir as ir
import torch
from torch.ao.quantization.fx import _decomposed  # noqa: F401 - registers the quantized_decomposed ops

from onnxport.capture import quantized as _capture_quantized  # noqa: F401 - defines onnxport::dequantized_linear
from onnxport.quantize.kernels import pack_codes
from onnxport.targets import QUANTIZED_SINCE
from onnxport.translate.builder import Ctx
from onnxport.translate.ops._common import rank
from onnxport.translate.registry import aten, register_translation

qd = torch.ops.quantized_decomposed

_FLOAT = ir.DataType.FLOAT
_FLOATS = (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16)
# torch dtype -> (ONNX type, full range, first opset whose QuantizeLinear/DequantizeLinear take it)
_QTYPES: dict[torch.dtype, tuple[ir.DataType, int, int, int]] = {
    torch.uint8: (ir.DataType.UINT8, 0, 255, 10),
    torch.int8: (ir.DataType.INT8, -128, 127, 10),
    torch.uint16: (ir.DataType.UINT16, 0, 65535, 21),
    torch.int16: (ir.DataType.INT16, -32768, 32767, 21),
}
_INT4 = {ir.DataType.INT4: (-8, 7, ml_dtypes.int4), ir.DataType.UINT4: (0, 15, ml_dtypes.uint4)}


# -- shared pieces ------------------------------------------------------------------------------------------


def _qtype(ctx: Ctx, dtype: torch.dtype, *, dequantize: bool = False) -> tuple[ir.DataType, int, int]:
    """The ONNX integer type of ``dtype`` and its full range; refused where QuantizeLinear lacks it."""
    if dequantize and dtype == torch.int32:
        return ir.DataType.INT32, -(2**31), 2**31 - 1
    found = _QTYPES.get(dtype)
    if found is None:
        names = ", ".join(str(d).replace("torch.", "") for d in _QTYPES)
        raise ctx.unsupported(f"quantized dtype {str(dtype).replace('torch.', '')} has no ONNX QuantizeLinear form",
                              fix=f"quantize to one of {names} (uint8 and int8 run fastest in onnxruntime)")
    onnx_type, low, high, since = found
    if ctx.opset < since:
        raise ctx.unsupported(f"{str(dtype).replace('torch.', '')} quantization needs opset {since}",
                              fix=f"export with opset={since} or later, or quantize to int8/uint8")
    return onnx_type, low, high


def _const_array(value: Any) -> np.ndarray | None:
    """The array of a Python number, an initializer or a Constant node's output; None for a computed value."""
    if isinstance(value, (bool, int, float, np.ndarray, np.generic)):
        return np.asarray(value)
    if not isinstance(value, ir.Value):
        return None
    if value.const_value is not None:
        return np.asarray(value.const_value.numpy())
    producer = value.producer()
    if producer is not None and producer.op_type == "Constant" and not producer.domain:
        attr = producer.attributes.get("value")
        return None if attr is None else np.asarray(attr.as_tensor().numpy())
    return None


def _param(ctx: Ctx, value: Any, dtype: ir.DataType, shape: Sequence[int] | None) -> ir.Value:
    """A scale or zero point as ``dtype`` of ``shape`` (``()`` per tensor): a constant when it is one (what
    onnxruntime's fusions need), else a Cast (and Reshape) of the computed value."""
    array = _const_array(value)
    if array is not None:
        if shape is not None:
            array = np.broadcast_to(array.reshape(_squeezable(array.shape, shape)), shape)
        if dtype in _INT4:
            return ctx.const(np.ascontiguousarray(array).astype(np.int64).astype(_INT4[dtype][2]), dtype)
        return ctx.const(np.ascontiguousarray(array).astype(dtype.numpy()), dtype)
    out = ctx.cast(value, dtype)
    if shape is not None and (out.shape is None or list(out.shape) != list(shape)):
        target = ctx.const(list(shape), ir.DataType.INT64)
        out = ctx.op.Expand(ctx.op.Reshape(out, ctx.const(_squeezable(out.shape, shape), ir.DataType.INT64)), target)
        out.shape = ir.Shape(list(shape))
    return out


def _squeezable(have: Any, want: Sequence[int]) -> list[int]:
    """``have`` reshaped to ``want``'s rank: size-1 dims dropped or added so that it broadcasts."""
    dims = [d for d in (list(have) if have is not None else []) if d != 1]
    if len(want) == 0:
        return []
    out = [1] * len(want)
    for i, w in enumerate(want):  # place the non-1 dims where ``want`` has the same size, in order
        if dims and isinstance(dims[0], int) and dims[0] == w:
            out[i] = dims.pop(0)
    return out if not dims else [-1 if i == len(want) - 1 else 1 for i in range(len(want))]


def _clip(ctx: Ctx, q: ir.Value, qtype: ir.DataType, low: int, high: int, qmin: Any, qmax: Any) -> ir.Value:
    """Saturate ``q`` to ``[qmin, qmax]`` where that is narrower than the type's range."""
    if isinstance(qmin, ir.Value) or isinstance(qmax, ir.Value):
        lo = ctx.cast(qmin, qtype) if isinstance(qmin, ir.Value) else ctx.const(np.array(qmin, qtype.numpy()), qtype)
        hi = ctx.cast(qmax, qtype) if isinstance(qmax, ir.Value) else ctx.const(np.array(qmax, qtype.numpy()), qtype)
        return ctx.op.Clip(q, lo, hi)
    qmin, qmax = int(qmin), int(qmax)
    if qmin < low or qmax > high or qmin > qmax:
        raise ctx.unsupported(f"quant_min={qmin}, quant_max={qmax} is not within the range [{low}, {high}] of "
                              f"the quantized type", fix="quantize with a range inside the integer type's")
    if (qmin, qmax) == (low, high):
        return q
    low, high = (ctx.const(np.array(v, qtype.numpy()), qtype) for v in (qmin, qmax))
    return ctx.op.Clip(q, low, high)


def _float_input(ctx: Ctx, x: ir.Value) -> ir.Value:
    """torch quantizes float16 and bfloat16 inputs in float32."""
    if x.dtype not in (_FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16):
        raise ctx.unsupported(f"quantizing a {x.dtype} tensor", fix="quantize float32, float16 or bfloat16 tensors")
    return ctx.cast(x, _FLOAT)


def _quantize(ctx: Ctx, x: ir.Value, scale: Any, zero_point: Any, qmin: Any, qmax: Any, dtype: torch.dtype,
              shape: Sequence[int] | None = (), **attrs: Any) -> ir.Value:
    qtype, low, high = _qtype(ctx, dtype)
    x = _float_input(ctx, x)
    s, z = _param(ctx, scale, _FLOAT, shape), _param(ctx, zero_point, qtype, shape)
    q = ctx.op.QuantizeLinear(x, s, z, **attrs)
    q.dtype, q.shape = qtype, x.shape
    return _clip(ctx, q, qtype, low, high, qmin, qmax)


def _dequantize(ctx: Ctx, x: ir.Value, scale: Any, zero_point: Any, dtype: torch.dtype, out_dtype: torch.dtype | None,
                shape: Sequence[int] | None = (), **attrs: Any) -> ir.Value:
    qtype, _, _ = _qtype(ctx, dtype, dequantize=True)
    if x.dtype != qtype and x.dtype not in _INT4:
        x = ctx.cast(x, qtype)
    zero, offset = None, None
    if zero_point is not None:
        zero_array = _const_array(zero_point)
        if qtype == ir.DataType.INT32 and (zero_array is None or np.any(zero_array != 0)):
            raise ctx.unsupported("an int32 dequantization with a zero point other than 0",
                                  fix="quantize int32 tensors (biases) with zero point 0")
        if zero_array is not None and np.any(zero_array != np.round(zero_array)):
            offset = _fractional_zero(ctx, zero_array, scale, x, shape, attrs.get("axis"))
        else:
            if zero_array is None and isinstance(zero_point, ir.Value) and zero_point.dtype in _FLOATS:
                raise ctx.unsupported("a zero point computed in floating point, which DequantizeLinear cannot hold",
                                      fix="quantize with integer zero points")
            zero = _param(ctx, zero_point, x.dtype, shape)
    y = ctx.op.DequantizeLinear(x, _param(ctx, scale, _FLOAT, shape), zero, **attrs)
    y.dtype, y.shape = _FLOAT, x.shape
    if offset is not None:
        y = ctx.op.Sub(y, offset)
        y.dtype, y.shape = _FLOAT, x.shape
    return ctx.cast(y, out_dtype) if out_dtype is not None else y


def _fractional_zero(ctx: Ctx, zero: np.ndarray, scale: Any, x: ir.Value, shape: Sequence[int] | None,
                     axis: int | None) -> ir.Value:
    """``zero * scale``, shaped to be subtracted from the dequantization without a zero point: a zero point that
    is not an integer (the embedding quantizer's float qparams, ``(q - 160.87) * scale``), which
    DequantizeLinear's integer zero point cannot hold."""
    scales = _const_array(scale)
    if scales is None or (shape and len(shape) > 1) or x.shape is None:
        raise ctx.unsupported("a zero point that is not an integer with a computed scale or in blocks",
                              fix="quantize with integer zero points")
    offset = (zero.astype(np.float64) * scales.astype(np.float64)).astype(np.float32)
    if shape and axis is not None:  # per channel: broadcast along ``axis``
        axis = axis % len(x.shape)
        offset = offset.reshape([-1] + [1] * (len(x.shape) - axis - 1))
    return ctx.const(np.ascontiguousarray(offset), _FLOAT)


# -- PT2E (torch.ao.quantization.quantize_pt2e, torchao.quantization.pt2e) ---------------------------------------


@aten(qd.quantize_per_tensor.default, qd.quantize_per_tensor.tensor, qd.quantize_per_tensor.tensor2)
def quantize_per_tensor(ctx: Ctx, x: ir.Value, scale: Any, zero_point: Any, quant_min: Any, quant_max: Any,
                        dtype: torch.dtype) -> ir.Value:
    """quantize_per_tensor(Tensor input, float scale, int zero_point, int quant_min, int quant_max, ScalarType dtype)"""
    return _quantize(ctx, x, scale, zero_point, quant_min, quant_max, dtype)


@aten(qd.dequantize_per_tensor.default, qd.dequantize_per_tensor.tensor, qd.dequantize_per_tensor.tensor2)
def dequantize_per_tensor(ctx: Ctx, x: ir.Value, scale: Any, zero_point: Any, quant_min: Any, quant_max: Any,
                          dtype: torch.dtype, *, out_dtype: torch.dtype | None = None) -> ir.Value:
    """dequantize_per_tensor(Tensor input, float scale, int zero_point, int quant_min, int quant_max, ScalarType dtype,
    *, ScalarType? out_dtype=None); torch reads quant_min/quant_max for checks only"""
    return _dequantize(ctx, x, scale, zero_point, dtype, out_dtype)


def _channels(ctx: Ctx, x: ir.Value, axis: int) -> tuple[int, list[int]]:
    axis = axis + rank(x) if axis < 0 else axis
    size = x.shape[axis] if x.shape is not None else None
    if not isinstance(size, int):
        raise ctx.unsupported("per-channel quantization along a dim whose size depends on the inputs",
                              fix="quantize per channel along a dim of fixed size (the weights' output channels)")
    return axis, [size]


@aten(qd.quantize_per_channel.default)
def quantize_per_channel(ctx: Ctx, x: ir.Value, scales: Any, zero_points: Any, axis: int, quant_min: Any,
                         quant_max: Any, dtype: torch.dtype) -> ir.Value:
    """quantize_per_channel(Tensor input, Tensor scales, Tensor zero_points, int axis, int quant_min, int quant_max,
    ScalarType dtype)"""
    axis, shape = _channels(ctx, x, axis)
    return _quantize(ctx, x, scales, zero_points, quant_min, quant_max, dtype, shape, axis=axis)


@aten(qd.dequantize_per_channel.default)
def dequantize_per_channel(ctx: Ctx, x: ir.Value, scales: Any, zero_points: Any, axis: int, quant_min: Any,
                           quant_max: Any, dtype: torch.dtype, *, out_dtype: torch.dtype | None = None) -> ir.Value:
    """dequantize_per_channel(Tensor input, Tensor scales, Tensor? zero_points, int axis, int quant_min,
    int quant_max, ScalarType dtype, *, ScalarType? out_dtype=None)"""
    axis, shape = _channels(ctx, x, axis)
    return _dequantize(ctx, x, scales, zero_points, dtype, out_dtype, shape, axis=axis)


def _min_max(ctx: Ctx, x: ir.Value) -> tuple[ir.Value, ir.Value]:
    """min(x, 0) and max(x, 0) over the whole tensor, in float32."""
    x = _float_input(ctx, x)
    zero = ctx.const(0.0, _FLOAT)
    low = ctx.op.Min(ctx.op.ReduceMin(x, keepdims=0), zero)
    high = ctx.op.Max(ctx.op.ReduceMax(x, keepdims=0), zero)
    return low, high


def _qparams_out(ctx: Ctx, scale: ir.Value, zero_point: ir.Value) -> tuple[ir.Value, ir.Value]:
    """torch returns the scale and zero point as 1-element tensors of the node's dtypes."""
    one = ctx.const([1], ir.DataType.INT64)
    scale = ctx.op.Reshape(scale, one)
    zero_point = ctx.op.Reshape(zero_point, one)
    return ctx.cast(scale, ctx.out_dtype(0) or _FLOAT), ctx.cast(zero_point, ctx.out_dtype(1) or ir.DataType.INT64)


@aten(qd.choose_qparams.tensor)
def choose_qparams(ctx: Ctx, x: ir.Value, quant_min: int, quant_max: int, eps: float,
                   dtype: torch.dtype) -> tuple[ir.Value, ir.Value]:
    """choose_qparams.tensor(Tensor input, int quant_min, int quant_max, float eps, ScalarType dtype) -> (scale, zp):
    the affine parameters mapping [min(x, 0), max(x, 0)] onto [quant_min, quant_max]"""
    _qtype(ctx, dtype)
    low, high = _min_max(ctx, x)
    scale = ctx.op.Div(ctx.op.Sub(high, low), ctx.const(float(quant_max - quant_min), _FLOAT))
    scale = ctx.op.Max(scale, ctx.const(float(eps), _FLOAT))
    shift = ctx.op.Round(ctx.op.Div(low, scale))
    zero_point = ctx.op.Sub(ctx.const(float(quant_min), _FLOAT), shift)
    zero_point = ctx.op.Clip(zero_point, ctx.const(float(quant_min), _FLOAT), ctx.const(float(quant_max), _FLOAT))
    return _qparams_out(ctx, scale, zero_point)


@aten(qd.choose_qparams_symmetric.tensor)
def choose_qparams_symmetric(ctx: Ctx, x: ir.Value, quant_min: int, quant_max: int, eps: float,
                             dtype: torch.dtype) -> tuple[ir.Value, ir.Value]:
    """choose_qparams_symmetric.tensor(Tensor input, int quant_min, int quant_max, float eps, ScalarType dtype):
    scale max|x| / ((quant_max - quant_min) / 2), zero point 0 (128 for uint8)"""
    _qtype(ctx, dtype)
    low, high = _min_max(ctx, x)
    scale = ctx.op.Div(ctx.op.Max(ctx.op.Neg(low), high), ctx.const(float(quant_max - quant_min) / 2, _FLOAT))
    scale = ctx.op.Max(scale, ctx.const(float(eps), _FLOAT))
    return _qparams_out(ctx, scale, ctx.const(128 if dtype == torch.uint8 else 0, ir.DataType.INT64))


# -- torchao's affine ops -------------------------------------------------------------------------------------


def _blocks(ctx: Ctx, x: ir.Value, block_size: Sequence[Any]) -> tuple[list[int] | None, dict[str, int]]:
    """The shape of the scales ONNX wants for torchao's ``block_size`` on ``x`` and the attributes saying
    it: ``()`` per tensor, ``[size]`` and ``axis`` per row or column, the blocked shape, ``axis`` and
    ``block_size`` (opset 21) for blocks along one dim."""
    shape = list(x.shape) if x.shape is not None else None
    if shape is None or not all(isinstance(d, int) for d in shape) or not all(isinstance(b, int) for b in block_size):
        raise ctx.unsupported("quantization blocks of a tensor whose sizes depend on the inputs",
                              fix="quantize tensors of fixed sizes (weights)")
    if len(block_size) != len(shape):
        raise ctx.unsupported(f"block_size {list(block_size)} for a tensor of rank {len(shape)}",
                              fix="give one block size per dim")
    split = [i for i, (b, s) in enumerate(zip(block_size, shape)) if b < s]
    blocked = [i for i in split if block_size[i] > 1]
    if not split:
        return [], {}
    if not blocked and len(split) == 1:
        return [shape[split[0]]], {"axis": split[0]}
    if len(blocked) == 1:
        axis, size = blocked[0], int(block_size[blocked[0]])
        if ctx.opset < 21:
            raise ctx.unsupported("quantization in blocks along a dim needs opset 21 (blocked DequantizeLinear)",
                                  fix="export with opset=21 or later")
        scales = [-(-s // size) if i == axis else s for i, s in enumerate(shape)]
        return scales, {"axis": axis, "block_size": size}
    raise ctx.unsupported(f"block_size {list(block_size)} on a tensor of shape {shape}: blocks along more than one "
                          "dim, which QuantizeLinear/DequantizeLinear cannot express",
                          fix="quantize per tensor, per row or column, or in blocks along one dim")


def _affine_range(ctx: Ctx, dtype: torch.dtype, quant_min: Any, quant_max: Any) -> tuple[torch.dtype, int, int]:
    """torchao's integer dtype and range (defaulting to the dtype's full range)."""
    if dtype not in _QTYPES:
        _qtype(ctx, dtype)
    _, low, high, _ = _QTYPES[dtype]
    qmin = low if quant_min is None else int(quant_min)
    qmax = high if quant_max is None else int(quant_max)
    return dtype, qmin, qmax


def _narrow_weight(ctx: Ctx, x: ir.Value, qmin: int, qmax: int) -> ir.Value:
    """A constant integer weight whose range fits 4 bits as an INT4/UINT4 initializer (opset 21)."""
    array = _const_array(x)
    if array is None or ctx.opset < 21 or array.ndim == 0:
        return x
    for onnx_type, (low, high, np_type) in _INT4.items():
        if low <= qmin and qmax <= high and array.size and low <= array.min() and array.max() <= high:
            return _initializer(ctx, f"{x.name or 'weight'}.int4", array.astype(np.int64).astype(np_type), onnx_type)
    return x


def _initializer(ctx: Ctx, name: str, array: np.ndarray, dtype: ir.DataType | None = None) -> ir.Value:
    """A new initializer of the main graph holding ``array``."""
    value = ir.Value(name=ctx.names.unique(name), const_value=ir.tensor(array, dtype=dtype))
    value.dtype, value.shape = value.const_value.dtype, ir.Shape(array.shape)
    _root(ctx).graph.register_initializer(value)
    return value


def _root(ctx: Ctx) -> Ctx:
    while ctx.parent is not None:
        ctx = ctx.parent
    return ctx


def dequantize_affine(ctx: Ctx, x: ir.Value, block_size: Sequence[Any], scale: ir.Value, zero_point: Any,
                      input_dtype: torch.dtype, quant_min: Any = None, quant_max: Any = None,
                      output_dtype: torch.dtype = torch.float32) -> ir.Value:
    """torchao::dequantize_affine(Tensor input, SymInt[] block_size, Tensor scale, Tensor? zero_point,
    ScalarType input_dtype, Scalar? quant_min=None, Scalar? quant_max=None, ScalarType output_dtype=float32)"""
    dtype, qmin, qmax = _affine_range(ctx, input_dtype, quant_min, quant_max)
    _float_zero(ctx, zero_point)
    shape, attrs = _blocks(ctx, x, block_size)
    x = _narrow_weight(ctx, x, qmin, qmax)
    out = _dequantize(ctx, x, scale, zero_point, dtype, None, shape, **attrs)
    return ctx.cast(out, output_dtype)


def quantize_affine(ctx: Ctx, x: ir.Value, block_size: Sequence[Any], scale: ir.Value, zero_point: Any,
                    output_dtype: torch.dtype, quant_min: Any = None, quant_max: Any = None) -> ir.Value:
    """torchao::quantize_affine(Tensor input, SymInt[] block_size, Tensor scale, Tensor? zero_point,
    ScalarType output_dtype, Scalar? quant_min=None, Scalar? quant_max=None)"""
    dtype, qmin, qmax = _affine_range(ctx, output_dtype, quant_min, quant_max)
    _float_zero(ctx, zero_point)
    shape, attrs = _blocks(ctx, x, block_size)
    if zero_point is None:
        zero_point = 0
    return _quantize(ctx, x, scale, zero_point, qmin, qmax, dtype, shape, **attrs)


def _float_zero(ctx: Ctx, zero_point: Any) -> None:
    if isinstance(zero_point, ir.Value) and zero_point.dtype in (_FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16):
        raise ctx.unsupported("a floating-point zero point (torchao's float zero-point domain), which "
                              "QuantizeLinear/DequantizeLinear cannot hold",
                              fix="quantize with integer zero points (torchao's default INT zero-point domain)")


# torchao registers its ops when imported; by name, these need no import of torchao here.
register_translation("torchao::dequantize_affine", dequantize_affine)
register_translation("torchao::quantize_affine", quantize_affine)


# -- weight-only linear layers (torchao int8/int4 weight-only, see onnxport.capture.quantized) -------------------

_MS_DOMAIN = "com.microsoft"
# MatMulNBits for int4 weights only (in the onnxruntime releases QUANTIZED_SINCE names). int8 weights are
# written as Cast and arithmetic instead: onnxruntime 1.32's 8-bit MatMulNBits at accuracy level 0 ran an
# MLP 5x slower than the float weight it folds the arithmetic into (bench/pt2e.md).
_NBITS = (4,)


@aten(torch.ops.onnxport.dequantized_linear.default)
def dequantized_linear(ctx: Ctx, x: ir.Value, qdata: ir.Value, scale: ir.Value, zero_point: ir.Value | None,
                       block_size: Sequence[int], quant_min: int, quant_max: int,
                       bias: ir.Value | None = None) -> ir.Value:
    """onnxport::dequantized_linear(Tensor x, Tensor qdata, Tensor scale, Tensor? zero_point, int[] block_size,
    int quant_min, int quant_max, Tensor? bias): onnxruntime's ``MatMulNBits`` (accuracy level 0: float
    activations, as torchao computes) for int4 weights when the target is onnxruntime, else the integer weight
    dequantized by Cast and arithmetic feeding a ``MatMul`` (see ``_scaled_codes``)."""
    bits = 4 if -8 <= quant_min and quant_max <= 7 else 8
    arrays = [_const_array(v) for v in (qdata, scale, zero_point) if v is not None]
    target = ctx.forms.target
    nbits = (bits in _NBITS and target.runtime == "onnxruntime"
             and target.version >= QUANTIZED_SINCE["matmulnbits", bits]
             and all(a is not None for a in arrays) and x.dtype == _FLOAT)
    if nbits:
        out = _matmulnbits(ctx, x, *arrays[:2], arrays[2] if zero_point is not None else None, list(block_size), bits)
    else:
        out = ctx.op.MatMul(x, ctx.op.Transpose(_scaled_codes(ctx, qdata, scale, zero_point, block_size, quant_min,
                                                                quant_max), perm=[1, 0]))
    return ctx.op.Add(out, bias) if bias is not None else out


def _scaled_codes(ctx: Ctx, q: ir.Value, scale: ir.Value, zero_point: ir.Value | None, block_size: Sequence[int],
                  quant_min: int, quant_max: int) -> ir.Value:
    """The weight ``(q - zero_point) * scale`` as Cast and arithmetic on the integer (int4 where it fits)
    initializer: runtimes fold it into a float weight at load, so it computes exactly what torchao does, where
    a ``DequantizeLinear`` feeding the ``MatMul`` would be fused by onnxruntime into ``MatMulNBits`` at its
    default accuracy level (int8 activations)."""
    n, k = q.shape
    group = int(block_size[1])
    q = _narrow_weight(ctx, q, quant_min, quant_max)
    codes = ctx.op.Cast(q, to=int(_FLOAT))
    grouped = group < k
    if grouped:
        codes = ctx.op.Reshape(codes, ctx.const([n, k // group, group], ir.DataType.INT64))
    shape = [n, k // group, 1] if grouped else [n, 1]
    zeros = _const_array(zero_point) if zero_point is not None else None
    if zero_point is not None and (zeros is None or np.any(zeros != 0)):
        codes = ctx.op.Sub(codes, _param(ctx, zero_point, _FLOAT, shape))
    weight = ctx.op.Mul(codes, _param(ctx, scale, _FLOAT, shape))
    return ctx.op.Reshape(weight, ctx.const([n, k], ir.DataType.INT64)) if grouped else weight


def _matmulnbits(ctx: Ctx, x: ir.Value, q: np.ndarray, scale: np.ndarray, zero: np.ndarray | None,
                 block_size: list[int], bits: int) -> ir.Value:
    """``MatMulNBits`` of the signed codes ``q`` ``[N, K]``: stored unsigned (plus ``2**(bits-1)``), packed along K
    in blocks of a power of two from 16 to 256 (a per-row scale is repeated over the blocks of its row)."""
    n, k = q.shape
    group = block_size[1]
    if group < k and (group < 16 or group > 256 or group & (group - 1)):
        return _dequantized_matmul(ctx, x, q, scale, zero, block_size, bits)
    block = group if group < k else max(16, min(128, 1 << (k.bit_length() - 1)))
    blocks = -(-k // block)
    offset = 1 << (bits - 1)
    per_group = scale.reshape(n, -1).astype(np.float32)
    zeros = zero.reshape(n, -1).astype(np.int64) if zero is not None else None
    if group >= k:  # one scale per row: the same for each block of the row
        per_group = np.repeat(per_group[:, :1], blocks, axis=1)
        zeros = np.repeat(zeros[:, :1], blocks, axis=1) if zeros is not None else None
    codes = np.full((n, blocks * block), offset, dtype=np.int64)
    codes[:, :k] = q.astype(np.int64) + offset
    inputs = [x, _initializer(ctx, "weight.q", pack_codes(codes.astype(np.uint8).reshape(n, blocks, block), bits)),
              _initializer(ctx, "weight.scales", per_group.reshape(-1))]
    if zeros is not None and np.any(zeros != 0):
        packed = pack_codes((zeros + offset).astype(np.uint8), bits).reshape(-1)
        inputs.append(_initializer(ctx, "weight.zero_points", packed))
    out = ctx.op.MatMulNBits(*inputs, K=k, N=n, bits=bits, block_size=block, accuracy_level=0, _domain=_MS_DOMAIN)
    out.dtype = _FLOAT
    if x.shape is not None:
        out.shape = ir.Shape([*list(x.shape)[:-1], n])
    return out


def _dequantized_matmul(ctx: Ctx, x: ir.Value, q: np.ndarray, scale: np.ndarray, zero: np.ndarray | None,
                        block_size: list[int], bits: int) -> ir.Value:
    weight = _scaled_codes(ctx, _initializer(ctx, "weight.q", q), ctx.const(scale),
                           ctx.const(zero) if zero is not None else None, block_size,
                           -8 if bits == 4 else -128, 7 if bits == 4 else 127)
    return ctx.op.MatMul(x, ctx.op.Transpose(weight, perm=[1, 0]))
