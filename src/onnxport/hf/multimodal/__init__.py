"""Vision-language models (``image-text-to-text``), and language models that hear (``audio-text-to-text``: Voxtral,
Granite Speech, their audio encoder in place of the image encoder): one split, read from the model, written in each
consumer's layout.

- ``components``: the pieces every such model is made of (image encoder, token embedding, the merge of the two,
  decoder), built on the model's own ``get_image_features``, ``get_input_embeddings`` and forward;
- ``families``: what differs between families, small and named (the image token, positions, deepstack rows,
  image tokens that attend both ways, an encoder that takes one image at a time);
- ``positions``: the decoder's positions where they are not counted over the mask (multimodal RoPE, by the
  model's own ``get_rope_index``);
- ``examples``: the pieces' example inputs, the image encoder's from the model's own image processor;
- ``consumers``: each consumer's layout as data (onnxruntime and onnxruntime-genai, transformers.js);
- ``export``: the pieces of a layout exported and verified; ``runner``: onnxport's own generation loop over a
  folder (``generate_vlm``); ``genai``: onnxruntime-genai's files for the types it runs;
- ``support``: which types are known to generate as transformers does, and why the others are refused;
- ``granite_speech``: Granite Speech's audio encoder made one graph for any count of frames.
"""

from onnxport.hf.multimodal.consumers import ONNXRUNTIME, TRANSFORMERS_JS, Layout
from onnxport.hf.multimodal.export import VlmPrograms, export_multimodal
from onnxport.hf.multimodal.families import Family, image_token_id
from onnxport.hf.multimodal.runner import FILES, generate_vlm
from onnxport.hf.multimodal.support import SUPPORTED, check_supported

__all__ = ["FILES", "ONNXRUNTIME", "SUPPORTED", "TRANSFORMERS_JS", "Family", "Layout", "VlmPrograms", "check_supported",
           "export_multimodal", "generate_vlm", "image_token_id"]
