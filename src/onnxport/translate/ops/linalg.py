"""Matrix products."""

from __future__ import annotations

import onnx_ir as ir

from onnxport.translate.builder import Ctx
from onnxport.translate.ops._common import FLOAT_TYPES, rank
from onnxport.translate.registry import aten, ops

aten_ = ops.aten

@aten(aten_.linear.default)
def linear(ctx: Ctx, x: ir.Value, weight: ir.Value, bias: ir.Value | None = None) -> ir.Value:
    """linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor"""
    # MatMul's numpy semantics cover every rank of x (a vector, a matrix, batches) and a 1-D weight. The
    # optimizer stores a constant weight transposed (LinearWeightLayoutPass), leaving MatMul(x, W^T) + b:
    # the form runtimes multiply fastest and quantization tools match.
    w_t = ctx.op.Transpose(weight, perm=[1, 0]) if rank(weight) == 2 else weight
    out = ctx.op.MatMul(x, w_t)
    return ctx.op.Add(out, bias) if bias is not None else out


@aten(aten_.matmul.default, aten_.mm.default, aten_.bmm.default)
@aten(aten_.mv.default, aten_.dot.default, aten_.vdot.default)
def matmul(ctx: Ctx, x: ir.Value, other: ir.Value) -> ir.Value:
    """matmul(Tensor self, Tensor other) -> Tensor (also mm, bmm, mv, dot and vdot of real tensors)"""
    # ONNX MatMul follows numpy.matmul: 1-D operands are promoted and the added dim removed, and batch
    # dims broadcast, exactly like torch.matmul; mm/bmm/mv/dot are its special cases.
    return ctx.op.MatMul(x, other)


def _scaled_sum(ctx: Ctx, x: ir.Value, product: ir.Value, beta: float, alpha: float) -> ir.Value:
    """``beta * x + alpha * product``; torch ignores ``x`` (even NaN in it) when beta is 0."""
    if alpha != 1:
        product = ctx.op.Mul(product, ctx.const(alpha, like=product))
    if beta == 0:
        return product
    if beta != 1:
        x = ctx.op.Mul(x, ctx.const(beta, like=x))
    return ctx.op.Add(x, product)


@aten(aten_.addmm.default)
def addmm(ctx: Ctx, x: ir.Value, mat1: ir.Value, mat2: ir.Value, *, beta: float = 1, alpha: float = 1) -> ir.Value:
    """addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor"""
    if mat1.dtype in FLOAT_TYPES and mat1.dtype != ir.DataType.BFLOAT16:
        c = None if beta == 0 else x
        return ctx.op.Gemm(mat1, mat2, c, alpha=float(alpha), beta=float(beta) if c is not None else None)
    return _scaled_sum(ctx, x, ctx.op.MatMul(mat1, mat2), beta, alpha)  # Gemm has no integer kernels


@aten(aten_.baddbmm.default)
def baddbmm(
    ctx: Ctx, x: ir.Value, batch1: ir.Value, batch2: ir.Value, *, beta: float = 1, alpha: float = 1
) -> ir.Value:
    """baddbmm(Tensor self, Tensor batch1, Tensor batch2, *, Scalar beta=1, Scalar alpha=1) -> Tensor"""
    return _scaled_sum(ctx, x, ctx.op.MatMul(batch1, batch2), beta, alpha)


@aten(aten_.addmv.default)
def addmv(ctx: Ctx, x: ir.Value, mat: ir.Value, vec: ir.Value, *, beta: float = 1, alpha: float = 1) -> ir.Value:
    """addmv(Tensor self, Tensor mat, Tensor vec, *, Scalar beta=1, Scalar alpha=1) -> Tensor"""
    return _scaled_sum(ctx, x, ctx.op.MatMul(mat, vec), beta, alpha)


@aten(aten_.outer.default)
def outer(ctx: Ctx, x: ir.Value, vec2: ir.Value) -> ir.Value:
    """outer(Tensor self, Tensor vec2) -> Tensor"""
    x, vec2 = ctx.cast(x, ctx.out_dtype()), ctx.cast(vec2, ctx.out_dtype())
    column, row = ctx.op.Unsqueeze(x, ctx.const([1])), ctx.op.Unsqueeze(vec2, ctx.const([0]))
    return ctx.op.And(column, row) if x.dtype == ir.DataType.BOOL else ctx.op.Mul(column, row)


@aten(aten_.einsum.default)
def einsum(ctx: Ctx, equation: str, tensors: list[ir.Value], *, path: list[int] | None = None) -> ir.Value:
    """einsum(str equation, Tensor[] tensors, *, int[]? path=None) -> Tensor"""
    # The contraction path only orders the work; ONNX Einsum picks its own.
    return ctx.op.Einsum(*tensors, equation=equation.replace(" ", ""))
