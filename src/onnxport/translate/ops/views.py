"""Views over memory and the splits and shape fixes built on them: as_strided and its scatter, unfold,
tensor_split and h/v/dsplit, atleast_Nd, ravel, resize, empty_permuted.

ONNX values have no memory layout. Where torch reads memory (``as_strided``, ``resize_``), the tensor's
elements are laid out in memory order from torch's metadata (its strides) and indexed with ``Gather``;
a tensor whose memory has gaps or overlaps (``expand``, a strided slice) is refused, as is reading memory
outside the tensor itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx_ir as ir
import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from onnxport.translate.builder import Ctx
from onnxport.translate.ops._common import arg_meta, axes, norm_axis, rank
from onnxport.translate.ops.shape import INT64, INT64_MAX, Size, dim_size, reshaped, shape_of, slice_along
from onnxport.translate.registry import aten, ops

aten_ = ops.aten
_FIX_LAYOUT = "call .contiguous() on the tensor first, or index it (x[...], x.unfold, x.reshape) instead of by strides"


def _known(cond: Any) -> bool:
    return bool(statically_known_true(cond))


def _memory_order(val: torch.Tensor) -> list[int] | None:
    """The permutation ``p`` for which ``val.permute(p)`` is contiguous (its elements in memory order);
    None when its memory has gaps or overlaps, or its layout depends on symbolic sizes."""
    r, shape, stride = val.dim(), list(val.shape), list(val.stride())
    candidates = [list(range(r))]
    hints = [s if isinstance(s, int) else s.node.hint for s in stride]  # the example's strides, to be checked
    if all(isinstance(h, int) for h in hints):  # ties and size-1 dims: any order of them is as good
        candidates.append(sorted(range(r), key=lambda d: -hints[d]))
    for order in candidates:
        expected: Any = 1
        dense = True
        for d in reversed(order):
            if _known(shape[d] == 1):
                continue
            dense = dense and _known(stride[d] == expected)
            expected = expected * shape[d]
        if dense or _known(val.numel() == 0):
            return order
    return None


def _in_memory_order(ctx: Ctx, x: ir.Value, val: torch.Tensor, what: str) -> tuple[ir.Value, list[int]]:
    """``x`` transposed into memory order (per torch's strides in ``val``), and the permutation used."""
    order = _memory_order(val)
    if order is None:
        raise ctx.unsupported(f"{what} reads the memory of a tensor with sizes {tuple(val.shape)} and strides "
                              f"{tuple(val.stride())}, which has gaps or overlaps", fix=_FIX_LAYOUT)
    return (x if order == sorted(order) else ctx.op.Transpose(x, perm=order)), order


def _flat(ctx: Ctx, x: ir.Value) -> ir.Value:
    return ctx.op.Reshape(x, ctx.const([-1], INT64))


def _strided_index(ctx: Ctx, size: Sequence[Size], stride: Sequence[Size], offset: Size) -> ir.Value:
    """Flat memory positions of a strided view: ``offset + sum_i stride[i] * arange(size[i])`` broadcast."""
    r = len(size)
    index = (ctx.const(np.full([1] * r, offset, np.int64)) if isinstance(offset, int)
             else ctx.op.Reshape(ctx.as_value(offset, dtype=INT64), ctx.const([1] * r, INT64)))
    for i, (n, s) in enumerate(zip(size, stride)):
        at = [1] * i + [-1] + [1] * (r - i - 1)
        if isinstance(n, int) and isinstance(s, int):
            if n == 1:
                continue
            term = ctx.const(np.arange(n, dtype=np.int64).reshape(at) * s)
        else:
            steps = ctx.op.Range(ctx.const(0, INT64), ctx.as_value(n, dtype=INT64), ctx.const(1, INT64))
            term = ctx.op.Reshape(ctx.op.Mul(steps, ctx.as_value(s, dtype=INT64)), ctx.const(at, INT64))
        index = ctx.op.Add(index, term)
    return index


def _static_positions(size: Sequence[Size], stride: Sequence[Size], offset: Size) -> np.ndarray | None:
    if not all(isinstance(v, int) for v in [*size, *stride, offset]):
        return None
    grids = np.meshgrid(*[np.arange(n) * s for n, s in zip(size, stride)], indexing="ij")
    return offset + sum((g.ravel() for g in grids), np.zeros(math.prod(size), np.int64))


def _check_inside(ctx: Ctx, positions: np.ndarray | None, offset: Size, numel: Any, what: str) -> None:
    outside = isinstance(offset, int) and offset < 0
    if positions is not None and positions.size and isinstance(numel, int):
        outside = outside or positions.min() < 0 or positions.max() >= numel
    if outside:
        raise ctx.unsupported(f"{what} addresses memory outside the tensor's own {numel} elements (elements of "
                              "a tensor it is a view of), which its ONNX value does not hold",
                              fix="apply as_strided to the tensor the view was taken from")


@aten(aten_.as_strided.default, aten_.as_strided_copy.default)
def as_strided(ctx: Ctx, x: ir.Value, size: Sequence[Size], stride: Sequence[Size],
               storage_offset: Size | None = None) -> ir.Value:
    """as_strided(Tensor(a) self, SymInt[] size, SymInt[] stride, SymInt? storage_offset=None) -> Tensor(a)"""
    val = arg_meta(ctx, 0)
    base = val.storage_offset()
    if storage_offset is None:
        offset: Size = 0
    elif isinstance(storage_offset, int) and isinstance(base, int):
        offset = storage_offset - base
    elif isinstance(base, int):
        offset = ctx.op.Sub(ctx.as_value(storage_offset, dtype=INT64), ctx.const(base, INT64))
    else:
        raise ctx.unsupported("a storage offset relative to a view at a symbolic offset",
                              fix="apply as_strided to the tensor the view was taken from")
    numel = val.numel()
    _check_inside(ctx, _static_positions(size, stride, offset), offset, numel, "as_strided")
    memory, _ = _in_memory_order(ctx, x, val, "as_strided")
    return ctx.op.Gather(_flat(ctx, memory), _strided_index(ctx, size, stride, offset), axis=0)


@aten(aten_.as_strided_scatter.default)
def as_strided_scatter(ctx: Ctx, x: ir.Value, src: ir.Value, size: Sequence[Size], stride: Sequence[Size],
                       storage_offset: Size | None = None) -> ir.Value:
    """as_strided_scatter(Tensor self, Tensor src, SymInt[] size, SymInt[] stride, SymInt? storage_offset=None) -> Tensor"""
    out = ctx.node.meta["val"]  # a clone of self: its strides say where each element sits in memory
    offset = 0 if storage_offset is None else storage_offset
    positions = _static_positions(size, stride, offset)
    _check_inside(ctx, positions, offset, out.numel(), "as_strided_scatter")
    if positions is not None and len(np.unique(positions)) < positions.size:
        raise ctx.unsupported(f"as_strided_scatter with strides {list(stride)} writes some elements more than "
                              "once, in an order ONNX does not define", fix="scatter through a view without overlaps")
    memory, order = _in_memory_order(ctx, x, out, "as_strided_scatter")
    index = ctx.op.Unsqueeze(_strided_index(ctx, size, stride, offset), axes(ctx, [-1]))
    updates = ctx.op.Expand(ctx.cast(src, x.dtype), ctx.sizes(list(size)))
    flat = ctx.op.ScatterND(_flat(ctx, memory), index, updates)
    dims = [x.shape[d] for d in order]
    shape = ctx.const(dims, INT64) if all(isinstance(d, int) for d in dims) else ctx.op.Shape(memory)
    scattered = ctx.op.Reshape(flat, shape)
    if order == sorted(order):
        return scattered
    return ctx.op.Transpose(scattered, perm=[order.index(d) for d in range(len(order))])


@aten(aten_.unfold.default, aten_.unfold_copy.default)
def unfold(ctx: Ctx, x: ir.Value, dimension: int, size: int, step: int) -> ir.Value:
    """unfold(Tensor(a) self, int dimension, int size, int step) -> Tensor(a)"""
    r = rank(x)
    if r == 0:
        return ctx.op.Reshape(x, ctx.const([size], INT64))
    axis = norm_axis(dimension, r)
    count = ctx.out_shape()[axis]
    offsets = np.arange(size, dtype=np.int64).reshape(1, -1)
    if isinstance(count, int):
        windows = ctx.const(np.arange(count, dtype=np.int64).reshape(-1, 1) * step + offsets)
    else:  # window starts 0, step, ... up to n - size
        end = ctx.op.Add(ctx.op.Sub(ctx.as_value(dim_size(ctx, x, axis), dtype=INT64), ctx.const(size, INT64)),
                         ctx.const(1, INT64))
        starts = ctx.op.Range(ctx.const(0, INT64), end, ctx.const(step, INT64))
        windows = ctx.op.Add(ctx.op.Unsqueeze(starts, axes(ctx, [1])), ctx.const(offsets))
    gathered = ctx.op.Gather(x, windows, axis=axis)  # [..., count, size, ...]: the window axis goes last
    if axis == r - 1:
        return gathered
    return ctx.op.Transpose(gathered, perm=[*range(axis + 1), *range(axis + 2, r + 1), axis + 1])


def _split_at(ctx: Ctx, x: ir.Value, axis: int, cuts: Sequence[Size | ir.Value]) -> list[ir.Value]:
    """``x`` cut along ``axis`` before each of ``cuts``, as torch's slices (negative cuts count from the end,
    a cut before the previous one gives an empty piece); a cut may be a 1-element int64 value."""
    shapes = [ctx.out_shape(i) for i in range(len(cuts) + 1)]
    static = [s[axis] for s in shapes]
    if all(isinstance(s, int) for s in static) and isinstance(x.shape[axis], int) and sum(static) == x.shape[axis]:
        if len(static) == 1:
            return [x]
        return list(ctx.op.Split(x, ctx.const(static, INT64), axis=axis, _outputs=len(static)))
    bounds = [0, *cuts, INT64_MAX]
    return [slice_along(ctx, x, axis, a, b) for a, b in zip(bounds, bounds[1:])]


def _sections(ctx: Ctx, x: ir.Value, axis: int, sections: int) -> list[ir.Value]:
    """``sections`` pieces; the first ``size % sections`` are one longer."""
    size = dim_size(ctx, x, axis)
    if isinstance(size, int):
        q, rem = divmod(size, sections)
        cuts: list[Size] = [i * q + min(i, rem) for i in range(1, sections)]
    else:
        n = ctx.const(sections, INT64)
        q, rem = ctx.op.Div(size, n), ctx.op.Mod(size, n)
        cuts = [ctx.op.Add(ctx.op.Mul(ctx.const(i, INT64), q), ctx.op.Min(ctx.const(i, INT64), rem))
                for i in range(1, sections)]
    return _split_at(ctx, x, axis, cuts)


@aten(aten_.tensor_split.sections)
def tensor_split_sections(ctx: Ctx, x: ir.Value, sections: int, dim: int = 0) -> list[ir.Value]:
    """tensor_split.sections(Tensor(a -> *) self, SymInt sections, int dim=0) -> Tensor(a)[]"""
    return _sections(ctx, x, norm_axis(dim, rank(x)), len(ctx.node.meta["val"]))


@aten(aten_.tensor_split.indices)
def tensor_split_indices(ctx: Ctx, x: ir.Value, indices: Sequence[Size], dim: int = 0) -> list[ir.Value]:
    """tensor_split.indices(Tensor(a -> *) self, SymInt[] indices, int dim=0) -> Tensor(a)[]"""
    return _split_at(ctx, x, norm_axis(dim, rank(x)), list(indices))


@aten(aten_.tensor_split.tensor_indices_or_sections)
def tensor_split_tensor(ctx: Ctx, x: ir.Value, indices_or_sections: ir.Value, dim: int = 0) -> list[ir.Value]:
    """tensor_split.tensor_indices_or_sections(Tensor(a -> *) self, Tensor tensor_indices_or_sections, int dim=0) -> Tensor(a)[]"""
    if rank(indices_or_sections) == 0:
        raise ctx.unsupported("a tensor number of sections: the number of outputs would depend on its value",
                              fix="pass the number of sections as a Python int")
    n = len(ctx.node.meta["val"]) - 1
    cuts = ctx.cast(indices_or_sections, INT64)
    pieces = [cuts] if n <= 1 else list(ctx.op.Split(cuts, ctx.const([1] * n, INT64), axis=0, _outputs=n))
    pieces = pieces[:n]
    for piece in pieces:
        piece.shape = ir.Shape([1])  # 1-D, so that ctx.sizes splices it in
    return _split_at(ctx, x, norm_axis(dim, rank(x)), pieces)


def _hvd_split(dim_of: Any, packet: Any):
    name = packet.__name__

    def by_sections(ctx: Ctx, x: ir.Value, sections: int) -> list[ir.Value]:
        return _sections(ctx, x, dim_of(rank(x)), sections)

    def by_indices(ctx: Ctx, x: ir.Value, indices: Sequence[Size]) -> list[ir.Value]:
        return _split_at(ctx, x, dim_of(rank(x)), list(indices))

    by_sections.__doc__ = f"{name}.int(Tensor(a -> *) self, int sections) -> Tensor(a)[]"
    by_indices.__doc__ = f"{name}.array(Tensor(a -> *) self, int[] indices) -> Tensor(a)[]"
    aten(packet.int)(by_sections)
    aten(packet.array)(by_indices)


_hvd_split(lambda r: 1 if r > 1 else 0, aten_.hsplit)
_hvd_split(lambda r: 0, aten_.vsplit)
_hvd_split(lambda r: 2, aten_.dsplit)


@aten(aten_.ravel.default)
def ravel(ctx: Ctx, x: ir.Value) -> ir.Value:
    """ravel(Tensor(a) self) -> Tensor(a)"""
    return reshaped(ctx, x, [-1])


# The axes atleast_Nd inserts, by (N, rank): a vector becomes a row, a matrix gains a trailing axis.
_ATLEAST_AXES = {(1, 0): [0], (2, 0): [0, 1], (2, 1): [0], (3, 0): [0, 1, 2], (3, 1): [0, 2], (3, 2): [2]}


def _atleast(n: int, packet: Any):
    def one(ctx: Ctx, x: ir.Value) -> ir.Value:
        new = _ATLEAST_AXES.get((n, rank(x)))
        return ctx.op.Unsqueeze(x, axes(ctx, new)) if new else x

    def translate(ctx: Ctx, tensors: ir.Value | Sequence[ir.Value]) -> ir.Value | list[ir.Value]:
        return one(ctx, tensors) if isinstance(tensors, ir.Value) else [one(ctx, t) for t in tensors]

    translate.__doc__ = f"atleast_{n}d(Tensor self) -> Tensor; atleast_{n}d.Sequence(Tensor[] tensors) -> Tensor[]"
    aten(packet.default, packet.Sequence)(translate)


_atleast(1, aten_.atleast_1d)
_atleast(2, aten_.atleast_2d)
_atleast(3, aten_.atleast_3d)


@aten(aten_.empty_permuted.default)
def empty_permuted(ctx: Ctx, size: Sequence[Size], physical_layout: Sequence[int], **_: Any) -> ir.Value:
    """empty_permuted(SymInt[] size, int[] physical_layout, *, ScalarType? dtype=None, ...) -> Tensor"""
    # the contents are unspecified and a value has no layout: zeros of the logical size
    dtype = ctx.out_dtype()
    fill = ir.tensor(np.zeros([1], dtype=dtype.numpy()), dtype=dtype)
    return ctx.op.ConstantOfShape(ctx.sizes(list(size)), value=fill)


@aten(aten_.resize.default)
def resize(ctx: Ctx, x: ir.Value, size: Sequence[Size], *, memory_format: Any = None) -> ir.Value:
    """resize(Tensor self, SymInt[] size, *, MemoryFormat? memory_format=None) -> Tensor"""
    return _resize(ctx, x, list(size))


@aten(aten_.resize_as.default)
def resize_as(ctx: Ctx, x: ir.Value, the_template: ir.Value, *, memory_format: Any = None) -> ir.Value:
    """resize_as(Tensor self, Tensor the_template, *, MemoryFormat? memory_format=None) -> Tensor"""
    dims = list(the_template.shape)
    return _resize(ctx, x, dims if all(isinstance(d, int) for d in dims) else [shape_of(ctx, the_template)])


def _resize(ctx: Ctx, x: ir.Value, size: list[Size]) -> ir.Value:
    """The first elements of ``x``'s memory, as many as ``size`` holds, laid out contiguously."""
    val, out = arg_meta(ctx, 0), ctx.node.meta["val"]
    if val.dim() == out.dim() and all(_known(a == b) for a, b in zip(val.shape, out.shape)):
        return x  # torch keeps the tensor as it is, strides included
    if not _known(out.numel() <= val.numel()):
        raise ctx.unsupported(f"resizing {tuple(val.shape)} to {tuple(out.shape)} adds elements whose values are "
                              "uninitialised memory", fix="allocate the larger tensor with torch.zeros or torch.cat")
    if _memory_order(out) != list(range(out.dim())):
        raise ctx.unsupported(f"a resize to memory format {ctx.node.kwargs.get('memory_format')}",
                              fix="resize with the default memory format, then permute")
    memory, _ = _in_memory_order(ctx, x, val, "resize_")
    numel = out.numel()
    end = ctx.const([int(numel)], INT64) if isinstance(numel, int) else ctx.op.ReduceProd(
        ctx.sizes(size), keepdims=1)
    kept = ctx.op.Slice(_flat(ctx, memory), ctx.const([0], INT64), end)
    return ctx.op.Reshape(kept, ctx.sizes(size))
