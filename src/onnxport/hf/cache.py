"""transformers' KV caches as pytree nodes, while onnxport captures, verifies or runs a model, and only then.

Written for transformers 5.x against the cache classes' public attributes (``layers``, each layer's ``keys``,
``values``, ``is_initialized``, ``sliding_window``, ``cumulative_length``; ``conv_states``,
``recurrent_states`` and ``indexer_keys`` for the other layer kinds). torch.export flattens a model's inputs
and outputs with pytree; a ``DynamicCache`` is no pytree node, so capture fails with "Unsupported input type
DynamicCache". :func:`registered` makes it one for the duration of a ``with`` block and restores the registry as it was
on exit, whatever happened (a registration someone else made, transformers' own
``register_dynamic_cache_export_support`` included, is put back).

A cache of attention layers flattens to one ``(key, value)`` tuple per layer, each ``[batch, kv_heads, past,
head_dim]``, so a ``dynamic_shapes`` spec for the cache argument is a list of per-layer ``(key_spec, value_spec)``
tuples. The layer keys (:class:`CacheLayerKey`) name the ONNX values the way onnxruntime-genai and optimum
do: inputs ``past_key_values.{i}.key``/``.value``, outputs ``present.{i}.key``/``.value``, whatever the
model calls its cache argument (``past_key_values``, or ``cache`` from transformers 5.24 on).
Full-attention layers (``DynamicLayer``) and sliding-window ones (``DynamicSlidingWindowLayer``, as
Gemma 2 and Mistral build them) are supported. In the ONNX model a sliding layer keeps every past token,
like a full one, and the model's sliding mask leaves out those beyond the window: all layers share one
past length, and a present is always the past plus the new tokens (what onnxruntime-genai feeds back).
The example cache must therefore still hold every token (a past shorter than the window).

Other layers of a ``DynamicCache`` flatten generically (:class:`_Layout`), each to a tuple of the tensors it
holds, named after them: a linear-attention layer (``LinearAttentionLayer``: Mamba, Mamba 2, gated delta-net
hybrids as Qwen3-Next and OLMo hybrid) to ``past_key_values.{i}.conv_state`` and ``.recurrent_state``
(``conv_state.{j}`` ... where a layer holds several states), ``[batch, ...]`` of fixed sizes; an indexed one
(``DynamicIndexedLayer``: DeepSeek V3.2) to ``.key``, ``.value`` and ``.indexer_key`` (``[batch, past, dim]``);
a hybrid layer to its keys and values, then its states. Outputs are named ``present.{i}.conv_state`` ...
alike, and a ``dynamic_shapes`` spec for such a layer is a tuple of one spec per tensor, in that order. The
layer's class and its other attributes (``has_previous_state``, ``conv_kernel_size`` ...) go in the pytree
context, so unflattening rebuilds a layer of the same class in the same state. A layer that holds no tensors
(not filled yet, or a ``DummyLayer``) flattens to no leaves; a cache argument none of whose layers holds any
is refused during capture (:func:`mask_spans_cache`): the ONNX model would take no past at all.

An ``EncoderDecoderCache`` (seq2seq models: a self-attention and a cross-attention ``DynamicCache``)
flattens to one ``(decoder key, decoder value, encoder key, encoder value)`` tuple per layer, named as
optimum names them: ``past_key_values.{i}.decoder.key`` ... ``past_key_values.{i}.encoder.value`` in,
``present.{i}.decoder.key`` ... out. Unflattened, every cross-attention layer counts as filled
(``is_updated``), so the decoder reads the encoder's keys and values from the cache. Its layers must be
filled attention layers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import re
import sys
import threading
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils import _pytree as pytree

from onnxport.errors import InvalidInputError

# The cache classes exported, each a pytree node inside ``registered()``.
SUPPORTED = ("DynamicCache", "EncoderDecoderCache", "StaticCache")
# The names of a model's cache argument: from transformers 5.24, then before it.
CACHE_ARGUMENTS = ("cache", "past_key_values")

__all__ = ["CACHE_ARGUMENTS", "SUPPORTED", "CacheLayerKey", "CacheLengthKey", "Seq2SeqLayerKey", "auto_spec",
           "conventional_dim_names", "mask_spans_cache", "registered", "supported", "unnamed_state"]

_KINDS = ("key", "value")
_SEQ2SEQ_KINDS = ("decoder.key", "decoder.value", "encoder.key", "encoder.value")


@dataclasses.dataclass(frozen=True)
class CacheLayerKey(pytree.SequenceKey):
    """The key of layer ``idx`` of a KV cache; names its two tensors (``leaf_name``) for the ONNX model.

    It prints as a ``SequenceKey`` (``[0]``): torch.export writes its guards with that form
    (``L['past_key_values'][0][0]``) and matches them to the inputs' key paths as text."""

    # The names of the layer's tensors, in order: ``key``, ``value`` for an attention layer; a linear-attention
    # layer's ``conv_state``, ``recurrent_state``; an indexed one's ``key``, ``value``, ``indexer_key`` ...
    kinds: tuple[str, ...] = _KINDS

    def leaf_name(self, rest: tuple[Any, ...], output: bool) -> str:
        """``past_key_values.{i}.key`` for an input, ``present.{i}.key`` for an output."""
        isseq = rest and isinstance(rest[0], pytree.SequenceKey) and rest[0].idx < len(self.kinds)
        kind = self.kinds[rest[0].idx] if isseq else "_".join(map(str, rest))
        return f"{'present' if output else 'past_key_values'}.{self.idx}.{kind}"


