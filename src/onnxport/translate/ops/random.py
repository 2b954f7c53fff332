"""Random ops: rand/randn/randint and their ``_like`` forms, normal, uniform, exponential, cauchy,
log_normal, geometric, bernoulli, multinomial, randperm, the dropouts and rrelu's training-mode slopes.

Every draw starts from standard uniform or normal noise made by ``_noise``. Up to opset 21 that is
``RandomUniform``/``RandomNormal`` (their ``*Like`` forms when the shape is symbolic). From opset 22
onnxruntime has no CPU kernel for those ops (their schemas changed and the kernels were left registered
at the old version only, microsoft/onnxruntime#32201), so there the noise is built from fair bits: the
mask of a training-mode ``Dropout`` of ratio 0.5, the one random op it runs at every opset (24 bits per
float drawn, 53 per double, as a temporary tensor; raise ``_LAST_GENERATOR_OPSET`` once onnxruntime
registers the kernels). Verification compares only the shape and dtype of the outputs these ops feed
(translate/driver.py marks them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from onnxport.translate.builder import Ctx
from onnxport.translate.registry import aten, ops

aten_ = ops.aten
INT64, FLOAT, DOUBLE, BOOL = ir.DataType.INT64, ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.BOOL
Size = int | ir.Value
_LAST_GENERATOR_OPSET = 21  # the newest opset whose Random* ops onnxruntime runs


def _noise(
    ctx: Ctx,
    kind: str,
    *,
    like: ir.Value | None = None,
    size: Sequence[Size] | ir.Value = (),
    dtype: ir.DataType | None = None,
) -> ir.Value:
    """Standard ``"uniform"`` [0, 1) or ``"normal"`` noise shaped like ``like``, or of ``size`` (sizes or a
    1-D int64 shape value), as ``dtype``: FLOAT, or DOUBLE when the node's output is double."""
    dtype = dtype or (DOUBLE if ctx.out_dtype() == DOUBLE else FLOAT)
    name = "RandomUniform" if kind == "uniform" else "RandomNormal"
    static = like is None and not isinstance(size, ir.Value) and size and all(isinstance(d, int) for d in size)
    if static and ctx.opset <= _LAST_GENERATOR_OPSET:
        noise = getattr(ctx.op, name)(shape=[int(d) for d in size], dtype=int(dtype))
    elif ctx.opset <= _LAST_GENERATOR_OPSET:
        like = like if like is not None else ctx.op.ConstantOfShape(_shape(ctx, size))
        noise = getattr(ctx.op, f"{name}Like")(like, dtype=int(dtype))
    else:
        shape = ctx.op.Shape(like) if like is not None else _shape(ctx, size)
        return _bits_uniform(ctx, shape, dtype) if kind == "uniform" else _bits_normal(ctx, shape, dtype)
    noise.dtype = dtype  # the builder types outputs after their first input, which these lack or differ from
    return noise


def _shape(ctx: Ctx, size: Sequence[Size] | ir.Value) -> ir.Value:
    return size if isinstance(size, ir.Value) else ctx.sizes(list(size))


def _keep_mask(ctx: Ctx, shape: ir.Value, p: float) -> ir.Value:
    """A BOOL mask of ``shape``, each element True with probability ``1 - p``: a training-mode Dropout's."""
    if p >= 1:
        return ctx.op.Expand(ctx.const(False, BOOL), shape)
    # The filler's value is irrelevant to the mask; a distinct one per draw keeps the optimizer's CSE,
    # which takes Dropout for deterministic, from merging two draws into one.
    filler = ctx.op.ConstantOfShape(shape, value=ir.tensor(np.array([len(ctx.graph) + 1.0], np.float32)))
    return ctx.op.Dropout(filler, ctx.const(float(p), FLOAT), ctx.const(True, BOOL), _outputs=2)[1]


def _fair_bits(ctx: Ctx, shape: ir.Value, count: int, dtype: ir.DataType) -> ir.Value:
    """``shape + [count]`` independent fair bits (0 or 1 as ``dtype``)."""
    return ctx.cast(_keep_mask(ctx, ctx.op.Concat(shape, ctx.const([count], INT64), axis=0), 0.5), dtype)


