"""Ops whose output size depends on the data: nonzero, masked_select, unique, unique_consecutive.

ONNX gives such outputs a size known only at run time (NonZero, Compress, Unique), as torch does.
"""

from __future__ import annotations

import onnx_ir as ir
import torch

from onnxport.translate.builder import Ctx
from onnxport.translate.ops._common import FLOAT_TYPES, axes, norm_axis, rank, retype_outputs
from onnxport.translate.registry import aten, ops

aten_ = ops.aten
INT64 = ir.DataType.INT64
# Element types onnxruntime's Unique runs on; others go through int64 or float32 and back.
_UNIQUE_TYPES = frozenset({ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.INT64, ir.DataType.INT8})


def _flat(ctx: Ctx, x: ir.Value) -> ir.Value:
    return ctx.op.Reshape(x, ctx.const([-1]))


def _nonzero(ctx: Ctx, x: ir.Value) -> ir.Value:
    """``[count, rank]`` int64 coordinates of the non-zero elements, in row-major order."""
    x = ctx.cast(x, ir.DataType.BOOL)  # onnxruntime's NonZero runs on few types; NaN casts to True
    if rank(x) == 0:  # NonZero wants a dim: one of size 1, then none of the coordinates
        found = ctx.op.Transpose(ctx.op.NonZero(ctx.op.Reshape(x, ctx.const([1]))), perm=[1, 0])
        return ctx.op.Slice(found, ctx.const([0]), ctx.const([0]), ctx.const([1]))
    return ctx.op.Transpose(ctx.op.NonZero(x), perm=[1, 0])


@aten(aten_.nonzero.default)
def nonzero(ctx: Ctx, x: ir.Value) -> ir.Value:
    """nonzero(Tensor self) -> Tensor"""
    return _nonzero(ctx, x)


@aten(aten_.nonzero_static.default)
def nonzero_static(ctx: Ctx, x: ir.Value, *, size: int, fill_value: int = -1) -> ir.Value:
    """nonzero_static(Tensor self, *, SymInt size, int fill_value=-1) -> Tensor"""
    found = _nonzero(ctx, x)
    fill = ctx.op.Expand(ctx.const(fill_value, INT64), ctx.sizes([size, rank(x)]))
    padded = ctx.op.Concat(found, fill, axis=0)
    return ctx.op.Slice(padded, ctx.const([0]), ctx.sizes([size]), ctx.const([0]))


@aten(aten_.masked_select.default)
def masked_select(ctx: Ctx, x: ir.Value, mask: ir.Value) -> ir.Value:
    """masked_select(Tensor self, Tensor mask) -> Tensor"""
    shape = ctx.op.Shape(ctx.op.Where(mask, x, x))  # the broadcast of both
    return ctx.op.Compress(_flat(ctx, ctx.op.Expand(x, shape)), _flat(ctx, ctx.op.Expand(mask, shape)), axis=0)


def _int64_inverse_and_counts(ctx: Ctx) -> None:
    # eager's inverse and counts are int64; torch 2.10 records the input's dtype for them
    retype_outputs(ctx, {1: torch.int64, 2: torch.int64})


def _unique_input(ctx: Ctx, x: ir.Value) -> ir.Value:
    if x.dtype in _UNIQUE_TYPES:
        return x
    return ctx.cast(x, ir.DataType.FLOAT if x.dtype in FLOAT_TYPES else INT64)


@aten(aten_._unique2.default)
def unique2(ctx: Ctx, x: ir.Value, sorted: bool = True, return_inverse: bool = False,
            return_counts: bool = False) -> tuple[ir.Value, ir.Value, ir.Value]:
    """_unique2(Tensor self, bool sorted=True, bool return_inverse=False, bool return_counts=False) -> (Tensor, Tensor, Tensor)"""
    # torch sorts on CPU whatever `sorted` says; a sorted result is also a valid unsorted one.
    _int64_inverse_and_counts(ctx)
    values, _, inverse, counts = ctx.op.Unique(_flat(ctx, _unique_input(ctx, x)), sorted=1, _outputs=4)
    inverse = ctx.op.Reshape(inverse, ctx.op.Shape(x))
    return ctx.cast(values, x.dtype), inverse, counts


@aten(aten_.unique_dim.default)
def unique_dim(ctx: Ctx, x: ir.Value, dim: int, sorted: bool = True, return_inverse: bool = False,
               return_counts: bool = False) -> tuple[ir.Value, ir.Value, ir.Value]:
    """unique_dim(Tensor self, int dim, bool sorted=True, bool return_inverse=False, bool return_counts=False) -> (Tensor, Tensor, Tensor)"""
    _int64_inverse_and_counts(ctx)
    # ONNX sorts slices along `axis` lexicographically, as torch does
    values, _, inverse, counts = ctx.op.Unique(_unique_input(ctx, x), axis=norm_axis(dim, rank(x)), sorted=1,
                                               _outputs=4)
    return ctx.cast(values, x.dtype), inverse, counts


@aten(aten_.unique_consecutive.default)
def unique_consecutive(ctx: Ctx, x: ir.Value, return_inverse: bool = False, return_counts: bool = False,
                       dim: int | None = None) -> tuple[ir.Value, ir.Value, ir.Value]:
    """unique_consecutive(Tensor self, bool return_inverse=False, bool return_counts=False, int? dim=None) -> (Tensor, Tensor, Tensor)"""
    _int64_inverse_and_counts(ctx)
    if dim is None:
        data, d = _flat(ctx, x), 0
        others: list[int] = []
    else:
        data, d = x, norm_axis(dim, rank(x))
        others = [a for a in range(rank(x)) if a != d]
    zero, one = ctx.const([0]), ctx.const([1])
    # a run starts where a slice differs from the one before it (the first slice starts one); an empty
    # input gives an empty `before` too
    before = ctx.op.Concat(ctx.op.Slice(data, zero, one, ctx.const([d])),
                           ctx.op.Slice(data, zero, ctx.const([-1]), ctx.const([d])), axis=d)
    differs = ctx.op.Cast(ctx.op.Not(ctx.op.Equal(data, before)), to=int(INT64))
    if others:
        differs = ctx.op.ReduceSum(differs, axes(ctx, others), keepdims=0)
    n = ctx.op.Shape(data, start=d, end=d + 1)
    position = ctx.op.Range(ctx.const(0), ctx.op.Squeeze(n, zero), ctx.const(1))
    starts_run = ctx.op.Or(ctx.op.Cast(differs, to=int(ir.DataType.BOOL)), ctx.op.Equal(position, ctx.const(0)))
    values = ctx.op.Compress(data, starts_run, axis=d)
    inverse = ctx.op.Sub(ctx.op.CumSum(ctx.op.Cast(starts_run, to=int(INT64)), ctx.const(0)), ctx.const(1))
    if dim is None:
        inverse = ctx.op.Reshape(inverse, ctx.op.Shape(x))
    starts = ctx.op.Compress(position, starts_run, axis=0)
    ends = ctx.op.Concat(ctx.op.Slice(starts, one, ctx.const([2**62])), n, axis=0)
    return values, inverse, ctx.op.Sub(ends, starts)
