"""Tiny speech-recognition checkpoints, saved as people save them: config, safetensors, the feature extractor
(preprocessor_config.json) and a word-level tokenizer; weights drawn at a spread that makes greedy decoding say
more than one token. Each writer returns the directory, the model (eval, generation without an end token, so
that every row generates all its tokens) and its feature extractor."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

from tests.test_transformers_js import write_special_tokenizer

VOCAB = 99
RATE = 16000
TOKENS = dict(vocab_size=VOCAB, pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)


def _spread(model: torch.nn.Module, std: float, embeddings: float | None) -> None:
    """Matrices drawn at ``std``, the decoder's token embeddings at ``embeddings`` where given."""
    torch.manual_seed(3)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, std)
        if embeddings is not None:
            model.get_decoder().get_input_embeddings().weight.normal_(0, embeddings)


def _save(directory: str, model: Any, extractor: Any, std: float, embeddings: float | None = 1.0
          ) -> tuple[str, Any, Any]:
    _spread(model, std, embeddings)
    model.eval().save_pretrained(directory)
    extractor.save_pretrained(directory)
    write_special_tokenizer(directory, VOCAB)
    model.generation_config.eos_token_id = None
    model.generation_config.forced_eos_token_id = None
    return directory, model, extractor


def write_moonshine(directory: str) -> tuple[str, Any, Any]:
    """Moonshine: raw samples (``input_values``) through three strided convolutions."""
    import transformers

    config = transformers.MoonshineConfig(
        hidden_size=32, intermediate_size=64, encoder_num_hidden_layers=2, decoder_num_hidden_layers=2,
        encoder_num_attention_heads=4, decoder_num_attention_heads=4, max_position_embeddings=64, **TOKENS)
    extractor = transformers.Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=RATE, padding_value=0.0,
                                                      do_normalize=False, return_attention_mask=True)
    return _save(directory, transformers.MoonshineForConditionalGeneration(config), extractor, 0.3, None)


def write_speech_to_text(directory: str) -> tuple[str, Any, Any]:
    """Speech2Text: filter-bank frames (``input_features``, frames by bins), downsampled by two convolutions."""
    import transformers

    config = transformers.Speech2TextConfig(
        d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
        encoder_ffn_dim=64, decoder_ffn_dim=64, input_feat_per_channel=16, num_conv_layers=2, conv_channels=32,
        max_source_positions=256, max_target_positions=64, **TOKENS)
    extractor = transformers.Speech2TextFeatureExtractor(feature_size=16, num_mel_bins=16, sampling_rate=RATE)
    return _save(directory, transformers.Speech2TextForConditionalGeneration(config), extractor, 0.6, None)


def write_cohere_asr(directory: str) -> tuple[str, Any, Any]:
    """Cohere ASR: log-mel frames into a Parakeet (conformer) encoder that subsamples them eightfold."""
    import transformers

    encoder = dict(model_type="parakeet_encoder", hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=4, intermediate_size=64, num_mel_bins=16, subsampling_conv_channels=8,
                   max_position_embeddings=512)
    config = transformers.CohereAsrConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, intermediate_size=64,
        head_dim=8, max_position_embeddings=64, encoder_config=encoder, **TOKENS)
    extractor = transformers.CohereAsrFeatureExtractor(feature_size=16, dither=0.0)
    return _save(directory, transformers.CohereAsrForConditionalGeneration(config), extractor, 0.3)


def write_speecht5(directory: str) -> tuple[str, Any, Any]:
    """SpeechT5's speech-to-text model: raw samples through a wav2vec2-style convolutional front end."""
    import transformers

    config = transformers.SpeechT5Config(
        hidden_size=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
        encoder_ffn_dim=64, decoder_ffn_dim=64, conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3),
        num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2, max_speech_positions=4000,
        max_text_positions=64, **TOKENS)
    extractor = transformers.SpeechT5FeatureExtractor(return_attention_mask=True)
    return _save(directory, transformers.SpeechT5ForSpeechToText(config), extractor, 0.3, 2.0)


# Cohere ASR's decoder prompt, as transformers.js's CohereAsrProcessor.get_decoder_prompt_ids('en') spells it.
COHERE_PROMPT = ("▁", "<|startofcontext|>", "<|startoftranscript|>", "<|emo:undefined|>", "<|en|>", "<|en|>",
                 "<|pnc|>", "<|noitn|>", "<|notimestamp|>", "<|nodiarize|>")


