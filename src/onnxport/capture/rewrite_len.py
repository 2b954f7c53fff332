"""Rewrite ``len(t)`` into ``__onnxport_rt__.length(t)`` (``t.shape[0]`` for a tensor) on one line.

Python's ``len()`` must return an int, so of a tensor whose first dim is dynamic it either pins that dim to the
example's size (torch specialises the symbolic size) or, where a capture mode refuses that, raises
:class:`DynamicLength`. ``t.shape[0]`` is the same number, and torch.export carries it symbolically into what the
code does with it (the sizes of a ``torch.split``, a ``reshape``, arithmetic). DepthPro counts the patches of each
scale this way (``[len(i) for i in scaled_images]``), with the batch in that count. Only calls of the builtin
``len`` with one argument are rewritten; of anything but a tensor, ``length`` is ``len``.
"""

from __future__ import annotations

import ast
import builtins
from typing import TYPE_CHECKING

from onnxport.capture._syntax import Rewrite, RewriteRefused, rt, stored
from onnxport.errors import exception_chain

if TYPE_CHECKING:
    from onnxport.capture.rewrite import FunctionRewrite

__all__ = ["FIX", "DynamicLength", "is_dynamic_length", "rewrite_len"]

FIX = "write t.shape[0] instead of len(t) for a tensor t whose first dim is dynamic"


class DynamicLength(TypeError):
    """``len()`` of a tensor whose first dim is dynamic, refused during a capture rather than pinned to the example's
    size: a ``TypeError``, so that ``list(t)``, which asks the length only as a hint, goes on to iterate."""

    def __init__(self) -> None:
        super().__init__("len() of a tensor whose first dim is dynamic is not a number onnxport can capture")


def is_dynamic_length(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it was raised from) is a :class:`DynamicLength`."""
    return any(isinstance(chain, DynamicLength) for chain in exception_chain(exc))


def rewrite_len(fr: FunctionRewrite, line: int) -> Rewrite:
    """Read every ``len(X)`` on ``line`` of ``fr`` as ``__onnxport_rt__.length(X)``; raise ``RewriteRefused``."""
    if fr.fn.__globals__.get("len", builtins.len) is not builtins.len or "len" in stored(fr.func.body):
        raise RewriteRefused(f"`len` in {fr.fn.__qualname__} is not Python's builtin", line, FIX, kind="len")
    found = [
        n for n in ast.walk(fr.func)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "len" and len(n.args) == 1
        and not n.keywords and not isinstance(n.args[0], ast.Starred) and n.lineno <= line <= n.end_lineno
    ]
    if not found:
        raise RewriteRefused(f"no `len(...)` on line {line} of {fr.fn.__qualname__}", line, FIX, kind="len")
    before = fr.source(min(n.lineno for n in found), max(n.end_lineno for n in found))
    for node in found:
        node.func = ast.copy_location(rt("length"), node.func)
    ast.fix_missing_locations(fr.func)
    statements = [s for s in ast.walk(fr.func) if isinstance(s, ast.stmt) and s.lineno <= line <= s.end_lineno
                  and not any(isinstance(c, ast.stmt) for c in ast.iter_child_nodes(s))]  # the innermost
    return fr.record(line, before, statements[-1:] or found, kind="len")
