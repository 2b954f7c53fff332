"""Max, average and adaptive pooling in 1, 2 and 3 spatial dimensions."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx_ir as ir
import torch

from onnxport.translate.builder import Ctx
from onnxport.translate.ops._common import arg_meta, rank, same_size
from onnxport.translate.ops.conv import spatial_ints, with_batch
from onnxport.translate.registry import aten, ops

aten_ = ops.aten

IntList = int | Sequence[int]


def _window(ctx: Ctx, kernel: IntList, stride: IntList, padding: IntList,
            nd: int) -> tuple[list[int], list[int], list[int]]:
    k = spatial_ints(ctx, kernel, nd, "kernel_size")
    # an empty stride list means stride = kernel_size
    s = spatial_ints(ctx, stride, nd, "stride") if stride not in (None, [], ()) else k
    return k, s, spatial_ints(ctx, padding, nd, "padding")


def _plane_size(ctx: Ctx, x: ir.Value, nd: int) -> ir.Value:
    """Elements in one spatial plane of ``x``, as an int64 scalar-like value."""
    dims = list(x.shape)[-nd:]
    if all(isinstance(d, int) for d in dims):
        return ctx.const(math.prod(dims), ir.DataType.INT64)
    return ctx.op.ReduceProd(ctx.op.Shape(x, start=-nd), keepdims=0)


def _planes_shape(ctx: Ctx, x: ir.Value, nd: int) -> ir.Value:
    """The shape of ``x`` with each spatial plane flattened, every size explicit: Reshape cannot infer a -1
    next to a 0-sized dim."""
    dims = list(x.shape)[-nd:]
    plane = (ctx.const([math.prod(dims)], ir.DataType.INT64) if all(isinstance(d, int) for d in dims)
             else ctx.op.ReduceProd(ctx.op.Shape(x, start=-nd), keepdims=1))
    return ctx.op.Concat(ctx.op.Shape(x, end=rank(x) - nd), plane, axis=0)


def _drop_padding_windows(ctx: Ctx, x: ir.Value, sizes: list[Any], out: ir.Value, k: list[int], s: list[int],
                          p: list[int], d: list[int]) -> ir.Value:
    """``out`` of a ``ceil_mode`` pool below opset 22, without the last window where it starts in the right
    padding: torch (and MaxPool/AveragePool from opset 22) drop that window, the older ops keep it. Static
    ``sizes`` (the spatial sizes of ``x``) are decided here; symbolic ones in the graph
    (``n - ((n - 1) * s >= size + p)``)."""
    nd, int64 = len(k), ir.DataType.INT64
    ends: list[ir.Value | int] = []
    kept = True  # no static size drops a window
    for axis, (size, kk, ss, pp, dd) in enumerate(zip(sizes, k, s, p, d)):
        if isinstance(size, int):
            n = -(-(size + 2 * pp - dd * (kk - 1) - 1) // ss) + 1
            drop = (n - 1) * ss >= size + pp
            kept = kept and not drop
            ends.append(n - 1 if drop else n)
            continue
        axis -= nd
        n = ctx.op.Shape(out, start=axis, end=axis + 1 if axis < -1 else None)
        size_v = ctx.op.Shape(x, start=axis, end=axis + 1 if axis < -1 else None)
        overhang = ctx.op.GreaterOrEqual(ctx.op.Mul(ctx.op.Sub(n, ctx.const([1], int64)), ctx.const([ss], int64)),
                                         ctx.op.Add(size_v, ctx.const([pp], int64)))
        ends.append(ctx.op.Sub(n, ctx.cast(overhang, int64)))
    if all(isinstance(e, int) for e in ends) and kept:
        return out
    end = (ctx.const(ends, int64) if all(isinstance(e, int) for e in ends)
           else ctx.op.Concat(*[ctx.const([e], int64) if isinstance(e, int) else e for e in ends], axis=0))
    return ctx.op.Slice(out, ctx.const([0] * nd, int64), end, ctx.const(list(range(-nd, 0)), int64))


def _ceil_pool(ctx: Ctx, x: ir.Value, nd: int, k: list[int], s: list[int], p: list[int], d: list[int],
               ceil_mode: bool, pool: Any) -> Any:
    """``pool`` over ``x`` (one output or a tuple), its ceil_mode overhang dropped as torch does at every opset."""
    sizes = list(x.shape)[-nd:]
    out = with_batch(ctx, x, nd, pool)
    if not ceil_mode or ctx.opset >= 22:
        return out
    if isinstance(out, tuple):
        return tuple(_drop_padding_windows(ctx, x, sizes, o, k, s, p, d) for o in out)
    return _drop_padding_windows(ctx, x, sizes, out, k, s, p, d)


def _max_pool(ctx: Ctx, x: ir.Value, nd: int, kernel: IntList, stride: IntList, padding: IntList,
              dilation: IntList, ceil_mode: bool, indices: bool) -> Any:
    k, s, p = _window(ctx, kernel, stride, padding, nd)
    dil = spatial_ints(ctx, dilation, nd, "dilation")
    attrs = {"kernel_shape": k, "strides": s, "pads": p + p, "dilations": dil, "ceil_mode": int(ceil_mode)}
    if not indices:
        return _ceil_pool(ctx, x, nd, k, s, p, dil, ceil_mode, lambda v: ctx.op.MaxPool(v, **attrs))
    out, flat = _ceil_pool(ctx, x, nd, k, s, p, dil, ceil_mode, lambda v: ctx.op.MaxPool(v, **attrs, _outputs=2))
    # ONNX indexes the whole tensor (N*C*plane); torch indexes within each (n, c) plane
    return out, ctx.op.Mod(flat, _plane_size(ctx, x, nd))


def _max_pool_translators(nd: int, plain: torch._ops.OpOverload, with_indices: torch._ops.OpOverload) -> None:
    def max_pool(ctx: Ctx, x: ir.Value, kernel_size: IntList, stride: IntList = (), padding: IntList = 0,
                 dilation: IntList = 1, ceil_mode: bool = False) -> ir.Value:
        return _max_pool(ctx, x, nd, kernel_size, stride, padding, dilation, ceil_mode, False)

    def max_pool_with_indices(ctx: Ctx, x: ir.Value, kernel_size: IntList, stride: IntList = (), padding: IntList = 0,
                              dilation: IntList = 1, ceil_mode: bool = False) -> tuple[ir.Value, ir.Value]:
        return _max_pool(ctx, x, nd, kernel_size, stride, padding, dilation, ceil_mode, True)

    for fn, target in ((max_pool, plain), (max_pool_with_indices, with_indices)):
        fn.__name__ = fn.__qualname__ = target.overloadpacket.__name__
        fn.__doc__ = str(target._schema).replace("aten::", "")
        aten(target)(fn)


_max_pool_translators(1, aten_.max_pool1d.default, aten_.max_pool1d_with_indices.default)
_max_pool_translators(2, aten_.max_pool2d.default, aten_.max_pool2d_with_indices.default)
_max_pool_translators(3, aten_.max_pool3d.default, aten_.max_pool3d_with_indices.default)


def _sum_window_sizes(in_sizes: list[int], out_sizes: list[int], k: list[int], s: list[int],
                      p: list[int]) -> np.ndarray:
    """Per output position, torch's count_include_pad divisor: padding counts, the ceil_mode overhang not."""
    per_dim = []
    for size, out, kk, ss, pp in zip(in_sizes, out_sizes, k, s, p):
        starts = np.arange(out) * ss - pp
        per_dim.append(np.minimum(starts + kk, size + pp) - starts)
    return math.prod(np.ix_(*per_dim)) if per_dim else np.ones(())


