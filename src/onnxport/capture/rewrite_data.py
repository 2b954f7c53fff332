"""Rewrite ``t.data`` into ``__onnxport_rt__.data(t)`` (``t.detach()`` for a tensor) on one line.

torch.export cannot trace ``.data``: the tensor it returns is invisible to the tracer, so non-strict
export fails ("fake tensor in the exported program constant's list") and strict export freezes the
example's value into the graph. ``t.detach()`` is what ``.data`` means in a forward pass (the same
storage, no autograd history) and torch.export traces it, writes through it included
(``x.data[0, 0] = 3`` writes into ``x``). Refused: assigning ``.data`` itself (``t.data = v`` swaps the
tensor's storage, and may change its shape and dtype) and writing through it into the model's own
state (``self.w.data.mul_(2)``: an ONNX model has no state to change).
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from onnxport.capture._syntax import Rewrite, RewriteRefused, rt

if TYPE_CHECKING:
    from onnxport.capture.rewrite import FunctionRewrite

__all__ = ["FIX", "rewrite_data"]

FIX = "use t.detach() (or t itself) instead of t.data; copy into a tensor in place with t.copy_(value)"


def rewrite_data(fr: FunctionRewrite, line: int) -> Rewrite:
    """Read every ``X.data`` on ``line`` of ``fr`` as ``__onnxport_rt__.data(X)``; raise ``RewriteRefused``."""
    parents = {id(child): node for node in ast.walk(fr.func) for child in ast.iter_child_nodes(node)}
    found = [
        n for n in ast.walk(fr.func)
        if isinstance(n, ast.Attribute) and n.attr == "data" and n.lineno <= line <= n.end_lineno
    ]
    if not found:
        raise RewriteRefused(f"no `.data` on line {line} of {fr.fn.__qualname__}", line, FIX, kind="data")
    first, last = min(n.lineno for n in found), max(n.end_lineno for n in found)
    before = fr.source(first, last)
    for node in found:
        _check(node, parents, fr)
    statements = []
    for node in found:
        parent = parents[id(node)]
        call = ast.copy_location(ast.Call(rt("data"), [node.value], []), node)
        _replace(parent, node, call)
        statements.append(_statement(parent, parents))
    ast.fix_missing_locations(fr.func)
    shown = [s if not isinstance(s, (ast.If, ast.While, ast.For)) else _header(s) for s in dict.fromkeys(statements)]
    return fr.record(line, before, shown, kind="data")


def _check(node: ast.Attribute, parents: dict[int, ast.AST], fr: FunctionRewrite) -> None:
    """Refuse ``X.data = v`` and writes through ``self.<...>.data`` into the model's state."""
    text = ast.unparse(node)
    if not isinstance(node.ctx, ast.Load):
        raise RewriteRefused(
            f"`{text}` is assigned: that swaps the tensor's storage (and may change its shape or dtype), "
            "which torch.export cannot capture",
            node.lineno,
            f"assign the variable instead (`{ast.unparse(node.value)} = ...`), or copy in place with "
            f"`{ast.unparse(node.value)}.copy_(...)`",
            kind="data",
        )
    parent = parents.get(id(node))
    writes = (isinstance(parent, ast.Subscript) and isinstance(parent.ctx, ast.Store)) or (
        isinstance(parent, ast.Attribute) and parent.attr.endswith("_") and not parent.attr.startswith("_")
        and isinstance(parents.get(id(parent)), ast.Call)
    )
    owner = _first_parameter(fr)
    if writes and owner and _root(node.value) == owner:
        raise RewriteRefused(
            f"`{text}` is written in place: that changes the model's own state (a parameter or buffer) at every "
            "call, and an ONNX model has no state to change",
            node.lineno,
            "compute a new tensor instead (w = self.w * 2) and use it",
            kind="data",
        )


def _first_parameter(fr: FunctionRewrite) -> str:
    """``self`` for a method (its first parameter), '' for a plain function."""
    args = fr.func.args.posonlyargs + fr.func.args.args
    return args[0].arg if args and fr.owner_class() else ""


def _root(node: ast.AST) -> str:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else ""


def _replace(parent: ast.AST, old: ast.AST, new: ast.AST) -> None:
    for field, value in ast.iter_fields(parent):
        if value is old:
            setattr(parent, field, new)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if item is old:
                    value[i] = new


def _statement(node: ast.AST, parents: dict[int, ast.AST]) -> ast.AST:
    while not isinstance(node, ast.stmt) and id(node) in parents:
        node = parents[id(node)]
    return node


def _header(stmt: ast.If | ast.While | ast.For) -> ast.AST:
    """The part of a compound statement that holds the rewritten expression (its test or iterable)."""
    return stmt.iter if isinstance(stmt, ast.For) else stmt.test
