"""Reductions, softmax, scans and sorting."""

from __future__ import annotations

import math
from collections.abc import Sequence

import onnx_ir as ir
import torch

from onnxport.translate.builder import Ctx
from onnxport.translate.ops._common import axes, norm_axis, rank
from onnxport.translate.registry import aten

aten_ = torch.ops.aten

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
    return _reduce(ctx, "ReduceMean", _cast(ctx, x, ctx.out_dtype()), dim, keepdim)


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
    return out, ctx.cast(mean_out, ctx.out_dtype(1))


_VAR_FAMILY = ("var", "std", "var_mean", "std_mean")


@aten(*(getattr(aten_, k).default for k in _VAR_FAMILY))
def var(ctx: Ctx, x: ir.Value, unbiased: bool = True) -> ir.Value | tuple[ir.Value, ir.Value]:
    """var(Tensor self, bool unbiased=True) -> Tensor (also std, var_mean, std_mean)"""
    return _moments(ctx, x, None, int(unbiased), False)


@aten(*(getattr(aten_, k).dim for k in _VAR_FAMILY))
def var_dim(
    ctx: Ctx, x: ir.Value, dim: list[int] | None, unbiased: bool = True, keepdim: bool = False
) -> ir.Value | tuple[ir.Value, ir.Value]:
    """var.dim(Tensor self, int[1]? dim, bool unbiased=True, bool keepdim=False) -> Tensor (also std, ...)"""
    return _moments(ctx, x, dim, int(unbiased), keepdim)


@aten(*(getattr(aten_, k).correction for k in _VAR_FAMILY))
def var_correction(
    ctx: Ctx, x: ir.Value, dim: list[int] | None = None, *, correction: float | None = None, keepdim: bool = False
) -> ir.Value | tuple[ir.Value, ir.Value]:
    """var.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> Tensor"""
    return _moments(ctx, x, dim, 1 if correction is None else correction, keepdim)


def _any_all(ctx: Ctx, op: str, x: ir.Value, dim: int | Sequence[int] | None, keepdim: bool) -> ir.Value:
    b = _cast(ctx, x, ir.DataType.BOOL)
    if dim is not None and not isinstance(dim, int) and len(dim) == 0:
        return ctx.cast(b, ctx.out_dtype())  # any.dims with dim=[] reduces nothing in torch
    return ctx.cast(_minmax(ctx, op, b, dim, keepdim), ctx.out_dtype())


@aten(aten_.any.default, aten_.any.dim, aten_.any.dims)
def any_(ctx: Ctx, x: ir.Value, dim: int | list[int] | None = None, keepdim: bool = False) -> ir.Value:
    """any.dims(Tensor self, int[]? dim=None, bool keepdim=False) -> Tensor"""
    return _any_all(ctx, "ReduceMax", x, dim, keepdim)


@aten(aten_.all.default, aten_.all.dim, aten_.all.dims)
def all_(ctx: Ctx, x: ir.Value, dim: int | list[int] | None = None, keepdim: bool = False) -> ir.Value:
    """all.dims(Tensor self, int[]? dim=None, bool keepdim=False) -> Tensor"""
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


def _topk(ctx: Ctx, x: ir.Value, k: int | ir.Value, dim: int, largest: bool) -> tuple[ir.Value, ir.Value]:
    """Sorted TopK; ONNX TopK puts equal elements in index order, which is a stable sort."""
    is_bool = x.dtype == ir.DataType.BOOL
    if is_bool:  # TopK has no bool kernel
        x = _cast(ctx, x, ir.DataType.INT32)
    r = rank(x)
    if r == 0:
        return ctx.cast(x, ir.DataType.BOOL) if is_bool else x, ctx.const(0)
    values, indices = ctx.op.TopK(x, ctx.sizes([k]), axis=norm_axis(dim, r), largest=int(largest), sorted=1, _outputs=2)
    return (ctx.cast(values, ir.DataType.BOOL) if is_bool else values), indices


@aten(aten_.topk.default)
def topk(
    ctx: Ctx, x: ir.Value, k: int | ir.Value, dim: int = -1, largest: bool = True, sorted: bool = True
) -> tuple[ir.Value, ir.Value]:
    """topk(Tensor self, SymInt k, int dim=-1, bool largest=True, bool sorted=True) -> (Tensor values, Tensor indices)"""
    # sorted=False leaves the order to the implementation; a sorted result is one valid order.
    return _topk(ctx, x, k, dim, largest)


def _sort(ctx: Ctx, x: ir.Value, dim: int, descending: bool) -> tuple[ir.Value, ir.Value]:
    r = rank(x)
    d = norm_axis(dim, r)
    n = x.shape[d] if r and isinstance(x.shape[d], int) else (_dim_size(ctx, x, d) if r else 1)
    return _topk(ctx, x, n, d, descending)


@aten(aten_.sort.default)
def sort(ctx: Ctx, x: ir.Value, dim: int = -1, descending: bool = False) -> tuple[ir.Value, ir.Value]:
    """sort(Tensor self, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)"""
    return _sort(ctx, x, dim, descending)


@aten(aten_.sort.stable)
def sort_stable(
    ctx: Ctx, x: ir.Value, *, stable: bool | None, dim: int = -1, descending: bool = False
) -> tuple[ir.Value, ir.Value]:
    """sort.stable(Tensor self, *, bool? stable, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)"""
    return _sort(ctx, x, dim, descending)


@aten(aten_.argsort.default)
def argsort(ctx: Ctx, x: ir.Value, dim: int = -1, descending: bool = False) -> ir.Value:
    """argsort(Tensor self, int dim=-1, bool descending=False) -> Tensor"""
    return _sort(ctx, x, dim, descending)[1]


@aten(aten_.argsort.stable)
def argsort_stable(ctx: Ctx, x: ir.Value, *, stable: bool, dim: int = -1, descending: bool = False) -> ir.Value:
    """argsort.stable(Tensor self, *, bool stable, int dim=-1, bool descending=False) -> Tensor"""
    return _sort(ctx, x, dim, descending)[1]


def _lower_median(ctx: Ctx, x: ir.Value, d: int, keepdim: bool) -> tuple[ir.Value, ir.Value]:
    """The ((n - 1) // 2)-th smallest along axis ``d``: the last of the k = (n - 1) // 2 + 1 smallest."""
    n = x.shape[d]
    if isinstance(n, int):
        k: int | ir.Value = (n - 1) // 2 + 1
    else:
        half = ctx.op.Div(ctx.op.Sub(_dim_size(ctx, x, d), ctx.const([1])), ctx.const([2]))
        k = ctx.op.Add(half, ctx.const([1]))
        k.shape = ir.Shape([1])
    values, indices = _topk(ctx, x, k, d, largest=False)
    last = ctx.const([-1] if keepdim else -1)
    return ctx.op.Gather(values, last, axis=d), ctx.op.Gather(indices, last, axis=d)


@aten(aten_.median.default)
def median(ctx: Ctx, x: ir.Value) -> ir.Value:
    """median(Tensor self) -> Tensor"""
    flat = ctx.op.Reshape(x, ctx.const([-1]))
    flat.shape = ir.Shape([math.prod(x.shape) if all(isinstance(s, int) for s in x.shape) else None])
    return _lower_median(ctx, flat, 0, False)[0]


@aten(aten_.median.dim)
def median_dim(ctx: Ctx, x: ir.Value, dim: int, keepdim: bool = False) -> tuple[ir.Value, ir.Value]:
    """median.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)"""
    if rank(x) == 0:
        return x, ctx.const(0)
    return _lower_median(ctx, x, norm_axis(dim, rank(x)), keepdim)
