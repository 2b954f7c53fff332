"""The rows of ``transformers_js_census.py`` beyond the text and image tasks of ``export_hf_census.py``: sequence to
sequence text, speech (sequence to sequence and CTC), the audio encoders, image features and the bare models of
encoder-decoders. For each: the checkpoint, what is saved beside it (tokenizer, feature extractor, image processor),
the inputs, the eager run, and what Node is asked (a call of the class, or a greedy ``generate``).

- ``text2text-generation``: the word-level tokenizer; the census's prompt, batch 1; greedy ``generate``.
  ``text-to-audio``: the same prompt, the class called (VITS draws noise: ranks compared, see ``compare``).
- ``automatic-speech-recognition`` (the speech sequence-to-sequence map): built and given its feature extractor as
  ``speech_census.py`` does; one clip of 0.9 s; greedy ``generate``.
- ``ctc``, ``audio-classification``, ``audio-frame-classification``, ``audio-xvector``: the type's feature
  extractor as ``speech_census.py`` makes it; a padded batch of two clips (0.9 s, 0.55 s); the class called. A CTC
  row also gets a character vocabulary (``vocab.json``, as transformers' CTC tokenizer saves it).
- ``image-feature-extraction``, ``image-to-image``: the image processor and batch of ``export_hf_census_images.py``;
  ``zero-shot-object-detection``: its first image and the tokenizer's padded batch of the census's sentences as
  the queries; ``mask-generation``: its first image and two prompts of two points (one a negative point).
- ``seq2seq-features`` (the bare models of encoder-decoders, exported for ``feature-extraction``): the tokenizer's
  padded batch of the census's sentences (a speech type's clips), and decoder ids of two tokens after the start.

Generation on both sides runs under the model's token ids alone (:data:`PLAIN`: the logits processors of its own
generation config, BART's forced end token or Blenderbot's n-gram ban, left out of both), greedy, ``NEW_TOKENS`` new
tokens; a row is right when the token lists are equal, or equal but for a start token one side leaves out.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any

from export_hf_census_common import NEW_TOKENS, ROOT, first_line, short_trace

if ROOT not in sys.path:  # the test suite's speech and tokenizer writers (tests.speech_dirs)
    sys.path.insert(0, ROOT)

# The census's task of each of the registry's maps this module covers -> the task export-hf is given.
EXPORT_TASKS = {
    "text2text-generation": "text2text-generation",
    "automatic-speech-recognition": "automatic-speech-recognition",
    "ctc": "automatic-speech-recognition",
    "audio-classification": "audio-classification",
    "audio-frame-classification": "audio-frame-classification",
    "audio-xvector": "audio-xvector",
    "image-feature-extraction": "image-feature-extraction",
    "seq2seq-features": "feature-extraction",
    "image-to-image": "image-to-image",
    "zero-shot-object-detection": "zero-shot-object-detection",
    "mask-generation": "mask-generation",
    "text-to-audio": "text-to-audio",
}
GENERATING = ("text2text-generation", "automatic-speech-recognition")
AUDIO = ("ctc", "audio-classification", "audio-frame-classification", "audio-xvector")
CLIPS = (0.9, 0.55)
# Settings of a shrunk config whose parts must agree that shrinking leaves apart (SAM's image embeddings: the vision
# encoder's channels and grid are the prompt encoder's width and embedding size).
SETTINGS = {"sam": {"vision_config.output_channels": 64, "vision_config.global_attn_indexes": [1],
                    "vision_config.window_size": 4, "vision_config.num_pos_feats": 32,
                    "prompt_encoder_config.image_embedding_size": 8}}
# The feature extractor a type's checkpoints ship where transformers' map names another (Wav2Vec2-BERT's take
# log-mel features; the map names Wav2Vec2's raw samples).
EXTRACTORS = {"wav2vec2-bert": "SeamlessM4TFeatureExtractor"}
SPEECH_CLIP = (0.9,)
# Generation settings that the model's own generation config may set and a plain greedy search does not use:
# passed to transformers.js's generate, which would otherwise read them from the folder's generation_config.json.
PLAIN = {"forced_eos_token_id": None, "forced_bos_token_id": None, "no_repeat_ngram_size": 0,
         "repetition_penalty": 1.0, "min_length": 0, "min_new_tokens": None, "suppress_tokens": None,
         "begin_suppress_tokens": None, "bad_words_ids": None, "forced_decoder_ids": None}


def _speech_types() -> set[str]:
    from transformers.models.auto import modeling_auto

    return set(modeling_auto.MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES)


def _vocab(config: Any) -> int:
    import speech_census

    return speech_census.vocab_size(config)


def _set_start(config: Any, vocab: int) -> None:
    """A decoder start token past the shrunk vocabulary (Marian's is its pad, the last id) becomes the pad's."""
    for holder in (config, getattr(config, "decoder", None), getattr(config, "text_config", None)):
        start = getattr(holder, "decoder_start_token_id", None)
        if holder is not None and isinstance(start, int) and not 0 <= start < vocab:
            holder.decoder_start_token_id = getattr(holder, "pad_token_id", None) or 0


def _build(task: str, spec: dict[str, Any], row: dict[str, Any]) -> tuple[Any, Any]:
    import census_build as cb
    import speech_census
    import torch
    import transformers
    from export_hf_census import build

    if spec["python_type"] in _speech_types() and task in ("automatic-speech-recognition", "seq2seq-features"):
        config, model = speech_census.build(spec["python_type"])
        if type(model).__name__ != spec["model_class"]:  # the bare model of the same config
            torch.manual_seed(0)
            model = getattr(transformers, spec["model_class"])(config).eval()
            cb.redraw_weights(model)
        return config, model
    if spec["python_type"] in SETTINGS:
        config = cb.tiny_config(spec["python_type"], settings=SETTINGS[spec["python_type"]])
        torch.manual_seed(0)
        model = getattr(transformers, spec["model_class"])(config).eval()
        cb.redraw_weights(model)
        return config, model
    config, model = build(task, spec["python_type"], spec["model_class"], row)
    _set_start(config, _vocab(config))
    cb.redraw_weights(model)
    return config, model


def _extractor(spec: dict[str, Any], config: Any, directory: str, row: dict[str, Any]) -> Any:
    import speech_census

    extractor, name = speech_census.feature_extractor(spec["python_type"], config,
                                                      EXTRACTORS.get(spec["python_type"]))
    if extractor is None:
        raise LookupError(f"no inputs: {name}")
    row["feature_extractor"] = name
    extractor.save_pretrained(directory)
    return extractor


def _audio(extractor: Any, seconds: tuple[float, ...]) -> dict[str, Any]:
    import speech_census

    kept, _ = speech_census.encode(extractor, seconds)
    return {k: v.numpy() for k, v in kept.items()}


def _write_ctc_vocab(directory: str, vocab: int) -> None:
    """Characters for each of the CTC head's ``vocab`` ids, saved as transformers' CTC tokenizer saves them."""
    import transformers

    chars = ["<pad>", "<s>", "</s>", "<unk>", "|"] + [chr(ord("a") + i) for i in range(26)]
    chars += [f"c{i}" for i in range(len(chars), vocab)]
    path = os.path.join(directory, "vocab.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({c: i for i, c in enumerate(chars[:vocab])}, f)
    transformers.Wav2Vec2CTCTokenizer(path).save_pretrained(directory)


def generate(model: Any, enc: dict[str, Any]) -> dict[str, Any]:
    """Greedy ``generate`` from ``enc`` under a generation config of the model's token ids alone."""
    import torch
    from transformers import GenerationConfig

    own = model.generation_config
    plain = GenerationConfig(bos_token_id=own.bos_token_id, eos_token_id=own.eos_token_id,
                             pad_token_id=own.pad_token_id, decoder_start_token_id=own.decoder_start_token_id)
    model.generation_config = plain
    try:
        with torch.no_grad():
            tokens = model.generate(**{k: torch.from_numpy(v) for k, v in enc.items()}, max_new_tokens=NEW_TOKENS,
                                    do_sample=False, num_beams=1)
    finally:
        model.generation_config = own
    if not isinstance(tokens, torch.Tensor):
        tokens = tokens.sequences
    return {"tokens": tokens[0].tolist()}


def _decoder_ids(model: Any, batch: int) -> Any:
    import numpy as np

    start = getattr(model.config, "decoder_start_token_id", None)
    start = start if isinstance(start, int) else 0
    return np.array([[start, 5, 9], [start, 7, 3]][:batch], dtype=np.int64)


def prepare(task: str, spec: dict[str, Any], row: dict[str, Any], save: Any, directory: str) -> Any:
    """Build the row's model, save what goes beside it in ``directory`` and run it: (model, run, inputs, eager
    result), ``run`` giving the result of a model (the reloaded one) on ``inputs``; None with the row's status
    set where the model does not build or its eager run fails."""
    import numpy as np
    from export_hf_census import _finite, _prompt, eager_encoder, encode, tokenizer_inputs, write_tokenizer
    from export_hf_census_images import pixel_inputs, write_processor

    row["status"] = "not built"
    save()
    try:
        config, model = _build(task, spec, row)
    except Exception as exc:  # noqa: BLE001
        row["reason"] = first_line(exc)
        return None
    row["status"] = "eager fails"
    save()
    vocab = _vocab(config)
    try:
        speech = spec["python_type"] in _speech_types()
        if task in ("text2text-generation", "text-to-audio"):
            write_tokenizer(directory, vocab)
            row["prompt"] = prompt = _prompt(vocab)
            enc = {"input_ids": np.array([prompt]), "attention_mask": np.ones((1, len(prompt)), dtype=np.int64)}
        elif task == "automatic-speech-recognition":  # one clip, unpadded: no mask (transformers.js feeds the
            # encoders of Cohere ASR none, whose extractor's mask leaves out the last frame)
            enc = _audio(_extractor(spec, config, directory, row), SPEECH_CLIP)
            enc.pop("attention_mask", None)
        elif task in AUDIO:
            enc = _audio(_extractor(spec, config, directory, row), CLIPS)
            if task == "ctc":
                _write_ctc_vocab(directory, vocab)
        elif task in ("image-feature-extraction", "image-to-image"):
            row["preprocessor"] = write_processor(directory, spec["python_type"], config)
            enc = pixel_inputs(model, config, directory)
        elif task == "zero-shot-object-detection":  # one image, two text queries of it (one padded)
            row["preprocessor"] = write_processor(directory, spec["python_type"], config)
            enc = {k: v[:1] for k, v in pixel_inputs(model, config, directory).items()}
            write_tokenizer(directory, vocab)
            enc.update(encode(directory, vocab))
        elif task == "mask-generation":  # one image, two prompts of two points each
            row["preprocessor"] = write_processor(directory, spec["python_type"], config)
            enc = {k: v[:1] for k, v in pixel_inputs(model, config, directory).items()}
            side = enc["pixel_values"].shape[-1]
            rng = np.random.default_rng(0)
            enc["input_points"] = (rng.random((1, 2, 2, 2)) * side).astype(np.float32)
            enc["input_labels"] = np.array([[[1, 1], [1, 0]]], dtype=np.int64)
        else:  # seq2seq-features
            if speech:  # (no mask, as transformers.js feeds Whisper's and Cohere ASR's encoders)
                enc = _audio(_extractor(spec, config, directory, row), CLIPS)
                enc.pop("attention_mask", None)
            else:
                row["tokenizer_gives"] = tokenizer_inputs(spec["python_type"])
                write_tokenizer(directory, vocab, row["tokenizer_gives"])
                enc = encode(directory, vocab)
            enc["decoder_input_ids"] = _decoder_ids(model, 2)
        row["inputs"] = {k: list(v.shape) for k, v in enc.items()}
        if task in GENERATING:
            if speech:  # as speech_census.py: a written tokenizer of the decoder's vocabulary
                from tests.test_transformers_js import write_special_tokenizer

                write_special_tokenizer(directory, vocab)
            run = lambda m: generate(m, enc)  # noqa: E731
        else:
            run = lambda m: eager_encoder(m, enc)  # noqa: E731
        eager = run(model)
        if not _finite(eager):
            raise ValueError("the eager outputs are not finite")
    except Exception as exc:  # noqa: BLE001
        row["reason"] = first_line(exc)
        row["trace"] = short_trace(traceback.format_exc())
        return None
    return model, run, enc, eager


def same_tokens(got: list[int], want: list[int]) -> bool:
    """Equal, or equal but for a start token one side has first (Whisper's ``generate`` leaves it out)."""
    if got == want:
        return True
    longer, shorter = (got, want) if len(got) > len(want) else (want, got)
    return len(longer) == len(shorter) + 1 and longer[1:] == shorter
