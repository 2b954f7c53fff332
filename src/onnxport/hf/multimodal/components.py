"""The pieces a vision-language model is split into, read from the model itself.

Every ``*ForConditionalGeneration`` that reads images and text computes, in its forward, the same four things:

- :class:`ImageEncoder`: the processor's image inputs (``pixel_values``, and what else its processor gives:
  ``image_grid_thw``, ``pixel_attention_mask``, ``image_sizes``, ...) to the rows of features its image tokens
  take, every image's rows one after the other, ``[rows, width]``; through the model's own
  ``get_image_features`` (its base model's where the model has none), whose per-image pieces are joined
  (``torch.cat``, as the forward joins them), then, for a model whose forward projects them after that call, its
  projector (``Family.projector``: Llama 4's); a processor's older names of these inputs are taken too
  (``IMAGE_INPUT_ALIASES``);
- :class:`TokenEmbedding`: token ids to their embeddings (``get_input_embeddings``), an image token's as the
  model's forward looks it up (``Family.image_token_as``): a consumer writes the image rows over it in a prompt,
  and a token generated as an image token keeps it;
- :class:`FeatureMerge`: the embeddings with the image rows, in order, in place of the image tokens (what the
  forward's ``masked_scatter`` does), for a consumer that runs the merge as a model;
- the decoder: the model itself on ``inputs_embeds``, with its KV cache (:class:`WideDecoder` where the image rows
  also feed later layers);
- :class:`AudioEncoder`, for a model that also hears (Gemma 4 with an audio tower): the feature extractor's
  ``input_features`` and ``input_features_mask`` to the rows its audio tokens take, through its own
  ``get_audio_features``, the padding's rows left out as the forward leaves them out; :class:`HeardAudioEncoder`
  for one that hears alone (``audio-text-to-text``: Voxtral, Granite Speech), whose audio tokens take the place of
  the image tokens in the other pieces (``Family.audio_only``).

Qwen3-VL's vision tower gives, besides the rows for the prompt, one set of rows per "deepstack" layer, which its
decoder adds to the hidden states of the image tokens after its first layers. Here those sets ride along as more
columns: the image encoder's rows are ``[features | deepstack 0 | deepstack 1 | ...]``, the token embedding gives
zeros in the extra columns, and :class:`WideDecoder` splits the columns again and adds each set to every
token's hidden states (zeros for a text token: the same sum as transformers' masked one). A consumer that copies
an image row over an image token's embedding, as every consumer does, carries them with no change. Gemma 3's
mark of an image token (``Family.image_flag``) rides the same way, as a last column: 1 in an image row, 0 in a
token's embedding; :class:`WideDecoder` makes the decoder's ``token_type_ids`` of it. So do Gemma 4's per-layer
embeddings of the token ids (``Family.per_layer``), between the deepstack sets and the flag.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import torch

from onnxport.errors import InvalidInputError
from onnxport.hf.multimodal.families import AUDIO_ONLY, VIDEOS_AS_IMAGES, Family, per_layer_model
from onnxport.hf.multimodal.granite_speech import whole_blocks
from onnxport.hf.signature import cache_argument

__all__ = ["ENCODED_IMAGE_INPUTS", "IMAGE_INPUTS", "IMAGE_INPUT_ALIASES", "AudioEncoder", "FeatureMerge",
           "HeardAudioEncoder", "ImageEncoder", "TokenEmbedding", "WideDecoder", "as_image_inputs", "audio_features",
           "image_features", "image_rows", "images_encoded"]


def image_features(model: torch.nn.Module) -> Any:
    """The model's ``get_image_features``, or its base model's where the model for generation lacks one
    (DeepSeek-VL); a video model's ``get_video_features`` (``families.VIDEOS_AS_IMAGES``)."""
    if model.config.model_type in VIDEOS_AS_IMAGES:  # a video's frames, read as images
        return model.get_video_features
    method = getattr(model, "get_image_features", None)
    if method is None:
        method = getattr(getattr(model, "model", None), "get_image_features", None)
    if method is None:
        raise InvalidInputError(f"{type(model).__name__} has no get_image_features to make its image rows",
                                fix="export its language model for text-generation, or the model with "
                                    "onnxport.export")
    return method


