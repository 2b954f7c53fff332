"""Gathers and scatters: gather, index_select, advanced indexing, index_put, embedding, scatter, *_scatter."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir

from onnxport.translate.builder import Ctx
from onnxport.translate.ops._common import FLOAT_TYPES, axes, norm_axis, rank
from onnxport.translate.registry import aten, ops

aten_ = ops.aten
INT64 = ir.DataType.INT64
INT64_MAX = 2**63 - 1
# onnxruntime's ScatterElements/ScatterND reduce none of these: they reduce as the wider type (a bool's
# sum and max are its or, product and min its and)
_REDUCE_AS = {ir.DataType.FLOAT16: ir.DataType.FLOAT, ir.DataType.BFLOAT16: ir.DataType.FLOAT,
              ir.DataType.BOOL: ir.DataType.INT32}


def _index(ctx: Ctx, index: ir.Value) -> ir.Value:
    if index.dtype == ir.DataType.BOOL:  # torch refuses these too; x[mask] comes through _expand_masks
        raise ctx.unsupported("a boolean tensor as the index of a gather or scatter",
                              fix="pass integer indices, e.g. mask.nonzero().squeeze(-1)")
    out = ctx.cast(index, INT64)
    out.shape = index.shape  # later rank checks read it
    return out


def _expand_masks(ctx: Ctx, indices: Sequence[ir.Value | None]) -> list[ir.Value | None]:
    """A boolean index of rank k becomes the k integer indices of its True elements, as torch does:
    ``x[mask]`` is ``x[mask.nonzero().unbind(1)]`` (a size known only at run time, which ONNX allows)."""
    out: list[ir.Value | None] = []
    for index in indices:
        if index is None or index.dtype != ir.DataType.BOOL:
            out.append(index)
            continue
        if rank(index) == 0:  # x[True] adds a dim of size 1: index 0 of an unsqueezed x is not this
            raise ctx.unsupported("a 0-d boolean index", fix="index with x[None] or torch.where instead")
        nonzero = ctx.op.NonZero(index)  # (k, count)
        for row in range(rank(index)):
            position = ctx.op.Gather(nonzero, ctx.const(row, INT64), axis=0)
            position.shape = ir.Shape([None])
            out.append(position)
    return out


@aten(aten_.gather.default)
def gather(ctx: Ctx, x: ir.Value, dim: int, index: ir.Value, *, sparse_grad: bool = False) -> ir.Value:
    """gather(Tensor self, int dim, Tensor index, *, bool sparse_grad=False) -> Tensor"""
    if rank(x) == 0:
        return ctx.op.Reshape(x, ctx.op.Shape(index))
    return ctx.op.GatherElements(x, _index(ctx, index), axis=norm_axis(dim, rank(x)))


@aten(aten_.index_select.default)
def index_select(ctx: Ctx, x: ir.Value, dim: int, index: ir.Value) -> ir.Value:
    """index_select(Tensor self, int dim, Tensor index) -> Tensor"""
    index = _index(ctx, index)
    if rank(index) == 0:  # the selected dim stays, with size 1
        index = ctx.op.Unsqueeze(index, axes(ctx, [0]))
    if rank(x) == 0:
        return x
    return ctx.op.Gather(x, index, axis=norm_axis(dim, rank(x)))


@aten(aten_.embedding.default)
def embedding(ctx: Ctx, weight: ir.Value, indices: ir.Value, padding_idx: int = -1,
              scale_grad_by_freq: bool = False, sparse: bool = False) -> ir.Value:
    """embedding(Tensor weight, Tensor indices, SymInt padding_idx=-1, bool scale_grad_by_freq=False, bool sparse=False) -> Tensor"""
    # padding_idx only affects the gradient
    return ctx.op.Gather(weight, _index(ctx, indices), axis=0)


@aten(aten_.embedding_renorm.default)
def embedding_renorm(ctx: Ctx, weight: ir.Value, indices: ir.Value, max_norm: float, norm_type: float) -> ir.Value:
    """embedding_renorm(Tensor self, Tensor indices, float max_norm, float norm_type) -> Tensor"""
    # rows that indices name and whose norm exceeds max_norm scale by max_norm / (norm + 1e-7)
    flat = ctx.op.Reshape(_index(ctx, indices), ctx.const([-1], INT64))
    named = ctx.op.ScatterElements(ctx.op.Expand(ctx.const(False), ctx.op.Shape(weight, start=0, end=1)), flat,
                                   ctx.op.Expand(ctx.const(True), ctx.op.Shape(flat)), axis=0)
    size = ctx.op.Abs(weight)
    last = axes(ctx, [1])
    if norm_type == 1:
        norm = ctx.op.ReduceSum(size, last, keepdims=1)
    elif norm_type == 2:
        norm = ctx.op.Sqrt(ctx.op.ReduceSum(ctx.op.Mul(weight, weight), last, keepdims=1))
    elif norm_type == float("inf"):
        norm = ctx.op.ReduceMax(size, last, keepdims=1)
    else:
        p = ctx.const(float(norm_type), like=weight)
        total = ctx.op.ReduceSum(ctx.op.Pow(size, p), last, keepdims=1)
        norm = ctx.op.Pow(total, ctx.const(1 / norm_type, like=weight))
    norm64 = ctx.cast(norm, ir.DataType.DOUBLE)  # torch takes the norm as a double and scales in double
    scale = ctx.cast(ctx.op.Div(ctx.const(float(max_norm), ir.DataType.DOUBLE),
                                ctx.op.Add(norm64, ctx.const(1e-7, ir.DataType.DOUBLE))), weight.dtype)
    too_long = ctx.op.Greater(norm64, ctx.const(float(max_norm), ir.DataType.DOUBLE))
    shrink = ctx.op.And(ctx.op.Unsqueeze(named, last), too_long)
    return ctx.op.Where(shrink, ctx.op.Mul(weight, scale), weight)


def _advanced(ctx: Ctx, x: ir.Value, indices: Sequence[ir.Value | None]) -> tuple[ir.Value, ir.Value, list[int], int]:
    """Move the indexed dims of ``x`` first and stack the broadcast indices for GatherND/ScatterND.

    Returns (x transposed, stacked indices [*B, k], the permutation, where torch puts the B dims).
    """
    r = rank(x)
    positions = [i for i, idx in enumerate(indices) if idx is not None]
    idx = [_index(ctx, indices[i]) for i in positions]
    perm = positions + [d for d in range(r) if d not in positions]
    xt = ctx.op.Transpose(x, perm=perm) if perm != list(range(r)) else x
    b_rank = max(rank(i) for i in idx)
    if len(idx) > 1:
        common = idx[0]
        for other in idx[1:]:
            common = ctx.op.Add(common, other)
        shape = ctx.op.Shape(common)
        idx = [ctx.op.Expand(i, shape) for i in idx]
    last = axes(ctx, [b_rank])
    stacked = ctx.op.Concat(*[ctx.op.Unsqueeze(i, last) for i in idx], axis=b_rank) if len(idx) > 1 else \
        ctx.op.Unsqueeze(idx[0], last)
    # torch keeps the broadcast dims in place when the indexed dims are adjacent, else puts them first
    adjacent = positions == list(range(positions[0], positions[-1] + 1))
    return xt, stacked, perm, positions[0] if adjacent else 0


def _b_perm(out_rank: int, b_rank: int, at: int) -> list[int]:
    """Permutation taking [B..., rest...] to torch's layout with B at ``at``."""
    rest = list(range(b_rank, out_rank))
    return rest[:at] + list(range(b_rank)) + rest[at:]


