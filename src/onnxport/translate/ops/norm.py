"""Normalisation: batch, layer, group, instance and RMS norm."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir

from onnxport.translate.builder import Ctx
from onnxport.translate.ops._common import axes, rank
from onnxport.translate.registry import aten, ops

aten_ = ops.aten

_HALF = frozenset({ir.DataType.FLOAT16, ir.DataType.BFLOAT16})


def _upcast(ctx: Ctx, x: ir.Value) -> ir.Value:
    """Statistics in float32 for 16-bit inputs, as torch's CPU kernels accumulate."""
    return ctx.cast(x, ir.DataType.FLOAT) if x.dtype in _HALF else x


def _ones(ctx: Ctx, dims: Sequence[int | ir.SymbolicDim], shape_of: ir.Value, dtype: ir.DataType,
          start: int, end: int | None = None, fill: float = 1.0) -> ir.Value:
    """Ones (or ``fill``) of shape ``dims``; symbolic dims read their sizes from ``Shape(shape_of)[start:end]``."""
    if all(isinstance(d, int) for d in dims):
        return ctx.const(np.full([int(d) for d in dims], fill), dtype)
    one = ir.tensor(np.full(1, fill, dtype=dtype.numpy()), dtype=dtype)
    return ctx.op.ConstantOfShape(ctx.op.Shape(shape_of, start=start, end=end), value=one)


def _channel_ones(ctx: Ctx, x: ir.Value, dtype: ir.DataType) -> ir.Value:
    return _ones(ctx, [x.shape[1]], x, dtype, 1, 2)


def _affine(ctx: Ctx, y: ir.Value, weight: ir.Value | None, bias: ir.Value | None, r: int) -> ir.Value:
    """``y * weight + bias`` with per-channel (dim 1) parameters."""
    shape = ctx.const([-1] + [1] * (r - 2), ir.DataType.INT64)
    if weight is not None:
        y = ctx.op.Mul(y, ctx.op.Reshape(ctx.cast(weight, y.dtype), shape))
    if bias is not None:
        y = ctx.op.Add(y, ctx.op.Reshape(ctx.cast(bias, y.dtype), shape))
    return y


def _moments(ctx: Ctx, x: ir.Value, reduce: ir.Value, eps: float) -> tuple[ir.Value, ir.Value, ir.Value, ir.Value]:
    """``(x - mean) * rstd``, mean, rstd and the biased variance over axes ``reduce`` (kept as size 1)."""
    mean = ctx.op.ReduceMean(x, reduce, keepdims=1)
    centered = ctx.op.Sub(x, mean)
    var = ctx.op.ReduceMean(ctx.op.Mul(centered, centered), reduce, keepdims=1)
    rstd = ctx.op.Reciprocal(ctx.op.Sqrt(ctx.op.Add(var, ctx.const(eps, like=var))))
    return ctx.op.Mul(centered, rstd), mean, rstd, var


def _empty(ctx: Ctx, index: int) -> ir.Value:
    """torch's eval-mode batch norm returns empty save_mean / save_invstd."""
    return ctx.const(np.zeros((0,)), ctx.out_dtype(index) or ir.DataType.FLOAT)


def _batch_norm_eval(ctx: Ctx, x: ir.Value, weight: ir.Value | None, bias: ir.Value | None, mean: ir.Value,
                     var: ir.Value, eps: float) -> ir.Value:
    if rank(x) < 2:  # torch takes a 1-D input only when it is empty (no channels), and returns it
        return ctx.op.Identity(x)
    dtype = x.dtype
    scale = ctx.cast(weight, dtype) if weight is not None else _ones(ctx, list(mean.shape), mean, dtype, 0)
    shift = ctx.cast(bias, dtype) if bias is not None else ctx.op.Mul(scale, ctx.const(0.0, like=scale))
    return ctx.op.BatchNormalization(x, scale, shift, ctx.cast(mean, dtype), ctx.cast(var, dtype), epsilon=eps)


