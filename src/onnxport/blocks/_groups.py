"""Which submodules of a model are the same block: the groups, and the attributes that tell kinds apart."""

from __future__ import annotations

import contextlib
import functools
import types
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch

__all__ = ["CONSTANTS", "MIN_MODULES", "MIN_REPEATS", "differing", "equal", "find_groups", "global_hooks", "reading",
           "same_reads", "varying_ints"]

MIN_MODULES = 3  # a block holds at least this many modules (itself included)
MIN_REPEATS = 4  # and comes at least this many times: fewer are traced faster than captured apart
CONSTANTS = (int, float, bool, str, type(None), torch.dtype, torch.device)


def find_groups(model: torch.nn.Module) -> list[list[tuple[str, torch.nn.Module]]]:
    """Groups of submodules with the same structure, the outermost ones: a group's members are not
    searched further. Each group has at least ``MIN_REPEATS`` distinct modules of at least ``MIN_MODULES``
    modules each."""
    signatures: dict[int, Any] = {}
    counts: dict[Any, int] = {}
    for module in {id(m): m for m in model.modules()}.values():
        if module is model:
            continue
        signature = _signature(module)
        signatures[id(module)] = signature
        if signature is not None:
            counts[signature] = counts.get(signature, 0) + 1
    groups: dict[Any, dict[int, tuple[str, torch.nn.Module]]] = {}

    def visit(prefix: str, parent: torch.nn.Module) -> None:
        for name, child in parent.named_children():
            qualname = f"{prefix}.{name}" if prefix else name
            signature = signatures.get(id(child))
            if signature is not None and counts[signature] >= MIN_REPEATS:
                groups.setdefault(signature, {}).setdefault(id(child), (qualname, child))
            else:
                visit(qualname, child)

    visit("", model)
    return [list(members.values()) for members in groups.values() if len(members) >= MIN_REPEATS]


def _signature(module: torch.nn.Module) -> Any:
    submodules = list(module.named_modules())
    if len(submodules) < MIN_MODULES:
        return None
    for _, m in submodules:
        if "forward" in m.__dict__ or any(
            getattr(m, hooks, None) for hooks in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks",
                                                   "_backward_pre_hooks")
        ):
            return None
    return (
        tuple((name, type(m)) for name, m in submodules),
        tuple((n, tuple(p.shape), p.dtype, p.requires_grad) for n, p in module.named_parameters()),
        tuple((n, tuple(b.shape), b.dtype) for n, b in module.named_buffers()),
    )


def global_hooks() -> bool:
    hooks = torch.nn.modules.module
    return any(getattr(hooks, name, None) for name in (
        "_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks", "_global_backward_pre_hooks",
    ))



@contextlib.contextmanager
def reading(
    block: torch.nn.Module, opaque: Mapping[tuple[str, str], Callable[[], Any]] | None = None
) -> Iterator[dict[str, dict[str, Any]]]:
    """Record the plain attributes (not parameters, buffers, submodules) each submodule reads; those in
    ``opaque`` (path, name) read as what its function makes, and are not recorded."""
    reads: dict[str, dict[str, Any]] = {}
    swapped = []
    try:
        for path, module in block.named_modules():
            seen = reads.setdefault(path, {})
            original = type(module)
            stand_ins = {name: make for (p, name), make in (opaque or {}).items() if p == path}
            module.__class__ = _reader_class(original, seen, stand_ins)
            swapped.append((module, original))
        yield reads
    finally:
        for module, original in swapped:
            module.__class__ = original


_SKIPPED = frozenset({"_parameters", "_buffers", "_modules", "__dict__", "__class__", "_forward_hooks",
                      "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks", "_state_dict_hooks",
                      "_forward_hooks_with_kwargs", "_forward_pre_hooks_with_kwargs", "_forward_hooks_always_called",
                      "_is_full_backward_hook", "_non_persistent_buffers_set", "_load_state_dict_pre_hooks",
                      "_state_dict_pre_hooks", "_load_state_dict_post_hooks", "_compiled_call_impl"})


def _reader_class(original: type, seen: dict[str, Any], stand_ins: Mapping[str, Callable[[], Any]]) -> type:
    def __getattribute__(self: Any, name: str) -> Any:  # noqa: N807 - the hook Python calls
        if name in stand_ins:
            return stand_ins[name]()
        value = original.__getattribute__(self, name)
        if name not in _SKIPPED and name in object.__getattribute__(self, "__dict__"):
            seen.setdefault(name, value)
        return value

    return type(original.__name__, (original,), {"__getattribute__": __getattribute__, "__module__": original.__module__})


def varying_ints(members: list[torch.nn.Module]) -> list[tuple[str, str]]:
    """The int attributes (submodule path, name) whose values differ between ``members``, e.g. ``layer_idx``."""
    tables = [dict(m.named_modules()) for m in members]
    varying = []
    for path, module in tables[0].items():
        for name, value in module.__dict__.items():
            if type(value) is not int:
                continue
            values = {getattr(t.get(path), "__dict__", {}).get(name, None) for t in tables}
            if len(values) > 1:
                varying.append((path, name))
    return varying


def same_reads(reads: dict[str, dict[str, Any]], reference: torch.nn.Module, module: torch.nn.Module) -> bool:
    """Whether ``module`` has the attributes a capture of ``reference`` read (``reads``), equal to its."""
    if module is reference:
        return True
    submodules = dict(module.named_modules())
    for path, attributes in reads.items():
        other = submodules.get(path)
        if other is None:
            return False
        for name, value in attributes.items():
            if name not in other.__dict__ or not equal(value, other.__dict__[name]):
                return False
    return True


def differing(reads: dict[str, dict[str, Any]], reference: torch.nn.Module, others: list[tuple[str, torch.nn.Module]]) -> str:
    """Which attribute read in a capture of ``reference`` (``reads``) sets it apart from ``others``."""
    submodules = [dict(m.named_modules()) for _, m in others if m is not reference]
    for path, attributes in reads.items():
        for name, value in attributes.items():
            if any(path not in s or not equal(value, s[path].__dict__.get(name, _MISSING)) for s in submodules):
                return f"{path + '.' if path else ''}{name} differs"
    return "?"


_MISSING = object()


def equal(a: Any, b: Any, depth: int = 0) -> bool:
    """Whether two attribute values make the same code behave the same: equal values, the same function,
    or objects of one class whose own attributes are equal (a config, an activation, a processor)."""
    if a is b:
        return True
    if type(a) is not type(b) or depth > 4:
        return False
    if isinstance(a, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b))
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(equal(x, y, depth + 1) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(equal(a[k], b[k], depth + 1) for k in a)
    if isinstance(a, (*CONSTANTS, frozenset, set)):
        return a == b
    if isinstance(a, functools.partial):
        return a.func is b.func and equal(a.args, b.args, depth + 1) and equal(a.keywords, b.keywords, depth + 1)
    if isinstance(a, (torch.nn.Module, types.FunctionType, types.BuiltinFunctionType, types.MethodType, type)):
        return False  # modules are compared as submodules; functions only when the very same
    state_a, state_b = getattr(a, "__dict__", None), getattr(b, "__dict__", None)
    return state_a is not None and state_b is not None and equal(state_a, state_b, depth + 1)


