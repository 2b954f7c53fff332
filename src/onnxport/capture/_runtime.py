"""What rewritten code calls at run time: ``cond`` dispatches a rewritten ``if`` to ``torch.cond``.

A test that turns out to be a plain Python bool (a static shape, a flag) runs the chosen branch
directly, as the original ``if`` would. Eager runs (outside tracing) record which branch each
rewritten site took, so verification can look for inputs that exercise both.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

__all__ = ["NAME", "cond", "logical_and", "logical_not", "logical_or", "recording"]

# The name under which rewritten functions find this module in their globals while patched.
NAME = "__onnxport_rt__"

_taken: dict[str, set[bool]] | None = None


@contextlib.contextmanager
def recording() -> Iterator[dict[str, set[bool]]]:
    """Record ``{site: {branches taken}}`` for eager calls made inside the block."""
    global _taken
    saved, _taken = _taken, {}
    try:
        yield _taken
    finally:
        _taken = saved


def _is_concrete(t: torch.Tensor) -> bool:
    return not isinstance(t, torch._subclasses.FakeTensor) and not torch.compiler.is_compiling()


def predicate(value: Any) -> Any:
    """What Python's ``bool(value)`` tests, as a bool 0-d tensor for tensors; Python values as they are."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise RuntimeError(f"Boolean value of Tensor with {value.numel()} values is ambiguous")
        value = value.reshape(()) if value.dim() else value
        return value if value.dtype == torch.bool else value != 0
    return value


def logical_and(a: Any, b: Callable[[], Any]) -> Any:
    """``a and b()`` where either side may be a tensor; ``b`` stays lazy when ``a`` is a Python value."""
    a = predicate(a)
    if not isinstance(a, torch.Tensor):
        return predicate(b()) if a else False
    return torch.logical_and(a, _as_tensor(predicate(b())))


def logical_or(a: Any, b: Callable[[], Any]) -> Any:
    """``a or b()`` where either side may be a tensor."""
    a = predicate(a)
    if not isinstance(a, torch.Tensor):
        return True if a else predicate(b())
    return torch.logical_or(a, _as_tensor(predicate(b())))


def logical_not(a: Any) -> Any:
    """``not a`` where ``a`` may be a tensor."""
    a = predicate(a)
    return torch.logical_not(a) if isinstance(a, torch.Tensor) else not a


def _as_tensor(value: Any) -> torch.Tensor:
    return value if isinstance(value, torch.Tensor) else torch.tensor(bool(value))


def cond(test: Any, true_fn: Callable[..., Any], false_fn: Callable[..., Any], env: dict[str, Any], site: str) -> Any:
    """Run a rewritten ``if``: ``torch.cond`` over the tensors in ``env`` when ``test`` is a tensor.

    ``true_fn``/``false_fn`` take the names of ``env`` as keyword arguments; tensors become operands
    of ``torch.cond`` and every other value (``self``, ints, modules) is bound as it is.
    """
    pred = predicate(test)
    if not isinstance(pred, (torch.Tensor, torch.SymBool)):
        return (true_fn if pred else false_fn)(**env)
    if _taken is not None and isinstance(pred, torch.Tensor) and _is_concrete(pred):
        # Recording eager runs: take the branch in Python, as the original if did (torch.cond would
        # compile its branches and hide the rewritten ifs nested inside them).
        _taken.setdefault(site, set()).add(bool(pred))
        return (true_fn if bool(pred) else false_fn)(**env)
    names = [k for k, v in env.items() if isinstance(v, torch.Tensor)]
    fixed = {k: v for k, v in env.items() if k not in names}

    def bind(fn: Callable[..., Any]) -> Callable[..., Any]:
        def branch(*tensors: torch.Tensor) -> Any:
            out = fn(**dict(zip(names, tensors)), **fixed)
            # torch.cond refuses a branch output that is one of its inputs (an unchanged variable).
            ids = {id(t) for t in tensors}
            return torch.utils._pytree.tree_map(lambda v: v.clone() if id(v) in ids else v, out)

        branch.__name__ = fn.__name__
        return branch

    return torch.cond(pred, bind(true_fn), bind(false_fn), tuple(env[n] for n in names))
