"""Python ``if``s that compare sizes of two dims (``if x.shape[0] == y.shape[0]``): torch.export takes the
example's branch and keeps the comparison as a guard of its program, checked when the program is called, which
an ONNX graph cannot do, so the file would compute the example's branch at every size.

Where the guard comes from the model's own ``if`` (torch records the line), that ``if`` is rewritten into
``torch.cond`` as a data-dependent one is (its test is then a ``SymBool`` of the sizes) and the model captured
again, so both branches are in the graph. The guards go on, in the names of the sizes they compare, to
verification, which runs sizes at which the test flips (``verify.sizes.guard_breaking_sets``). A rewrite that
fails, or a capture that fails after it, leaves the first capture as it was; verification then runs those sizes
against it, and refuses the file should it differ there.
"""

from __future__ import annotations

import linecache
from collections.abc import Callable, Sequence

import sympy
import torch

from onnxport.capture._dim_constraints import relational_guard_sites, source_names
from onnxport.capture.patch import ControlFlowRewriter
from onnxport.errors import SourceLocation

__all__ = ["in_program", "rewritten"]

_ROUNDS = 2  # a branch inside the other branch of one is found by the next capture


def rewritten(ep: torch.export.ExportedProgram, rewriter: ControlFlowRewriter,
              capture_again: Callable[[], torch.export.ExportedProgram]) -> tuple[torch.export.ExportedProgram,
                                                                                   list[sympy.Expr]]:
    """``ep``, or a capture with the ``if``s behind its guards comparing sizes rewritten into ``torch.cond``; and
    the guards of the ``if``s rewritten, in the sizes' source names (see ``in_program``)."""
    named: list[sympy.Expr] = []
    for _ in range(_ROUNDS):
        sites = _sites(ep, rewriter.source_files())
        if not sites:
            break
        saved = rewriter.snapshot()
        try:
            for location in sites:
                rewriter.rewrite(location).kind = "size"
            again = capture_again()
        except Exception:  # noqa: BLE001 - RewriteRefused, or torch.export failing in its ways: the first capture stays
            rewriter.restore(saved)
            break
        names = source_names(ep)
        named += [guard.xreplace({s: sympy.Symbol(names[s]) for s in guard.free_symbols if s in names})
                  for guards in sites.values() for guard in guards]
        ep = again
    return ep, named


def in_program(ep: torch.export.ExportedProgram, named: Sequence[sympy.Expr]) -> list[sympy.Expr]:
    """The ``named`` guards (see ``rewritten``) in ``ep``'s shape symbols; those comparing a size ``ep`` lacks
    are left out."""
    symbols = {sympy.Symbol(name): symbol for symbol, name in source_names(ep).items()}
    return [guard.xreplace(symbols) for guard in named if guard.free_symbols <= set(symbols)]


def _sites(ep: torch.export.ExportedProgram, files: set[str]) -> dict[SourceLocation, list[sympy.Expr]]:
    """The model's lines (in ``files``) whose size comparisons made guards relating sizes, with those guards."""
    found: dict[SourceLocation, list[sympy.Expr]] = {}
    for guard, frame in relational_guard_sites(ep, remainders=True):
        if frame is not None and frame.filename in files:
            code = linecache.getline(frame.filename, frame.lineno).strip()
            if not code.startswith(("if ", "elif ")) and len(guard.free_symbols) < 2:
                continue  # a remainder a reshape or a view requires, not an ``if``'s test
            found.setdefault(SourceLocation(frame.filename, frame.lineno, frame.name, code), []).append(guard)
    return found
