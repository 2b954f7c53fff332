"""Distances and products of several operands: cdist, pdist, dist, _trilinear (bilinear), addbmm,
cartesian_prod."""

from __future__ import annotations

import math
import string
from collections.abc import Sequence

import onnx_ir as ir

from onnxport.translate.builder import Ctx
from onnxport.translate.ops._common import axes, norm_axis, rank
from onnxport.translate.registry import aten, ops

aten_ = ops.aten
INT64 = ir.DataType.INT64


def _p_norm(ctx: Ctx, diff: ir.Value, p: float, dims: Sequence[int] | None) -> ir.Value:
    """The p-norm of ``diff`` over ``dims`` (all when None), with torch's special cases 0 and +-inf."""
    ax = axes(ctx, dims) if dims is not None else None
    if p == 0:  # how many differ
        nonzero = ctx.op.CastLike(ctx.op.Not(ctx.op.Equal(diff, ctx.const(0.0, like=diff))), diff)
        return ctx.op.ReduceSum(nonzero, ax, keepdims=0)
    size = ctx.op.Abs(diff)
    if math.isinf(p):
        return (ctx.op.ReduceMax if p > 0 else ctx.op.ReduceMin)(size, ax, keepdims=0)
    if p == 1:
        return ctx.op.ReduceSum(size, ax, keepdims=0)
    if p == 2:
        return ctx.op.Sqrt(ctx.op.ReduceSum(ctx.op.Mul(diff, diff), ax, keepdims=0))
    total = ctx.op.ReduceSum(ctx.op.Pow(size, ctx.const(float(p), like=diff)), ax, keepdims=0)
    return ctx.op.Pow(total, ctx.const(1.0 / p, like=diff))


def _pairwise(ctx: Ctx, x1: ir.Value, x2: ir.Value, p: float) -> ir.Value:
    """Distances between the rows of ``x1`` ``[..., P, M]`` and of ``x2`` ``[..., R, M]``: ``[..., P, R]``,
    from the differences of every pair (torch's direct kernel)."""
    diff = ctx.op.Sub(ctx.op.Unsqueeze(x1, axes(ctx, [-2])), ctx.op.Unsqueeze(x2, axes(ctx, [-3])))
    if math.isinf(p) and x1.shape[-1] == 0:  # no coordinates: torch gives zeros, ReduceMax would not
        return ctx.op.ReduceSum(ctx.op.Abs(diff), axes(ctx, [-1]), keepdims=0)
    return _p_norm(ctx, diff, p, [-1])


def _euclidean_by_matmul(ctx: Ctx, x1: ir.Value, x2: ir.Value) -> ir.Value:
    """torch's matmul form of the Euclidean distance, ``sqrt(max(|a|^2 - 2 a.b + |b|^2, 0))``, one
    matmul of ``[-2a, |a|^2, 1]`` by ``[b, 1, |b|^2]``, so that results round as torch's do."""
    last = axes(ctx, [-1])
    n1 = ctx.op.ReduceSum(ctx.op.Mul(x1, x1), last, keepdims=1)
    n2 = ctx.op.ReduceSum(ctx.op.Mul(x2, x2), last, keepdims=1)
    ones1 = ctx.op.Expand(ctx.const(1.0, like=x1), ctx.op.Shape(n1))
    ones2 = ctx.op.Expand(ctx.const(1.0, like=x2), ctx.op.Shape(n2))
    a = ctx.op.Concat(ctx.op.Mul(x1, ctx.const(-2.0, like=x1)), n1, ones1, axis=-1)
    b = ctx.op.Concat(x2, ones2, n2, axis=-1)
    r = rank(x2)
    bt = ctx.op.Transpose(b, perm=list(range(r - 2)) + [r - 1, r - 2])
    return ctx.op.Sqrt(ctx.op.Max(ctx.op.MatMul(a, bt), ctx.const(0.0, like=x1)))


@aten(aten_._cdist_forward.default)
def cdist_forward(ctx: Ctx, x1: ir.Value, x2: ir.Value, p: float, compute_mode: int | None = None) -> ir.Value:
    """_cdist_forward(Tensor x1, Tensor x2, float p, int? compute_mode) -> Tensor"""
    # torch takes the matmul form for p=2 with mode 1, or with mode 0 (None) past 25 rows
    rows = [x1.shape[-2], x2.shape[-2]]
    mode = compute_mode or 0
    if p == 2 and mode != 2 and (mode == 1 or any(not isinstance(n, int) or n > 25 for n in rows)):
        if mode == 0 and not all(isinstance(n, int) for n in rows):
            raise ctx.unsupported("cdist with p=2 and a row count known only at run time: torch picks its "
                                  "formula by the count", fix="pass compute_mode='use_mm_for_euclid_dist' or "
                                  "'donot_use_mm_for_euclid_dist'")
        if x1.shape[-1] != 0:
            x1b, x2b = _broadcast_batches(ctx, x1, x2)
            return _euclidean_by_matmul(ctx, x1b, x2b)
    return _pairwise(ctx, x1, x2, p)