def _batch_norm_train(ctx: Ctx, x: ir.Value, weight: ir.Value | None, bias: ir.Value | None,
                      eps: float) -> tuple[ir.Value, ir.Value, ir.Value, ir.Value]:
    """Normalise with batch statistics: (output, mean (C,), invstd (C,), biased var (C,))."""
    r = rank(x)
    y, mean, rstd, var = _moments(ctx, _upcast(ctx, x), axes(ctx, [0, *range(2, r)]), eps)
    flat = ctx.const([-1], ir.DataType.INT64)
    y = _affine(ctx, ctx.cast(y, x.dtype), weight, bias, r)
    return y, ctx.op.Reshape(mean, flat), ctx.op.Reshape(rstd, flat), ctx.op.Reshape(var, flat)


@aten(aten_.batch_norm.default)
def batch_norm(ctx: Ctx, x: ir.Value, weight: ir.Value | None, bias: ir.Value | None, running_mean: ir.Value | None,
               running_var: ir.Value | None, training: bool, momentum: float, eps: float,
               cudnn_enabled: bool) -> ir.Value:
    """batch_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean, Tensor? running_var, bool training, float momentum, float eps, bool cudnn_enabled) -> Tensor"""
    if training or running_mean is None or running_var is None:
        # the running-stat update of a training-mode module is a side effect the ONNX forward does not keep
        return _batch_norm_train(ctx, x, weight, bias, eps)[0]
    return _batch_norm_eval(ctx, x, weight, bias, running_mean, running_var, eps)


@aten(aten_._native_batch_norm_legit_no_training.default)
def native_batch_norm_no_training(ctx: Ctx, x: ir.Value, weight: ir.Value | None, bias: ir.Value | None,
                                  running_mean: ir.Value, running_var: ir.Value, momentum: float,
                                  eps: float) -> tuple[ir.Value, ir.Value, ir.Value]:
    """_native_batch_norm_legit_no_training(Tensor input, Tensor? weight, Tensor? bias, Tensor running_mean, Tensor running_var, float momentum, float eps) -> (Tensor, Tensor, Tensor)"""
    return _batch_norm_eval(ctx, x, weight, bias, running_mean, running_var, eps), _empty(ctx, 1), _empty(ctx, 2)


@aten(aten_.native_batch_norm.default)
def native_batch_norm(ctx: Ctx, x: ir.Value, weight: ir.Value | None, bias: ir.Value | None,
                      running_mean: ir.Value | None, running_var: ir.Value | None, training: bool, momentum: float,
                      eps: float) -> tuple[ir.Value, ir.Value, ir.Value]:
    """native_batch_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean, Tensor? running_var, bool training, float momentum, float eps) -> (Tensor, Tensor, Tensor)"""
    if training or running_mean is None or running_var is None:
        y, mean, rstd, _ = _batch_norm_train(ctx, x, weight, bias, eps)
        return y, ctx.cast(mean, ctx.out_dtype(1)), ctx.cast(rstd, ctx.out_dtype(2))
    return native_batch_norm_no_training(ctx, x, weight, bias, running_mean, running_var, momentum, eps)


@aten(aten_._native_batch_norm_legit.no_stats)
def native_batch_norm_no_stats(ctx: Ctx, x: ir.Value, weight: ir.Value | None, bias: ir.Value | None, training: bool,
                               momentum: float, eps: float) -> tuple[ir.Value, ir.Value, ir.Value]:
    """_native_batch_norm_legit.no_stats(Tensor input, Tensor? weight, Tensor? bias, bool training, float momentum, float eps) -> (Tensor, Tensor, Tensor)"""
    return native_batch_norm(ctx, x, weight, bias, None, None, True, momentum, eps)


