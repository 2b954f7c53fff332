"""Histograms: histc, histogram, histogramdd, binned the way torch's CPU kernels bin them.

Each element is compared with every bin edge (O(n * bins)) and the counts or weights are summed with a
ScatterElements ``add``. Bin edges torch builds with ``linspace`` are rebuilt with its arithmetic, so that
elements on an edge land in the same bin.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import onnx_ir as ir
import torch

from onnxport.translate.builder import Ctx
from onnxport.translate.registry import aten, ops

aten_ = ops.aten
INT64, DOUBLE = ir.DataType.INT64, ir.DataType.DOUBLE
_HALF = (ir.DataType.FLOAT16, ir.DataType.BFLOAT16)


def _linspace(ctx: Ctx, lo: ir.Value, hi: ir.Value, bins: int) -> ir.Value:
    """torch's CPU linspace of ``bins + 1`` points from the scalars ``lo`` to ``hi``: ``lo + step * i`` for
    the first half and ``hi - step * (bins - i)`` for the rest, each a fused multiply-add (computed in
    float64 here, rounded once), with ``step`` rounded to the element type first."""
    step = ctx.op.Div(ctx.op.Sub(hi, lo), ctx.const(float(bins), like=lo))
    i = np.arange(bins + 1, dtype=np.float64)
    step64 = ctx.cast(step, DOUBLE)
    up = ctx.op.Add(ctx.cast(lo, DOUBLE), ctx.op.Mul(step64, ctx.const(i, DOUBLE)))
    down = ctx.op.Sub(ctx.cast(hi, DOUBLE), ctx.op.Mul(step64, ctx.const(bins - i, DOUBLE)))
    return ctx.cast(ctx.op.Where(ctx.const(i < (bins + 1) // 2), up, down), lo.dtype)


def _outer_edges(ctx: Ctx, column: ir.Value, numel: int | None, widen: float) -> tuple[ir.Value, ir.Value]:
    """The data's min and max (0 and 1 for no data), moved ``widen`` apart where they are equal, in
    float64 as torch picks them, then rounded to the element type."""
    if numel == 0:
        return ctx.const(0.0, like=column), ctx.const(1.0, like=column)
    lo = ctx.cast(ctx.op.ReduceMin(column, keepdims=0), DOUBLE)
    hi = ctx.cast(ctx.op.ReduceMax(column, keepdims=0), DOUBLE)
    same = ctx.op.Equal(lo, hi)
    lo = ctx.op.Where(same, ctx.op.Sub(lo, ctx.const(widen, DOUBLE)), lo)
    hi = ctx.op.Where(same, ctx.op.Add(hi, ctx.const(widen, DOUBLE)), hi)
    return ctx.cast(lo, column.dtype), ctx.cast(hi, column.dtype)


def _const_edges(ctx: Ctx, lo: float, hi: float, bins: int, like: ir.Value) -> ir.Value:
    """Edges from a constant range: torch's own linspace, at export time."""
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    dtype = torch.float64 if like.dtype == DOUBLE else torch.float32
    return ctx.const(torch.linspace(lo, hi, bins + 1, dtype=dtype), like=like)


def _bin_of(ctx: Ctx, column: ir.Value, edges: ir.Value, bins: int | ir.Value) -> tuple[ir.Value, ir.Value]:
    """Each element's bin (``upper_bound`` over the edges, less one; the last bin keeps its right edge)
    and whether it lies within the edges at all (NaN does not)."""
    first = ctx.op.Gather(edges, ctx.const(0), axis=0)
    last = ctx.op.Gather(edges, ctx.const(-1), axis=0)
    inside = ctx.op.And(ctx.op.GreaterOrEqual(column, first), ctx.op.LessOrEqual(column, last))
    not_above = ctx.op.LessOrEqual(edges, ctx.op.Unsqueeze(column, ctx.const([1])))
    pos = ctx.op.Sub(ctx.op.ReduceSum(ctx.op.Cast(not_above, to=int(INT64)), ctx.const([1]), keepdims=0), ctx.const(1))
    pos = ctx.op.Min(pos, ctx.op.Sub(ctx.as_value(bins, dtype=INT64), ctx.const(1)))
    return ctx.op.Where(inside, pos, ctx.const(0)), inside


