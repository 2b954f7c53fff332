"""What rewritten code calls at run time: ``cond`` dispatches a rewritten ``if`` to ``torch.cond``,
``while_loop`` a rewritten ``while`` to ``torch._higher_order_ops.while_loop``, ``data`` reads ``t.data``.

A test that turns out to be a plain Python bool (a static shape, a flag) runs the chosen branch
directly, as the original ``if`` would. Eager runs (outside tracing) record which branch each
rewritten site took (for a loop: whether it ran at least once), so verification can look for inputs
that exercise both.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from typing import Any

import torch

__all__ = [
    "NAME", "Refused", "cond", "data", "length", "logical_and", "logical_not", "logical_or", "recording", "while_loop",
]

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
            # torch.cond refuses a branch output that is one of its inputs (an unchanged variable). By
            # identity, not id(): torch < 2.11 traces the branches with dynamo, which cannot take id() of them.
            return torch.utils._pytree.tree_map(lambda v: v.clone() if any(v is t for t in tensors) else v, out)

        branch.__name__ = fn.__name__
        return branch

    return torch.cond(pred, bind(true_fn), bind(false_fn), tuple(env[n] for n in names))


def own_copy(value: Any) -> Any:
    """A branch's own copy of a tensor whose items it writes (torch.cond branches must not write their
    inputs); any other value as it is."""
    return value.clone() if isinstance(value, torch.Tensor) else value


def write_back(before: Any, after: Any) -> Any:
    """``before`` holding what a rewritten ``if`` computed into ``after`` (its items written in a branch):
    the tensor eager PyTorch would have written in place, which the caller may hold too."""
    if isinstance(before, torch.Tensor) and isinstance(after, torch.Tensor) and after is not before:
        before.copy_(after)
        return before
    return after


def data(value: Any) -> Any:
    """``value.data`` as torch.export can trace it: ``detach()`` for a tensor (same storage, no autograd
    history); any other object's own ``.data`` attribute as it is."""
    return value.detach() if isinstance(value, torch.Tensor) else value.data


def length(value: Any) -> Any:
    """``len(value)`` as torch.export can carry it: ``value.shape[0]`` for a tensor (symbolic when that dim is
    dynamic, where ``len`` must give a Python int); any other object's own ``len``."""
    return value.shape[0] if isinstance(value, torch.Tensor) and value.dim() > 0 else len(value)


class Refused(Exception):
    """A rewritten loop that ``while_loop`` cannot hold, found while tracing it: why, and where (``file:line``)."""

    def __init__(self, reason: str, site: str):
        self.reason, self.site = reason, site
        super().__init__(f"{site}: {reason}")


def while_loop(
    test_fn: Callable[..., Any], body_fn: Callable[..., Any], env: dict[str, Any], carried: tuple[str, ...], site: str
) -> tuple[Any, ...]:
    """Run a rewritten ``while``: ``torch._higher_order_ops.while_loop`` over the ``carried`` names of
    ``env`` when the test is a traced tensor, a Python loop otherwise.

    ``test_fn``/``body_fn`` take the names of ``env`` as keyword arguments; ``body_fn`` returns the new
    values of ``carried``. The other names are bound as they are (tensors among them are read by the
    loop, not carried).
    """
    first = predicate(test_fn(**env))
    if not isinstance(first, torch.Tensor) or _is_concrete(first):
        return _python_loop(first, test_fn, body_fn, env, carried, site)
    fixed = {k: v for k, v in env.items() if k not in carried}
    init = tuple(env[n] for n in carried)
    for name, value in zip(carried, init):
        if isinstance(value, bool) or not isinstance(value, (torch.Tensor, int, torch.SymInt)):
            raise Refused(
                f"the loop carries `{name}`, a {type(value).__name__} before the loop; while_loop carries tensors "
                f"and ints (make it a tensor before the loop: {name} = torch.tensor({name}))",
                site,
            )

    def test(*values: Any) -> Any:
        pred = predicate(test_fn(**dict(zip(carried, values)), **fixed))
        # while_loop refuses a test result that is one of its inputs (a carried bool tensor).
        return pred.clone() if any(pred is v for v in values) else pred

    def body(*values: Any) -> tuple[Any, ...]:
        out = body_fn(**dict(zip(carried, values)), **fixed)
        # an output that is one of the inputs is cloned: by identity, not id(), which dynamo (tracing the
        # body on torch < 2.11) cannot take of a tensor
        return tuple(v.clone() if any(v is w for w in values) else v for v in out)

    try:
        return tuple(torch._higher_order_ops.while_loop(test, body, init))
    except Exception as exc:
        refusal = _metadata_refusal(exc, carried, site)
        if refusal is None:
            raise
        raise refusal from None


def _python_loop(
    pred: Any, test_fn: Callable[..., Any], body_fn: Callable[..., Any], env: dict[str, Any],
    carried: tuple[str, ...], site: str,
) -> tuple[Any, ...]:
    """The loop as Python runs it (a concrete or Python-valued test); records whether it ran at all."""
    state = dict(env)
    passes = 0
    while bool(pred):
        state.update(zip(carried, body_fn(**state)))
        passes += 1
        pred = predicate(test_fn(**state))
    if _taken is not None:
        _taken.setdefault(site, set()).add(passes > 0)
    return tuple(state[n] for n in carried)


_METADATA = re.compile(r"pair\[(\d+)\] differ in '(\w+): ([^']*)'")


def _metadata_refusal(exc: BaseException, carried: tuple[str, ...], site: str) -> Refused | None:
    """torch's "body_fn output and carried_inputs ... same metadata" error, said with the variable's name."""
    text = str(exc)
    if "same metadata" not in text:
        return None
    match = _METADATA.search(text)
    if match is None or int(match.group(1)) >= len(carried):
        return Refused("the loop body changes the shape or dtype of a carried variable", site)
    name, what, detail = carried[int(match.group(1))], match.group(2), match.group(3)
    detail = detail.replace(" vs ", " after a pass, ")
    return Refused(f"the loop body changes the {what} of `{name}` ({detail} before)", site)