@aten(aten_._native_batch_norm_legit_functional.default)
def native_batch_norm_functional(ctx: Ctx, x: ir.Value, weight: ir.Value | None, bias: ir.Value | None,
                                 running_mean: ir.Value, running_var: ir.Value, training: bool, momentum: float,
                                 eps: float) -> tuple[ir.Value, ...]:
    """_native_batch_norm_legit_functional(Tensor input, Tensor? weight, Tensor? bias, Tensor running_mean, Tensor running_var, bool training, float momentum, float eps) -> (Tensor, Tensor, Tensor, Tensor running_mean_out, Tensor running_var_out)"""
    if not training:
        out = native_batch_norm_no_training(ctx, x, weight, bias, running_mean, running_var, momentum, eps)
        return (*out, ctx.op.Identity(running_mean), ctx.op.Identity(running_var))
    y, mean, rstd, var = _batch_norm_train(ctx, x, weight, bias, eps)
    # the running variance is updated with the unbiased estimate: var * n / (n - 1), n = numel / C
    n = ctx.op.Div(ctx.op.Size(x), ctx.op.Shape(x, start=1, end=2))
    n = ctx.cast(n, var.dtype)
    unbiased = ctx.op.Div(ctx.op.Mul(var, n), ctx.op.Sub(n, ctx.const(1.0, like=n)))
    keep, take = ctx.const(1.0 - momentum, like=var), ctx.const(momentum, like=var)
    new_mean = ctx.op.Add(ctx.op.Mul(ctx.cast(running_mean, var.dtype), keep), ctx.op.Mul(mean, take))
    new_var = ctx.op.Add(ctx.op.Mul(ctx.cast(running_var, var.dtype), keep), ctx.op.Mul(unbiased, take))
    return (y, ctx.cast(mean, ctx.out_dtype(1)), ctx.cast(rstd, ctx.out_dtype(2)),
            ctx.cast(new_mean, running_mean.dtype), ctx.cast(new_var, running_var.dtype))


def _reserve(ctx: Ctx) -> ir.Value:
    """The empty uint8 workspace torch's CPU batch norm returns for its backward."""
    return ctx.const(np.zeros((0,), np.uint8), ir.DataType.UINT8)


@aten(aten_._batch_norm_with_update_functional.default)
def batch_norm_with_update_functional(ctx: Ctx, x: ir.Value, weight: ir.Value | None, bias: ir.Value | None,
                                      running_mean: ir.Value, running_var: ir.Value, momentum: float,
                                      eps: float) -> tuple[ir.Value, ...]:
    """_batch_norm_with_update_functional(Tensor input, Tensor? weight, Tensor? bias, Tensor running_mean, Tensor running_var, float momentum, float eps) -> (Tensor, Tensor, Tensor, Tensor, Tensor running_mean_out, Tensor running_var_out)"""
    y, mean, rstd, new_mean, new_var = native_batch_norm_functional(
        ctx, x, weight, bias, running_mean, running_var, True, momentum, eps)
    return y, mean, rstd, _reserve(ctx), new_mean, new_var


@aten(aten_._batch_norm_no_update.default)
def batch_norm_no_update(ctx: Ctx, x: ir.Value, weight: ir.Value | None, bias: ir.Value | None,
                         running_mean: ir.Value | None, running_var: ir.Value | None, momentum: float,
                         eps: float) -> tuple[ir.Value, ...]:
    """_batch_norm_no_update(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean, Tensor? running_var, float momentum, float eps) -> (Tensor, Tensor, Tensor, Tensor)"""
    y, mean, rstd = native_batch_norm(ctx, x, weight, bias, running_mean, running_var, False, momentum, eps)
    return y, mean, rstd, _reserve(ctx)


def _layer_norm(ctx: Ctx, x: ir.Value, normalized_shape: Sequence[int | ir.Value], weight: ir.Value | None,
                bias: ir.Value | None, eps: float, outputs: int) -> ir.Value | tuple[ir.Value, ...]:
    k = len(normalized_shape)
    scale = ctx.cast(weight, x.dtype) if weight is not None else _ones(ctx, list(x.shape)[-k:], x, x.dtype, -k)
    if bias is not None:
        inputs = [x, scale, ctx.cast(bias, x.dtype)]
    elif ctx.forms.allows("LayerNormalization.no_bias"):
        inputs = [x, scale]
    else:  # a target with releases that abort on a LayerNormalization without bias (onnxport.targets)
        inputs = [x, scale, _ones(ctx, list(x.shape)[-k:], x, x.dtype, -k, fill=0.0)]
    return ctx.op.LayerNormalization(*inputs, axis=-k, epsilon=eps, stash_type=1, _outputs=outputs)


