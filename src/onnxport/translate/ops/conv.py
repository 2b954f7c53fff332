"""Convolutions, plain and transposed, in 1, 2 and 3 spatial dimensions."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import onnx_ir as ir

from onnxport.translate.builder import Ctx
from onnxport.translate.ops._common import rank
from onnxport.translate.registry import aten, ops

aten_ = ops.aten

IntList = int | Sequence[int]


def spatial_ints(ctx: Ctx, value: Any, nd: int, what: str) -> list[int]:
    """``value`` (an int or a list of 1 or ``nd`` ints) as ``nd`` ints; ONNX wants these as attributes."""
    items = [value] if isinstance(value, (int, ir.Value)) else list(value)
    if not all(isinstance(i, int) for i in items):
        raise ctx.unsupported(
            f"{what} {_shown(items)} depends on the input sizes, but ONNX takes it as a fixed attribute",
            fix=f"compute {what} from constants (Python ints), or make the sizes it is computed from static "
            "(leave them out of dynamic_shapes)",
        )
    if len(items) == 1:
        items = items * nd
    if len(items) != nd:
        raise ctx.unsupported(f"{what} has {len(items)} entries for {nd} spatial dims",
                              fix=f"give {what} as one int or {nd} ints")
    return [int(i) for i in items]


def _shown(items: Sequence[Any]) -> str:
    return "[" + ", ".join(str(i) if isinstance(i, int) else "<symbolic>" for i in items) + "]"


def with_batch(ctx: Ctx, x: ir.Value, nd: int, fn: Callable[[ir.Value], Any]) -> Any:
    """``fn(x)``; an unbatched input (rank ``nd + 1``, which torch accepts) gets a batch dim around it."""
    if rank(x) != nd + 1:
        return fn(x)
    zero = ctx.const([0], ir.DataType.INT64)
    out = fn(ctx.op.Unsqueeze(x, zero))
    if isinstance(out, tuple):
        return tuple(ctx.op.Squeeze(o, zero) for o in out)
    return ctx.op.Squeeze(out, zero)


def _string_pads(ctx: Ctx, padding: str, weight: ir.Value, dilation: list[int]) -> dict[str, Any]:
    if padding == "valid":
        return {"pads": [0] * 2 * len(dilation)}
    if padding != "same":
        raise ctx.unsupported(f"padding={padding!r}", fix="pass padding='same', 'valid' or sizes")
    kernel = list(weight.shape)[2:] if weight.shape is not None else []
    if len(kernel) != len(dilation) or not all(isinstance(k, int) for k in kernel):
        # torch's 'same' puts the odd extra pad at the end, as SAME_UPPER does for stride 1
        return {"auto_pad": "SAME_UPPER"}
    total = [d * (k - 1) for d, k in zip(dilation, kernel)]
    return {"pads": [t // 2 for t in total] + [t - t // 2 for t in total]}


def _conv(
    ctx: Ctx,
    x: ir.Value,
    weight: ir.Value,
    bias: ir.Value | None,
    stride: IntList,
    padding: IntList | str,
    dilation: IntList,
    groups: int,
    transposed: bool = False,
    output_padding: IntList = 0,
) -> ir.Value:
    nd = rank(weight) - 2
    if not isinstance(groups, int):
        raise ctx.unsupported("groups depends on the input sizes, but ONNX takes it as a fixed attribute",
                              fix="compute groups from constants, or make the sizes it comes from static")
    dilations = spatial_ints(ctx, dilation, nd, "dilation")
    strides = spatial_ints(ctx, stride, nd, "stride")
    attrs: dict[str, Any] = {"strides": strides, "dilations": dilations, "group": groups}
    if isinstance(padding, str):
        attrs.update(_string_pads(ctx, padding, weight, dilations))
    else:
        pads = spatial_ints(ctx, padding, nd, "padding")
        attrs["pads"] = pads + pads
    inputs = [weight] if bias is None else [weight, ctx.cast(bias, weight.dtype)]
    if transposed:
        _fold_output_padding(attrs, spatial_ints(ctx, output_padding, nd, "output_padding"))
        return with_batch(ctx, x, nd, lambda v: ctx.op.ConvTranspose(v, *inputs, **attrs))
    return with_batch(ctx, x, nd, lambda v: ctx.op.Conv(v, *inputs, **attrs))


def _fold_output_padding(attrs: dict[str, Any], output_padding: list[int]) -> None:
    """Move output padding into the end pads where it fits.

    Cropping less at the end of the full transposed convolution is what output padding means, and
    onnxruntime refuses ``output_padding >= stride``, which torch allows when dilation is larger.
    """
    pads, nd = list(attrs["pads"]), len(output_padding)
    for i, extra in enumerate(output_padding):
        moved = min(extra, pads[nd + i])
        pads[nd + i] -= moved
        output_padding[i] = extra - moved
    attrs["pads"], attrs["output_padding"] = pads, output_padding


@aten(
    aten_.conv1d.default, aten_.conv2d.default, aten_.conv3d.default,
    aten_.conv1d.padding, aten_.conv2d.padding, aten_.conv3d.padding,
)
def conv(
    ctx: Ctx,
    x: ir.Value,
    weight: ir.Value,
    bias: ir.Value | None = None,
    stride: IntList = 1,
    padding: IntList | str = 0,
    dilation: IntList = 1,
    groups: int = 1,
) -> ir.Value:
    """conv2d(Tensor input, Tensor weight, Tensor? bias=None, SymInt[2] stride=[1, 1], SymInt[2] padding=[0, 0], SymInt[2] dilation=[1, 1], SymInt groups=1) -> Tensor

    The ``.padding`` overloads take ``padding="same"`` or ``"valid"`` instead of sizes.
    """
    return _conv(ctx, x, weight, bias, stride, padding, dilation, groups)


@aten(aten_.conv_transpose1d.default, aten_.conv_transpose2d.input, aten_.conv_transpose3d.input)
def conv_transpose(
    ctx: Ctx,
    x: ir.Value,
    weight: ir.Value,
    bias: ir.Value | None = None,
    stride: IntList = 1,
    padding: IntList = 0,
    output_padding: IntList = 0,
    groups: int = 1,
    dilation: IntList = 1,
) -> ir.Value:
    """conv_transpose2d.input(Tensor input, Tensor weight, Tensor? bias=None, SymInt[2] stride=[1, 1], SymInt[2] padding=[0, 0], SymInt[2] output_padding=[0, 0], SymInt groups=1, SymInt[2] dilation=[1, 1]) -> Tensor"""
    return _conv(ctx, x, weight, bias, stride, padding, dilation, groups, True, output_padding)


@aten(aten_.convolution.default, aten_._convolution.default, aten_._convolution.deprecated)
def convolution(
    ctx: Ctx,
    x: ir.Value,
    weight: ir.Value,
    bias: ir.Value | None,
    stride: IntList,
    padding: IntList,
    dilation: IntList,
    transposed: bool,
    output_padding: IntList,
    groups: int,
    *_backend_flags: bool,
) -> ir.Value:
    """convolution(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, SymInt[] padding, SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups) -> Tensor

    ``_convolution`` adds backend flags (benchmark, deterministic, cudnn_enabled, allow_tf32) that do
    not change the result.
    """
    return _conv(ctx, x, weight, bias, stride, padding, dilation, groups, transposed, output_padding)
