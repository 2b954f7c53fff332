"""Shape and layout ops: views, reshapes, concatenation, splitting, slicing, padding, dtype casts.

Size arguments may mix Python ints with int64 scalar values (symbolic sizes); they go through
``ctx.sizes``. Where a size of the input is needed and is symbolic it is read with ``Shape`` at run time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import onnx_ir as ir
import torch

from onnxport.translate.builder import Ctx
from onnxport.translate.ops._common import arg_meta, axes, norm_axis, rank, same_size
from onnxport.translate.registry import aten, ops

aten_ = ops.aten
INT64 = ir.DataType.INT64
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

Size = int | ir.Value


def dim_size(ctx: Ctx, x: ir.Value, d: int) -> Size:
    """Size of dim ``d`` of ``x``: an int when static, else an int64 scalar read at run time."""
    size = x.shape[d]
    return size if isinstance(size, int) else ctx.op.Squeeze(ctx.op.Shape(x, start=d, end=d + 1), axes(ctx, [0]))


def shape_of(ctx: Ctx, x: ir.Value, start: int = 0, end: int | None = None) -> ir.Value:
    """``Shape(x)[start:end]``, tagged 1-D so that ``ctx.sizes`` splices it in."""
    end = rank(x) if end is None else end
    out = ctx.op.Shape(x, start=start, end=end)
    out.shape = ir.Shape([end - start])
    return out


def _clamp64(v: Size | None, default: int) -> Size:
    if v is None:
        return default
    return max(min(v, INT64_MAX), INT64_MIN) if isinstance(v, int) else v


def slice_along(ctx: Ctx, x: ir.Value, axis: int, start: Size, end: Size, step: int = 1) -> ir.Value:
    return ctx.op.Slice(x, ctx.sizes([start]), ctx.sizes([end]), axes(ctx, [axis]), ctx.sizes([step]))


def _add(ctx: Ctx, a: Size, b: Size) -> Size:
    """``a + b`` for ints and int64 values (scalar or 1-D)."""
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    return ctx.op.Add(ctx.as_value(a, dtype=INT64), ctx.as_value(b, dtype=INT64))


def reshaped(ctx: Ctx, x: ir.Value, shape: Sequence[Size]) -> ir.Value:
    # allowzero=1 (a 0 in the target means size 0, as in torch) only where a 0 may come: a literal one, or a
    # symbolic size that may be 0 (a count computed in the graph); TensorRT and other runtimes refuse the attribute.
    static = ctx.static_out_shape()
    if static is not None:
        return ctx.op.Reshape(x, ctx.const(static, INT64), allowzero=1 if 0 in static else None)
    literal = [s for s in shape if isinstance(s, int)]
    zero = 0 in literal or (-1 not in literal and any(_may_be_zero(d) for d in ctx.out_shape() or ()))
    return ctx.op.Reshape(x, ctx.sizes(list(shape)), allowzero=1 if zero else None)


def _may_be_zero(size: int | torch.SymInt) -> bool:
    """Whether a symbolic size's range, as torch.export knows it, reaches 0."""
    if not isinstance(size, torch.SymInt):
        return False
    node = size.node
    return bool(node.shape_env.bound_sympy(node.expr).lower <= 0)


@aten(aten_.view.default, aten_.reshape.default, aten_._unsafe_view.default, aten_.view_copy.default,
      aten_._reshape_alias.default)
def view(ctx: Ctx, x: ir.Value, shape: Sequence[Size], *_: Any) -> ir.Value:
    """view(Tensor(a) self, SymInt[] size) -> Tensor(a)"""
    return x if _keeps_sizes(ctx) else reshaped(ctx, x, shape)


def _keeps_sizes(ctx: Ctx) -> bool:
    """Whether the node's output has its input's sizes (the same ints and the same symbolic expressions):
    a reshape to them is no reshape (attention's output viewed as it already is, in a BERT layer)."""
    before, after = arg_meta(ctx, 0), ctx.out_shape()
    if not isinstance(before, torch.Tensor) or after is None or before.dim() != len(after):
        return False
    return all(same_size(a, b) for a, b in zip(before.shape, after))


