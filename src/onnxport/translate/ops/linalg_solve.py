"""Determinants, inverses and linear solves: LU, Cholesky and triangular substitution unrolled over the
static matrix size (see ``_linalg``); batch dims may be dynamic.

The ``_ex`` variants return LAPACK's ``info`` (0, or 1 + the failing step); the checked variants
(``linalg_inv``, ``linalg_solve``, ``linalg_cholesky``, ``linalg_lu_factor``) are translated directly so
that torch's error check, which ONNX cannot raise, never reaches the graph: a singular input gives
inf/NaN there instead of an exception.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir
import torch

from onnxport import versions
from onnxport.translate.builder import Ctx
from onnxport.translate.ops import _linalg as la
from onnxport.translate.ops._common import arg_meta, rank, same_size
from onnxport.translate.registry import aten, ops

aten_ = ops.aten
I64 = ir.DataType.INT64


def _empty_outputs(ctx: Ctx, count: int) -> tuple[ir.Value, ...] | None:
    """Constants for the node's outputs when each is statically empty; None otherwise."""
    outs = [la.empty_output(ctx, i) for i in range(count)]
    return None if any(o is None for o in outs) else tuple(outs)  # type: ignore[misc]


def _pivots(ctx: Ctx, lu: la.LU, like: ir.Value, k: int, dtype: ir.DataType) -> ir.Value:
    """LAPACK's 1-based pivots [..., k]; ``1..k`` without pivoting."""
    if not lu.pivots:
        return la.expand_batch(ctx, ctx.const(np.arange(1, k + 1), dtype), like, [k])
    return ctx.cast(ctx.op.Add(la.stack_last(ctx, lu.pivots), ctx.const(1, I64)), dtype)


def _lu_ex(ctx: Ctx, a: ir.Value, pivot: bool) -> tuple[ir.Value, ir.Value, ir.Value, la.LU]:
    """(LU, pivots, info) as ``linalg_lu_factor_ex`` returns them, and the factorization."""
    m, n = la.static_matrix(ctx, a)
    lu = la.lu_factor(ctx, a, m, n, pivot=pivot)
    pivots = _pivots(ctx, lu, a, min(m, n), ir.DataType.INT32)
    return lu.lu, pivots, la.first_failure(ctx, lu.singular, a, ir.DataType.INT32), lu


@aten(aten_.linalg_lu_factor_ex.default)
def linalg_lu_factor_ex(
    ctx: Ctx, a: ir.Value, *, pivot: bool = True, check_errors: bool = False
) -> tuple[ir.Value, ir.Value, ir.Value]:
    """linalg_lu_factor_ex(Tensor A, *, bool pivot=True, bool check_errors=False) -> (Tensor LU, Tensor pivots, Tensor info)"""
    return _empty_outputs(ctx, 3) or _lu_ex(ctx, a, pivot)[:3]


@aten(aten_.linalg_lu_factor.default)
def linalg_lu_factor(ctx: Ctx, a: ir.Value, *, pivot: bool = True) -> tuple[ir.Value, ir.Value]:
    """linalg_lu_factor(Tensor A, *, bool pivot=True) -> (Tensor LU, Tensor pivots)"""
    return _empty_outputs(ctx, 2) or _lu_ex(ctx, a, pivot)[:2]


def _unpack_lu(ctx: Ctx, packed: ir.Value, m: int, n: int) -> tuple[ir.Value, ir.Value]:
    """L [..., m, k] (unit diagonal) and U [..., k, n] from LAPACK's packed LU."""
    k = min(m, n)
    low = packed if n == k else la.cols(ctx, packed, 0, k)
    up = packed if m == k else la.rows(ctx, packed, 0, k)
    low = ctx.op.Add(ctx.op.Trilu(low, ctx.const(-1, I64), upper=0), ctx.const(np.eye(m, k), like=packed))
    return low, ctx.op.Trilu(up, upper=1)