@aten(aten_.index.Tensor, aten_._unsafe_index.Tensor)
def index(ctx: Ctx, x: ir.Value, indices: Sequence[ir.Value | None]) -> ir.Value:
    """index.Tensor(Tensor self, Tensor?[] indices) -> Tensor"""
    indices = _expand_masks(ctx, indices)
    given = [i for i, idx in enumerate(indices) if idx is not None]
    if len(given) == 1:
        return ctx.op.Gather(x, _index(ctx, indices[given[0]]), axis=given[0])
    xt, stacked, _, at = _advanced(ctx, x, indices)
    out = ctx.op.GatherND(xt, stacked)
    b_rank = max(rank(i) for i in indices if i is not None)
    out_rank = b_rank + rank(x) - len(given)
    perm = _b_perm(out_rank, b_rank, at)
    return ctx.op.Transpose(out, perm=perm) if perm != list(range(out_rank)) else out


@aten(aten_.index_put.default, aten_._unsafe_index_put.default)
def index_put(ctx: Ctx, x: ir.Value, indices: Sequence[ir.Value | None], values: ir.Value,
              accumulate: bool = False) -> ir.Value:
    """index_put(Tensor self, Tensor?[] indices, Tensor values, bool accumulate=False) -> Tensor"""
    values = ctx.cast(values, x.dtype)
    given = [i for i in indices if i is not None]
    if len(given) == 1 and given[0].dtype == ir.DataType.BOOL and not accumulate and _single(values):
        return _masked_put(ctx, x, indices, values)
    indices = _expand_masks(ctx, indices)
    given = [i for i in indices if i is not None]
    r = rank(x)
    xt, stacked, perm, at = _advanced(ctx, x, indices)
    b_rank = max(rank(i) for i in given)
    k = len(given)
    # values broadcast to x[indices] in torch's layout; ScatterND wants [B..., rest...]
    b_shape = ctx.op.Shape(stacked, end=b_rank)
    rest = ctx.op.Shape(xt, start=k)
    if at:
        target = ctx.op.Concat(ctx.op.Slice(rest, ctx.const([0], INT64), ctx.const([at], INT64)), b_shape,
                               ctx.op.Slice(rest, ctx.const([at], INT64), ctx.const([INT64_MAX], INT64)), axis=0)
    else:
        target = ctx.op.Concat(b_shape, rest, axis=0)
    values = ctx.op.Expand(values, target)
    out_rank = b_rank + r - k
    if at:
        to_b_first = _b_perm(out_rank, b_rank, at)
        values = ctx.op.Transpose(values, perm=[to_b_first.index(i) for i in range(out_rank)])
    if accumulate and x.dtype in _REDUCE_AS:
        wide = _REDUCE_AS[x.dtype]
        out = ctx.cast(ctx.op.ScatterND(ctx.cast(xt, wide), stacked, ctx.cast(values, wide), reduction="add"), x.dtype)
    else:
        out = ctx.op.ScatterND(xt, stacked, values, reduction="add" if accumulate else None)
    if perm == list(range(r)):
        return out
    return ctx.op.Transpose(out, perm=[perm.index(i) for i in range(r)])