@aten(aten_.view_as.default, aten_.reshape_as.default)
def view_as(ctx: Ctx, x: ir.Value, other: ir.Value) -> ir.Value:
    """view_as(Tensor(a) self, Tensor other) -> Tensor(a)"""
    return x if _keeps_sizes(ctx) else reshaped(ctx, x, [shape_of(ctx, other)])


@aten(aten_.permute.default, aten_.permute_copy.default)
def permute(ctx: Ctx, x: ir.Value, dims: Sequence[int]) -> ir.Value:
    """permute(Tensor(a) self, int[] dims) -> Tensor(a)"""
    r = rank(x)
    return ctx.op.Transpose(x, perm=[norm_axis(d, r) for d in dims]) if r else x


@aten(aten_.transpose.int, aten_.transpose_copy.int, aten_.swapaxes.default, aten_.swapdims.default)
def transpose(ctx: Ctx, x: ir.Value, dim0: int, dim1: int) -> ir.Value:
    """transpose.int(Tensor(a) self, int dim0, int dim1) -> Tensor(a)"""
    r = rank(x)
    if r < 2:
        return x
    perm = list(range(r))
    a, b = norm_axis(dim0, r), norm_axis(dim1, r)
    perm[a], perm[b] = perm[b], perm[a]
    return ctx.op.Transpose(x, perm=perm)


@aten(aten_.t.default, aten_.t_copy.default, aten_.numpy_T.default)
def t(ctx: Ctx, x: ir.Value) -> ir.Value:
    """t(Tensor(a) self) -> Tensor(a)"""
    r = rank(x)
    return ctx.op.Transpose(x, perm=list(reversed(range(r)))) if r >= 2 else x


@aten(aten_.mT.default, aten_.adjoint.default)
def mT(ctx: Ctx, x: ir.Value) -> ir.Value:
    """mT(Tensor(a) self) -> Tensor(a)"""
    return transpose(ctx, x, -2, -1)


@aten(aten_.movedim.int, aten_.movedim.intlist)
def movedim(ctx: Ctx, x: ir.Value, source: int | Sequence[int], destination: int | Sequence[int]) -> ir.Value:
    """movedim.intlist(Tensor(a) self, int[] source, int[] destination) -> Tensor(a)"""
    r = rank(x)
    src = [norm_axis(d, r) for d in ([source] if isinstance(source, int) else source)]
    dst = [norm_axis(d, r) for d in ([destination] if isinstance(destination, int) else destination)]
    rest = iter(d for d in range(r) if d not in src)
    placed = dict(zip(dst, src))
    perm = [placed[i] if i in placed else next(rest) for i in range(r)]
    return ctx.op.Transpose(x, perm=perm) if perm != list(range(r)) else x


@aten(aten_.expand.default, aten_.expand_copy.default, aten_.broadcast_to.default)
def expand(ctx: Ctx, x: ir.Value, size: Sequence[Size], *, implicit: bool = False) -> ir.Value:
    """expand(Tensor(a) self, SymInt[] size, *, bool implicit=False) -> Tensor(a)"""
    static = ctx.static_out_shape()
    if static is not None:
        return ctx.op.Expand(x, ctx.const(static, INT64))
    # -1 keeps the input's size; Expand's broadcasting does the same with 1
    return ctx.op.Expand(x, ctx.sizes([1 if isinstance(s, int) and s == -1 else s for s in size]))


@aten(aten_.expand_as.default)
def expand_as(ctx: Ctx, x: ir.Value, other: ir.Value) -> ir.Value:
    """expand_as(Tensor(a) self, Tensor other) -> Tensor(a)"""
    return ctx.op.Expand(x, ctx.op.Shape(other))


@aten(aten_.cat.default, aten_.concat.default, aten_.concatenate.default)
def cat(ctx: Ctx, tensors: Sequence[ir.Value], dim: int = 0) -> ir.Value:
    """cat(Tensor[] tensors, int dim=0) -> Tensor"""
    dtype = ctx.out_dtype()
    # torch skips legacy empty 1-D tensors whatever the others' rank is
    kept = [t for t in tensors if not (t.shape is not None and list(t.shape) == [0])] or list(tensors[:1])
    axis = norm_axis(dim, rank(kept[0]))
    kept = [ctx.cast(t, dtype) for t in kept]
    return kept[0] if len(kept) == 1 else ctx.op.Concat(*kept, axis=axis)


