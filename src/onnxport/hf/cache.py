"""transformers' KV caches as pytree nodes, while onnxport captures, verifies or runs a model, and only then.

Written for transformers 5.x against the cache classes' public attributes (``layers``, each layer's ``keys``,
``values``, ``is_initialized``, ``sliding_window``, ``cumulative_length``). torch.export flattens a model's inputs and outputs with
pytree; a ``DynamicCache`` is no pytree node, so capture fails with "Unsupported input type DynamicCache".
:func:`registered` makes it one for the duration of a ``with`` block and restores the registry as it was
on exit, whatever happened (a registration someone else made, transformers' own
``register_dynamic_cache_export_support`` included, is put back).

A cache flattens to one ``(key, value)`` tuple per layer, each ``[batch, kv_heads, past, head_dim]``,
so a ``dynamic_shapes`` spec for the cache argument is a list of per-layer ``(key_spec, value_spec)``
tuples. The layer keys (:class:`CacheLayerKey`) name the ONNX values the way onnxruntime-genai and optimum
do: inputs ``past_key_values.{i}.key``/``.value``, outputs ``present.{i}.key``/``.value``, whatever the
model calls its cache argument (``past_key_values``, or ``cache`` from transformers 5.24 on).
Full-attention layers (``DynamicLayer``) and sliding-window ones (``DynamicSlidingWindowLayer``, as
Gemma 2 and Mistral build them) are supported. In the ONNX model a sliding layer keeps every past token,
like a full one, and the model's sliding mask leaves out those beyond the window: all layers share one
past length, and a present is always the past plus the new tokens (what onnxruntime-genai feeds back).
The example cache must therefore still hold every token (a past shorter than the window).

An ``EncoderDecoderCache`` (seq2seq models: a self-attention and a cross-attention ``DynamicCache``)
flattens to one ``(decoder key, decoder value, encoder key, encoder value)`` tuple per layer, named as
optimum names them: ``past_key_values.{i}.decoder.key`` ... ``past_key_values.{i}.encoder.value`` in,
``present.{i}.decoder.key`` ... out. Unflattened, every cross-attention layer counts as filled
(``is_updated``), so the decoder reads the encoder's keys and values from the cache.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import re
import sys
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils import _pytree as pytree

from onnxport.errors import InvalidInputError

# The cache classes exported, each a pytree node inside ``registered()``.
SUPPORTED = ("DynamicCache", "EncoderDecoderCache", "StaticCache")
# The names of a model's cache argument: from transformers 5.24, then before it.
CACHE_ARGUMENTS = ("cache", "past_key_values")

__all__ = ["CACHE_ARGUMENTS", "SUPPORTED", "CacheLayerKey", "CacheLengthKey", "Seq2SeqLayerKey", "auto_spec", "conventional_dim_names", "mask_spans_cache", "registered", "supported"]

_KINDS = ("key", "value")
_SEQ2SEQ_KINDS = ("decoder.key", "decoder.value", "encoder.key", "encoder.value")


@dataclasses.dataclass(frozen=True)
class CacheLayerKey(pytree.SequenceKey):
    """The key of layer ``idx`` of a KV cache; names its two tensors (``leaf_name``) for the ONNX model.

    It prints as a ``SequenceKey`` (``[0]``): torch.export writes its guards with that form
    (``L['past_key_values'][0][0]``) and matches them to the inputs' key paths as text."""

    def leaf_name(self, rest: tuple[Any, ...], output: bool) -> str:
        """``past_key_values.{i}.key`` for an input, ``present.{i}.key`` for an output."""
        kind = _KINDS[rest[0].idx] if rest and isinstance(rest[0], pytree.SequenceKey) else "_".join(map(str, rest))
        return f"{'present' if output else 'past_key_values'}.{self.idx}.{kind}"


@dataclasses.dataclass(frozen=True)
class Seq2SeqLayerKey(pytree.SequenceKey):
    """The key of layer ``idx`` of an ``EncoderDecoderCache``; names its four tensors as optimum does."""

    def leaf_name(self, rest: tuple[Any, ...], output: bool) -> str:
        """``past_key_values.{i}.decoder.key`` for an input, ``present.{i}.encoder.value`` for an output."""
        isseq = rest and isinstance(rest[0], pytree.SequenceKey)
        kind = _SEQ2SEQ_KINDS[rest[0].idx] if isseq else "_".join(map(str, rest))
        return f"{'present' if output else 'past_key_values'}.{self.idx}.{kind}"


