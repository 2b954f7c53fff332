"""The translator registry: one function per ATen overload (or other FX call target).

Built-in translators register with ``@aten(...)`` at import of ``onnxport.translate.ops``; users add
their own with ``onnxport.register_translation`` or the ``custom_translations`` argument of ``export``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

__all__ = ["AbsentOp", "BUILTIN", "COMPLEX", "Translator", "absent_ops", "aten", "builtin_count", "complex_aten", "lookup", "ops",
           "register_translation", "target_name"]

Translator = Callable[..., Any]

BUILTIN: dict[Any, Translator] = {}
# the translators of ops for nodes with complex tensors (ops/complex.py: their real, imaginary layout), by target
COMPLEX: dict[Any, Translator] = {}
_ABSENT: dict[str, Translator] = {}  # ops registered by name that the installed torch does not have
_USER: dict[Any, Translator] = {}
_USER_BY_NAME: dict[str, Translator] = {}


class AbsentOp:
    """An op (``aten::cholesky``) or overload (``aten::cholesky.default``) the installed torch does not have.

    ``ops.aten.NAME`` gives one where ``torch.ops.aten.NAME`` would raise, so translators of ops that some
    torch releases lack still import on every release: ``@aten`` records them in ``absent_ops()`` instead of
    registering them, and a graph of that torch never holds the op. ``versions.OPS_NOT_IN_EVERY_TORCH``
    lists the ops expected to be absent somewhere; a test holds the registry to it, so a misspelt op still fails.
    """

    def __init__(self, name: str):
        self.name = name

    def __getattr__(self, attr: str) -> AbsentOp:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return AbsentOp(f"{self.name}.{attr}")

    def overloads(self) -> list[str]:
        return []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{self.name} is not an operator of torch {torch.__version__}")

    def __repr__(self) -> str:
        return f"AbsentOp({self.name!r})"

    __str__ = __repr__


class _Namespace:
    """``torch.ops.<namespace>`` whose missing ops are ``AbsentOp``s instead of an ``AttributeError``."""

    def __init__(self, namespace: str):
        self._namespace = namespace

    def __getattr__(self, name: str) -> Any:
        try:
            op = getattr(getattr(torch.ops, self._namespace), name)  # aten.__and__ is an op too
        except AttributeError:
            if name.startswith("__") and name.endswith("__"):
                raise
            op = AbsentOp(f"{self._namespace}::{name}")
        setattr(self, name, op)  # resolved once: translators read their ops on every node
        return op


class _Ops:
    """``ops.aten.add.Tensor``: ``torch.ops`` for translators and tests, tolerant of ops a torch release lacks."""

    def __getattr__(self, namespace: str) -> _Namespace:
        if namespace.startswith("__"):
            raise AttributeError(namespace)
        value = _Namespace(namespace)
        setattr(self, namespace, value)  # one namespace object, so its resolved ops are shared
        return value


ops = _Ops()


def builtin_count() -> int:
    """How many call targets have a built-in translator in this torch."""
    return len(BUILTIN)


def absent_ops() -> dict[str, str]:
    """``{op name: translator}`` for each registration whose op the installed torch does not have."""
    return {name: fn.__qualname__ for name, fn in sorted(_ABSENT.items())}


def aten(*targets: Any) -> Callable[[Translator], Translator]:
    """Register the decorated function as the translator of every target given.

    Targets are ``OpOverload`` objects (``ops.aten.add.Tensor``) or other FX call targets (``operator.mul``
    for symbolic sizes). An ``AbsentOp`` (an op this torch does not have) is recorded, not registered.
    """
    if not targets:
        raise TypeError("@aten needs at least one target")

    def decorate(fn: Translator) -> Translator:
        for target in targets:
            if isinstance(target, AbsentOp):
                _ABSENT[target.name] = fn
                continue
            if target in BUILTIN:
                raise ValueError(f"{target_name(target)} already has a translator: {BUILTIN[target].__qualname__}")
            BUILTIN[target] = fn
        return fn

    return decorate


def complex_aten(*targets: Any) -> Callable[[Translator], Translator]:
    """Register the decorated function as the translator of ``targets`` for nodes with complex tensors (see
    ``onnxport.translate.ops.complex``; a node without them takes the one ``aten`` registered)."""

    def decorate(fn: Translator) -> Translator:
        for target in targets:
            if target in COMPLEX:
                raise ValueError(f"{target_name(target)} already has a complex translator: {COMPLEX[target].__qualname__}")
            COMPLEX[target] = fn
        return fn

    return decorate


def register_translation(op: Any, fn: Translator | None = None) -> Any:
    """Register a user translation for ``op``, an ``OpOverload``, ``OpOverloadPacket`` or its name.

    Names are ``"namespace::op"`` (every overload) or ``"namespace::op.overload"``. Usable as a
    decorator (``@register_translation("mylib::foo")``) or a call. The function receives the
    translation context and the node's arguments, like a built-in translator, and returns ONNX values.
    """

    def decorate(f: Translator) -> Translator:
        if isinstance(op, str):
            _USER_BY_NAME[_normalise_name(op)] = f
        elif isinstance(op, torch._ops.OpOverloadPacket):
            for overload in op.overloads():
                _USER[getattr(op, overload)] = f
        else:
            _USER[op] = f
        return f

    return decorate(fn) if fn is not None else decorate


def _normalise_name(name: str) -> str:
    name = name.strip()
    return name[: -len(".default")] if name.endswith(".default") else name


def target_name(target: Any) -> str:
    """``aten::add.Tensor`` for an OpOverload; the qualified name for other callables."""
    if isinstance(target, torch._ops.OpOverload):
        return _normalise_name(target.name()) if target._overloadname == "default" else target.name()
    if isinstance(target, torch._ops.HigherOrderOperator):
        return f"higher_order::{target.name()}"
    module = getattr(target, "__module__", None) or ""
    return f"{module}.{getattr(target, '__qualname__', repr(target))}".lstrip(".")


def lookup(target: Any, extra: Mapping[Any, Translator] | None = None) -> Translator | None:
    """The translator for ``target``: per-export ones first, then user-registered, then built-in."""
    if extra:
        fn = extra.get(target)
        if fn is not None:
            return fn
    fn = _USER.get(target)
    if fn is not None:
        return fn
    if _USER_BY_NAME and isinstance(target, torch._ops.OpOverload):
        name = target_name(target)
        fn = _USER_BY_NAME.get(name) or _USER_BY_NAME.get(name.split(".", 1)[0])
        if fn is not None:
            return fn
    fn = BUILTIN.get(target)
    if fn is None and isinstance(target, torch._ops.OpOverload):
        functional = functional_variant(target)
        if functional is not None:
            return lookup(functional, extra)
    return fn


def functional_variant(target: torch._ops.OpOverload) -> torch._ops.OpOverload | None:
    """``aten.add.Tensor`` for ``aten.add_.Tensor``: in-place ops translate as their functional twin.

    The driver then rebinds the mutated input to the result, so later readers see the new value.
    """
    packet = target.overloadpacket.__name__
    if not (packet.endswith("_") and not packet.startswith("_") and target._schema.is_mutable):
        return None
    namespace = target.namespace
    try:
        return getattr(getattr(getattr(torch.ops, namespace), packet[:-1]), target._overloadname)
    except AttributeError:
        return None


def normalise_custom_translations(table: Mapping[Any, Translator] | None) -> dict[Any, Translator]:
    """Resolve the keys of ``export(custom_translations=...)`` to FX targets."""
    resolved: dict[Any, Translator] = {}
    for key, fn in (table or {}).items():
        if isinstance(key, str):
            resolved.update(_resolve_name(key, fn))
        elif isinstance(key, torch._ops.OpOverloadPacket):
            resolved.update({getattr(key, o): fn for o in key.overloads()})
        else:
            resolved[key] = fn
    return resolved


def _resolve_name(name: str, fn: Translator) -> dict[Any, Translator]:
    from onnxport.errors import InvalidInputError

    qualified = _normalise_name(name)
    namespace, _, rest = qualified.partition("::")
    op_name, _, overload = rest.partition(".")
    try:
        packet = getattr(getattr(torch.ops, namespace), op_name)
    except (AttributeError, RuntimeError) as exc:
        raise InvalidInputError(
            f"custom_translations names {name!r}, which is not a registered torch operator",
            fix="spell it 'namespace::op' or 'namespace::op.overload', or pass the OpOverload itself",
        ) from exc
    overloads = [overload or "default"] if overload else packet.overloads()
    return {getattr(packet, o): fn for o in overloads}
