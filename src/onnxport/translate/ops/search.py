"""Sorting and searching: topk, sort, median and the other order statistics, searchsorted, bucketize, isin."""

from __future__ import annotations

import math

import onnx_ir as ir

from onnxport.translate.builder import Ctx
from onnxport.translate.ops._common import FLOAT_TYPES, axes, compute_dtype, norm_axis, rank
from onnxport.translate.ops._quickselect import quickselect
from onnxport.translate.registry import aten, ops

aten_ = ops.aten
INT64 = ir.DataType.INT64


def _dim_size(ctx: Ctx, x: ir.Value, d: int) -> ir.Value:
    """``[x.shape[d]]`` computed at run time, as a 1-D int64 value."""
    return ctx.op.Shape(x, start=d, end=d + 1)


def _size(ctx: Ctx, x: ir.Value, d: int) -> int | ir.Value:
    """``x.shape[d]``: an int when static, else a 1-D value."""
    return x.shape[d] if isinstance(x.shape[d], int) else _dim_size(ctx, x, d)


def _flat(ctx: Ctx, x: ir.Value) -> ir.Value:
    """``x`` as 1-D, its shape set so that ``rank`` works."""
    flat = ctx.op.Reshape(x, ctx.const([-1]))
    flat.shape = ir.Shape([math.prod(x.shape) if all(isinstance(s, int) for s in x.shape) else None])
    return flat


def _topk(ctx: Ctx, x: ir.Value, k: int | ir.Value, dim: int, largest: bool) -> tuple[ir.Value, ir.Value]:
    """Sorted TopK; ONNX TopK puts equal elements in index order, which is a stable sort."""
    is_bool = x.dtype == ir.DataType.BOOL
    if is_bool:  # TopK has no bool kernel
        x = ctx.cast(x, ir.DataType.INT32)
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
    return _topk(ctx, x, _size(ctx, x, d) if r else 1, d, descending)


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


def _kth_smallest(ctx: Ctx, x: ir.Value, k: int | ir.Value, d: int, keepdim: bool) -> tuple[ir.Value, ir.Value]:
    """The ``k``-th smallest (1-based) along axis ``d``: the last of the k smallest."""
    values, indices = _topk(ctx, x, k, d, largest=False)
    last = ctx.const([-1] if keepdim else -1)
    return ctx.op.Gather(values, last, axis=d), ctx.op.Gather(indices, last, axis=d)


def _lower_median(ctx: Ctx, x: ir.Value, d: int, keepdim: bool) -> tuple[ir.Value, ir.Value]:
    """The ((n - 1) // 2)-th smallest along axis ``d``: the last of the k = (n - 1) // 2 + 1 smallest."""
    n = x.shape[d]
    if isinstance(n, int):
        k: int | ir.Value = (n - 1) // 2 + 1
    else:
        half = ctx.op.Div(ctx.op.Sub(_dim_size(ctx, x, d), ctx.const([1])), ctx.const([2]))
        k = ctx.op.Add(half, ctx.const([1]))
        k.shape = ir.Shape([1])
    return _kth_smallest(ctx, x, k, d, keepdim)


@aten(aten_.median.default)
def median(ctx: Ctx, x: ir.Value) -> ir.Value:
    """median(Tensor self) -> Tensor"""
    return _lower_median(ctx, _flat(ctx, x), 0, False)[0]


@aten(aten_.median.dim)
def median_dim(ctx: Ctx, x: ir.Value, dim: int, keepdim: bool = False) -> tuple[ir.Value, ir.Value]:
    """median.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)"""
    if rank(x) == 0:
        return x, ctx.const(0)
    return _lower_median(ctx, x, norm_axis(dim, rank(x)), keepdim)


@aten(aten_.kthvalue.default)
def kthvalue(ctx: Ctx, x: ir.Value, k: int, dim: int = -1, keepdim: bool = False) -> tuple[ir.Value, ir.Value]:
    """kthvalue(Tensor self, SymInt k, int dim=-1, bool keepdim=False) -> (Tensor values, Tensor indices)

    The values come from TopK. Among equal values the index torch returns is wherever its quickselect
    leaves them, so when the indices are read that quickselect runs in an ONNX ``Loop`` (O(n^2) per row).
    """
    if rank(x) == 0:
        return x, ctx.const(0)
    d = norm_axis(dim, rank(x))
    if not isinstance(k, int) or 1 not in _used_outputs(ctx):
        return _kth_smallest(ctx, x, k, d, keepdim)
    return quickselect(ctx, x, k - 1, d, keepdim)