@dataclasses.dataclass(frozen=True)
class CacheLengthKey(pytree.SequenceKey):
    """The key of a ``StaticCache``'s fill level (tokens written so far): ``past_key_values.length`` in,
    ``present.length`` out."""

    def leaf_name(self, rest: tuple[Any, ...], output: bool) -> str:
        """``past_key_values.length`` for an input, ``present.length`` for an output."""
        return "present.length" if output else "past_key_values.length"


def supported() -> bool:
    """Whether the installed transformers is one these registrations were written for (major version 5)."""
    module = sys.modules.get("transformers")
    major = getattr(module, "__version__", "").split(".", 1)[0]
    return major == "5"


@contextlib.contextmanager
def registered() -> Iterator[None]:
    """``DynamicCache`` and ``EncoderDecoderCache`` registered as pytree nodes inside the block; the
    registry as it was after it."""
    if not supported():
        yield
        return
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache, StaticCache

    nodes = ((DynamicCache, _flatten, _unflatten, _flatten_with_keys),
             (EncoderDecoderCache, _flatten_seq2seq, _unflatten_seq2seq, _flatten_seq2seq_with_keys),
             (StaticCache, _flatten_static, _unflatten_static, _flatten_static_with_keys))
    with contextlib.ExitStack() as stack:
        for cls, flatten, unflatten, with_keys in nodes:
            stack.enter_context(_node(cls, flatten, unflatten, with_keys))
        yield


@contextlib.contextmanager
def _node(cls: type, flatten: Any, unflatten: Any, with_keys: Any) -> Iterator[None]:
    """``cls`` a pytree node inside the block; a registration made before (by anyone) put back after."""
    saved = pytree.SUPPORTED_NODES.get(cls)
    saved_serialized = pytree.SUPPORTED_SERIALIZED_TYPES.get(cls)
    if saved is not None:
        pytree._deregister_pytree_node(cls)
    pytree._private_register_pytree_node(cls, flatten, unflatten, serialized_type_name=f"onnxport.{cls.__name__}",
                                         flatten_with_keys_fn=with_keys)
    try:
        yield
    finally:
        pytree._deregister_pytree_node(cls)
        if saved is not None:
            pytree.SUPPORTED_NODES[cls] = saved
            pytree.SUPPORTED_SERIALIZED_TYPES[cls] = saved_serialized
            pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE[saved_serialized.serialized_type_name] = cls


def _flatten(cache: Any) -> tuple[list[tuple[Any, Any]], tuple[int | None, ...]]:
    """One ``(keys, values)`` child per layer; the context holds each layer's sliding window (None: full)."""
    from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

    children, windows = [], []
    for i, layer in enumerate(cache.layers):
        if type(layer) not in (DynamicLayer, DynamicSlidingWindowLayer, _window_layer_class()):
            raise InvalidInputError(
                f"past_key_values layer {i} is a {type(layer).__name__}; onnxport exports DynamicCache layers "
                "(DynamicLayer, DynamicSlidingWindowLayer)",
                fix="pass the DynamicCache of a forward pass (use_cache=True), or export the model without a cache",
            )
        if layer.keys is None:
            raise InvalidInputError(
                f"past_key_values layer {i} holds no key/value tensors yet: the ONNX model needs them as inputs",
                fix="pass a cache filled by a forward pass, or one built with empty tensors: "
                "DynamicCache([(torch.zeros(batch, kv_heads, 0, head_dim),) * 2 for _ in range(num_layers)])",
            )
        window = getattr(layer, "sliding_window", None)
        if type(layer) is DynamicSlidingWindowLayer and layer.cumulative_length > layer.keys.shape[-2]:
            raise InvalidInputError(
                f"past_key_values layer {i} is a sliding-window layer that has dropped its oldest tokens "
                f"({layer.cumulative_length} seen, {layer.keys.shape[-2]} kept): the ONNX model keeps every past "
                "token and masks the window, so its cache must hold them all",
                fix=f"export from a cache of fewer than {window} tokens (the sliding window)",
            )
        children.append((layer.keys, layer.values))
        windows.append(window)
    return children, tuple(windows)


def _flatten_with_keys(cache: Any) -> tuple[list[tuple[Any, Any]], tuple[int | None, ...]]:
    children, context = _flatten(cache)
    return [(CacheLayerKey(i), child) for i, child in enumerate(children)], context