def _broadcast_batches(ctx: Ctx, x1: ir.Value, x2: ir.Value) -> tuple[ir.Value, ir.Value]:
    """Both operands with their batch dims broadcast, so MatMul and Concat line up."""
    if rank(x1) == rank(x2) == 2:
        return x1, x2

    def corner(x: ir.Value) -> ir.Value:  # [..., 1, 1]: the batch dims alone
        return ctx.op.Slice(x, ctx.const([0, 0]), ctx.const([1, 1]), ctx.const([-2, -1]))

    batch = ctx.op.Shape(ctx.op.Add(corner(x1), corner(x2)), end=-2)
    out = []
    for x in (x1, x2):
        e = ctx.op.Expand(x, ctx.op.Concat(batch, ctx.op.Shape(x, start=-2), axis=0))
        e.shape = ir.Shape([None] * max(rank(x1), rank(x2)))
        out.append(e)
    return out[0], out[1]


@aten(aten_._pdist_forward.default)
def pdist_forward(ctx: Ctx, x: ir.Value, p: float = 2) -> ir.Value:
    """_pdist_forward(Tensor self, float p=2) -> Tensor"""
    # every pair's distance, then the upper triangle (i < j) in row-major order
    full = _pairwise(ctx, x, x, p)
    n = ctx.op.Shape(x, start=0, end=1)
    upper = ctx.op.Trilu(ctx.op.Expand(ctx.const(True), ctx.op.Concat(n, n, axis=0)), ctx.const(1), upper=1)
    flat = ctx.const([-1])
    return ctx.op.Compress(ctx.op.Reshape(full, flat), ctx.op.Reshape(upper, flat), axis=0)


@aten(aten_.dist.default)
def dist(ctx: Ctx, x: ir.Value, other: ir.Value, p: float = 2) -> ir.Value:
    """dist(Tensor self, Tensor other, Scalar p=2) -> Tensor"""
    dtype = ctx.out_dtype()
    return _p_norm(ctx, ctx.op.Sub(ctx.cast(x, dtype), ctx.cast(other, dtype)), float(p), None)


@aten(aten_._trilinear.default)
def trilinear(ctx: Ctx, i1: ir.Value, i2: ir.Value, i3: ir.Value, expand1: Sequence[int], expand2: Sequence[int],
              expand3: Sequence[int], sumdim: Sequence[int], unroll_dim: int = 1) -> ir.Value:
    """_trilinear(Tensor i1, Tensor i2, Tensor i3, int[] expand1, int[] expand2, int[] expand3, int[] sumdim, int unroll_dim=1) -> Tensor

    One Einsum: each operand holds the dims of the full rank it is not expanded along; the result keeps
    those not summed. A dim no operand holds stays as a 1 (or goes when summed).
    """
    total = rank(i1) + len(expand1)
    letters = string.ascii_letters[:total]
    expanded = [set(norm_axis(d, total) for d in e) for e in (expand1, expand2, expand3)]
    terms = ["".join(letters[d] for d in range(total) if d not in e) for e in expanded]
    summed = {norm_axis(d, total) for d in sumdim}
    held = [d for d in range(total) if any(d not in e for e in expanded)]
    out = "".join(letters[d] for d in held if d not in summed)
    product = ctx.op.Einsum(i1, i2, i3, equation=f"{','.join(terms)}->{out}")
    ones = [d for d in range(total) if d not in held and d not in summed]
    if ones:  # positions in the result's rank
        kept = [d for d in range(total) if d not in summed]
        product = ctx.op.Unsqueeze(product, axes(ctx, [kept.index(d) for d in ones]))
    return product


@aten(aten_.addbmm.default)
def addbmm(ctx: Ctx, x: ir.Value, batch1: ir.Value, batch2: ir.Value, *, beta: float = 1,
           alpha: float = 1) -> ir.Value:
    """addbmm(Tensor self, Tensor batch1, Tensor batch2, *, Scalar beta=1, Scalar alpha=1) -> Tensor"""
    dtype = ctx.out_dtype()
    product = ctx.op.ReduceSum(ctx.op.MatMul(ctx.cast(batch1, dtype), ctx.cast(batch2, dtype)), axes(ctx, [0]),
                               keepdims=0)
    if alpha != 1:
        product = ctx.op.Mul(product, ctx.const(alpha, dtype))
    if beta == 0:  # torch ignores self then, NaN and inf included
        return product
    x = ctx.cast(x, dtype)
    return ctx.op.Add(ctx.op.Mul(x, ctx.const(beta, dtype)) if beta != 1 else x, product)


@aten(aten_.cartesian_prod.default)
def cartesian_prod(ctx: Ctx, tensors: Sequence[ir.Value]) -> ir.Value:
    """cartesian_prod(Tensor[] tensors) -> Tensor"""
    if len(tensors) == 1:
        return ctx.op.Identity(tensors[0])
    k = len(tensors)
    grid = ctx.op.Concat(*[ctx.op.Shape(t) for t in tensors], axis=0)
    columns = []
    for i, t in enumerate(tensors):
        shape = [1] * k
        shape[i] = -1
        spread = ctx.op.Expand(ctx.op.Reshape(t, ctx.const(shape)), grid)
        columns.append(ctx.op.Reshape(spread, ctx.const([-1, 1])))
    return ctx.op.Concat(*columns, axis=1)