def write_cohere_asr_processor(directory: str) -> list[int]:
    """Cohere ASR's directory as transformers.js's pipeline reads it: its prompt's tokens in the vocabulary (the
    last ids, marked special), ``processor_class`` in preprocessor_config.json and a processor_config.json; the
    prompt's ids."""
    import json

    from tokenizers import AddedToken, Tokenizer

    path = os.path.join(directory, "tokenizer.json")
    tokenizer = Tokenizer.from_file(path)
    spelled = list(dict.fromkeys(COHERE_PROMPT))
    vocab = tokenizer.get_vocab()
    words = sorted((i, w) for w, i in vocab.items() if w.startswith("w"))[-len(spelled):]
    data = json.loads(tokenizer.to_str())
    for (i, word), token in zip(words, spelled, strict=True):
        del data["model"]["vocab"][word]
        data["model"]["vocab"][token] = i
    tokenizer = Tokenizer.from_str(json.dumps(data))
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in spelled])
    tokenizer.save(path)
    settings = os.path.join(directory, "preprocessor_config.json")
    with open(settings, encoding="utf-8") as f:
        config = json.load(f)
    with open(settings, "w", encoding="utf-8") as f:
        json.dump({**config, "processor_class": "CohereAsrProcessor"}, f)
    with open(os.path.join(directory, "processor_config.json"), "w", encoding="utf-8") as f:
        json.dump({"processor_class": "CohereAsrProcessor"}, f)
    ids = dict(tokenizer.get_vocab())
    return [ids[t] for t in COHERE_PROMPT]


# no apostrophe: transformers.js joins " 's" and the like where transformers' pipeline keeps the space
CTC_CHARACTERS = ["<pad>", "<s>", "</s>", "<unk>", "|", *"abcdefghijk"]


def write_wav2vec2_ctc(directory: str, *, norm: str = "group") -> tuple[str, Any, Any]:
    """A Wav2Vec2 with its CTC head: raw samples in, a character's logits per frame out; its Python tokenizer's
    files (vocab.json, tokenizer_config.json), as transformers' Wav2Vec2CTCTokenizer saves them. ``norm="layer"``:
    the feature extractor gives an attention mask, which the model reads."""
    import json

    import transformers

    config = transformers.Wav2Vec2Config(
        vocab_size=len(CTC_CHARACTERS), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, conv_dim=(16, 16, 16), conv_stride=(5, 4, 2), conv_kernel=(10, 4, 2),
        num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, feat_extract_norm=norm,
        do_stable_layer_norm=norm == "layer", pad_token_id=0, ctc_loss_reduction="mean")
    model = transformers.Wav2Vec2ForCTC(config)
    _spread(model, 0.3, None)
    model.eval().save_pretrained(directory)
    extractor = transformers.Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=RATE, padding_value=0.0,
                                                      do_normalize=True, return_attention_mask=norm == "layer")
    extractor.save_pretrained(directory)
    with open(os.path.join(directory, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({c: i for i, c in enumerate(CTC_CHARACTERS)}, f)
    transformers.Wav2Vec2CTCTokenizer(os.path.join(directory, "vocab.json")).save_pretrained(directory)
    return directory, model, extractor


WRITERS = {"moonshine": write_moonshine, "speech_to_text": write_speech_to_text, "cohere_asr": write_cohere_asr,
           "speecht5": write_speecht5}


def clips(seconds: tuple[float, ...] = (0.9, 0.55), seed: int = 1) -> list[np.ndarray]:
    """Clips of noise of the given lengths at :data:`RATE`."""
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(int(RATE * s)) * 0.1).astype(np.float32) for s in seconds]


def encoded(extractor: Any, audio: list[np.ndarray]) -> dict[str, torch.Tensor]:
    """The extractor's batch of ``audio`` (padded), its tensors the model takes."""
    batch = extractor(audio, sampling_rate=RATE, padding=True, return_tensors="pt")
    return {k: v for k, v in batch.items() if k in ("input_features", "input_values", "attention_mask")}


def write(kind: str, root: str) -> tuple[str, Any, Any]:
    return WRITERS[kind](os.path.join(root, kind))