def _unflatten(children: Any, context: tuple[int | None, ...]) -> Any:
    from transformers.cache_utils import DynamicCache, DynamicLayer

    layers = []
    for (keys, values), window in zip(children, context):
        # Filled directly, not through update(): no concatenation with an empty tensor in the graph.
        layer = DynamicLayer() if window is None else _window_layer_class()(window)
        layer.dtype, layer.device = getattr(keys, "dtype", None), getattr(keys, "device", None)
        layer.keys, layer.values, layer.is_initialized = keys, values, True
        layers.append(layer)
    cache = DynamicCache()
    cache.layers = layers
    return cache


@functools.cache
def _window_layer_class() -> type:
    from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

    class WindowLayer(DynamicSlidingWindowLayer):
        """A sliding-window layer that keeps every token: the model's sliding mask, not the cache, drops the
        old ones. One past length for all layers, and a present that is the past plus the new tokens, as
        onnxruntime-genai feeds it back; what the model computes is the same as with a trimmed cache."""

        update = DynamicLayer.update
        get_mask_sizes = DynamicLayer.get_mask_sizes
        get_seq_length = DynamicLayer.get_seq_length

    return WindowLayer


def _flatten_seq2seq(cache: Any) -> tuple[list[tuple[Any, ...]], tuple[Any, Any]]:
    decoder, decoder_windows = _flatten(cache.self_attention_cache)
    encoder, encoder_windows = _flatten(cache.cross_attention_cache)
    if len(decoder) != len(encoder):
        raise InvalidInputError(
            f"past_key_values has {len(decoder)} self-attention layers and {len(encoder)} cross-attention layers",
            fix="pass the EncoderDecoderCache of a forward pass of the model (use_cache=True)",
        )
    children = [(*d, *e) for d, e in zip(decoder, encoder)]
    return children, (decoder_windows, encoder_windows)


def _flatten_seq2seq_with_keys(cache: Any) -> tuple[list[tuple[Any, Any]], tuple[Any, Any]]:
    children, context = _flatten_seq2seq(cache)
    return [(Seq2SeqLayerKey(i), child) for i, child in enumerate(children)], context


def _unflatten_seq2seq(children: Any, context: tuple[Any, Any]) -> Any:
    from transformers.cache_utils import EncoderDecoderCache

    cache = EncoderDecoderCache(_unflatten([], ()), _unflatten([], ()))
    cache.self_attention_cache = _unflatten([layer[:2] for layer in children], context[0])
    cache.cross_attention_cache = _unflatten([layer[2:] for layer in children], context[1])
    # Set, not computed from the lengths as __init__ does: no guard on a symbolic encoder length.
    cache.is_updated = dict.fromkeys(range(len(children)), True)
    return cache


def _flatten_static(cache: Any) -> tuple[list[Any], tuple[int, int]]:
    """One ``(keys, values)`` child per layer, each ``[batch, kv_heads, max_cache_len, head_dim]``, then the
    number of tokens written so far (a 0-d int64 tensor, the same for every layer)."""
    from transformers.cache_utils import StaticLayer

    for i, layer in enumerate(cache.layers):
        if type(layer) is not StaticLayer:
            raise InvalidInputError(
                f"past_key_values layer {i} is a {type(layer).__name__}; onnxport exports StaticCache layers of full "
                "attention (StaticLayer) only",
                fix="use a DynamicCache for a model with sliding-window layers",
            )
        if not layer.is_initialized:
            raise InvalidInputError(
                f"past_key_values layer {i} has no tensors yet: the ONNX model needs them as inputs",
                fix="fill the StaticCache with a forward pass, or call cache.early_initialization(batch_size, "
                "num_kv_heads, head_dim, dtype, device) first",
            )
    children = [(layer.keys, layer.values) for layer in cache.layers]
    return [*children, cache.layers[0].cumulative_length], (len(children), cache.layers[0].max_cache_len)


def _flatten_static_with_keys(cache: Any) -> tuple[list[tuple[Any, Any]], tuple[int, int]]:
    children, context = _flatten_static(cache)
    keys = [CacheLayerKey(i) for i in range(context[0])] + [CacheLengthKey(context[0])]
    return list(zip(keys, children)), context


def _unflatten_static(children: Any, context: tuple[int, int]) -> Any:
    from transformers.cache_utils import Cache, StaticCache, StaticLayer

    *layers, length = children
    cache = StaticCache.__new__(StaticCache)
    Cache.__init__(cache, layers=[StaticLayer(max_cache_len=context[1]) for _ in layers])
    for layer, (keys, values) in zip(cache.layers, layers):
        layer.keys, layer.values, layer.is_initialized = keys, values, True
        layer.dtype, layer.device = getattr(keys, "dtype", None), getattr(keys, "device", None)
        if isinstance(keys, torch.Tensor):
            layer.batch_size, layer.num_heads, _, layer.k_head_dim = keys.shape
            layer.v_head_dim = values.shape[-1]
        # Each layer advances its own count (update() adds to it in place), as in a cache transformers builds.
        layer.cumulative_length = length.clone() if isinstance(length, torch.Tensor) else length
    return cache