@aten(aten_.layer_norm.default)
def layer_norm(ctx: Ctx, x: ir.Value, normalized_shape: Sequence[int | ir.Value], weight: ir.Value | None = None,
               bias: ir.Value | None = None, eps: float = 1e-5, cudnn_enable: bool = True) -> ir.Value:
    """layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, Tensor? bias=None, float eps=1e-05, bool cudnn_enable=True) -> Tensor"""
    return _layer_norm(ctx, x, normalized_shape, weight, bias, eps, 1)


@aten(aten_.native_layer_norm.default)
def native_layer_norm(ctx: Ctx, x: ir.Value, normalized_shape: Sequence[int | ir.Value], weight: ir.Value | None,
                      bias: ir.Value | None, eps: float) -> tuple[ir.Value, ir.Value, ir.Value]:
    """native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, float eps) -> (Tensor, Tensor, Tensor)"""
    y, mean, rstd = _layer_norm(ctx, x, normalized_shape, weight, bias, eps, 3)
    # stash_type=1 makes ONNX's mean / inv-std float32; torch returns them in the input dtype
    mean.dtype = rstd.dtype = ir.DataType.FLOAT
    return y, ctx.cast(mean, ctx.out_dtype(1)), ctx.cast(rstd, ctx.out_dtype(2))


def _group_stats(ctx: Ctx, x: ir.Value, groups: int, eps: float) -> tuple[ir.Value, ir.Value, ir.Value]:
    """Normalised ``x`` (float32 for 16-bit inputs) and per-(n, group) mean and rstd of shape (N, G, 1)."""
    grouped = ctx.op.Reshape(_upcast(ctx, x), ctx.const([0, groups, -1], ir.DataType.INT64))
    y, mean, rstd, _ = _moments(ctx, grouped, ctx.const([-1], ir.DataType.INT64), eps)
    return ctx.op.Reshape(y, ctx.op.Shape(x)), mean, rstd


@aten(aten_.group_norm.default)
def group_norm(ctx: Ctx, x: ir.Value, num_groups: int, weight: ir.Value | None = None, bias: ir.Value | None = None,
               eps: float = 1e-5, cudnn_enabled: bool = True) -> ir.Value:
    """group_norm(Tensor input, int num_groups, Tensor? weight=None, Tensor? bias=None, float eps=1e-05, bool cudnn_enabled=True) -> Tensor"""
    # not ONNX GroupNormalization: its scale/bias changed from per-group to per-channel in opset 21
    y, _, _ = _group_stats(ctx, x, num_groups, eps)
    return _affine(ctx, ctx.cast(y, x.dtype), weight, bias, rank(x))


@aten(aten_.native_group_norm.default)
def native_group_norm(ctx: Ctx, x: ir.Value, weight: ir.Value | None, bias: ir.Value | None, n: int | ir.Value,
                      c: int | ir.Value, hxw: int | ir.Value, group: int,
                      eps: float) -> tuple[ir.Value, ir.Value, ir.Value]:
    """native_group_norm(Tensor input, Tensor? weight, Tensor? bias, SymInt N, SymInt C, SymInt HxW, int group, float eps) -> (Tensor, Tensor, Tensor)"""
    y, mean, rstd = _group_stats(ctx, x, group, eps)
    y = _affine(ctx, ctx.cast(y, x.dtype), weight, bias, rank(x))
    last = ctx.const([-1], ir.DataType.INT64)
    mean, rstd = ctx.op.Squeeze(mean, last), ctx.op.Squeeze(rstd, last)
    return y, ctx.cast(mean, ctx.out_dtype(1)), ctx.cast(rstd, ctx.out_dtype(2))


