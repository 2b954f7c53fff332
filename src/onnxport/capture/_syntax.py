"""What the source rewrites share: the record of one rewrite, the refusal, and AST helpers."""

from __future__ import annotations

import ast
import dataclasses
import textwrap
from collections.abc import Iterator

from onnxport.capture._runtime import NAME as RT

__all__ = ["Rewrite", "RewriteRefused", "loaded", "predicate", "rt", "stored", "walk_scope"]

SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


@dataclasses.dataclass
class Rewrite:
    """One rewrite of the user's code, for this export only: where, and the code before and after.

    ``kind`` is ``"if"`` (an ``if`` or ``a if t else b`` into ``torch.cond``), ``"while"`` (a ``while``
    into ``while_loop``), ``"data"`` (``t.data`` read as ``t.detach()``) or ``"len"`` (``len(t)`` read as
    ``t.shape[0]``).
    """

    file: str
    line: int
    function: str
    before: str
    after: str
    kind: str = "if"

    def __str__(self) -> str:
        return (
            f"{self.file}:{self.line} in {self.function}\n"
            + textwrap.indent(self.before.rstrip(), "    - ")
            + "\n"
            + textwrap.indent(self.after.rstrip(), "    + ")
        )


class RewriteRefused(Exception):
    """The code at ``line`` cannot be rewritten; ``reason`` says why, ``suggestion`` what to write.

    ``kind`` is the rewrite that was refused (``"if"``, ``"while"``, ``"data"`` or ``"len"``), so the error
    raised for it can show the matching form to write by hand.
    """

    def __init__(self, reason: str, line: int, suggestion: str = "", kind: str = "if"):
        self.reason, self.line, self.suggestion, self.kind = reason, line, suggestion, kind
        super().__init__(reason)


def walk_scope(node: ast.AST) -> Iterator[ast.AST]:
    """Nodes of ``node``'s own scope: nested functions, lambdas, classes and comprehensions excluded."""
    stack = list(ast.iter_child_nodes(node))
    while stack:
        child = stack.pop()
        yield child
        if not isinstance(child, SCOPES):
            stack.extend(ast.iter_child_nodes(child))


def stored(nodes: list[ast.stmt]) -> list[str]:
    """Names bound by ``nodes`` in their own scope, in order of first binding."""
    names: dict[str, None] = {}
    for stmt in nodes:
        for node in [stmt, *walk_scope(stmt)]:
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.setdefault(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not stmt:
                names.setdefault(node.name)
    return list(names)


def loaded(nodes: list[ast.AST]) -> set[str]:
    """Every name read anywhere below ``nodes`` (nested scopes included: they may read enclosing locals)."""
    return {n.id for node in nodes for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def rt(attr: str) -> ast.Attribute:
    """``__onnxport_rt__.<attr>``: a function of ``onnxport.capture._runtime`` in rewritten code."""
    return ast.Attribute(ast.Name(RT, ast.Load()), attr, ast.Load())


def predicate(test: ast.expr) -> ast.expr:
    """The test with `and`/`or`/`not` made tensor-aware and `.item()`/`bool()`/`float()` peeled off."""
    if isinstance(test, ast.BoolOp):
        fn = "logical_and" if isinstance(test.op, ast.And) else "logical_or"
        result = predicate(test.values[0])
        for value in test.values[1:]:
            lazy = ast.Lambda(ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]), predicate(value))
            result = ast.Call(rt(fn), [result, lazy], [])
        return result
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return ast.Call(rt("logical_not"), [predicate(test.operand)], [])
    return _Peel().visit(test)


class _Peel(ast.NodeTransformer):
    """``t.item()`` -> ``t``; ``bool(t)``/``float(t)``/``int(t)`` -> ``t``: keep the test a tensor."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.func, ast.Attribute) and node.func.attr == "item" and not node.args and not node.keywords:
            return node.func.value
        if isinstance(node.func, ast.Name) and node.func.id in ("bool", "float", "int") and len(node.args) == 1 and not node.keywords:
            return node.args[0]
        return node