@dataclasses.dataclass(frozen=True)
class Seq2SeqLayerKey(pytree.SequenceKey):
    """The key of layer ``idx`` of an ``EncoderDecoderCache``; names its four tensors as optimum does."""

    # The names of the layer's tensors, in order: fewer where a self- or cross-attention layer holds none yet.
    kinds: tuple[str, ...] = _SEQ2SEQ_KINDS

    def leaf_name(self, rest: tuple[Any, ...], output: bool) -> str:
        """``past_key_values.{i}.decoder.key`` for an input, ``present.{i}.encoder.value`` for an output."""
        isseq = rest and isinstance(rest[0], pytree.SequenceKey) and rest[0].idx < len(self.kinds)
        kind = self.kinds[rest[0].idx] if isseq else "_".join(map(str, rest))
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
    # Threads share pytree's registry: the first block in registers, the last one out restores what was there.
    global _holders, _undo
    with _REGISTERING:
        if _holders == 0:
            stack = contextlib.ExitStack()
            for cls, flatten, unflatten, with_keys in nodes:
                stack.enter_context(_node(cls, flatten, unflatten, with_keys))
            _undo = stack
        _holders += 1
    try:
        yield
    finally:
        with _REGISTERING:
            _holders -= 1
            if _holders == 0 and _undo is not None:
                _undo.close()
                _undo = None


_REGISTERING = threading.Lock()
_holders = 0
_undo: contextlib.ExitStack | None = None


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


def _flatten(cache: Any) -> tuple[list[tuple[Any, ...]], tuple[Any, ...]]:
    """One child per layer, a tuple of its tensors; the context holds, per layer, its sliding window (None:
    full attention) for a key/value layer, or the :class:`_Layout` that rebuilds any other kind of layer."""
    from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

    children, context = [], []
    for i, layer in enumerate(cache.layers):
        if type(layer) in (DynamicLayer, DynamicSlidingWindowLayer, _window_layer_class()) and layer.keys is not None:
            children.append(_attention_tensors(i, layer))
            context.append(getattr(layer, "sliding_window", None))
        else:
            layout, tensors = _Layout.of(i, layer)
            children.append(tensors)
            context.append(layout)
    return children, tuple(context)


def _attention_tensors(i: int, layer: Any) -> tuple[Any, Any]:
    """The ``(keys, values)`` of a full or sliding-window attention layer that holds every token seen."""
    from transformers.cache_utils import DynamicSlidingWindowLayer

    if type(layer) is DynamicSlidingWindowLayer and layer.cumulative_length > layer.keys.shape[-2]:
        raise InvalidInputError(
            f"past_key_values layer {i} is a sliding-window layer that has dropped its oldest tokens "
            f"({layer.cumulative_length} seen, {layer.keys.shape[-2]} kept): the ONNX model keeps every past "
            "token and masks the window, so its cache must hold them all",
            fix=f"export from a cache of fewer than {layer.sliding_window} tokens (the sliding window)",
        )
    return layer.keys, layer.values


def _flatten_with_keys(cache: Any) -> tuple[list[tuple[Any, Any]], tuple[Any, ...]]:
    children, context = _flatten(cache)
    keys = [CacheLayerKey(i, e.kinds) if isinstance(e, _Layout) else CacheLayerKey(i) for i, e in enumerate(context)]
    return list(zip(keys, children)), context