def _avg_pool(ctx: Ctx, x: ir.Value, nd: int, kernel: IntList, stride: IntList, padding: IntList, ceil_mode: bool,
              count_include_pad: bool, divisor_override: int | None) -> ir.Value:
    k, s, p = _window(ctx, kernel, stride, padding, nd)
    include = count_include_pad or bool(divisor_override)
    attrs = {"kernel_shape": k, "strides": s, "pads": p + p, "ceil_mode": int(ceil_mode),
             "count_include_pad": int(include)}
    out = _ceil_pool(ctx, x, nd, k, s, p, [1] * nd, ceil_mode, lambda v: ctx.op.AveragePool(v, **attrs))
    if not divisor_override:
        return out
    # window sum = average * the divisor count_include_pad used, then torch divides by the override
    in_sizes, out_sizes = list(x.shape)[-nd:], (ctx.static_out_shape() or [None] * nd)[-nd:]
    if all(isinstance(d, int) for d in in_sizes + out_sizes):
        counts = _sum_window_sizes(in_sizes, out_sizes, k, s, p)
    elif not ceil_mode:  # without ceil_mode no window overhangs the padded input
        counts = np.array(math.prod(k))
    else:
        return ctx.op.Mul(out, ctx.op.Div(_window_sizes_at_runtime(ctx, x, out, k, s, p),
                                          ctx.const(float(divisor_override), like=out)))
    return ctx.op.Mul(out, ctx.const(counts / divisor_override, like=out))


