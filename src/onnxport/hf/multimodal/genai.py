"""onnxruntime-genai's files for a vision-language folder of a type it runs: ``genai_config.json`` (the decoder,
as text-generation describes it, fed ``inputs_embeds``; the image encoder and the merge as genai names them) and
the image processor genai applies itself (onnxruntime-extensions' transforms), made from the model's config and
its transformers image processor's settings.

What genai does with each type is a fact of its source, kept here as data (:data:`GENAI_TYPES`), read from
onnxruntime-genai's ``src/models`` (its ``main`` of August 2026, a0c04eb, which has no tag for 0.18; the 0.18 wheel
runs these folders as ``tests/test_export_hf_vlm_genai.py`` checks):

- ``model_type.h``: the vision-language types it runs (``IsVLM``), those it gives 3-d positions (``IsQwenVLFamily``:
  ``Qwen2VLPositionInputs`` in ``position_inputs.cpp``, ``get_rope_index``'s rule for images, from
  ``image_token_id``, ``vision_start_token_id`` and the processor's ``image_grid_thw``) and the one it runs image by
  image (``IsPixtralFamily``);
- ``model.cpp``'s processor table: the image processor of each type, which expands the prompt's image placeholder
  itself (``mistral3_image_processor.cpp``; ``qwen2_5_vl_image_processor.cpp``: ``<|vision_start|>`` to
  ``t*h*w/merge**2`` ``<|image_pad|>``; ``gemma_image_processor.cpp``: ``<start_of_image>`` to 256 image tokens,
  whatever the model's ``mm_tokens_per_image``);
- ``multi_modal.cpp``: the image encoder run on the processor's outputs by the names ``vision.inputs`` gives,
  into a buffer of ``[image tokens, decoder.hidden_size]`` (``multi_modal_features.cpp``), which the embedding
  model then takes: ``decoder.hidden_size`` is the width of the decoder's ``inputs_embeds`` (Qwen3-VL's deepstack
  columns and Gemma 3's image flag ride there, :mod:`.components`). Gemma 3's buffer holds 256 rows per image
  only for an encoder whose output has an image dim, 3-d (``gemma_image_processor.cpp`` counts the rows once
  otherwise): a Gemma 3 folder's image encoder gives its rows per image (``consumers.ONNXRUNTIME.batched_rows``),
  so a prompt of several images runs.

Qwen2-VL has no type of its own there; its folder runs as ``qwen2_5_vl``, whose processor, positions and image
encoder calls are those of Qwen2-VL for images (the two differ for videos alone, by ``second_per_grid_ts``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["GENAI_PROCESSOR", "GENAI_TYPES", "GenaiType", "genai_files", "genai_names", "why_not_genai",
           "write_genai"]

GENAI_PROCESSOR = "genai_image_processor.json"  # its image processor (onnxruntime-extensions' transforms)


@dataclass(frozen=True)
class GenaiType:
    """How onnxruntime-genai runs a folder of one transformers type.

    ``name``: the ``model.type`` genai knows it by; ``processor``: the transforms its image processor applies
    (``pixtral``, ``qwen``, ``gemma``: :func:`_transforms`); ``vision_inputs``: the processor outputs the image
    encoder takes; ``token_ids``: the config's ids genai reads besides the text model's (its 3-d positions');
    ``tokens_per_image``: the image tokens genai's processor puts in the prompt for each image where that is a
    constant of its own (the model's ``mm_tokens_per_image`` must be the same), None where it counts them from
    the image."""

    name: str
    processor: str
    vision_inputs: tuple[str, ...] = ("pixel_values",)
    token_ids: tuple[str, ...] = ()
    tokens_per_image: int | None = None


_QWEN_IDS = ("image_token_id", "video_token_id", "vision_start_token_id")
_QWEN_INPUTS = ("pixel_values", "image_grid_thw")
GENAI_TYPES: Mapping[str, GenaiType] = {
    "mistral3": GenaiType("mistral3", "pixtral"),
    "qwen2_vl": GenaiType("qwen2_5_vl", "qwen", _QWEN_INPUTS, _QWEN_IDS),
    "qwen2_5_vl": GenaiType("qwen2_5_vl", "qwen", _QWEN_INPUTS, _QWEN_IDS),
    "qwen3_vl": GenaiType("qwen3_vl", "qwen", _QWEN_INPUTS, _QWEN_IDS),
    "gemma3": GenaiType("gemma3", "gemma", tokens_per_image=256),  # gemma_image_processor.cpp's image_seq_length
}

# The supported types genai does not run, and why (its vision-language types: model_type.h's IsVLM).
_NOT_RUN = {
    "llava": "onnxruntime-genai has no LLaVA model type (src/models/model_type.h)",
    "internvl": "onnxruntime-genai has no InternVL model type (src/models/model_type.h)",
}

# PIL's resampling filters (a transformers image processor's "resample") as onnxruntime-extensions' Resize names them.
_RESAMPLE = {0: "NEAREST", 1: "LANCZOS", 2: "LINEAR", 3: "CUBIC"}


def why_not_genai(config: Any) -> str | None:
    """Why onnxruntime-genai cannot run a folder of this config, so that none of its files are written; None
    where it can."""
    kind = GENAI_TYPES.get(config.model_type)
    if kind is None:
        return _NOT_RUN.get(config.model_type, f"onnxruntime-genai has no {config.model_type} model type")
    tokens = getattr(config, "mm_tokens_per_image", None)
    if kind.tokens_per_image is not None and tokens is not None and tokens != kind.tokens_per_image:
        return (f"onnxruntime-genai's {kind.name} processor puts {kind.tokens_per_image} image tokens in the prompt "
                f"for each image, and this model takes {tokens} (mm_tokens_per_image)")
    return None


def genai_files(config: Any, model: torch.nn.Module, preprocessor: Mapping[str, Any], decoder: Any) -> dict[str, Any]:
    """``genai_config.json`` and the image processor onnxruntime-genai reads for a model of ``GENAI_TYPES``
    (file name -> JSON), from the model's config, its transformers image processor's settings and the exported
    ``decoder`` (an ``OnnxProgram``: its cache's sizes and the width of its ``inputs_embeds``)."""
    from onnxport.hf.genai import genai_config

    kind = GENAI_TYPES[config.model_type]
    described = genai_config(config, model, decoder)
    described["model"]["type"] = kind.name
    described["model"].update({name: getattr(config, name) for name in kind.token_ids})
    section = described["model"]["decoder"]
    section["hidden_size"] = _embeds_width(decoder) or section["hidden_size"]  # genai's image feature buffer's width
    section["inputs"] = {"inputs_embeds": "inputs_embeds", "attention_mask": "attention_mask",
                         "position_ids": "position_ids", "past_key_names": "past_key_values.%d.key",
                         "past_value_names": "past_key_values.%d.value"}
    vision = config.vision_config
    described["model"]["vision"] = {"filename": "vision.onnx", "config_filename": GENAI_PROCESSOR,
                                    "patch_size": vision.patch_size,
                                    "spatial_merge_size": _merge_size(config),
                                    "inputs": {name: name for name in kind.vision_inputs},
                                    "outputs": {"image_features": "image_features"}}
    described["model"]["embedding"] = {"filename": "embedding.onnx",
                                       "inputs": {"input_ids": "input_ids", "image_features": "image_features"},
                                       "outputs": {"inputs_embeds": "inputs_embeds"}}
    processor = {"processor": {"name": f"{kind.processor}_image_processor",
                               "transforms": _transforms(kind.processor, config, preprocessor)}}
    return {"genai_config.json": described, GENAI_PROCESSOR: processor}


def _merge_size(config: Any) -> int:
    return getattr(config, "spatial_merge_size", None) or getattr(config.vision_config, "spatial_merge_size", 1)


def _embeds_width(decoder: Any) -> int | None:
    """The last dim of the exported decoder's ``inputs_embeds`` (None where it is not fixed)."""
    for value in decoder.model.graph.inputs:
        if value.name == "inputs_embeds" and value.shape is not None and isinstance(value.shape[-1], int):
            return value.shape[-1]
    return None


def _operation(name: str, kind: str, **attrs: Any) -> dict[str, Any]:
    return {"operation": {"name": name, "type": kind, **({"attrs": attrs} if attrs else {})}}


def _transforms(processor: str, config: Any, preprocessor: Mapping[str, Any]) -> list[dict[str, Any]]:
    """onnxruntime-extensions' transforms doing what the model's transformers image processor does (its settings
    in ``preprocessor``), for genai's processor of kind ``processor``. DecodeImage gives RGB already (ConvertRGB
    would swap the channels of an RGB image: not used)."""
    vision = config.vision_config
    size = preprocessor.get("size") or {}
    interpolation = _RESAMPLE.get(preprocessor.get("resample"), "CUBIC" if processor != "gemma" else "LINEAR")
    first = [_operation("decode_image", "DecodeImage", color_space="RGB")]
    scaled = [_operation("rescale", "Rescale", rescale_factor=preprocessor.get("rescale_factor", 1 / 255)),
              _operation("normalize", "Normalize", mean=preprocessor.get("image_mean", [0.5] * 3),
                         std=preprocessor.get("image_std", [0.5] * 3))]
    if processor == "pixtral":
        # Pixtral's processor: an image larger than longest_edge scaled down, every side a multiple of the
        # patches merged; onnxruntime-extensions' smart resize rounds to that multiple within the pixel bounds.
        patch, merge = vision.patch_size, _merge_size(config)
        longest = size.get("longest_edge", vision.image_size)
        resize = _operation("resize", "Resize", height=longest, width=longest, smart_resize=1,
                            min_pixels=(patch * merge) ** 2, max_pixels=longest * longest, patch_size=patch,
                            merge_size=merge, interpolation=interpolation)
        return [*first, resize, *scaled, _operation("to_channel_first", "Permute3D", dims=[2, 0, 1]),
                _operation("pixtral_image_sizes", "PixtralImageSizes")]
    if processor == "qwen":
        # The Qwen VL processor: smart resize to multiples of the merged patches within min_pixels and max_pixels
        # (transformers 5 names them size's shortest_edge and longest_edge), then every image's patches in the
        # order of its merged groups, each repeated temporal_patch_size times, and its grid (PatchImage).
        patch = preprocessor.get("patch_size", vision.patch_size)
        merge = preprocessor.get("merge_size", _merge_size(config))
        temporal = preprocessor.get("temporal_patch_size", getattr(vision, "temporal_patch_size", 2))
        low = preprocessor.get("min_pixels") or size.get("shortest_edge", 56 * 56)
        high = preprocessor.get("max_pixels") or size.get("longest_edge", 28 * 28 * 1280)
        resize = _operation("resize", "Resize", smart_resize=1, min_pixels=low, max_pixels=high, patch_size=patch,
                            merge_size=merge, interpolation=interpolation)
        return [*first, resize, *scaled, _operation("patch_image", "PatchImage", patch_size=patch,
                                                    temporal_patch_size=temporal, merge_size=merge)]
    # Gemma 3's processor: every image resized to the size the vision tower reads, channels first.
    height, width = size.get("height", vision.image_size), size.get("width", vision.image_size)
    resize = _operation("resize", "Resize", height=height, width=width, keep_aspect_ratio=0,
                        interpolation=interpolation)
    return [*first, resize, *scaled, _operation("to_channel_first", "Permute3D", dims=[2, 0, 1])]


def genai_names(config: Any) -> tuple[str, ...]:
    """The files :func:`write_genai` writes for a model of this config (none where genai cannot run it)."""
    return ("genai_config.json", GENAI_PROCESSOR) if why_not_genai(config) is None else ()


def write_genai(out: str, config: Any, model: torch.nn.Module, directory: str, programs: Any) -> None:
    """Write :func:`genai_files` into ``out`` for a model genai runs, from the image processor settings in
    ``directory``'s ``preprocessor_config.json`` and the exported ``programs`` (a ``VlmPrograms``); for another,
    remove an earlier export's (which describe another model) and say why in the decoder's report."""
    why = why_not_genai(config)
    if why is not None:
        for name in ("genai_config.json", GENAI_PROCESSOR):
            path = os.path.join(out, name)
            if os.path.isfile(path):
                os.remove(path)
        programs.decoder.report.notes.append(f"no genai_config.json: {why}")
        return
    path = os.path.join(directory, "preprocessor_config.json")
    try:
        with open(path, encoding="utf-8") as f:
            preprocessor = json.load(f)
    except (OSError, ValueError):
        preprocessor = {}  # the defaults of the model's config
    made = genai_files(config, model, preprocessor if isinstance(preprocessor, dict) else {}, programs.decoder)
    for name, data in made.items():
        with open(os.path.join(out, name), "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2)
