"""Tiny text-to-speech checkpoints saved as people save them: a VITS (MMS-TTS's architecture: characters in, a
waveform out) with its config, safetensors and its Python tokenizer's files (vocab.json, tokenizer_config.json),
as transformers' VitsTokenizer saves them."""

from __future__ import annotations

import json
import os
from typing import Any

import torch

# MMS-TTS's vocabulary kind: characters, id 0 the blank put between them
CHARACTERS = ["_", " ", *"abcdefghijklmnopqrstuvwxyz", "'", "-"]
TEXTS = ["Hello there", "a longer sentence, with punctuation!", "ok"]


def write_vits(directory: str, *, noise: bool = True) -> tuple[str, Any]:
    """A VITS checkpoint (stochastic durations, relative attention, a HiFi-GAN decoder), its noise scales the
    config's defaults, or 0 (``noise=False``: the same waveform at every call). Returns the directory and model."""
    import transformers

    torch.manual_seed(0)
    config = transformers.VitsConfig(
        vocab_size=len(CHARACTERS), hidden_size=16, num_hidden_layers=2, num_attention_heads=2, ffn_dim=32,
        flow_size=16, spectrogram_bins=17, upsample_initial_channel=16, upsample_rates=[4, 4],
        upsample_kernel_sizes=[8, 8], resblock_kernel_sizes=[3], resblock_dilation_sizes=[[1, 3]],
        prior_encoder_num_flows=2, prior_encoder_num_wavenet_layers=2, duration_predictor_num_flows=2,
        duration_predictor_filter_channels=16, depth_separable_num_layers=2, window_size=4, sampling_rate=16000,
        **({} if noise else {"noise_scale": 0.0, "noise_scale_duration": 0.0}))
    model = transformers.VitsModel(config).eval()
    model.save_pretrained(directory)
    with open(os.path.join(directory, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({c: i for i, c in enumerate(CHARACTERS)}, f)
    tokenizer = transformers.VitsTokenizer(os.path.join(directory, "vocab.json"), pad_token="_", unk_token="<unk>",
                                           phonemize=False, normalize=True, add_blank=True)
    tokenizer.save_pretrained(directory)
    return directory, model