def _p_from_q(ctx: Ctx, q: ir.Value, like: ir.Value, m: int, steps: int) -> ir.Value:
    """torch's P = Q^T; a Q no pivot step touched is a constant and gets like's batch dims."""
    if steps == 0:
        return la.expand_batch(ctx, q, like, [m, m])
    return la.mT(ctx, q, rank(like))


@aten(aten_.linalg_lu.default)
def linalg_lu(ctx: Ctx, a: ir.Value, *, pivot: bool = True) -> tuple[ir.Value, ir.Value, ir.Value]:
    """linalg_lu(Tensor A, *, bool pivot=True) -> (Tensor P, Tensor L, Tensor U)"""
    if (empty := _empty_outputs(ctx, 3)) is not None:
        return empty
    m, n = la.static_matrix(ctx, a)
    lu = la.lu_factor(ctx, a, m, n, pivot=pivot)
    return (_p_from_q(ctx, lu.perm, a, m, len(lu.pivots)), *_unpack_lu(ctx, lu.lu, m, n))


@aten(aten_.lu_unpack.default)
def lu_unpack(
    ctx: Ctx, packed: ir.Value, pivots: ir.Value, unpack_data: bool = True, unpack_pivots: bool = True
) -> tuple[ir.Value, ir.Value, ir.Value]:
    """lu_unpack(Tensor LU_data, Tensor LU_pivots, bool unpack_data=True, bool unpack_pivots=True) -> (Tensor P, Tensor L, Tensor U)"""
    if (empty := _empty_outputs(ctx, 3)) is not None:
        return empty
    m, n = la.static_matrix(ctx, packed, "LU")
    k = min(m, n)
    outs: list[ir.Value | None] = [None, None, None]
    if unpack_pivots:
        outs[0] = _p_from_q(ctx, la.perm_from_pivots(ctx, pivots, m, k, packed), packed, m, k)
    if unpack_data:
        outs[1], outs[2] = _unpack_lu(ctx, packed, m, n)
    return tuple(o if o is not None else la.empty(ctx, ctx.out_shape(i), ctx.out_dtype(i))  # type: ignore[arg-type]
                 for i, o in enumerate(outs))


@aten(aten_.linalg_lu_solve.default)
def linalg_lu_solve(
    ctx: Ctx, packed: ir.Value, pivots: ir.Value, b: ir.Value, *, left: bool = True, adjoint: bool = False
) -> ir.Value:
    """linalg_lu_solve(Tensor LU, Tensor pivots, Tensor B, *, bool left=True, bool adjoint=False) -> Tensor"""
    if (empty := _empty_outputs(ctx, 1)) is not None:
        return empty[0]
    n, _ = la.static_matrix(ctx, packed, "LU")
    q = la.perm_from_pivots(ctx, pivots, n, n, packed)
    r = rank(packed)
    if left:
        return la.lu_solve(ctx, packed, q, b, n, r, adjoint=adjoint)
    # X A = B is A^T X^T = B^T.
    out_rank = max(r, rank(b))
    x_t = la.lu_solve(ctx, packed, q, la.mT(ctx, b, rank(b)), n, r, adjoint=not adjoint)
    return la.mT(ctx, x_t, out_rank)


# -- determinants ------------------------------------------------------------------------------------