# ONNX dim names of an LLM call, as onnxruntime-genai and optimum write them: input name -> {dim: name}.
# Cache inputs match by their ONNX name or their FX placeholder's (``past_key_values_0_1``, or ``cache_0_1``
# where the model's argument is ``cache``).
_CACHE_INPUT = re.compile(r"(past_key_values|cache)[._]\d+[._](key|value|0|1)")
_DIM_NAMES = (
    (re.compile(r"input_ids|position_ids"), {0: "batch_size", 1: "sequence_length"}),
    (re.compile(r"attention_mask"), {0: "batch_size", 1: "total_sequence_length"}),
    (_CACHE_INPUT, {0: "batch_size", 2: "past_sequence_length"}),
)


def conventional_dim_names(input_names: list[str]) -> list[dict[int, str]] | None:
    """Per input, the conventional names of its dims when the inputs are an LLM call with a KV cache
    (``batch_size``, ``sequence_length``, ``past_sequence_length``); None otherwise."""
    if not any(_CACHE_INPUT.fullmatch(name) for name in input_names):
        return None
    return [next((dims for pattern, dims in _DIM_NAMES if pattern.fullmatch(name)), {}) for name in input_names]

@contextlib.contextmanager
def mask_spans_cache(model: Any) -> Iterator[None]:
    """During capture, tell torch.export that ``attention_mask`` spans the past and the new tokens.

    That is what ``generate`` passes; transformers pads a shorter mask silently, so nothing in the model
    ties the sizes together, and ``"auto"`` would make the mask's length a size of its own that the
    ONNX model mishandles when it differs. With the check, it is ``past_sequence_length + sequence_length``;
    likewise every layer's cache has the batch of ``input_ids`` (or ``inputs_embeds``) and one past length.
    """
    from transformers.cache_utils import DynamicCache, StaticCache

    def check(module: Any, args: tuple, kwargs: dict[str, Any]) -> None:
        ids, mask = kwargs.get("input_ids"), kwargs.get("attention_mask")
        if ids is None:  # a decoder fed embeddings (a vision-language model's): [batch, tokens, hidden]
            ids = kwargs.get("inputs_embeds")
        cache = next((kwargs[name] for name in CACHE_ARGUMENTS if kwargs.get(name) is not None), None)
        if ids is None or mask is None or mask.dim() != 2 or not isinstance(cache, (DynamicCache, StaticCache)):
            return
        tensors = [t for layer in cache.layers for t in (layer.keys, layer.values) if t is not None and t.dim() == 4]
        if not tensors:
            return
        torch._check(mask.shape[0] == ids.shape[0])
        for t in tensors:  # one batch for every layer
            torch._check(t.shape[0] == ids.shape[0])
        if isinstance(cache, StaticCache):  # fixed buffers: the mask spans the tokens written so far
            return
        past = tensors[0].shape[2]
        torch._check(mask.shape[1] == past + ids.shape[1])
        types = kwargs.get("token_type_ids")  # over the whole sequence where a decoder takes them so (Gemma 3's)
        if types is not None and types.dim() == 2 and types.shape[1] != ids.shape[1]:
            torch._check(types.shape[1] == mask.shape[1])
        for t in tensors:  # and one past length
            torch._check(t.shape[2] == past)

    handle = model.register_forward_pre_hook(check, with_kwargs=True) if supported() else None
    try:
        yield
    finally:
        if handle is not None:
            handle.remove()


def auto_spec(value: Any) -> Any:
    """``"auto"``'s spec for a KV cache: batch and past length dynamic, heads and head size static
    (they are fixed by the weights); None for anything else."""
    kind = type(value).__name__
    if not supported() or kind not in SUPPORTED:
        return None
    from torch.export import Dim

    if kind == "StaticCache":  # the length is fixed by the cache; the count of tokens is a 0-d tensor
        return [({0: Dim.AUTO}, {0: Dim.AUTO}) for _ in value.layers] + [None]
    layer = {0: Dim.AUTO, 2: Dim.AUTO}
    if kind == "EncoderDecoderCache":
        return [(layer,) * 4 for _ in value.self_attention_cache.layers]
    return [(layer, layer) for _ in value.layers]