def _window_sizes_at_runtime(ctx: Ctx, x: ir.Value, out: ir.Value, k: list[int], s: list[int],
                             p: list[int]) -> ir.Value:
    """``_sum_window_sizes`` for symbolic spatial sizes, built in the graph from the input's and output's Shape."""
    nd, int64 = len(k), ir.DataType.INT64
    counts: ir.Value | None = None
    for d in range(nd):
        axis = d - nd
        size = ctx.op.Shape(x, start=axis, end=axis + 1 if axis < -1 else None)
        n_out = ctx.op.Squeeze(ctx.op.Shape(out, start=axis, end=axis + 1 if axis < -1 else None))
        starts = ctx.op.Sub(ctx.op.Mul(ctx.op.Range(ctx.const(0, int64), n_out, ctx.const(1, int64)),
                                       ctx.const(s[d], int64)), ctx.const(p[d], int64))
        ends = ctx.op.Min(ctx.op.Add(starts, ctx.const(k[d], int64)), ctx.op.Add(size, ctx.const(p[d], int64)))
        # this dim's sizes along its own axis of an (o_1, ..., o_nd) grid
        per_dim = _unsqueeze(ctx, ctx.op.Sub(ends, starts), [i for i in range(nd) if i != d])
        counts = per_dim if counts is None else ctx.op.Mul(counts, per_dim)
    return ctx.cast(counts, out.dtype)


@aten(aten_.avg_pool1d.default)
def avg_pool1d(ctx: Ctx, x: ir.Value, kernel_size: IntList, stride: IntList = (), padding: IntList = 0,
               ceil_mode: bool = False, count_include_pad: bool = True) -> ir.Value:
    """avg_pool1d(Tensor self, int[1] kernel_size, int[1] stride=[], int[1] padding=[0], bool ceil_mode=False, bool count_include_pad=True) -> Tensor"""
    return _avg_pool(ctx, x, 1, kernel_size, stride, padding, ceil_mode, count_include_pad, None)


