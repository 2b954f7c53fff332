"""Activation functions."""

from __future__ import annotations

import math

import onnx_ir as ir
import torch

from onnxport.translate.builder import Ctx
from onnxport.translate.ops._common import norm_axis, rank
from onnxport.translate.registry import aten, ops

aten_ = ops.aten

# torch.nn.functional.selu's constants (ONNX's Selu defaults are float32 roundings of different digits)
_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _has_kernel(x: ir.Value) -> bool:
    """Whether onnxruntime's activation kernels (LeakyRelu, Elu, Selu, Softplus, HardSigmoid, PRelu, ...)
    take ``x``'s dtype; for the others (float64) they are composed from arithmetic."""
    return x.dtype in (ir.DataType.FLOAT, ir.DataType.FLOAT16)


def _softplus(ctx: Ctx, x: ir.Value) -> ir.Value:
    """log(1 + exp(x)), as max(x, 0) + log(1 + exp(-|x|)) where there is no kernel: no overflow."""
    if _has_kernel(x):
        return ctx.op.Softplus(x)
    tail = ctx.op.Log(ctx.op.Add(ctx.const(1, like=x), ctx.op.Exp(ctx.op.Neg(ctx.op.Abs(x)))))
    return ctx.op.Add(ctx.op.Relu(x), tail)


def _relu6_over_6(ctx: Ctx, x: ir.Value) -> ir.Value:
    """torch's hardsigmoid: relu6(x + 3) / 6."""
    if _has_kernel(x):
        return ctx.op.HardSigmoid(x, alpha=1 / 6, beta=0.5)
    shifted = ctx.op.Clip(ctx.op.Add(x, ctx.const(3, like=x)), ctx.const(0, like=x), ctx.const(6, like=x))
    return ctx.op.Div(shifted, ctx.const(6, like=x))


@aten(aten_.relu.default)
def relu(ctx: Ctx, x: ir.Value) -> ir.Value:
    """relu(Tensor self) -> Tensor"""
    return ctx.op.Relu(x)


@aten(aten_.relu6.default)
def relu6(ctx: Ctx, x: ir.Value) -> ir.Value:
    """relu6(Tensor self) -> Tensor"""
    return ctx.op.Clip(x, ctx.const(0, like=x), ctx.const(6, like=x))


@aten(aten_.hardtanh.default)
def hardtanh(ctx: Ctx, x: ir.Value, min_val: float = -1, max_val: float = 1) -> ir.Value:
    """hardtanh(Tensor self, Scalar min_val=-1, Scalar max_val=1) -> Tensor"""
    return ctx.op.Clip(x, ctx.const(min_val, like=x), ctx.const(max_val, like=x))


@aten(aten_.gelu.default)
def gelu(ctx: Ctx, x: ir.Value, *, approximate: str = "none") -> ir.Value:
    """gelu(Tensor self, *, str approximate='none') -> Tensor"""
    if ctx.opset >= 20:
        return ctx.op.Gelu(x, approximate=approximate)
    half = ctx.const(0.5, like=x)
    if approximate == "tanh":
        # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        cube = ctx.op.Mul(ctx.op.Mul(x, x), x)
        inner = ctx.op.Add(x, ctx.op.Mul(ctx.const(0.044715, like=x), cube))
        inner = ctx.op.Mul(ctx.const(math.sqrt(2 / math.pi), like=x), inner)
        cdf = ctx.op.Add(ctx.const(1, like=x), ctx.op.Tanh(inner))
    else:
        # 0.5 x (1 + erf(x / sqrt 2))
        cdf = ctx.op.Add(ctx.const(1, like=x), ctx.op.Erf(ctx.op.Mul(x, ctx.const(math.sqrt(0.5), like=x))))
    return ctx.op.Mul(ctx.op.Mul(half, x), cdf)


@aten(aten_.silu.default)
def silu(ctx: Ctx, x: ir.Value) -> ir.Value:
    """silu(Tensor self) -> Tensor"""
    return ctx.op.Mul(x, ctx.op.Sigmoid(x))


