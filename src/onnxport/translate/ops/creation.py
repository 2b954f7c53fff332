"""Tensor factories: full/zeros/ones/empty and their *_like / new_* forms, arange, linspace, eye, tril/triu,
the window functions (hann, hamming, blackman, bartlett, kaiser).

The output dtype always comes from torch's metadata (``ctx.out_dtype()``), which already applies the
dtype keyword and torch's defaults. Sizes may hold int64 scalar values (symbolic sizes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx_ir as ir
import torch
from onnx_ir.tensor_adapters import to_torch_dtype

from onnxport.translate.builder import Ctx
from onnxport.translate.registry import aten, ops

aten_ = ops.aten
INT64 = ir.DataType.INT64
DOUBLE = ir.DataType.DOUBLE
Size = int | ir.Value

# onnxruntime's Range and EyeLike lack small float types and bool; compute wide, then cast
_RANGE_TYPES = frozenset({ir.DataType.FLOAT, DOUBLE, ir.DataType.INT16, ir.DataType.INT32, INT64})


def _filled(ctx: Ctx, shape: ir.Value, value: Any) -> ir.Value:
    """A tensor of ``shape`` (1-D int64) filled with ``value`` in the node's output dtype."""
    dtype = ctx.out_dtype()
    if isinstance(value, ir.Value):  # a symbolic scalar or a 0-d tensor
        return ctx.op.Expand(ctx.cast(value, dtype), shape)
    fill = ir.tensor(np.array([value]).astype(dtype.numpy()), dtype=dtype)
    return ctx.op.ConstantOfShape(shape, value=fill)


def _size_of(ctx: Ctx, like: ir.Value) -> ir.Value:
    static = ctx.static_out_shape()
    return ctx.const(static, INT64) if static is not None else ctx.op.Shape(like)


def _sizes(ctx: Ctx, size: Sequence[Size]) -> ir.Value:
    static = ctx.static_out_shape()
    return ctx.const(static, INT64) if static is not None else ctx.sizes(list(size))


@aten(aten_.full.default)
def full(ctx: Ctx, size: Sequence[Size], fill_value: Any, **_: Any) -> ir.Value:
    """full(SymInt[] size, Scalar fill_value, *, ScalarType? dtype=None, ...) -> Tensor"""
    return _filled(ctx, _sizes(ctx, size), fill_value)


@aten(aten_.zeros.default, aten_.empty.memory_format, aten_.empty_strided.default)
def zeros(ctx: Ctx, size: Sequence[Size], *_: Any, **__: Any) -> ir.Value:
    """zeros(SymInt[] size, *, ScalarType? dtype=None, ...) -> Tensor"""
    # empty's contents are unspecified; zeros are a valid choice
    return _filled(ctx, _sizes(ctx, size), 0)


@aten(aten_.ones.default)
def ones(ctx: Ctx, size: Sequence[Size], **_: Any) -> ir.Value:
    """ones(SymInt[] size, *, ScalarType? dtype=None, ...) -> Tensor"""
    return _filled(ctx, _sizes(ctx, size), 1)


@aten(aten_.scalar_tensor.default)
def scalar_tensor(ctx: Ctx, s: Any, **_: Any) -> ir.Value:
    """scalar_tensor(Scalar s, *, ScalarType? dtype=None, ...) -> Tensor"""
    if isinstance(s, ir.Value):
        return ctx.cast(s, ctx.out_dtype())
    return ctx.const(s, ctx.out_dtype())


@aten(aten_.full_like.default)
def full_like(ctx: Ctx, x: ir.Value, fill_value: Any, **_: Any) -> ir.Value:
    """full_like(Tensor self, Scalar fill_value, *, ScalarType? dtype=None, ...) -> Tensor"""
    return _filled(ctx, _size_of(ctx, x), fill_value)


@aten(aten_.zeros_like.default, aten_.empty_like.default)
def zeros_like(ctx: Ctx, x: ir.Value, **_: Any) -> ir.Value:
    """zeros_like(Tensor self, *, ScalarType? dtype=None, ...) -> Tensor"""
    return _filled(ctx, _size_of(ctx, x), 0)


@aten(aten_.ones_like.default)
def ones_like(ctx: Ctx, x: ir.Value, **_: Any) -> ir.Value:
    """ones_like(Tensor self, *, ScalarType? dtype=None, ...) -> Tensor"""
    return _filled(ctx, _size_of(ctx, x), 1)