# The main inputs of an encoder-decoder whose encoder reads the images themselves: pixels (a VisionEncoderDecoder's,
# PP-FormulaNet's), or patches flattened with their row and column (Pix2Struct's, with their attention_mask).
ENCODED_IMAGE_INPUTS = ("pixel_values", "flattened_patches")


def images_encoded(model: Any, config: Any) -> bool:
    """Whether ``model`` (a model or its class) reads its images as its encoder's input: an encoder-decoder whose
    main input is an image's (TrOCR's and Donut's VisionEncoderDecoder, Pix2Struct, PP-FormulaNet), or one whose text
    decoder cross-attends its vision model's states as such a decoder does (BLIP's captioner). No prompt holds
    image tokens there: the encoder's states are the image's rows, which the decoder reads through cross-attention,
    and the folder is a seq2seq one (``onnxport.hf.seq2seq``), the image inputs its encoder's."""
    from onnxport.hf.seq2seq import VISION_TEXT_DECODERS

    if config.model_type in VISION_TEXT_DECODERS:  # BLIP's captioner: a vision model, a text decoder on its states
        return True
    return bool(getattr(config, "is_encoder_decoder", False)) and \
        getattr(model, "main_input_name", None) in ENCODED_IMAGE_INPUTS


def image_rows(pieces: Any) -> torch.Tensor:
    """Per-image features (a tensor of rows, a batch of them, or a list of either) as one ``[rows, width]``."""
    if isinstance(pieces, (list, tuple)):
        pieces = torch.cat([p.reshape(-1, p.shape[-1]) for p in pieces])
    return pieces.reshape(-1, pieces.shape[-1])


class ImageEncoder(torch.nn.Module):
    """The processor's image inputs to the rows of image features, ``[rows, width]`` (see the module)."""

    def __init__(self, model: torch.nn.Module, family: Family | None = None, batched: bool = False,
                 per_layer_apart: bool = False) -> None:
        super().__init__()
        self.model = model
        self.family = family
        self.batched = batched  # the rows per image, [images, rows, width], where the features come so
        self.per_layer = family.per_layer if family is not None and not per_layer_apart else 0

    def forward(self, pixel_values: torch.Tensor, image_grid_thw: torch.Tensor | None = None,
                pixel_attention_mask: torch.Tensor | None = None, image_sizes: torch.Tensor | None = None,
                spatial_shapes: torch.Tensor | None = None, image_attention_mask: torch.Tensor | None = None,
                image_position_ids: torch.Tensor | None = None, pixel_mask: torch.Tensor | None = None,
                pixel_values_local: torch.Tensor | None = None, num_local_patches: torch.Tensor | None = None,
                image_grid_hw: torch.Tensor | None = None, image_grids: torch.Tensor | None = None,
                patches_grid: torch.Tensor | None = None, image_token_pooling: torch.Tensor | None = None,
                batch_num_images: torch.Tensor | None = None, image_merge_sizes: torch.Tensor | None = None,
                qformer_input_ids: torch.Tensor | None = None, qformer_attention_mask: torch.Tensor | None = None,
                target_sizes: torch.Tensor | None = None, high_res_pixel_values: torch.Tensor | None = None
                ) -> torch.Tensor:
        given = {name: value for name, value in locals().items() if name in IMAGE_INPUTS[1:] and value is not None}
        if self.family is not None and self.family.per_image:
            return _one_image_rows(self.model, pixel_values)
        out = image_features(self.model)(pixel_values=pixel_values, return_dict=True, **given)
        pieces = getattr(out, "pooler_output", out)
        if self.family is not None and self.family.projector:  # projected after the call (Family.projector)
            base = getattr(self.model, "model", self.model)
            pieces = getattr(base, self.family.projector)(image_rows(out.last_hidden_state))
        rows = image_rows(pieces)
        if self.family is not None and self.family.rows_added:  # the sum the forward makes (Family.rows_added)
            token = torch.full((1,), self.family.image_token, dtype=torch.int64, device=rows.device)
            rows = rows + self.model.get_input_embeddings()(token).to(rows.dtype)
        per_image = pieces.shape[:2] if self.batched and isinstance(pieces, torch.Tensor) and pieces.dim() == 3 \
            else None
        if self.family is not None:
            rows = self._columns(out, rows)
        return rows if per_image is None else rows.reshape(*per_image, rows.shape[-1])

    def _columns(self, out: Any, rows: torch.Tensor) -> torch.Tensor:
        """``rows`` with the family's columns after them (see the module)."""
        sets = out.deepstack_features[:self.family.deepstack] if self.family.deepstack else ()
        return _with_columns(self.model, self.family, rows, [image_rows(s) for s in sets], self.per_layer, True)


