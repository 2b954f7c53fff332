"""transformers' ``DynamicCache`` handed to repeated decoder layers by slots (``onnxport.blocks``).

A decoder layer updates the cache it is given at its own ``layer_idx``; block reuse captures one layer
with a cache of one layer (:func:`slot_cache`) and hands each call its own slot's keys and values. Only a
cache of plain growing layers (``DynamicLayer``) is handed out so; a sliding-window or static cache is
captured layer by layer as usual. Written against the cache classes' public attributes (``layers``,
``keys``, ``values``, ``is_initialized``), the same in every transformers 5.x.
"""

from __future__ import annotations

from typing import Any

import torch

from onnxport.blocks._cache import Opaque, OpaqueUsed

__all__ = ["DynamicCacheSlots", "slot_cache"]


def _classes() -> tuple[type, type]:
    from transformers.cache_utils import DynamicCache, DynamicLayer

    return DynamicCache, DynamicLayer


class DynamicCacheSlots:
    """A ``DynamicCache`` of ``DynamicLayer`` s seen by slots (``onnxport.blocks._cache.CacheSlots``)."""

    def __init__(self, cache: Any) -> None:
        self.cache = cache

    @classmethod
    def of(cls, value: Any) -> DynamicCacheSlots | None:
        """The slots of ``value`` when it is a ``DynamicCache`` of plain growing layers; None otherwise."""
        cache_type, layer_type = _classes()
        if type(value) is not cache_type or any(type(layer) is not layer_type for layer in value.layers):
            return None
        return cls(value)

    def layer_state(self, index: int | None = None) -> list[torch.Tensor] | None:
        """The keys and values of layer ``index`` (the first when None); None when it holds none yet."""
        layers = self.cache.layers
        layer = layers[index if index is not None else 0] if (index or 0) < len(layers) else None
        if layer is None or not layer.is_initialized:
            return None
        return [layer.keys, layer.values]

    def write_back(self, index: int, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Store a layer's updated keys and values in its slot, as ``DynamicLayer.update`` does."""
        _, layer_type = _classes()
        while len(self.cache.layers) <= index:
            self.cache.layers.append(layer_type())
        layer = self.cache.layers[index]
        layer.dtype, layer.device, layer.is_initialized = keys.dtype, keys.device, True
        layer.keys, layer.values = keys, values

    @staticmethod
    def slot_cache(state: list[torch.Tensor]) -> Any:
        """A cache of one layer holding ``state`` (keys, values; empty: not initialized yet) whose ``update``
        takes the layer index only as an ``Opaque``, and notes it."""
        return slot_cache(state)


def slot_cache(state: list[torch.Tensor]) -> Any:
    """See :meth:`DynamicCacheSlots.slot_cache`."""
    cache_type, layer_type = _classes()

    class SlotCache(cache_type):  # a DynamicCache to every isinstance check the layer makes
        def __init__(self) -> None:  # noqa: D107 - the cache's own state is the one layer
            self.layers = [layer_type()]
            self.indices: list[Opaque] = []

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: Any, *args: Any,
                   **kwargs: Any) -> Any:
            if not isinstance(layer_idx, Opaque):
                raise OpaqueUsed("it updates the cache at an index that is the same for every layer")
            self.indices.append(layer_idx)
            return self.layers[0].update(key_states, value_states, *args, **kwargs)

    cache = SlotCache()
    if state:
        layer = cache.layers[0]
        layer.dtype, layer.device, layer.is_initialized = state[0].dtype, state[0].device, True
        layer.keys, layer.values = state
    return cache
