"""Fourier transforms: torch.fft.* (through the ``_fft_r2c``/``_fft_c2c``/``_fft_c2r`` they decompose into)
and ``stft``, as ONNX DFT and STFT on the graph's complex layout (a trailing dim of 2, see ``complex.py``).

ONNX DFT transforms one axis; a transform over several dims is one DFT per dim. ONNX's inverse DFT divides
by the length, its forward one does not; torch's ``normalization`` (0: none, 1: by sqrt(n), 2: by n, n the
product of the transformed lengths) is applied as one product at the end.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import onnx_ir as ir
import torch

from onnxport.translate.builder import Ctx
from onnxport.translate.ops._common import norm_axis
from onnxport.translate.ops.complex import is_complex
from onnxport.translate.registry import complex_aten
from onnxport.translate.registry import aten, ops

aten_ = ops.aten
INT64 = ir.DataType.INT64
Size = int | ir.Value


def _dft(ctx: Ctx, x: ir.Value, axis: int, *, inverse: bool = False, onesided: bool = False,
         length: Size | None = None) -> ir.Value:
    """One ONNX DFT along ``axis`` (>= 0, of the tensor without its trailing real/complex dim)."""
    attrs = {"inverse": 1 if inverse else None, "onesided": 1 if onesided else None}
    n = None if length is None else ctx.as_value(length, dtype=INT64)
    if ctx.opset >= 20:  # the axis became an input
        return ctx.op.DFT(x, n, ctx.const(axis, INT64), **attrs)
    return ctx.op.DFT(x, n, axis=axis, **attrs) if n is not None else ctx.op.DFT(x, axis=axis, **attrs)


def _size(ctx: Ctx, shape: Sequence[int | torch.SymInt], x: ir.Value, axis: int) -> Size:
    size = shape[axis]
    if isinstance(size, int):
        return size
    static = size.node.maybe_as_int()
    if static is not None:
        return int(static)
    return ctx.op.Squeeze(ctx.op.Shape(x, start=axis, end=axis + 1), ctx.const([0], INT64))


def _scale(ctx: Ctx, y: ir.Value, sizes: Sequence[Size], normalization: int, inverse_sizes: Sequence[Size]) -> ir.Value:
    """``y`` times torch's normalization for a transform over ``sizes``, undoing ONNX's 1/n for the inverse
    DFTs over ``inverse_sizes``."""
    exponent = {0: 0.0, 1: -0.5, 2: -1.0}[normalization]
    factors = [(s, exponent) for s in sizes] + [(s, 1.0) for s in inverse_sizes]
    static = math.prod(float(s) ** e for s, e in factors if isinstance(s, int))
    dynamic = [(s, e) for s, e in factors if not isinstance(s, int) and e != 0]
    if dynamic:
        scale = ctx.const(static, y.dtype)
        for s, e in dynamic:
            s = ctx.op.Cast(s, to=int(y.dtype))
            scale = ctx.op.Mul(scale, ctx.op.Pow(s, ctx.const(e, y.dtype)) if e != 1 else s)
        return ctx.op.Mul(y, scale)
    return y if static == 1 else ctx.op.Mul(y, ctx.const(static, y.dtype))


def _dims(ctx: Ctx, dim: Sequence[int], r: int) -> list[int]:
    return [norm_axis(d, r) for d in dim]


@complex_aten(aten_._fft_r2c.default)
def fft_r2c(ctx: Ctx, x: ir.Value, dim: Sequence[int], normalization: int, onesided: bool) -> ir.Value:
    """_fft_r2c(Tensor self, int[] dim, int normalization, bool onesided) -> Tensor"""
    shape = ctx.node.args[0].meta["val"].shape
    dims = _dims(ctx, dim, len(shape))
    sizes = [_size(ctx, shape, x, d) for d in dims]
    # the one-sided transform of the real signal along the last dim, then full ones along the others
    y = _dft(ctx, ctx.op.Unsqueeze(x, ctx.const([-1], INT64)), dims[-1], onesided=onesided)
    for d in dims[:-1]:
        y = _dft(ctx, y, d)
    return _scale(ctx, y, sizes, normalization, [])


@complex_aten(aten_._fft_c2c.default)
def fft_c2c(ctx: Ctx, z: ir.Value, dim: Sequence[int], normalization: int, forward: bool) -> ir.Value:
    """_fft_c2c(Tensor self, SymInt[] dim, int normalization, bool forward) -> Tensor"""
    shape = ctx.node.args[0].meta["val"].shape
    dims = _dims(ctx, dim, len(shape))
    if not dims:
        return z
    sizes = [_size(ctx, shape, z, d) for d in dims]
    for d in dims:
        z = _dft(ctx, z, d, inverse=not forward)
    return _scale(ctx, z, sizes, normalization, [] if forward else sizes)


@complex_aten(aten_._fft_c2r.default)
def fft_c2r(ctx: Ctx, z: ir.Value, dim: Sequence[int], normalization: int, last_dim_size: Size) -> ir.Value:
    """_fft_c2r(Tensor self, int[] dim, int normalization, SymInt last_dim_size) -> Tensor"""
    shape = ctx.node.args[0].meta["val"].shape
    dims = _dims(ctx, dim, len(shape))
    sizes = [_size(ctx, shape, z, d) for d in dims[:-1]] + [last_dim_size]
    # inverse transforms along the other dims first: the rows along the last dim are then Hermitian
    for d in dims[:-1]:
        z = _dft(ctx, z, d, inverse=True)
    y = _dft(ctx, z, dims[-1], inverse=True, onesided=True, length=last_dim_size)
    y = ctx.op.Squeeze(y, ctx.const([-1], INT64))
    return _scale(ctx, y, sizes, normalization, sizes)


@complex_aten(aten_.stft.default)
@aten(aten_.stft.default)
def stft(ctx: Ctx, x: ir.Value, n_fft: int, hop_length: int | None = None, win_length: int | None = None,
         window: ir.Value | None = None, normalized: bool = False, onesided: bool | None = None,
         return_complex: bool | None = None, align_to_window: bool | None = None) -> ir.Value:
    """stft(Tensor self, int n_fft, int? hop_length=None, int? win_length=None, Tensor? window=None,
    bool normalized=False, bool? onesided=None, bool? return_complex=None, bool? align_to_window=None) -> Tensor"""
    if align_to_window:
        raise ctx.unsupported("align_to_window=True", fix="leave align_to_window unset")
    signal, window_val = ctx.node.args[0].meta["val"], _window_val(ctx)
    if is_complex(window_val):
        raise ctx.unsupported("a complex window", fix="use a real window")
    complex_signal = is_complex(signal)
    if onesided is None:
        onesided = not complex_signal
    hop = n_fft // 4 if hop_length is None else hop_length
    win = n_fft if win_length is None else win_length
    dtype = ctx.out_dtype()
    batched = signal.dim() == 2
    if not complex_signal:
        x = ctx.op.Unsqueeze(ctx.cast(x, dtype), ctx.const([-1], INT64))
    if not batched:
        x = ctx.op.Unsqueeze(x, ctx.const([0], INT64))
    if win < n_fft:  # torch centres a shorter window in n_fft, ones when none is given
        window = window if window is not None else ctx.const([1.0] * win, dtype)
        left = (n_fft - win) // 2
        window = ctx.op.Pad(window, ctx.const([left, n_fft - win - left], INT64))
    window = ctx.cast(window, dtype) if window is not None else None
    y = ctx.op.STFT(x, ctx.const(hop, INT64), window, ctx.const(n_fft, INT64), onesided=int(onesided))
    y = ctx.op.Transpose(y, perm=[0, 2, 1, 3])  # ONNX gives [batch, frames, bins, 2], torch [batch, bins, frames]
    if not batched:
        y = ctx.op.Squeeze(y, ctx.const([0], INT64))
    return ctx.op.Mul(y, ctx.const(n_fft**-0.5, dtype)) if normalized else y


def _window_val(ctx: Ctx) -> Any:
    args, kwargs = ctx.node.args, ctx.node.kwargs
    window = args[4] if len(args) > 4 else kwargs.get("window")
    return window.meta.get("val") if isinstance(window, torch.fx.Node) else None
