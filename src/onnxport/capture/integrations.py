"""What an outside library (transformers) adds to capture, without the pipeline importing it.

The core stages know one interface, :class:`Integration`, and the integrations registered with
:func:`register`; ``onnxport.hf`` registers transformers' when ``onnxport`` is imported. Every method has a
default that does nothing, so an integration overrides what it needs, and a library that is not installed
(or a model that is not its) costs nothing. The functions below ask each integration in turn.

- :func:`registered_types`: the library's input and output types (KV caches) as pytree nodes, for the
  duration of an export, a verification or a run of the program, and only then.
- :func:`patched`: changes to the library's code or the model's settings, around each capture attempt only.
- :func:`argument_aliases`: another name of a ``forward`` argument (transformers 5.24 renamed
  ``past_key_values`` to ``cache``), so the example inputs reach the model under the name it takes.
- :func:`widened_example`, :func:`auto_spec`, :func:`conventional_dim_names`, :func:`input_fix` and
  :func:`cache_slots`: what capture, ``dynamic_shapes="auto"``, the ONNX dim names, the refusal of an
  input and block reuse need to know about the library's types.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

__all__ = [
    "Integration", "argument_aliases", "auto_spec", "cache_slots", "conventional_dim_names", "input_fix", "patched",
    "register", "registered_types", "renamed", "widened_example",
]


class Integration:
    """An outside library's hooks into capture; each default does nothing."""

    name = "integration"

    def registered_types(self) -> contextlib.AbstractContextManager:
        """The library's types registered as pytree nodes inside the block, the registry as it was after it."""
        return contextlib.nullcontext()

    def patched(self, model: Any) -> contextlib.AbstractContextManager:
        """Changes that make ``model`` capturable, made for one capture attempt and undone on every path."""
        return contextlib.nullcontext()

    def argument_aliases(self, model: Any) -> dict[str, str]:
        """``{a name the user may give: the name model.forward takes}`` for arguments known by two names."""
        return {}

    def widened_example(self, model: Any, args: tuple, kwargs: dict[str, Any], small: list[str]) -> Any:
        """Example inputs to capture from instead of the user's (verification still runs the user's); None
        to keep them. ``small`` lists the dynamic dims of example size 0 or 1."""
        return None

    def auto_spec(self, value: Any) -> Any:
        """``dynamic_shapes="auto"``'s spec for an input of one of the library's types; None for others."""
        return None

    def conventional_dim_names(self, input_names: list[str]) -> list[dict[int, str]] | None:
        """Per ONNX input, the names its dims conventionally have; None when the inputs are not the library's."""
        return None

    def input_fix(self, kind: type) -> str | None:
        """The next step for a user whose input of type ``kind`` onnxport cannot pass; None when not the library's."""
        return None

    def cache_slots(self, value: Any) -> Any:
        """A :class:`onnxport.blocks.CacheSlots` for ``value`` when it is a KV cache whose layers can each be
        handed their own slot (block reuse); None otherwise."""
        return None


_REGISTERED: list[Integration] = []


def register(integration: Integration) -> Integration:
    """Add ``integration`` (once; registering it again is a no-op) and return it."""
    if all(type(known) is not type(integration) for known in _REGISTERED):
        _REGISTERED.append(integration)
    return integration


@contextlib.contextmanager
def registered_types() -> Iterator[None]:
    """Every integration's types as pytree nodes inside the block."""
    with contextlib.ExitStack() as stack:
        for integration in _REGISTERED:
            stack.enter_context(integration.registered_types())
        yield


@contextlib.contextmanager
def patched(model: Any) -> Iterator[None]:
    """Every integration's capture-time changes to ``model`` (or its library) inside the block."""
    with contextlib.ExitStack() as stack:
        for integration in _REGISTERED:
            stack.enter_context(integration.patched(model))
        yield


def argument_aliases(model: Any) -> dict[str, str]:
    """``{alias: the name forward takes}`` from every integration."""
    aliases: dict[str, str] = {}
    for integration in _REGISTERED:
        aliases.update(integration.argument_aliases(model))
    return aliases


def renamed(model: Any, mapping: dict[str, Any]) -> dict[str, Any]:
    """``mapping`` (keyword arguments, or a ``dynamic_shapes`` dict) with each alias key under the name
    ``model.forward`` takes, in its place; the same dict when nothing is renamed."""
    aliases = {old: new for old, new in argument_aliases(model).items() if old in mapping and new not in mapping}
    if not aliases:
        return mapping
    return {aliases.get(key, key): value for key, value in mapping.items()}


def widened_example(model: Any, args: tuple, kwargs: dict[str, Any], small: list[str]) -> Any:
    """The first integration's widened example, or None."""
    return next((w for i in _REGISTERED if (w := i.widened_example(model, args, kwargs, small)) is not None), None)


def auto_spec(value: Any) -> Any:
    """The first integration's ``"auto"`` spec for ``value``, or None."""
    return next((s for i in _REGISTERED if (s := i.auto_spec(value)) is not None), None)


def conventional_dim_names(input_names: list[str]) -> list[dict[int, str]]:
    """The first integration's conventional dim names for these inputs; no names otherwise."""
    found = next((n for i in _REGISTERED if (n := i.conventional_dim_names(input_names)) is not None), None)
    return found if found is not None else [{} for _ in input_names]


def input_fix(kind: type) -> str | None:
    """The first integration's next step for an input of type ``kind``, or None."""
    return next((f for i in _REGISTERED if (f := i.input_fix(kind)) is not None), None)


def cache_slots(value: Any) -> Any:
    """The first integration's slot view of ``value``, or None."""
    return next((s for i in _REGISTERED if (s := i.cache_slots(value)) is not None), None)