@aten(aten_.stack.default)
def stack(ctx: Ctx, tensors: Sequence[ir.Value], dim: int = 0) -> ir.Value:
    """stack(Tensor[] tensors, int dim=0) -> Tensor"""
    dtype = ctx.out_dtype()
    axis = norm_axis(dim, rank(tensors[0]) + 1)
    parts = [ctx.op.Unsqueeze(ctx.cast(t, dtype), axes(ctx, [axis])) for t in tensors]
    return parts[0] if len(parts) == 1 else ctx.op.Concat(*parts, axis=axis)


def _split_sizes(ctx: Ctx, x: ir.Value, axis: int, sizes: Sequence[Size]) -> list[ir.Value]:
    """Pieces of ``x`` along ``axis``; the last size may overrun (torch.split's short last chunk)."""
    n = len(ctx.node.meta["val"])
    shapes = [ctx.out_shape(i) for i in range(n)]
    static = [s[axis] for s in shapes]
    if all(isinstance(s, int) for s in static):
        if n == 1:
            return [x]
        return list(ctx.op.Split(x, ctx.const(static, INT64), axis=axis, _outputs=n))
    out, start = [], 0
    for i in range(n):
        end = _add(ctx, start, sizes[i]) if i < n - 1 else INT64_MAX
        out.append(slice_along(ctx, x, axis, start, end))
        start = end
    return out


@aten(aten_.split.Tensor, aten_.split_with_sizes.default, aten_.split.sizes, aten_.unsafe_split.Tensor,
      aten_.unsafe_split_with_sizes.default)
def split(ctx: Ctx, x: ir.Value, split_size: Size | Sequence[Size], dim: int = 0) -> list[ir.Value]:
    """split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]"""
    axis = norm_axis(dim, rank(x))
    n = len(ctx.node.meta["val"])
    sizes = [split_size] * n if isinstance(split_size, (int, ir.Value)) else list(split_size)
    return _split_sizes(ctx, x, axis, sizes)


