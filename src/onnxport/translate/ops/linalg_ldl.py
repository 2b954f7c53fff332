"""LDL^T of symmetric matrices with Bunch-Kaufman pivoting (LAPACK ``sytrf``/``sytrs``, ``uplo='L'``).

Each matrix of a batch picks its own pivots: a 1x1 pivot without or with an interchange, or a 2x2
block that consumes two columns. The steps are unrolled over the static matrix size; at step k every
candidate update is computed and ``Where`` keeps, per matrix, the one LAPACK's ``dsytf2`` chooses (a
matrix whose previous step took a 2x2 block skips step k). The packed factor and the pivots
(negative for 2x2 blocks) follow LAPACK's format, so they equal torch's.
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

from onnxport.translate.builder import Ctx
from onnxport.translate.ops import _linalg as la
from onnxport.translate.ops._common import rank
from onnxport.translate.registry import aten, ops

aten_ = ops.aten
I64, BOOL = ir.DataType.INT64, ir.DataType.BOOL
_ALPHA = (1.0 + math.sqrt(17.0)) / 8.0  # Bunch-Kaufman's growth bound


def _symmetric_swap(ctx: Ctx, a: ir.Value, kk: ir.Value, kp: ir.Value, n: int, k: int) -> ir.Value:
    """Swap rows and columns ``kk`` and ``kp`` ([..., 1, 1] indices) of the trailing block ``a[k:, k:]``.

    With d = e_kk - e_kp, the permutation is P = I - d d^T (the identity when kk == kp).
    """
    iota_c, iota_r = la.col_is(n, lambda i: i), la.row_is(n, lambda i: i)
    d_col = ctx.op.Sub(ctx.op.CastLike(ctx.op.Equal(ctx.const(iota_c, I64), kk), a),
                       ctx.op.CastLike(ctx.op.Equal(ctx.const(iota_c, I64), kp), a))
    d_row = ctx.op.Sub(ctx.op.CastLike(ctx.op.Equal(ctx.const(iota_r, I64), kk), a),
                       ctx.op.CastLike(ctx.op.Equal(ctx.const(iota_r, I64), kp), a))
    last, second = ctx.const([-1], I64), ctx.const([-2], I64)
    pa = ctx.op.Sub(a, ctx.op.Mul(d_col, ctx.op.ReduceSum(ctx.op.Mul(d_col, a), second, keepdims=1)))
    pap = ctx.op.Sub(pa, ctx.op.Mul(ctx.op.ReduceSum(ctx.op.Mul(pa, d_row), last, keepdims=1), d_row))
    trailing = np.outer(np.arange(n) >= k, np.arange(n) >= k)
    return ctx.op.Where(la.flag(ctx, trailing), pap, a)


def _set_cross(ctx: Ctx, a: ir.Value, col: ir.Value, row: ir.Value, n: int, j: int, start: int) -> ir.Value:
    """Write ``col`` into column j and ``row`` into row j, from index ``start`` on (keeps ``a`` symmetric)."""
    col_mask = np.outer(np.arange(n) >= start, np.arange(n) == j)
    a = ctx.op.Where(la.flag(ctx, col_mask), col, a)
    return ctx.op.Where(la.flag(ctx, col_mask.T), row, a)


def _update_1x1(ctx: Ctx, a: ir.Value, n: int, k: int) -> ir.Value:
    """A22 -= x x^T / d, and the column becomes x / d (the multipliers of L)."""
    d = la.entry(ctx, a, k, k)
    x = ctx.op.Mul(la.cols(ctx, a, k, k + 1), la.mask(ctx, la.col_is(n, lambda i: i > k), a))
    xr = ctx.op.Mul(la.rows(ctx, a, k, k + 1), la.mask(ctx, la.row_is(n, lambda i: i > k), a))
    a = ctx.op.Sub(a, ctx.op.Div(ctx.op.Mul(x, xr), d))
    return _set_cross(ctx, a, ctx.op.Div(x, d), ctx.op.Div(xr, d), n, k, k + 1)


def _update_2x2(ctx: Ctx, a: ir.Value, n: int, k: int) -> ir.Value:
    """``dsytf2``'s 2x2 step: W = X D^-1 for the rows below the block, A22 -= X W^T."""
    d21 = la.entry(ctx, a, k + 1, k)
    d11 = ctx.op.Div(la.entry(ctx, a, k + 1, k + 1), d21)
    d22 = ctx.op.Div(la.entry(ctx, a, k, k), d21)
    t = ctx.op.Reciprocal(ctx.op.Sub(ctx.op.Mul(d11, d22), ctx.const(1.0, like=a)))
    scale = ctx.op.Div(t, d21)
    below = la.mask(ctx, la.col_is(n, lambda i: i > k + 1), a)
    right = la.mask(ctx, la.row_is(n, lambda i: i > k + 1), a)
    x0, x1 = (ctx.op.Mul(la.cols(ctx, a, j, j + 1), below) for j in (k, k + 1))
    r0, r1 = (ctx.op.Mul(la.rows(ctx, a, j, j + 1), right) for j in (k, k + 1))
    w0 = ctx.op.Mul(scale, ctx.op.Sub(ctx.op.Mul(d11, x0), x1))
    w1 = ctx.op.Mul(scale, ctx.op.Sub(ctx.op.Mul(d22, x1), x0))
    v0 = ctx.op.Mul(scale, ctx.op.Sub(ctx.op.Mul(d11, r0), r1))
    v1 = ctx.op.Mul(scale, ctx.op.Sub(ctx.op.Mul(d22, r1), r0))
    a = ctx.op.Sub(a, ctx.op.Add(ctx.op.Mul(x0, v0), ctx.op.Mul(x1, v1)))
    return _set_cross(ctx, _set_cross(ctx, a, w0, v0, n, k, k + 2), w1, v1, n, k + 1, k + 2)


