"""torch's CPU quickselect (``quick_select_template``, behind kthvalue) as an ONNX ``Loop``.

Equal values end up wherever torch's quickselect leaves them, and so does the index kthvalue returns
for them: reproducing the index means running the same algorithm. Every row runs at once, one step of
the algorithm's loops per ``Loop`` iteration, each row in its own phase:

- PIVOT: done when [L, R] holds one element; order it when two; else sort the median of three into
  L (the pivot), L + 1 and R, and start scanning with i = L + 1, j = R.
- SCAN: both of the partition's scans at once (nothing moves in between): ``do i++ while piv > v[i]``
  and ``do j-- while v[j] > piv``.
- SWAP: if j < i, swap L and j and narrow [L, R] to the side holding k (then PIVOT); else swap i and
  j (then SCAN).

A step costs O(n) per row (the scans read the whole row) and a row takes O(n) steps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import onnx_ir as ir

from onnxport.translate.builder import Ctx
from onnxport.translate.ops._common import FLOAT_TYPES, axes, rank

INT64 = ir.DataType.INT64
PIVOT, SCAN, SWAP, DONE = 0, 1, 2, 3


def quickselect(ctx: Ctx, x: ir.Value, k: int, d: int, keepdim: bool) -> tuple[ir.Value, ir.Value]:
    """The element torch's kthvalue picks as the ``k``-th smallest (0-based) along ``d``, and its index."""
    r = rank(x)
    perm = [a for a in range(r) if a != d] + [d]
    moved = ctx.op.Transpose(x, perm=perm) if d != r - 1 else x
    n = ctx.op.Shape(x, start=d, end=d + 1)
    rows = ctx.op.Reshape(moved, ctx.op.Concat(ctx.const([-1]), n, axis=0))
    if x.dtype == ir.DataType.BOOL:  # Greater has no bool kernel
        rows = ctx.cast(rows, ir.DataType.INT32)
    count = ctx.op.Shape(rows, start=0, end=1)
    zeros = ctx.op.Expand(ctx.const(0), count)
    size = ctx.op.Squeeze(n, axes(ctx, [0]))
    positions = ctx.op.Expand(ctx.op.Range(ctx.const(0), size, ctx.const(1)), ctx.op.Shape(rows))
    last = ctx.op.Sub(size, ctx.const(1))
    # carried: values, their indices, L, R, i, j, pivot, phase
    state = [rows, positions, zeros, ctx.op.Add(zeros, last), zeros, zeros,
             ctx.op.ReduceMin(rows, axes(ctx, [1]), keepdims=0), zeros]
    values, indices = _loop(ctx, state, lambda body, now: _step(body, now, k, last, positions))[:2]
    pick = ctx.op.Expand(ctx.const([[k]]), ctx.op.Concat(count, ctx.const([1]), axis=0))
    shape = ctx.op.Concat(ctx.op.Shape(moved, end=-1), ctx.const([1]), axis=0)
    value = ctx.op.Reshape(ctx.op.GatherElements(values, pick, axis=1), shape)
    index = ctx.op.Reshape(ctx.op.GatherElements(indices, pick, axis=1), shape)
    if d != r - 1:
        back = [perm.index(a) for a in range(r)]
        value, index = ctx.op.Transpose(value, perm=back), ctx.op.Transpose(index, perm=back)
    if not keepdim:
        value, index = ctx.op.Squeeze(value, axes(ctx, [d])), ctx.op.Squeeze(index, axes(ctx, [d]))
    return ctx.cast(value, x.dtype), index


def _loop(ctx: Ctx, carried: list[ir.Value], step: Callable[[Ctx, list[ir.Value]], list[ir.Value]]) -> list[ir.Value]:
    """An ONNX ``Loop`` with no trip count, run while some row is not done: ``step(body, values)`` gives the
    new values (the phase last)."""
    name = ctx.names.unique("quickselect")
    formals = [ir.Value(name=ctx.names.unique(f"{name}_{i}")) for i in range(len(carried) + 2)]
    formals[0].dtype, formals[0].shape = INT64, ir.Shape([])
    formals[1].dtype, formals[1].shape = ir.DataType.BOOL, ir.Shape([])
    for formal, value in zip(formals[2:], carried):
        formal.dtype = value.dtype
    body = ctx.child(name, formals)
    body.node = ctx.node
    new = step(body, formals[2:])
    graph = body.finish([_any_active(body, new[-1]), *new])
    return list(ctx.op.Loop(None, _any_active(ctx, carried[-1]), *carried, body=graph, _outputs=len(carried)))