@aten(aten_.chunk.default, aten_.unsafe_chunk.default)
def chunk(ctx: Ctx, x: ir.Value, chunks: int, dim: int = 0) -> list[ir.Value]:
    """chunk(Tensor(a -> *) self, int chunks, int dim=0) -> Tensor(a)[]"""
    axis = norm_axis(dim, rank(x))
    size = dim_size(ctx, x, axis)
    if isinstance(size, int):
        step: Size = -(-size // chunks)
    else:
        step = ctx.op.Div(ctx.op.Add(size, ctx.const(chunks - 1, INT64)), ctx.const(chunks, INT64))
    return _split_sizes(ctx, x, axis, [step] * len(ctx.node.meta["val"]))


@aten(aten_.unbind.int, aten_.unbind_copy.int)
def unbind(ctx: Ctx, x: ir.Value, dim: int = 0) -> list[ir.Value]:
    """unbind.int(Tensor(a -> *) self, int dim=0) -> Tensor(a)[]"""
    axis = norm_axis(dim, rank(x))
    n = len(ctx.node.meta["val"])
    pieces = [x] if n == 1 else ctx.op.Split(x, ctx.const([1] * n, INT64), axis=axis, _outputs=n)
    return [ctx.op.Squeeze(p, axes(ctx, [axis])) for p in pieces]


@aten(aten_.slice.Tensor, aten_.slice_copy.Tensor)
def slice_(ctx: Ctx, x: ir.Value, dim: int = 0, start: Size | None = None, end: Size | None = None,
           step: Size = 1) -> ir.Value:
    """slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1) -> Tensor(a)"""
    start, end = _clamp64(start, 0), _clamp64(end, INT64_MAX)
    if isinstance(start, int) and start == 0 and isinstance(end, int) and end == INT64_MAX and step == 1:
        return x
    return slice_along(ctx, x, norm_axis(dim, rank(x)), start, end, step)


@aten(aten_.select.int, aten_.select_copy.int)
def select(ctx: Ctx, x: ir.Value, dim: int, index: Size) -> ir.Value:
    """select.int(Tensor(a) self, int dim, SymInt index) -> Tensor(a)"""
    return ctx.op.Gather(x, ctx.as_value(index, dtype=INT64), axis=norm_axis(dim, rank(x)))


@aten(aten_.narrow.default, aten_.narrow_copy.default)
def narrow(ctx: Ctx, x: ir.Value, dim: int, start: Size, length: Size) -> ir.Value:
    """narrow(Tensor(a) self, int dim, SymInt start, SymInt length) -> Tensor(a)"""
    axis = norm_axis(dim, rank(x))
    if isinstance(start, int) and start < 0:
        start = _add(ctx, dim_size(ctx, x, axis), start)
    return slice_along(ctx, x, axis, start, _add(ctx, start, length))


@aten(aten_.squeeze.default, aten_.squeeze.dim, aten_.squeeze.dims, aten_.squeeze_copy.default,
      aten_.squeeze_copy.dim, aten_.squeeze_copy.dims)
def squeeze(ctx: Ctx, x: ir.Value, dim: int | Sequence[int] | None = None) -> ir.Value:
    """squeeze.dims(Tensor(a) self, int[] dim) -> Tensor(a)"""
    r = rank(x)
    dims = range(r) if dim is None else [norm_axis(d, r) for d in ([dim] if isinstance(dim, int) else dim)]
    # torch squeezes only dims of size 1 and treats symbolic dims as not 1
    ones = sorted({d for d in dims if r and x.shape[d] == 1})
    return ctx.op.Squeeze(x, axes(ctx, ones)) if ones else x


@aten(aten_.unsqueeze.default, aten_.unsqueeze_copy.default)
def unsqueeze(ctx: Ctx, x: ir.Value, dim: int) -> ir.Value:
    """unsqueeze(Tensor(a) self, int dim) -> Tensor(a)"""
    return ctx.op.Unsqueeze(x, axes(ctx, [norm_axis(dim, rank(x) + 1)]))


def _shape_part(ctx: Ctx, x: ir.Value, start: int, end: int) -> list[Size]:
    dims = list(x.shape)[start:end]
    if all(isinstance(d, int) for d in dims):
        return [int(d) for d in dims]
    return [shape_of(ctx, x, start, end)]


@aten(aten_.flatten.using_ints)
def flatten(ctx: Ctx, x: ir.Value, start_dim: int = 0, end_dim: int = -1) -> ir.Value:
    """flatten.using_ints(Tensor(a) self, int start_dim=0, int end_dim=-1) -> Tensor(a)"""
    r = rank(x)
    if r == 0:
        return ctx.op.Reshape(x, ctx.const([1], INT64))
    start, end = norm_axis(start_dim, r), norm_axis(end_dim, r)
    return reshaped(ctx, x, [*_shape_part(ctx, x, 0, start), -1, *_shape_part(ctx, x, end + 1, r)])


@aten(aten_.unflatten.int)
def unflatten(ctx: Ctx, x: ir.Value, dim: int, sizes: Sequence[Size]) -> ir.Value:
    """unflatten.int(Tensor(a) self, int dim, SymInt[] sizes) -> Tensor(a)"""
    r = rank(x)
    axis = norm_axis(dim, r)
    return reshaped(ctx, x, [*_shape_part(ctx, x, 0, axis), *sizes, *_shape_part(ctx, x, axis + 1, r)])


@aten(aten_.repeat.default)
def repeat(ctx: Ctx, x: ir.Value, repeats: Sequence[Size]) -> ir.Value:
    """repeat(Tensor self, SymInt[] repeats) -> Tensor"""
    extra = len(repeats) - rank(x)
    if extra > 0:  # repeat adds leading dims
        x = ctx.op.Unsqueeze(x, axes(ctx, list(range(extra))))
    return ctx.op.Tile(x, ctx.sizes(list(repeats)))


@aten(aten_.repeat_interleave.self_int)
def repeat_interleave(ctx: Ctx, x: ir.Value, repeats: Size, dim: int | None = None, *,
                      output_size: Size | None = None) -> ir.Value:
    """repeat_interleave.self_int(Tensor self, SymInt repeats, int? dim=None, *, SymInt? output_size=None) -> Tensor"""
    if dim is None:  # over the flattened tensor
        x, dim = ctx.op.Reshape(x, ctx.const([-1], INT64)), 0
        x.shape = ir.Shape([None])
    r = rank(x)
    dim = norm_axis(dim, r)
    # each entry along dim gets a new axis of `repeats` copies, then the two axes merge
    tiled = ctx.op.Tile(ctx.op.Unsqueeze(x, axes(ctx, [dim + 1])),
                        ctx.sizes([1] * (dim + 1) + [repeats] + [1] * (r - dim - 1)))
    return ctx.op.Reshape(tiled, ctx.sizes([shape_of(ctx, x, 0, dim), -1, shape_of(ctx, x, dim + 1, r)]))


@aten(aten_.repeat_interleave.Tensor)
def repeat_interleave_counts(ctx: Ctx, repeats: ir.Value, *, output_size: Size | None = None) -> ir.Value:
    """repeat_interleave.Tensor(Tensor repeats, *, SymInt? output_size=None) -> Tensor

    ``i`` repeated ``repeats[i]`` times, for every ``i`` in order; the length, ``repeats.sum()``, is known
    only at run time. Output ``p`` is the number of ends ``cumsum(repeats)`` at or before ``p``: a 1 is added
    at each end (ends that coincide, where a count is 0, add up) and a running sum reads it, in
    ``O(len + sum)``. (``repeat_interleave(x, repeats, dim)`` reaches here through torch's decomposition,
    which then gathers ``x`` at these indices.)"""
    counts = ctx.cast(ctx.op.Reshape(repeats, ctx.const([-1], INT64)), INT64)
    ends = ctx.op.CumSum(counts, ctx.const(0, INT64))
    total = ctx.op.ReduceSum(counts, ctx.const([0], INT64), keepdims=1)  # [sum], 0 for no counts
    # one slot past the last position takes the ends equal to the total (the trailing zero counts)
    marks = ctx.op.ConstantOfShape(ctx.op.Add(total, ctx.const([1], INT64)),
                                   value=ir.tensor([0], dtype=INT64))
    ones = ctx.op.ConstantOfShape(ctx.op.Shape(counts), value=ir.tensor([1], dtype=INT64))
    marks = ctx.op.ScatterElements(marks, ends, ones, axis=0, reduction="add")
    index = ctx.op.CumSum(marks, ctx.const(0, INT64))
    out = ctx.cast(ctx.op.Slice(index, ctx.const([0], INT64), total, ctx.const([0], INT64)), repeats.dtype)
    out.shape = ir.Shape([None])
    return out


@aten(aten_.diff.default)
def diff(ctx: Ctx, x: ir.Value, n: int = 1, dim: int = -1, prepend: ir.Value | None = None,
         append: ir.Value | None = None) -> ir.Value:
    """diff(Tensor self, int n=1, int dim=-1, Tensor? prepend=None, Tensor? append=None) -> Tensor"""
    dim = norm_axis(dim, rank(x))
    parts = [p for p in (prepend, x, append) if p is not None]
    if len(parts) > 1:
        x = ctx.op.Concat(*[ctx.cast(p, x.dtype) for p in parts], axis=dim)
    for _ in range(n):
        later, earlier = slice_along(ctx, x, dim, 1, INT64_MAX), slice_along(ctx, x, dim, 0, -1)
        x = ctx.op.Xor(later, earlier) if x.dtype == ir.DataType.BOOL else ctx.op.Sub(later, earlier)
    return x


@aten(aten_.tile.default)
def tile(ctx: Ctx, x: ir.Value, dims: Sequence[Size]) -> ir.Value:
    """tile(Tensor self, SymInt[] dims) -> Tensor"""
    return repeat(ctx, x, [1] * (rank(x) - len(dims)) + list(dims))


@aten(aten_.flip.default)
def flip(ctx: Ctx, x: ir.Value, dims: Sequence[int]) -> ir.Value:
    """flip(Tensor self, int[] dims) -> Tensor"""
    r = rank(x)
    if not dims or r == 0:
        return x
    n = len(dims)
    return ctx.op.Slice(x, ctx.const([-1] * n, INT64), ctx.const([INT64_MIN] * n, INT64), axes(ctx, dims, r),
                        ctx.const([-1] * n, INT64))


@aten(aten_.roll.default)
def roll(ctx: Ctx, x: ir.Value, shifts: Sequence[Size], dims: Sequence[int] = ()) -> ir.Value:
    """roll(Tensor self, SymInt[1] shifts, int[1] dims=[]) -> Tensor"""
    if not dims:  # roll the flattened tensor, then restore the shape
        flat = ctx.op.Reshape(x, ctx.const([-1], INT64))
        numel = ctx.static_out_shape()
        size: Size = int(torch.Size(numel).numel()) if numel is not None else ctx.op.Size(x)
        return ctx.op.Reshape(_roll_axis(ctx, flat, 0, size, shifts[0]), ctx.op.Shape(x))
    r = rank(x)
    targets = [(norm_axis(dim, r), shift) for shift, dim in zip(shifts, dims)]
    sizes = [dim_size(ctx, x, axis) for axis, _ in targets]  # read before rolling: built values carry no shape
    for (axis, shift), size in zip(targets, sizes):
        x = _roll_axis(ctx, x, axis, size, shift)
    return x


def _roll_axis(ctx: Ctx, x: ir.Value, axis: int, size: Size, shift: Size) -> ir.Value:
    if isinstance(size, int) and isinstance(shift, int):
        cut: Size = size - shift % size if size else 0
    else:  # int64 Mod takes the divisor's sign like Python's %
        size_v = ctx.as_value(size, dtype=INT64)
        cut = ctx.op.Sub(size_v, ctx.op.Mod(ctx.as_value(shift, dtype=INT64), size_v))
    return ctx.op.Concat(slice_along(ctx, x, axis, cut, INT64_MAX), slice_along(ctx, x, axis, 0, cut), axis=axis)


def _pad(ctx: Ctx, x: ir.Value, pad: Sequence[Size], mode: str, value: Any = None) -> ir.Value:
    if mode == "edge" and any(isinstance(p, int) and p < 0 for p in pad):
        return _edge_pad_by_gather(ctx, x, pad)
    r = rank(x)
    k = len(pad) // 2
    # torch lists (begin, end) pairs from the last dim backwards; ONNX takes them first dim first, for
    # every dim: Pad with an `axes` input sends onnxruntime's transpose optimiser (its default level) out
    # of bounds where a Transpose meets the Pad (reflect padding between two transposes, float64)
    begins: list[Size] = [0] * r
    ends: list[Size] = [0] * r
    for i in range(k):
        begins[r - 1 - i], ends[r - 1 - i] = pad[2 * i], pad[2 * i + 1]
    fill = None
    if mode == "constant":
        fill = ctx.as_value(0 if value is None else value, dtype=x.dtype)
    return ctx.op.Pad(x, ctx.sizes(begins + ends), fill, mode=mode)


@aten(aten_.constant_pad_nd.default)
def constant_pad_nd(ctx: Ctx, x: ir.Value, pad: Sequence[Size], value: float = 0) -> ir.Value:
    """constant_pad_nd(Tensor self, SymInt[] pad, Scalar value=0) -> Tensor"""
    return _pad(ctx, x, pad, "constant", value)


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}