def _single(values: ir.Value) -> bool:
    return values.shape is not None and all(d == 1 for d in values.shape)


def _masked_put(ctx: Ctx, x: ir.Value, indices: Sequence[ir.Value | None], values: ir.Value) -> ir.Value:
    """``x[mask] = v`` with a single-element ``v``: a Where, with no data-dependent shape."""
    pos = next(i for i, idx in enumerate(indices) if idx is not None)
    mask = indices[pos]
    trailing = rank(x) - pos - rank(mask)
    if pos:
        mask = ctx.op.Unsqueeze(mask, axes(ctx, list(range(pos))))
    if trailing:
        mask = ctx.op.Unsqueeze(mask, axes(ctx, list(range(pos + rank(mask), rank(x)))))
    scalar = ctx.op.Reshape(values, ctx.const([], INT64)) if rank(values) else values
    return ctx.op.Where(mask, scalar, x)


def _fit_src(ctx: Ctx, src: ir.Value, index: ir.Value) -> ir.Value:
    """torch reads src only where index has entries; ScatterElements wants equal shapes."""
    if src.shape is not None and index.shape is not None and list(src.shape) == list(index.shape):
        return src
    r = rank(index)
    return ctx.op.Slice(src, ctx.const([0] * r, INT64), ctx.op.Shape(index), axes(ctx, list(range(r))))


_REDUCE = {"add": "add", "sum": "add", "multiply": "mul", "prod": "mul", "amax": "max", "amin": "min"}