@aten(aten_.instance_norm.default)
def instance_norm(ctx: Ctx, x: ir.Value, weight: ir.Value | None, bias: ir.Value | None, running_mean: ir.Value | None,
                  running_var: ir.Value | None, use_input_stats: bool, momentum: float, eps: float,
                  cudnn_enabled: bool) -> ir.Value:
    """instance_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean, Tensor? running_var, bool use_input_stats, float momentum, float eps, bool cudnn_enabled) -> Tensor"""
    if not use_input_stats:  # eval with tracked running stats: per-channel constants, as batch norm
        return _batch_norm_eval(ctx, x, weight, bias, running_mean, running_var, eps)
    xf = _upcast(ctx, x)
    scale = ctx.cast(weight, xf.dtype) if weight is not None else _channel_ones(ctx, x, xf.dtype)
    shift = ctx.cast(bias, xf.dtype) if bias is not None else ctx.op.Mul(scale, ctx.const(0.0, like=scale))
    return ctx.cast(ctx.op.InstanceNormalization(xf, scale, shift, epsilon=eps), x.dtype)


@aten(aten_.rms_norm.default)
def rms_norm(ctx: Ctx, x: ir.Value, normalized_shape: Sequence[int | ir.Value], weight: ir.Value | None = None,
             eps: float | None = None) -> ir.Value:
    """rms_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, float? eps=None) -> Tensor"""
    k, xf = len(normalized_shape), _upcast(ctx, x)
    if eps is None:  # torch's default is the epsilon of the (upcast) compute dtype
        eps = float(np.finfo(xf.dtype.numpy()).eps)
    out_dtype = ctx.out_dtype() or x.dtype
    if ctx.forms.allows("RMSNormalization"):
        scale = ctx.cast(weight, x.dtype) if weight is not None else _ones(ctx, list(x.shape)[-k:], x, x.dtype, -k)
        return ctx.cast(ctx.op.RMSNormalization(x, scale, axis=-k, epsilon=eps, stash_type=1), out_dtype)
    reduce = ctx.const(list(range(-k, 0)), ir.DataType.INT64)
    mean_square = ctx.op.ReduceMean(ctx.op.Mul(xf, xf), reduce, keepdims=1)
    rstd = ctx.op.Reciprocal(ctx.op.Sqrt(ctx.op.Add(mean_square, ctx.const(eps, like=xf))))
    y = ctx.cast(ctx.op.Mul(xf, rstd), x.dtype)
    if weight is not None:
        y = ctx.op.Mul(ctx.cast(y, out_dtype), ctx.cast(weight, out_dtype))
    return ctx.cast(y, out_dtype)


def _weight_norm(ctx: Ctx, v: ir.Value, g: ir.Value, dim: int) -> tuple[ir.Value, ir.Value]:
    """``w = v * g / ||v||`` with the 2-norm over every dim but ``dim`` (all dims for -1); returns w, norm."""
    r = rank(v)
    keep = [] if dim == -1 else [dim % r]
    norm = ctx.op.ReduceL2(_upcast(ctx, v), axes(ctx, [d for d in range(r) if d not in keep]), keepdims=1)
    scale = ctx.op.Div(ctx.cast(g, norm.dtype), norm)
    return ctx.cast(ctx.op.Mul(_upcast(ctx, v), scale), v.dtype), norm


@aten(aten_._weight_norm.default)
def weight_norm(ctx: Ctx, v: ir.Value, g: ir.Value, dim: int = 0) -> ir.Value:
    """_weight_norm(Tensor v, Tensor g, int dim=0) -> Tensor"""
    return _weight_norm(ctx, v, g, dim)[0]


@aten(aten_._weight_norm_interface.default)
def weight_norm_interface(ctx: Ctx, v: ir.Value, g: ir.Value, dim: int = 0) -> tuple[ir.Value, ir.Value]:
    """_weight_norm_interface(Tensor v, Tensor g, int dim=0) -> (Tensor, Tensor)"""
    w, norm = _weight_norm(ctx, v, g, dim)
    return w, ctx.cast(ctx.op.Reshape(norm, ctx.op.Shape(g)), ctx.out_dtype(1))
