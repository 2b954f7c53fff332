"""The rows of ``transformers_js_census.py`` beyond the text and image tasks of ``export_hf_census.py``: sequence to
sequence text, speech (sequence to sequence and CTC), the audio encoders, image features and the bare models of
encoder-decoders. For each: the checkpoint, what is saved beside it (tokenizer, feature extractor, image processor),
the inputs, the eager run, and what Node is asked (a call of the class, or a greedy ``generate``).

- ``text2text-generation``: the word-level tokenizer; the census's prompt, batch 1; greedy ``generate``.
  ``text-to-audio``: the same prompt, the class called (VITS draws noise: ranks compared, see ``compare``), or
  for MusicGen (:data:`GENERATED_AUDIO`) a greedy ``generate`` whose waveform is compared.
- ``automatic-speech-recognition`` (the speech sequence-to-sequence map): built and given its feature extractor as
  ``speech_census.py`` does; one clip of 0.9 s; greedy ``generate``.
- ``ctc``, ``audio-classification``, ``audio-frame-classification``, ``audio-xvector``: the type's feature
  extractor as ``speech_census.py`` makes it; a padded batch of two clips (0.9 s, 0.55 s); the class called. A CTC
  row also gets a character vocabulary (``vocab.json``, as transformers' CTC tokenizer saves it).
- ``image-feature-extraction``, ``image-to-image``: the image processor and batch of ``export_hf_census_images.py``;
  ``zero-shot-object-detection``: its first image and the tokenizer's padded batch of the census's sentences as
  the queries (for Grounding DINO, :data:`ONE_TEXT_PER_IMAGE`, one text of the sentences as phrases ended by
  "."); the features of a model of texts and images apart (CLIPModel, exported for ``feature-extraction``): the
  images and the sentences; ``mask-generation``: its first image and two prompts of two points (one a negative
  point).
- ``audio-codec`` (Mimi, DAC: their folders' ``encoder_model`` and ``decoder_model``): one clip of 0.9 s as the
  type's feature extractor gives it; the class called (transformers.js encodes, then decodes the codes alone: a
  waveform of whole frames), against transformers' ``decode(encode(input_values).audio_codes)`` (Mimi's forward
  trims to the input's length, which transformers.js's API does not).
- ``panoptic-segmentation``, ``universal-segmentation`` (DETR's panoptic head, MaskFormer's: exported for
  ``image-segmentation``): the image processor and batch of ``export_hf_census_images.py``; CLIPSeg's
  (:data:`PROMPTED_SEGMENTATION`) with the tokenizer's padded batch of the census's sentences, a prompt per image.
- ``vision2seq`` (a VisionEncoderDecoder: TrOCR's architecture, one picture) and ``document-question-answering``
  (a tiny Donut taught its answers, its DocVQA prompt as the decoder's first ids): greedy ``generate``; the
  vision2seq map's Idefics3 and SmolVLM run as image-text-to-text.
- ``text-to-spectrogram`` (SpeechT5 and its HiFi-GAN vocoder, two folders): the test suite's checkpoints, greedy
  ``generate_speech`` as far as the sentence's length allows (:func:`run_spectrogram`).
- ``image-matting``, ``pose-estimation``, ``time-series`` (VitMatte, VitPose, PatchTST and PatchTSMixer): the test
  suite's tiny checkpoints and processors, their first batch, the class called (:func:`_prepare_written`).
- ``image-text-to-text``, ``audio-text-to-text``: the checkpoints and prompts of the transformers.js test matrices
  (``tests/test_transformers_js_vlm.py``, ``tests/test_transformers_js_audio_text.py``: each with a processor
  transformers.js loads), two pictures or clips, transformers.js's own processor and model class, greedy
  ``generate`` (:func:`run_multimodal`); a type the matrix has no writer for is not covered.
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
    "audio-codec": "feature-extraction",
    "image-text-to-text": "image-text-to-text",
    "vision2seq": "image-to-text",
    "text-to-spectrogram": "text-to-audio",
    "image-matting": "image-matting",
    "pose-estimation": "pose-estimation",
    "time-series": "time-series-forecasting",
    "normal-estimation": "normal-estimation",  # (Sapiens: no such type in transformers)
    "multimodality": "multimodality",  # (DeepSeek's Janus as its hub code names it: no such type in transformers)
    "document-question-answering": "document-question-answering",
    "audio-text-to-text": "audio-text-to-text",
    "panoptic-segmentation": "image-segmentation",
    "universal-segmentation": "image-segmentation",
}
SEGMENTATION = ("panoptic-segmentation", "universal-segmentation")
MULTIMODAL = ("image-text-to-text", "audio-text-to-text")
GENERATING = ("text2text-generation", "automatic-speech-recognition", "vision2seq", "document-question-answering")
# The tasks of an encoder-decoder whose encoder reads the image, and the checkpoints the census writes for them (a
# VisionEncoderDecoder as TrOCR and Donut are built: tests/document_dirs.py); the vision2seq map's other types
# (Idefics3, SmolVLM) read image tokens in a prompt and run as image-text-to-text.
ENCODED = ("vision2seq", "document-question-answering")
# The tasks whose checkpoints are the test suite's (tests/test_export_hf_matting_pose.py,
# tests/test_export_hf_time_series.py: the tiny configs those models build from, their processors), called once.
WRITTEN = ("image-matting", "pose-estimation", "time-series")
# The text-to-audio types whose audio is generated (codes, then its codec): greedy ``generate`` on both sides, its
# waveform compared.
GENERATED_AUDIO = ("musicgen",)
AUDIO = ("ctc", "audio-classification", "audio-frame-classification", "audio-xvector")
CLIPS = (0.9, 0.55)
# Settings of a shrunk config whose parts must agree that shrinking leaves apart (SAM's image embeddings: the vision
# encoder's channels and grid are the prompt encoder's width and embedding size).
SETTINGS = {"detr": {"encoder_attention_heads": 8, "decoder_attention_heads": 8},  # (its mask head's groups of 8:
            # d_model + heads channels)
            "musicgen": {"audio_encoder.codebook_dim": 64},  # (its codec's codes are as wide as its states)
            # (its Swin's last stage, at 1/32 of the image, at least as wide as its window of 7: a smaller image
            # shrinks the window below its position table's 7x7, which eager PyTorch fails on; the side stated
            # where the census reads it)
            "grounding-dino": {"image_size": 256},
            "sam": {"vision_config.output_channels": 64, "vision_config.global_attn_indexes": [1],
                    "vision_config.window_size": 4, "vision_config.num_pos_feats": 32,
                    "prompt_encoder_config.image_embedding_size": 8}}
# The feature extractor a type's checkpoints ship where transformers' map names another (Wav2Vec2-BERT's take
# log-mel features; the map names Wav2Vec2's raw samples).
EXTRACTORS = {"wav2vec2-bert": "SeamlessM4TFeatureExtractor"}
SPEECH_CLIP = (0.9,)
# Zero-shot detectors that read one text per image, its labels as phrases ended by "." (id 1012 in BERT's
# vocabulary, one of Grounding DINO's SPECIAL_TOKENS), not one text per label as OWL-ViT does
ONE_TEXT_PER_IMAGE = ("grounding-dino", "mm-grounding-dino")
PHRASE_END = 1012
# Segmenters of an image by a text prompt (CLIPSeg): transformers.js's users feed the tokenizer's texts with the
# images (its CLIPSegForImageSegmentation example), transformers' forward one prompt per image
PROMPTED_SEGMENTATION = ("clipseg",)
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


def generate_audio(model: Any, enc: dict[str, Any]) -> dict[str, Any]:
    """Greedy ``generate`` of a model whose generate gives its waveform (MusicGen's codes through its codec), under
    a generation config of the model's token ids alone (no classifier-free guidance)."""
    import torch
    from transformers import GenerationConfig

    own = model.generation_config
    model.generation_config = GenerationConfig(
        bos_token_id=own.bos_token_id, eos_token_id=own.eos_token_id, pad_token_id=own.pad_token_id,
        decoder_start_token_id=own.decoder_start_token_id)
    try:
        with torch.no_grad():
            audio = model.generate(**{k: torch.from_numpy(v) for k, v in enc.items()}, max_new_tokens=NEW_TOKENS,
                                   do_sample=False)
    finally:
        model.generation_config = own
    return {"audio_values": audio.double().numpy()}


def codec_round_trip(model: Any, enc: dict[str, Any]) -> dict[str, Any]:
    """A codec's ``decode(encode(input_values).audio_codes)``, no padding mask: what transformers.js's forward of
    an auto-encoder gives (encode, then decode of the codes alone), a waveform of whole frames. Mimi's own forward
    trims that to the input's length (its default padding mask), which transformers.js's API does not promise."""
    import torch

    with torch.no_grad():
        codes = model.encode(torch.from_numpy(enc["input_values"])).audio_codes
        audio = model.decode(audio_codes=codes).audio_values
    return {"audio_values": audio.double().numpy()}


def _unmasked(eager: dict[str, Any]) -> dict[str, Any]:
    """The outputs with their -inf (Grounding DINO's logits past its text and at its padding, masked by design) as
    0: what is left must be finite."""
    import numpy as np

    return {k: np.where(np.isneginf(v), 0.0, v) if isinstance(v, np.ndarray) else v for k, v in eager.items()}


def _phrases(directory: str, vocab: int) -> dict[str, Any]:
    """The census's sentences as one text of phrases, each ended by the id of BERT's ``.`` (which Grounding DINO
    reads as the end of a phrase: its text attention stays within one), as its processor and transformers.js's
    users write the labels ("a cat. a remote control.")."""
    from export_hf_census import _sentences
    from transformers import AutoTokenizer

    text = " ".join(f"{s} w{PHRASE_END}" for s in _sentences(vocab))
    return dict(AutoTokenizer.from_pretrained(directory)(text, return_tensors="np"))


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

    if task in ENCODED:
        return _prepare_encoded(task, row, save, directory)
    if task in WRITTEN:
        return _prepare_written(task, spec, row, save, directory)
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
        elif task == "audio-codec":  # one clip, unpadded: transformers.js encodes input_values alone
            enc = _audio(_extractor(spec, config, directory, row), SPEECH_CLIP)
            enc.pop("padding_mask", None)
        elif task in AUDIO:
            enc = _audio(_extractor(spec, config, directory, row), CLIPS)
            if task == "ctc":
                _write_ctc_vocab(directory, vocab)
        elif task in ("image-feature-extraction", "image-to-image", *SEGMENTATION):
            row["preprocessor"] = write_processor(directory, spec["python_type"], config)
            enc = pixel_inputs(model, config, directory)
            if task in SEGMENTATION and spec["python_type"] in PROMPTED_SEGMENTATION:  # a text prompt per image
                write_tokenizer(directory, vocab)
                enc.update(encode(directory, vocab))
        elif task == "zero-shot-object-detection":  # one image, two text queries of it (one padded)
            row["preprocessor"] = write_processor(directory, spec["python_type"], config)
            enc = {k: v[:1] for k, v in pixel_inputs(model, config, directory).items()}
            write_tokenizer(directory, vocab)
            enc.update(encode(directory, vocab) if spec["python_type"] not in ONE_TEXT_PER_IMAGE
                       else _phrases(directory, vocab))
        elif task == "zero-shot-image-classification":  # (CLIPModel's features) two images, two texts (one padded);
            # texts alone for a model built without its vision tower (EmbeddingGemma 2's default config)
            enc = {}
            if getattr(config, "vision_config", None) is not None:
                row["preprocessor"] = write_processor(directory, spec["python_type"], config)
                enc = pixel_inputs(model, config, directory)
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
        if task == "text-to-audio" and spec["python_type"] in GENERATED_AUDIO:
            run = lambda m: generate_audio(m, enc)  # noqa: E731
        elif task == "audio-codec":
            row["compared"] = "decode(encode(input_values).audio_codes), whole frames, as transformers.js's forward"
            run = lambda m: codec_round_trip(m, enc)  # noqa: E731
        elif task in GENERATING:
            if speech:  # as speech_census.py: a written tokenizer of the decoder's vocabulary
                from tests.test_transformers_js import write_special_tokenizer

                write_special_tokenizer(directory, vocab)
            run = lambda m: generate(m, enc)  # noqa: E731
        else:
            run = lambda m: eager_encoder(m, enc)  # noqa: E731
        eager = run(model)
        if not _finite(_unmasked(eager) if spec["python_type"] in ONE_TEXT_PER_IMAGE else eager):
            raise ValueError("the eager outputs are not finite")
    except Exception as exc:  # noqa: BLE001
        row["reason"] = first_line(exc)
        row["trace"] = short_trace(traceback.format_exc())
        return None
    return model, run, enc, eager


def _prepare_encoded(task: str, row: dict[str, Any], save: Any, directory: str) -> Any:
    """A VisionEncoderDecoder's row: TrOCR's architecture captioning a picture, or a Donut (taught its answers)
    answering a question about one, its DocVQA prompt the decoder's first ids; greedy ``generate``."""
    import transformers

    from tests import document_dirs, vlm_dirs

    row["status"] = "not built"
    save()
    try:
        if task == "vision2seq":
            model = document_dirs.write_trocr(directory)
            picture = vlm_dirs.images((32, 32))[0]
        else:
            model = document_dirs.write_donut(directory)
            picture = vlm_dirs.images(*document_dirs.PICTURES)[0]
    except Exception as exc:  # noqa: BLE001
        row["reason"] = first_line(exc)
        return None
    row["status"] = "eager fails"
    save()
    try:
        processor = transformers.AutoImageProcessor.from_pretrained(directory)
        enc = {"pixel_values": processor(picture, return_tensors="np")["pixel_values"]}
        if task == "document-question-answering":
            question = next(iter(document_dirs.ANSWERS))
            tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
            enc["decoder_input_ids"] = tokenizer(document_dirs.prompt(question), add_special_tokens=False,
                                                 return_tensors="np")["input_ids"]
        row["inputs"] = {k: list(v.shape) for k, v in enc.items()}
        run = lambda m: generate(m, enc)  # noqa: E731
        eager = run(model)
    except Exception as exc:  # noqa: BLE001
        row["reason"] = first_line(exc)
        row["trace"] = short_trace(traceback.format_exc())
        return None
    return model, run, enc, eager


def _prepare_written(task: str, spec: dict[str, Any], row: dict[str, Any], save: Any, directory: str) -> Any:
    """A row of :data:`WRITTEN`: the test suite's checkpoint of the type and its first batch (VitMatte's padded image
    and trimap, VitPose's person crop, two series of the forecaster's context)."""
    from export_hf_census import eager_encoder

    row["status"] = "not built"
    save()
    try:
        if task == "time-series":
            from tests import test_export_hf_time_series as series

            model = series.write_forecaster(directory, spec["python_type"])
            enc = {"past_values": series.series(2, 0)}
        else:
            from tests import test_export_hf_matting_pose as matting

            model, batches = matting._write(directory, matting.CASES[spec["python_type"]])
            enc = {k: v.numpy() for k, v in batches[0].items()}
    except Exception as exc:  # noqa: BLE001
        row["reason"] = first_line(exc)
        return None
    row["status"] = "eager fails"
    save()
    row["inputs"] = {k: list(v.shape) for k, v in enc.items()}
    run = lambda m: eager_encoder(m, enc)  # noqa: E731
    try:
        eager = run(model)
    except Exception as exc:  # noqa: BLE001
        row["reason"] = first_line(exc)
        return None
    return model, run, enc, eager


def same_tokens(got: list[int], want: list[int]) -> bool:
    """Equal, or equal but for a start token one side has first (Whisper's ``generate`` leaves it out)."""
    if got == want:
        return True
    longer, shorter = (got, want) if len(got) > len(want) else (want, got)
    return len(longer) == len(shorter) + 1 and longer[1:] == shorter


# -- image- and audio-text-to-text: the transformers.js test matrix's checkpoints and prompts ------------------


def _matrix(task: str) -> Any:
    """The test module of the transformers.js matrix of ``task`` (image- or audio-text-to-text)."""
    if task == "image-text-to-text":
        from tests import test_transformers_js_vlm as matrix
    else:
        from tests import test_transformers_js_audio_text as matrix
    return matrix


def multimodal_case(task: str, python_type: str) -> Any:
    """The case of the transformers.js test matrix of ``task`` for the type (its checkpoint writer with a processor
    transformers.js loads, and its prompt), or None: the census makes no prompt of images or sound without one."""
    return _matrix(task).CASES.get(python_type)


def run_multimodal(task: str, spec: dict[str, Any], row: dict[str, Any], save: Any, work: str, deadline: float,
                   export: Any) -> None:
    """One image- or audio-text-to-text row: the matrix case's checkpoint written, ``export`` (the census's CLI run)
    into a transformers.js folder at fp32, then transformers.js's own processor and model class for the task on two
    pictures or clips (the matrix's Node runner), greedy; right where each one's tokens equal transformers'
    ``generate`` on what transformers.js's processor gave."""
    import subprocess
    import time

    import torch

    matrix = _matrix(task)
    case = multimodal_case(task, spec["python_type"])
    write, prompt = (case.write, case.prompt) if task == "image-text-to-text" else case
    directory, out = os.path.join(work, "model"), os.path.join(work, "onnx")
    row["status"] = "not built"
    save()
    try:
        model = write(directory)
    except Exception as exc:  # noqa: BLE001
        row["reason"] = first_line(exc)
        return
    export(task, directory, out, row, deadline, ("--target", "transformers.js", "--dtypes", "fp32"))
    save()
    if row["status"] != "exported":
        return
    row["status"] = "client fails"
    save()
    job: dict[str, Any] = {"folder": out, "dtype": "fp32"}
    if task == "image-text-to-text":
        from tests import vlm_dirs

        paths = []
        for i, picture in enumerate(vlm_dirs.images(*matrix.PICTURES)):
            paths.append(os.path.join(work, f"picture{i}.png"))
            picture.save(paths[-1])
        job.update(images_first=case.images_first, cases=[{"text": prompt, "images": [path],
                                                           "max_new_tokens": NEW_TOKENS} for path in paths])
    else:
        job["cases"] = [{"text": prompt, "audio": clip, "max_new_tokens": NEW_TOKENS} for clip in matrix.CLIPS]
    jobs, results = os.path.join(work, "jobs.json"), os.path.join(work, "results.json")
    with open(jobs, "w", encoding="utf-8") as f:
        json.dump([job], f)
    subprocess.run(["node", matrix.RUNNER, "--modules", matrix.MODULES, jobs, results], capture_output=True,
                   text=True, timeout=max(5.0, deadline - time.time() - 5), check=False)
    if not os.path.isfile(results):
        row["reason"] = "the Node run wrote no result"
        return
    with open(results, encoding="utf-8") as f:
        (result,) = json.load(f)
    if "error" in result:
        row["reason"] = result["error"].splitlines()[0][:300]
        row["client_trace"] = result["error"][:1500]
        return
    row["status"] = "right"
    row.pop("reason", None)
    for n, got in enumerate(result["cases"]):
        inputs = matrix.torch_inputs(model, got["inputs"])
        with torch.no_grad():
            want = model.generate(**inputs, do_sample=False, max_new_tokens=NEW_TOKENS)[0].tolist()
        (tokens,) = got["tokens"]
        row.setdefault("js_tokens", []).append(tokens)
        if tokens != want:
            row["status"] = "wrong"
            part = next((i for i, (a, b) in enumerate(zip(tokens, want)) if a != b), min(len(tokens), len(want)))
            row["reason"] = f"case {n}: tokens part at {part}: {tokens[part:part + 4]} vs {want[part:part + 4]}"


# -- text-to-spectrogram: SpeechT5 and its vocoder ---------------------------------------------------------------


def run_spectrogram(spec: dict[str, Any], row: dict[str, Any], save: Any, work: str, deadline: float,
                    export: Any) -> None:
    """SpeechT5's row: the test suite's tiny text-to-speech checkpoint (its prenet's dropout 0: the same frames at
    every call) and HiFi-GAN vocoder, each exported for text-to-audio, then transformers.js's
    ``SpeechT5ForTextToSpeech.generate_speech`` with ``SpeechT5HifiGan`` on the census's sentence for as many steps as
    its length allows (no stop probability crossing 0.9); right where the spectrogram and waveform equal transformers'
    ``generate_speech`` with the same vocoder (its postnet left out, as transformers.js's loop leaves it)."""
    import time

    import numpy as np
    import torch
    import transformers

    from tests import test_speecht5_tts as tts
    from tests.runtimes.runtimes import run_transformers_js

    row["status"] = "not built"
    save()
    directory, vocoder_dir = os.path.join(work, "model"), os.path.join(work, "vocoder")
    try:
        model, vocoder = tts.write_tts(directory), tts.write_vocoder(vocoder_dir)
    except Exception as exc:  # noqa: BLE001
        row["reason"] = first_line(exc)
        return
    out, vocoder_out = os.path.join(work, "onnx"), os.path.join(work, "vocoder-onnx")
    options = ("--target", "transformers.js", "--dtypes", "fp32")
    for source, folder in ((vocoder_dir, vocoder_out), (directory, out)):
        export("text-to-audio", source, folder, row, deadline, options)
        save()
        if row["status"] != "exported":
            return
    ids = transformers.PreTrainedTokenizerFast.from_pretrained(directory)(tts.TEXT, return_tensors="pt").input_ids
    speaker = torch.randn(1, tts.SPEAKER, generator=torch.Generator().manual_seed(3))
    run = {"threshold": 0.9, "minlenratio": 0.0, "maxlenratio": 1.0}
    with torch.no_grad(), tts.without_postnet(model):
        frames = model.generate_speech(ids, speaker, **run)
        wave = vocoder(frames)
    row["status"] = "client fails"
    save()
    job = {"model": out, "vocoder": vocoder_out, "speaker": speaker[0].tolist(), "text": tts.TEXT, "runs": [run]}
    try:
        got = run_transformers_js(tts.RUNNER, job, work, timeout=max(5.0, deadline - time.time() - 5))
    except Exception as exc:  # noqa: BLE001 - the run failed: no result
        row["reason"] = first_line(exc)
        return
    if "error" in got:
        row["reason"] = got["error"].splitlines()[0][:300]
        return
    (result,) = got["runs"]
    compared = {}
    for name, want in (("spectrogram", frames.numpy()), ("waveform", wave.numpy()[None])):
        value = np.asarray(result[name]["data"], np.float64).reshape(result[name]["dims"])
        ok = value.shape == want.shape
        diff = float(np.abs(value - want).max()) if ok else float("inf")
        compared[name] = {"max_abs": diff, "ok": ok and diff <= 1e-4 + 1e-3 * float(np.abs(want).max())}
    row["outputs"] = compared
    row["status"] = "right" if all(c["ok"] for c in compared.values()) else "wrong"
    row.pop("reason", None)
    if row["status"] == "wrong":
        row["reason"] = "; ".join(f"{k}: {c['max_abs']}" for k, c in compared.items() if not c["ok"])
