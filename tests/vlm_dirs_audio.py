"""A tiny Gemma 4 that also hears (an audio tower), with its processor's settings as its ``save_pretrained`` writes
them (``processor_config.json``: the image processor's and the audio feature extractor's nested), written here where
the processor cannot be built (its video processor needs torchvision), and its tokenizer's multimodal tokens named
as Gemma 4's tokenizer names them (``extra_special_tokens``). Nothing downloaded."""

from __future__ import annotations

import json
import os

import torch
import transformers

from tests import vlm_dirs

# The smallest audio tower Gemma 4's config takes: two conformer layers of width 32, a first convolution of 16
# channels reading 16 mel bins (its input projection is made of as many bins as those channels).
GEMMA4_AUDIO = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
                "subsampling_conv_channels": [16, 4], "conv_kernel_size": 5, "output_proj_dims": 32}
MEL_BINS = 16
# The names Gemma 4's processor reads its tokens by, on its tokenizer.
GEMMA4_NAMED = {"image_token": "<|image|>", "boi_token": "<|image>", "eoi_token": "<image|>",
                "audio_token": "<|audio|>", "boa_token": "<|audio>", "eoa_token": "<audio|>"}


def write_gemma4_with_audio(directory: str) -> torch.nn.Module:
    """``vlm_dirs.write_gemma4``'s model with an audio tower (:data:`GEMMA4_AUDIO`), its processor's settings
    (``Gemma4Processor``'s: its image processor's, and a ``Gemma4AudioFeatureExtractor`` of :data:`MEL_BINS` mel
    bins) and its tokenizer's named tokens."""
    model = vlm_dirs.write_gemma4(directory, audio_config=GEMMA4_AUDIO)
    with open(os.path.join(directory, "preprocessor_config.json"), encoding="utf-8") as f:
        image_processor = json.load(f)
    extractor = transformers.Gemma4AudioFeatureExtractor(feature_size=MEL_BINS)
    with open(os.path.join(directory, "processor_config.json"), "w", encoding="utf-8") as f:
        json.dump({"feature_extractor": json.loads(extractor.to_json_string()), "image_processor": image_processor,
                   "image_seq_length": 280, "audio_seq_length": 750, "audio_ms_per_token": 40,
                   "processor_class": "Gemma4Processor"}, f, indent=2)
    path = os.path.join(directory, "tokenizer_config.json")
    with open(path, encoding="utf-8") as f:
        settings = json.load(f)
    with open(path, "w", encoding="utf-8") as f:
        json.dump({**settings, "extra_special_tokens": GEMMA4_NAMED}, f)
    return model
