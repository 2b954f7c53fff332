"""Guards that hold at every size but that torch's symbolic reasoning cannot prove.

A speech encoder downsamples its audio with strided convolutions: its states are ``(length - 1) // 4`` long
(Speech2Text) or a chain of such floors (Moonshine). Reshaping them, torch checks that a product divides evenly,
``(192 + 32 * ((length - 1) // 4)) % (6 + (length - 1) // 4) == 0``, true for every length, but sympy does not
factor it; torch.export then refuses the dynamic length ("not all values ... satisfy the generated guard") and
suggests lengths of one residue alone.

:func:`capture_deferred` captures again with such guards recorded as runtime assertions in the graph
(``prefer_deferred_runtime_asserts_over_guards``) and evaluates each assertion at every size from the smallest
its dims take to :data:`DENSE`, and at sparser sizes up to :data:`FARTHEST` (random ones, and those around each
power of two and of ten: every residue of the strides a model downsamples by, and lengths of minutes of audio):
a capture whose assertions all hold there is taken; one whose assertion fails at some size is not (that guard
decides something: a branch on the size, which must stay an error), and the first capture's error stands. An ONNX
file cannot raise, so a taken assertion is dropped like the rest of torch's proven checks.
"""

from __future__ import annotations

import contextlib
import functools
import random
from collections.abc import Iterator
from typing import Any

import torch

from onnxport.capture._evaluate import Evaluated

__all__ = ["DENSE", "FARTHEST", "capture_deferred", "reported_violations", "unproven_guards"]

DENSE = 2048  # every size up to this
FARTHEST = 2_000_000  # sampled sizes up to this (two minutes of 16 kHz audio)
_SAMPLED = 2000  # random sizes past DENSE, per dim
_COMBINATIONS = 5_000  # points checked at most when an assertion reads several dims


@contextlib.contextmanager
def reported_violations() -> Iterator[None]:
    """torch.export's constraint violation raised as it found it where torch's suggested fixes, which it appends,
    cannot be written: its solver builds a ``Dim`` of an empty range (``Cannot create Dim with inconsistent min=0,
    max=-oo``) for a length a model pads to a multiple of its block (LongT5's local attention), and raises that
    instead, an error :func:`unproven_guards` would not see."""
    from torch.fx.experimental.symbolic_shapes import DimConstraints

    original = DimConstraints.prettify_results

    @functools.wraps(original)
    def prettify_results(self: Any, *args: Any, **kwargs: Any) -> str:
        try:
            return original(self, *args, **kwargs)
        except AssertionError:
            return ""  # the violation stands without the fixes

    DimConstraints.prettify_results = prettify_results
    try:
        yield
    finally:
        DimConstraints.prettify_results = original


def unproven_guards(exc: BaseException) -> bool:
    """Whether ``exc`` is torch.export refusing dynamic dims over guards it generated (a constraint violation)."""
    return type(exc).__name__ == "UserError" and "Constraints violated" in str(exc)


def capture_deferred(export: Any) -> tuple[torch.export.ExportedProgram, list[str]] | None:
    """``export(prefer_deferred_runtime_asserts_over_guards=True)``, and its assertions over the input dims (as
    strings), when each holds at every size checked; None where the capture fails or an assertion does not hold."""
    try:
        ep = export(prefer_deferred_runtime_asserts_over_guards=True)
    except Exception:  # noqa: BLE001 - the first capture's error is the one to tell
        return None
    held = []
    for expr in _assertions(ep):
        if not _holds(expr, ep.range_constraints):
            return None
        held.append(str(expr))
    return ep, held


def _assertions(ep: torch.export.ExportedProgram) -> list[Any]:
    """The sympy expressions of the graph's ``_assert_scalar`` nodes over its input dims."""
    exprs = []
    for node in ep.graph.nodes:
        if node.op == "call_function" and node.target is torch.ops.aten._assert_scalar.default:
            value = getattr(node.args[0], "meta", {}).get("val")
            expr = getattr(getattr(value, "node", None), "expr", None)
            if expr is not None and expr.free_symbols:
                exprs.append(expr)
    return exprs


def _bound(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError, AttributeError, OverflowError):  # torch's int_oo, sympy's oo
        return default


def _sizes(ranges: Any, symbol: Any) -> list[int]:
    bounds = ranges.get(symbol)
    low = max(_bound(bounds.lower, 0), 0) if bounds is not None else 0
    high = min(_bound(bounds.upper, FARTHEST), FARTHEST) if bounds is not None else FARTHEST
    dense = list(range(low, min(high, low + DENSE) + 1))
    if high <= low + DENSE:
        return dense
    rng = random.Random(0)
    landmarks = {base**p + d for base in (2, 10) for p in range(1, 22) for d in (-2, -1, 0, 1, 2)}
    farther = [rng.randint(low + DENSE, high) for _ in range(_SAMPLED)]
    return dense + farther + sorted(n for n in landmarks if low + DENSE < n <= high) + [high]


def _holds(expr: Any, ranges: Any) -> bool:
    evaluated = Evaluated(expr)  # compiled, confirmed against sympy's evaluation at the first points
    values = [_sizes(ranges, s) for s in evaluated.symbols]
    points: Any = ([(v,) for v in values[0]] if len(values) == 1 else
                   [tuple(random.Random(i).choice(v) for v in values) for i in range(_COMBINATIONS)])
    return all(evaluated(point) for point in points)  # (None, not evaluated there: not shown to hold)