def _any_active(ctx: Ctx, phase: ir.Value) -> ir.Value:
    """Whether some row is not done; false for no rows."""
    active = ctx.op.Cast(ctx.op.Less(phase, ctx.const(DONE)), to=int(INT64))
    return ctx.op.Greater(ctx.op.ReduceSum(active, keepdims=0), ctx.const(0))


class _Rows:
    """Per-row reads and torch's comparison, inside the loop body."""

    def __init__(self, ctx: Ctx, values: ir.Value, last: ir.Value):
        self.op, self.c, self.values, self.last = ctx.op, ctx.const, values, last

    def clamp(self, pos: ir.Value) -> ir.Value:
        return self.op.Min(self.op.Max(pos, self.c(0)), self.last)

    def at(self, arr: ir.Value, pos: ir.Value) -> ir.Value:
        """``arr[row, pos[row]]`` for every row."""
        column = self.op.Unsqueeze(self.clamp(pos), self.c([1]))
        return self.op.Squeeze(self.op.GatherElements(arr, column, axis=1), self.c([1]))

    def gt(self, a: ir.Value, b: ir.Value) -> ir.Value:
        """torch's ``a > b`` with NaN above everything."""
        out = self.op.Greater(a, b)
        if self.values.dtype not in FLOAT_TYPES:
            return out
        return self.op.Or(out, self.op.And(self.op.IsNaN(a), self.op.Not(self.op.IsNaN(b))))

    def swap_if(self, cond: ir.Value, a: Sequence[ir.Value], b: Sequence[ir.Value]) -> tuple[list, list]:
        """(value, index) registers ``a`` and ``b`` exchanged where ``cond``."""
        where = self.op.Where
        return [where(cond, y, x) for x, y in zip(a, b)], [where(cond, x, y) for x, y in zip(a, b)]


def _pivot(rows: _Rows, v: ir.Value, ix: ir.Value, lo: ir.Value, hi: ir.Value) -> tuple[list, list, ir.Value]:
    """PIVOT's writes for three elements or more: swap(mid, L + 1), then three conditional swaps among
    L, L + 1 and R, done in registers. Returns (positions, (value, index) pairs, the pivot)."""
    op, one = rows.op, rows.c(1)
    lo1, mid = op.Add(lo, one), op.Add(lo, op.Div(op.Sub(hi, lo), rows.c(2)))
    at_lo, at_lo1, at_hi, at_mid = ([rows.at(arr, pos) for arr in (v, ix)] for pos in (lo, lo1, hi, mid))
    alias = op.Equal(mid, lo1)  # mid lies strictly inside (L, R), so only L + 1 can be it
    s_l1 = [op.Where(alias, a, b) for a, b in zip(at_lo1, at_mid)]
    s_l, s_r = at_lo, at_hi
    s_l1, s_r = rows.swap_if(rows.gt(s_l1[0], s_r[0]), s_l1, s_r)
    s_l, s_r = rows.swap_if(rows.gt(s_l[0], s_r[0]), s_l, s_r)
    s_l1, s_l = rows.swap_if(rows.gt(s_l1[0], s_l[0]), s_l1, s_l)
    s_mid = [op.Where(alias, a, b) for a, b in zip(s_l1, at_lo1)]
    return [lo, lo1, hi, mid], [s_l, s_l1, s_r, s_mid], s_l[0]


