"""QR, symmetric eigendecomposition, SVD, pseudo-inverse, the Hermitian square root, the polar decomposition
and the matrix exponential, composed from ONNX ops over a static matrix size (see ``_linalg``); batch dims
may be dynamic.

QR follows LAPACK's Householder conventions, so Q and R equal torch's. Eigenvalues and singular values
come from cyclic Jacobi sweeps in float64 and match torch; eigenvectors and singular vectors are only
unique up to sign (and rotation within repeated values), and torch's come from LAPACK's iterations:
the ones here are a valid, deterministic choice, and what is built from them (``pinv``, ``matrix_sqrth``,
``polar``, reconstructions) matches, but their signs can differ from torch's.
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
I64, DOUBLE = ir.DataType.INT64, ir.DataType.DOUBLE


# -- QR ----------------------------------------------------------------------------------------------------


@aten(aten_.geqrf.default)
def geqrf(ctx: Ctx, a: ir.Value) -> tuple[ir.Value, ir.Value]:
    """geqrf(Tensor self) -> (Tensor a, Tensor tau)"""
    m, n = la.static_matrix(ctx, a)
    if min(m, n) == 0:
        return a, la.empty_output(ctx, 1) or la.expand_batch(ctx, ctx.const(np.zeros(0), like=a), a, [0])
    packed, taus, _ = la.householder_qr(ctx, a, m, n)
    return packed, la.stack_last(ctx, taus)


@aten(aten_.linalg_qr.default)
def linalg_qr(ctx: Ctx, a: ir.Value, mode: str = "reduced") -> tuple[ir.Value, ir.Value]:
    """linalg_qr(Tensor A, str mode="reduced") -> (Tensor Q, Tensor R)"""
    m, n = la.static_matrix(ctx, a)
    k = min(m, n)
    packed, taus, vs = la.householder_qr(ctx, a, m, n)
    top = packed if mode == "complete" or m == k else la.rows(ctx, packed, 0, k)
    r = la.empty_output(ctx, 1) or ctx.op.Trilu(top, upper=1)
    if mode == "r":
        return la.empty(ctx, [0], a.dtype), r
    return la.empty_output(ctx, 0) or la.householder_q(ctx, vs, taus, m, m if mode == "complete" else k, a), r


def _tau_length(ctx: Ctx, tau: ir.Value) -> int:
    """The static number of reflectors."""
    k = tau.shape.dims[-1] if tau.shape is not None and len(tau.shape) else None
    if not isinstance(k, int):
        raise ctx.unsupported("tau has a symbolic length", fix="export with a static size for tau's last dim")
    return k


@aten(aten_.linalg_householder_product.default)
def linalg_householder_product(ctx: Ctx, a: ir.Value, tau: ir.Value) -> ir.Value:
    """linalg_householder_product(Tensor input, Tensor tau) -> Tensor"""
    m, n = la.static_matrix(ctx, a)
    vs, taus = la.reflectors(ctx, a, tau, m, _tau_length(ctx, tau))
    return la.empty_output(ctx, 0) or la.householder_q(ctx, vs, taus, m, n, a)


@aten(aten_.ormqr.default)
def ormqr(
    ctx: Ctx, a: ir.Value, tau: ir.Value, c: ir.Value, left: bool = True, transpose: bool = False
) -> ir.Value:
    """ormqr(Tensor self, Tensor input2, Tensor input3, bool left=True, bool transpose=False) -> Tensor"""
    m, _ = la.static_matrix(ctx, a)
    vs, taus = la.reflectors(ctx, a, tau, m, _tau_length(ctx, tau))
    q = la.householder_q(ctx, vs, taus, m, m, a)
    if transpose:
        q = la.mT(ctx, q, rank(a))
    return ctx.op.MatMul(q, c) if left else ctx.op.MatMul(c, q)


# -- symmetric eigendecomposition ------------------------------------------------------------------------


@aten(aten_._linalg_eigh.default)
def _linalg_eigh(
    ctx: Ctx, a: ir.Value, UPLO: str = "L", compute_v: bool = True  # noqa: N803 - the schema's name
) -> tuple[ir.Value, ir.Value]:
    """_linalg_eigh(Tensor A, str UPLO="L", bool compute_v=True) -> (Tensor eigenvalues, Tensor eigenvectors)

    Reads only the ``UPLO`` triangle, like LAPACK. Eigenvalues ascend; eigenvector signs are Jacobi's.
    """
    n, _ = la.static_matrix(ctx, a)
    if (values := la.empty_output(ctx, 0)) is not None:
        return values, la.empty_output(ctx, 1)  # type: ignore[return-value]
    r = rank(a)
    sym = la.symmetric_from(ctx, ctx.cast(a, DOUBLE), n, r, lower=UPLO.upper() == "L")
    values, vectors = la.jacobi_eigh(ctx, sym, n, r)
    vectors = ctx.op.CastLike(vectors, a) if compute_v else la.empty(ctx, [0], a.dtype)
    return ctx.op.CastLike(values, a), vectors


# -- SVD and what is built from it ---------------------------------------------------------------------


def _right_vectors(ctx: Ctx, a: ir.Value, m: int, n: int) -> tuple[ir.Value, ir.Value, bool, int, int]:
    """For B = A (or A^T when A is wide, so B is M x N with M >= N), in float64: (V, B V, wide, M, N).

    V's columns are the eigenvectors of B^T B by descending eigenvalue, the right singular vectors of B;
    the columns of B V are orthogonal, with the singular values as norms.
    """
    r = rank(a)
    wide = m < n
    b = ctx.cast(a, DOUBLE)
    b = la.mT(ctx, b, r) if wide else b
    big, small = (n, m) if wide else (m, n)
    _, v = la.jacobi_eigh(ctx, ctx.op.MatMul(la.mT(ctx, b, r), b), small, r, descending=True)
    return v, ctx.op.MatMul(b, v), wide, big, small


@aten(aten_._linalg_svd.default)
def _linalg_svd(
    ctx: Ctx, a: ir.Value, full_matrices: bool = False, compute_uv: bool = True, *, driver: str | None = None
) -> tuple[ir.Value, ir.Value, ir.Value]:
    """_linalg_svd(Tensor A, bool full_matrices=False, bool compute_uv=True, *, str? driver=None) -> (Tensor U, Tensor S, Tensor Vh)

    S = ||A v_j|| over the right singular vectors v_j (Jacobi on A^T A in float64); U comes from the
    Householder QR of A V, its signs fixed so that A = U S Vh. Singular-vector signs can differ from torch's.
    """
    m, n = la.static_matrix(ctx, a)
    empties = [la.empty_output(ctx, i) for i in range(3)]
    if empties[1] is not None:
        u, s, vh = (e if e is not None else _identity(ctx, a, i) for i, e in enumerate(empties))
        return u, s, vh
    if not compute_uv:
        _, bv, *_ = _right_vectors(ctx, a, m, n)
        s = ctx.op.Sqrt(ctx.op.ReduceSum(ctx.op.Mul(bv, bv), ctx.const([-2], I64), keepdims=0))
        return la.empty(ctx, [0], a.dtype), ctx.op.CastLike(s, a), la.empty(ctx, [0], a.dtype)
    left, s, right = _svd64(ctx, a, m, n, full_matrices)
    return ctx.op.CastLike(left, a), ctx.op.CastLike(s, a), ctx.op.CastLike(la.mT(ctx, right, rank(a)), a)


def _svd64(ctx: Ctx, a: ir.Value, m: int, n: int, full_matrices: bool) -> tuple[ir.Value, ir.Value, ir.Value]:
    """(U, S, V) in float64 with A = U diag(S) V^T: ``_linalg_svd`` without its casts, V not transposed."""
    v, bv, wide, big, small = _right_vectors(ctx, a, m, n)
    s = ctx.op.Sqrt(ctx.op.ReduceSum(ctx.op.Mul(bv, bv), ctx.const([-2], I64), keepdims=0))
    packed, taus, vs = la.householder_qr(ctx, bv, big, small)
    ncols = big if full_matrices else small
    u = la.householder_q(ctx, vs, taus, big, ncols, bv)
    diag = la.diag_part(ctx, packed, big, small, rank(a))
    sign = ctx.op.Where(ctx.op.Less(diag, ctx.const(0.0, DOUBLE)), ctx.const(-1.0, DOUBLE), ctx.const(1.0, DOUBLE))
    if ncols > small:
        sign = ctx.op.Concat(sign, la.expand_batch(ctx, ctx.const(np.ones(ncols - small), DOUBLE), a, [ncols - small]),
                             axis=-1)
    u = ctx.op.Mul(u, ctx.op.Unsqueeze(sign, ctx.const([-2], I64)))
    return (v, s, u) if wide else (u, s, v)  # A = B^T = V S U^T when A is wide


def _identity(ctx: Ctx, a: ir.Value, index: int) -> ir.Value:
    """U or Vh of an SVD without singular values (a dim is 0): the identity of the other size."""
    shape = ctx.static_out_shape(index)
    if shape is None:
        raise ctx.unsupported("an SVD of an empty matrix with symbolic batch dims",
                              fix="export with static batch dims for this input")
    size = shape[-1]
    return la.expand_batch(ctx, ctx.const(np.eye(size), like=a), a, [size, size])


@aten(aten_.linalg_pinv.atol_rtol_tensor)
def linalg_pinv(
    ctx: Ctx, a: ir.Value, *, atol: ir.Value | None = None, rtol: ir.Value | None = None, hermitian: bool = False
) -> ir.Value:
    """linalg_pinv.atol_rtol_tensor(Tensor self, *, Tensor? atol=None, Tensor? rtol=None, bool hermitian=False) -> Tensor

    Singular values at or below ``max(atol, rtol * largest)`` count as zero, with torch's defaults.
    """
    m, n = la.static_matrix(ctx, a)
    if (empty := la.empty_output(ctx, 0)) is not None:
        return empty
    r = rank(a)
    last = ctx.const([-1], I64)
    zero = ctx.const(0.0, DOUBLE)
    if hermitian:
        sym = la.symmetric_from(ctx, ctx.cast(a, DOUBLE), n, r, lower=True)
        values, vectors = la.jacobi_eigh(ctx, sym, n, r)
        size = ctx.op.Abs(values)
        keep = ctx.op.Greater(size, _tolerance(ctx, ctx.op.ReduceMax(size, last, keepdims=1), atol, rtol, m, n, a))
        inverse = ctx.op.Where(keep, ctx.op.Reciprocal(values), zero)
        scaled = ctx.op.Mul(vectors, ctx.op.Unsqueeze(inverse, ctx.const([-2], I64)))
        return ctx.op.CastLike(ctx.op.MatMul(scaled, la.mT(ctx, vectors, r)), a)
    v, bv, wide, _, _ = _right_vectors(ctx, a, m, n)
    s2 = ctx.op.ReduceSum(ctx.op.Mul(bv, bv), ctx.const([-2], I64), keepdims=0)
    s = ctx.op.Sqrt(s2)
    keep = ctx.op.Greater(s, _tolerance(ctx, ctx.op.ReduceMax(s, last, keepdims=1), atol, rtol, m, n, a))
    inv2 = ctx.op.Where(keep, ctx.op.Reciprocal(s2), zero)
    # pinv(B) = V S^-1 U^T = V S^-2 (B V)^T
    pinv = ctx.op.MatMul(ctx.op.Mul(v, ctx.op.Unsqueeze(inv2, ctx.const([-2], I64))), la.mT(ctx, bv, r))
    return ctx.op.CastLike(la.mT(ctx, pinv, r) if wide else pinv, a)


def _tolerance(
    ctx: Ctx, largest: ir.Value, atol: ir.Value | None, rtol: ir.Value | None, m: int, n: int, a: ir.Value
) -> ir.Value:
    """``max(atol, rtol * largest)`` [..., 1] in float64; rtol defaults to eps * max(m, n), or to 0 when
    a positive atol is given."""
    eps = float(np.finfo(a.dtype.numpy()).eps) * max(m, n)
    default = ctx.const(eps, DOUBLE)
    atol_d = ctx.op.Unsqueeze(ctx.cast(atol, DOUBLE), ctx.const([-1], I64)) if atol is not None else None
    if rtol is not None:
        rtol_d = ctx.op.Unsqueeze(ctx.cast(rtol, DOUBLE), ctx.const([-1], I64))
    elif atol_d is not None:
        rtol_d = ctx.op.Where(ctx.op.Greater(atol_d, ctx.const(0.0, DOUBLE)), ctx.const(0.0, DOUBLE), default)
    else:
        rtol_d = default
    relative = ctx.op.Mul(rtol_d, largest)
    return relative if atol_d is None else ctx.op.Max(atol_d, relative)


# -- Hermitian square root and polar decomposition ---------------------------------------------------------


def _gram(ctx: Ctx, v: ir.Value, d: ir.Value, r: int) -> ir.Value:
    """``V diag(d) V^T`` for V [..., n, n] and d [..., n] of rank ``r``, symmetric to the last bit (averaged
    with its transpose: the product alone rounds its two triangles differently)."""
    x = ctx.op.MatMul(ctx.op.Mul(v, ctx.op.Unsqueeze(d, ctx.const([-2], I64))), la.mT(ctx, v, r))
    return ctx.op.Mul(ctx.op.Add(x, la.mT(ctx, x, r)), ctx.const(0.5, like=x))


@aten(aten_.linalg_matrix_sqrth.default)
def linalg_matrix_sqrth(ctx: Ctx, a: ir.Value) -> ir.Value:
    """linalg_matrix_sqrth(Tensor self) -> Tensor

    ``V diag(sqrt(max(w, 0))) V^T`` from the eigendecomposition of A's lower triangle in float64, as torch
    reads A (like ``eigh``) and as it treats an indefinite A (its negative eigenvalues count as zero). The
    result does not depend on the eigenvectors' signs. Added in torch 2.14.
    """
    n, _ = la.static_matrix(ctx, a)
    if (empty := la.empty_output(ctx, 0)) is not None:
        return empty
    r = rank(a)
    sym = la.symmetric_from(ctx, ctx.cast(a, DOUBLE), n, r, lower=True)
    values, vectors = la.jacobi_eigh(ctx, sym, n, r)
    root = ctx.op.Sqrt(ctx.op.Max(values, ctx.const(0.0, DOUBLE)))
    return ctx.op.CastLike(_gram(ctx, vectors, root, r), a)


@aten(aten_.linalg_polar.default)
def linalg_polar(ctx: Ctx, a: ir.Value) -> tuple[ir.Value, ir.Value]:
    """linalg_polar(Tensor A) -> (Tensor U, Tensor H)

    From the thin SVD A = W S V^T in float64 (torch takes only m >= n, so W is m x n): U = W V^T (m x n) and
    H = V S V^T (n x n). Both are free of the singular vectors' signs, so they equal torch's for a
    full-rank A; a rank-deficient A's U is not unique. Added in torch 2.14.
    """
    m, n = la.static_matrix(ctx, a)
    if (u := la.empty_output(ctx, 0)) is not None:  # n == 0 or an empty batch (m >= n): H is empty too
        return u, la.empty_output(ctx, 1)  # type: ignore[return-value]
    r = rank(a)
    w, s, v = _svd64(ctx, a, m, n, full_matrices=False)
    return ctx.op.CastLike(ctx.op.MatMul(w, la.mT(ctx, v, r)), a), ctx.op.CastLike(_gram(ctx, v, s, r), a)


# -- matrix exponential ---------------------------------------------------------------------------------------


_TAYLOR_DEGREE = 18  # remainder below 1e-17 once ||A / 2^s||_1 <= 1
_MAX_SQUARINGS = 64


@aten(aten_.linalg_matrix_exp.default)
def linalg_matrix_exp(ctx: Ctx, a: ir.Value) -> ir.Value:
    """linalg_matrix_exp(Tensor self) -> Tensor

    Scaling and squaring in float64: each matrix is scaled by 2^-s so that its 1-norm is at most 1, a
    degree-18 Taylor polynomial approximates its exponential, and a ``Loop`` squares it s times (a
    per-matrix s, the loop running the batch's largest; s is capped at 64).
    """
    n, _ = la.static_matrix(ctx, a)
    if (empty := la.empty_output(ctx, 0)) is not None:
        return empty
    x = ctx.cast(a, DOUBLE)
    norm = ctx.op.ReduceMax(ctx.op.ReduceSum(ctx.op.Abs(x), ctx.const([-2], I64), keepdims=1),
                            ctx.const([-1], I64), keepdims=1)
    s = ctx.op.Ceil(ctx.op.Div(ctx.op.Log(norm), ctx.const(math.log(2.0), DOUBLE)))
    s = ctx.op.Min(ctx.op.Max(s, ctx.const(0.0, DOUBLE)), ctx.const(float(_MAX_SQUARINGS), DOUBLE))
    s = ctx.op.Where(ctx.op.IsNaN(s), ctx.const(0.0, DOUBLE), s)
    x = ctx.op.Mul(x, ctx.op.Pow(ctx.const(2.0, DOUBLE), ctx.op.Neg(s)))
    eye = ctx.const(np.eye(n), DOUBLE)
    p = ctx.op.Add(eye, ctx.op.Div(x, ctx.const(float(_TAYLOR_DEGREE), DOUBLE)))
    for k in range(_TAYLOR_DEGREE - 1, 0, -1):
        p = ctx.op.Add(eye, ctx.op.Div(ctx.op.MatMul(x, p), ctx.const(float(k), DOUBLE)))
    trips = ctx.op.Cast(ctx.op.Max(ctx.op.ReduceMax(s, keepdims=0), ctx.const(0.0, DOUBLE)), to=int(I64))

    def square(body: Ctx, i: ir.Value, carried: list[ir.Value]) -> list[ir.Value]:
        (q,) = carried
        more = body.op.Less(body.op.Cast(i, to=int(DOUBLE)), s)
        return [body.op.Where(more, body.op.MatMul(q, q), q)]

    (p,) = la.for_loop(ctx, trips, [p], square, "matrix_exp_square")
    return ctx.op.CastLike(p, a)
