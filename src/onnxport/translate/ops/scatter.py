"""Scatters into segments and bags: segment_reduce, embedding_bag, put, masked_scatter."""

from __future__ import annotations

import onnx_ir as ir
import torch

from onnxport.translate.builder import Ctx, onnx_dtype
from onnxport.translate.ops._common import axes, norm_axis, rank, retype_outputs
from onnxport.translate.registry import aten, ops

aten_ = ops.aten
INT64, FLOAT = ir.DataType.INT64, ir.DataType.FLOAT
# onnxruntime's ScatterElements reduces float16/bfloat16 with no kernel: those go through float32
_HALF = frozenset({ir.DataType.FLOAT16, ir.DataType.BFLOAT16})
_ONNX_REDUCE = {"sum": "add", "mean": "add", "prod": "mul", "max": "max", "min": "min"}
_IDENTITY = {"sum": 0.0, "mean": 0.0, "prod": 1.0, "max": float("-inf"), "min": float("inf")}


def _flat(ctx: Ctx, x: ir.Value) -> ir.Value:
    return ctx.op.Reshape(x, ctx.const([-1]))


def _segment_of(ctx: Ctx, starts: ir.Value, count: ir.Value) -> ir.Value:
    """For each position ``0 .. count - 1``, the last segment starting at or before it: ``starts`` is
    ``[..., S]``, the result ``[..., count]`` int64. An empty segment shares its start with the next one,
    so it gets no position."""
    positions = ctx.op.Unsqueeze(ctx.op.Range(ctx.const(0), count, ctx.const(1)), ctx.const([1]))
    started = ctx.op.LessOrEqual(ctx.op.Unsqueeze(starts, ctx.const([-2])), positions)
    return ctx.op.Sub(ctx.op.ReduceSum(ctx.op.Cast(started, to=int(INT64)), ctx.const([-1]), keepdims=0), ctx.const(1))


@aten(aten_.segment_reduce.default)
def segment_reduce(ctx: Ctx, data: ir.Value, reduce: str, *, lengths: ir.Value | None = None,
                   indices: ir.Value | None = None, offsets: ir.Value | None = None, axis: int = 0,
                   unsafe: bool = False, initial: float | None = None) -> ir.Value:
    """segment_reduce(Tensor data, str reduce, *, Tensor? lengths=None, Tensor? indices=None, Tensor? offsets=None, int axis=0, bool unsafe=False, Scalar? initial=None) -> Tensor"""
    if reduce not in _ONNX_REDUCE or indices is not None:
        raise ctx.unsupported(f"reduce={reduce!r} with indices={indices is not None}",
                              fix="use lengths or offsets, and reduce='sum', 'mean', 'prod', 'max' or 'min'")
    bounds = lengths if lengths is not None else offsets
    a = norm_axis(axis, rank(data))
    if bounds is None or rank(bounds) != a + 1:
        raise ctx.unsupported("lengths or offsets whose rank is not axis + 1",
                              fix="give lengths (or offsets) of shape data.shape[:axis] + (segments,)")
    out_dtype = data.dtype
    data = ctx.cast(data, FLOAT) if data.dtype in _HALF else data
    # the segments' starts and, as one more segment, the end of the last: positions past it (torch allows
    # lengths that sum short of the data with unsafe=True) land there and are dropped at the end
    if lengths is not None:
        lengths = ctx.cast(lengths, INT64)
        ends = ctx.op.CumSum(lengths, ctx.const(-1))
        bounds = ctx.op.Concat(ctx.op.Sub(ends, lengths), ctx.op.Slice(ends, ctx.const([-1]), ctx.const([2**62]),
                                                                        ctx.const([-1])), axis=-1)
    else:
        bounds = ctx.cast(offsets, INT64)
    n = ctx.op.Squeeze(ctx.op.Shape(data, start=a, end=a + 1), ctx.const([0]))
    segment = _segment_of(ctx, bounds, n)
    if rank(data) > a + 1:  # segment ids [..., n] spread over the dims after `axis`
        segment = ctx.op.Unsqueeze(segment, axes(ctx, list(range(a + 1, rank(data)))))
    where = ctx.op.Expand(segment, ctx.op.Shape(data))
    out_shape = ctx.op.Concat(ctx.op.Shape(bounds), ctx.op.Shape(data, start=a + 1), axis=0)
    start = _IDENTITY[reduce] if initial is None or reduce == "mean" else float(initial)
    base = ctx.op.Expand(ctx.const(start, like=data), out_shape)
    out = ctx.op.ScatterElements(base, where, data, axis=a, reduction=_ONNX_REDUCE[reduce])
    if reduce == "mean":  # torch: (initial + sum) / count, and initial alone (NaN without one) where empty
        ones = ctx.op.Expand(ctx.const(1.0, like=data), ctx.op.Shape(data))
        count = ctx.op.ScatterElements(ctx.op.Expand(ctx.const(0.0, like=data), out_shape), where, ones, axis=a,
                                       reduction="add")
        if initial is not None:
            init = ctx.const(float(initial), like=data)
            out = ctx.op.Where(ctx.op.Equal(count, ctx.const(0.0, like=data)), init,
                               ctx.op.Div(ctx.op.Add(out, init), count))
        else:
            out = ctx.op.Div(out, count)
    out = ctx.op.Slice(out, ctx.const([0]), ctx.const([-1]), ctx.const([a]))
    return ctx.cast(out, out_dtype)


