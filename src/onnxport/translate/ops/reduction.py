"""Reductions, softmax and scans (sorting and order statistics live in search.py)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import onnx_ir as ir
import torch

from onnxport.translate.builder import Ctx
from onnxport.translate.ops._common import FLOAT_TYPES, axes, norm_axis, rank
from onnxport.translate.registry import aten, ops

aten_ = ops.aten

_LOW_PRECISION = frozenset({ir.DataType.FLOAT16, ir.DataType.BFLOAT16})


def _dims(x: ir.Value, dim: int | Sequence[int] | None) -> list[int]:
    """Normalised reduction axes; ``None`` and ``[]`` mean every axis (torch's convention)."""
    r = rank(x)
    if dim is None or (not isinstance(dim, int) and len(dim) == 0):
        return list(range(r))
    return [norm_axis(d, r) for d in ([dim] if isinstance(dim, int) else dim)]


def _reduce(ctx: Ctx, op: str, x: ir.Value, dim: int | Sequence[int] | None, keepdim: bool = False) -> ir.Value:
    """``op`` (ReduceSum, ReduceMax, ...) over ``dim``; opset >= 18 takes the axes as an input."""
    dims = _dims(x, dim)
    # Reducing every axis needs no axes input, which also keeps rank-0 inputs valid.
    ax = axes(ctx, dims) if dims and len(dims) < rank(x) else None
    return getattr(ctx.op, op)(x, ax, keepdims=int(keepdim))


def _same_shape(out: ir.Value, like: ir.Value) -> ir.Value:
    """Give an elementwise result the shape of its input (built values carry none) so rank() works."""
    if out is not like and out.shape is None:
        out.shape = like.shape
    return out


def _cast(ctx: Ctx, x: ir.Value, dtype: ir.DataType) -> ir.Value:
    return _same_shape(ctx.cast(x, dtype), x)


def _upcast(ctx: Ctx, x: ir.Value) -> ir.Value:
    """float16/bfloat16 to float32, as torch accumulates them in float32."""
    return _cast(ctx, x, ir.DataType.FLOAT) if x.dtype in _LOW_PRECISION else x


@aten(aten_.sum.default, aten_.sum.dim_IntList)
def sum_(
    ctx: Ctx, x: ir.Value, dim: list[int] | None = None, keepdim: bool = False, *, dtype: torch.dtype | None = None
) -> ir.Value:
    """sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"""
    return _reduce(ctx, "ReduceSum", _cast(ctx, x, ctx.out_dtype()), dim, keepdim)


@aten(aten_.mean.default, aten_.mean.dim)
def mean(
    ctx: Ctx, x: ir.Value, dim: list[int] | None = None, keepdim: bool = False, *, dtype: torch.dtype | None = None
) -> ir.Value:
    """mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"""
    x = _cast(ctx, x, ctx.out_dtype())
    return _empty_mean(ctx, x, _dims(x, dim)) or _reduce(ctx, "ReduceMean", x, dim, keepdim)


def _empty_mean(ctx: Ctx, x: ir.Value, dims: list[int]) -> ir.Value | None:
    """NaN where a mean reduces over no element, as torch gives (onnxruntime's ReduceMean gives 0); None unless
    that is known at export. A symbolic count keeps ReduceMean, which onnxruntime's fusions look for."""
    shape = ctx.static_out_shape()
    if shape is None or rank(x) == 0 or _count(ctx, x, dims, x) != 0:
        return None
    return ctx.const(np.full(shape, np.nan), x.dtype)


@aten(aten_.prod.default)
def prod(ctx: Ctx, x: ir.Value, *, dtype: torch.dtype | None = None) -> ir.Value:
    """prod(Tensor self, *, ScalarType? dtype=None) -> Tensor"""
    return _reduce(ctx, "ReduceProd", _cast(ctx, x, ctx.out_dtype()), None)


@aten(aten_.prod.dim_int)
def prod_dim(ctx: Ctx, x: ir.Value, dim: int, keepdim: bool = False, *, dtype: torch.dtype | None = None) -> ir.Value:
    """prod.dim_int(Tensor self, int dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"""
    return _reduce(ctx, "ReduceProd", _cast(ctx, x, ctx.out_dtype()), dim, keepdim)


@aten(aten_.amax.default)
def amax(ctx: Ctx, x: ir.Value, dim: list[int] = (), keepdim: bool = False) -> ir.Value:
    """amax(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor"""
    return _minmax(ctx, "ReduceMax", x, dim, keepdim)


@aten(aten_.amin.default)
def amin(ctx: Ctx, x: ir.Value, dim: list[int] = (), keepdim: bool = False) -> ir.Value:
    """amin(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor"""
    return _minmax(ctx, "ReduceMin", x, dim, keepdim)


@aten(aten_.max.default)
def max_(ctx: Ctx, x: ir.Value) -> ir.Value:
    """max(Tensor self) -> Tensor"""
    return _minmax(ctx, "ReduceMax", x, None)


@aten(aten_.min.default)
def min_(ctx: Ctx, x: ir.Value) -> ir.Value:
    """min(Tensor self) -> Tensor"""
    return _minmax(ctx, "ReduceMin", x, None)


def _minmax(ctx: Ctx, op: str, x: ir.Value, dim: int | Sequence[int] | None, keepdim: bool = False) -> ir.Value:
    # ReduceMax/Min accept bool only from opset 20.
    if x.dtype == ir.DataType.BOOL and ctx.opset < 20:
        return ctx.cast(_reduce(ctx, op, _cast(ctx, x, ir.DataType.INT32), dim, keepdim), ir.DataType.BOOL)
    return _reduce(ctx, op, x, dim, keepdim)


@aten(aten_.aminmax.default)
def aminmax(ctx: Ctx, x: ir.Value, *, dim: int | None = None, keepdim: bool = False) -> tuple[ir.Value, ir.Value]:
    """aminmax(Tensor self, *, int? dim=None, bool keepdim=False) -> (Tensor min, Tensor max)"""
    return _minmax(ctx, "ReduceMin", x, dim, keepdim), _minmax(ctx, "ReduceMax", x, dim, keepdim)


def _arg(ctx: Ctx, op: str, x: ir.Value, dim: int | None, keepdim: bool) -> ir.Value:
    if x.dtype == ir.DataType.BOOL:  # ArgMax/ArgMin have no bool kernel
        x = _cast(ctx, x, ir.DataType.INT32)
    r = rank(x)
    if dim is None or r == 0:
        # torch flattens; with keepdim the result keeps the rank as all-ones dims.
        flat = getattr(ctx.op, op)(ctx.op.Reshape(x, ctx.const([-1])), axis=0, keepdims=0)
        return ctx.op.Reshape(flat, ctx.const([1] * r)) if keepdim and r else flat
    return getattr(ctx.op, op)(x, axis=norm_axis(dim, r), keepdims=int(keepdim))


@aten(aten_.argmax.default)
def argmax(ctx: Ctx, x: ir.Value, dim: int | None = None, keepdim: bool = False) -> ir.Value:
    """argmax(Tensor self, int? dim=None, bool keepdim=False) -> Tensor"""
    return _arg(ctx, "ArgMax", x, dim, keepdim)


@aten(aten_.argmin.default)
def argmin(ctx: Ctx, x: ir.Value, dim: int | None = None, keepdim: bool = False) -> ir.Value:
    """argmin(Tensor self, int? dim=None, bool keepdim=False) -> Tensor"""
    return _arg(ctx, "ArgMin", x, dim, keepdim)


@aten(aten_.max.dim)
def max_dim(ctx: Ctx, x: ir.Value, dim: int, keepdim: bool = False) -> tuple[ir.Value, ir.Value]:
    """max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)"""
    return _minmax(ctx, "ReduceMax", x, dim, keepdim), _arg(ctx, "ArgMax", x, dim, keepdim)


@aten(aten_.min.dim)
def min_dim(ctx: Ctx, x: ir.Value, dim: int, keepdim: bool = False) -> tuple[ir.Value, ir.Value]:
    """min.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)"""
    return _minmax(ctx, "ReduceMin", x, dim, keepdim), _arg(ctx, "ArgMin", x, dim, keepdim)


def _count(ctx: Ctx, x: ir.Value, dims: list[int], like: ir.Value) -> ir.Value | int:
    """How many elements each reduction over ``dims`` sees: an int when static, else a value."""
    sizes = [x.shape[d] for d in dims]
    if all(isinstance(s, int) for s in sizes):
        return math.prod(sizes)
    picked = ctx.op.Gather(ctx.op.Shape(x), axes(ctx, dims), axis=0)
    return ctx.op.CastLike(ctx.op.ReduceProd(picked, keepdims=0), like)


def _moments(
    ctx: Ctx, x: ir.Value, dim: Sequence[int] | None, correction: float, keepdim: bool
) -> ir.Value | tuple[ir.Value, ir.Value]:
    """var/std/var_mean/std_mean (picked by the node's op): squared deviations over ``N - correction``."""
    kind = ctx.node.target.overloadpacket.__name__
    dims = _dims(x, dim)
    xf = _upcast(ctx, x)
    ax = axes(ctx, dims) if dims else None
    mean_k = ctx.op.ReduceMean(xf, ax, keepdims=1)
    diff = ctx.op.Sub(xf, mean_k)
    sq_sum = ctx.op.ReduceSum(ctx.op.Mul(diff, diff), ax, keepdims=int(keepdim))
    n = _count(ctx, x, dims, xf)
    if isinstance(n, int):  # torch divides by max(0, N - correction)
        denom = ctx.const(float(n - correction if n > correction else 0), like=xf)
    else:
        denom = ctx.op.Max(ctx.op.Sub(n, ctx.const(correction, like=xf)), ctx.const(0.0, like=xf))
    out = ctx.op.Div(sq_sum, denom)
    if kind.startswith("std"):
        out = ctx.op.Sqrt(out)
    out = ctx.cast(out, ctx.out_dtype(0))
    if not kind.endswith("_mean"):
        return out
    mean_out = mean_k if keepdim or ax is None else ctx.op.Squeeze(mean_k, ax)
    if rank(x) and _count(ctx, x, dims, xf) == 0:  # torch's mean of nothing is NaN; onnxruntime's is 0
        mean_out = ctx.op.Add(mean_out, ctx.const(float("nan"), like=mean_out))
    return out, ctx.cast(mean_out, ctx.out_dtype(1))


@aten(aten_.var.default, aten_.std.default, aten_.var_mean.default, aten_.std_mean.default)
def var(ctx: Ctx, x: ir.Value, unbiased: bool = True) -> ir.Value | tuple[ir.Value, ir.Value]:
    """var(Tensor self, bool unbiased=True) -> Tensor (also std, var_mean, std_mean)"""
    return _moments(ctx, x, None, int(unbiased), False)


@aten(aten_.var.dim, aten_.std.dim, aten_.var_mean.dim, aten_.std_mean.dim)
def var_dim(
    ctx: Ctx, x: ir.Value, dim: list[int] | None, unbiased: bool = True, keepdim: bool = False
) -> ir.Value | tuple[ir.Value, ir.Value]:
    """var.dim(Tensor self, int[1]? dim, bool unbiased=True, bool keepdim=False) -> Tensor (also std, ...)"""
    return _moments(ctx, x, dim, int(unbiased), keepdim)


@aten(aten_.var.correction, aten_.std.correction, aten_.var_mean.correction, aten_.std_mean.correction)
def var_correction(
    ctx: Ctx, x: ir.Value, dim: list[int] | None = None, *, correction: float | None = None, keepdim: bool = False
) -> ir.Value | tuple[ir.Value, ir.Value]:
    """var.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> Tensor"""
    return _moments(ctx, x, dim, 1 if correction is None else correction, keepdim)


def _any_all(ctx: Ctx, op: str, x: ir.Value, dim: int | Sequence[int] | None, keepdim: bool) -> ir.Value:
    b = _cast(ctx, x, ir.DataType.BOOL)
    if dim is not None and not isinstance(dim, int) and len(dim) == 0:
        return ctx.cast(b, ctx.out_dtype())  # any.dims with dim=[] reduces nothing in torch
    # Counted: any is "some true", all is "no false". A sum over no element is 0 in every onnxruntime (any:
    # false, all: true, as torch), where an empty bool ReduceMax is refused and an empty ReduceMin is 0 or an
    # error depending on the release.
    if op == "ReduceMin":
        b = ctx.op.Not(b)
    count = _reduce(ctx, "ReduceSum", _cast(ctx, b, ir.DataType.INT64), dim, keepdim)
    hit = ctx.op.Greater(count, ctx.const(0, like=count))
    return ctx.cast(ctx.op.Not(hit) if op == "ReduceMin" else hit, ctx.out_dtype())


@aten(aten_.any.default, aten_.any.dim, aten_.any.dims, aten_._is_any_true.default)
def any_(ctx: Ctx, x: ir.Value, dim: int | list[int] | None = None, keepdim: bool = False) -> ir.Value:
    """any.dims(Tensor self, int[]? dim=None, bool keepdim=False) -> Tensor

    Also ``_is_any_true(Tensor self) -> Tensor``, the same on a bool tensor (what ``torch._check`` on a tensor
    and ``torch.is_nonzero``-style guards trace to)."""
    return _any_all(ctx, "ReduceMax", x, dim, keepdim)


@aten(aten_.all.default, aten_.all.dim, aten_.all.dims, aten_._is_all_true.default)
def all_(ctx: Ctx, x: ir.Value, dim: int | list[int] | None = None, keepdim: bool = False) -> ir.Value:
    """all.dims(Tensor self, int[]? dim=None, bool keepdim=False) -> Tensor

    Also ``_is_all_true(Tensor self) -> Tensor``, the same on a bool tensor."""
    return _any_all(ctx, "ReduceMin", x, dim, keepdim)


@aten(aten_.logsumexp.default)
def logsumexp(ctx: Ctx, x: ir.Value, dim: list[int], keepdim: bool = False) -> ir.Value:
    """logsumexp(Tensor self, int[1] dim, bool keepdim=False) -> Tensor

    Spelled out as ``m + log(sum(exp(x - m)))`` with ``m`` the max (0 where it is infinite, as torch
    does), so the result does not depend on how a runtime implements ReduceLogSumExp: one runtime's
    kernel overflowed to inf on ``logsumexp(1000 * x)``.
    """
    xf = _upcast(ctx, _cast(ctx, x, ctx.out_dtype()))
    peak = _reduce(ctx, "ReduceMax", xf, dim, keepdim=True)
    peak = ctx.op.Where(ctx.op.IsInf(peak), ctx.const(0.0, like=xf), peak)
    total = _reduce(ctx, "ReduceSum", _same_shape(ctx.op.Exp(ctx.op.Sub(xf, peak)), xf), dim, keepdim=True)
    out = ctx.op.Add(ctx.op.Log(total), peak)
    if not keepdim and rank(xf):  # a rank-0 input stays rank 0 (its dim 0 or -1 is no axis)
        dims = _dims(xf, dim)
        out = ctx.op.Squeeze(out, axes(ctx, dims)) if dims else out
    return ctx.cast(out, ctx.out_dtype())


@aten(aten_.linalg_vector_norm.default)
def linalg_vector_norm(
    ctx: Ctx,
    x: ir.Value,
    ord: float = 2,
    dim: list[int] | None = None,
    keepdim: bool = False,
    *,
    dtype: torch.dtype | None = None,
) -> ir.Value:
    """linalg_vector_norm(Tensor self, Scalar ord=2, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"""
    xf = _upcast(ctx, _cast(ctx, x, ctx.out_dtype()))
    if ord == 2:
        out = _reduce(ctx, "ReduceL2", xf, dim, keepdim)
    elif ord == 1:
        out = _reduce(ctx, "ReduceL1", xf, dim, keepdim)
    elif math.isinf(ord):
        out = _reduce(ctx, "ReduceMax" if ord > 0 else "ReduceMin", _same_shape(ctx.op.Abs(xf), xf), dim, keepdim)
    elif ord == 0:
        nonzero = _same_shape(ctx.op.CastLike(ctx.op.Not(ctx.op.Equal(xf, ctx.const(0.0, like=xf))), xf), xf)
        out = _reduce(ctx, "ReduceSum", nonzero, dim, keepdim)
    else:
        powered = _same_shape(ctx.op.Pow(ctx.op.Abs(xf), ctx.const(float(ord), like=xf)), xf)
        out = ctx.op.Pow(_reduce(ctx, "ReduceSum", powered, dim, keepdim), ctx.const(1.0 / ord, like=xf))
    return ctx.cast(out, ctx.out_dtype())


@aten(aten_.softmax.int, aten_._softmax.default)
def softmax(ctx: Ctx, x: ir.Value, dim: int, dtype: torch.dtype | bool | None = None) -> ir.Value:
    """softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor (also _softmax(self, dim, half_to_float))"""
    return _softmax(ctx, "Softmax", x, dim)


@aten(aten_.log_softmax.int, aten_._log_softmax.default)
def log_softmax(ctx: Ctx, x: ir.Value, dim: int, dtype: torch.dtype | bool | None = None) -> ir.Value:
    """log_softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor (also _log_softmax)

    Spelled out as ``(x - max) - log(sum(exp(x - max)))``, torch's own formula, in float32 for
    half types, rather than left to a runtime's LogSoftmax kernel.
    """
    x = _cast(ctx, x, ctx.out_dtype())
    if rank(x) == 0:  # a single element: log(1)
        return ctx.op.Sub(x, x)
    xf = _upcast(ctx, x)
    ax = axes(ctx, [norm_axis(dim, rank(xf))])
    shifted = ctx.op.Sub(xf, ctx.op.ReduceMax(xf, ax, keepdims=1))
    out = ctx.op.Sub(shifted, ctx.op.Log(ctx.op.ReduceSum(ctx.op.Exp(shifted), ax, keepdims=1)))
    return ctx.cast(out, x.dtype)


def _softmax(ctx: Ctx, op: str, x: ir.Value, dim: int) -> ir.Value:
    # The output dtype already encodes `dtype=` and `half_to_float`: the input is cast first, like torch.
    x = _cast(ctx, x, ctx.out_dtype())
    if rank(x) == 0:  # ONNX Softmax needs an axis to work on
        zero = ctx.const([0])
        return ctx.op.Squeeze(getattr(ctx.op, op)(ctx.op.Unsqueeze(x, zero), axis=0), zero)
    return getattr(ctx.op, op)(x, axis=norm_axis(dim, rank(x)))


@aten(aten_.cumsum.default)
def cumsum(ctx: Ctx, x: ir.Value, dim: int, *, dtype: torch.dtype | None = None) -> ir.Value:
    """cumsum(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor"""
    x = _cast(ctx, x, ctx.out_dtype())
    if rank(x) == 0:
        return x
    return ctx.op.CumSum(x, ctx.const(norm_axis(dim, rank(x))))


@aten(aten_.cumprod.default)
def cumprod(ctx: Ctx, x: ir.Value, dim: int, *, dtype: torch.dtype | None = None) -> ir.Value:
    """cumprod(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor"""
    # ONNX has no CumProd and exp(cumsum(log)) breaks on zeros and signs: instead spread the axis into
    # an (i, j) square, keep x[j] where j <= i (ones elsewhere) and ReduceProd over j. O(n^2) but exact.
    x = _cast(ctx, x, ctx.out_dtype())
    r = rank(x)
    if r == 0:
        return x
    d = norm_axis(dim, r)
    n = x.shape[d] if isinstance(x.shape[d], int) else _dim_size(ctx, x, d)
    ones = ctx.op.Expand(ctx.const(True), ctx.sizes([n, n]))
    keep = ctx.op.Trilu(ones, upper=0)
    if r - d - 1:
        keep = ctx.op.Unsqueeze(keep, axes(ctx, list(range(2, r - d + 1))))
    spread = ctx.op.Where(keep, ctx.op.Unsqueeze(x, axes(ctx, [d])), ctx.const(1, like=x))
    return ctx.op.ReduceProd(spread, axes(ctx, [d + 1]), keepdims=0)


def _dim_size(ctx: Ctx, x: ir.Value, d: int) -> ir.Value:
    """``[x.shape[d]]`` computed at run time, as a 1-D int64 value."""
    size = ctx.op.Shape(x, start=d, end=d + 1)
    size.shape = ir.Shape([1])
    return size


def _cumulative_extreme(ctx: Ctx, x: ir.Value, dim: int, largest: bool) -> tuple[ir.Value, ir.Value]:
    """cummax/cummin as cumprod does it: the (i, j <= i) square reduced over j. The index is the last j
    holding the running extreme (torch moves it on ties, and to each NaN once one is seen)."""
    r = rank(x)
    if r == 0:
        return x, ctx.const(0)
    is_bool = x.dtype == ir.DataType.BOOL
    xs = _cast(ctx, x, ir.DataType.INT32) if is_bool else x
    d = norm_axis(dim, r)
    n = xs.shape[d] if isinstance(xs.shape[d], int) else _dim_size(ctx, xs, d)
    keep = ctx.op.Trilu(ctx.op.Expand(ctx.const(True), ctx.sizes([n, n])), upper=0)
    if r - d - 1:
        keep = ctx.op.Unsqueeze(keep, axes(ctx, list(range(2, r - d + 1))))
    xj = ctx.op.Unsqueeze(xs, axes(ctx, [d]))
    floating = xs.dtype in FLOAT_TYPES
    if floating:
        identity = float("-inf") if largest else float("inf")
    else:
        info = np.iinfo(xs.dtype.numpy())
        identity = int(info.min) if largest else int(info.max)
    spread = ctx.op.Where(keep, xj, ctx.const(identity, like=xs))
    values = getattr(ctx.op, "ReduceMax" if largest else "ReduceMin")(spread, axes(ctx, [d + 1]), keepdims=0)
    if floating:  # a NaN wins from where it appears on; runtimes differ on NaN in ReduceMax
        nan_j = ctx.op.And(keep, ctx.op.IsNaN(xj))
        seen = ctx.op.ReduceMax(ctx.op.Cast(nan_j, to=int(ir.DataType.INT32)), axes(ctx, [d + 1]), keepdims=0)
        values = ctx.op.Where(ctx.op.Cast(seen, to=int(ir.DataType.BOOL)), ctx.const(float("nan"), like=xs), values)
    hit = ctx.op.Equal(xj, ctx.op.Unsqueeze(values, axes(ctx, [d + 1])))
    if floating:
        hit = ctx.op.Or(hit, ctx.op.And(nan_j, ctx.op.Unsqueeze(ctx.op.IsNaN(values), axes(ctx, [d + 1]))))
    shape = [1] * (r + 1)
    shape[d + 1] = -1
    j = ctx.op.Reshape(ctx.op.Range(ctx.const(0), ctx.op.Squeeze(ctx.sizes([n]), axes(ctx, [0])), ctx.const(1)),
                       ctx.const(shape))
    index = ctx.op.ReduceMax(ctx.op.Where(ctx.op.And(keep, hit), j, ctx.const(-1)), axes(ctx, [d + 1]), keepdims=0)
    return (ctx.cast(values, ir.DataType.BOOL) if is_bool else values), index


@aten(aten_.cummax.default)
def cummax(ctx: Ctx, x: ir.Value, dim: int) -> tuple[ir.Value, ir.Value]:
    """cummax(Tensor self, int dim) -> (Tensor values, Tensor indices)"""
    return _cumulative_extreme(ctx, x, dim, largest=True)


@aten(aten_.cummin.default)
def cummin(ctx: Ctx, x: ir.Value, dim: int) -> tuple[ir.Value, ir.Value]:
    """cummin(Tensor self, int dim) -> (Tensor values, Tensor indices)"""
    return _cumulative_extreme(ctx, x, dim, largest=False)