def _with_columns(model: torch.nn.Module, family: Family, rows: torch.Tensor, sets: list[torch.Tensor],
                  per_layer: int, image: bool) -> torch.Tensor:
    """Rows of features with the family's columns after them, as a consumer copies them over a token's embedding
    (see the module): the deepstack ``sets`` (zeros where none are given), the per-layer embeddings of the pad token
    the row's token stands in for (where ``per_layer``), and the image flag (1 for an ``image`` row, else 0)."""
    width = family.hidden * family.deepstack
    columns = [rows, *(s.to(rows.dtype) for s in sets)] if sets else [rows, rows.new_zeros(rows.shape[0], width)]
    if per_layer:
        pad = torch.full((1, 1), _pad_id(model), dtype=torch.int64, device=rows.device)
        padding = per_layer_model(model).get_per_layer_inputs(pad).reshape(1, -1)
        columns.append(padding.to(rows.dtype).expand(rows.shape[0], -1))
    if family.image_flag:
        columns.append(rows.new_full((rows.shape[0], 1), int(image)))
    columns = [c for c in columns if c.shape[-1]]
    return torch.cat(columns, dim=-1) if len(columns) > 1 else rows


def _one_image_rows(model: torch.nn.Module, pixel_values: torch.Tensor) -> torch.Tensor:
    """The rows of one image of its own size (``Family.per_image``), the image's size told as the size of its
    tensor, where the processor would give it as the values of ``image_sizes``: to ``get_image_features`` as a
    list (LightOnOCR), or, for a LLaVA-style model whose ``get_image_features`` makes a tensor of the sizes
    (Mistral 3), to its vision tower and projector, with the hidden states of its ``vision_feature_layer``."""
    sizes = [(pixel_values.shape[-2], pixel_values.shape[-1])]
    inner = getattr(model, "model", model)
    if not (hasattr(inner, "vision_tower") and hasattr(inner, "multi_modal_projector")):
        out = model.get_image_features(pixel_values=pixel_values, image_sizes=sizes, return_dict=True)
        return image_rows(getattr(out, "pooler_output", out))
    layers = model.config.vision_feature_layer
    states = inner.vision_tower(pixel_values, output_hidden_states=True, return_dict=True, image_sizes=sizes)
    chosen = [states.hidden_states[i] for i in ([layers] if isinstance(layers, int) else layers)]
    return image_rows(inner.multi_modal_projector(torch.cat(chosen, dim=-1).squeeze(0), sizes))


def audio_features(model: torch.nn.Module) -> Any:
    """The model's ``get_audio_features`` (its base model's where the model for generation lacks one, Gemma 4's),
    or None where it has none or no audio tower to run it (a Gemma 4 saved without its ``audio_config``; a model that
    hears alone, ``families.AUDIO_ONLY``, always has one)."""
    if model.config.model_type not in AUDIO_ONLY and _audio_tower(model) is None:
        return None
    return getattr(model, "get_audio_features", None) or getattr(getattr(model, "model", model),
                                                                 "get_audio_features", None)


def _audio_tower(model: torch.nn.Module) -> Any:
    return getattr(getattr(model, "model", model), "audio_tower", None) or getattr(model, "audio_tower", None)