@aten(aten_.avg_pool2d.default)
def avg_pool2d(ctx: Ctx, x: ir.Value, kernel_size: IntList, stride: IntList = (), padding: IntList = 0,
               ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> ir.Value:
    """avg_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None) -> Tensor"""
    return _avg_pool(ctx, x, 2, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


@aten(aten_.avg_pool3d.default)
def avg_pool3d(ctx: Ctx, x: ir.Value, kernel_size: IntList, stride: IntList = (), padding: IntList = 0,
               ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> ir.Value:
    """avg_pool3d(Tensor self, int[3] kernel_size, int[3] stride=[], int[3] padding=0, bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None) -> Tensor"""
    return _avg_pool(ctx, x, 3, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


def _unsqueeze(ctx: Ctx, x: ir.Value, new_axes: list[int]) -> ir.Value:
    return ctx.op.Unsqueeze(x, ctx.const(new_axes, ir.DataType.INT64)) if new_axes else x


Size = int | ir.Value


def _adaptive_sizes(ctx: Ctx, x: ir.Value, output_size: IntList, nd: int) -> tuple[list[Any], list[Size]]:
    """Input sizes (int or symbolic dims) and output sizes (int, or an int64 scalar value when symbolic)."""
    out = [output_size] if isinstance(output_size, (int, ir.Value)) else list(output_size)
    if len(out) == 1:
        out = out * nd
    return list(x.shape)[-nd:], out


def _kept(ctx: Ctx, axis: int) -> bool:
    """Whether the node's output has the input's size along ``axis`` (also when both are the same symbol)."""
    meta, shape = arg_meta(ctx, 0), ctx.out_shape()
    if not isinstance(meta, torch.Tensor) or shape is None:
        return False
    return same_size(meta.shape[axis], shape[axis])


def _averaging_matrix(size: int, out: int) -> np.ndarray:
    """(size, out) matrix averaging torch's adaptive window i: [floor(i*size/out), ceil((i+1)*size/out))."""
    matrix = np.zeros((size, out))
    for i in range(out):
        start, end = (i * size) // out, -((-(i + 1) * size) // out)
        matrix[start:end, i] = 1.0 / (end - start)
    return matrix


def _windows_at_runtime(ctx: Ctx, x: ir.Value, axis: int, out: Size) -> tuple[ir.Value, ...]:
    """Torch's adaptive windows along ``axis`` from Shape: (input size [1], start, end), each window i
    being [floor(i*n/o), ceil((i+1)*n/o)); ``out`` may be symbolic."""
    int64 = ir.DataType.INT64
    size = ctx.op.Shape(x, start=axis, end=axis + 1 if axis not in (-1, rank(x) - 1) else None)  # [n]
    o = ctx.sizes([out])  # [o]
    i = ctx.const(np.arange(out, dtype=np.int64)) if isinstance(out, int) else \
        ctx.op.Range(ctx.const(0, int64), ctx.op.Squeeze(o), ctx.const(1, int64))
    # sizes are non-negative, so Div is floor division; ceil(a / o) = (a + o - 1) // o
    start = ctx.op.Div(ctx.op.Mul(i, size), o)
    end = ctx.op.Div(ctx.op.Add(ctx.op.Mul(ctx.op.Add(i, ctx.const(1, int64)), size),
                                ctx.op.Sub(o, ctx.const(1, int64))), o)
    return size, start, end


def _averaging_matrix_at_runtime(ctx: Ctx, x: ir.Value, axis: int, out: Size) -> ir.Value:
    """``_averaging_matrix`` for a symbolic input or output size, built in the graph from Shape."""
    int64 = ir.DataType.INT64
    size, start, end = _windows_at_runtime(ctx, x, axis, out)
    rows = ctx.op.Unsqueeze(ctx.op.Range(ctx.const(0, int64), ctx.op.Squeeze(size), ctx.const(1, int64)),
                            ctx.const([1]))  # (n, 1)
    inside = ctx.op.And(ctx.op.GreaterOrEqual(rows, start), ctx.op.Less(rows, end))
    weight = ctx.op.Reciprocal(ctx.cast(ctx.op.Sub(end, start), x.dtype))
    return ctx.op.Where(inside, weight, ctx.const(0.0, like=x))


def _adaptive_avg_by_matmul(ctx: Ctx, x: ir.Value, in_sizes: list[Any], out: list[Size]) -> ir.Value:
    """Uneven windows: adaptive averaging is separable, one matrix per spatial dim (n_in, n_out)."""
    nd, r = len(out), rank(x)
    y = x
    for i, (size, o) in enumerate(zip(in_sizes, out)):
        axis = r - nd + i
        if (isinstance(o, int) and size == o) or _kept(ctx, axis):
            continue
        perm = list(range(r))
        perm[axis], perm[-1] = perm[-1], perm[axis]
        moved = y if axis == r - 1 else ctx.op.Transpose(y, perm=perm)
        matrix = (ctx.const(_averaging_matrix(size, o), like=x) if isinstance(size, int) and isinstance(o, int)
                  else _averaging_matrix_at_runtime(ctx, x, axis, o))
        moved = ctx.op.MatMul(moved, matrix)
        y = moved if axis == r - 1 else ctx.op.Transpose(moved, perm=perm)
    return y


def _adaptive_avg_pool(ctx: Ctx, x: ir.Value, output_size: IntList, nd: int) -> ir.Value:
    in_sizes, out = _adaptive_sizes(ctx, x, output_size, nd)
    if all(o == 1 for o in out):
        return with_batch(ctx, x, nd, lambda v: ctx.op.GlobalAveragePool(v))
    if not all(isinstance(d, int) for d in in_sizes + out):
        return _adaptive_avg_by_matmul(ctx, x, in_sizes, out)
    if in_sizes == out:
        return ctx.op.Identity(x)
    if all(d % o == 0 for d, o in zip(in_sizes, out)):
        k = [d // o for d, o in zip(in_sizes, out)]
        return with_batch(ctx, x, nd, lambda v: ctx.op.AveragePool(v, kernel_shape=k, strides=k))
    return _adaptive_avg_by_matmul(ctx, x, in_sizes, out)


@aten(aten_.adaptive_avg_pool1d.default)
def adaptive_avg_pool1d(ctx: Ctx, x: ir.Value, output_size: IntList) -> ir.Value:
    """adaptive_avg_pool1d(Tensor self, int[1] output_size) -> Tensor"""
    return _adaptive_avg_pool(ctx, x, output_size, 1)


@aten(aten_.adaptive_avg_pool2d.default, aten_._adaptive_avg_pool2d.default)
def adaptive_avg_pool2d(ctx: Ctx, x: ir.Value, output_size: IntList) -> ir.Value:
    """adaptive_avg_pool2d(Tensor self, SymInt[2] output_size) -> Tensor"""
    return _adaptive_avg_pool(ctx, x, output_size, 2)


@aten(aten_.adaptive_avg_pool3d.default, aten_._adaptive_avg_pool3d.default)
def adaptive_avg_pool3d(ctx: Ctx, x: ir.Value, output_size: IntList) -> ir.Value:
    """adaptive_avg_pool3d(Tensor self, SymInt[3] output_size) -> Tensor"""
    return _adaptive_avg_pool(ctx, x, output_size, 3)


def _adaptive_max_pool(ctx: Ctx, x: ir.Value, output_size: IntList, nd: int) -> tuple[ir.Value, ir.Value]:
    in_sizes, out = _adaptive_sizes(ctx, x, output_size, nd)
    r = rank(x)
    lead = ctx.op.Shape(x, end=r - nd)
    if all(o == 1 for o in out):
        # flatten each plane: the argmax is then torch's per-plane index
        flat = ctx.op.Reshape(x, _planes_shape(ctx, x, nd))
        shape = ctx.op.Concat(lead, ctx.const([1] * nd), axis=0)
        value = ctx.op.Reshape(ctx.op.ReduceMax(flat, ctx.const([-1]), keepdims=1), shape)
        return value, ctx.op.Reshape(ctx.op.ArgMax(flat, axis=-1, keepdims=1), shape)
    if all(isinstance(d, int) and isinstance(o, int) and d % o == 0 for d, o in zip(in_sizes, out)):
        k = [d // o for d, o in zip(in_sizes, out)]
        return _max_pool(ctx, x, nd, k, k, 0, 1, False, True)
    return _adaptive_max_by_gather(ctx, x, in_sizes, out, lead)


def _adaptive_max_by_gather(ctx: Ctx, x: ir.Value, in_sizes: list[Any], out: list[Size],
                            lead: ir.Value) -> tuple[ir.Value, ir.Value]:
    """Uneven windows: gather every window of the flattened plane (short windows repeat their last
    element), then ReduceMax and ArgMax over it. The first maximum is torch's, in row-major order."""
    nd, r, int64 = len(out), rank(x), ir.DataType.INT64
    table = _window_indices(ctx, x, in_sizes, out)  # (prod(out), K): plane index of each window element
    flat = ctx.op.Reshape(x, _planes_shape(ctx, x, nd))
    windows = ctx.op.Gather(flat, table, axis=r - nd)  # (..., prod(out), K)
    value = ctx.op.ReduceMax(windows, ctx.const([-1]), keepdims=0)
    best = ctx.op.ArgMax(windows, axis=-1, keepdims=0)  # (..., prod(out)): window position of the maximum
    count = ctx.op.Squeeze(ctx.op.Shape(table, end=1))
    rows = ctx.op.Mul(ctx.op.Range(ctx.const(0, int64), count, ctx.const(1, int64)), ctx.op.Shape(table, start=1))
    index = ctx.op.Gather(ctx.op.Reshape(table, ctx.const([-1])), ctx.op.Add(best, rows), axis=0)
    shape = ctx.op.Concat(lead, ctx.sizes(out), axis=0)
    return ctx.op.Reshape(value, shape), ctx.op.Reshape(index, shape)


def _window_indices(ctx: Ctx, x: ir.Value, in_sizes: list[Any], out: list[Size]) -> ir.Value:
    """(prod(out), K) int64 plane indices of torch's adaptive windows [floor(i*n/o), ceil((i+1)*n/o)),
    per dim, combined row-major; a constant when the sizes are static."""
    nd, int64 = len(out), ir.DataType.INT64
    if all(isinstance(d, int) for d in in_sizes + out):
        table = np.zeros(())
        for d, (n, o) in enumerate(zip(in_sizes, out)):
            i = np.arange(o)
            start, end = (i * n) // o, -((-(i + 1) * n) // o)
            t = np.minimum(start[:, None] + np.arange(int((end - start).max()))[None, :], end[:, None] - 1)
            grid = [o if j == d else 1 for j in range(nd)] + [-1 if j == d else 1 for j in range(nd)]
            table = table * n + t.reshape(grid)  # o on axis d, the window on axis nd + d
        return ctx.const(table.reshape(math.prod(out), -1).astype(np.int64))
    table: ir.Value | None = None
    for d, o in enumerate(out):
        n, start, end = _windows_at_runtime(ctx, x, d - nd, o)
        k = ctx.op.ReduceMax(ctx.op.Sub(end, start), keepdims=0)
        j = ctx.op.Range(ctx.const(0, int64), k, ctx.const(1, int64))
        t = ctx.op.Min(ctx.op.Add(ctx.op.Unsqueeze(start, ctx.const([1])), ctx.op.Unsqueeze(j, ctx.const([0]))),
                       ctx.op.Unsqueeze(ctx.op.Sub(end, ctx.const(1, int64)), ctx.const([1])))
        # (o, K) -> o on axis d and K on axis nd + d of a 2*nd-rank grid
        t = _unsqueeze(ctx, t, [a for a in range(2 * nd) if a not in (d, nd + d)])
        table = t if table is None else ctx.op.Add(ctx.op.Mul(table, n), t)
    count = ctx.op.ReduceProd(ctx.sizes(out), keepdims=1)  # [prod(out)]
    return ctx.op.Reshape(table, ctx.op.Concat(count, ctx.const([-1]), axis=0))


@aten(aten_.adaptive_max_pool1d.default)
def adaptive_max_pool1d(ctx: Ctx, x: ir.Value, output_size: IntList) -> tuple[ir.Value, ir.Value]:
    """adaptive_max_pool1d(Tensor self, int[1] output_size) -> (Tensor, Tensor)"""
    return _adaptive_max_pool(ctx, x, output_size, 1)


@aten(aten_.adaptive_max_pool2d.default)
def adaptive_max_pool2d(ctx: Ctx, x: ir.Value, output_size: IntList) -> tuple[ir.Value, ir.Value]:
    """adaptive_max_pool2d(Tensor self, int[2] output_size) -> (Tensor, Tensor)"""
    return _adaptive_max_pool(ctx, x, output_size, 2)


@aten(aten_.adaptive_max_pool3d.default)
def adaptive_max_pool3d(ctx: Ctx, x: ir.Value, output_size: IntList) -> tuple[ir.Value, ir.Value]:
    """adaptive_max_pool3d(Tensor self, int[3] output_size) -> (Tensor, Tensor)"""
    return _adaptive_max_pool(ctx, x, output_size, 3)


def _fractional_starts(ctx: Ctx, samples: ir.Value, d: int, size: int, out: int, pool: int) -> ir.Value:
    """(N, C, out) int64 window starts along one dim, torch's intervals from the uniform sample u:
    ``int((i + u) * alpha) - int(u * alpha)`` with ``alpha = (size - pool) / (out - 1)``, the last at size - pool."""
    int64, dtype = ir.DataType.INT64, samples.dtype
    u = ctx.op.Gather(samples, ctx.const([d], int64), axis=2)  # (N, C, 1)
    last = ctx.const(size - pool, int64)
    if out == 1:
        return ctx.op.Expand(last, ctx.op.Shape(u))
    # the sample's dtype, as torch computes in the input's scalar type; Cast truncates as static_cast does
    alpha = ctx.const(np.float64(size - pool) / np.float64(out - 1), dtype)
    i = ctx.const(np.arange(out, dtype=np.float64), dtype)
    starts = ctx.op.Sub(ctx.cast(ctx.op.Mul(ctx.op.Add(i, u), alpha), int64), ctx.cast(ctx.op.Mul(u, alpha), int64))
    return ctx.op.Where(ctx.const(np.arange(out) == out - 1), last, starts)


def _fractional_max_pool(ctx: Ctx, x: ir.Value, kernel: IntList, output_size: IntList, samples: ir.Value,
                         nd: int) -> tuple[ir.Value, ir.Value]:
    """Max over pseudo-random windows: the window starts come from ``samples`` (N, C, nd), one uniform draw per
    plane and dim (dims in order: torch's 2-D kernel reads its two samples width first, the 3-D one depth first)."""
    k, o = spatial_ints(ctx, kernel, nd, "kernel_size"), spatial_ints(ctx, output_size, nd, "output_size")
    sizes = list(x.shape)[-nd:]
    if not all(isinstance(n, int) for n in sizes):
        raise ctx.unsupported("fractional max pooling of symbolic spatial sizes",
                              fix="make the spatial sizes static (leave them out of dynamic_shapes)")
    return with_batch(ctx, x, nd, lambda v: _fractional_windows_max(ctx, v, sizes, k, o, samples))


def _fractional_windows_max(ctx: Ctx, x: ir.Value, sizes: list[int], k: list[int], o: list[int],
                            samples: ir.Value) -> tuple[ir.Value, ir.Value]:
    nd, int64 = len(sizes), ir.DataType.INT64
    order = [1, 0] if nd == 2 else list(range(nd))  # the sample index used for spatial dim d
    table: ir.Value | None = None  # plane index of every window element, (N, C, o_1..o_nd, k_1..k_nd)
    for d in range(nd):
        starts = _fractional_starts(ctx, samples, order[d], sizes[d], o[d], k[d])
        t = ctx.op.Add(ctx.op.Unsqueeze(starts, ctx.const([-1], int64)), ctx.const(np.arange(k[d]), int64))
        shape = [o[d] if a == d else 1 for a in range(nd)] + [k[d] if a == d else 1 for a in range(nd)]
        t = ctx.op.Reshape(t, ctx.op.Concat(ctx.op.Shape(t, end=2), ctx.const(shape, int64), axis=0))
        table = t if table is None else ctx.op.Add(ctx.op.Mul(table, ctx.const(sizes[d], int64)), t)
    # (x may have lost its static shape to with_batch's Unsqueeze: the sizes are explicit)
    lead = ctx.op.Shape(x, end=2)
    table = ctx.op.Reshape(table, ctx.op.Concat(lead, ctx.const([math.prod(o), math.prod(k)], int64), axis=0))
    flat = ctx.op.Reshape(x, ctx.op.Concat(lead, ctx.const([math.prod(sizes)], int64), axis=0))
    every = ctx.op.Reshape(table, ctx.op.Concat(lead, ctx.const([math.prod(o) * math.prod(k)], int64), axis=0))
    windows = ctx.op.Reshape(ctx.op.GatherElements(flat, every, axis=2), ctx.op.Shape(table))
    value = ctx.op.ReduceMax(windows, ctx.const([-1], int64), keepdims=0)
    best = ctx.op.ArgMax(windows, axis=-1, keepdims=1)  # the first maximum in row-major order, as torch's
    index = ctx.op.Squeeze(ctx.op.GatherElements(table, best, axis=-1), ctx.const([-1], int64))
    shape = ctx.op.Concat(lead, ctx.const(o, int64), axis=0)
    return ctx.op.Reshape(value, shape), ctx.op.Reshape(index, shape)


@aten(aten_.fractional_max_pool2d.default)
def fractional_max_pool2d(ctx: Ctx, x: ir.Value, kernel_size: IntList, output_size: IntList,
                          random_samples: ir.Value) -> tuple[ir.Value, ir.Value]:
    """fractional_max_pool2d(Tensor self, int[2] kernel_size, int[2] output_size, Tensor random_samples) -> (Tensor, Tensor)"""
    return _fractional_max_pool(ctx, x, kernel_size, output_size, random_samples, 2)


@aten(aten_.fractional_max_pool3d.default)
def fractional_max_pool3d(ctx: Ctx, x: ir.Value, kernel_size: IntList, output_size: IntList,
                          random_samples: ir.Value) -> tuple[ir.Value, ir.Value]:
    """fractional_max_pool3d(Tensor self, int[3] kernel_size, int[3] output_size, Tensor random_samples) -> (Tensor, Tensor)"""
    return _fractional_max_pool(ctx, x, kernel_size, output_size, random_samples, 3)


def _max_pool_backward(ctx: Ctx, grad: ir.Value, x: ir.Value, indices: ir.Value, nd: int) -> ir.Value:
    """Each output's gradient added at the plane index its maximum came from (indices as torch's, per plane)."""
    flat, outs = _planes_shape(ctx, x, nd), _planes_shape(ctx, grad, nd)
    # onnxruntime adds with ScatterElements in float32 and float64 only
    dtype = grad.dtype if grad.dtype in (ir.DataType.FLOAT, ir.DataType.DOUBLE) else ir.DataType.FLOAT
    zeros = ctx.op.Expand(ctx.const(0.0, dtype), flat)
    summed = ctx.op.ScatterElements(zeros, ctx.op.Reshape(indices, outs), ctx.op.Reshape(ctx.cast(grad, dtype), outs),
                                    axis=-1, reduction="add")
    return ctx.cast(ctx.op.Reshape(summed, ctx.op.Shape(x)), grad.dtype)


@aten(aten_.max_pool2d_with_indices_backward.default)
def max_pool2d_with_indices_backward(ctx: Ctx, grad_output: ir.Value, x: ir.Value, kernel_size: IntList,
                                     stride: IntList, padding: IntList, dilation: IntList, ceil_mode: bool,
                                     indices: ir.Value) -> ir.Value:
    """max_pool2d_with_indices_backward(Tensor grad_output, Tensor self, int[2] kernel_size, int[2] stride, int[2] padding, int[2] dilation, bool ceil_mode, Tensor indices) -> Tensor"""
    return _max_pool_backward(ctx, grad_output, x, indices, 2)


@aten(aten_.max_pool3d_with_indices_backward.default)
def max_pool3d_with_indices_backward(ctx: Ctx, grad_output: ir.Value, x: ir.Value, kernel_size: IntList,
                                     stride: IntList, padding: IntList, dilation: IntList, ceil_mode: bool,
                                     indices: ir.Value) -> ir.Value:
    """max_pool3d_with_indices_backward(Tensor grad_output, Tensor self, int[3] kernel_size, int[3] stride, int[3] padding, int[3] dilation, bool ceil_mode, Tensor indices) -> Tensor"""
    return _max_pool_backward(ctx, grad_output, x, indices, 3)