def _scan(rows: _Rows, v: ir.Value, positions: ir.Value, lo: ir.Value, hi: ir.Value, i: ir.Value, j: ir.Value,
          piv: ir.Value) -> tuple[ir.Value, ir.Value]:
    """SCAN: the first i' > i with ``!(piv > v[i'])`` and the last j' < j with ``!(v[j'] > piv)``."""
    op, col = rows.op, rows.c([1])
    inside = op.And(op.GreaterOrEqual(positions, op.Unsqueeze(lo, col)),
                    op.LessOrEqual(positions, op.Unsqueeze(hi, col)))
    pv = op.Unsqueeze(piv, col)
    stop_i = op.And(op.And(inside, op.Greater(positions, op.Unsqueeze(i, col))), op.Not(rows.gt(pv, v)))
    stop_j = op.And(op.And(inside, op.Less(positions, op.Unsqueeze(j, col))), op.Not(rows.gt(v, pv)))
    return (op.ReduceMin(op.Where(stop_i, positions, rows.c(2**62)), col, keepdims=0),
            op.ReduceMax(op.Where(stop_j, positions, rows.c(-1)), col, keepdims=0))


def _step(ctx: Ctx, now: list[ir.Value], k: int, last: ir.Value, positions: ir.Value) -> list[ir.Value]:
    """One step for every row. Each writes at most four places of its row: one ScatterElements per array."""
    v, ix, lo, hi, i, j, piv, phase = now
    rows, op, c = _Rows(ctx, v, last), ctx.op, ctx.const
    at_pivot, at_scan, at_swap = (op.Equal(phase, c(p)) for p in (PIVOT, SCAN, SWAP))
    pair = op.Equal(hi, op.Add(lo, c(1)))
    split = op.And(at_pivot, op.Not(op.Or(op.LessOrEqual(hi, lo), pair)))
    ordered = op.And(at_pivot, pair)
    split_pos, split_val, new_piv = _pivot(rows, v, ix, lo, hi)
    at_lo, at_hi = [rows.at(arr, lo) for arr in (v, ix)], [rows.at(arr, hi) for arr in (v, ix)]
    pair_val = rows.swap_if(rows.gt(at_lo[0], at_hi[0]), at_lo, at_hi)
    crossed = op.Less(j, i)
    a = op.Where(crossed, lo, i)
    swap_val = ([rows.at(arr, j) for arr in (v, ix)], [rows.at(arr, a) for arr in (v, ix)])
    # four (position, value) writes per row, by phase; a row with nothing to write rewrites v[L]
    pos_cols, val_cols = [], [[], []]
    for w in range(4):
        pos = op.Where(split, split_pos[w], op.Where(ordered, (lo, hi)[w % 2], op.Where(at_swap, (a, j)[w % 2], lo)))
        pos_cols.append(op.Unsqueeze(rows.clamp(pos), c([1])))
        for t in range(2):
            val = op.Where(split, split_val[w][t], op.Where(ordered, pair_val[w % 2][t],
                                                              op.Where(at_swap, swap_val[w % 2][t], at_lo[t])))
            val_cols[t].append(op.Unsqueeze(val, c([1])))
    where = op.Concat(*pos_cols, axis=1)
    v_new, ix_new = (op.ScatterElements(arr, where, op.Concat(*cols, axis=1), axis=1)
                     for arr, cols in zip((v, ix), val_cols))
    scan_i, scan_j = _scan(rows, v, positions, lo, hi, i, j, piv)
    closes = op.And(at_swap, crossed)
    new_lo = op.Where(op.And(closes, op.LessOrEqual(j, c(k))), i, lo)
    new_hi = op.Where(op.And(closes, op.GreaterOrEqual(j, c(k))), op.Sub(j, c(1)), hi)
    new_i = op.Where(split, op.Add(lo, c(1)), op.Where(at_scan, scan_i, i))
    new_j = op.Where(split, hi, op.Where(at_scan, scan_j, j))
    new_phase = op.Where(at_pivot, op.Where(split, c(SCAN), c(DONE)),
                         op.Where(at_scan, c(SWAP), op.Where(at_swap, op.Where(crossed, c(PIVOT), c(SCAN)), phase)))
    return [v_new, ix_new, new_lo, new_hi, new_i, new_j, op.Where(split, new_piv, piv), new_phase]
