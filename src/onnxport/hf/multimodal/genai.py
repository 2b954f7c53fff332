"""onnxruntime-genai's files for a vision-language folder of a type it runs: ``genai_config.json`` (the decoder,
as text-generation describes it, fed ``inputs_embeds``; the image encoder and the merge as genai names them) and
the image processor genai applies itself (onnxruntime-extensions' transforms), made from the model's config and
its transformers image processor's settings."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["GENAI_PROCESSOR", "GENAI_TYPES", "genai_files", "genai_names", "write_genai"]

GENAI_TYPES = ("mistral3",)  # the models onnxruntime-genai runs that these files are written for
GENAI_PROCESSOR = "genai_image_processor.json"  # its image processor (onnxruntime-extensions' transforms)


def genai_files(config: Any, model: torch.nn.Module, preprocessor: Mapping[str, Any]) -> dict[str, Any]:
    """``genai_config.json`` and the image processor onnxruntime-genai reads for a model of ``GENAI_TYPES``
    (file name -> JSON), from the model's config and its transformers image processor's settings."""
    from onnxport.hf.genai import genai_config

    described = genai_config(config, model)
    described["model"]["type"] = config.model_type  # a vision-language type genai runs by its name (GENAI_TYPES)
    decoder = described["model"]["decoder"]
    decoder["inputs"] = {"inputs_embeds": "inputs_embeds", "attention_mask": "attention_mask",
                         "position_ids": "position_ids", "past_key_names": "past_key_values.%d.key",
                         "past_value_names": "past_key_values.%d.value"}
    patch, merge = config.vision_config.patch_size, getattr(config, "spatial_merge_size", 1)
    described["model"]["vision"] = {"filename": "vision.onnx", "config_filename": GENAI_PROCESSOR,
                                    "patch_size": patch, "spatial_merge_size": merge,
                                    "inputs": {"pixel_values": "pixel_values"},
                                    "outputs": {"image_features": "image_features"}}
    described["model"]["embedding"] = {"filename": "embedding.onnx",
                                       "inputs": {"input_ids": "input_ids", "image_features": "image_features"},
                                       "outputs": {"inputs_embeds": "inputs_embeds"}}
    longest = (preprocessor.get("size") or {}).get("longest_edge", config.vision_config.image_size)

    def operation(name: str, kind: str, **attrs: Any) -> dict[str, Any]:
        return {"operation": {"name": name, "type": kind, **({"attrs": attrs} if attrs else {})}}

    # Pixtral's processor: an image larger than longest_edge scaled down, every side a multiple of the
    # patches merged; onnxruntime-extensions' smart resize rounds to that multiple within the pixel bounds.
    # DecodeImage gives RGB already (its ConvertRGB swaps the channels of an RGB image: not used).
    transforms = [operation("decode_image", "DecodeImage", color_space="RGB"),
                  operation("resize", "Resize", height=longest, width=longest, smart_resize=1,
                            min_pixels=(patch * merge) ** 2, max_pixels=longest * longest, patch_size=patch,
                            merge_size=merge),
                  operation("rescale", "Rescale", rescale_factor=preprocessor.get("rescale_factor", 1 / 255)),
                  operation("normalize", "Normalize", mean=preprocessor.get("image_mean", [0.5] * 3),
                            std=preprocessor.get("image_std", [0.5] * 3)),
                  operation("to_channel_first", "Permute3D", dims=[2, 0, 1]),
                  operation("pixtral_image_sizes", "PixtralImageSizes")]
    processor = {"processor": {"name": "pixtral_image_processor", "transforms": transforms}}
    return {"genai_config.json": described, GENAI_PROCESSOR: processor}


def genai_names(config: Any) -> tuple[str, ...]:
    """The files :func:`write_genai` writes for a model of this config (none for a type genai does not run)."""
    return ("genai_config.json", GENAI_PROCESSOR) if config.model_type in GENAI_TYPES else ()


def write_genai(out: str, config: Any, model: torch.nn.Module, directory: str) -> None:
    """Write :func:`genai_files` into ``out`` for a model of ``GENAI_TYPES`` (nothing for another type), from
    the image processor settings in ``directory``'s ``preprocessor_config.json``."""
    import json

    if not genai_names(config):
        return
    path = os.path.join(directory, "preprocessor_config.json")
    try:
        with open(path, encoding="utf-8") as f:
            preprocessor = json.load(f)
    except (OSError, ValueError):
        preprocessor = {}  # the defaults of the model's config
    for name, data in genai_files(config, model, preprocessor if isinstance(preprocessor, dict) else {}).items():
        with open(os.path.join(out, name), "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2)
