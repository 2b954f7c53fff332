"""What onnxport changes in transformers' models while torch.export captures them, and only then.

Written for transformers 5.x. Mixture-of-experts layers dispatch on ``config._experts_implementation``;
the default ``"grouped_mm"`` runs, on CPU, an opaque custom op (``transformers::grouped_mm_fallback``)
fed by ``torch.histc``, which no ONNX runtime has; ``"eager"`` (the default of a model that chose it for its
accumulation order, the OpenAI privacy filter) loops in Python over the experts a batch hits, a number that is
data. ``"batched_mm"`` computes the same with gathers and batched matmuls, which translate to plain ONNX. The
switch is made on the model's configs for the duration of the capture and undone on every path; the user's
model is left as it was.

A model that loops over a set of strings (its layer kinds' rotary tables) loops in sorted order during the
capture (:mod:`onnxport.hf._set_order`): Python orders such a set by hashes that differ from process to process.

Attention masks that combine mask functions are built without ``torch.vmap`` during the capture
(:func:`_masks_without_vmap`): functorch's batching ops have no ONNX form.

Linear-attention layers (Mamba, gated delta-net hybrids) pad a prompt's conv states to the kernel size in
Python, only for a prompt shorter than the kernel; during the capture they pad by ``max(kernel - length,
0)`` (:func:`_conv_states_padded`), so one graph serves every prompt length.

Gated delta-net layers (Qwen3-Next, Qwen3.5, OLMo hybrid) compute a prompt with transformers'
``torch_chunk_gated_delta_rule``, which under capture inverts each chunk by a Python loop of slice ops
(slow) and walks the chunks in a Python loop that fixes their number (wrong beyond 64 tokens). During the
capture it is replaced (:func:`_scans_swapped`) by :func:`onnxport.hf._delta_rule.chunk_gated_delta_rule`:
a loop-free inverse, and a ``scan`` over a symbolic number of chunks. Likewise Mamba layers' (Mamba,
Falcon-Mamba, Jamba, Zamba) ``mamba_selective_scan``, a Python loop over the tokens that fixes the prompt's
length, by :func:`onnxport.hf._selective_scan.selective_scan`, a ``scan`` over them; and Mamba-2 mixers' (NemotronH,
GraniteMoeHybrid, Bamba, Falcon-H1, Zamba2) ``mamba2_chunk_scan``, whose reshape into chunks fixes the example's
number of chunks, by :func:`onnxport.hf._chunk_scan.mamba2_chunk_scan`, a ``scan`` over a symbolic number of them.

Vision towers that pack every image's patches in one sequence (Qwen2-VL and the families built like it)
split it per image by sizes that are data (``torch.split(t, lengths.tolist())``); during the capture they
attend once, with a mask that keeps each image to itself (:mod:`onnxport.hf._packed_attention`); Qwen2.5-VL's
window order and every tower's patch positions are computed with tensor ops instead of a Python loop over the
images (:mod:`onnxport.hf._vision_windows`), LFM3-VL's convolutions over each frame's grid for every image at
once (:mod:`onnxport.hf._grid_convolution`) and HunYuan-VL's tower likewise (:mod:`onnxport.hf._hunyuan_vision`);
a multimodal model's per-image list of features, of a count that is data, is captured as the one tensor they join
into (:mod:`onnxport.hf._joined_pieces`).

Sinusoid position tables that a forward grows in Python (M2M100, Speech2Text, XGLM, ...) are made in the graph
for each call's length (:mod:`onnxport.hf._sinusoid_tables`), so the file takes any length, as eager PyTorch does.
A speech encoder's output length, which Moonshine computes with Python's ``int()`` of a float, is computed from its
convolutions with floor division (:mod:`onnxport.hf._conv_lengths`), so the clip's length stays dynamic.
LongT5's encoder, which pads its sequence to a multiple of its attention block only where it is not one, splits a
symbolic length into blocks with no branch (:mod:`onnxport.hf._longt5_blocks`).
An x-vector head (WavLM's, Wav2Vec2's), which pools each row's frames of a masked batch in a Python loop over
the batch, pools them with masked sums (:mod:`onnxport.hf._xvector_pooling`), so the batch stays dynamic.
Mimi's convolutions, which pad by amounts read from buffers (``.item()``), pad a symbolic clip length by
integer amounts, and its codebooks measure distances with no check on the frames (:mod:`onnxport.hf._mimi_codec`),
so the clip's length stays dynamic.
VitDet's position embeddings (VitMatte's backbone), which transformers fits to an image's grid of patches in Python,
are resized in the graph for every size (:mod:`onnxport.hf._vitdet_positions`), so height and width stay dynamic.
Swin-style layers, which pad an image to their patches and windows behind Python tests of its sides, pad and crop
at every size by amounts the graph computes (:mod:`onnxport.hf._window_padding`), so height and width stay dynamic.
Grounding DINO's feature levels' sizes stay symbolic likewise (:mod:`onnxport.hf._level_shapes`).
DPT-style fusion layers (DPT, Depth Anything, ZoeDepth, ...), which resize a residual only where its size differs,
get it resized in the graph at every size (:mod:`onnxport.hf._fusion_residuals`).

A causal LM's decode step of one token with a dynamic length cannot be captured size-obliviously:
transformers decides on the query length in Python (``q_length > 1``), and torch's own checks (the strides
behind ``.contiguous()``) fix a length whose example is 1 for the rest of the graph. So such a step is
captured from the same step widened to two tokens (:func:`widened_decode_step`), a size torch keeps symbolic
like any other; verification still runs the user's one-token example.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Iterator
from typing import Any

import torch

from onnxport.hf import cache as _cache
from onnxport.hf._conv_lengths import conv_lengths_symbolic
from onnxport.hf._fusion_residuals import fusion_residuals_resized
from onnxport.hf._grid_convolution import grid_convolution_on
from onnxport.hf._hunyuan_vision import hunyuan_tower_on
from onnxport.hf._joined_pieces import joined_pieces
from onnxport.hf._level_shapes import level_shapes_symbolic
from onnxport.hf._longt5_blocks import blocks_of_any_length
from onnxport.hf._mimi_codec import mimi_any_length
from onnxport.hf._packed_attention import packed_attention_on
from onnxport.hf._set_order import sets_in_order
from onnxport.hf._sinusoid_tables import tables_of_any_length
from onnxport.hf._vision_windows import layout_as_tensors
from onnxport.hf._vitdet_positions import vitdet_any_size
from onnxport.hf._window_padding import window_padding_any_size
from onnxport.hf._xvector_pooling import xvector_pooling_masked
from onnxport.hf.attribute_swap import swapped
from onnxport.hf.signature import cache_argument

__all__ = ["patched", "widened_decode_step"]

_EXPORTABLE_EXPERTS = "batched_mm"
_OPAQUE_EXPERTS = ("grouped_mm", "eager")


@contextlib.contextmanager
def patched(model: torch.nn.Module) -> Iterator[None]:
    """Capture-friendly settings on ``model``'s transformers configs, restored on exit. Nothing at all when
    transformers is not loaded (the model cannot be one of its models) or is not a version this was written for."""
    if not _cache.supported():
        yield
        return
    saved = []
    seen = set()
    for module in model.modules():
        config = getattr(module, "config", None)
        if config is None or id(config) in seen:
            continue
        seen.add(id(config))
        if getattr(config, "_experts_implementation", None) in _OPAQUE_EXPERTS:
            saved.append((config, config._experts_implementation))
            config._experts_implementation = _EXPORTABLE_EXPERTS
    try:
        with _cache.mask_spans_cache(model), _masks_without_vmap(), _conv_states_padded(), \
                _scans_swapped(model), packed_attention_on(model), layout_as_tensors(), grid_convolution_on(), \
                hunyuan_tower_on(), _joined_in(model), tables_of_any_length(model), conv_lengths_symbolic(model), \
                blocks_of_any_length(), xvector_pooling_masked(model), mimi_any_length(model), \
                vitdet_any_size(model), level_shapes_symbolic(model), window_padding_any_size(model), \
                fusion_residuals_resized(model), sets_in_order():
            yield
    finally:
        for config, value in saved:
            config._experts_implementation = value


def _joined_in(model: torch.nn.Module) -> contextlib.AbstractContextManager:
    """:func:`joined_pieces` for a model holding a transformers model (its ``get_image_features``), nothing for
    another: a plain PyTorch model's capture is torch's own."""
    holds = any(kind.__module__.startswith("transformers.") for m in model.modules() for kind in type(m).__mro__)
    return joined_pieces() if holds else contextlib.nullcontext()


@contextlib.contextmanager
def _masks_without_vmap() -> Iterator[None]:
    """transformers builds an attention mask with ``torch.vmap`` over its mask function as soon as one is
    combined with another (a sliding window and Gemma 3's image blocks): capture then records functorch's
    batching ops (``_add_batch_dim``), which have no ONNX form. Its own mask functions are written to work on
    broadcast index tensors as well (its non-vmap path, the default for a plain causal mask), so for the
    capture the mask functions that take ``use_vmap`` are called with it off. Verification compares the
    result with eager PyTorch, which keeps vmap."""
    from transformers import masking_utils

    interface = getattr(masking_utils, "ALL_MASK_ATTENTION_FUNCTIONS", None)
    mapping = getattr(interface, "_global_mapping", None)
    if not isinstance(mapping, dict):
        yield
        return
    saved = dict(mapping)

    def without_vmap(build: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            kwargs["use_vmap"] = False
            return build(*args, **kwargs)
        return call

    for name, build in saved.items():
        if callable(build) and "use_vmap" in inspect.signature(build).parameters:
            mapping[name] = without_vmap(build)
    try:
        yield
    finally:
        mapping.clear()
        mapping.update(saved)


@contextlib.contextmanager
def _conv_states_padded() -> Iterator[None]:
    """A linear-attention layer (Mamba, gated delta-net) pads a prompt's conv states to the kernel size only
    when the prompt is shorter (``if shape[-1] < conv_kernel_size``): captured from a longer example, the
    graph holds a guard (prompt >= kernel) and no padding, and a shorter prompt differs from eager PyTorch.
    For the capture the states are padded by ``max(kernel - length, 0)``, nothing for a longer prompt: one
    graph for every length. Decode steps (a previous state) and recorded pasts go through transformers' own."""
    try:
        from transformers.cache_utils import LinearAttentionLayer
    except ImportError:  # a transformers without linear-attention caches
        yield
        return

    original = LinearAttentionLayer.update_conv_state

    def update_conv_state(self: Any, conv_states: torch.Tensor, state_idx: int = 0,
                          conv_kernel_size: int | None = None, **kwargs: Any) -> torch.Tensor:
        if self.has_previous_state[state_idx] or self.record_past:
            return original(self, conv_states, state_idx, conv_kernel_size, **kwargs)
        if not self.is_conv_states_initialized[state_idx]:
            self.lazy_initialization(conv_states=conv_states, state_idx=state_idx, conv_kernel_size=conv_kernel_size)
        self.has_previous_state[state_idx] = True
        kernel = self.conv_kernel_size[state_idx]
        full = torch.nn.functional.pad(conv_states, (torch.sym_max(kernel - conv_states.shape[-1], 0), 0))
        self.conv_states[state_idx].copy_(full[..., -kernel:])
        return full

    LinearAttentionLayer.update_conv_state = update_conv_state
    try:
        yield
    finally:
        LinearAttentionLayer.update_conv_state = original


@contextlib.contextmanager
def _scans_swapped(model: torch.nn.Module) -> Iterator[None]:
    """transformers' sequence recurrences that loop in Python (or fix the example's number of chunks), replaced by
    onnxport's that scan: in every loaded transformers module that defines one (``torch_chunk_gated_delta_rule``,
    ``mamba_selective_scan``, ``mamba2_chunk_scan``), and in every submodule of ``model`` whose attribute
    (``chunk_gated_delta_rule``) holds transformers' function (or the kernel wrapper around it); everything is put
    back on exit."""
    from onnxport.hf._chunk_scan import mamba2_chunk_scan
    from onnxport.hf._delta_rule import chunk_gated_delta_rule
    from onnxport.hf._selective_scan import selective_scan

    replacements = {"torch_chunk_gated_delta_rule": (chunk_gated_delta_rule, "chunk_gated_delta_rule"),
                    "mamba_selective_scan": (selective_scan, None), "mamba2_chunk_scan": (mamba2_chunk_scan, None)}
    changes = []
    originals: dict[int, tuple[str, Any]] = {}
    for name, module in list(sys.modules.items()):
        if not name.startswith("transformers.") or module is None:
            continue
        for global_name, (ours, held_as) in replacements.items():
            function = vars(module).get(global_name)
            if not callable(function) or function is ours:
                continue
            changes.append((module, global_name, ours))
            while function is not None:  # the kernel wrapper and what it wraps
                if held_as is not None:
                    originals[id(function)] = (held_as, ours)
                function = getattr(function, "__wrapped__", None)
    attributes = {held_as for held_as, _ in originals.values()}
    for layer in model.modules():
        for held_as in attributes:
            held = getattr(layer, held_as, None)
            if held is not None and id(held) in originals:
                changes.append((layer, held_as, originals[id(held)][1]))
    with swapped(changes):
        yield


# Inputs of a causal LM's step that run along the new tokens: how each widens from one token to two.
_ALONG_TOKENS = {
    "input_ids": lambda t: torch.cat([t, t], dim=1),
    "inputs_embeds": lambda t: torch.cat([t, t], dim=1),
    "attention_mask": lambda t: torch.cat([t, t[:, -1:]], dim=1),
    "position_ids": lambda t: torch.cat([t, t + 1], dim=1),
    "cache_position": lambda t: torch.cat([t, t + 1]),
    "token_type_ids": lambda t: torch.cat([t, t], dim=1),
}


def widened_decode_step(
    model: torch.nn.Module, args: tuple, kwargs: dict[str, Any], small: list[str]
) -> tuple[tuple, dict[str, Any]] | None:
    """The example widened to two new tokens when it is a transformers causal LM's step of one token whose
    length is asked to be dynamic (``small`` lists ``input_ids.shape[1]``); None otherwise. The same tokens
    twice, the mask one column longer, the positions one further; the cache as it is."""
    if not _cache.supported():
        return None
    if not {"input_ids.shape[1]", "inputs_embeds.shape[1]"} & set(small):
        return None
    from transformers.cache_utils import Cache

    parameters = list(inspect.signature(model.forward).parameters)
    bound = {**dict(zip(parameters, args)), **kwargs}
    if not isinstance(bound.get(cache_argument(model)), Cache):
        return None
    args, kwargs = list(args), dict(kwargs)
    for name, widen in _ALONG_TOKENS.items():
        value = bound.get(name)
        if not isinstance(value, torch.Tensor) or value.dim() < 1:
            continue
        if name in kwargs:
            kwargs[name] = widen(value)
        else:
            args[parameters.index(name)] = widen(value)
    return tuple(args), kwargs