def _bits_uniform(ctx: Ctx, shape: ir.Value, dtype: ir.DataType) -> ir.Value:
    """U[0, 1) on the grid of the dtype's mantissa (24 or 53 bits), like torch.rand."""
    bits = 53 if dtype == DOUBLE else 24
    weights = ctx.const(0.5 ** np.arange(1, bits + 1), dtype)
    return ctx.op.MatMul(_fair_bits(ctx, shape, bits, dtype), weights)


def _bits_normal(ctx: Ctx, shape: ir.Value, dtype: ir.DataType) -> ir.Value:
    """N(0, 1) by Box-Muller from two uniforms: sqrt(-2 ln(1 - u1)) * cos(2 pi u2)."""
    bits = 53 if dtype == DOUBLE else 24
    weights = np.zeros((2 * bits, 2))
    weights[:bits, 0] = weights[bits:, 1] = 0.5 ** np.arange(1, bits + 1)
    pair = ctx.op.MatMul(_fair_bits(ctx, shape, 2 * bits, dtype), ctx.const(weights, dtype))
    u1, u2 = (ctx.op.Gather(pair, ctx.const(i, INT64), axis=-1) for i in (0, 1))
    radius = ctx.op.Sqrt(ctx.op.Mul(ctx.const(-2.0, dtype), ctx.op.Log(ctx.op.Sub(ctx.const(1.0, dtype), u1))))
    return ctx.op.Mul(radius, ctx.op.Cos(ctx.op.Mul(u2, ctx.const(2 * math.pi, dtype))))


def _scaled(ctx: Ctx, noise: ir.Value, scale: Any = 1.0, shift: Any = 0.0) -> ir.Value:
    """``noise * scale + shift`` (Python numbers or values) in the node's output dtype."""
    if not (isinstance(scale, (int, float)) and scale == 1):
        noise = ctx.op.Mul(noise, ctx.as_value(scale, dtype=noise.dtype))
    if not (isinstance(shift, (int, float)) and shift == 0):
        noise = ctx.op.Add(noise, ctx.as_value(shift, dtype=noise.dtype))
    return ctx.cast(noise, ctx.out_dtype())