@aten(aten_.scatter.src, aten_.scatter.value, aten_.scatter.reduce, aten_.scatter.value_reduce)
def scatter(ctx: Ctx, x: ir.Value, dim: int, index: ir.Value, src: ir.Value | float, *,
            reduce: str | None = None) -> ir.Value:
    """scatter.src(Tensor self, int dim, Tensor index, Tensor src) -> Tensor"""
    index = _index(ctx, index)
    if isinstance(src, ir.Value) and rank(src) == rank(index):
        src = _fit_src(ctx, ctx.cast(src, x.dtype), index)
    else:
        src = ctx.op.Expand(ctx.as_value(src, dtype=x.dtype), ctx.op.Shape(index))
    reduction = _REDUCE[reduce] if reduce else None
    work = _REDUCE_AS.get(x.dtype, x.dtype) if reduction else x.dtype
    data, src = ctx.cast(x, work), ctx.cast(src, work)
    if rank(x) == 0:  # one element: scatter it as a 1-D tensor
        one = ctx.const([1], INT64)
        x1, index1, src1 = (ctx.op.Reshape(v, one) for v in (data, index, src))
        out = ctx.op.Reshape(ctx.op.ScatterElements(x1, index1, src1, axis=0, reduction=reduction),
                             ctx.const([], INT64))
    else:
        out = ctx.op.ScatterElements(data, index, src, axis=norm_axis(dim, rank(x)), reduction=reduction)
    return ctx.cast(out, x.dtype)


@aten(aten_.scatter_add.default)
def scatter_add(ctx: Ctx, x: ir.Value, dim: int, index: ir.Value, src: ir.Value) -> ir.Value:
    """scatter_add(Tensor self, int dim, Tensor index, Tensor src) -> Tensor"""
    return scatter(ctx, x, dim, index, src, reduce="add")


@aten(aten_.scatter_reduce.two)
def scatter_reduce(ctx: Ctx, x: ir.Value, dim: int, index: ir.Value, src: ir.Value, reduce: str, *,
                   include_self: bool = True) -> ir.Value:
    """scatter_reduce.two(Tensor self, int dim, Tensor index, Tensor src, str reduce, *, bool include_self=True) -> Tensor"""
    if reduce not in _REDUCE and reduce != "mean":
        raise ctx.unsupported(f"reduce={reduce!r}", fix="use reduce='sum', 'prod', 'mean', 'amax' or 'amin'")
    index = _index(ctx, index)
    start = x
    if not include_self:  # reset the targets to the reduction's identity, so only src counts there
        start = scatter(ctx, x, dim, index, ctx.const(_identity(reduce, x.dtype), like=x))
        start.shape = x.shape
    if reduce != "mean":
        return scatter(ctx, start, dim, index, src, reduce=reduce)
    total = scatter(ctx, start, dim, index, src, reduce="sum")
    # torch divides by the number of values reduced (self counting once), 1 where none was
    zero = ctx.op.Expand(ctx.const(0, like=x), ctx.op.Shape(x))
    zero.shape = x.shape
    count = scatter(ctx, zero, dim, index, 1, reduce="sum")
    count = ctx.op.Max(ctx.op.Add(count, ctx.const(int(include_self), like=x)), ctx.const(1, like=x))
    if x.dtype in FLOAT_TYPES:
        return ctx.op.Div(total, count)
    return ctx.op.Div(ctx.op.Sub(total, ctx.op.Mod(total, count, fmod=0)), count)  # torch floors integers


def _identity(reduce: str, dtype: ir.DataType) -> float | int:
    """The value that ``reduce`` leaves the other operand unchanged with, in ``dtype``."""
    if reduce in ("prod", "multiply"):
        return 1
    if reduce in ("amax", "amin"):
        if dtype in FLOAT_TYPES:
            return float("-inf") if reduce == "amax" else float("inf")
        if dtype == ir.DataType.BOOL:
            return int(reduce == "amin")
        info = np.iinfo(dtype.numpy())
        return int(info.min) if reduce == "amax" else int(info.max)
    return 0


@aten(aten_.take_along_dim.default)
def take_along_dim(ctx: Ctx, x: ir.Value, indices: ir.Value, dim: int | None = None) -> ir.Value:
    """take_along_dim(Tensor self, Tensor indices, int? dim=None) -> Tensor"""
    indices = _index(ctx, indices)
    if dim is None:
        flat = ctx.const([-1], INT64)
        return ctx.op.GatherElements(ctx.op.Reshape(x, flat), ctx.op.Reshape(indices, flat), axis=0)
    r = rank(x)
    axis = norm_axis(dim, r)
    # both broadcast against each other except along dim; a 1 there keeps each one's own size
    keep = ctx.const([0 if d == axis else 1 for d in range(r)], INT64)
    shape = ctx.op.Max(ctx.op.Shape(x), ctx.op.Shape(indices))
    shape = ctx.op.Add(ctx.op.Mul(shape, keep), ctx.op.Sub(ctx.const([1] * r, INT64), keep))
    return ctx.op.GatherElements(ctx.op.Expand(x, shape), ctx.op.Expand(indices, shape), axis=axis)