class AudioEncoder(torch.nn.Module):
    """The feature extractor's ``input_features`` (``[batch, frames, mel]``) and ``input_features_mask`` (``[batch,
    frames]``, true on a frame of the clip) to the rows of audio features its audio tokens take, every clip's one
    after the other, ``[rows, width]``: ``get_audio_features``' ``pooler_output`` where its ``attention_mask`` holds,
    as the forward keeps them, with the family's columns after them as an image row has them (zeros for deepstack
    sets, the pad token's per-layer embeddings, 0 for the image flag: an audio token is no image token).

    The frames are first padded, masked out, to a multiple of the tower's stride in time (its ``Conv2d`` layers'
    strides: Gemma 4's two of 2): the same rows, whose count torch.export then follows as one size where the
    tower's convolutions and its slicing of the mask (``mask[:, ::2]``) would make two it cannot prove equal.

    A model that hears alone has :class:`HeardAudioEncoder` (:meth:`of`)."""

    def __init__(self, model: torch.nn.Module, family: Family, per_layer_apart: bool = False) -> None:
        super().__init__()
        self.model = model
        self.family = family
        self.per_layer = family.per_layer if not per_layer_apart else 0
        tower = _audio_tower(model)
        self.stride = math.prod(m.stride[0] for m in (tower.modules() if tower is not None else ())
                                if isinstance(m, torch.nn.Conv2d))

    @staticmethod
    def of(model: torch.nn.Module, family: Family, per_layer_apart: bool = False) -> torch.nn.Module:
        """The audio encoder of ``model``: :class:`HeardAudioEncoder` for one that hears alone, else this class."""
        if family.audio_only:
            return HeardAudioEncoder(model)
        return AudioEncoder(model, family, per_layer_apart)

    def forward(self, input_features: torch.Tensor, input_features_mask: torch.Tensor) -> torch.Tensor:
        frames = input_features.shape[1]
        extra = (frames + self.stride - 1) // self.stride * self.stride - frames
        input_features = torch.nn.functional.pad(input_features, (0, 0, 0, extra))
        input_features_mask = torch.nn.functional.pad(input_features_mask, (0, extra))
        out = audio_features(self.model)(input_features, input_features_mask, return_dict=True)
        rows = out.pooler_output[out.attention_mask.to(torch.bool)]
        return _with_columns(self.model, self.family, rows, [], self.per_layer, False)


class HeardAudioEncoder(torch.nn.Module):
    """The audio encoder of a model that hears alone (``Family.audio_only``: Voxtral, Granite Speech):
    ``input_features`` alone, as its forward takes them (Voxtral's 30 s windows, ``[windows, mel, 3000]``; Granite
    Speech's stacked frames of one clip, ``[1, frames, 2 * mel]``), to every row of ``get_audio_features``'
    ``pooler_output``, ``[rows, hidden]``; Granite Speech's conformer taken for any count of frames
    (:func:`.granite_speech.whole_blocks`)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_features: torch.Tensor) -> torch.Tensor:
        with whole_blocks(self.model):
            out = audio_features(self.model)(input_features, return_dict=True)
        return image_rows(out.pooler_output)


# The processor outputs an image encoder takes (the arguments of its forward): the tensors transformers' models'
# get_image_features take.
IMAGE_INPUTS = ("pixel_values", "image_grid_thw", "pixel_attention_mask", "image_sizes", "spatial_shapes",
                "image_attention_mask", "image_position_ids", "pixel_mask", "pixel_values_local", "num_local_patches",
                "image_grid_hw", "image_grids", "patches_grid", "image_token_pooling", "batch_num_images",
                "image_merge_sizes", "qformer_input_ids", "qformer_attention_mask", "target_sizes",
                "high_res_pixel_values")
# Older names a processor may still give them by (Video-LLaVA's image processor: pixel_values_images).
IMAGE_INPUT_ALIASES = {"pixel_values_images": "pixel_values"}


def as_image_inputs(given: dict[str, Any]) -> dict[str, Any]:
    """A processor's outputs with the older names of :data:`IMAGE_INPUTS` (``IMAGE_INPUT_ALIASES``) renamed."""
    renamed = dict(given)
    for old, new in IMAGE_INPUT_ALIASES.items():
        if old in renamed and new not in renamed:
            renamed[new] = renamed.pop(old)
    return renamed