def _unflatten(children: Any, context: tuple[Any, ...]) -> Any:
    from transformers.cache_utils import DynamicCache, DynamicLayer

    layers = []
    for tensors, entry in zip(children, context):
        if isinstance(entry, _Layout):
            layers.append(entry.build(tensors))
            continue
        keys, values = tensors
        # Filled directly, not through update(): no concatenation with an empty tensor in the graph.
        layer = DynamicLayer() if entry is None else _window_layer_class()(entry)
        layer.dtype, layer.device = getattr(keys, "dtype", None), getattr(keys, "device", None)
        layer.keys, layer.values, layer.is_initialized = keys, values, True
        layers.append(layer)
    cache = DynamicCache()
    cache.layers = layers
    return cache


# A layer's tensor attributes and the names of their ONNX values (``past_key_values.{i}.{name}``).
_TENSORS = (("keys", "key"), ("values", "value"), ("indexer_keys", "indexer_key"),
            ("indexer_position_ids", "indexer_position_ids"))
# A linear-attention layer's states: dicts of one tensor per state index (``conv_state``, or ``conv_state.{j}``
# where the layer has several states).
_STATES = (("conv_states", "conv_state"), ("recurrent_states", "recurrent_state"))
# Attributes that are no state, computed when a layer is rebuilt: a sliding layer's window as a tensor (from its
# settings), and the count of tokens it has seen (its keys' length: it holds every token), which the capture makes
# symbolic in the present's layers.
_DERIVED = {"_sliding_window_tensor", "cumulative_length"}


class _Items(tuple):
    """A dict attribute of a layer (``has_previous_state``, ``conv_kernel_size`` ...) as its items, hashable in a
    pytree context; :meth:`_Layout.build` turns it back into a dict."""


@dataclasses.dataclass(frozen=True)
class _Layout:
    """How a cache layer that is not a filled key/value one flattens and is rebuilt: a linear-attention layer
    (conv and recurrent states: Mamba, gated delta-net), an indexed one (DeepSeek V3.2's extra indexer keys), a
    hybrid of both, or one that holds no tensors (uninitialised, or a ``DummyLayer``: no leaves).

    ``kinds`` names its tensors in flattening order; ``slots`` says where each goes (attribute, and state index
    for a dict of states); ``settings`` holds the layer's attributes, the tensors' places left None, so the layer
    rebuilt has its class, its flags (``has_previous_state`` ...) and its sizes (``conv_kernel_size`` ...); its
    ``dtype`` and ``device`` are those of the tensors it is given."""

    cls: type
    kinds: tuple[str, ...]
    slots: tuple[tuple[str, int | None], ...]
    settings: tuple[tuple[str, Any], ...]

    @classmethod
    def of(cls, i: int, layer: Any) -> tuple[_Layout, tuple[Any, ...]]:
        """The layout of layer ``i`` and its tensors, in the order of ``kinds``. A tensor is whatever is not None
        in a tensor attribute: the leaves may be stand-ins (torch.export flattens a tree of ints to name them)."""
        attributes = vars(layer)
        kinds, slots, tensors = [], [], []
        for attribute, kind in _TENSORS:
            if attributes.get(attribute) is not None:
                kinds.append(kind)
                slots.append((attribute, None))
                tensors.append(attributes[attribute])
        count = attributes.get("number_of_states", 1)
        for j in range(count) if isinstance(attributes.get("conv_states"), dict) else ():
            for attribute, kind in _STATES:
                if attributes[attribute].get(j) is not None:
                    kinds.append(kind if count == 1 else f"{kind}.{j}")
                    slots.append((attribute, j))
                    tensors.append(attributes[attribute][j])
        places = {attribute for attribute, _ in _TENSORS + _STATES}
        settings = []
        for name, value in attributes.items():
            if name in places:  # where the tensors go, filled by build()
                value = _Items((k, None) for k in value) if isinstance(value, dict) else None
            elif name in _DERIVED:
                value = None
            elif any(isinstance(v, torch.Tensor) for v in _nested(value)):
                raise InvalidInputError(f"past_key_values {unnamed_state(layer, i)}",
                                        fix="export the model without a cache (use_cache=False)")
            elif isinstance(value, dict):
                value = _Items(value.items())
            settings.append((name, value))
        return cls(type(layer), tuple(kinds), tuple(slots), tuple(settings)), tuple(tensors)

    def build(self, tensors: tuple[Any, ...]) -> Any:
        """A layer of this layout holding ``tensors``: the class's own instance, without calling its ``__init__``
        (whose arguments differ by class), its attributes set as they were."""
        layer = self.cls.__new__(self.cls)
        for name, value in self.settings:
            setattr(layer, name, dict(value) if isinstance(value, _Items) else value)
        for (attribute, j), tensor in zip(self.slots, tensors):
            if j is None:
                setattr(layer, attribute, tensor)
            else:
                getattr(layer, attribute)[j] = tensor
        if tensors and hasattr(layer, "dtype"):  # the dtype and device of the tensors given, not the example's
            layer.dtype, layer.device = getattr(tensors[0], "dtype", None), getattr(tensors[0], "device", None)
        indexer = getattr(layer, "indexer_keys", None)
        if indexer is not None and hasattr(layer, "indexer_dtype"):
            layer.indexer_dtype = getattr(indexer, "dtype", None)
            layer.indexer_device = getattr(indexer, "device", None)
        keys = getattr(layer, "keys", None)
        if hasattr(layer, "cumulative_length") and isinstance(keys, torch.Tensor):  # not a stand-in leaf
            layer.cumulative_length = keys.shape[-2]
        if hasattr(layer, "_sliding_window_tensor"):
            layer._sliding_window_tensor = torch.tensor(layer.sliding_window, dtype=torch.long, device=layer.device)
        return layer


