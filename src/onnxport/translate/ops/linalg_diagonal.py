"""Diagonals: ``diagonal`` (and ``linalg_diagonal``) read one, ``diagonal_scatter`` writes one.

The two dims move last, are flattened into one, and the diagonal is a ``Gather`` (or ``ScatterElements``)
at flat positions ``(i + row0) * cols + i + col0``. Static sizes give constant positions; symbolic ones
compute them in the graph.
"""

from __future__ import annotations

import onnx_ir as ir

from onnxport.translate.builder import Ctx
from onnxport.translate.ops._common import norm_axis, rank
from onnxport.translate.registry import aten, ops

aten_ = ops.aten
I64 = ir.DataType.INT64


def _to_end(ctx: Ctx, x: ir.Value, dim1: int, dim2: int) -> tuple[ir.Value, list[int]]:
    """``x`` with ``dim1``, ``dim2`` moved last (in that order), and the permutation used."""
    r = rank(x)
    d1, d2 = norm_axis(dim1, r), norm_axis(dim2, r)
    if d1 == d2:
        raise ctx.unsupported(f"dim1 and dim2 are both {d1}", fix="pass two different dims")
    perm = [d for d in range(r) if d not in (d1, d2)] + [d1, d2]
    return (x if perm == list(range(r)) else ctx.op.Transpose(x, perm=perm)), perm


def _positions(ctx: Ctx, x: ir.Value, dim1: int, dim2: int, offset: int) -> tuple[ir.Value, ir.Value]:
    """The flat positions of the diagonal in the flattened (rows x cols) plane, and rows * cols."""
    r = rank(x)
    rows, cols = x.shape.dims[norm_axis(dim1, r)], x.shape.dims[norm_axis(dim2, r)]
    row0, col0 = max(-offset, 0), max(offset, 0)
    if isinstance(rows, int) and isinstance(cols, int):
        length = max(0, min(rows - row0, cols - col0))
        flat = [(i + row0) * cols + i + col0 for i in range(length)]
        return ctx.const(flat, I64), ctx.const([rows * cols], I64)
    shape = ctx.op.Shape(x)
    rows_v = ctx.op.Gather(shape, ctx.const([norm_axis(dim1, r)], I64), axis=0)
    cols_v = ctx.op.Gather(shape, ctx.const([norm_axis(dim2, r)], I64), axis=0)
    span = ctx.op.Min(ctx.op.Sub(rows_v, ctx.const([row0], I64)), ctx.op.Sub(cols_v, ctx.const([col0], I64)))
    length = ctx.op.Max(span, ctx.const([0], I64))
    i = ctx.op.Range(ctx.const(0, I64), ctx.op.Squeeze(length, ctx.const([0], I64)), ctx.const(1, I64))
    flat = ctx.op.Add(ctx.op.Mul(ctx.op.Add(i, ctx.const(row0, I64)), ctx.op.Squeeze(cols_v, ctx.const([0], I64))),
                      ctx.op.Add(i, ctx.const(col0, I64)))
    return flat, ctx.op.Mul(rows_v, cols_v)


def _flatten_last_two(ctx: Ctx, x: ir.Value, r: int, area: ir.Value) -> ir.Value:
    """``x`` of rank ``r`` with its last two dims flattened into one of size ``area``."""
    keep = ctx.const([0] * (r - 2), I64)
    return ctx.op.Reshape(x, ctx.op.Concat(keep, area, axis=0))


@aten(aten_.diagonal.default)
def diagonal(ctx: Ctx, x: ir.Value, offset: int = 0, dim1: int = 0, dim2: int = 1) -> ir.Value:
    """diagonal(Tensor(a) self, int offset=0, int dim1=0, int dim2=1) -> Tensor(a)"""
    moved, _ = _to_end(ctx, x, dim1, dim2)
    flat, area = _positions(ctx, x, dim1, dim2, offset)
    return ctx.op.Gather(_flatten_last_two(ctx, moved, rank(x), area), flat, axis=-1)


@aten(aten_.linalg_diagonal.default)
def linalg_diagonal(ctx: Ctx, a: ir.Value, *, offset: int = 0, dim1: int = -2, dim2: int = -1) -> ir.Value:
    """linalg_diagonal(Tensor(a) A, *, int offset=0, int dim1=-2, int dim2=-1) -> Tensor(a)"""
    return diagonal(ctx, a, offset, dim1, dim2)


@aten(aten_.diagonal_scatter.default)
def diagonal_scatter(
    ctx: Ctx, x: ir.Value, src: ir.Value, offset: int = 0, dim1: int = 0, dim2: int = 1
) -> ir.Value:
    """diagonal_scatter(Tensor self, Tensor src, int offset=0, int dim1=0, int dim2=1) -> Tensor"""
    moved, perm = _to_end(ctx, x, dim1, dim2)
    flat, area = _positions(ctx, x, dim1, dim2, offset)
    index = ctx.op.Expand(flat, ctx.op.Shape(src))
    flat_x = _flatten_last_two(ctx, moved, rank(x), area)
    written = ctx.op.ScatterElements(flat_x, index, ctx.cast(src, x.dtype), axis=-1)
    out = ctx.op.Reshape(written, ctx.op.Shape(moved))
    if perm == list(range(len(perm))):
        return out
    inverse = [perm.index(d) for d in range(len(perm))]
    return ctx.op.Transpose(out, perm=inverse)