class TokenEmbedding(torch.nn.Module):
    """Token ids to their embeddings, ``[batch, length, family.width]``: zeros in the deepstack and flag columns,
    the per-layer embeddings in theirs (see the module); with ``per_layer_apart``, those apart, a second output
    ``[batch, length, layers, size]``, as transformers.js's Gemma 3n and Gemma 4 take them."""

    def __init__(self, model: torch.nn.Module, family: Family, per_layer_apart: bool = False) -> None:
        super().__init__()
        self.embed = model.get_input_embeddings()
        self.family = family
        self.per_layer = per_layer_model(model) if family.per_layer else None
        self.pad = _pad_id(model) if family.per_layer else 0
        self.apart = per_layer_apart

    def forward(self, input_ids: torch.Tensor) -> Any:
        family = self.family
        image = input_ids == family.image_token
        for token in family.as_image:  # the forward's other modalities' tokens, embedded as an image token
            image = image | (input_ids == token)
        looked_up = input_ids if family.image_token_as is None else torch.where(image, family.image_token_as, input_ids)
        embeds = self.embed(looked_up)
        columns = [embeds, embeds.new_zeros(*embeds.shape[:-1], family.hidden * family.deepstack)]
        per_layer = None
        if self.per_layer is not None:  # an image (audio) token's are the pad token's, as transformers looks them up
            per_layer = self.per_layer.get_per_layer_inputs(torch.where(image, self.pad, input_ids)).to(embeds.dtype)
            if not self.apart:
                columns.append(per_layer.reshape(*embeds.shape[:-1], -1))
        columns.append(embeds.new_zeros(*embeds.shape[:-1], int(family.image_flag)))
        columns = [c for c in columns if c.shape[-1]]
        embeds = torch.cat(columns, dim=-1) if len(columns) > 1 else embeds
        return (embeds, per_layer) if self.apart and per_layer is not None else embeds


class FeatureMerge(torch.nn.Module):
    """Token embeddings with the image rows in place of the image tokens, in order: ``input_ids`` and
    ``image_features`` (``[rows, width]`` or ``[images, rows, width]``; none at all, ``[0, width]``, for a step
    without images) to ``inputs_embeds``; an image token past the rows keeps its embedding."""

    def __init__(self, model: torch.nn.Module, family: Family) -> None:
        super().__init__()
        self.tokens = TokenEmbedding(model, family)

    def forward(self, input_ids: torch.Tensor, image_features: torch.Tensor) -> torch.Tensor:
        embeds = self.tokens(input_ids)
        image_features = image_features.reshape(-1, image_features.shape[-1])  # rows per image, where they come so
        flat = (input_ids == self.tokens.family.image_token).reshape(-1)
        rows = torch.cumsum(flat.to(torch.int64), 0) - 1  # the k-th image token takes the k-th row
        # an image token past the rows (one generated in a later step, with no rows) keeps its embedding
        flat = flat & (rows < image_features.shape[0])
        # one row of zeros after the features: what the other tokens gather, so that no features (decode) is fine
        padded = torch.cat([image_features.to(embeds.dtype), embeds.new_zeros(1, embeds.shape[-1])])
        rows = torch.where(flat, rows, image_features.shape[0])
        picked = padded[rows].reshape(embeds.shape)
        return torch.where(flat.reshape(input_ids.shape).unsqueeze(-1), picked, embeds)


