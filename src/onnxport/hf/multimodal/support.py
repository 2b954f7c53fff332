"""Which vision-language types onnxport exports: those whose folders are tested to generate transformers' tokens
(``tests/test_export_hf_vlm.py``, the census in ``bench/image_text_census.md``); another is refused before anything
is loaded or written, with what stands in the way where it is known."""

from __future__ import annotations

from typing import Any

from onnxport.errors import InvalidInputError

__all__ = ["SUPPORTED", "check_supported"]

SUPPORTED = ("llava", "mistral3", "internvl", "gemma3", "qwen2_vl", "qwen2_5_vl", "qwen3_vl", "idefics3", "smolvlm",
             "paligemma", "florence2", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe", "glm_ocr", "lighton_ocr")
_WHY_NOT: dict[str, str] = {}


def check_supported(config: Any) -> None:
    """Refuse a vision-language model whose split is not known to generate as transformers does."""
    kind = config.model_type
    if kind in SUPPORTED:
        return
    why = _WHY_NOT.get(kind, "its split into image encoder, embedding and decoder is not tested to generate as "
                             "transformers does")
    raise InvalidInputError(f"onnxport does not export {kind} models for image-text-to-text yet: {why}",
                            fix=f"export one of {', '.join(SUPPORTED)}; or export its text model for "
                            "text-generation, or the whole model with onnxport.export")
