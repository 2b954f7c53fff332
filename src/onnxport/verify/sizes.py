"""Input sets at sizes other than the example's, made from the example's own values.

Verification must only feed the model inputs it is meant to take. Fresh random contents are not
such inputs: an attention mask with a row of zeros, token ids past the vocabulary or two batch sizes
that disagree make eager PyTorch itself compute garbage. So each generated set is the example
resized along its dynamic dims: cut in the middle to shrink, the middle element repeated to grow.
Both ends of every dim survive, so a right- or left-padded mask keeps its padding and its tokens,
ids stay ids, and positions stay in range.

Sizes follow torch's shape symbols. Symbols whose example values are equal move together (the batch
of ``input_ids`` and of ``attention_mask``), unless the user named them with distinct ``Dim``s;
derived dims follow their roots; every range torch.export recorded holds.

Verification asks for sets by need (``sizes_by_group``): each group of symbols must be seen once at
a size other than the example's, so it gets one set in which it alone moves, to the nearest size
the ranges allow, one below the example's first (cheaper to run) unless that would reach 0 or 1,
with a few fallback sizes in case eager PyTorch refuses the first. A group that a given input set
(``verify_inputs``) already shows at another size gets none.

Below 2 lies what torch.export does not guarantee: it traces dynamic dims as >= 2, setting sizes 0
and 1 apart, so a model that treats size 1 apart (a ``squeeze()``, an ``if x.shape[0] == 1``) is
captured without that path. Yet size 1 is the size most deployments run. So where the user's spec
allows 1 (a ``Dim``'s default ``min`` is 0) and every recorded range holds, size 1 comes first,
whatever the example's size, marked ``below_range``: eager PyTorch always decides it, and a
difference there fails the export (see ``stage``).

Above a range torch.export bounded lies the same risk: a model that loops in Python over chunks of a dim
runs the loop once per chunk of the example, and torch.export keeps the dim dynamic only up to the
example's chunk count (``(s + 63) // 64 == 1``: sizes up to 64), as a range or only as a guard. Where the
user's spec allows more, the group gets one set above the bound, at twice it (``GroupSizes.above``, bounds
under 4096): eager PyTorch refusing it too is the model's own limit; eager running it says whether the ONNX
model holds there.

Sizes that keep the model's modular guards are the only ones tried (a dim the model takes only at
multiples of a chunk length, see ``onnxport.capture._dim_constraints``). A dim the model requires to equal a
size computed from input values (a vision tower's patch count, the sum of its images' ``t*h*w``) is not
resized at all: no size of it alone is an input the model takes (eager PyTorch may even run one, broadcasting
a size 1); the report says it was checked at the example's size, or at those of ``verify_inputs``.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import sympy
import torch
from torch.utils._sympy.functions import Mod, PythonMod
from torch.utils._sympy.numbers import IntInfinity, NegativeIntInfinity

from onnxport.capture.dynamic import (
    declared_maximums,
    declared_minimums,
    dim_names,
    example_symbol_values,
    tensor_input_shapes,
    user_named_symbols,
)
from onnxport.capture._dim_constraints import (
    data_bound,
    guard_symbols,
    guards_hold,
    modular_guards,
    relational_guards,
    size_step,
)
from onnxport.errors import InvalidInputError

__all__ = ["GroupSizes", "SampleSets", "guard_breaking_sets", "other_sizes", "resize_keeping_ends", "sizes_by_group",
           "sizes_in_steps"]

# Per dim name (``pixel_values_dim2``), the multiple every input's size there is (an image processor's
# ``ensure_multiple_of``): a remainder guard is broken only at such sizes (see ``sizes_in_steps``).
_STEPS: contextvars.ContextVar[Mapping[str, int]] = contextvars.ContextVar("onnxport_size_steps", default={})


@contextlib.contextmanager
def sizes_in_steps(steps: Mapping[str, int]) -> Iterator[None]:
    """Inside the context, verification breaks a guard on a size's remainder only at sizes the inputs come in:
    multiples of ``steps[name]`` for the dim named ``name`` (an image processor that makes every side a multiple
    of 32 never gives a side of 127, where a model's ``if w // 8 % 2`` would take its other branch)."""
    token = _STEPS.set(dict(steps))
    try:
        yield
    finally:
        _STEPS.reset(token)

_OFFSETS = (-1, 1, 3, 2, -2, 5, 4, 7, -3, 9)
_ABOVE_LIMIT = 4096  # a range torch.export bounded below this is checked just above its bound
_NEAREST = (-1, 1, 2, -2, 3, 4, -3, 5, 6, 7, 9)  # one group moving alone: nearest first, smaller first


class SampleSets(list):
    """Input sets (flat, like the example); ``descriptions[i]`` says the sizes of set i (``batch=3, seq=5``)."""

    descriptions: list[str]


class _Dims:
    """The example's dynamic dims as torch.export recorded them: symbols, their groups and names."""

    def __init__(self, ep: torch.export.ExportedProgram, flat: Sequence[Any], specs: list[dict[int, Any]],
                 input_names: Sequence[str] | None):
        self.ep = ep
        self.shapes = tensor_input_shapes(ep)
        self.flat = list(flat)
        self.where = [i for i, v in enumerate(self.flat) if isinstance(v, torch.Tensor)]
        if len(self.where) != len(self.shapes):
            raise InvalidInputError(
                f"got {len(self.where)} example tensors for a program with {len(self.shapes)} tensor inputs",
                fix="pass tree_leaves((args, kwargs)) of the inputs the program was exported with",
            )
        self.roots = list(dict.fromkeys(
            s for row in self.shapes for e in row if e is not None for s in sorted(e.free_symbols, key=str)
        ))
        self.guards = modular_guards(ep)
        self.example: dict[Any, int] = {}
        self.groups: list[list[Any]] = []
        self.names: dict[str, str] = {}
        if self.roots:
            self.example = example_symbol_values(ep, self.roots, [self.flat[i] for i in self.where])
            self.groups = _groups(self.roots, self.example, user_named_symbols(ep, specs))
            self.names = dim_names(ep, specs, input_names)
        # the multiples the inputs come in (``sizes_in_steps``), as guards every made-up size keeps
        steps = _STEPS.get()
        self.step_guards = [sympy.Eq(Mod(r, step), 0) for r in self.roots
                            if (step := steps.get(self.names.get(str(r), ""), 1)) > 1]
        self.guards += self.step_guards

    def name(self, group: list[Any]) -> str:
        return "=".join(self.names.get(str(r), str(r)) for r in group)

    def bounds(self, group: list[Any]) -> tuple[int, int]:
        bounds = [_bounds(self.ep, r) for r in group]
        return max(b[0] for b in bounds), min(b[1] for b in bounds)

    def resized(self, values: dict[Any, int]) -> list[Any]:
        """The example's leaves with every tensor resized to the sizes ``values`` give its dims."""
        new = list(self.flat)
        for pos, row in zip(self.where, self.shapes):
            sizes = [int(e.xreplace({r: sympy.Integer(values[r]) for r in e.free_symbols})) if e is not None else None
                     for e in row]
            new[pos] = _resized(self.flat[pos], sizes)
        return new

    def observed(self, flat: Sequence[Any]) -> dict[Any, int]:
        """The symbols' values in another input set (those its dims show on their own)."""
        tensors = [v for v in flat if isinstance(v, torch.Tensor)]
        values: dict[Any, int] = {}
        if len(tensors) != len(self.shapes):
            return values
        for row, tensor in zip(self.shapes, tensors):
            for expr, size in zip(row, tensor.shape if tensor.dim() == len(row) else ()):
                if expr is not None and isinstance(expr, sympy.Symbol):
                    values.setdefault(expr, int(size))
        return values


def other_sizes(
    ep: torch.export.ExportedProgram,
    example_flat_inputs: Sequence[Any],
    specs: list[dict[int, Any]],
    count: int = 3,
    input_names: Sequence[str] | None = None,
) -> SampleSets:
    """Up to ``count`` input sets at sizes other than the example's, valid for ``ep``.

    Each group of symbols takes a value near its example value (-1, +1, +3, ...) within the recorded
    ranges, avoiding 0 and 1 where the range allows. Non-tensor leaves pass through unchanged.
    Empty when no input dim is symbolic.
    """
    dims = _Dims(ep, example_flat_inputs, specs, input_names)
    result = SampleSets()
    result.descriptions = []
    if not dims.roots:
        return result
    example, groups, roots = dims.example, dims.groups, dims.roots
    seen = {tuple(example[r] for r in roots)}
    for attempt in range(8 * count):
        if len(result) == count:
            break
        values = {}
        for n, group in enumerate(groups):
            offset = _OFFSETS[(attempt + n) % len(_OFFSETS)]
            value = _pick(example[group[0]], dims.bounds(group), offset)
            values.update(dict.fromkeys(group, value))
        key = tuple(values[r] for r in roots)
        if key in seen or not _fits(ep, values, guards=dims.guards):
            continue
        seen.add(key)
        result.append(dims.resized(values))
        result.descriptions.append(", ".join(f"{dims.name(group)}={values[group[0]]}" for group in groups))
    return result


class GroupSizes(SampleSets):
    """Candidate input sets for one group of symbols (the first to try first): ``group`` names it,
    ``symbols`` are torch's, ``sizes[i]`` is the group's size in set i and ``below_range[i]`` says whether
    it lies below the range torch.export recorded (size 1). ``above`` is a set just above that range, when
    torch.export bounded it where the user's spec does not (see ``sizes_by_group``), or None."""

    group: str
    symbols: list[Any]
    sizes: list[int]
    below_range: list[bool]
    above: tuple[list[Any], int, tuple[int, int]] | None = None  # (inputs, size, the range recorded)
    bound_by_data: sympy.Expr | None = None  # the group must equal a size computed from input values

    def add(self, inputs: list[Any], size: int, *, below_range: bool = False) -> None:
        self.append(inputs)
        self.sizes.append(size)
        self.descriptions.append(f"{self.group}={size}")
        self.below_range.append(below_range)


def sizes_by_group(
    ep: torch.export.ExportedProgram,
    example_flat_inputs: Sequence[Any],
    specs: list[dict[int, Any]],
    *,
    input_names: Sequence[str] | None = None,
    given: Sequence[Sequence[Any]] = (),
    tries: int = 3,
) -> list[GroupSizes]:
    """Per group of symbols that needs one, up to ``tries`` candidate input sets in which that group
    alone takes another size (1 where the spec allows it, then nearest first, below the example's
    first), the rest the example's.

    A group needs none when one of the ``given`` input sets (flat leaves, like the example) already
    has it at another size, or when its recorded range allows no other size.
    """
    dims = _Dims(ep, example_flat_inputs, specs, input_names)
    observed = [dims.observed(flat) for flat in given]
    declared = declared_minimums(ep, specs) if dims.roots else {}
    ceilings = declared_maximums(ep, specs) if dims.roots else {}
    bound = data_bound(ep) if dims.roots else {}
    result = []
    for group in dims.groups:
        lead, start = group[0], dims.example[group[0]]
        if any(values.get(lead, start) != start for values in observed):
            continue
        candidates = GroupSizes()
        candidates.group, candidates.symbols = dims.name(group), list(group)
        candidates.descriptions, candidates.sizes, candidates.below_range = [], [], []
        if any(s in bound for s in group):  # resized alone it is no input the model takes
            candidates.bound_by_data = next(bound[s] for s in group if s in bound)
            result.append(candidates)
            continue
        one = {**dims.example, **dict.fromkeys(group, 1)}
        if (start >= 2 and all(declared.get(str(s), 2) <= 1 for s in group)
                and _fits(ep, one, declared=group, guards=dims.guards) and guards_hold(dims.step_guards, one)):
            candidates.add(dims.resized(one), 1, below_range=True)
        step = size_step(dims.guards, group, dims.example)
        offsets = _NEAREST if step is None else tuple(k * step[0] for k in (-1, 1, 2, 3))
        for offset in offsets:
            value = _pick(start, dims.bounds(group), offset)
            values = {**dims.example, **dict.fromkeys(group, value)}
            if value == start or value in candidates.sizes or not _fits(ep, values, guards=dims.guards):
                continue
            candidates.add(dims.resized(values), value)
            if len(candidates) == tries:
                break
        candidates.above = _above_range(dims, group, ceilings)
        if candidates or candidates.above:
            result.append(candidates)
    return result


def guard_breaking_sets(
    ep: torch.export.ExportedProgram,
    example_flat_inputs: Sequence[Any],
    specs: list[dict[int, Any]],
    *,
    input_names: Sequence[str] | None = None,
    rewritten: Sequence[Any] = (),
    most: int = 3,
) -> SampleSets:
    """Input sets at which a guard comparing dynamic sizes fails (see ``relational_guards``): the model branched
    on its sizes as Python numbers (``if x.shape[0] == y.shape[0]``), torch.export kept the example's branch and
    the guard, and the ONNX model computes that branch at every size. One set per guard, up to ``most``: one
    group of the guard's dims moved to another's size or next to its own, every range and chunk guard kept;
    ``descriptions[i]`` names the sizes and the guard, in the user's dim names. Eager PyTorch then decides: it
    refuses such sizes (the guard was the model's requirement), or computes what the ONNX model must.
    ``rewritten``: the guards of such ``if``s that capture rewrote into ``torch.cond`` (see
    ``capture.size_branches``): their sets are where the graph's other branch runs."""
    result = SampleSets()
    result.descriptions = []
    guards = list(dict.fromkeys([*rewritten, *relational_guards(ep)]))
    if not guards and not modular_guards(ep):  # the common case: nothing to resize for
        return result
    dims = _Dims(ep, example_flat_inputs, specs, input_names)
    if not dims.roots:
        return result
    group_of = {symbol: group for group in dims.groups for symbol in group}
    names = {symbol: dims.name(group) for symbol, group in group_of.items()}
    for guard in guards:
        symbols = sorted(guard.free_symbols, key=str)
        if not set(symbols) <= set(group_of) or len({id(group_of[s]) for s in symbols}) < 2:
            continue  # a size of no input (derived), or dims that move together
        values = _breaking(ep, dims, guard, symbols, group_of)
        if values is None:
            continue
        result.append(dims.resized(values))
        moved = ", ".join(f"{names[s]}={values[s]}" for s in symbols if values[s] != dims.example[s])
        readable = _shown(guard.xreplace({s: sympy.Symbol(names[s]) for s in symbols}))
        result.descriptions.append(f"{moved} (the other branch of an if on sizes: {readable} is false)"
                                   if guard in rewritten else f"{moved} (where the program's guard {readable} fails)")
        if len(result) == most:
            break
    for guard, group, values in _remainders_broken(ep, dims, group_of, rewritten, most):
        result.append(dims.resized(values))
        readable = _shown(guard.xreplace({s: sympy.Symbol(names[s]) for s in guard.free_symbols}))
        result.descriptions.append(
            f"{dims.name(group)}={values[group[0]]} " + (f"(the other branch of an if on sizes: {readable} is false)"
                                                         if guard in rewritten else
                                                         f"(where the program's guard {readable} fails)"))
    return result


def _shown(guard: sympy.Expr, most: int = 160) -> str:
    """A guard as text, its middle cut where it is long (a guard over a Swin's padded windows runs to thousands of
    characters)."""
    text = str(guard)
    return text if len(text) <= most else f"{text[:most // 2]} ... {text[-most // 2:]}"


def _remainders_broken(ep: torch.export.ExportedProgram, dims: _Dims, group_of: dict[Any, list[Any]],
                       rewritten: Sequence[Any], most: int) -> list[tuple[sympy.Expr, list[Any], dict[Any, int]]]:
    """Up to ``most`` guards on one group's remainder (``Mod(n, 2) == 0``: an ``if n % 2`` that kept the example's
    branch, or a reshape that needs the multiple; or such an ``if`` capture rewrote into ``torch.cond``) with sizes
    near the example's where each fails, every range and the other groups' guards kept: eager PyTorch refuses them
    (the model's requirement) or computes what the ONNX model must. One size per group and guard; a guard already
    failing at an earlier set's sizes gets none."""
    found: list[tuple[sympy.Expr, list[Any], dict[Any, int]]] = []
    remainders = [g for g in rewritten if g.has(Mod, PythonMod) and len(g.free_symbols) == 1]
    for guard in list(dict.fromkeys([*remainders, *dims.guards])):
        if guard in dims.step_guards:
            continue  # the inputs' own multiples: no input breaks them
        symbols = guard_symbols(guard)
        if len(found) == most or not symbols or not symbols <= set(group_of):
            continue
        group = group_of[next(iter(symbols))]
        if any(group_of[s] is not group for s in symbols):
            continue  # sizes of two groups: relational, not a remainder
        if any(not guards_hold([guard], values) for _, _, values in found):
            continue
        start = dims.example[group[0]]
        far = (start * 2 + 64 + k for k in range(128))
        if not any(guards_hold([guard], {**dims.example, **dict.fromkeys(group, n)}) for n in far):
            continue  # a bound (one chunk of the example's: (s + 3) // 4 == 1), not a remainder: ``_above_range``'s
        others = [g for g in dims.guards if not guard_symbols(g) & set(group)]
        low, high = dims.bounds(group)
        step = max((_STEPS.get().get(dims.names.get(str(s), ""), 1) for s in group), default=1)
        for value in (start + k * step for k in _NEAREST):
            values = {**dims.example, **dict.fromkeys(group, value)}
            if low <= value <= high and value >= 2 and _fits(ep, values, guards=others) \
                    and not guards_hold([guard], values):
                found.append((guard, group, values))
                break
    return found


def _breaking(ep: torch.export.ExportedProgram, dims: _Dims, guard: sympy.Expr, symbols: list[Any],
              group_of: dict[Any, list[Any]]) -> dict[Any, int] | None:
    """Sizes at which ``guard`` fails and every range and chunk guard holds: one group moved to another
    symbol's example size, or near its own; None when none is found."""
    for symbol in symbols:
        group, start = group_of[symbol], dims.example[symbol]
        low, high = dims.bounds(group)
        targets = [dims.example[other] for other in symbols if other is not symbol]
        for value in dict.fromkeys([*targets, *(start + k for k in (-1, 1, 2, -2, 3, 5))]):
            if value == start or value < max(low, 2) or value > high:
                continue
            values = {**dims.example, **dict.fromkeys(group, value)}
            if not _fits(ep, values, guards=dims.guards):
                continue
            if guard.xreplace({s: sympy.Integer(values[s]) for s in symbols}) in (sympy.false, False):
                return values
    return None


def _above_range(dims: _Dims, group: list[Any], ceilings: dict[str, int | None]) -> tuple[list[Any], int, tuple[int, int]] | None:
    """The example with ``group`` above the range torch.export recorded for it (twice its bound, or the
    next size the model's guards allow), or above the bound its guards set, where the user's spec
    allows larger sizes (``Dim.DYNAMIC``, ``Dim.AUTO``, or a ``Dim`` with a larger ``max``): a model that
    fixes its graph to sizes up to a bound (a Python loop over chunks, run once per chunk of the example)
    computes other sizes wrong, unless it refuses them in eager PyTorch too; verification lets eager say."""
    if not all(str(s) in ceilings for s in group):
        return None
    def at(size: int) -> dict[Any, int]:
        return {**dims.example, **dict.fromkeys(group, size)}

    lower, upper = dims.bounds(group)
    if upper >= _ABOVE_LIMIT:  # no range recorded; the model's guards may still bound it
        upper = _guard_bound([g for g in dims.guards if guard_symbols(g) & set(group)], dims.example[group[0]], at)
    allowed = min((c for s in group if (c := ceilings[str(s)]) is not None), default=None)
    if upper is None or upper >= _ABOVE_LIMIT or (allowed is not None and allowed <= upper):
        return None  # unbounded, declared so, or so large that an eager run above it would cost too much

    # twice the bound and more: past the sizes next to it, where torch's shape checks single out some (a
    # contiguity rule at one size), and where a loop over chunks of the example runs twice
    above = range(2 * upper + 1, 2 * upper + 513)
    # the guards that bound the range itself ((s + 3) // 4 == 1: one chunk) hold nowhere above it; the others
    # (a multiple of a chunk length) say which sizes above it the model takes
    kept = [g for g in dims.guards if guard_symbols(g) & set(group) and any(guards_hold([g], at(n)) for n in above)]
    for size in above[:64]:
        if allowed is not None and size > allowed:
            return None
        if guards_hold(kept, at(size)):
            return dims.resized(at(size)), size, (lower, upper)
    return None


def _groups(roots: list[Any], example: dict[Any, int], named: dict[str, str]) -> list[list[Any]]:
    """Symbols that move together: equal in the example, and not given distinct names by the user."""
    groups: list[list[Any]] = []
    for root in roots:
        for group in groups:
            lead = group[0]
            apart = str(root) in named and str(lead) in named and named[str(root)] != named[str(lead)]
            if example[lead] == example[root] and not apart:
                group.append(root)
                break
        else:
            groups.append([root])
    return groups


def _resized(example: torch.Tensor, sizes: list[int | None]) -> torch.Tensor:
    out = example
    for dim, size in enumerate(sizes):
        if size is not None and size != out.shape[dim]:
            out = resize_keeping_ends(out, dim, size)
    return out.clone()


def resize_keeping_ends(t: torch.Tensor, dim: int, size: int) -> torch.Tensor:
    """``t`` with ``size`` entries along ``dim``: its first half and last half kept, the middle cut out
    (to shrink) or filled with copies of the last entry of the first half (to grow); zeros when ``t`` is empty there."""
    n = t.shape[dim]
    if n == 0:  # nothing to keep (an empty KV cache, say): zeros
        return t.new_zeros([size if d == dim else s for d, s in enumerate(t.shape)])
    if size <= n:
        head = (size + 1) // 2
        return torch.cat([t.narrow(dim, 0, head), t.narrow(dim, n - (size - head), size - head)], dim)
    head = (n + 1) // 2
    middle = t.narrow(dim, head - 1, 1)
    fill = middle.expand(*[size - n if d == dim else s for d, s in enumerate(t.shape)])
    return torch.cat([t.narrow(dim, 0, head), fill, t.narrow(dim, head, n - head)], dim)


def _bounds(ep: torch.export.ExportedProgram, symbol: Any) -> tuple[int, int]:
    vr = ep.range_constraints.get(symbol)
    if vr is None:
        return 0, 1 << 30
    return _finite_or(vr.lower, 0), _finite_or(vr.upper, 1 << 30)


def _finite_or(value: Any, default: int) -> int:
    # torch's int_oo is a sympy object whose is_finite sends sympy into float arithmetic; compare instead
    if isinstance(value, (IntInfinity, NegativeIntInfinity)) or value in (sympy.oo, -sympy.oo):
        return default
    return int(value)


def _guard_bound(guards: Sequence[Any], start: int, at: Any) -> int | None:
    """The largest size the ``guards`` allow when they allow none above it, though no range says so:
    torch.export keeps ``(s + pad) // 64 == 1`` (a chunk count fixed to the example's) as a guard only.
    Probed at the sizes just above ``start`` and at powers of two; None when every probe holds, or when
    sizes hold again above one that fails (a dim taking multiples of a chunk length)."""
    if not guards:
        return None
    probes = sorted({start + d for d in range(1, 9)} | {(1 << k) + e for k in range(2, 13) for e in (0, 1)})
    probes = [p for p in probes if start < p < _ABOVE_LIMIT]
    failing = [p for p in probes if not guards_hold(guards, at(p))]
    if not failing or any(guards_hold(guards, at(p)) for p in probes if p > failing[0]):
        return None
    low, high = max((p for p in probes if p < failing[0]), default=start), failing[0]
    while high - low > 1:  # low holds, high fails
        mid = (low + high) // 2
        low, high = (mid, high) if guards_hold(guards, at(mid)) else (low, mid)
    return low


def _pick(example: int, bounds: tuple[int, int], offset: int) -> int:
    lower, upper = bounds
    if upper >= 2:  # sizes 0 and 1 behave differently (broadcasting, empty tensors); only where forced
        lower = max(lower, 2)
    return min(max(example + offset, lower), upper)


def _fits(ep: torch.export.ExportedProgram, values: dict[Any, int], declared: Sequence[Any] = (),
          guards: Sequence[Any] = ()) -> bool:
    """Whether every range torch.export recorded (derived ones included) holds at ``values``, and every
    guard of ``guards`` (what the model requires of sizes: multiples of a chunk); the own ranges of the
    ``declared`` symbols are left out (their lower bound of 2 for ``Dim.DYNAMIC`` is torch's setting sizes
    0 and 1 apart, which the caller knows the user's spec allows)."""
    if guards and not declared and not guards_hold(guards, values):
        return False
    for expr, vr in ep.range_constraints.items():
        if not expr.free_symbols <= set(values) or expr in declared:
            continue
        value = expr.xreplace({s: sympy.Integer(values[s]) for s in expr.free_symbols})
        if not (vr.lower <= value <= vr.upper):
            return False
    return True