class WideDecoder(torch.nn.Module):
    """The model on ``inputs_embeds`` of ``family.width`` columns: its hidden size, then the deepstack sets, each
    added to the hidden states after its layer, then the per-layer embeddings (or ``per_layer_inputs`` apart),
    then the image flag, made the ``token_type_ids`` of the new tokens (see the module); with
    ``family.prefix_both_ways``, the first step's tokens attending both ways. Takes and returns what the model does
    otherwise; its cache by either of the names transformers gives it (``cache`` from 5.24)."""

    def __init__(self, model: torch.nn.Module, family: Family) -> None:
        super().__init__()
        self.model = model
        self.family = family
        self.language = next((m for m in model.modules() if hasattr(type(m), "_deepstack_process")), None)
        self.layers = getattr(per_layer_model(model), "config", None)

    def forward(self, inputs_embeds: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                past_key_values: Any = None, cache: Any = None, per_layer_inputs: torch.Tensor | None = None) -> Any:
        family = self.family
        kwargs = {"attention_mask": attention_mask, "position_ids": position_ids,
                  cache_argument(self.model): cache if cache is not None else past_key_values}
        start = family.hidden * (1 + family.deepstack)
        embeds, *sets = inputs_embeds[..., :start].split(family.hidden, dim=-1)
        if family.per_layer:  # the per-layer embeddings: their columns, or apart
            if per_layer_inputs is None:
                per_layer_inputs = inputs_embeds[..., start:start + family.per_layer].reshape(
                    *embeds.shape[:-1], self.layers.num_hidden_layers, -1)
            kwargs["per_layer_inputs"] = per_layer_inputs
        blocks = None
        if family.image_flag:
            flag = inputs_embeds[..., -1].round().to(torch.int64)
            past = attention_mask.shape[1] - flag.shape[1]
            kwargs[family.flag_argument] = torch.cat([flag.new_zeros(flag.shape[0], past), flag], dim=1)
            if family.flag_blocks:  # the image tokens one block, whatever the forward decides from its cache
                blocks = torch.where(kwargs[family.flag_argument] == 1, 0, -1)
        if family.prefix_both_ways:  # the whole sequence one block while the past is empty, else none
            empty = attention_mask.new_ones(attention_mask.shape)[:, embeds.shape[1]:].sum(-1, keepdim=True) == 0
            blocks = torch.where(empty, 0, -1).expand(attention_mask.shape)  # (no guard on the past's size)
        with contextlib.ExitStack() as stack:
            if sets:
                mask = torch.ones(embeds.shape[:-1], dtype=torch.bool, device=embeds.device)
                stack.enter_context(_handed_deepstack(self.language, mask, sets))
            if blocks is not None:
                stack.enter_context(_blocked_masks(self.model, blocks))
            return self.model(inputs_embeds=embeds, **kwargs)


_MASKS = ("create_causal_mask", "create_sliding_window_causal_mask")


def _pad_id(model: torch.nn.Module) -> int:
    """The pad token an image token stands in for in the per-layer embeddings (transformers' rule)."""
    text = model.config.get_text_config()
    return int(text.pad_token_id if text.pad_token_id is not None else 0)


@contextlib.contextmanager
def _blocked_masks(model: torch.nn.Module, blocks: torch.Tensor) -> Iterator[None]:
    """The masks ``model``'s module makes let the tokens of a block (``blocks``: one id per token of the sequence,
    -1 for none) attend to each other both ways, whatever its forward decides: PaliGemma's prefix and Molmo 2's
    image tokens, which their forwards mark from ``token_type_ids`` (``mm_token_type_ids``) while their cache is
    empty only, a Python decision on the cache that a graph for every step cannot hold. Here the decision is a
    tensor (``WideDecoder``: the whole sequence while the past is empty, else no block; the image tokens, which
    only a prompt holds)."""
    import sys

    module = sys.modules[type(model.model).__module__ if hasattr(model, "model") else type(model).__module__]
    originals = {name: vars(module)[name] for name in _MASKS if name in vars(module)}

    def with_blocks(build: Any) -> Any:
        def made(*args: Any, **kwargs: Any) -> Any:
            return build(*args, **{**kwargs, "block_sequence_ids": blocks})
        return made

    for name, build in originals.items():
        setattr(module, name, with_blocks(build))
    try:
        yield
    finally:
        for name, build in originals.items():
            setattr(module, name, build)


@contextlib.contextmanager
def _handed_deepstack(language: torch.nn.Module, mask: torch.Tensor, sets: list[torch.Tensor]) -> Iterator[None]:
    """``language`` (the text model) called with the deepstack sets, as the model's forward calls it when it has
    image features, and adding each to all tokens' hidden states (the sets hold zeros for text tokens) rather
    than to those a boolean mask picks, whose count torch.export cannot follow."""
    forward = language.forward

    def called(*args: Any, **kwargs: Any) -> Any:
        return forward(*args, **{**kwargs, "visual_pos_masks": mask, "deepstack_visual_embeds": sets})

    def add(hidden_states: torch.Tensor, visual_pos_masks: torch.Tensor, visual_embeds: torch.Tensor) -> torch.Tensor:
        return hidden_states + visual_embeds.to(hidden_states.dtype)

    language.forward, language._deepstack_process = called, add
    try:
        yield
    finally:
        del language.forward, language._deepstack_process
