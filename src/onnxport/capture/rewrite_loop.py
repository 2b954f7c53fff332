"""Rewrite a Python ``while`` on a tensor value into ``torch._higher_order_ops.while_loop``.

```
while x.abs().max() > 1:            def __onnxport_test_12(x):
    x = x / 2                           return x.abs().max() > 1
                              ->    def __onnxport_body_12(x):
                                        x = x / 2
                                        return (x,)
                                    (x,) = __onnxport_rt__.while_loop(__onnxport_test_12, __onnxport_body_12,
                                                                      {'x': x}, ('x',), 'file.py:12')
```

The carried variables are those the body assigns that the test, a later pass of the body, or the code
after the loop reads; each needs a value before the loop (it may run zero times). The other names the
loop reads are passed in unchanged. A body that leaves the loop early (``break``, ``continue``,
``return``), yields, or changes state outside itself (attributes, items, in-place methods,
``global``) is refused here; one that changes a carried tensor's shape or dtype is refused by
``_runtime.while_loop`` when torch traces it.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from onnxport.capture._syntax import Rewrite, RewriteRefused, loaded, predicate, rt, stored, walk_scope

if TYPE_CHECKING:
    from onnxport.capture.rewrite import FunctionRewrite

__all__ = ["rewrite_while", "FIX"]

FIX = (
    "write the loop with torch._higher_order_ops.while_loop(cond_fn, body_fn, (carried tensors,)), the body "
    "returning new tensors of the same shapes and dtypes, e.g.\n"
    "    (x,) = while_loop(lambda x: x.abs().max() > 1, lambda x: (x / 2,), (x,))"
)

# Methods that change a Python container in place: a side effect the traced body cannot keep.
_CONTAINER_MUTATORS = frozenset(
    {"append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault", "add", "discard"}
)


def rewrite_while(fr: FunctionRewrite, node: ast.While, line: int) -> Rewrite:
    """Turn the ``while`` statement ``node`` of ``fr`` into a ``while_loop`` call; raise ``RewriteRefused``."""
    block, scope = fr.parents()[id(node)]
    index = next(i for i, s in enumerate(block) if s is node)
    before = fr.source(node.lineno, node.end_lineno)
    _check_body(node.body, node.lineno)
    defined = fr.defined_before(scope, node)
    carried = _carried(scope, node, defined)
    inputs = fr.inputs(scope, loaded([node.test, *node.body]) | set(carried), defined)
    test_def = _function(f"__onnxport_test_{node.lineno}", inputs, [ast.Return(predicate(node.test))])
    ret = ast.Return(ast.Tuple([ast.Name(n, ast.Load()) for n in carried], ast.Load()))
    ret.onnxport_reads_after = True  # type: ignore[attr-defined]  # see FunctionRewrite._outputs
    body_def = _function(f"__onnxport_body_{node.lineno}", inputs, [*node.body, ret])
    env = ast.Dict([ast.Constant(n) for n in inputs], [ast.Name(n, ast.Load()) for n in inputs])
    call = ast.Call(
        rt("while_loop"),
        [ast.Name(test_def.name, ast.Load()), ast.Name(body_def.name, ast.Load()), env,
         ast.Tuple([ast.Constant(n) for n in carried], ast.Load()), ast.Constant(f"{fr.file}:{line}")],
        [],
    )
    assign = ast.Assign([ast.Tuple([ast.Name(n, ast.Store()) for n in carried], ast.Store())], call)
    new = [test_def, body_def, assign]
    for stmt in new:
        ast.copy_location(stmt, node)
    block[index : index + 1] = new + list(node.orelse)  # no break, so the else always runs after
    ast.fix_missing_locations(fr.func)
    return fr.record(line, before, new, kind="while")


def _function(name: str, params: list[str], body: list[ast.stmt]) -> ast.FunctionDef:
    args = ast.arguments(posonlyargs=[], args=[ast.arg(n) for n in params], kwonlyargs=[], kw_defaults=[], defaults=[])
    return ast.FunctionDef(name=name, args=args, body=body, decorator_list=[], returns=None, type_params=[])


def _carried(scope: ast.AST, node: ast.While, defined: set[str]) -> list[str]:
    """Names the body assigns that the test, the next pass of the body, or code after the loop reads."""
    after = {
        n.id
        for n in walk_scope(scope)
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.lineno > node.end_lineno
    }
    after |= loaded(node.orelse)
    after |= loaded([n for n in walk_scope(scope) if getattr(n, "onnxport_reads_after", False)])
    for loop in (n for n in walk_scope(scope) if isinstance(n, (ast.For, ast.While)) and n is not node):
        if any(n is node for n in ast.walk(loop)):
            after |= loaded([loop])
    in_test, in_body = loaded([node.test]), loaded(node.body)
    carried = [n for n in stored(node.body) if n in in_test or n in after or (n in in_body and n in defined)]
    for name in carried:
        if name not in defined:
            raise RewriteRefused(
                f"`{name}` is first assigned inside the loop and read after it (when the loop runs zero times "
                "it has no value)",
                node.lineno,
                f"give `{name}` a value before the loop",
                kind="while",
            )
    if not carried:
        raise RewriteRefused(
            "the loop body assigns nothing that the test or the code after the loop reads", node.lineno, kind="while"
        )
    return carried


def _check_body(body: list[ast.stmt], line: int) -> None:
    """Refuse a body that leaves the loop early or changes anything but its own variables."""
    nested = [n for s in body for n in [s, *walk_scope(s)] if isinstance(n, (ast.For, ast.While, ast.AsyncFor))]
    in_nested = {id(n) for loop in nested for n in ast.walk(loop)}
    local = set(stored(body))
    for stmt in body:
        for n in [stmt, *walk_scope(stmt)]:
            problem = _problem(n, local, id(n) in in_nested)
            if problem:
                raise RewriteRefused(problem, line, "", kind="while")


def _problem(n: ast.AST, local: set[str], in_nested_loop: bool) -> str:
    if isinstance(n, (ast.Break, ast.Continue)) and not in_nested_loop:
        return f"the loop body uses `{type(n).__name__.lower()}` (while_loop runs the whole body on every pass)"
    if isinstance(n, ast.Return):
        return "the loop body returns from the function (while_loop runs the whole body on every pass)"
    if isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await)):
        return "the loop body yields or awaits"
    if isinstance(n, (ast.Global, ast.Nonlocal)):
        return f"the loop body rebinds a {type(n).__name__.lower()} name (a side effect on Python state)"
    if isinstance(n, (ast.Attribute, ast.Subscript)) and isinstance(n.ctx, ast.Store) and _root(n) not in local:
        return (f"the loop body assigns `{ast.unparse(n)}` (a side effect on Python state or an in-place change of "
                "a tensor from outside the loop; a while_loop body must be pure)")
    if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and _root(n.func.value) not in local:
        method = n.func.attr
        inplace = method.endswith("_") and not method.startswith("_")
        if inplace or (method in _CONTAINER_MUTATORS and isinstance(n.func.value, ast.Name)):
            return (f"the loop body calls `{ast.unparse(n.func)}(...)`, which changes a value from outside the loop "
                    "in place (a while_loop body must be pure)")
    return ""


def _root(node: ast.AST) -> str:
    """The variable at the bottom of ``a.b[c].d`` (``a``); '' when it is not a plain name."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else ""