def unnamed_state(layer: Any, i: int) -> str | None:
    """What cache layer ``i`` holds that onnxport cannot name (tensors outside the attributes of
    :data:`_TENSORS` and :data:`_STATES`), said as an error's text; None when it holds none."""
    places = {attribute for attribute, _ in _TENSORS + _STATES} | _DERIVED
    unnamed = [name for name, value in vars(layer).items()
               if name not in places and any(isinstance(v, torch.Tensor) for v in _nested(value))]
    if not unnamed:
        return None
    known = ", ".join(attribute for attribute, _ in _TENSORS + _STATES)
    return (f"layer {i} is a {type(layer).__name__} that holds tensors in {', '.join(map(repr, unnamed))}, which "
            f"onnxport does not know how to name (it names a cache layer's {known})")


def _nested(value: Any) -> list[Any]:
    """``value``, or its values where it is a dict."""
    return list(value.values()) if isinstance(value, dict) else [value]


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
    """One ``(decoder key, decoder value, encoder key, encoder value)`` child per layer, less the pair of a
    layer that holds none yet (a model may return a cross-attention cache it has not filled); the context
    holds both caches' contexts."""
    decoder, decoder_windows = _flatten(cache.self_attention_cache)
    encoder, encoder_windows = _flatten(cache.cross_attention_cache)
    for windows in (decoder_windows, encoder_windows):  # attention layers only, filled or empty
        i, layout = next(((i, e) for i, e in enumerate(windows) if isinstance(e, _Layout) and e.kinds), (0, None))
        if layout is not None:
            raise InvalidInputError(
                f"past_key_values layer {i} is a {layout.cls.__name__}; onnxport exports EncoderDecoderCache layers "
                "of attention (DynamicLayer, DynamicSlidingWindowLayer)",
                fix="pass the EncoderDecoderCache of a forward pass, or export the model without a cache",
            )
    if len(decoder) != len(encoder):
        raise InvalidInputError(
            f"past_key_values has {len(decoder)} self-attention layers and {len(encoder)} cross-attention layers",
            fix="pass the EncoderDecoderCache of a forward pass of the model (use_cache=True)",
        )
    children = [(*d, *e) for d, e in zip(decoder, encoder)]
    return children, (decoder_windows, encoder_windows)


def _flatten_seq2seq_with_keys(cache: Any) -> tuple[list[tuple[Any, Any]], tuple[Any, Any]]:
    children, context = _flatten_seq2seq(cache)
    keys = []
    for i, (decoder, encoder) in enumerate(zip(*context)):
        kinds = [f"{part}.{kind}" for part, entry in (("decoder", decoder), ("encoder", encoder))
                 for kind in (entry.kinds if isinstance(entry, _Layout) else _KINDS)]
        keys.append(Seq2SeqLayerKey(i, tuple(kinds)))
    return list(zip(keys, children)), context


def _unflatten_seq2seq(children: Any, context: tuple[Any, Any]) -> Any:
    from transformers.cache_utils import EncoderDecoderCache

    # Each child's decoder pair first: two tensors, none where the layer held none.
    split = [0 if isinstance(entry, _Layout) else 2 for entry in context[0]]
    cache = EncoderDecoderCache(_unflatten([], ()), _unflatten([], ()))
    cache.self_attention_cache = _unflatten([layer[:n] for layer, n in zip(children, split)], context[0])
    cache.cross_attention_cache = _unflatten([layer[n:] for layer, n in zip(children, split)], context[1])
    # Set, not computed from the lengths as __init__ does: no guard on a symbolic encoder length. A
    # cross-attention layer that holds nothing is not filled: the decoder computes it from the encoder's output.
    cache.is_updated = {i: not isinstance(entry, _Layout) for i, entry in enumerate(context[1])}
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
    (re.compile(r"(past_key_values|cache)\.\d+\.indexer_key"), {0: "batch_size", 1: "past_sequence_length"}),
    (re.compile(r"(past_key_values|cache)\.\d+\.(conv_state|recurrent_state)(\.\d+)?"), {0: "batch_size"}),
)