def _ldl_factor(ctx: Ctx, a: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
    """(LD, pivots, info) of the symmetric matrix A's lower triangle describes."""
    n, _ = la.static_matrix(ctx, a)
    r = rank(a)
    a = la.symmetric_from(ctx, a, n, r, lower=True)
    zero, alpha = ctx.const(0.0, like=a), ctx.const(_ALPHA, like=a)
    skip: ir.Value = ctx.const(False, BOOL)
    carry: ir.Value = ctx.const(0, I64)
    pivots, failed = [], []
    for k in range(n):
        akk = ctx.op.Abs(la.entry(ctx, a, k, k))
        own_k = ctx.const(k, I64)
        if k == n - 1:
            is_zero = ctx.op.Or(ctx.op.Equal(akk, zero), ctx.op.IsNaN(akk))
            new, own, two = a, ctx.const(k + 1, I64), ctx.const(False, BOOL)
        else:
            score = ctx.op.Where(la.flag(ctx, la.col_is(n, lambda i: i <= k)), ctx.const(-1.0, like=a),
                                 ctx.op.Abs(la.cols(ctx, a, k, k + 1)))
            imax = ctx.op.ArgMax(score, axis=-2, keepdims=1)
            colmax = ctx.op.ReduceMax(score, ctx.const([-2], I64), keepdims=1)
            hit = ctx.op.Equal(ctx.const(la.col_is(n, lambda i: i), I64), imax)
            row = ctx.op.ReduceSum(ctx.op.Where(hit, a, zero), ctx.const([-2], I64), keepdims=1)
            on_imax = ctx.op.Equal(ctx.const(la.row_is(n, lambda i: i), I64), imax)
            others = ctx.op.And(la.flag(ctx, la.row_is(n, lambda i: i >= k)), ctx.op.Not(on_imax))
            rowmax = ctx.op.ReduceMax(ctx.op.Where(others, ctx.op.Abs(row), ctx.const(-1.0, like=a)),
                                      ctx.const([-1], I64), keepdims=1)
            a_imax = ctx.op.Abs(ctx.op.ReduceSum(ctx.op.Where(on_imax, row, zero), ctx.const([-1], I64), keepdims=1))
            is_zero = ctx.op.Or(ctx.op.Equal(ctx.op.Max(akk, colmax), zero), ctx.op.IsNaN(akk))
            bound = ctx.op.Mul(alpha, colmax)
            keep = ctx.op.Or(ctx.op.Or(is_zero, ctx.op.GreaterOrEqual(akk, bound)),
                             ctx.op.GreaterOrEqual(akk, ctx.op.Mul(bound, ctx.op.Div(colmax, rowmax))))
            two = ctx.op.And(ctx.op.Not(keep), ctx.op.Less(a_imax, ctx.op.Mul(alpha, rowmax)))
            kk = ctx.op.Where(two, ctx.const(k + 1, I64), own_k)
            kp = ctx.op.Where(keep, own_k, imax)
            swapped = _symmetric_swap(ctx, a, kk, kp, n, k)
            one = ctx.op.Where(is_zero, swapped, _update_1x1(ctx, swapped, n, k))
            new = ctx.op.Where(two, _update_2x2(ctx, swapped, n, k), one) if k < n - 2 else \
                ctx.op.Where(two, swapped, one)
            plus = ctx.op.Add(kp, ctx.const(1, I64))
            own = ctx.op.Where(two, ctx.op.Neg(plus), plus)
        a = ctx.op.Where(skip, a, new)
        pivots.append(ctx.op.Where(skip, carry, own))
        failed.append(ctx.op.And(ctx.op.Not(skip), is_zero))
        skip, carry = ctx.op.And(ctx.op.Not(skip), two), own
    ld = ctx.op.Trilu(a, ctx.const(0, I64), upper=0)
    piv = ctx.cast(la.stack_last(ctx, [_full(ctx, p, a) for p in pivots]), ir.DataType.INT32)
    return ld, piv, la.first_failure(ctx, [_full(ctx, f, a) for f in failed], a, ir.DataType.INT32)


def _full(ctx: Ctx, x: ir.Value, like: ir.Value) -> ir.Value:
    """A [..., 1, 1] value with ``like``'s batch dims (constants from the last step have none)."""
    return la.expand_batch(ctx, x, like, [1, 1])



@aten(aten_.linalg_ldl_factor_ex.default)
def linalg_ldl_factor_ex(
    ctx: Ctx, a: ir.Value, *, hermitian: bool = False, check_errors: bool = False
) -> tuple[ir.Value, ir.Value, ir.Value]:
    """linalg_ldl_factor_ex(Tensor self, *, bool hermitian=False, bool check_errors=False) -> (Tensor LD, Tensor pivots, Tensor info)

    ``hermitian`` changes nothing for real matrices.
    """
    empties = [la.empty_output(ctx, i) for i in range(2)]
    if empties[0] is not None and empties[1] is not None:
        return empties[0], empties[1], la.expand_batch(ctx, ctx.const(0, ir.DataType.INT32), a, [])
    return _ldl_factor(ctx, a)


@aten(aten_.linalg_ldl_factor.default)
def linalg_ldl_factor(ctx: Ctx, a: ir.Value, *, hermitian: bool = False) -> tuple[ir.Value, ir.Value]:
    """linalg_ldl_factor(Tensor self, *, bool hermitian=False) -> (Tensor LD, Tensor pivots)"""
    return linalg_ldl_factor_ex(ctx, a, hermitian=hermitian)[:2]


@aten(aten_.linalg_ldl_solve.default)
def linalg_ldl_solve(ctx: Ctx, ld: ir.Value, pivots: ir.Value, b: ir.Value, *, hermitian: bool = False) -> ir.Value:
    """linalg_ldl_solve(Tensor LD, Tensor pivots, Tensor B, *, bool hermitian=False) -> Tensor

    ``dsytrs``: with P and L from the pivots, solves L D L^T X = P^T B, forward then backward. Where
    each 2x2 block starts is read from the pivots' signs at run time, per matrix.
    """
    if (empty := la.empty_output(ctx, 0)) is not None:
        return empty
    n, _ = la.static_matrix(ctx, ld, "LD")
    piv = ctx.op.Unsqueeze(ctx.cast(pivots, I64), ctx.const([-1], I64))  # [..., n, 1]
    steps = []  # per k: (1x1 here, a 2x2 block starts here, k ends a 2x2 block, 0-based kp)
    skip: ir.Value = ctx.const(False, BOOL)
    for k in range(n):
        p = la.rows(ctx, piv, k, k + 1)
        neg = ctx.op.Less(p, ctx.const(0, I64))
        starts = ctx.op.And(ctx.op.Not(skip), neg)
        steps.append((ctx.op.Not(neg), starts, skip, ctx.op.Sub(ctx.op.Abs(p), ctx.const(1, I64))))
        skip = starts
    x = b
    for k, (single, starts, _, kp) in enumerate(steps):
        x = ctx.op.Where(single, _forward_1x1(ctx, ld, x, kp, n, k), x)
        if k < n - 1:
            x = ctx.op.Where(starts, _forward_2x2(ctx, ld, x, kp, n, k), x)
    for k in reversed(range(n)):
        single, _, ends, kp = steps[k]
        x = ctx.op.Where(single, _backward(ctx, ld, x, kp, n, k, (k,)), x)
        if k > 0:
            x = ctx.op.Where(ends, _backward(ctx, ld, x, kp, n, k, (k - 1, k)), x)
    return x


def _hit(ctx: Ctx, kp: ir.Value, n: int) -> ir.Value:
    """[..., n, 1] bool: row ``kp`` ([..., 1, 1] index)."""
    return ctx.op.Equal(ctx.const(la.col_is(n, lambda i: i), I64), kp)


def _here(ctx: Ctx, n: int, j: int) -> ir.Value:
    """[n, 1] bool: row ``j``."""
    return la.flag(ctx, la.col_is(n, lambda i: i == j))


def _forward_1x1(ctx: Ctx, ld: ir.Value, x: ir.Value, kp: ir.Value, n: int, k: int) -> ir.Value:
    """Swap rows k and kp, eliminate below row k with L's column k, divide row k by D[k, k]."""
    x = la.swap_rows(ctx, x, _hit(ctx, kp, n), _here(ctx, n, k), k)
    top = la.rows(ctx, x, k, k + 1)
    low = ctx.op.Mul(la.cols(ctx, ld, k, k + 1), la.mask(ctx, la.col_is(n, lambda i: i > k), ld))
    x = ctx.op.Sub(x, ctx.op.Mul(low, top))
    return ctx.op.Where(_here(ctx, n, k), ctx.op.Div(top, la.entry(ctx, ld, k, k)), x)


def _forward_2x2(ctx: Ctx, ld: ir.Value, x: ir.Value, kp: ir.Value, n: int, k: int) -> ir.Value:
    """Swap rows k+1 and kp, eliminate below row k+1 with L's columns k and k+1, solve the 2x2 block of D."""
    x = la.swap_rows(ctx, x, _hit(ctx, kp, n), _here(ctx, n, k + 1), k + 1)
    b0, b1 = la.rows(ctx, x, k, k + 1), la.rows(ctx, x, k + 1, k + 2)
    below = la.mask(ctx, la.col_is(n, lambda i: i > k + 1), ld)
    l0, l1 = (ctx.op.Mul(la.cols(ctx, ld, j, j + 1), below) for j in (k, k + 1))
    x = ctx.op.Sub(x, ctx.op.Add(ctx.op.Mul(l0, b0), ctx.op.Mul(l1, b1)))
    off = la.entry(ctx, ld, k + 1, k)
    d0, d1 = ctx.op.Div(la.entry(ctx, ld, k, k), off), ctx.op.Div(la.entry(ctx, ld, k + 1, k + 1), off)
    denom = ctx.op.Sub(ctx.op.Mul(d0, d1), ctx.const(1.0, like=ld))
    c0, c1 = ctx.op.Div(b0, off), ctx.op.Div(b1, off)
    new0 = ctx.op.Div(ctx.op.Sub(ctx.op.Mul(d1, c0), c1), denom)
    new1 = ctx.op.Div(ctx.op.Sub(ctx.op.Mul(d0, c1), c0), denom)
    return ctx.op.Where(_here(ctx, n, k), new0, ctx.op.Where(_here(ctx, n, k + 1), new1, x))


def _backward(
    ctx: Ctx, ld: ir.Value, x: ir.Value, kp: ir.Value, n: int, k: int, block: tuple[int, ...]
) -> ir.Value:
    """Rows ``block`` (ending at k) -= L[k+1:, block]^T X[k+1:], then swap rows k and kp."""
    below = la.mask(ctx, la.col_is(n, lambda i: i > k), ld)
    out = x
    for j in block:
        low = ctx.op.Mul(la.cols(ctx, ld, j, j + 1), below)
        dot = ctx.op.ReduceSum(ctx.op.Mul(low, x), ctx.const([-2], I64), keepdims=1)
        out = ctx.op.Where(_here(ctx, n, j), ctx.op.Sub(la.rows(ctx, x, j, j + 1), dot), out)
    return la.swap_rows(ctx, out, _hit(ctx, kp, n), _here(ctx, n, k), k)