def _accumulate(ctx: Ctx, where: ir.Value, inside: ir.Value, weight: ir.Value | None, sizes: Sequence[int],
                like: ir.Value) -> ir.Value:
    """The histogram of shape ``sizes``: the sum of the weights (or ones) of the elements inside, by flat bin."""
    # onnxruntime's ScatterElements adds no float16: half types count in float32
    dtype = ir.DataType.FLOAT if like.dtype in _HALF else like.dtype
    ones = ctx.op.Expand(ctx.const(1.0, dtype), ctx.op.Shape(where))
    weights = ones if weight is None else ctx.cast(ctx.op.Reshape(weight, ctx.const([-1])), dtype)
    adds = ctx.op.Where(inside, weights, ctx.const(0.0, dtype))
    zeros = ctx.op.Expand(ctx.const(0.0, dtype), ctx.const([math.prod(sizes)]))
    hist = ctx.cast(ctx.op.ScatterElements(zeros, where, adds, axis=0, reduction="add"), like.dtype)
    return ctx.op.Reshape(hist, ctx.const(list(sizes))) if len(sizes) != 1 else hist


def _density(ctx: Ctx, hist: ir.Value, edges: Sequence[ir.Value]) -> ir.Value:
    """Counts over the total, then over each bin's width in each dimension, as torch divides."""
    hist = ctx.op.Div(hist, ctx.op.ReduceSum(hist, keepdims=0))
    for d, e in enumerate(edges):
        upper = ctx.op.Slice(e, ctx.const([1]), ctx.const([2**62]))
        widths = ctx.op.Sub(upper, ctx.op.Slice(e, ctx.const([0]), ctx.const([-1])))
        if len(edges) > 1:
            shape = [1] * len(edges)
            shape[d] = -1
            widths = ctx.op.Reshape(widths, ctx.const(shape))
        hist = ctx.op.Div(hist, widths)
    return hist


def _numel(x: ir.Value) -> int | None:
    return math.prod(x.shape) if all(isinstance(s, int) for s in x.shape) else None


@aten(aten_.histc.default)
def histc(ctx: Ctx, x: ir.Value, bins: int = 100, min: float = 0, max: float = 0) -> ir.Value:
    """histc(Tensor self, int bins=100, Scalar min=0, Scalar max=0) -> Tensor"""
    flat = ctx.op.Reshape(x, ctx.const([-1]))
    if min == max and _numel(x) != 0:
        lo, hi = _outer_edges(ctx, flat, _numel(x), 1.0)
    else:
        lo, hi = (min - 1, max + 1) if min == max else (min, max)
        lo, hi = ctx.const(float(lo), like=x), ctx.const(float(hi), like=x)
    # torch's histc interpolates, (x - lo) * bins / (hi - lo) truncated, without checking the edges
    inside = ctx.op.And(ctx.op.GreaterOrEqual(flat, lo), ctx.op.LessOrEqual(flat, hi))
    # each step rounded to the element type, as torch's kernel rounds it (an explicit float32 round trip:
    # onnxruntime may run a chain of float16 ops in float32)
    def rounded(v: ir.Value) -> ir.Value:
        return ctx.cast(ctx.cast(v, x.dtype), ir.DataType.FLOAT) if x.dtype in _HALF else v

    f, lo_f, hi_f = (ctx.cast(v, ir.DataType.FLOAT) if x.dtype in _HALF else v for v in (flat, lo, hi))
    step = rounded(ctx.op.Mul(rounded(ctx.op.Sub(f, lo_f)), ctx.const(float(bins), like=f)))
    scaled = rounded(ctx.op.Div(step, rounded(ctx.op.Sub(hi_f, lo_f))))
    pos = ctx.op.Min(ctx.op.Cast(scaled, to=int(INT64)), ctx.const(bins - 1))
    return _accumulate(ctx, ctx.op.Where(inside, pos, ctx.const(0)), inside, None, [bins], x)


@aten(aten_.histogram.bin_ct)
def histogram_bin_ct(ctx: Ctx, x: ir.Value, bins: int = 100, *, range: Sequence[float] | None = None,
                     weight: ir.Value | None = None, density: bool = False) -> tuple[ir.Value, ir.Value]:
    """histogram.bin_ct(Tensor self, int bins=100, *, float[]? range=None, Tensor? weight=None, bool density=False) -> (Tensor hist, Tensor bin_edges)"""
    flat = ctx.op.Reshape(x, ctx.const([-1]))
    if range is not None:
        edges = _const_edges(ctx, range[0], range[1], bins, x)
    else:
        edges = _linspace(ctx, *_outer_edges(ctx, flat, _numel(x), 0.5), bins)
    where, inside = _bin_of(ctx, flat, edges, bins)
    hist = _accumulate(ctx, where, inside, weight, [bins], x)
    return (_density(ctx, hist, [edges]) if density else hist), edges


