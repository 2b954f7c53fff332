"""The name a transformers model takes and returns its KV cache under, read from the model itself.

transformers 5.24 renamed the cache argument of the models' ``forward`` from ``past_key_values`` to
``cache`` (the old name still works, through ``@deprecate_kwarg``, with a warning on every call, until
5.40) and the output field likewise. Which name a model takes is read from its ``forward`` signature,
not from the version, so a model written either way (a remote-code model, a release that renames more)
is called as it asks. The ONNX names do not change: ``past_key_values.{i}.key`` in, ``present.{i}.key`` out.
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

from onnxport.hf.cache import CACHE_ARGUMENTS

__all__ = ["argument_aliases", "cache_argument", "cache_of", "self_attention_cache"]


def cache_argument(model: Any) -> str:
    """``"cache"`` when ``model.forward`` takes its KV cache by that name (transformers 5.24 on), else
    ``"past_key_values"``."""
    parameters = inspect.signature(model.forward).parameters
    return next((name for name in CACHE_ARGUMENTS if name in parameters), "past_key_values")


def cache_of(output: Any) -> Any:
    """The KV cache in a forward pass's output, under whichever name the model returned it (None when it
    returned none), without touching the deprecated name where the new one is there."""
    for name in CACHE_ARGUMENTS:
        if name in output:  # a ModelOutput is a dict of its fields that are set
            return output[name]
    return getattr(output, "past_key_values", None)


def argument_aliases(model: Any) -> dict[str, str]:
    """``{the other name: the name forward takes}`` for the cache argument of a transformers model; empty for
    any other model, or one whose forward takes neither name or both."""
    transformers = sys.modules.get("transformers")
    pretrained = getattr(transformers, "PreTrainedModel", None)
    if pretrained is None or not isinstance(model, pretrained):
        return {}
    parameters = inspect.signature(model.forward).parameters
    taken = [name for name in CACHE_ARGUMENTS if name in parameters]
    if len(taken) != 1:
        return {}
    return {other: taken[0] for other in CACHE_ARGUMENTS if other != taken[0]}


def self_attention_cache(cache: Any) -> Any:
    """A decoder's cache as onnxruntime-genai feeds it: the self-attention cache of an ``EncoderDecoderCache``
    whose cross-attention layers hold nothing (a BERT-style decoder built without cross-attention returns one,
    and takes its self-attention cache alone), else ``cache``."""
    cross = getattr(cache, "cross_attention_cache", None)
    if cross is None or any(getattr(layer, "keys", None) is not None for layer in getattr(cross, "layers", ())):
        return cache
    return cache.self_attention_cache