@aten(aten_.sigmoid.default)
def sigmoid(ctx: Ctx, x: ir.Value) -> ir.Value:
    """sigmoid(Tensor self) -> Tensor"""
    return ctx.op.Sigmoid(ctx.cast(x, ctx.out_dtype()))


@aten(aten_.softplus.default)
def softplus(ctx: Ctx, x: ir.Value, beta: float = 1, threshold: float = 20) -> ir.Value:
    """softplus(Tensor self, Scalar beta=1, Scalar threshold=20) -> Tensor"""
    if beta == 1 and threshold >= 20 and _has_kernel(x):
        # above 20, log(1 + exp(x)) is x + 2e-9, which float32 and float16 round to x: the threshold changes nothing
        return ctx.op.Softplus(x)
    scaled = x if beta == 1 else ctx.op.Mul(x, ctx.const(beta, like=x))
    soft = _softplus(ctx, scaled)
    if beta != 1:
        soft = ctx.op.Div(soft, ctx.const(beta, like=x))
    # torch returns x itself above the threshold (linear regime)
    return ctx.op.Where(ctx.op.Greater(scaled, ctx.const(threshold, like=x)), x, soft)


@aten(aten_.hardswish.default)
def hardswish(ctx: Ctx, x: ir.Value) -> ir.Value:
    """hardswish(Tensor self) -> Tensor"""
    return ctx.op.HardSwish(x) if _has_kernel(x) else ctx.op.Mul(x, _relu6_over_6(ctx, x))


@aten(aten_.hardsigmoid.default)
def hardsigmoid(ctx: Ctx, x: ir.Value) -> ir.Value:
    """hardsigmoid(Tensor self) -> Tensor"""
    return _relu6_over_6(ctx, x)


@aten(aten_.leaky_relu.default)
def leaky_relu(ctx: Ctx, x: ir.Value, negative_slope: float = 0.01) -> ir.Value:
    """leaky_relu(Tensor self, Scalar negative_slope=0.01) -> Tensor"""
    if _has_kernel(x):
        return ctx.op.LeakyRelu(x, alpha=float(negative_slope))
    return ctx.op.Where(ctx.op.Greater(x, ctx.const(0, x.dtype)), x, ctx.op.Mul(x, ctx.const(negative_slope, x.dtype)))


@aten(aten_.elu.default)
def elu(ctx: Ctx, x: ir.Value, alpha: float = 1, scale: float = 1, input_scale: float = 1) -> ir.Value:
    """elu(Tensor self, Scalar alpha=1, Scalar scale=1, Scalar input_scale=1) -> Tensor"""
    if scale == 1 and input_scale == 1 and _has_kernel(x):
        return ctx.op.Elu(x, alpha=float(alpha))
    # scale * (x if x > 0 else alpha * (exp(x * input_scale) - 1)); ONNX Elu has no scales
    scaled = ctx.op.Mul(x, ctx.const(input_scale, like=x))
    negative = ctx.op.Mul(ctx.const(alpha, like=x), ctx.op.Sub(ctx.op.Exp(scaled), ctx.const(1, like=x)))
    out = ctx.op.Where(ctx.op.Greater(x, ctx.const(0, like=x)), x, negative)
    return ctx.op.Mul(out, ctx.const(scale, like=x))


@aten(aten_.selu.default)
def selu(ctx: Ctx, x: ir.Value) -> ir.Value:
    """selu(Tensor self) -> Tensor"""
    if _has_kernel(x):
        return ctx.op.Selu(x, alpha=_SELU_ALPHA, gamma=_SELU_SCALE)
    return elu(ctx, x, _SELU_ALPHA, _SELU_SCALE)


@aten(aten_.celu.default)
def celu(ctx: Ctx, x: ir.Value, alpha: float = 1.0) -> ir.Value:
    """celu(Tensor self, Scalar alpha=1.0) -> Tensor"""
    if x.dtype == ir.DataType.FLOAT:
        return ctx.op.Celu(x, alpha=float(alpha))
    # ONNX Celu is float32-only: max(0, x) + min(0, alpha * (exp(x / alpha) - 1))
    a, zero = ctx.const(alpha, like=x), ctx.const(0, like=x)
    negative = ctx.op.Mul(a, ctx.op.Sub(ctx.op.Exp(ctx.op.Div(x, a)), ctx.const(1, like=x)))
    return ctx.op.Add(ctx.op.Max(x, zero), ctx.op.Min(negative, zero))


