"""Sampling at given points (``grid_sample``) and antialiased resizing (``interpolate(antialias=True)``).

``grid_sampler_2d``/``_3d`` map onto ONNX ``GridSample`` (4-D from opset 16, 5-D from opset 20), which
onnxruntime computes as torch does, but for one case, nearest sampling with reflection padding and
``align_corners=False``, where it rounds reflected half-pixel coordinates differently: there the
coordinates are reflected and rounded here, and ``GridSample`` only reads the chosen pixels.

The antialiased ``_upsample_{bilinear,bicubic}2d_aa`` are not ONNX ``Resize(antialias=1)``, which
onnxruntime filters differently from torch (errors around 0.2): torch's filter is separable, so each
spatial axis is one constant (in, out) weight matrix, built here from torch's definition (PIL's: a
triangle or Keys cubic (a = -0.5) kernel stretched by the downscaling factor, renormalised at the edges).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import onnx_ir as ir
from torch._ops import OpOverloadPacket

from onnxport.translate.builder import Ctx
from onnxport.translate.ops._common import rank
from onnxport.translate.registry import aten, ops

aten_ = ops.aten
_MODES = ("bilinear", "nearest", "bicubic")  # torch's interpolation_mode codes 0, 1, 2
_PADDINGS = ("zeros", "border", "reflection")  # torch's padding_mode codes 0, 1, 2
_OPSET20_MODES = {"bilinear": "linear", "bicubic": "cubic"}  # GridSample-20 renamed them
_HALF = frozenset({ir.DataType.FLOAT16, ir.DataType.BFLOAT16})


def _grid_sample(ctx: Ctx, x: ir.Value, grid: ir.Value, mode_code: int, padding_code: int,
                 align_corners: bool) -> ir.Value:
    nd, mode, padding = rank(x) - 2, _MODES[mode_code], _PADDINGS[padding_code]
    if nd == 3 and ctx.opset < 20:
        raise ctx.unsupported(f"3-D grid sampling at opset {ctx.opset}: ONNX GridSample takes 5-D inputs "
                              "from opset 20", fix="export with opset=20 or newer")
    if x.dtype == ir.DataType.DOUBLE and ctx.opset < 20:
        raise ctx.unsupported(f"float64 grid sampling at opset {ctx.opset}: onnxruntime runs GridSample on "
                              "float64 from opset 20", fix="export with opset=20 or newer, or sample in float32")
    dtype = ir.DataType.FLOAT if x.dtype in _HALF else x.dtype  # torch accumulates half types in float
    xc, grid = ctx.cast(x, dtype), ctx.cast(grid, dtype)
    if mode == "nearest" and padding == "reflection" and not align_corners:
        grid, padding = _reflected_pixel_centres(ctx, xc, grid, nd), "border"
    name = _OPSET20_MODES.get(mode, mode) if ctx.opset >= 20 else mode
    out = ctx.op.GridSample(xc, grid, mode=name, padding_mode=padding, align_corners=int(align_corners))
    return ctx.cast(out, x.dtype)


def _reflected_pixel_centres(ctx: Ctx, x: ir.Value, grid: ir.Value, nd: int) -> ir.Value:
    """The grid moved onto the centres of the pixels torch's nearest sampling with reflection padding
    (``align_corners=False``) reads: unnormalise, reflect about [-0.5, size - 0.5], clip, round half to even."""
    r = rank(x)
    sizes = list(x.shape)[2:][::-1]  # grid coordinates are (x, y, z): width first
    if all(isinstance(s, int) for s in sizes):
        size = ctx.const(np.array(sizes, dtype=np.float64), x.dtype)
    else:
        size = ctx.cast(ctx.op.Gather(ctx.op.Shape(x), ctx.const(list(range(r - 1, 1, -1)), ir.DataType.INT64)),
                        x.dtype)
    one, half, two = (ctx.const(v, x.dtype) for v in (1.0, 0.5, 2.0))
    # torch: ((g + 1) * size - 1) / 2, then reflect with min = -0.5 and span = size, in this order
    coord = ctx.op.Div(ctx.op.Sub(ctx.op.Mul(ctx.op.Add(grid, one), size), one), two)
    dist = ctx.op.Abs(ctx.op.Add(coord, half))
    extra = ctx.op.Mod(dist, size, fmod=1)
    flips = ctx.op.Floor(ctx.op.Div(dist, size))
    even = ctx.op.Equal(ctx.op.Mod(flips, two, fmod=1), ctx.const(0.0, x.dtype))
    reflected = ctx.op.Where(even, ctx.op.Sub(extra, half), ctx.op.Sub(ctx.op.Sub(size, extra), half))
    pixel = ctx.op.Round(ctx.op.Clip(reflected, ctx.const(0.0, x.dtype), None))
    pixel = ctx.op.Min(pixel, ctx.op.Sub(size, one))
    # pixel p's centre in normalised coordinates: (2p + 1) / size - 1
    return ctx.op.Sub(ctx.op.Div(ctx.op.Add(ctx.op.Mul(pixel, two), one), size), one)


@aten(aten_.grid_sampler_2d.default)
def grid_sampler_2d(ctx: Ctx, x: ir.Value, grid: ir.Value, interpolation_mode: int, padding_mode: int,
                    align_corners: bool) -> ir.Value:
    """grid_sampler_2d(Tensor input, Tensor grid, int interpolation_mode, int padding_mode, bool align_corners) -> Tensor"""
    return _grid_sample(ctx, x, grid, interpolation_mode, padding_mode, align_corners)


@aten(aten_.grid_sampler_3d.default)
def grid_sampler_3d(ctx: Ctx, x: ir.Value, grid: ir.Value, interpolation_mode: int, padding_mode: int,
                    align_corners: bool) -> ir.Value:
    """grid_sampler_3d(Tensor input, Tensor grid, int interpolation_mode, int padding_mode, bool align_corners) -> Tensor"""
    return _grid_sample(ctx, x, grid, interpolation_mode, padding_mode, align_corners)


@aten(aten_.grid_sampler.default)
def grid_sampler(ctx: Ctx, x: ir.Value, grid: ir.Value, interpolation_mode: int, padding_mode: int,
                 align_corners: bool) -> ir.Value:
    """grid_sampler(Tensor input, Tensor grid, int interpolation_mode, int padding_mode, bool align_corners) -> Tensor"""
    return _grid_sample(ctx, x, grid, interpolation_mode, padding_mode, align_corners)


# -- antialiased resize ----------------------------------------------------------------------------

Filter = Callable[[np.ndarray], np.ndarray]


def _triangle(t: np.ndarray) -> np.ndarray:
    t = np.abs(t)
    return np.where(t < 1, 1 - t, 0.0)


def _keys_cubic(t: np.ndarray, a: float = -0.5) -> np.ndarray:
    t = np.abs(t)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return np.where(t < 1, near, np.where(t < 2, far, 0.0))


def _aa_matrix(size: int, out: int, align_corners: bool, scale_factor: float | None, taps: int,
               kernel: Filter) -> np.ndarray:
    """(size, out) weights of torch's antialiased interpolation along one axis.

    Output i is centred at ``scale * (i + 0.5)`` in input pixels; the kernel, ``taps`` wide, is stretched
    by ``scale`` when downscaling, cut to the input and its weights renormalised to sum to 1.
    """
    if size == out:  # torch copies an axis whose size does not change
        return np.eye(size)
    if align_corners:
        scale = (size - 1) / (out - 1) if out > 1 else 0.0
    else:
        scale = 1.0 / scale_factor if scale_factor else size / out
    support = taps / 2 * scale if scale >= 1 else taps / 2
    stretch = 1.0 / scale if scale >= 1 else 1.0
    widest = math.ceil(support) * 2 + 1
    matrix = np.zeros((size, out))
    for i in range(out):
        centre = scale * (i + 0.5)
        lo = max(int(centre - support + 0.5), 0)
        hi = lo + min(max(min(int(centre + support + 0.5), size) - lo, 0), widest)
        w = kernel((np.arange(lo, hi) - centre + 0.5) * stretch)
        matrix[lo:hi, i] = w / w.sum() if w.sum() != 0 else w
    return matrix


def _upsample_aa(ctx: Ctx, x: ir.Value, scales: Sequence[float | None], align_corners: bool, taps: int,
                 kernel: Filter) -> ir.Value:
    sizes = list(x.shape)[-2:] + list(ctx.out_shape() or [None, None])[-2:]
    if not all(isinstance(s, int) for s in sizes):
        raise ctx.unsupported("antialiased resizing of symbolic spatial sizes: its weights are built at export "
                              "time", fix="make the height and width static (leave them out of dynamic_shapes)")
    h, w, oh, ow = sizes
    scales = list(scales) + [None] * (2 - len(scales))
    dtype = ir.DataType.FLOAT if x.dtype in _HALF else x.dtype
    y = ctx.cast(x, dtype)
    # separable: (oh, h) @ x @ (w, ow), MatMul broadcasting the 2-D weights over the leading dims
    if h != oh:
        y = ctx.op.MatMul(ctx.const(_aa_matrix(h, oh, align_corners, scales[0], taps, kernel).T, dtype), y)
    if w != ow:
        y = ctx.op.MatMul(y, ctx.const(_aa_matrix(w, ow, align_corners, scales[1], taps, kernel), dtype))
    return ctx.cast(y if y is not x else ctx.op.Identity(x), x.dtype)


def _register_aa(packet: OpOverloadPacket, taps: int, kernel: Filter) -> None:
    name = packet.__name__

    def default(ctx: Ctx, x: ir.Value, output_size: Sequence[int | ir.Value], align_corners: bool,
                scales_h: float | None = None, scales_w: float | None = None) -> ir.Value:
        return _upsample_aa(ctx, x, [scales_h, scales_w], align_corners, taps, kernel)

    def vec(ctx: Ctx, x: ir.Value, output_size: Sequence[int | ir.Value] | None, align_corners: bool,
            scale_factors: Sequence[float] | None) -> ir.Value:
        return _upsample_aa(ctx, x, list(scale_factors or []), align_corners, taps, kernel)

    for fn, overload in ((default, packet.default), (vec, packet.vec)):
        fn.__name__ = fn.__qualname__ = name
        fn.__doc__ = str(overload._schema).replace("aten::", "")
        aten(overload)(fn)


_register_aa(aten_._upsample_bilinear2d_aa, 2, _triangle)
_register_aa(aten_._upsample_bicubic2d_aa, 4, _keys_cubic)