@aten(aten_.fill.Scalar, aten_.fill.Tensor)
def fill(ctx: Ctx, x: ir.Value, value: Any) -> ir.Value:
    """fill.Scalar(Tensor self, Scalar value) -> Tensor"""
    return _filled(ctx, _size_of(ctx, x), value)


@aten(aten_.new_zeros.default, aten_.new_empty.default, aten_.new_empty_strided.default)
def new_zeros(ctx: Ctx, x: ir.Value, size: Sequence[Size], *_: Any, **__: Any) -> ir.Value:
    """new_zeros(Tensor self, SymInt[] size, *, ScalarType? dtype=None, ...) -> Tensor"""
    return _filled(ctx, _sizes(ctx, size), 0)


@aten(aten_.new_ones.default)
def new_ones(ctx: Ctx, x: ir.Value, size: Sequence[Size], **_: Any) -> ir.Value:
    """new_ones(Tensor self, SymInt[] size, *, ScalarType? dtype=None, ...) -> Tensor"""
    return _filled(ctx, _sizes(ctx, size), 1)


@aten(aten_.new_full.default)
def new_full(ctx: Ctx, x: ir.Value, size: Sequence[Size], fill_value: Any, **_: Any) -> ir.Value:
    """new_full(Tensor self, SymInt[] size, Scalar fill_value, *, ScalarType? dtype=None, ...) -> Tensor"""
    return _filled(ctx, _sizes(ctx, size), fill_value)


@aten(aten_.arange.default, aten_.arange.start, aten_.arange.start_step)
def arange(ctx: Ctx, *args: Any, **_: Any) -> ir.Value:
    """arange.start_step(Scalar start, Scalar end, Scalar step=1, *, ScalarType? dtype=None, ...) -> Tensor"""
    # the positional arguments are the Scalars (a bool counts as 0 or 1); dtype and the rest are keywords
    numbers = [int(a) if isinstance(a, bool) else a for a in args if isinstance(a, (int, float, ir.Value))]
    start, end, step = (0, numbers[0], 1) if len(numbers) == 1 else (*numbers[:2], numbers[2] if len(numbers) > 2 else 1)
    dtype = ctx.out_dtype()
    if not any(isinstance(v, ir.Value) for v in (start, end, step)):  # fully known: a constant
        return ctx.const(torch.arange(start, end, step, dtype=to_torch_dtype(dtype)), dtype)
    values = [ctx.as_value(v) for v in (start, end, step)]
    if all(v.dtype == INT64 for v in values):
        if isinstance(start, int) and start >= 0 and isinstance(step, int) and step > 0:
            return ctx.cast(ctx.op.Range(*values), dtype)
        # onnxruntime (ENABLE_EXTENDED) rewrites Range -> Gather as Slice(start, end, step), which reads a
        # negative start or end from the back; counting up from 0 and adding start keeps Gather off Range
        offsets = ctx.op.Range(ctx.const(0, INT64), ctx.op.Sub(values[1], values[0]), values[2])
        return ctx.cast(ctx.op.Add(offsets, values[0]), dtype)
    # torch computes start + i * step in double, not by repeated addition
    start_d, end_d, step_d = (ctx.cast(v, DOUBLE) for v in values)
    count = ctx.op.Ceil(ctx.op.Div(ctx.op.Sub(end_d, start_d), step_d))
    i = ctx.op.Range(ctx.const(0.0, DOUBLE), count, ctx.const(1.0, DOUBLE))
    return ctx.cast(ctx.op.Add(ctx.op.Mul(i, step_d), start_d), dtype)


