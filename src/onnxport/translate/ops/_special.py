"""Numeric building blocks of the special-function translators (``special*.py``).

Polynomial, rational and Chebyshev evaluation as ONNX nodes, the dtype a function is computed in,
and masked selection (``loop`` from ``_common`` runs recurrences whose length depends on the data). Every
helper emits plain elementwise ONNX ops, so a function built from them runs in any onnxruntime.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import onnx_ir as ir

from onnxport.translate.builder import Ctx

F32, F64, BOOL, I64 = ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.BOOL, ir.DataType.INT64
_WIDEN = {ir.DataType.FLOAT16: F32, ir.DataType.BFLOAT16: F32}

Build = Callable[[Ctx, ir.Value], ir.Value]


def compute_type(dtype: ir.DataType) -> ir.DataType:
    """float16 and bfloat16 are computed in float32 (what torch's CPU kernels do); other types as they are."""
    return _WIDEN.get(dtype, dtype)


def unary(ctx: Ctx, x: ir.Value, build: Build, *, wide: bool = False) -> ir.Value:
    """``build`` applied to ``x`` in the compute dtype of the node's output, cast back to that output dtype.

    Integer inputs become the float output dtype first. ``wide`` computes float32 in float64 (functions
    whose torch kernel accumulates in double, or whose float32 evaluation would cancel).
    """
    out = ctx.out_dtype()
    work = F64 if wide else compute_type(out)
    return ctx.cast(build(ctx, ctx.cast(x, work)), out)


def c(ctx: Ctx, value: float, like: ir.Value) -> ir.Value:
    """A scalar constant of ``like``'s dtype."""
    return ctx.const(value, like=like)


def polevl(ctx: Ctx, z: ir.Value, coeffs: Sequence[float]) -> ir.Value:
    """``coeffs[0] * z**n + ... + coeffs[n]`` by Horner's rule."""
    acc = c(ctx, coeffs[0], z)
    for coeff in coeffs[1:]:
        acc = ctx.op.Add(ctx.op.Mul(acc, z), c(ctx, coeff, z))
    return acc


def rational(ctx: Ctx, z: ir.Value, num: Sequence[float], den: Sequence[float]) -> ir.Value:
    """``polevl(num) / polevl(den)``."""
    return ctx.op.Div(polevl(ctx, z, num), polevl(ctx, z, den))


def chbevl(ctx: Ctx, y: ir.Value, coeffs: Sequence[float]) -> ir.Value:
    """A Chebyshev series ``sum' coeffs[-1-k] T_k(y/2)`` by Clenshaw's recurrence (the Cephes ``chbevl``)."""
    b0, b1, b2 = c(ctx, coeffs[0], y), c(ctx, 0.0, y), c(ctx, 0.0, y)
    for coeff in coeffs[1:]:
        b2, b1 = b1, b0
        b0 = ctx.op.Add(ctx.op.Sub(ctx.op.Mul(y, b1), b2), c(ctx, coeff, y))
    return ctx.op.Mul(c(ctx, 0.5, y), ctx.op.Sub(b0, b2))


def select(ctx: Ctx, default: ir.Value, *cases: tuple[ir.Value, ir.Value | float]) -> ir.Value:
    """``cases[0][1]`` where ``cases[0][0]``, else the next case, ..., else ``default`` (first match wins)."""
    out = default
    for cond, value in reversed(cases):
        out = ctx.op.Where(cond, ctx.as_value(value, like=default), out)
    return out


def is_integer(ctx: Ctx, x: ir.Value) -> ir.Value:
    """``x == floor(x)`` (true for infinities, false for NaN)."""
    return ctx.op.Equal(x, ctx.op.Floor(x))


def trunc(ctx: Ctx, x: ir.Value) -> ir.Value:
    """Round toward zero."""
    return ctx.op.Where(ctx.op.Less(x, c(ctx, 0.0, x)), ctx.op.Ceil(x), ctx.op.Floor(x))


def broadcast(ctx: Ctx, *xs: ir.Value) -> list[ir.Value]:
    """``xs`` expanded to their common broadcast shape (values a ``Loop`` carries need the full shape)."""
    total = xs[0]
    for x in xs[1:]:
        total = ctx.op.Add(total, ctx.cast(x, total.dtype))
    shape = ctx.op.Shape(total)
    return [ctx.op.Expand(x, shape) for x in xs]


def any_true(ctx: Ctx, mask: ir.Value) -> ir.Value:
    """A bool scalar: whether any element of ``mask`` is true (false for an empty mask)."""
    flat = ctx.op.Reshape(ctx.op.Cast(mask, to=int(F32)), ctx.const([-1], I64))
    padded = ctx.op.Concat(flat, ctx.const([0.0], F32), axis=0)
    return ctx.op.Greater(ctx.op.ReduceMax(padded, keepdims=0), ctx.const(0.0, F32))


Step = Callable[[Ctx, ir.Value, list[ir.Value]], tuple[list[ir.Value], ir.Value | None]]