@aten(aten_.put.default)
def put(ctx: Ctx, x: ir.Value, index: ir.Value, source: ir.Value, accumulate: bool = False) -> ir.Value:
    """put(Tensor self, Tensor index, Tensor source, bool accumulate=False) -> Tensor"""
    flat = _flat(ctx, x)
    source = ctx.cast(_flat(ctx, source), x.dtype)
    if accumulate and x.dtype in _HALF:
        flat, source = ctx.cast(flat, FLOAT), ctx.cast(source, FLOAT)
    out = ctx.op.ScatterElements(flat, ctx.cast(_flat(ctx, index), INT64), source, axis=0,
                                 reduction="add" if accumulate else None)
    return ctx.op.Reshape(ctx.cast(out, x.dtype), ctx.op.Shape(x))


@aten(aten_.masked_scatter.default)
def masked_scatter(ctx: Ctx, x: ir.Value, mask: ir.Value, source: ir.Value) -> ir.Value:
    """masked_scatter(Tensor self, Tensor mask, Tensor source) -> Tensor"""
    if x.dtype == ir.DataType.BOOL:  # onnxruntime's Where takes no bool values
        wide = ir.DataType.INT32
        return ctx.cast(masked_scatter(ctx, ctx.cast(x, wide), mask, ctx.cast(source, wide)), x.dtype)
    shape = ctx.op.Shape(ctx.op.Where(mask, x, x))  # the broadcast of both
    flat_mask = _flat(ctx, ctx.op.Expand(mask, shape))
    # the k-th True element takes the k-th source element; a zero appended keeps Gather in bounds when
    # source is empty (then no element is True)
    taken = ctx.op.Sub(ctx.op.CumSum(ctx.op.Cast(flat_mask, to=int(INT64)), ctx.const(0)), ctx.const(1))
    source = ctx.op.Concat(_flat(ctx, ctx.cast(source, x.dtype)), ctx.const([0], like=x), axis=0)
    picked = ctx.op.Gather(source, ctx.op.Max(taken, ctx.const(0)), axis=0)
    out = ctx.op.Where(flat_mask, picked, _flat(ctx, ctx.op.Expand(x, shape)))
    return ctx.op.Reshape(out, shape)


def _used_outputs(ctx: Ctx) -> set[int]:
    """Which outputs of the node being translated a later node reads."""
    return {user.args[1] for user in ctx.node.users if user.op == "call_function" and len(user.args) > 1
            and isinstance(user.args[1], int) and user.users}