@aten(aten_.histogram.bins_tensor)
def histogram_bins_tensor(ctx: Ctx, x: ir.Value, bins: ir.Value, *, weight: ir.Value | None = None,
                          density: bool = False) -> tuple[ir.Value, ir.Value]:
    """histogram.bins_tensor(Tensor self, Tensor bins, *, Tensor? weight=None, bool density=False) -> (Tensor hist, Tensor bin_edges)"""
    count = _static_bins(ctx, [bins])[0]
    where, inside = _bin_of(ctx, ctx.op.Reshape(x, ctx.const([-1])), bins, count)
    hist = _accumulate(ctx, where, inside, weight, [count], x)
    return (_density(ctx, hist, [bins]) if density else hist), ctx.op.Identity(bins)


def _static_bins(ctx: Ctx, edges: Sequence[ir.Value]) -> list[int]:
    counts = [e.shape[0] if e.shape is not None and isinstance(e.shape[0], int) else None for e in edges]
    if None in counts:
        raise ctx.unsupported("bin edges whose number is known only at run time",
                              fix="pass bin edges of a static length, or a number of bins")
    return [c - 1 for c in counts]


def _dd_input(ctx: Ctx, x: ir.Value) -> tuple[ir.Value, int, int | None]:
    """``x`` as (M, D) points, D and M (None where only known at run time)."""
    d = x.shape[-1]
    if not isinstance(d, int):
        raise ctx.unsupported("points of a dimension known only at run time", fix="give the last dim a static size")
    numel = _numel(x)
    return ctx.op.Reshape(x, ctx.const([-1, d])), d, None if numel is None else numel // max(d, 1)


def _dd_edges(ctx: Ctx, x: ir.Value, bins: Sequence[int], bounds: Sequence[float] | None) -> list[ir.Value]:
    points, d, m = _dd_input(ctx, x)
    if bounds is not None:
        return [_const_edges(ctx, bounds[2 * i], bounds[2 * i + 1], bins[i], x) for i in range(d)]
    columns = [ctx.op.Gather(points, ctx.const(i), axis=1) for i in range(d)]
    return [_linspace(ctx, *_outer_edges(ctx, c, m, 0.5), bins[i]) for i, c in enumerate(columns)]


def _dd_hist(ctx: Ctx, x: ir.Value, edges: Sequence[ir.Value], bins: Sequence[int], weight: ir.Value | None,
             density: bool) -> ir.Value:
    points, d, _ = _dd_input(ctx, x)
    where: ir.Value | None = None
    inside: ir.Value | None = None
    for i in range(d):
        pos, ok = _bin_of(ctx, ctx.op.Gather(points, ctx.const(i), axis=1), edges[i], bins[i])
        stride = math.prod(bins[i + 1:])
        pos = ctx.op.Mul(pos, ctx.const(stride)) if stride != 1 else pos
        where = pos if where is None else ctx.op.Add(where, pos)
        inside = ok if inside is None else ctx.op.And(inside, ok)
    hist = _accumulate(ctx, where, inside, weight, list(bins), x)
    return _density(ctx, hist, edges) if density else hist


@aten(aten_._histogramdd_bin_edges.default)
def histogramdd_bin_edges(ctx: Ctx, x: ir.Value, bins: Sequence[int], *, range: Sequence[float] | None = None,
                          weight: ir.Value | None = None, density: bool = False) -> list[ir.Value]:
    """_histogramdd_bin_edges(Tensor self, int[] bins, *, float[]? range=None, Tensor? weight=None, bool density=False) -> Tensor[]"""
    return _dd_edges(ctx, x, bins, range)


@aten(aten_._histogramdd_from_bin_cts.default)
def histogramdd_from_bin_cts(ctx: Ctx, x: ir.Value, bins: Sequence[int], *, range: Sequence[float] | None = None,
                             weight: ir.Value | None = None, density: bool = False) -> ir.Value:
    """_histogramdd_from_bin_cts(Tensor self, int[] bins, *, float[]? range=None, Tensor? weight=None, bool density=False) -> Tensor"""
    return _dd_hist(ctx, x, _dd_edges(ctx, x, bins, range), bins, weight, density)


@aten(aten_._histogramdd_from_bin_tensors.default)
def histogramdd_from_bin_tensors(ctx: Ctx, x: ir.Value, bins: Sequence[ir.Value], *, weight: ir.Value | None = None,
                                 density: bool = False) -> ir.Value:
    """_histogramdd_from_bin_tensors(Tensor self, Tensor[] bins, *, Tensor? weight=None, bool density=False) -> Tensor"""
    return _dd_hist(ctx, x, bins, _static_bins(ctx, bins), weight, density)
