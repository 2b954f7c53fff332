"""Each consumer's contract for a vision-language model's folder, as data: which piece each of its files holds,
what it names them and their inputs, and which model types it runs.

- ``ONNXRUNTIME``: ``vision.onnx`` (the image encoder), ``embedding.onnx`` (token ids and image rows to the
  decoder's embeddings: the merge) and ``model.onnx`` (the decoder with its KV cache, named as text-generation
  names it). onnxport's runner (``generate_vlm``) runs any of them; onnxruntime-genai those of
  ``onnxport.hf.multimodal.genai``'s types, with its ``genai_config.json``.
- ``TRANSFORMERS_JS``: ``onnx/vision_encoder``, ``embed_tokens`` (token ids to embeddings: transformers.js
  writes the image rows over the image tokens itself) and ``decoder_model_merged``, each in every dtype, for
  ``AutoModelForImageTextToText``. Read from transformers.js 4.3's ``models/session_config.js``
  (``MODEL_TYPES.ImageTextToText``: its sessions) and ``models/registry.js``
  (``MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES``: its types); Qwen2-VL's image encoder takes the grid as
  ``grid_thw`` there (``image_grid_thw_name`` in ``models/qwen2_vl/modeling_qwen2_vl.js``), the later Qwen VL
  models' as ``image_grid_thw``. ``tests/test_transformers_js_vlm.py`` checks these tables against the installed
  transformers.js.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["ONNXRUNTIME", "PIECES", "TRANSFORMERS_JS", "TRANSFORMERS_JS_TYPES", "Layout"]

# The pieces a folder may hold (onnxport.hf.multimodal.components): the image encoder, the token embedding, the
# merge of token embeddings and image rows, and the decoder.
PIECES = ("vision", "tokens", "merge", "decoder")


@dataclass(frozen=True)
class Layout:
    """A consumer's files: ``files`` maps each piece it loads to its file's stem; ``inputs`` maps a model type
    to the names the consumer gives some of the image encoder's inputs."""

    consumer: str
    files: Mapping[str, str]
    inputs: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def input_names(self, model_type: str, names: list[str]) -> list[str]:
        """The image encoder's input ``names`` as this consumer names them for ``model_type``."""
        renamed = self.inputs.get(model_type, {})
        return [renamed.get(name, name) for name in names]


ONNXRUNTIME = Layout("onnxruntime", {"vision": "vision", "merge": "embedding", "decoder": "model"})
TRANSFORMERS_JS = Layout("transformers.js", {"vision": "vision_encoder", "tokens": "embed_tokens",
                                             "decoder": "decoder_model_merged"},
                         {"qwen2_vl": {"image_grid_thw": "grid_thw"}})
# transformers.js 4.3's image-text-to-text types that transformers has (moondream1 and llava_qwen2 it does not).
TRANSFORMERS_JS_TYPES = ("llava", "llava_onevision", "florence2", "qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe",
                         "qwen3_5", "qwen3_5_moe", "lfm2_vl", "lfm3_vl", "idefics3", "smolvlm", "paligemma", "gemma3",
                         "gemma3n", "gemma4", "mistral3", "lighton_ocr", "glm_ocr")
