"""A kind's sizes in terms of one call's: binding its size symbols, evaluating its output sizes."""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any

import sympy
import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

__all__ = ["bind", "evaluate", "known_equal"]


def bind(kind: Any, tensors: list[torch.Tensor], *, check: bool) -> dict[sympy.Symbol, Any] | None:
    """Map the kind's size symbols to this call's sizes; None when the call does not fit the kind.

    With ``check``, two sizes the kind has as one symbol (or as an expression of others) must be equal;
    where torch does not know it yet, ``torch._check`` says so to the model's capture, as the layer's
    own code would have when traced (the kind's capture found that equality in that code).
    """
    env: dict[sympy.Symbol, Any] = {}
    equal: list[tuple[Any, sympy.Expr]] = []
    for t, (dtype, dims) in zip(tensors, kind.in_meta):
        if check and (t.dtype != dtype or t.dim() != len(dims)):
            return None
        for size, want in zip(t.shape, dims):
            if isinstance(want, int) or want.is_number:
                if check and not known_equal(size, int(want)):
                    return None
            elif want.is_Symbol and want not in env:
                if check and not within(size, kind.ranges.get(want)):
                    return None
                env[want] = size
            else:
                equal.append((size, want))
    if not check:
        return env
    for size, want in equal:
        value = evaluate(want, env)
        if value is None or isinstance(size, int) and isinstance(value, int) and size != value:
            return None
        if not known_equal(size, value):
            if isinstance(size, int) or isinstance(value, int):
                return None  # a size the example fixed on one side only
            torch._check(size == value)
    for _, dims in kind.out_meta:
        if any(evaluate(d, env) is None for d in dims):
            return None
    return env


def known_equal(a: Any, b: Any) -> bool:
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return statically_known_true(a == b)


def within(size: Any, bounds: Any) -> bool:
    if bounds is None:
        return True
    if isinstance(size, int):
        return bool(bounds.lower <= size <= bounds.upper)
    node = size.node
    have = node.shape_env.bound_sympy(node.expr)
    return bool(bounds.lower <= have.lower) and bool(have.upper <= bounds.upper)


_EVALUATORS: dict[Any, Callable[..., Any]] = {
    sympy.Add: lambda *xs: sum(xs[1:], xs[0]),
    sympy.Mul: lambda *xs: _product(xs),
    torch.utils._sympy.functions.FloorDiv: operator.floordiv,
    torch.utils._sympy.functions.Mod: operator.mod,
    torch.utils._sympy.functions.PythonMod: operator.mod,
    sympy.Max: lambda *xs: _fold(torch.sym_max, xs),
    sympy.Min: lambda *xs: _fold(torch.sym_min, xs),
}


def evaluate(expr: Any, env: Mapping[sympy.Symbol, Any]) -> Any:
    """``expr`` (a size of the kind's capture) in this call's sizes; None when it cannot be."""
    if isinstance(expr, int):
        return expr
    if expr.is_Integer:
        return int(expr)
    if expr.is_Symbol:
        return env.get(expr)
    if isinstance(expr, sympy.Pow) and expr.exp.is_Integer and int(expr.exp) > 0:
        base = evaluate(expr.base, env)
        return None if base is None else _product([base] * int(expr.exp))
    fn = _EVALUATORS.get(type(expr))
    if fn is None:
        return None
    args = [evaluate(a, env) for a in expr.args]
    return None if any(a is None for a in args) else fn(*args)


def _product(xs: Any) -> Any:
    out = xs[0]
    for x in xs[1:]:
        out = out * x
    return out


def _fold(fn: Callable[[Any, Any], Any], xs: Any) -> Any:
    out = xs[0]
    for x in xs[1:]:
        out = fn(out, x)
    return out
