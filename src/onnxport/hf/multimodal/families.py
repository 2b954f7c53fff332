"""What differs between vision-language families, small and named: read from the model where it tells, and
otherwise a fact of its type, kept here.

- ``image_token``: the id standing for one row of image features in a prompt (``image_token_id``, or the older
  ``image_token_index``), and ``image_token_as``: the id whose embedding the model looks up for it (None: its own;
  a token generated as an image token keeps that embedding, as transformers gives it);
- ``as_image``: the ids of the tokens of its other modalities that its forward embeds as it embeds an image token
  (Gemma 4's video and audio tokens: the pad token's embeddings and per-layer embeddings), whose rows a consumer
  writes over them as it writes an image's;
- ``positions``: ``"rope-index"`` for a model whose decoder takes three positions per token, made by its own
  ``get_rope_index`` (:mod:`.positions`), else ``"counted"`` (one per token, over the attention mask);
- ``deepstack``: how many sets of deepstack rows its image features carry (Qwen3-VL's vision tower gives them,
  and its decoder adds them after its first layers: :mod:`.components`);
- ``image_flag``: whether its decoder needs to know which tokens are image tokens (Gemma 3's image tokens attend
  to each other both ways, from ``token_type_ids``): a last column of the decoder's ``inputs_embeds``, 1 in an
  image row and 0 in a token's embedding, from which the decoder makes ``token_type_ids`` (0 for the past: a
  block of image tokens is always among the new tokens of one step, the prompt);
- ``prefix_both_ways``: whether a prompt's tokens attend to each other both ways in the first step (PaliGemma's
  prefix), which the decoder tells from its past being empty, with no input of its own;
- ``encoder_decoder``: whether its language model is an encoder-decoder (Florence-2's BART): the merged prompt
  goes through the encoder, and the decoder generates from the encoder's states (``onnxport.hf.seq2seq``);
- ``per_layer``: the width of the per-layer embeddings its decoder takes beside the token embeddings (Gemma 3n's
  and Gemma 4's: ``get_per_layer_inputs`` of the token ids, an image token's those of the pad token), carried
  as more columns, or apart where a consumer takes them so (``Layout.per_layer_apart``);
- ``projector``: the module its forward projects ``get_image_features``' rows with, after the call (Llama 4's
  ``multi_modal_projector``, applied to the vision model's ``last_hidden_state``), or None where
  ``get_image_features`` gives the projected rows itself;
- ``per_image``: whether its image encoder takes one image at a time, of any height and width (Mistral 3's
  Pixtral tower; onnxruntime-genai runs it once per image), rather than a batch of them as the processor gives;
- ``rows_added``: whether its forward adds the image rows to the image tokens' embeddings (Molmo 2's residual)
  rather than putting them in their place: its image encoder's rows then hold that embedding already, so that
  every consumer's copy of a row over an image token gives the sum;
- ``flag_blocks``: whether its forward reads the image flag only while its cache is empty (Molmo 2's), so that the
  decoder makes the block of image tokens from the flag itself;
- ``audio_only``: whether it hears and does not see (:data:`AUDIO_ONLY`: Voxtral, Granite Speech, for
  ``audio-text-to-text``): its audio token is then what ``image_token`` names, the token whose embedding its
  audio encoder's rows take, and it has no image encoder.

The decoder's ``inputs_embeds`` are then ``hidden * (1 + deepstack) + per_layer + image_flag`` wide
(``width``), in that order: every consumer copies an image row over an image token's embedding whatever its
width, so each runs these models with no knowledge of them. The image flag becomes the decoder's
``flag_argument``: ``token_type_ids`` for Gemma 3, ``mm_token_type_ids`` for Molmo 2 and for a Gemma 4 whose
vision tokens attend both ways (``use_bidirectional_attention == "vision"``).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch

from onnxport.errors import InvalidInputError
from onnxport.hf.multimodal.positions import rope_index_of

__all__ = [
    "AS_IMAGE",
    "AUDIO_ONLY",
    "BIDIRECTIONAL_IMAGES",
    "FLAG_BLOCKS",
    "IMAGE_TOKEN_AS",
    "PER_IMAGE",
    "PREFIX_BOTH_WAYS",
    "PROJECTED_AFTER",
    "ROWS_ADDED",
    "VIDEOS_AS_IMAGES",
    "Family",
    "image_token_id",
    "per_layer_model",
]

# The types whose image tokens attend to each other both ways in the first step, and the argument of their forward
# that marks them (Gemma 3's token_type_ids; Molmo 2's mm_token_type_ids, read while it fills its cache).
BIDIRECTIONAL_IMAGES = {"gemma3": "token_type_ids", "molmo2": "mm_token_type_ids"}
# The types whose forward adds the image rows to the image tokens' embeddings (Molmo 2's masked_scatter of their
# sum), not putting them in their place.
ROWS_ADDED = ("molmo2",)
# The types whose forward reads the image flag only while its cache is empty (Molmo 2's block of image tokens, a
# Python decision on the cache): the decoder makes that block from the flag itself, at every step.
FLAG_BLOCKS = ("molmo2",)
# The types whose prompt (its image tokens and text) attends both ways in the first step, and generated tokens
# causally (PaliGemma's prefix: token_type_ids 0 for the prompt, read on the first step only).
PREFIX_BOTH_WAYS = ("paligemma",)
# The types whose forward embeds an image token's id as another token's, whatever the step: the pad token's
# (Gemma 4's multimodal tokens), or 0's. Elsewhere an image token's own embedding is looked up (a generated image
# token's in a later step), or 0's where its id lies past the vocabulary (Gemma 3, PaliGemma).
IMAGE_TOKEN_AS = {"gemma4": "pad", "gemma4_unified": "pad", "kimi_k25": 0, "muse_glimmer": 0, "muse_spark": 0,
                  "granite_speech": 0}
# The types that read audio and text and no images (audio-text-to-text): their audio tokens take the rows of their
# audio encoder as an image's tokens take an image encoder's.
AUDIO_ONLY = ("voxtral", "granite_speech")
# The types whose forward embeds its other modalities' tokens as it embeds an image token, by the config's names of
# their ids (Gemma 4's get_placeholder_mask: its video and audio tokens, the pad token's embeddings too).
AS_IMAGE = {"gemma4": ("video_token_id", "audio_token_id")}
# The types whose vision tower reads each image at its own size, one at a time (Mistral 3's and LightOnOCR's
# Pixtral: the patches of an image cut to its size by values of image_sizes, which a batch of images cannot take
# symbolically).
PER_IMAGE = ("mistral3", "lighton_ocr", "mistral_large4")
# The types whose visual input is a video alone, read as images are (InstructBLIP-Video: get_video_features of
# pixels [videos, frames, channels, height, width], each frame's Q-Former rows at the prompt's video tokens).
VIDEOS_AS_IMAGES = ("instructblipvideo",)
# The types whose forward projects the rows get_image_features gives (its last_hidden_state) with a module of its
# own, after the call: the module's attribute name on the model's base model.
PROJECTED_AFTER = {"llama4": "multi_modal_projector"}


def image_token_id(config: Any) -> int:
    """The id of the token standing for one row of image features in a prompt (``image_token_id``, or the
    older ``image_token_index``; a :data:`VIDEOS_AS_IMAGES` type's video token; an :data:`AUDIO_ONLY` type's
    audio token, ``audio_token_id``)."""
    videos = ("video_token_id", "video_token_index") if config.model_type in VIDEOS_AS_IMAGES else ()
    names = ("audio_token_id", "audio_token_index") if config.model_type in AUDIO_ONLY else \
        ("image_token_id", "image_token_index", *videos)
    for name in names:
        value = getattr(config, name, None)
        if isinstance(value, int):
            return value
    raise InvalidInputError(f"config.json of this {config.model_type} model names no {names[0]}",
                            fix=f"add the id of its placeholder token as {names[0]}")


@dataclass(frozen=True)
class Family:
    """What a vision-language model's split needs to know besides its components (see the module)."""

    model_type: str
    image_token: int
    hidden: int
    positions: str = "counted"
    deepstack: int = 0
    image_flag: bool = False
    per_image: bool = False
    prefix_both_ways: bool = False
    encoder_decoder: bool = False
    per_layer: int = 0
    flag_argument: str = "token_type_ids"
    image_token_as: int | None = None
    projector: str | None = None
    rows_added: bool = False
    flag_blocks: bool = False
    as_image: tuple[int, ...] = ()

    @property
    def audio_only(self) -> bool:
        """Whether the model hears and does not see (:data:`AUDIO_ONLY`): no image encoder."""
        return self.model_type in AUDIO_ONLY

    @property
    def plain(self) -> bool:
        """Whether the decoder is the model as it is (no columns past the hidden size, no mask of its own)."""
        return self.width == self.hidden and not self.prefix_both_ways

    @property
    def width(self) -> int:
        """The width of the decoder's ``inputs_embeds`` and of the image rows."""
        return self.hidden * (1 + self.deepstack) + self.per_layer + int(self.image_flag)

    @classmethod
    def of(cls, model: torch.nn.Module, config: Any, deepstack: int = 0) -> Family:
        """The family of ``model`` (``deepstack``: the count of deepstack sets its image features hold)."""
        kind = config.model_type
        text = config.get_text_config()
        taken = inspect.signature(model.forward).parameters
        argument = BIDIRECTIONAL_IMAGES.get(kind, "token_type_ids")
        flag = kind in BIDIRECTIONAL_IMAGES and argument in taken
        if getattr(text, "use_bidirectional_attention", None) == "vision" and "mm_token_type_ids" in taken:
            flag, argument = True, "mm_token_type_ids"
        per_layer = text.num_hidden_layers * (getattr(text, "hidden_size_per_layer_input", 0) or 0) \
            if per_layer_model(model) is not None else 0
        image = image_token_id(config)
        rule = IMAGE_TOKEN_AS.get(kind)
        vocab = model.get_input_embeddings().num_embeddings
        taken_as = (getattr(text, "pad_token_id", None) or 0) if rule == "pad" else rule if rule is not None \
            else 0 if image >= vocab else None
        return cls(kind, image, text.hidden_size,
                   "rope-index" if rope_index_of(model) is not None else "counted", deepstack, flag,
                   kind in PER_IMAGE, kind in PREFIX_BOTH_WAYS, bool(getattr(config, "is_encoder_decoder", False)),
                   per_layer, argument, taken_as, PROJECTED_AFTER.get(kind), kind in ROWS_ADDED,
                   flag and kind in FLAG_BLOCKS,
                   tuple(t for name in AS_IMAGE.get(kind, ()) if isinstance(t := getattr(config, name, None), int)))


def per_layer_model(model: torch.nn.Module) -> Any:
    """The text model of ``model`` that makes per-layer embeddings of token ids (``get_per_layer_inputs``), or
    None."""
    return next((m for m in model.modules() if callable(getattr(m, "get_per_layer_inputs", None))
                 and getattr(m.config, "hidden_size_per_layer_input", None)), None)
