"""A KV cache handed to each layer: the layer's own slot of it, as tensors in and out.

A decoder layer updates the cache it is given (transformers': ``cache.update(k, v, self.layer_idx)``), an
object the op standing for the layer cannot take. So the cache argument becomes a marker (``SLOT``) in
the call's description; the kind is captured with a cache of one layer (that layer's keys and values as
inputs, the updated ones as outputs), and ``self.layer_idx``, an int that differs between the layers,
reads as an ``Opaque`` that any use but indexing that cache refuses: the layers then provably differ only
in which slot they update. Each call passes its own slot in and writes the result back, as the cache's
own ``update`` would. Which caches can be handed out so, and how, is an integration's to say
(``Integration.cache_slots``; transformers' ``DynamicCache`` in ``onnxport.hf.blocks``).
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from onnxport.capture import integrations

__all__ = ["SLOT", "CacheSlots", "Opaque", "OpaqueUsed", "layer_state", "split_cache", "write_back"]


class OpaqueUsed(Exception):
    """The layer computes with an attribute that differs between the layers, not only to index the cache."""


class _Slot:
    def __repr__(self) -> str:
        return "<the layer's cache slot>"


SLOT = _Slot()


class Opaque:
    """An int attribute that differs between the layers, during a kind's capture: handing it to the cache
    slot is all a layer may do with it."""

    def __init__(self, path: str, name: str):
        self.path, self.name = path, name

    def __repr__(self) -> str:
        return f"<{self.path + '.' if self.path else ''}{self.name}, differing between the layers>"

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise OpaqueUsed(f"it computes with {self.path + '.' if self.path else ''}{self.name}, which differs "
                         "between the layers")

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __hash__ = __bool__ = __index__ = __int__ = _refuse
    __float__ = __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __mod__ = __floordiv__ = _refuse
    __truediv__ = __neg__ = __str__ = __format__ = __getitem__ = __len__ = __iter__ = _refuse


def split_cache(args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any], Any]:
    """``args``/``kwargs`` with their one KV cache that an integration hands out by slots replaced by ``SLOT``,
    and that cache's :class:`CacheSlots`; unchanged and None when there is none, or another kind of cache."""
    found = [(a, slots) for a in (*args, *kwargs.values()) if (slots := integrations.cache_slots(a)) is not None]
    if len(found) != 1:
        return args, kwargs, None
    cache, slots = found[0]
    return (tuple(SLOT if a is cache else a for a in args),
            {k: SLOT if v is cache else v for k, v in kwargs.items()}, slots)


class CacheSlots(Protocol):
    """A KV cache seen by slots (what an integration's ``cache_slots`` returns): a layer's keys and values
    read and written by index, and a cache of one layer for capturing a kind."""

    def layer_state(self, index: int | None) -> list[torch.Tensor] | None:
        """The keys and values of layer ``index`` (the first when None); None when it holds none yet."""

    def write_back(self, index: int, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Store a layer's updated keys and values in its slot, as the cache's own update would."""

    @staticmethod
    def slot_cache(state: list[torch.Tensor]) -> Any:
        """A cache of one layer holding ``state`` whose update takes the layer index only as an ``Opaque``
        (a static method: the block wrapper holds the function, and torch.export may copy the wrapper)."""


def layer_state(slots: CacheSlots, index: int | None = None) -> list[torch.Tensor] | None:
    """The keys and values of the cache's layer ``index`` (its first when None); None when it holds none yet."""
    return slots.layer_state(index)


def write_back(slots: CacheSlots, index: int, keys: torch.Tensor, values: torch.Tensor) -> None:
    """Store a layer's updated keys and values in its slot."""
    slots.write_back(index, keys, values)
