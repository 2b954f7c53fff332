"""Each consumer's contract for a vision-language model's folder, as data: which piece each of its files holds,
what it names them and their inputs, and which model types it runs.

``ONNXRUNTIME``, the folder onnxport's runner (``generate_vlm``) runs for any type, and onnxruntime-genai for those
of ``onnxport.hf.multimodal.genai``'s types, with its ``genai_config.json``:

- ``vision.onnx`` (the image encoder), ``embedding.onnx`` (token ids and image rows to the decoder's embeddings:
  the merge) and ``model.onnx`` (the decoder with its KV cache, named as text-generation names it);
- for an encoder-decoder language model (Florence-2), ``encoder_model.onnx``, ``decoder_model.onnx`` and
  ``decoder_with_past_model.onnx`` in place of ``model.onnx``, as ``onnxport.hf.seq2seq`` writes them; for an
  encoder-decoder whose encoder reads the images themselves (a VisionEncoderDecoder, Pix2Struct), those three
  alone, the encoder taking the processor's image inputs;
- Gemma 3's image rows come per image, ``[images, rows, width]``: onnxruntime-genai counts a Gemma 3's image tokens
  per image only where the image encoder's output has an image dim (``src/models/multi_modal_features.cpp``).

``TRANSFORMERS_JS``, the folder transformers.js 4.3 loads with ``AutoModelForImageTextToText``, read from its
source:

- ``onnx/vision_encoder``, ``embed_tokens`` (token ids to embeddings: transformers.js writes the image rows over
  the image tokens itself) and ``decoder_model_merged``, each in every dtype (``models/session_config.js``,
  ``MODEL_TYPES.ImageTextToText``); its types are ``models/registry.js``'s
  ``MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES``;
- an encoder-decoder adds ``encoder_model`` (``config.is_encoder_decoder``), its ``decoder_model_merged`` the
  two decoders in one (``onnxport.hf.transformers_js.merge_decoders``); Florence-2's image rows come per image,
  ``[images, rows, width]``, which it puts before the prompt's embeddings itself, and its decoder takes the new
  tokens' embeddings (``embed_tokens``' output), not their ids (``models/florence2/modeling_florence2.js``);
- Gemma 3n's and Gemma 4's ``embed_tokens`` give ``per_layer_inputs`` beside ``inputs_embeds``, which their
  decoder takes, and Gemma 4's image encoder takes its positions as ``pixel_position_ids``
  (``models/gemma3n/modeling_gemma3n.js``, ``models/gemma4/modeling_gemma4.js``);
- it loads a Gemma 4 with ``audio_encoder`` too (``MODEL_TYPES.ImageAudioTextToText``, ``audio_files``), which
  takes ``input_features`` (float32 ``[batch, frames, mel]``) and ``input_features_mask`` (bool, as its Gemma 4
  feature extractor gives it: ``models/gemma4/feature_extraction_gemma4.js``) and gives ``audio_features``, one
  row per audio token of the prompt, which it writes over their embeddings as it writes an image's
  (``default_merge_input_ids_with_audio_features`` in ``models/modeling_utils.js``): a Gemma 4 saved without its
  audio tower is refused (:func:`transformers_js_refusal`);
- for ``audio-text-to-text`` (``AutoModelForAudioTextToText``: ``MODEL_TYPES.AudioTextToText``, its types
  :data:`TRANSFORMERS_JS_AUDIO_TYPES`) it loads ``audio_encoder``, ``embed_tokens`` and ``decoder_model_merged``
  and no image encoder (``Layout.files_for``); its ``audio_text_to_text_forward`` hands the audio encoder what the
  model's processor gave that the session takes (its ``inputNames``), and writes each row of ``audio_features``
  over an audio token's embedding (``UltravoxModel._merge_input_ids_with_audio_features``: the config's
  ``audio_token_id``, or ``audio_token_index``, Granite Speech's). Its Voxtral processor gives each 30 s window's
  Whisper features as ``audio_values`` (``[windows, 128, 3000]``: ``models/voxtral/processing_voxtral.js``), its
  Granite Speech processor ``input_features`` (``[1, frames, 2 * mel]``) and an ``input_features_mask`` that its
  ``forward_params`` drop before the forward (``models/granite_speech/modeling_granite_speech.js``): the encoder
  takes the features alone;
- Qwen2-VL's image encoder takes the grid as ``grid_thw`` (``image_grid_thw_name`` in
  ``models/qwen2_vl/modeling_qwen2_vl.js``), the later Qwen VL models' as ``image_grid_thw``; its Idefics3 image
  processor gives ``pixel_attention_mask`` as booleans (``models/idefics3/image_processing_idefics3.js``), where
  transformers' gives integers, and its LFM2-VL image processor as int64
  (``models/lfm2_vl/image_processing_lfm2_vl.js``), which first resizes each image to ``size`` where
  ``do_resize`` is set, where transformers' sizes it by its tiles and token counts alone: the folder says
  ``do_resize`` false;
- its ``AutoProcessor`` builds a model's processor only where ``preprocessor_config.json`` names its
  ``processor_class`` (``models/auto/processing_auto.js``); it reads the cache's layers and heads of a
  ``qwen2_vl`` model from the top level of ``config.json``, as Qwen2-VL's checkpoints were saved before
  transformers 5 nested them in ``text_config`` (``getNormalizedConfig`` in ``configs.js``); its processors read
  the image processor's settings from ``preprocessor_config.json`` (transformers 5 nests them in
  ``processor_config.json``) and special tokens from the top level of ``tokenizer_config.json``:
  :func:`transformers_js_settings` gives what the folder's files get for that.

``tests/test_transformers_js_vlm.py`` checks these tables against the installed transformers.js.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from onnxport.hf.multimodal.families import AUDIO_ONLY

__all__ = [
    "ONNXRUNTIME",
    "PIECES",
    "TRANSFORMERS_JS",
    "TRANSFORMERS_JS_AUDIO_TYPES",
    "TRANSFORMERS_JS_DECODER_CACHES",
    "TRANSFORMERS_JS_ENCODED_TYPES",
    "TRANSFORMERS_JS_REFUSED",
    "TRANSFORMERS_JS_TYPES",
    "Layout",
    "transformers_js_refusal",
    "transformers_js_settings",
    "transformers_js_text_only",
]

# The pieces a folder may hold (onnxport.hf.multimodal.components): the image encoder, the token embedding, the
# merge of token embeddings and image rows, the decoder, and the audio encoder (Layout.audio_files).
PIECES = ("vision", "tokens", "merge", "decoder", "audio")


@dataclass(frozen=True)
class Layout:
    """A consumer's files: ``files`` maps each piece it loads to its file's stem (``seq2seq_files`` for a model
    whose language model is an encoder-decoder); ``inputs`` maps a model type to the names the consumer gives
    some of the image encoder's inputs; ``input_types`` gives the type the consumer gives an image encoder's
    input where it is not the type transformers' processor gives (the capture takes it of that type), and
    ``model_input_types`` a model type's where it is not ``input_types``'; ``batched_rows``
    lists the types whose image rows the consumer takes per image, ``[images, rows, width]``, not
    ``[rows, width]``; ``decoder_embeds`` those whose encoder-decoder's decoders it feeds the new tokens'
    embeddings (from the token embedding), not ids; ``per_layer_apart`` those whose per-layer embeddings it takes
    as an output of the token embedding and an input of the decoder of their own (``per_layer_inputs``), not as
    columns; ``audio_files`` maps the types the consumer loads with an audio encoder to its file's stem (a model of
    such a type without an audio tower it cannot run: :meth:`audio_file`; a model that hears alone has it in place
    of the image encoder: :meth:`files_for`)."""

    consumer: str
    files: Mapping[str, str]
    seq2seq_files: Mapping[str, str]
    inputs: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    input_types: Mapping[str, torch.dtype] = field(default_factory=dict)
    batched_rows: tuple[str, ...] = ()
    decoder_embeds: tuple[str, ...] = ()
    per_layer_apart: tuple[str, ...] = ()
    model_input_types: Mapping[str, Mapping[str, torch.dtype]] = field(default_factory=dict)
    audio_files: Mapping[str, str] = field(default_factory=dict)

    def audio_file(self, config: Any) -> str | None:
        """The stem of the audio encoder's file for a model of ``config``, or None where the consumer loads none;
        an ``InvalidInputError`` where it loads one that the model, saved without its audio tower, cannot give."""
        from onnxport.errors import InvalidInputError

        why = self.no_audio_tower(config)
        if why is not None:
            raise InvalidInputError(f"{self.consumer} does not run this {config.model_type} model for "
                                    f"image-text-to-text: {why}",
                                    fix="export the checkpoint saved with its audio tower, or this one for "
                                        "onnxruntime (no target) and run it with generate_vlm")
        return self.audio_files.get(config.model_type)

    def no_audio_tower(self, config: Any) -> str | None:
        """Why the consumer cannot run a model of ``config``: it loads an audio encoder for the type, and the
        checkpoint was saved without its audio tower; else None."""
        stem = self.audio_files.get(config.model_type)
        if stem is None or config.model_type in AUDIO_ONLY or getattr(config, "audio_config", None) is not None:
            return None
        return (f"{self.consumer} 4.3 loads every {config.model_type} with an {stem} session (onnx/{stem}.onnx: "
                "MODEL_TYPES.ImageAudioTextToText in models/session_config.js), which a checkpoint without an audio "
                "tower (no audio_config in its config.json) cannot give")

    def files_for(self, config: Any, encoder_decoder: bool, images_encoded: bool = False) -> dict[str, str]:
        """The pieces and their file stems for a model of ``config``: those of :meth:`files_of`, the audio
        encoder's too where the consumer loads one and the model has it (:meth:`audio_file`), and no image encoder
        for a model that hears alone (``families.AUDIO_ONLY``: its audio encoder's rows take the place of an
        image's)."""
        files = dict(self.files_of(encoder_decoder, images_encoded))
        if config.model_type in AUDIO_ONLY:
            files.pop("vision", None)
        audio = self.audio_files.get(config.model_type)
        if audio is not None and not images_encoded and self.no_audio_tower(config) is None:
            files["audio"] = audio
        return files

    def files_of(self, encoder_decoder: bool, images_encoded: bool = False) -> Mapping[str, str]:
        """The pieces and their file stems for a model whose language model is (or is not) an encoder-decoder;
        ``images_encoded``: one whose encoder reads the images themselves (``components.images_encoded``), whose
        folder holds the encoder and decoders alone."""
        if images_encoded:
            return {piece: stem for piece, stem in self.seq2seq_files.items()
                    if piece not in ("vision", "tokens", "merge")}
        return self.seq2seq_files if encoder_decoder else self.files


ONNXRUNTIME = Layout("onnxruntime", {"vision": "vision", "merge": "embedding", "decoder": "model"},
                     {"vision": "vision", "merge": "embedding", "encoder": "encoder_model", "decoder": "decoder_model",
                      "decoder_with_past": "decoder_with_past_model"}, batched_rows=("gemma3",),
                     audio_files={"voxtral": "audio", "granite_speech": "audio"})
TRANSFORMERS_JS = Layout("transformers.js", {"vision": "vision_encoder", "tokens": "embed_tokens",
                                             "decoder": "decoder_model_merged"},
                         {"vision": "vision_encoder", "tokens": "embed_tokens", "encoder": "encoder_model",
                          "merged": "decoder_model_merged"},
                         {"qwen2_vl": {"image_grid_thw": "grid_thw"},
                          "gemma4": {"image_position_ids": "pixel_position_ids"},
                          "voxtral": {"input_features": "audio_values"}},
                         {"pixel_attention_mask": torch.bool}, ("florence2",), ("florence2",), ("gemma3n", "gemma4"),
                         {"lfm2_vl": {"pixel_attention_mask": torch.int64}},
                         {"gemma4": "audio_encoder", "voxtral": "audio_encoder", "granite_speech": "audio_encoder"})
# transformers.js 4.3's audio-text-to-text types that transformers has and onnxport writes (its
# MODEL_FOR_AUDIO_TEXT_TO_TEXT_MAPPING_NAMES; voxtral_realtime it runs with sessions of its own, ultravox transformers
# does not have): MODEL_TYPES.AudioTextToText, sessions audio_encoder, embed_tokens and decoder_model_merged.
TRANSFORMERS_JS_AUDIO_TYPES = ("granite_speech", "voxtral")
# transformers.js 4.3's image-text-to-text types that transformers has (moondream1 and llava_qwen2 it does not).
TRANSFORMERS_JS_TYPES = ("llava", "llava_onevision", "florence2", "qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe",
                         "qwen3_5", "qwen3_5_moe", "lfm2_vl", "lfm3_vl", "idefics3", "smolvlm", "paligemma", "gemma3",
                         "gemma3n", "gemma4", "mistral3", "lighton_ocr", "glm_ocr")
# transformers.js 4.3's types for the tasks of an encoder-decoder whose encoder reads the image (its
# MODEL_FOR_VISION_2_SEQ_MAPPING_NAMES and MODEL_FOR_DOCUMENT_QUESTION_ANSWERING_MAPPING_NAMES, less idefics3 and
# smolvlm, which read image tokens in a prompt: image-text-to-text), its sessions encoder_model and
# decoder_model_merged.
TRANSFORMERS_JS_ENCODED_TYPES = {"image-to-text": ("vision-encoder-decoder",),
                                 "document-question-answering": ("vision-encoder-decoder",)}
# transformers.js's cache of a VisionEncoderDecoder's decoder, by the decoder's model type (what getNormalizedConfig in
# configs.js gives it): True where it sizes the decoder as an encoder-decoder's (the cross-attention's keys and values
# cached, past_key_values.{i}.decoder.* and .encoder.*), False where it sizes it as a decoder-only model's
# (past_key_values.{i}.key and .value: the decoder recomputes cross-attention at each step). Other decoders (BERT's,
# RoBERTa's) it cannot size a cache for.
TRANSFORMERS_JS_DECODER_CACHES = {"trocr": True, "mbart": True, "bart": True, "marian": True, "gpt2": False}

# The types transformers.js loads with sessions onnxport does not write, and why.
TRANSFORMERS_JS_REFUSED = {
    "llava_onevision": "transformers.js 4.3 runs a LLaVA-OneVision as a LLaVA (models/llava_onevision/"
                       "modeling_llava_onevision.js) on one tile of each image (its plain ImageProcessor), with no "
                       "any-resolution tiles nor newline rows, so its prompts and image rows are not transformers'",
    "gemma3n": "transformers.js 4.3 loads a Gemma 3n with an audio_encoder session too "
               "(MODEL_TYPES.ImageAudioTextToText in models/session_config.js), which onnxport writes for Gemma 4 "
               "alone (Gemma 3n's forward pads its audio rows to audio_soft_tokens_per_image with an embedding of its "
               "own, where Gemma 4's leaves the padding's out)",
    "lighton_ocr": "transformers.js 4.3 has no LightOnOcrProcessor (models/processors.js), so its AutoProcessor gives "
                   "a LightOnOCR folder's image processor alone, with no ids for the prompt",
}



def transformers_js_refusal(config: Any) -> str | None:
    """Why transformers.js cannot run a vision-language model of ``config`` from onnxport's files
    (:data:`TRANSFORMERS_JS_REFUSED`, or a type it loads with an audio encoder saved without its audio tower), or
    None."""
    return TRANSFORMERS_JS_REFUSED.get(config.model_type) or TRANSFORMERS_JS.no_audio_tower(config)


def transformers_js_text_only(config: Any) -> bool:
    """transformers.js loads a checkpoint of ``config`` for text generation through its image-text-to-text sessions
    (``embed_tokens`` and ``decoder_model_merged``, its text-only mode: a ``...ForCausalLM`` class given a config
    whose ``architectures`` name a ``...ForConditionalGeneration`` it knows, ``resolveTypeConfig`` in
    models/modeling_utils.js): a Gemma 3 checkpoint saved with its vision tower, asked for text generation. onnxport
    writes those sessions from the whole model's image-text-to-text export: where that is refused
    (:func:`transformers_js_refusal`), so is the folder."""
    architectures = getattr(config, "architectures", None) or [""]
    return config.model_type in TRANSFORMERS_JS_TYPES and architectures[0].endswith("ForConditionalGeneration")


# The types whose config.json transformers.js reads flat (the text model's sizes at the top level).
_FLAT_CONFIG = ("qwen2_vl",)
_FLAT_KEYS = ("num_hidden_layers", "num_key_value_heads", "num_attention_heads", "hidden_size", "head_dim")
# The types whose transformers.js processor puts num_additional_image_tokens image tokens in a prompt beyond the
# patches (LlavaProcessor, models/llava/processing_llava.js), where transformers' also takes away the class token
# that vision_feature_select_strategy "default" drops: the folder's count is one less, so that both agree.
_COUNTS_CLASS_TOKEN = ("llava",)
# Image processor settings transformers.js reads otherwise than transformers, by type: LFM2-VL's image processor
# sizes each image by its tiles and token counts whatever do_resize and size say, where transformers.js's first
# resizes it to size where do_resize is set (ImageProcessor.preprocess in image_processors_utils.js, which
# models/lfm2_vl/image_processing_lfm2_vl.js calls before its own resizing).
_IMAGE_SETTINGS = {"lfm2_vl": {"do_resize": False}}


def transformers_js_settings(config: Any, directory: str) -> dict[str, dict[str, Any]]:
    """``{file name: settings}`` that a transformers.js folder's JSON files get, for a vision-language model of
    ``config`` saved in ``directory`` (see the module): ``preprocessor_config.json`` (the image processor's
    settings, which transformers 5 saves nested in ``processor_config.json``, and the ``processor_class``),
    ``tokenizer_config.json`` (its ``extra_special_tokens`` at the top level, where transformers.js's processors
    read them: Gemma 3's ``boi_token``), ``config.json`` (flat sizes), and ``processor_config.json`` (LLaVA's
    count of image tokens, below); an image processor's settings transformers.js reads otherwise are set as it
    reads them (LFM2-VL's ``do_resize``). A Pixtral processor calls its image processor with its own ``patch_size``
    times ``spatial_merge_size``; transformers.js's Pixtral image processor reads both from
    ``preprocessor_config.json``, so they go there."""
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    text = config.get_text_config()
    settings: dict[str, dict[str, Any]] = {}
    if config.model_type in _FLAT_CONFIG:
        settings["config.json"] = {key: getattr(text, key) for key in _FLAT_KEYS
                                   if getattr(text, key, None) is not None}
    processor = _json(os.path.join(directory, "processor_config.json"))
    image = next((processor[key] for key in ("image_processor", "feature_extractor")
                  if isinstance(processor.get(key), dict)), {})  # an audio model's: its feature extractor's
    kind = PROCESSOR_MAPPING_NAMES.get(config.model_type)
    # Pixtral's processor's sizes, which transformers.js's Pixtral image processor reads
    merged = {key: processor[key] for key in ("patch_size", "spatial_merge_size") if key in processor} \
        if "spatial_merge_size" in processor else {}
    settings["preprocessor_config.json"] = {**({"processor_class": kind} if kind else {}), **image, **merged,
                                            **_IMAGE_SETTINGS.get(config.model_type, {})}
    if config.model_type in _COUNTS_CLASS_TOKEN and processor.get("vision_feature_select_strategy") == "default":
        extra = processor.get("num_additional_image_tokens", 0)
        settings["processor_config.json"] = {"num_additional_image_tokens": max(extra - 1, 0)}
    special = _json(os.path.join(directory, "tokenizer_config.json")).get("extra_special_tokens")
    if isinstance(special, dict):
        settings["tokenizer_config.json"] = {k: v for k, v in special.items() if isinstance(v, str)}
    return settings


def _json(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