@aten(aten_.linspace.default)
def linspace(ctx: Ctx, start: Any, end: Any, steps: Size, **_: Any) -> ir.Value:
    """linspace(Scalar start, Scalar end, int steps, *, ScalarType? dtype=None, ...) -> Tensor"""
    dtype = ctx.out_dtype()
    if not any(isinstance(v, ir.Value) for v in (start, end, steps)):
        return ctx.const(torch.linspace(start, end, steps, dtype=to_torch_dtype(dtype)), dtype)
    s, e, n = (ctx.cast(ctx.as_value(v), DOUBLE) for v in (start, end, steps))
    one = ctx.const(1.0, DOUBLE)
    i = ctx.op.Range(ctx.const(0.0, DOUBLE), n, one)
    step = ctx.op.Div(ctx.op.Sub(e, s), ctx.op.Max(ctx.op.Sub(n, one), one))
    # torch fills the second half backwards from the end, for symmetry
    front = ctx.op.Add(s, ctx.op.Mul(i, step))
    back = ctx.op.Sub(e, ctx.op.Mul(ctx.op.Sub(ctx.op.Sub(n, one), i), step))
    first_half = ctx.op.Less(i, ctx.op.Div(n, ctx.const(2.0, DOUBLE)))
    return ctx.cast(ctx.op.Where(first_half, front, back), dtype)


@aten(aten_.eye.default, aten_.eye.m)
def eye(ctx: Ctx, n: Size, m: Size | None = None, **_: Any) -> ir.Value:
    """eye.m(SymInt n, SymInt m, *, ScalarType? dtype=None, ...) -> Tensor"""
    dtype = ctx.out_dtype()
    wide = dtype if dtype in _RANGE_TYPES else ir.DataType.FLOAT
    zeros_ = ctx.op.ConstantOfShape(ctx.sizes([n, n if m is None else m]),
                                    value=ir.tensor(np.zeros(1, wide.numpy()), dtype=wide))
    return ctx.cast(ctx.op.EyeLike(zeros_), dtype)


def _trilu(upper: int):
    def translate(ctx: Ctx, x: ir.Value, diagonal: Size = 0) -> ir.Value:
        return ctx.op.Trilu(x, ctx.as_value(diagonal, dtype=INT64), upper=upper)

    translate.__doc__ = f"{'triu' if upper else 'tril'}(Tensor self, int diagonal=0) -> Tensor"
    return translate


aten(aten_.tril.default)(_trilu(0))
aten(aten_.triu.default)(_trilu(1))


def _tri_indices(lower: bool) -> Any:
    def translate(ctx: Ctx, row: int, col: int, offset: int = 0, **_: Any) -> ir.Value:
        if not all(isinstance(v, int) for v in (row, col, offset)):
            raise ctx.unsupported("a symbolic matrix size", fix="pass row, col and offset as Python ints")
        rows, cols = (np.tril_indices if lower else np.triu_indices)(row, offset, col)
        return ctx.const(np.stack([rows, cols]).astype(np.int64).reshape(2, -1), INT64)

    name = "tril_indices" if lower else "triu_indices"
    translate.__doc__ = (f"{name}(SymInt row, SymInt col, SymInt offset=0, *, ScalarType? dtype=long, ...) -> Tensor: "
                         "a constant")
    return translate


aten(aten_.tril_indices.default)(_tri_indices(True))
aten(aten_.triu_indices.default)(_tri_indices(False))


_WINDOWS = (
    aten_.hann_window.default, aten_.hann_window.periodic,
    aten_.hamming_window.default, aten_.hamming_window.periodic, aten_.hamming_window.periodic_alpha,
    aten_.hamming_window.periodic_alpha_beta,
    aten_.blackman_window.default, aten_.blackman_window.periodic,
    aten_.bartlett_window.default, aten_.bartlett_window.periodic,
    aten_.kaiser_window.default, aten_.kaiser_window.periodic, aten_.kaiser_window.beta,
)


@aten(*_WINDOWS)
def window(ctx: Ctx, window_length: int, *args: Any, **_: Any) -> ir.Value:
    """hann_window.periodic(int window_length, bool periodic, *, ScalarType? dtype=None, ...) -> Tensor, and the
    other overloads of hann_window, hamming_window (alpha, beta), blackman_window, bartlett_window and
    kaiser_window (beta): a constant, torch's own values"""
    # window_length is an int, not a SymInt (a length read from a dynamic dim is fixed at export), so the window
    # is a constant, from torch's own kernel. torch has no decomposition of the other windows, nor 2.10 of hann's.
    if not isinstance(window_length, int):
        raise ctx.unsupported("a symbolic window length", fix="pass the window length as a Python int")
    dtype = ctx.out_dtype()
    return ctx.const(ctx.node.target(window_length, *args, dtype=to_torch_dtype(dtype)), dtype)