def _used_outputs(ctx: Ctx) -> set[int]:
    """Which outputs of the node being translated a later node reads."""
    return {user.args[1] for user in ctx.node.users if len(user.args) > 1 and isinstance(user.args[1], int)
            and user.users}


def _nan_median(ctx: Ctx, x: ir.Value, d: int, keepdim: bool) -> tuple[ir.Value, ir.Value]:
    """The lower median of the non-NaN values along ``d``; NaN (index 0) where all are NaN."""
    if x.dtype not in FLOAT_TYPES:
        return _lower_median(ctx, x, d, keepdim)
    nan = ctx.op.IsNaN(x)
    count = ctx.op.ReduceSum(ctx.op.Cast(ctx.op.Not(nan), to=int(INT64)), axes(ctx, [d]), keepdims=1)
    # NaN sorts last as +inf: the k-th smallest of the first `count` is the wanted one (k = 0 when none)
    filled = ctx.op.Where(nan, ctx.const(float("inf"), like=x), x)
    values, indices = ctx.op.TopK(filled, ctx.sizes([_size(ctx, x, d)]), axis=d, largest=0, sorted=1, _outputs=2)
    k = ctx.op.Div(ctx.op.Sub(count, ctx.const(1)), ctx.const(2))  # truncates: 0 when count is 0
    value = ctx.op.GatherElements(values, k, axis=d)
    value = ctx.op.Where(ctx.op.Equal(count, ctx.const(0)), ctx.const(float("nan"), like=x), value)
    index = ctx.op.GatherElements(indices, k, axis=d)
    if not keepdim:
        value, index = ctx.op.Squeeze(value, axes(ctx, [d])), ctx.op.Squeeze(index, axes(ctx, [d]))
    return value, index


@aten(aten_.nanmedian.default)
def nanmedian(ctx: Ctx, x: ir.Value) -> ir.Value:
    """nanmedian(Tensor self) -> Tensor"""
    return _nan_median(ctx, _flat(ctx, x), 0, False)[0]


@aten(aten_.nanmedian.dim)
def nanmedian_dim(ctx: Ctx, x: ir.Value, dim: int, keepdim: bool = False) -> tuple[ir.Value, ir.Value]:
    """nanmedian.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)"""
    if rank(x) == 0:
        return x, ctx.const(0)
    return _nan_median(ctx, x, norm_axis(dim, rank(x)), keepdim)


@aten(aten_.mode.default)
def mode(ctx: Ctx, x: ir.Value, dim: int = -1, keepdim: bool = False) -> tuple[ir.Value, ir.Value]:
    """mode(Tensor self, int dim=-1, bool keepdim=False) -> (Tensor values, Tensor indices)

    The most frequent value along ``dim`` (the smallest among equally frequent ones) and the index of its
    last occurrence. Counting compares every pair: O(n^2) along ``dim``. torch takes the index from an
    unstable std::sort, which keeps equal values in order only up to 16 elements: past that, where the
    value occurs more than once, torch's index is another of its occurrences.
    """
    r = rank(x)
    if r == 0:
        return x, ctx.const(0)
    d = norm_axis(dim, r)
    n = _size(ctx, x, d)
    ordered = _topk(ctx, x, n, d, largest=False)[0]
    same = ctx.op.Equal(ctx.op.Unsqueeze(ordered, axes(ctx, [d + 1])), ctx.op.Unsqueeze(x, axes(ctx, [d])))
    counts = ctx.op.ReduceSum(ctx.op.Cast(same, to=int(ir.DataType.INT32)), axes(ctx, [d + 1]), keepdims=0)
    first_most = ctx.op.ArgMax(counts, axis=d, keepdims=1)  # the first of the ties: the smallest value
    value = ctx.op.GatherElements(ordered, first_most, axis=d)
    shape = [1] * r
    shape[d] = -1
    positions = ctx.op.Reshape(ctx.op.Range(ctx.const(0), ctx.op.Squeeze(ctx.sizes([n]), axes(ctx, [0])),
                                            ctx.const(1)), ctx.const(shape))
    index = ctx.op.ReduceMax(ctx.op.Where(ctx.op.Equal(x, value), positions, ctx.const(-1)), axes(ctx, [d]),
                             keepdims=1)
    if not keepdim:
        value, index = ctx.op.Squeeze(value, axes(ctx, [d])), ctx.op.Squeeze(index, axes(ctx, [d]))
    return value, index