@aten(aten_.select_scatter.default)
def select_scatter(ctx: Ctx, x: ir.Value, src: ir.Value, dim: int, index: int | ir.Value) -> ir.Value:
    """select_scatter(Tensor self, Tensor src, int dim, SymInt index) -> Tensor"""
    axis = norm_axis(dim, rank(x))
    src = ctx.op.Unsqueeze(ctx.cast(src, x.dtype), axes(ctx, [axis]))
    where = ctx.op.Expand(ctx.op.Reshape(ctx.as_value(index, dtype=INT64), ctx.const([1] * rank(x), INT64)),
                          ctx.op.Shape(src))
    return ctx.op.ScatterElements(x, where, src, axis=axis)


@aten(aten_.slice_scatter.default)
def slice_scatter(ctx: Ctx, x: ir.Value, src: ir.Value, dim: int = 0, start: int | ir.Value | None = None,
                  end: int | ir.Value | None = None, step: int | ir.Value = 1) -> ir.Value:
    """slice_scatter(Tensor self, Tensor src, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1) -> Tensor"""
    r = rank(x)
    axis = norm_axis(dim, r)
    src = ctx.cast(src, x.dtype)
    start = 0 if start is None else start
    if isinstance(start, int) and start < 0 and isinstance(x.shape[axis], int):
        start = max(start + x.shape[axis], 0)
    # a negative start left (symbolic dim) works too: ScatterElements counts negative indices from the end
    count = ctx.op.Shape(src, start=axis, end=axis + 1)
    positions = ctx.op.Range(ctx.const(0, INT64), ctx.op.Squeeze(count, axes(ctx, [0])), ctx.const(1, INT64))
    positions = ctx.op.Add(ctx.op.Mul(positions, ctx.as_value(step, dtype=INT64)), ctx.as_value(start, dtype=INT64))
    shape = [1] * r
    shape[axis] = -1
    where = ctx.op.Expand(ctx.op.Reshape(positions, ctx.const(shape, INT64)), ctx.op.Shape(src))
    return ctx.op.ScatterElements(x, where, src, axis=axis)


@aten(aten_.index_reduce.default)
def index_reduce(ctx: Ctx, x: ir.Value, dim: int, index: ir.Value, source: ir.Value, reduce: str, *,
                 include_self: bool = True) -> ir.Value:
    """index_reduce(Tensor self, int dim, Tensor index, Tensor source, str reduce, *, bool include_self=True) -> Tensor"""
    r = rank(x)
    if r == 0:  # one element: reduce as a 1-D tensor of it
        x1, index1, source1 = (ctx.op.Reshape(v, ctx.const([1], INT64)) for v in (x, index, source))
        x1.shape = index1.shape = source1.shape = ir.Shape([1])
        out = index_reduce(ctx, x1, 0, index1, source1, reduce, include_self=include_self)
        return ctx.op.Reshape(out, ctx.const([], INT64))
    # index_reduce is scatter_reduce with the 1-D index spread along `dim` over the whole of source
    axis = norm_axis(dim, r)
    shape = [1] * r
    shape[axis] = -1
    spread = ctx.op.Expand(ctx.op.Reshape(_index(ctx, index), ctx.const(shape, INT64)), ctx.op.Shape(source))
    spread.shape = source.shape
    return scatter_reduce(ctx, x, axis, spread, ctx.cast(source, x.dtype), reduce, include_self=include_self)


@aten(aten_.take.default)
def take(ctx: Ctx, x: ir.Value, index: ir.Value) -> ir.Value:
    """take(Tensor self, Tensor index) -> Tensor: ``self.flatten()[index]`` (negative indices count from the end)"""
    return ctx.op.Gather(ctx.op.Reshape(x, ctx.const([-1], INT64)), index, axis=0)