@aten(aten_._linalg_det.default)
def _linalg_det(ctx: Ctx, a: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
    """_linalg_det(Tensor A) -> (Tensor result, Tensor LU, Tensor pivots)

    ONNX ``Det`` (float32 in onnxruntime) gives the result. The LU outputs, which only feed torch's
    backward and are removed as unused unless read, factor A^T like torch's for a contiguous A.
    """
    n, _ = la.static_matrix(ctx, a)
    if n == 0:
        return la.expand_batch(ctx, ctx.const(1.0, like=a), a, []), la.empty_output(ctx, 1), la.empty_output(ctx, 2)
    packed, pivots, _, lu = _lu_ex(ctx, la.mT(ctx, a, rank(a)), pivot=True)
    det = ctx.op.Det(a) if a.dtype == ir.DataType.FLOAT else _det_from_lu(ctx, lu, n, rank(a))[0]
    return det, packed, pivots


def _det_from_lu(ctx: Ctx, lu: la.LU, n: int, r: int) -> tuple[ir.Value, ir.Value, ir.Value]:
    """(det, sign, log|det|) from the factorization of an n x n matrix (n >= 1) of rank ``r``."""
    diag = la.diag_part(ctx, lu.lu, n, n, r)
    last = ctx.const([-1], I64)
    swaps = ctx.op.Cast(ctx.op.Not(ctx.op.Equal(la.stack_last(ctx, lu.pivots), ctx.const(np.arange(n), I64))),
                        to=int(I64))
    odd = ctx.op.Mod(ctx.op.ReduceSum(swaps, last, keepdims=0), ctx.const(2, I64))
    flip = ctx.op.Sub(ctx.const(1.0, like=diag), ctx.op.Mul(ctx.const(2.0, like=diag), ctx.op.CastLike(odd, diag)))
    sign = ctx.op.Mul(ctx.op.ReduceProd(ctx.op.Sign(diag), last, keepdims=0), flip)
    det = ctx.op.Mul(ctx.op.ReduceProd(diag, last, keepdims=0), flip)
    return det, sign, ctx.op.ReduceSum(ctx.op.Log(ctx.op.Abs(diag)), last, keepdims=0)


@aten(aten_._linalg_slogdet.default)
def _linalg_slogdet(ctx: Ctx, a: ir.Value) -> tuple[ir.Value, ...]:
    """_linalg_slogdet(Tensor A) -> (Tensor sign, Tensor logabsdet, Tensor LU, Tensor pivots)

    From the LU factorization of A^T (torch's LU output for a contiguous A): det(A^T) = det(A).
    """
    n, _ = la.static_matrix(ctx, a)
    if n == 0:
        ones = la.expand_batch(ctx, ctx.const(1.0, like=a), a, [])
        zeros = la.expand_batch(ctx, ctx.const(0.0, like=a), a, [])
        return ones, zeros, la.empty_output(ctx, 2), la.empty_output(ctx, 3)  # type: ignore[return-value]
    packed, pivots, _, lu = _lu_ex(ctx, la.mT(ctx, a, rank(a)), pivot=True)
    _, sign, logabs = _det_from_lu(ctx, lu, n, rank(a))
    return sign, logabs, packed, pivots


# -- inverse and general solve -------------------------------------------------------------------------


def _inverse(ctx: Ctx, a: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(A^-1, info): ``U^-1 L^-1 Q`` with ``Q A = L U``."""
    n, _ = la.static_matrix(ctx, a)
    if n == 0:
        return a, la.expand_batch(ctx, ctx.const(0, ir.DataType.INT32), a, [])
    lu = la.lu_factor(ctx, a, n, n)
    y = la.tri_solve(ctx, lu.lu, lu.perm, n, lower=True, unit=True)
    return la.tri_solve(ctx, lu.lu, y, n, lower=False, unit=False), la.first_failure(
        ctx, lu.singular, a, ir.DataType.INT32)


@aten(aten_.linalg_inv_ex.default)
def linalg_inv_ex(ctx: Ctx, a: ir.Value, *, check_errors: bool = False) -> tuple[ir.Value, ir.Value]:
    """linalg_inv_ex(Tensor A, *, bool check_errors=False) -> (Tensor inverse, Tensor info)"""
    return _inverse(ctx, a)


@aten(aten_.linalg_inv.default)
def linalg_inv(ctx: Ctx, a: ir.Value) -> ir.Value:
    """linalg_inv(Tensor A) -> Tensor"""
    return _inverse(ctx, a)[0]


def _is_vector_rhs(a: ir.Value, b: ir.Value) -> bool:
    """torch's rule: B is a (batch of) vector(s) when 1-D, or when its shape is ``A.shape[:-1]``."""
    return rank(b) == 1 or (rank(b) == rank(a) - 1 and list(b.shape.dims) == list(a.shape.dims)[:-1])


def _row_major(val: Any) -> bool:
    """Whether a FakeTensor is contiguous as torch tests it (a dim of size 1 has any stride), symbolic sizes and
    strides compared as written (deciding would add a guard)."""
    expected: int | torch.SymInt = 1
    for size, stride in reversed(list(zip(val.shape, val.stride()))):
        if not (isinstance(size, int) and size == 1) and not same_size(stride, expected):
            return False
        expected = expected * size
    return True


@aten(aten_._linalg_solve_ex.default)
def _linalg_solve_ex(
    ctx: Ctx, a: ir.Value, b: ir.Value, *, left: bool = True, check_errors: bool = False
) -> tuple[ir.Value, ir.Value, ir.Value, ir.Value]:
    """_linalg_solve_ex(Tensor A, Tensor B, *, bool left=True, bool check_errors=False) -> (Tensor result, Tensor LU, Tensor pivots, Tensor info)

    The LU outputs (read only by backward) factor the matrix torch's kernel factors: A, or on torch 2.10 A^T
    where A is row-major (``versions.solve_factors_transpose``).
    """
    n, _ = la.static_matrix(ctx, a)
    if n == 0:
        zeros = la.expand_batch(ctx, ctx.const(0, ir.DataType.INT32), a, [])
        result, packed, pivots = (la.empty_output(ctx, i) for i in range(3))
        return result, packed, pivots, zeros  # type: ignore[return-value]
    r = rank(a)
    vector = _is_vector_rhs(a, b)
    rhs = ctx.op.Unsqueeze(b, ctx.const([-1], I64)) if vector else b
    rb = rank(b) + int(vector)
    a_val = arg_meta(ctx, 0)
    transposed = isinstance(a_val, torch.Tensor) and _row_major(a_val) and versions.solve_factors_transpose()
    packed, pivots, info, lu = _lu_ex(ctx, la.mT(ctx, a, r) if transposed else a, pivot=True)
    # A X = B solves with A's LU directly and with A^T's as its adjoint; X A = B is A^T X^T = B^T
    adjoint = left == transposed
    if left:
        x = la.lu_solve(ctx, packed, lu.perm, rhs, n, r, adjoint=adjoint)
    else:
        x = la.mT(ctx, la.lu_solve(ctx, packed, lu.perm, la.mT(ctx, rhs, rb), n, r, adjoint=adjoint), max(r, rb))
    if vector:
        x = ctx.op.Squeeze(x, ctx.const([-1], I64))
    return x, packed, pivots, info


@aten(aten_.linalg_solve.default)
def linalg_solve(ctx: Ctx, a: ir.Value, b: ir.Value, *, left: bool = True) -> ir.Value:
    """linalg_solve(Tensor A, Tensor B, *, bool left=True) -> Tensor"""
    return _linalg_solve_ex(ctx, a, b, left=left)[0]


# -- triangular systems ----------------------------------------------------------------------------------


@aten(aten_.linalg_solve_triangular.default)
def linalg_solve_triangular(
    ctx: Ctx, a: ir.Value, b: ir.Value, *, upper: bool, left: bool = True, unitriangular: bool = False
) -> ir.Value:
    """linalg_solve_triangular(Tensor self, Tensor B, *, bool upper, bool left=True, bool unitriangular=False) -> Tensor"""
    if (empty := la.empty_output(ctx, 0)) is not None:
        return empty
    n, _ = la.static_matrix(ctx, a)
    if left:
        return la.tri_solve(ctx, a, b, n, lower=not upper, unit=unitriangular)
    # X A = B is A^T X^T = B^T, and A^T is triangular the other way.
    x_t = la.tri_solve(ctx, la.mT(ctx, a, rank(a)), la.mT(ctx, b, rank(b)), n, lower=upper, unit=unitriangular)
    return la.mT(ctx, x_t, max(rank(a), rank(b)))


@aten(aten_.triangular_solve.default)
def triangular_solve(
    ctx: Ctx, b: ir.Value, a: ir.Value, upper: bool = True, transpose: bool = False, unitriangular: bool = False
) -> tuple[ir.Value, ir.Value]:
    """triangular_solve(Tensor self, Tensor A, bool upper=True, bool transpose=False, bool unitriangular=False) -> (Tensor solution, Tensor cloned_coefficient)"""
    n, _ = la.static_matrix(ctx, a)
    x = la.empty_output(ctx, 0)
    if x is None and transpose:  # A^T is triangular the other way
        x = la.tri_solve(ctx, la.mT(ctx, a, rank(a)), b, n, lower=upper, unit=unitriangular)
    elif x is None:
        x = la.tri_solve(ctx, a, b, n, lower=not upper, unit=unitriangular)
    same = list(a.shape.dims) == list(ctx.out_shape(1) or ())
    return x, a if same else la.expand_batch(ctx, a, x, [n, n])  # torch broadcasts the batch dims


# -- Cholesky ----------------------------------------------------------------------------------------------


def _cholesky(ctx: Ctx, a: ir.Value, upper: bool) -> tuple[ir.Value, ir.Value]:
    """(L, info); with ``upper`` U = L^T of the matrix A's upper triangle describes, like LAPACK's uplo='U'."""
    n, _ = la.static_matrix(ctx, a)
    if n == 0:
        return a, la.expand_batch(ctx, ctx.const(0, ir.DataType.INT32), a, [])
    r = rank(a)
    low, failed = la.cholesky(ctx, la.mT(ctx, a, r) if upper else a, n, r)
    return (la.mT(ctx, low, r) if upper else low), la.first_failure(ctx, failed, a, ir.DataType.INT32)


@aten(aten_.linalg_cholesky_ex.default)
def linalg_cholesky_ex(
    ctx: Ctx, a: ir.Value, *, upper: bool = False, check_errors: bool = False
) -> tuple[ir.Value, ir.Value]:
    """linalg_cholesky_ex(Tensor self, *, bool upper=False, bool check_errors=False) -> (Tensor L, Tensor info)"""
    return _cholesky(ctx, a, upper)


@aten(aten_.linalg_cholesky.default)
def linalg_cholesky(ctx: Ctx, a: ir.Value, *, upper: bool = False) -> ir.Value:
    """linalg_cholesky(Tensor self, *, bool upper=False) -> Tensor"""
    return _cholesky(ctx, a, upper)[0]


@aten(aten_.cholesky.default)
def cholesky(ctx: Ctx, a: ir.Value, upper: bool = False) -> ir.Value:
    """cholesky(Tensor self, bool upper=False) -> Tensor"""
    return _cholesky(ctx, a, upper)[0]


@aten(aten_.cholesky_solve.default)
def cholesky_solve(ctx: Ctx, b: ir.Value, factor: ir.Value, upper: bool = False) -> ir.Value:
    """cholesky_solve(Tensor self, Tensor input2, bool upper=False) -> Tensor"""
    if (empty := la.empty_output(ctx, 0)) is not None:
        return empty
    n, _ = la.static_matrix(ctx, factor)
    low = la.mT(ctx, factor, rank(factor)) if upper else factor  # A = L L^T either way
    y = la.tri_solve(ctx, low, b, n, lower=True, unit=False)
    return la.tri_solve(ctx, la.mT(ctx, low, rank(factor)), y, n, lower=False, unit=False)


@aten(aten_.cholesky_inverse.default)
def cholesky_inverse(ctx: Ctx, factor: ir.Value, upper: bool = False) -> ir.Value:
    """cholesky_inverse(Tensor self, bool upper=False) -> Tensor"""
    if (empty := la.empty_output(ctx, 0)) is not None:
        return empty
    n, _ = la.static_matrix(ctx, factor)
    r = rank(factor)
    low = la.mT(ctx, factor, r) if upper else factor
    inv_low = la.tri_solve(ctx, low, ctx.const(np.eye(n), like=factor), n, lower=True, unit=False)
    return ctx.op.MatMul(la.mT(ctx, inv_low, r), inv_low)  # (L L^T)^-1 = L^-T L^-1