@aten(aten_.pad.default)
def pad(ctx: Ctx, x: ir.Value, pad: Sequence[Size], mode: str = "constant", value: float | None = None) -> ir.Value:
    """pad(Tensor self, SymInt[] pad, str mode="constant", float? value=None) -> Tensor"""
    if mode not in _PAD_MODES:
        raise ctx.unsupported(f"mode={mode!r}", fix="pad with mode 'constant', 'reflect', 'replicate' or 'circular'")
    # Pad mode 'wrap' is new in opset 19, and onnxruntime refuses it on empty tensors: slices where possible
    if mode == "circular" and (ctx.opset < 19 or all(isinstance(p, int) for p in pad)):
        return _circular_pad(ctx, x, pad)
    return _pad(ctx, x, pad, _PAD_MODES[mode], value)


def _circular_pad(ctx: Ctx, x: ir.Value, pad: Sequence[Size]) -> ir.Value:
    """torch's wrap-around: crop by the negative amounts, then put slices of the other end on each side,
    one axis after the other (corners wrap twice)."""
    if not all(isinstance(p, int) for p in pad):
        raise ctx.unsupported("circular padding by symbolic amounts before opset 19",
                              fix="export with opset=19 or newer (Pad mode 'wrap'), or pad by ints")
    r = rank(x)
    for i in range(len(pad) // 2):
        axis, begin, end = r - 1 - i, pad[2 * i], pad[2 * i + 1]
        if begin < 0 or end < 0:
            x = slice_along(ctx, x, axis, max(-begin, 0), end if end < 0 else INT64_MAX)
        begin, end = max(begin, 0), max(end, 0)
        parts = ([slice_along(ctx, x, axis, -begin, INT64_MAX)] if begin else []) + [x] + \
            ([slice_along(ctx, x, axis, 0, end)] if end else [])
        x = ctx.op.Concat(*parts, axis=axis) if len(parts) > 1 else x
    return x


def _edge_pad_by_gather(ctx: Ctx, x: ir.Value, pad: Sequence[Size]) -> ir.Value:
    """Replicate padding with negative amounts: output ``j`` reads input ``clamp(j - begin, 0, n - 1)``, as torch
    does, which keeps reading the edge where a crop leaves nothing (Pad 'edge' has no edge left to read)."""
    r = rank(x)
    targets = [(r - 1 - i, pad[2 * i], pad[2 * i + 1]) for i in range(len(pad) // 2)]
    sizes = [dim_size(ctx, x, axis) for axis, _, _ in targets]  # read before gathering: built values carry no shape
    for (axis, begin, end), n in zip(targets, sizes):
        if isinstance(n, int) and isinstance(begin, int) and isinstance(end, int):
            index = ctx.const([min(max(j - begin, 0), n - 1) for j in range(n + begin + end)], INT64)
        else:
            n, begin = ctx.as_value(n, dtype=INT64), ctx.as_value(begin, dtype=INT64)
            length = ctx.op.Add(ctx.op.Add(n, begin), ctx.as_value(end, dtype=INT64))
            shifted = ctx.op.Sub(ctx.op.Range(ctx.const(0, INT64), length, ctx.const(1, INT64)), begin)
            index = ctx.op.Max(ctx.op.Min(shifted, ctx.op.Sub(n, ctx.const(1, INT64))), ctx.const(0, INT64))
        x = ctx.op.Gather(x, index, axis=axis)
    return x


def _pad_mode(mode: str):
    def translate(ctx: Ctx, x: ir.Value, padding: Sequence[Size]) -> ir.Value:
        return _pad(ctx, x, padding, mode)

    translate.__doc__ = f"<reflection|replication>_padNd(Tensor self, SymInt[] padding) -> Tensor ({mode})"
    return translate


aten(aten_.reflection_pad1d.default, aten_.reflection_pad2d.default, aten_.reflection_pad3d.default)(
    _pad_mode("reflect"))
aten(aten_.replication_pad1d.default, aten_.replication_pad2d.default, aten_.replication_pad3d.default)(
    _pad_mode("edge"))


@aten(aten_.clone.default, aten_.contiguous.default, aten_.alias.default, aten_.alias_copy.default,
      aten_.detach.default, aten_.detach_copy.default, aten_.lift_fresh_copy.default, aten_.lift_fresh.default)
def identity(ctx: Ctx, x: ir.Value, *_: Any, **__: Any) -> ir.Value:
    """clone(Tensor self, *, MemoryFormat? memory_format=None) -> Tensor"""
    # values are immutable in ONNX, so a copy is the value itself
    return x


@aten(aten_._to_copy.default, aten_.to.dtype, aten_.to.dtype_layout, aten_.to.device, aten_.to.other,
      aten_.type_as.default)
def to(ctx: Ctx, x: ir.Value, *_: Any, **__: Any) -> ir.Value:
    """_to_copy(Tensor self, *, ScalarType? dtype=None, ...) -> Tensor"""
    return ctx.cast(x, ctx.out_dtype())


@aten(aten_.copy.default)
def copy(ctx: Ctx, x: ir.Value, src: ir.Value, non_blocking: bool = False) -> ir.Value:
    """copy(Tensor self, Tensor src, bool non_blocking=False) -> Tensor"""
    src = ctx.cast(src, x.dtype)
    if src.shape is not None and x.shape is not None and list(src.shape) == list(x.shape):
        return src
    return ctx.op.Expand(src, ctx.op.Shape(x))
