"""A KV cache of one head size for keys and values, as onnxruntime-genai allocates it.

onnxruntime-genai gives every ``past_key_values.*`` input one shape, ``[batch, kv_heads, past, head_size]``, for
keys and values alike. Multi-head latent attention (DeepSeek V2 and V3, Kimi, GLM-4 MoE Lite, ...) caches
tensors of two sizes: transformers keeps the compressed latent as the keys and the rotary part as the values
(``kv_lora_rank`` and ``qk_rope_head_dim`` wide). Such a model is exported with the narrower tensors padded with
zeros to the wider size in the cache it takes and returns: each is cut back to its own size before the model
reads it, and padded again where the model returns it, so the model computes what it computes on its own cache.
The padding is captured and verified with the model (the hooks below are on while it is exported).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from onnxport.hf.signature import cache_of

__all__ = ["head_sizes", "padded", "uniform"]


def _attention_layers(cache: Any) -> list[Any]:
    """The layers of ``cache`` that hold keys and values (not a linear-attention or convolution state)."""
    return [layer for layer in getattr(cache, "layers", ())
            if isinstance(getattr(layer, "keys", None), torch.Tensor)
            and isinstance(getattr(layer, "values", None), torch.Tensor)]


def head_sizes(cache: Any) -> list[tuple[int, int]]:
    """The (key, value) head size of each attention layer of ``cache``."""
    return [(layer.keys.shape[-1], layer.values.shape[-1]) for layer in _attention_layers(cache)]


def uniform(cache: Any) -> bool:
    """Whether every attention layer of ``cache`` has keys and values of one head size."""
    return len({size for pair in head_sizes(cache) for size in pair}) <= 1


def _pad(tensor: torch.Tensor, width: int) -> torch.Tensor:
    return torch.nn.functional.pad(tensor, (0, width - tensor.shape[-1])) if tensor.shape[-1] < width else tensor


def _pad_layers(cache: Any, width: int) -> None:
    for layer in _attention_layers(cache):
        layer.keys, layer.values = _pad(layer.keys, width), _pad(layer.values, width)


@contextlib.contextmanager
def padded(model: torch.nn.Module, argument: str, cache: Any) -> Iterator[Any]:
    """For the block, ``model`` takes and returns its cache (the ``argument`` of its forward) with keys and values
    padded to the widest head size of ``cache``, an example of it; yields that example, padded (a new cache: the
    example is left as it is)."""
    sizes = head_sizes(cache)
    width = max(size for pair in sizes for size in pair)

    def narrow(module: torch.nn.Module, args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
        given = kwargs.get(argument)
        layers = _attention_layers(given)
        if layers:
            for layer, (keys, values) in zip(layers, sizes):
                layer.keys, layer.values = layer.keys[..., :keys], layer.values[..., :values]
        return args, kwargs

    def widen(module: torch.nn.Module, args: tuple, kwargs: dict[str, Any], output: Any) -> Any:
        returned = cache_of(output)
        if returned is not None:
            _pad_layers(returned, width)
        return output

    from torch.utils import _pytree as pytree

    from onnxport.hf.cache import registered

    with registered():  # a copy of the example, its tensors padded
        leaves, spec = pytree.tree_flatten(cache)
        example = pytree.tree_unflatten(list(leaves), spec)
    _pad_layers(example, width)
    before = model.register_forward_pre_hook(narrow, with_kwargs=True)
    after = model.register_forward_hook(widen, with_kwargs=True)
    try:
        yield example
    finally:
        before.remove()
        after.remove()
