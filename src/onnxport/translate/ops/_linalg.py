"""Matrix algorithms unrolled over a static matrix size, shared by the linalg translators.

ONNX has no factorization ops (only ``Det``), so LU, Cholesky, Householder QR, triangular solves and
Jacobi sweeps are spelled out here with ``Slice``, ``MatMul`` and ``Where``: one group of nodes per
elimination step, over the matrix size known at export time. Batch dims may stay symbolic: every step
works on whole ``[..., m, n]`` tensors, and constant row and column masks broadcast over them.

The steps follow LAPACK's conventions (partial pivoting on the first entry of largest magnitude,
``dlarfg``'s Householder signs), so the factors equal torch's CPU results, not just some valid
factorization. Eigenvalue and singular value sweeps run in float64 inside an ONNX ``Loop``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import numpy as np
import onnx_ir as ir

from onnxport.translate.builder import Ctx
from onnxport.translate.ops._common import loop

I64 = ir.DataType.INT64
DOUBLE = ir.DataType.DOUBLE
MAX_JACOBI_SIZE = 64  # the largest eigen/singular value problem: run time grows as n^4 per sweep


def static_matrix(ctx: Ctx, x: ir.Value, what: str = "input") -> tuple[int, int]:
    """The static (rows, cols) of ``x``; refuses a symbolic matrix size."""
    dims = list(x.shape.dims) if x.shape is not None else []
    if len(dims) < 2 or not all(isinstance(d, int) for d in dims[-2:]):
        raise ctx.unsupported(
            f"the {what} has matrix size {[str(d) for d in dims[-2:]]}: the factorization is unrolled over a "
            "static matrix size at export time",
            fix="export with static sizes for the last two dims of this tensor (batch dims may stay dynamic)",
        )
    return int(dims[-2]), int(dims[-1])


# -- slices, masks and constants ---------------------------------------------------------------------


def rows(ctx: Ctx, x: ir.Value, start: int, stop: int) -> ir.Value:
    """``x[..., start:stop, :]``."""
    return ctx.op.Slice(x, ctx.const([start], I64), ctx.const([stop], I64), ctx.const([-2], I64))


def cols(ctx: Ctx, x: ir.Value, start: int, stop: int) -> ir.Value:
    """``x[..., :, start:stop]``."""
    return ctx.op.Slice(x, ctx.const([start], I64), ctx.const([stop], I64), ctx.const([-1], I64))


def entry(ctx: Ctx, x: ir.Value, i: int, j: int) -> ir.Value:
    """``x[..., i:i+1, j:j+1]``."""
    return ctx.op.Slice(x, ctx.const([i, j], I64), ctx.const([i + 1, j + 1], I64), ctx.const([-2, -1], I64))


def mT(ctx: Ctx, x: ir.Value, r: int) -> ir.Value:
    """The transpose of the last two dims of ``x`` of rank ``r`` (typed when ``x``'s shape is known)."""
    perm = [*range(r - 2), r - 1, r - 2]
    out = ctx.op.Transpose(x, perm=perm)
    if x.shape is not None and len(x.shape) == r:
        out.shape = ir.Shape([x.shape.dims[i] for i in perm])
    return out


def mask(ctx: Ctx, array: np.ndarray, like: ir.Value) -> ir.Value:
    """A 0/1 constant of ``like``'s dtype."""
    return ctx.const(np.asarray(array, dtype=np.float64), like=like)


def flag(ctx: Ctx, array: np.ndarray) -> ir.Value:
    """A boolean constant."""
    return ctx.const(np.asarray(array, dtype=bool), ir.DataType.BOOL)


def col_is(m: int, pred: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """An ``[m, 1]`` array of ``pred(row indices)``."""
    return pred(np.arange(m)).reshape(m, 1)


def row_is(n: int, pred: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """A ``[1, n]`` array of ``pred(column indices)``."""
    return pred(np.arange(n)).reshape(1, n)


def batch_shape(ctx: Ctx, x: ir.Value) -> ir.Value:
    """The batch sizes of a matrix stack ``x`` (all dims but the last two), as a 1-D int64 value."""
    return ctx.op.Shape(x, end=-2)


def expand_batch(ctx: Ctx, c: ir.Value, like: ir.Value, tail: Sequence[int]) -> ir.Value:
    """``c`` broadcast to ``like``'s batch dims followed by ``tail``."""
    return ctx.op.Expand(c, ctx.op.Concat(batch_shape(ctx, like), ctx.const(list(tail), I64), axis=0))


def empty(ctx: Ctx, shape: Sequence[int], dtype: ir.DataType) -> ir.Value:
    """A constant with no elements (outputs torch leaves empty, e.g. ``Q`` of ``mode='r'``)."""
    return ctx.const(np.zeros(list(shape), dtype=dtype.numpy()), dtype)


def empty_output(ctx: Ctx, index: int) -> ir.Value | None:
    """A constant for the node's output ``index`` when it is statically empty (0x0 matrices, empty batches)."""
    shape = ctx.static_out_shape(index)
    if shape is None or math.prod(shape) != 0:
        return None
    return empty(ctx, shape, ctx.out_dtype(index) or ir.DataType.FLOAT)


def diag_part(ctx: Ctx, x: ir.Value, m: int, n: int, r: int) -> ir.Value:
    """``x[..., i, i]`` for ``i < min(m, n)``, shape ``[..., min(m, n)]``: a gather, exact for inf and NaN."""
    flat = ctx.op.Reshape(x, ctx.const([0] * (r - 2) + [m * n], I64))
    return ctx.op.Gather(flat, ctx.const([i * (n + 1) for i in range(min(m, n))], I64), axis=-1)


def stack_last(ctx: Ctx, scalars: Sequence[ir.Value]) -> ir.Value:
    """``[..., 1, 1]`` values concatenated to ``[..., len]``."""
    joined = ctx.op.Concat(*scalars, axis=-1)
    return ctx.op.Squeeze(joined, ctx.const([-2], I64))


def first_failure(ctx: Ctx, failed: Sequence[ir.Value], like: ir.Value, dtype: ir.DataType) -> ir.Value:
    """LAPACK's ``info``: 1 + the first step whose ``[..., 1, 1]`` flag is set, else 0, shape ``like``'s batch."""
    if not failed:
        return expand_batch(ctx, ctx.const(0, dtype), like, [])
    flags = ctx.op.Cast(stack_last(ctx, failed), to=ir.DataType.FLOAT)
    first = ctx.op.Add(ctx.op.ArgMax(flags, axis=-1, keepdims=0), ctx.const(1, I64))
    found = ctx.op.Greater(ctx.op.ReduceMax(flags, ctx.const([-1], I64), keepdims=0), ctx.const(0.0))
    return ctx.cast(ctx.op.Where(found, first, ctx.const(0, I64)), dtype)


# -- LU with partial pivoting (getrf) ------------------------------------------------------------------


@dataclasses.dataclass
class LU:
    """``Q @ A = L @ U`` packed like LAPACK: ``lu`` holds U and L's strict lower part."""

    lu: ir.Value
    perm: ir.Value          # Q, a one-hot [..., m, m] matrix of lu's dtype (torch's P is its transpose)
    pivots: list[ir.Value]  # per step, the 0-based row swapped in, [..., 1, 1] int64 (empty without pivoting)
    singular: list[ir.Value]  # per step, whether the pivot is exactly zero, [..., 1, 1] bool


def lu_factor(ctx: Ctx, a: ir.Value, m: int, n: int, *, pivot: bool = True) -> LU:
    """Right-looking LU; a zero pivot leaves its column unscaled, like ``dgetf2``."""
    iota = ctx.const(np.arange(m).reshape(m, 1), I64)
    q: ir.Value = ctx.const(np.eye(m), like=a)
    zero, one = ctx.const(0.0, like=a), ctx.const(1.0, like=a)
    pivots, singular = [], []
    for j in range(min(m, n)):
        here = flag(ctx, col_is(m, lambda i: i == j))
        if pivot:
            score = ctx.op.Where(flag(ctx, col_is(m, lambda i: i < j)), ctx.const(-1.0, like=a),
                                 ctx.op.Abs(cols(ctx, a, j, j + 1)))
            p = ctx.op.ArgMax(score, axis=-2, keepdims=1)
            hit = ctx.op.Equal(iota, p)
            a, q = swap_rows(ctx, a, hit, here, j), swap_rows(ctx, q, hit, here, j)
            pivots.append(p)
        pv = entry(ctx, a, j, j)
        is_zero = ctx.op.Equal(pv, zero)
        singular.append(is_zero)
        low = ctx.op.Mul(ctx.op.Div(cols(ctx, a, j, j + 1), ctx.op.Where(is_zero, one, pv)),
                         mask(ctx, col_is(m, lambda i: i > j), a))
        if j < n - 1:
            right = ctx.op.Mul(rows(ctx, a, j, j + 1), mask(ctx, row_is(n, lambda c: c > j), a))
            a = ctx.op.Sub(a, ctx.op.Mul(low, right))
        if j < m - 1:
            a = ctx.op.Where(flag(ctx, np.outer(np.arange(m) > j, np.arange(n) == j)), low, a)
    return LU(a, q, pivots, singular)


def swap_rows(ctx: Ctx, x: ir.Value, hit: ir.Value, here: ir.Value, j: int) -> ir.Value:
    """Swap row ``j`` with the row ``hit`` marks ([..., m, 1] bool, one per matrix; may be row j)."""
    picked = ctx.op.ReduceSum(ctx.op.Where(hit, x, ctx.const(0.0, like=x)), ctx.const([-2], I64), keepdims=1)
    return ctx.op.Where(hit, rows(ctx, x, j, j + 1), ctx.op.Where(here, picked, x))


def perm_from_pivots(ctx: Ctx, pivots: ir.Value, m: int, k: int, like: ir.Value) -> ir.Value:
    """Q (one-hot, ``Q @ A = L @ U``) from LAPACK's 1-based ``pivots`` [..., k], in ``like``'s dtype."""
    iota = ctx.const(np.arange(m).reshape(m, 1), I64)
    piv = ctx.op.Sub(ctx.cast(pivots, I64), ctx.const(1, I64))
    q: ir.Value = ctx.const(np.eye(m), like=like)
    for j in range(k):
        p = ctx.op.Unsqueeze(ctx.op.Slice(piv, ctx.const([j], I64), ctx.const([j + 1], I64), ctx.const([-1], I64)),
                             ctx.const([-1], I64))
        q = swap_rows(ctx, q, ctx.op.Equal(iota, p), flag(ctx, col_is(m, lambda i: i == j)), j)
    return q


def lu_solve(ctx: Ctx, lu: ir.Value, q: ir.Value, b: ir.Value, n: int, r: int, *, adjoint: bool) -> ir.Value:
    """X with ``A X = B`` (or ``A^T X = B``) where ``Q A = L U``; ``r`` is the rank of ``lu``."""
    if not adjoint:
        y = tri_solve(ctx, lu, ctx.op.MatMul(q, b), n, lower=True, unit=True)
        return tri_solve(ctx, lu, y, n, lower=False, unit=False)
    lu_t = mT(ctx, lu, r)
    y = tri_solve(ctx, lu_t, b, n, lower=True, unit=False)
    return ctx.op.MatMul(mT(ctx, q, r), tri_solve(ctx, lu_t, y, n, lower=False, unit=True))


# -- triangular solve and Cholesky -----------------------------------------------------------------


def tri_solve(ctx: Ctx, a: ir.Value, b: ir.Value, n: int, *, lower: bool, unit: bool) -> ir.Value:
    """X with ``A X = B`` by substitution, reading only A's lower (or upper) triangle; B is [..., n, k]."""
    x: ir.Value | None = None
    for i in range(n) if lower else reversed(range(n)):
        r = rows(ctx, b, i, i + 1)
        if x is not None:
            lo, hi = (0, i) if lower else (i + 1, n)
            coef = ctx.op.Slice(a, ctx.const([i, lo], I64), ctx.const([i + 1, hi], I64), ctx.const([-2, -1], I64))
            r = ctx.op.Sub(r, ctx.op.MatMul(coef, x))
        if not unit:
            r = ctx.op.Div(r, entry(ctx, a, i, i))
        x = r if x is None else ctx.op.Concat(*((x, r) if lower else (r, x)), axis=-2)
    return b if x is None else x


def cholesky(ctx: Ctx, a: ir.Value, n: int, r: int) -> tuple[ir.Value, list[ir.Value]]:
    """Lower L with ``L L^T = A`` reading A's lower triangle, and per column whether it failed (not PD)."""
    columns, failed = [], []
    for j in range(n):
        d2 = entry(ctx, a, j, j)
        failed.append(ctx.op.Not(ctx.op.Greater(d2, ctx.const(0.0, like=a))))
        d = ctx.op.Sqrt(d2)
        c = ctx.op.Mul(ctx.op.Div(cols(ctx, a, j, j + 1), d), mask(ctx, col_is(n, lambda i: i > j), a))
        if j < n - 1:
            a = ctx.op.Sub(a, ctx.op.Mul(c, mT(ctx, c, r)))
        columns.append(ctx.op.Where(flag(ctx, col_is(n, lambda i: i == j)), d, c))
    return ctx.op.Concat(*columns, axis=-1), failed


# -- Householder QR (geqrf / orgqr) --------------------------------------------------------------------


def householder_qr(ctx: Ctx, a: ir.Value, m: int, n: int) -> tuple[ir.Value, list[ir.Value], list[ir.Value]]:
    """``geqrf``: R above the diagonal, reflectors below; returns (packed, taus, vs) with [..., 1, 1] taus
    and [..., m, 1] reflectors (unit at their step). Signs follow ``dlarfg``: ``R[j, j] = -sign(alpha) ||x||``."""
    zero, one = ctx.const(0.0, like=a), ctx.const(1.0, like=a)
    taus, vs = [], []
    for j in range(min(m, n)):
        here = col_is(m, lambda i: i == j)
        x = cols(ctx, a, j, j + 1)
        alpha = entry(ctx, a, j, j)
        below = ctx.op.Mul(x, mask(ctx, col_is(m, lambda i: i > j), a))
        xnorm2 = ctx.op.ReduceSum(ctx.op.Mul(below, below), ctx.const([-2], I64), keepdims=1)
        norm = ctx.op.Sqrt(ctx.op.Add(ctx.op.Mul(alpha, alpha), xnorm2))
        beta = ctx.op.Where(ctx.op.Less(alpha, zero), norm, ctx.op.Neg(norm))
        trivial = ctx.op.Equal(xnorm2, zero)  # H = I: dlarfg leaves alpha and the column as they are
        tau = ctx.op.Where(trivial, zero, ctx.op.Div(ctx.op.Sub(beta, alpha), ctx.op.Where(trivial, one, beta)))
        tail = ctx.op.Div(below, ctx.op.Where(trivial, one, ctx.op.Sub(alpha, beta)))
        v = ctx.op.Add(tail, mask(ctx, here, a))
        if j < n - 1:
            w = ctx.op.ReduceSum(ctx.op.Mul(v, a), ctx.const([-2], I64), keepdims=1)
            w = ctx.op.Mul(w, mask(ctx, row_is(n, lambda c: c > j), a))
            a = ctx.op.Sub(a, ctx.op.Mul(ctx.op.Mul(tau, v), w))
        column = ctx.op.Where(flag(ctx, here), ctx.op.Where(trivial, alpha, beta),
                              ctx.op.Where(flag(ctx, col_is(m, lambda i: i > j)), tail, x))
        a = ctx.op.Where(flag(ctx, row_is(n, lambda c: c == j)), column, a)
        taus.append(tau)
        vs.append(v)
    return a, taus, vs


def householder_q(
    ctx: Ctx, vs: Sequence[ir.Value], taus: Sequence[ir.Value], m: int, ncols: int, like: ir.Value
) -> ir.Value:
    """``orgqr``: the first ``ncols`` columns of ``H_0 H_1 ... H_{k-1}``, [..., m, ncols]."""
    q = ctx.const(np.eye(m, ncols), like=like)
    if not vs:
        return expand_batch(ctx, q, like, [m, ncols])
    for v, tau in zip(reversed(vs), reversed(taus)):
        w = ctx.op.ReduceSum(ctx.op.Mul(v, q), ctx.const([-2], I64), keepdims=1)
        q = ctx.op.Sub(q, ctx.op.Mul(ctx.op.Mul(tau, v), w))
    return q


def reflectors(ctx: Ctx, a: ir.Value, tau: ir.Value, m: int, k: int) -> tuple[list[ir.Value], list[ir.Value]]:
    """The reflectors ``v_j`` ([..., m, 1]) and ``tau_j`` ([..., 1, 1]) packed by ``geqrf`` in ``a`` and ``tau``."""
    vs, taus = [], []
    for j in range(k):
        below = ctx.op.Mul(cols(ctx, a, j, j + 1), mask(ctx, col_is(m, lambda i: i > j), a))
        vs.append(ctx.op.Add(below, mask(ctx, col_is(m, lambda i: i == j), a)))
        t = ctx.op.Slice(tau, ctx.const([j], I64), ctx.const([j + 1], I64), ctx.const([-1], I64))
        taus.append(ctx.op.Unsqueeze(t, ctx.const([-1], I64)))
    return vs, taus


# -- symmetric eigendecomposition (cyclic Jacobi, float64) ---------------------------------------------


def jacobi_eigh(ctx: Ctx, a: ir.Value, n: int, r: int, *, descending: bool = False) -> tuple[ir.Value, ir.Value]:
    """Eigenvalues [..., n] sorted and eigenvectors [..., n, n] (columns) of the symmetric float64 ``a`` of rank ``r``.

    Jacobi rotations (Golub & Van Loan, Algorithm 8.5.2) in round-robin order: each round rotates n/2
    disjoint (p, q) pairs at once, a sweep of n - 1 rounds covers every pair, and one ONNX ``Loop``
    iteration runs one sweep; the sweep count converges float64 with a margin (checked up to n = 128).
    Eigenvector signs are Jacobi's, not LAPACK's (which depend on its tridiagonal QR iterations).
    """
    if n > MAX_JACOBI_SIZE:
        raise ctx.unsupported(
            f"a {n}x{n} eigen or singular value decomposition: the Jacobi sweeps are unrolled for matrices up to "
            f"{MAX_JACOBI_SIZE}x{MAX_JACOBI_SIZE}",
            fix="compute the decomposition outside the exported model, or on a smaller matrix",
        )
    v = ctx.op.Add(ctx.op.Mul(a, ctx.const(0.0, DOUBLE)), ctx.const(np.eye(n), DOUBLE))
    if n > 1:

        def sweep(body: Ctx, _: ir.Value, carried: list[ir.Value]) -> list[ir.Value]:
            ba, bv = carried
            for pairs in _round_robin(n):
                ba, bv = _rotate(body, ba, bv, n, r, pairs)
            return [ba, bv]

        sweeps = max(8, 6 + math.ceil(math.log2(n)))
        a, v = for_loop(ctx, ctx.const(sweeps, I64), [a, v], sweep, "jacobi_sweep")
    values = diag_part(ctx, a, n, n, r)
    order = ctx.op.TopK(values, ctx.const([n], I64), axis=-1, largest=int(descending), sorted=1, _outputs=2)
    index = ctx.op.Expand(ctx.op.Unsqueeze(order[1], ctx.const([-2], I64)), ctx.op.Shape(v))
    return order[0], ctx.op.GatherElements(v, index, axis=-1)


def _round_robin(n: int) -> list[list[tuple[int, int]]]:
    """The circle method: n - 1 rounds (n rounds for odd n) of disjoint pairs covering all pairs once."""
    size = n + n % 2
    rounds = []
    for t in range(size - 1):
        rest = list(range(1, size))
        seats = [0, *rest[t:], *rest[:t]]
        pairs = [(min(seats[i], seats[size - 1 - i]), max(seats[i], seats[size - 1 - i])) for i in range(size // 2)]
        rounds.append([(p, q) for p, q in pairs if q < n])
    return rounds


def for_loop(
    ctx: Ctx,
    trips: ir.Value,
    carried: Sequence[ir.Value],
    step: Callable[[Ctx, ir.Value, list[ir.Value]], list[ir.Value]],
    name: str,
) -> list[ir.Value]:
    """An ONNX ``Loop`` running ``step(body_ctx, iteration, carried) -> carried`` ``trips`` times."""
    return loop(ctx, name, trips, carried, lambda body, i, values: (step(body, i, values), None), fixed_shapes=False)


def _rotate(
    ctx: Ctx, a: ir.Value, v: ir.Value, n: int, r: int, pairs: list[tuple[int, int]]
) -> tuple[ir.Value, ir.Value]:
    """One round of rotations zeroing ``a[p, q]`` for disjoint pairs: ``A <- J^T A J``, ``V <- V J``.

    The per-pair cosines and sines ([..., pairs]) are spread into J's flattened entries by products
    with constant 0/1 matrices.
    """
    c0, c1 = ctx.const(0.0, DOUBLE), ctx.const(1.0, DOUBLE)
    flat = ctx.op.Reshape(a, ctx.const([0] * (r - 2) + [n * n], I64))

    def pick(index: list[int]) -> ir.Value:
        return ctx.op.Gather(flat, ctx.const(index, I64), axis=-1)

    app, aqq = pick([p * n + p for p, _ in pairs]), pick([q * n + q for _, q in pairs])
    apq = pick([p * n + q for p, q in pairs])
    done = ctx.op.Equal(apq, c0)
    theta = ctx.op.Div(ctx.op.Sub(aqq, app), ctx.op.Mul(ctx.const(2.0, DOUBLE), ctx.op.Where(done, c1, apq)))
    sign = ctx.op.Where(ctx.op.Less(theta, c0), ctx.const(-1.0, DOUBLE), c1)
    root = ctx.op.Sqrt(ctx.op.Add(ctx.op.Mul(theta, theta), c1))  # inf for a huge theta: t is then 0
    t = ctx.op.Where(done, c0, ctx.op.Div(sign, ctx.op.Add(ctx.op.Abs(theta), root)))
    c = ctx.op.Reciprocal(ctx.op.Sqrt(ctx.op.Add(ctx.op.Mul(t, t), c1)))
    s = ctx.op.Mul(t, c)
    spread_c, spread_s, rest = np.zeros((len(pairs), n * n)), np.zeros((len(pairs), n * n)), np.eye(n)
    for i, (p, q) in enumerate(pairs):
        spread_c[i, p * n + p] = spread_c[i, q * n + q] = 1.0
        spread_s[i, p * n + q], spread_s[i, q * n + p] = 1.0, -1.0
        rest[p, p] = rest[q, q] = 0.0
    base = ctx.op.Add(ctx.op.MatMul(c, ctx.const(spread_c, DOUBLE)), ctx.const(rest.reshape(-1), DOUBLE))
    turn = ctx.op.MatMul(s, ctx.const(spread_s, DOUBLE))
    square = ctx.const([0] * (r - 2) + [n, n], I64)
    j, j_t = ctx.op.Reshape(ctx.op.Add(base, turn), square), ctx.op.Reshape(ctx.op.Sub(base, turn), square)
    return ctx.op.MatMul(j_t, ctx.op.MatMul(a, j)), ctx.op.MatMul(v, j)


def symmetric_from(ctx: Ctx, a: ir.Value, n: int, r: int, *, lower: bool) -> ir.Value:
    """The symmetric matrix that A's lower (or upper) triangle describes, like LAPACK's ``uplo``."""
    k = ctx.const(-1 if lower else 1, I64)
    part = ctx.op.Trilu(a, k, upper=int(not lower))
    diag = ctx.op.Where(flag(ctx, np.eye(n, dtype=bool)), a, ctx.const(0.0, like=a))
    return ctx.op.Add(ctx.op.Add(part, mT(ctx, part, r)), diag)
