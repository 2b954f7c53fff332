"""Find inputs that take each branch of the ``if`` statements onnxport rewrote into ``torch.cond``.

The example inputs take one branch of each rewritten ``if``; verification must also see the others.
Variants of the examples (sign flips, zeros, ones, scaling, shifts, fresh random values) are run
eagerly with the rewritten code, which records the branch each site takes; the variants that reach
a branch not seen yet are kept for verification, within a small budget of tries, and only while the
caller's time budget affords another eager run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch.utils import _pytree as pytree

from onnxport.capture import _runtime

__all__ = ["BranchCoverage", "explore_branches"]

InputSet = tuple[tuple, dict[str, Any]]


def _variants() -> list[tuple[str, Callable[[torch.Tensor, torch.Generator], torch.Tensor]]]:
    return [
        ("negated", lambda t, g: -t),
        ("zeros", lambda t, g: torch.zeros_like(t)),
        ("ones", lambda t, g: torch.ones_like(t)),
        ("times 10", lambda t, g: t * 10),
        ("times -10", lambda t, g: t * -10),
        ("plus 1", lambda t, g: t + 1),
        ("minus 1", lambda t, g: t - 1),
        ("abs", lambda t, g: t.abs()),
        ("minus abs", lambda t, g: -t.abs()),
        ("times 100", lambda t, g: t * 100),
        ("times -100", lambda t, g: t * -100),
        *[(f"random {i}", lambda t, g: torch.randn(t.shape, generator=g).to(t.dtype) * 3) for i in range(5)],
    ]


@dataclasses.dataclass
class BranchCoverage:
    """Which branches of each rewritten ``if`` (``file:line``) the verified inputs took."""

    taken: dict[str, set[bool]]
    sites: list[str]
    tries: int
    out_of_time: bool = False  # the search stopped for verification's time budget

    @property
    def complete(self) -> bool:
        return all(self.taken.get(site) == {True, False} for site in self.sites)

    def __str__(self) -> str:
        lines = ["branches exercised:"]
        for site in self.sites:
            seen = self.taken.get(site, set())
            names = " and ".join(name for flag, name in ((True, "true"), (False, "false")) if flag in seen) or "none"
            missing = {True, False} - seen
            note = "" if not missing else (
                f" (no input taking the {'/'.join('true' if m else 'false' for m in sorted(missing, reverse=True))} "
                f"branch found in {self.tries} tries{' (stopped by the time budget)' if self.out_of_time else ''}: "
                "pass verify_inputs=[...] that take it)"
            )
            lines.append(f"  {site}: {names}{note}")
        return "\n".join(lines)


def _eager_taken(model: torch.nn.Module, inputs: InputSet) -> dict[str, set[bool]]:
    args, kwargs = pytree.tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, inputs)
    with _runtime.recording() as taken, torch.no_grad():
        model(*args, **kwargs)
    return taken


def explore_branches(
    model: torch.nn.Module,
    given: list[InputSet],
    rewriter: Any,
    *,
    budget: int = 16,
    seed: int = 0,
    affordable: Callable[[], bool] = lambda: True,
) -> tuple[list[InputSet], BranchCoverage]:
    """Input sets (besides the ``given`` ones, the example first) that reach branches the given ones
    do not, and the coverage of all of them together. ``affordable()`` is asked before each try."""
    sites = list(dict.fromkeys(f"{r.file}:{r.line}" for r in rewriter.rewrites))
    generator = torch.Generator().manual_seed(seed)
    kept: list[InputSet] = []
    example = given[0]
    with rewriter.applied():
        taken: dict[str, set[bool]] = {}
        for inputs in given:
            for site, branches in _eager_taken(model, inputs).items():
                taken.setdefault(site, set()).update(branches)
        tries, out_of_time = 0, False
        for _, transform in _variants()[:budget]:
            if all(taken.get(s) == {True, False} for s in sites):
                break
            if not affordable():
                out_of_time = True
                break
            tries += 1
            variant = pytree.tree_map(
                lambda t: transform(t, generator) if isinstance(t, torch.Tensor) and t.is_floating_point() else t,
                example,
            )
            try:
                new = _eager_taken(model, variant)
            except Exception:  # noqa: BLE001 - a variant the model rejects (e.g. a NaN check) is just skipped
                continue
            if any(not new[s] <= taken.get(s, set()) for s in new):
                kept.append(variant)
                for site, branches in new.items():
                    taken.setdefault(site, set()).update(branches)
    return kept, BranchCoverage(taken, sites, tries, out_of_time)