def _search(ctx: Ctx, sorted_seq: ir.Value, values: ir.Value, right: bool, out_int32: bool,
            sorter: ir.Value | None = None) -> ir.Value:
    """How many elements of each row of ``sorted_seq`` lie before each value: a count of comparisons,
    O(n) per value. torch's binary search steps past ``s`` while ``!(s >= v)`` (``!(s > v)`` for the right
    side), so a NaN value lands after everything."""
    r = rank(sorted_seq)
    if sorter is not None:
        sorted_seq = ctx.op.GatherElements(sorted_seq, ctx.cast(sorter, INT64), axis=r - 1)
    if r > 1:  # rows pair with rows of values: (..., 1, N) against (..., M, 1)
        sorted_seq = ctx.op.Unsqueeze(sorted_seq, axes(ctx, [-2]))
    before = ctx.op.Not((ctx.op.Greater if right else ctx.op.GreaterOrEqual)(
        sorted_seq, ctx.op.Unsqueeze(values, axes(ctx, [-1]))))
    count = ctx.op.ReduceSum(ctx.op.Cast(before, to=int(INT64)), axes(ctx, [-1]), keepdims=0)
    return ctx.cast(count, ir.DataType.INT32) if out_int32 else count


def _common_pair(ctx: Ctx, a: ir.Value | float, b: ir.Value | float) -> tuple[ir.Value, ir.Value]:
    """The node's arguments 0 and 1 in the dtype torch compares them in."""
    dtype = compute_dtype(ctx, 0, 1)
    return ctx.as_value(a, dtype=dtype), ctx.as_value(b, dtype=dtype)


@aten(aten_.searchsorted.Tensor, aten_.searchsorted.Scalar)
def searchsorted(ctx: Ctx, sorted_seq: ir.Value, x: ir.Value | float, *, out_int32: bool = False,
                 right: bool = False, side: str | None = None, sorter: ir.Value | None = None) -> ir.Value:
    """searchsorted.Tensor(Tensor sorted_sequence, Tensor self, *, bool out_int32=False, bool right=False, str? side=None, Tensor? sorter=None) -> Tensor"""
    sorted_seq, x = _common_pair(ctx, sorted_seq, x)
    return _search(ctx, sorted_seq, x, right or side == "right", out_int32, sorter)


@aten(aten_.bucketize.Tensor, aten_.bucketize.Scalar)
def bucketize(ctx: Ctx, x: ir.Value | float, boundaries: ir.Value, *, out_int32: bool = False,
              right: bool = False) -> ir.Value:
    """bucketize.Tensor(Tensor self, Tensor boundaries, *, bool out_int32=False, bool right=False) -> Tensor"""
    x, boundaries = _common_pair(ctx, x, boundaries)
    return _search(ctx, boundaries, x, right, out_int32)


@aten(aten_.isin.Tensor_Tensor, aten_.isin.Tensor_Scalar, aten_.isin.Scalar_Tensor)
def isin(ctx: Ctx, elements: ir.Value | float, test: ir.Value | float, *, assume_unique: bool = False,
         invert: bool = False) -> ir.Value:
    """isin.Tensor_Tensor(Tensor elements, Tensor test_elements, *, bool assume_unique=False, bool invert=False) -> Tensor"""
    elements, test = _common_pair(ctx, elements, test)
    # every element against every test element: O(n * m), with no sort (NaN is in nothing, as in torch)
    same = ctx.op.Equal(ctx.op.Unsqueeze(elements, axes(ctx, [-1])), ctx.op.Reshape(test, ctx.const([-1])))
    hits = ctx.op.ReduceSum(ctx.op.Cast(same, to=int(INT64)), axes(ctx, [-1]), keepdims=0)
    found = ctx.op.Greater(hits, ctx.const(0))
    return ctx.op.Not(found) if invert else found