@aten(aten_.rand.default)
def rand(ctx: Ctx, size: Sequence[Size], **_: Any) -> ir.Value:
    """rand(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    return _scaled(ctx, _noise(ctx, "uniform", size=size))


@aten(aten_.randn.default)
def randn(ctx: Ctx, size: Sequence[Size], **_: Any) -> ir.Value:
    """randn(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    return _scaled(ctx, _noise(ctx, "normal", size=size))


@aten(aten_.rand_like.default)
def rand_like(ctx: Ctx, x: ir.Value, **_: Any) -> ir.Value:
    """rand_like(Tensor self, *, ScalarType? dtype=None, ...) -> Tensor"""
    return _scaled(ctx, _noise(ctx, "uniform", like=x))


@aten(aten_.randn_like.default)
def randn_like(ctx: Ctx, x: ir.Value, **_: Any) -> ir.Value:
    """randn_like(Tensor self, *, ScalarType? dtype=None, ...) -> Tensor"""
    return _scaled(ctx, _noise(ctx, "normal", like=x))


@aten(aten_.uniform.default)
def uniform(ctx: Ctx, x: ir.Value, low: float = 0.0, high: float = 1.0, **_: Any) -> ir.Value:
    """uniform(Tensor self, float from=0., float to=1., *, Generator? generator=None) -> Tensor"""
    return _scaled(ctx, _noise(ctx, "uniform", like=x), high - low, low)


@aten(aten_.normal_functional.default, aten_.normal_.default)
def normal_functional(ctx: Ctx, x: ir.Value, mean: float = 0.0, std: float = 1.0, **_: Any) -> ir.Value:
    """normal_functional(Tensor self, float mean=0., float std=1., *, Generator? generator=None) -> Tensor"""
    return _scaled(ctx, _noise(ctx, "normal", like=x), std, mean)


@aten(aten_.normal.Tensor_float, aten_.normal.float_Tensor, aten_.normal.Tensor_Tensor)
def normal(ctx: Ctx, mean: ir.Value | float, std: ir.Value | float = 1.0, **_: Any) -> ir.Value:
    """normal.Tensor_Tensor(Tensor mean, Tensor std, *, Generator? generator=None) -> Tensor"""
    tensors = [v for v in (mean, std) if isinstance(v, ir.Value)]
    like = tensors[0] if len(tensors) == 1 else ctx.op.Add(mean, ctx.cast(std, mean.dtype))  # broadcast shape
    return _scaled(ctx, _noise(ctx, "normal", like=like), std, mean)


@aten(aten_.normal.float_float)
def normal_float_float(ctx: Ctx, mean: float, std: float, size: Sequence[Size], **_: Any) -> ir.Value:
    """normal.float_float(float mean, float std, SymInt[] size, *, Generator? generator=None, ScalarType? dtype=None, ...) -> Tensor"""
    return _scaled(ctx, _noise(ctx, "normal", size=size), std, mean)


@aten(aten_.exponential.default)
def exponential(ctx: Ctx, x: ir.Value, lambd: float = 1.0, **_: Any) -> ir.Value:
    """exponential(Tensor self, float lambd=1., *, Generator? generator=None) -> Tensor"""
    u = _noise(ctx, "uniform", like=x)
    return _scaled(ctx, ctx.op.Log(ctx.op.Sub(ctx.const(1.0, u.dtype), u)), -1.0 / lambd)


def _integers(ctx: Ctx, low: Size, high: Size, **where: Any) -> ir.Value:
    """Uniform integers in [low, high) shaped as ``where`` says (see ``_noise``), in the output dtype."""
    small = isinstance(low, int) and isinstance(high, int) and high - low <= 2**24
    u = _noise(ctx, "uniform", dtype=FLOAT if small else DOUBLE, **where)
    low_v, high_v = (ctx.as_value(v, dtype=u.dtype) for v in (low, high))
    drawn = ctx.op.Floor(ctx.op.Add(ctx.op.Mul(u, ctx.op.Sub(high_v, low_v)), low_v))
    # rounding may reach ``high`` itself
    return ctx.cast(ctx.op.Min(drawn, ctx.op.Sub(high_v, ctx.const(1.0, u.dtype))), ctx.out_dtype())


@aten(aten_.randint.default, aten_.randint.low)
def randint(ctx: Ctx, *args: Any, **_: Any) -> ir.Value:
    """randint.low(SymInt low, SymInt high, SymInt[] size, *, ScalarType? dtype=4, ...) -> Tensor"""
    *bounds, size = args
    low, high = bounds if len(bounds) == 2 else (0, bounds[0])
    return _integers(ctx, low, high, size=size)


@aten(aten_.randint_like.default, aten_.randint_like.low_dtype, aten_.randint_like.Tensor)
def randint_like(ctx: Ctx, x: ir.Value, *bounds: Size, **_: Any) -> ir.Value:
    """randint_like.low_dtype(Tensor self, SymInt low, SymInt high, *, ScalarType? dtype=None, ...) -> Tensor"""
    low, high = bounds if len(bounds) == 2 else (0, bounds[0])
    return _integers(ctx, low, high, like=x)


@aten(aten_.bernoulli.default, aten_.bernoulli.p, aten_.bernoulli.Tensor)
def bernoulli(ctx: Ctx, x: ir.Value, p: ir.Value | float | None = None, **_: Any) -> ir.Value:
    """bernoulli.p(Tensor self, float p, *, Generator? generator=None) -> Tensor"""
    u = _noise(ctx, "uniform", like=x, dtype=DOUBLE if x.dtype == DOUBLE else FLOAT)
    return ctx.cast(ctx.op.Less(u, ctx.as_value(x if p is None else p, dtype=u.dtype)), ctx.out_dtype())


@aten(aten_.multinomial.default)
def multinomial(ctx: Ctx, probs: ir.Value, num_samples: Size, replacement: bool = False, **_: Any) -> ir.Value:
    """multinomial(Tensor self, SymInt num_samples, bool replacement=False, *, Generator? generator=None) -> Tensor"""
    dtype = DOUBLE if probs.dtype == DOUBLE else FLOAT
    probs, n = ctx.cast(probs, dtype), ctx.sizes([num_samples])
    if not replacement:  # the n largest log(u) / p are a sample without replacement (Efraimidis-Spirakis)
        keys = ctx.op.Div(ctx.op.Log(_noise(ctx, "uniform", like=probs, dtype=dtype)), probs)
        return ctx.op.TopK(keys, n, axis=-1, _outputs=2)[1]
    # with replacement: per sample, the number of cumulative weights at or below u * total
    cdf = ctx.op.CumSum(probs, ctx.const(-1, INT64))
    total = ctx.op.ReduceMax(cdf, ctx.const([-1], INT64), keepdims=1)
    shape = ctx.op.Concat(ctx.op.Shape(probs, end=-1), n, axis=0)
    target = ctx.op.Mul(_noise(ctx, "uniform", size=shape, dtype=dtype), total)
    target = ctx.op.Unsqueeze(target, ctx.const([-1], INT64))
    below = ctx.op.LessOrEqual(ctx.op.Unsqueeze(cdf, ctx.const([-2], INT64)), target)
    count = ctx.op.ReduceSum(ctx.cast(below, INT64), ctx.const([-1], INT64), keepdims=0)
    return ctx.op.Min(count, ctx.op.Sub(ctx.op.Shape(probs, start=-1), ctx.const([1], INT64)))


@aten(aten_.randperm.default)
def randperm(ctx: Ctx, n: Size, **_: Any) -> ir.Value:
    """randperm(SymInt n, *, ScalarType? dtype=4, ...) -> Tensor"""
    keys = _noise(ctx, "uniform", size=[n], dtype=FLOAT)
    return ctx.cast(ctx.op.TopK(keys, ctx.sizes([n]), axis=0, _outputs=2)[1], ctx.out_dtype())


def _scaled_keep(ctx: Ctx, x: ir.Value, p: float, shape: ir.Value) -> tuple[ir.Value, ir.Value]:
    """Dropout of ``x`` with a keep mask of ``shape`` (broadcast over ``x``): (x * mask / (1 - p), mask)."""
    keep = _keep_mask(ctx, shape, p)
    kept = ctx.op.Mul(x, ctx.const(1.0 / (1.0 - p), x.dtype)) if p < 1 else x
    return ctx.op.Where(keep, kept, ctx.const(0, x.dtype)), keep


@aten(aten_.dropout.default)
def dropout(ctx: Ctx, x: ir.Value, p: float, train: bool | None) -> ir.Value:
    """dropout(Tensor input, float p, bool train) -> Tensor"""
    return _scaled_keep(ctx, x, p, ctx.op.Shape(x))[0] if train and p else x


@aten(aten_.native_dropout.default)
def native_dropout(ctx: Ctx, x: ir.Value, p: float, train: bool | None) -> tuple[ir.Value, ir.Value]:
    """native_dropout(Tensor input, float p, bool? train) -> (Tensor, Tensor)"""
    if train and p:
        return _scaled_keep(ctx, x, p, ctx.op.Shape(x))
    return x, ctx.op.Expand(ctx.const(True, BOOL), ctx.op.Shape(x))


@aten(aten_.feature_dropout.default)
def feature_dropout(ctx: Ctx, x: ir.Value, p: float, train: bool) -> ir.Value:
    """feature_dropout(Tensor input, float p, bool train) -> Tensor"""
    if not train or not p:
        return x
    return _scaled_keep(ctx, x, p, _feature_shape(ctx, x))[0]


def _alpha_dropout(ctx: Ctx, x: ir.Value, p: float, train: bool, *, feature: bool) -> ir.Value:
    """Alpha dropout of single units, or of whole channels (``feature``): dropped units take SELU's negative
    saturation, then an affine map restores the mean and variance."""
    if not train or not p:
        return x
    if p >= 1:
        return ctx.op.Mul(x, ctx.const(0, x.dtype))
    alpha = -1.7580993408473766  # SELU's negative saturation, which dropped units take
    a = ((1 - p) * (1 + p * alpha**2)) ** -0.5
    shape = _feature_shape(ctx, x) if feature else ctx.op.Shape(x)
    dropped = ctx.op.Where(_keep_mask(ctx, shape, p), x, ctx.const(alpha, x.dtype))
    return ctx.op.Add(ctx.op.Mul(dropped, ctx.const(a, x.dtype)), ctx.const(-a * alpha * p, x.dtype))


def _feature_shape(ctx: Ctx, x: ir.Value) -> ir.Value:
    """(dim 0, dim 1, 1, ...): one draw per channel of each sample, as torch's feature noise."""
    return ctx.op.Concat(ctx.op.Shape(x, end=2), ctx.const([1] * (len(x.shape) - 2), INT64), axis=0)


@aten(aten_.alpha_dropout.default)
def alpha_dropout(ctx: Ctx, x: ir.Value, p: float, train: bool) -> ir.Value:
    """alpha_dropout(Tensor input, float p, bool train) -> Tensor"""
    return _alpha_dropout(ctx, x, p, train, feature=False)


@aten(aten_.feature_alpha_dropout.default)
def feature_alpha_dropout(ctx: Ctx, x: ir.Value, p: float, train: bool) -> ir.Value:
    """feature_alpha_dropout(Tensor input, float p, bool train) -> Tensor"""
    return _alpha_dropout(ctx, x, p, train, feature=True)


# -- more distributions: transforms of one uniform (inverse CDFs) or normal draw per element -------------


@aten(aten_.cauchy.default)
def cauchy(ctx: Ctx, x: ir.Value, median: float = 0.0, sigma: float = 1.0, **_: Any) -> ir.Value:
    """cauchy(Tensor self, float median=0., float sigma=1., *, Generator? generator=None) -> Tensor"""
    u = _noise(ctx, "uniform", like=x)
    angle = ctx.op.Mul(ctx.op.Sub(u, ctx.const(0.5, u.dtype)), ctx.const(math.pi, u.dtype))
    # tan as sin / cos: onnxruntime has no float64 Tan
    return _scaled(ctx, ctx.op.Div(ctx.op.Sin(angle), ctx.op.Cos(angle)), sigma, median)


@aten(aten_.log_normal.default)
def log_normal(ctx: Ctx, x: ir.Value, mean: float = 1.0, std: float = 2.0, **_: Any) -> ir.Value:
    """log_normal(Tensor self, float mean=1., float std=2., *, Generator? generator=None) -> Tensor"""
    z = _noise(ctx, "normal", like=x)
    return ctx.cast(ctx.op.Exp(ctx.op.Add(ctx.op.Mul(z, ctx.const(std, z.dtype)), ctx.const(mean, z.dtype))),
                    ctx.out_dtype())


@aten(aten_.geometric.default)
def geometric(ctx: Ctx, x: ir.Value, p: float, **_: Any) -> ir.Value:
    """geometric(Tensor self, float p, *, Generator? generator=None) -> Tensor"""
    u = _noise(ctx, "uniform", like=x)
    # trials until the first success: ceil(log(v) / log(1 - p)) for v uniform in (0, 1]; at least 1
    log_fail = math.log1p(-p) if p < 1 else -math.inf
    trials = ctx.op.Ceil(ctx.op.Div(ctx.op.Log(ctx.op.Sub(ctx.const(1.0, u.dtype), u)), ctx.const(log_fail, u.dtype)))
    return ctx.cast(ctx.op.Max(trials, ctx.const(1.0, u.dtype)), ctx.out_dtype())


@aten(aten_.rrelu_with_noise_functional.default)
def rrelu_with_noise_functional(ctx: Ctx, x: ir.Value, noise: ir.Value, lower: float = 0.125, upper: float = 1 / 3,
                                training: bool = False, **_: Any) -> tuple[ir.Value, ir.Value]:
    """rrelu_with_noise_functional(Tensor self, Tensor noise, Scalar lower=0.125, Scalar upper=0.33333333333333331, bool training=False, Generator? generator=None) -> (Tensor, Tensor noise_out)"""
    if not training and x.dtype in (ir.DataType.FLOAT, ir.DataType.FLOAT16):  # LeakyRelu's only dtypes
        return ctx.op.LeakyRelu(x, alpha=(lower + upper) / 2), ctx.op.Identity(noise)
    positive = ctx.op.Greater(x, ctx.const(0, x.dtype))
    if not training:  # the mean slope; the noise is left as it was
        return ctx.op.Where(positive, x, ctx.op.Mul(x, ctx.const((lower + upper) / 2, x.dtype))), ctx.op.Identity(noise)
    # in training, each non-positive element gets its own slope drawn from U[lower, upper), returned as noise
    slope = _scaled(ctx, _noise(ctx, "uniform", like=x), upper - lower, lower)
    slope = ctx.op.Where(positive, ctx.const(1, slope.dtype), slope)
    return ctx.op.Mul(x, slope), ctx.cast(slope, noise.dtype)