@aten(aten_._embedding_bag_forward_only.default, aten_._embedding_bag.default)
def embedding_bag(ctx: Ctx, weight: ir.Value, indices: ir.Value, offsets: ir.Value, scale_grad_by_freq: bool = False,
                  mode: int = 0, sparse: bool = False, per_sample_weights: ir.Value | None = None,
                  include_last_offset: bool = False, padding_idx: int = -1) -> tuple[ir.Value | None, ...]:
    """_embedding_bag(Tensor weight, Tensor indices, Tensor offsets, bool scale_grad_by_freq=False, int mode=0, bool sparse=False, Tensor? per_sample_weights=None, bool include_last_offset=False, int padding_idx=-1) -> (Tensor, Tensor, Tensor, Tensor)

    Only the bags (output 0): the other outputs are torch's bookkeeping for the backward pass.
    """
    if _used_outputs(ctx) - {0}:
        raise ctx.unsupported("reading offset2bag, bag_size or max_indices",
                              fix="use only the bags that torch.nn.functional.embedding_bag returns")
    out_dtype = weight.dtype
    weight = ctx.cast(weight, FLOAT) if weight.dtype in _HALF else weight
    indices, offsets = ctx.cast(_flat(ctx, indices), INT64), ctx.cast(offsets, INT64)
    starts = ctx.op.Slice(offsets, ctx.const([0]), ctx.const([-1])) if include_last_offset else offsets
    count = ctx.op.Squeeze(ctx.op.Shape(indices), ctx.const([0]))
    bag = _segment_of(ctx, starts, count)
    keep = ctx.op.Expand(ctx.const(True), ctx.op.Shape(indices))
    if padding_idx >= 0:  # entries naming the padding row count in no bag, not even in a mean's size
        keep = ctx.op.Not(ctx.op.Equal(indices, ctx.const(padding_idx)))
    summed = keep
    if include_last_offset:  # torch leaves entries past the last offset out of sums, not of max or of sizes
        end = ctx.op.Slice(offsets, ctx.const([-1]), ctx.const([2**62]))
        summed = ctx.op.And(keep, ctx.op.Less(ctx.op.Range(ctx.const(0), count, ctx.const(1)), end))
    rows = ctx.op.Gather(weight, indices, axis=0)
    if per_sample_weights is not None:
        scale = ctx.cast(_flat(ctx, per_sample_weights), weight.dtype)
        rows = ctx.op.Mul(rows, ctx.op.Unsqueeze(scale, axes(ctx, [1])))
    where = ctx.op.Expand(ctx.op.Unsqueeze(bag, axes(ctx, [1])), ctx.op.Shape(rows))
    bags = ctx.op.Shape(starts)
    shape = ctx.op.Concat(bags, ctx.op.Shape(weight, start=1), axis=0)
    sizes = ctx.op.ScatterElements(ctx.op.Expand(ctx.const(0.0, like=weight), bags), bag,
                                   ctx.op.CastLike(keep, weight), axis=0, reduction="add")
    sizes = ctx.op.Unsqueeze(sizes, axes(ctx, [1]))
    if mode == 2:  # max; an empty bag gives zeros
        low = ctx.const(float("-inf"), like=weight)
        kept = ctx.op.Where(ctx.op.Unsqueeze(keep, axes(ctx, [1])), rows, low)
        out = ctx.op.ScatterElements(ctx.op.Expand(low, shape), where, kept, axis=0, reduction="max")
        out = ctx.op.Where(ctx.op.Greater(sizes, ctx.const(0.0, like=weight)), out, ctx.const(0.0, like=weight))
    else:
        zero = ctx.const(0.0, like=weight)
        kept = ctx.op.Where(ctx.op.Unsqueeze(summed, axes(ctx, [1])), rows, zero)
        out = ctx.op.ScatterElements(ctx.op.Expand(zero, shape), where, kept, axis=0, reduction="add")
        if mode == 1:
            out = ctx.op.Div(out, ctx.op.Max(sizes, ctx.const(1.0, like=weight)))
    return ctx.cast(out, out_dtype), None, None, None


@aten(aten_.bincount.default)
def bincount(ctx: Ctx, x: ir.Value, weights: ir.Value | None = None, minlength: int = 0) -> ir.Value:
    """bincount(Tensor self, Tensor? weights=None, SymInt minlength=0) -> Tensor: ``max(x) + 1`` bins (at least
    ``minlength``), counted with a ScatterElements add"""
    # eager counts in int64, and sums float32 weights in float32 and any others in float64; torch 2.10 records
    # the input's dtype whatever the weights
    counted = torch.int64 if weights is None else torch.float32 if weights.dtype == FLOAT else torch.float64
    retype_outputs(ctx, {0: counted})
    dtype = onnx_dtype(counted)
    zero = ctx.const([0], INT64)
    top = ctx.op.ReduceMax(ctx.op.Concat(ctx.op.Cast(x, to=int(INT64)), ctx.const([-1], INT64), axis=0), keepdims=1)
    size = ctx.op.Max(ctx.op.Add(top, ctx.const([1], INT64)), ctx.const([minlength], INT64), zero)
    values = ctx.op.Expand(ctx.const(1, dtype), ctx.op.Shape(x)) if weights is None else ctx.cast(weights, dtype)
    counts = ctx.op.Expand(ctx.const(0, dtype), size)
    return ctx.op.ScatterElements(counts, ctx.op.Cast(x, to=int(INT64)), values, axis=0, reduction="add")