@aten(aten_.mish.default)
def mish(ctx: Ctx, x: ir.Value) -> ir.Value:
    """mish(Tensor self) -> Tensor"""
    return ctx.op.Mish(x) if _has_kernel(x) else ctx.op.Mul(x, ctx.op.Tanh(_softplus(ctx, x)))


def _log_sigmoid(ctx: Ctx, x: ir.Value) -> ir.Value:
    # log(sigmoid(x)) = -softplus(-x), stable where sigmoid underflows
    return ctx.op.Neg(_softplus(ctx, ctx.op.Neg(x)))


@aten(aten_.log_sigmoid.default)
def log_sigmoid(ctx: Ctx, x: ir.Value) -> ir.Value:
    """log_sigmoid(Tensor self) -> Tensor"""
    return _log_sigmoid(ctx, x)


@aten(aten_.log_sigmoid_forward.default)
def log_sigmoid_forward(ctx: Ctx, x: ir.Value) -> tuple[ir.Value, ir.Value]:
    """log_sigmoid_forward(Tensor self) -> (Tensor output, Tensor buffer)"""
    # the buffer only serves the backward pass: exp(-|x|) on CPU, empty on CUDA
    if ctx.static_out_shape(1) == [0]:
        return _log_sigmoid(ctx, x), ctx.const(torch.zeros(0), like=x)
    return _log_sigmoid(ctx, x), ctx.op.Exp(ctx.op.Neg(ctx.op.Abs(x)))


@aten(aten_.prelu.default)
def prelu(ctx: Ctx, x: ir.Value, weight: ir.Value) -> ir.Value:
    """prelu(Tensor self, Tensor weight) -> Tensor"""
    r = rank(x)
    # torch applies one slope per channel (dim 1); ONNX broadcasts the slope from the trailing dims
    if r > 2 and rank(weight) == 1:
        weight = ctx.op.Reshape(weight, ctx.const([-1] + [1] * (r - 2), ir.DataType.INT64))
    elif r == 0:  # one slope; as given (shape [1]) it would broadcast the output to rank 1
        weight = ctx.op.Reshape(weight, ctx.const([], ir.DataType.INT64))
    if _has_kernel(x):
        return ctx.op.PRelu(x, weight)
    return ctx.op.Where(ctx.op.Less(x, ctx.const(0, like=x)), ctx.op.Mul(x, ctx.cast(weight, x.dtype)), x)


@aten(aten_.glu.default)
def glu(ctx: Ctx, x: ir.Value, dim: int = -1) -> ir.Value:
    """glu(Tensor self, int dim=-1) -> Tensor"""
    first, second = ctx.op.Split(x, axis=norm_axis(dim, rank(x)), num_outputs=2, _outputs=2)
    return ctx.op.Mul(first, ctx.op.Sigmoid(second))


@aten(aten_.threshold.default)
def threshold(ctx: Ctx, x: ir.Value, threshold: float, value: float) -> ir.Value:
    """threshold(Tensor self, Scalar threshold, Scalar value) -> Tensor"""
    return ctx.op.Where(ctx.op.Greater(x, ctx.const(threshold, like=x)), x, ctx.const(value, like=x))


@aten(aten_.hardshrink.default)
def hardshrink(ctx: Ctx, x: ir.Value, lambd: float = 0.5) -> ir.Value:
    """hardshrink(Tensor self, Scalar lambd=0.5) -> Tensor"""
    keep = ctx.op.Greater(ctx.op.Abs(x), ctx.const(lambd, like=x))
    return ctx.op.Where(keep, x, ctx.const(0, like=x))


@aten(aten_.softshrink.default)
def softshrink(ctx: Ctx, x: ir.Value, lambd: float = 0.5) -> ir.Value:
    """softshrink(Tensor self, Scalar lambd=0.5) -> Tensor"""
    return ctx.op.Shrink(x, lambd=float(lambd), bias=float(lambd))
