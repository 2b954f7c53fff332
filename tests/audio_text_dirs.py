"""Tiny random audio-text-to-text model directories (Voxtral, Granite Speech) written as users save them: config,
safetensors, a byte-level BPE tokenizer (``tokenizers``) with the model's audio tokens, and the feature extractor's
``preprocessor_config.json`` naming the processor class, which transformers.js's ``AutoProcessor`` reads. Their
transformers processors cannot be built here (Voxtral's needs mistral_common's tokenizer, Granite Speech's
feature extractor torchaudio): the inputs come from transformers.js's processor. Nothing downloaded."""

from __future__ import annotations

import json
import os

import torch
import transformers

from tests import vlm_dirs

VOXTRAL_TOKENS = ("[AUDIO]", "[BEGIN_AUDIO]")  # what transformers.js's VoxtralProcessor writes in a prompt
GRANITE_TOKENS = ("<|audio|>",)
# Voxtral's tower reads 30 s windows of 128 mel bins (3000 frames, 1500 positions); its projector joins four of
# its rows (intermediate_size = 4 * hidden_size), so that a window gives the 375 rows transformers.js's processor
# writes audio tokens for.
VOXTRAL_AUDIO = {"hidden_size": 16, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
                 "num_mel_bins": 128, "max_source_positions": 1500}
# Granite Speech's features: pairs of mel frames stacked (2 * n_mels), its projector's windows of blocks of frames.
GRANITE_MELS, GRANITE_WINDOW, GRANITE_DOWNSAMPLE = 16, 4, 2
TEXT = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            head_dim=8, max_position_embeddings=1024, bos_token_id=1, eos_token_id=2, pad_token_id=0)


def _preprocessor(directory: str, settings: dict) -> None:
    with open(os.path.join(directory, "preprocessor_config.json"), "w", encoding="utf-8") as f:
        json.dump(settings, f, indent=2)


def write_voxtral(directory: str) -> torch.nn.Module:
    """A random Voxtral (:data:`VOXTRAL_AUDIO`, a two-layer Llama) and its Whisper feature extractor's settings."""
    torch.manual_seed(0)
    vocab = vlm_dirs.write_tokenizer(directory, VOXTRAL_TOKENS)
    config = transformers.VoxtralConfig(audio_config=VOXTRAL_AUDIO, text_config={**TEXT, "vocab_size": len(vocab)},
                                        audio_token_id=vocab["[AUDIO]"])
    model = transformers.VoxtralForConditionalGeneration(config).eval()
    vlm_dirs.spread(model)
    model.save_pretrained(directory)
    extractor = transformers.WhisperFeatureExtractor(feature_size=128)
    _preprocessor(directory, {**json.loads(extractor.to_json_string()), "processor_class": "VoxtralProcessor"})
    return model


def write_granite_speech(directory: str) -> torch.nn.Module:
    """A random Granite Speech (a two-layer conformer of blocks of 8 frames, a one-layer Q-Former projector over
    windows of :data:`GRANITE_WINDOW` frames, a two-layer Granite) and its processor's settings as transformers 5's
    ``save_pretrained`` writes them (``processor_config.json``: its audio token, its feature extractor's nested),
    written here where the feature extractor cannot be built (it needs torchaudio)."""
    torch.manual_seed(0)
    vocab = vlm_dirs.write_tokenizer(directory, GRANITE_TOKENS)
    config = transformers.GraniteSpeechConfig(
        text_config={**TEXT, "model_type": "granite", "vocab_size": len(vocab)},
        encoder_config={"input_dim": 2 * GRANITE_MELS, "num_layers": 2, "hidden_dim": 16, "num_heads": 2,
                        "output_dim": 8, "context_size": 8, "max_pos_emb": 16, "conv_kernel_size": 3},
        projector_config={"model_type": "blip_2_qformer", "hidden_size": 16, "num_hidden_layers": 1,
                          "num_attention_heads": 2, "intermediate_size": 32, "encoder_hidden_size": 16,
                          "cross_attention_frequency": 1},
        audio_token_index=vocab["<|audio|>"], window_size=GRANITE_WINDOW, downsample_rate=GRANITE_DOWNSAMPLE,
        has_lora_adapter=False)
    model = transformers.GraniteSpeechForConditionalGeneration(config).eval()
    vlm_dirs.spread(model)
    model.save_pretrained(directory)
    extractor = {"feature_extractor_type": "GraniteSpeechFeatureExtractor", "feature_size": GRANITE_MELS,
                 "sampling_rate": 16000, "padding_value": 0.0, "padding_side": "right", "return_attention_mask": False,
                 "projector_window_size": GRANITE_WINDOW, "projector_downsample_rate": GRANITE_DOWNSAMPLE,
                 "melspec_kwargs": {"sample_rate": 16000, "n_fft": 512, "win_length": 400, "hop_length": 160,
                                    "n_mels": GRANITE_MELS}}
    with open(os.path.join(directory, "processor_config.json"), "w", encoding="utf-8") as f:
        json.dump({"audio_token": "<|audio|>", "feature_extractor": extractor,
                   "processor_class": "GraniteSpeechProcessor"}, f, indent=2)
    return model
