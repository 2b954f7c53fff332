"""A transformers ``DynamicCache`` handed to each layer: the layer's own slot of it, as tensors in and out.

A decoder layer updates the cache it is given (``past_key_values.update(k, v, self.layer_idx)``), an
object the op standing for the layer cannot take. So the cache argument becomes a marker (``SLOT``) in
the call's description; the kind is captured with a cache of one layer (that layer's keys and values as
inputs, the updated ones as outputs), and ``self.layer_idx``, an int that differs between the layers,
reads as an ``Opaque`` that any use but indexing that cache refuses: the layers then provably differ only
in which slot they update. Each call passes its own slot in and writes the result back, as the cache's
own ``update`` would.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

__all__ = ["SLOT", "Opaque", "OpaqueUsed", "slot_cache", "split_cache", "supported"]


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


def supported() -> bool:
    transformers = sys.modules.get("transformers")
    if transformers is None:
        return False
    from onnxport.capture import _transformers_cache

    return _transformers_cache.supported()


def _classes() -> tuple[type, type]:
    from transformers.cache_utils import DynamicCache, DynamicLayer

    return DynamicCache, DynamicLayer


def split_cache(args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any], Any]:
    """``args``/``kwargs`` with their one ``DynamicCache`` (of plain, growing layers) replaced by ``SLOT``,
    and that cache; unchanged and None when there is none, or another kind of cache."""
    if not supported():
        return args, kwargs, None
    cache_type, layer_type = _classes()
    found = [a for a in (*args, *kwargs.values()) if type(a) is cache_type]
    if len(found) != 1 or any(type(layer) is not layer_type for layer in found[0].layers):
        return args, kwargs, None
    cache = found[0]
    return (tuple(SLOT if a is cache else a for a in args),
            {k: SLOT if v is cache else v for k, v in kwargs.items()}, cache)


def layer_state(cache: Any, index: int | None = None) -> list[torch.Tensor] | None:
    """The keys and values of the cache's layer ``index`` (its first when None); None when it holds none yet."""
    layers = cache.layers
    layer = layers[index if index is not None else 0] if (index or 0) < len(layers) else None
    if layer is None or not layer.is_initialized:
        return None
    return [layer.keys, layer.values]


def write_back(cache: Any, index: int, keys: torch.Tensor, values: torch.Tensor) -> None:
    """Store a layer's updated keys and values in its slot, as ``DynamicLayer.update`` does."""
    _, layer_type = _classes()
    while len(cache.layers) <= index:
        cache.layers.append(layer_type())
    layer = cache.layers[index]
    layer.dtype, layer.device, layer.is_initialized = keys.dtype, keys.device, True
    layer.keys, layer.values = keys, values


def slot_cache(state: list[torch.Tensor]) -> Any:
    """A cache of one layer holding ``state`` (keys, values; empty: not initialized yet) whose ``update``
    takes the layer index only as an ``Opaque``, and notes it."""
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