def conventional_dim_names(input_names: list[str]) -> list[dict[int, str]] | None:
    """Per input, the conventional names of its dims when the inputs are an LLM call with a KV cache
    (``batch_size``, ``sequence_length``, ``past_sequence_length``); None otherwise."""
    if not any(pattern.fullmatch(name) for name in input_names for pattern, _ in _DIM_NAMES[2:]):
        return None
    return [next((dims for pattern, dims in _DIM_NAMES if pattern.fullmatch(name)), {}) for name in input_names]

@contextlib.contextmanager
def mask_spans_cache(model: Any) -> Iterator[None]:
    """During capture, tell torch.export that ``attention_mask`` spans the past and the new tokens.

    That is what ``generate`` passes; transformers pads a shorter mask silently, so nothing in the model
    ties the sizes together, and ``"auto"`` would make the mask's length a size of its own that the
    ONNX model mishandles when it differs. With the check, it is ``past_sequence_length + sequence_length``
    (the self-attention cache's, in an ``EncoderDecoderCache``);
    likewise every layer's cache has the batch of ``input_ids`` (or ``inputs_embeds``) and one past length,
    and a linear-attention layer's states that batch too. A ``DynamicCache`` argument none of whose layers
    holds a tensor is refused here (an input), not when flattened (a model may return one, as an output).
    """
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache, StaticCache

    def check(module: Any, args: tuple, kwargs: dict[str, Any]) -> None:
        ids, mask = kwargs.get("input_ids"), kwargs.get("attention_mask")
        if ids is None:  # a decoder fed embeddings (a vision-language model's): [batch, tokens, hidden]
            ids = kwargs.get("inputs_embeds")
        cache = next((kwargs[name] for name in CACHE_ARGUMENTS if kwargs.get(name) is not None), None)
        if isinstance(cache, DynamicCache) and cache.layers and not any(_flatten(cache)[0]):
            raise InvalidInputError(
                "past_key_values holds no tensors yet (no layer has been filled): the ONNX model needs them as inputs",
                fix="pass a cache filled by a forward pass, or one built with empty tensors: "
                "DynamicCache([(torch.zeros(batch, kv_heads, 0, head_dim),) * 2 for _ in range(num_layers)])",
            )
        if isinstance(cache, EncoderDecoderCache):  # the decoder's mask spans its own past and new tokens
            cache = cache.self_attention_cache
        if ids is None or not isinstance(cache, (DynamicCache, StaticCache)):
            return
        for layer in cache.layers:  # a linear-attention layer's states have the batch of the tokens
            for name, _ in _STATES:
                for t in (getattr(layer, name, None) or {}).values():
                    if isinstance(t, torch.Tensor):
                        torch._check(t.shape[0] == ids.shape[0])
        tensors = [t for layer in cache.layers for t in (getattr(layer, "keys", None), getattr(layer, "values", None))
                   if t is not None and t.dim() == 4]
        if mask is None or mask.dim() != 2 or not tensors:
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
    (they are fixed by the weights), and a linear-attention layer's states dynamic in their batch only;
    None for anything else."""
    kind = type(value).__name__
    if not supported() or kind not in SUPPORTED:
        return None
    from torch.export import Dim

    if kind == "StaticCache":  # the length is fixed by the cache; the count of tokens is a 0-d tensor
        return [({0: Dim.AUTO}, {0: Dim.AUTO}) for _ in value.layers] + [None]
    layer = {0: Dim.AUTO, 2: Dim.AUTO}
    if kind == "EncoderDecoderCache":  # a layer's cross-attention pair is left out where it holds none yet
        return [(layer,) * len(child) for child in _flatten_seq2seq(value)[0]]
    _, context = _flatten(value)
    # Other layers' tensors: batch and past length dynamic where they have them, the states' sizes static.
    dims = {"key": layer, "value": layer, "indexer_key": {0: Dim.AUTO, 1: Dim.AUTO},
            "indexer_position_ids": {1: Dim.AUTO, 2: Dim.AUTO}}
    return [tuple(dims.get(kind, {0: Dim.AUTO}) for kind in entry.kinds) if isinstance(entry, _Layout)
            else (layer, layer) for entry in context]
