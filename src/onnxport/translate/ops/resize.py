"""``F.interpolate``: the ``upsample_*`` family as ONNX ``Resize`` over the spatial axes.

Output sizes may be symbolic (``ctx.sizes``); scale factors are export-time floats. ``Resize``'s
``axes`` attribute (opset 18, our minimum) lets sizes and scales name only the spatial dims.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx_ir as ir
from torch._ops import OpOverloadPacket

from onnxport.translate.builder import Ctx
from onnxport.translate.ops._common import rank
from onnxport.translate.registry import aten, ops

aten_ = ops.aten

Sizes = Sequence[int | ir.Value] | None


def _resize(
    ctx: Ctx,
    x: ir.Value,
    output_size: Sizes,
    scales: Sequence[float | None] | None,
    *,
    mode: str,
    align_corners: bool = False,
    exact: bool = False,
) -> ir.Value:
    nd = rank(x) - 2
    attrs: dict[str, object] = {"mode": mode, "axes": list(range(2, 2 + nd))}
    if mode == "nearest":
        # torch "nearest" reads floor(dst * in/out); "nearest-exact" rounds the half-pixel centre
        attrs["coordinate_transformation_mode"] = "half_pixel" if exact else "asymmetric"
        attrs["nearest_mode"] = "round_prefer_ceil" if exact else "floor"
    else:
        attrs["coordinate_transformation_mode"] = "align_corners" if align_corners else "half_pixel"
        if mode == "cubic":
            attrs["cubic_coeff_a"] = -0.75  # torch's bicubic kernel (ONNX defaults to -0.5)
    # Given scales, torch maps coordinates with 1/scale (not in/out), which is what ONNX does with ``scales``
    if scales is not None and len(scales) == nd and all(s is not None for s in scales):
        return ctx.op.Resize(x, None, ctx.const([float(s) for s in scales], ir.DataType.FLOAT), None, **attrs)
    if output_size is None:  # torch refuses this too
        raise ctx.unsupported("neither an output size nor a scale for every spatial dim",
                              fix="pass size=... or scale_factor=... to F.interpolate")
    return ctx.op.Resize(x, None, None, ctx.sizes(list(output_size)), **attrs)


def _register(packet: OpOverloadPacket, mode: str, *, aligned: bool, exact: bool = False) -> None:
    kw = {"mode": mode, "exact": exact}

    if aligned:
        def vec(ctx: Ctx, x: ir.Value, output_size: Sizes, align_corners: bool,
                scale_factors: Sequence[float] | None = None) -> ir.Value:
            return _resize(ctx, x, output_size, scale_factors, align_corners=align_corners, **kw)

        def default(ctx: Ctx, x: ir.Value, output_size: Sizes, align_corners: bool,
                    *scales: float | None, **named: float | None) -> ir.Value:
            return _resize(ctx, x, output_size, list(scales) + list(named.values()), align_corners=align_corners, **kw)
    else:
        def vec(ctx: Ctx, x: ir.Value, output_size: Sizes, scale_factors: Sequence[float] | None = None) -> ir.Value:
            return _resize(ctx, x, output_size, scale_factors, **kw)

        def default(ctx: Ctx, x: ir.Value, output_size: Sizes, *scales: float | None,
                    **named: float | None) -> ir.Value:
            return _resize(ctx, x, output_size, list(scales) + list(named.values()), **kw)

    vec.__doc__ = str(packet.vec._schema)
    default.__doc__ = str(packet.default._schema)
    aten(packet.vec)(vec)
    aten(packet.default)(default)


_register(aten_.upsample_nearest1d, "nearest", aligned=False)
_register(aten_.upsample_nearest2d, "nearest", aligned=False)
_register(aten_.upsample_nearest3d, "nearest", aligned=False)
_register(aten_._upsample_nearest_exact1d, "nearest", aligned=False, exact=True)
_register(aten_._upsample_nearest_exact2d, "nearest", aligned=False, exact=True)
_register(aten_._upsample_nearest_exact3d, "nearest", aligned=False, exact=True)
_register(aten_.upsample_linear1d, "linear", aligned=True)
_register(aten_.upsample_bilinear2d, "linear", aligned=True)
_register(aten_.upsample_trilinear3d, "linear", aligned=True)
_register(aten_.upsample_bicubic2d, "cubic", aligned=True)
# The antialias overloads are in sampling.py: onnxruntime's antialiased Resize filters differently from
# torch's (errors ~0.2), so they are weight matrices there.
