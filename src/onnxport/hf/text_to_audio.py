"""``text-to-audio``: text in, a waveform out, from a model whose forward makes the whole waveform (VITS and MMS-TTS).

Such a model is exported as one ``model.onnx`` (transformers.js: ``onnx/model.onnx``) taking ``input_ids`` and
``attention_mask`` and giving ``waveform`` (batch, samples), ``sequence_lengths`` (the samples of each row that
are its own: a padded batch's shorter texts end in silence) and ``spectrogram``. VITS draws noise in its forward
(its durations and its latents, each scaled by the config's ``noise_scale_duration`` and ``noise_scale``): the
file draws its own, as transformers does at each call; verification feeds it eager PyTorch's draws instead
(``onnxport.verify.draws``), so that the waveform is checked value for value. A checkpoint saved with both noise
scales at 0 speaks the same waveform at every call, in PyTorch and in every runtime.

A text-to-audio model that makes its audio by generating (MusicGen's codes then its codec, SpeechT5's spectrogram
frames then its vocoder, Bark, CSM, ...) is refused before it is loaded: its loop is not one onnxport writes yet.

transformers.js reads a tokenizer from ``tokenizer.json``; a VITS checkpoint has the vocabulary of its Python
tokenizer (``vocab.json``): ``vits_tokenizer`` writes the ``tokenizer.json`` that gives the same ids (lower case,
characters outside the vocabulary dropped, ends stripped, the blank token between characters and at both ends).
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from onnxport.errors import InvalidInputError

__all__ = ["check_text_to_audio", "vits_tokenizer"]

TOKENIZER_FILE = "tokenizer.json"


def check_text_to_audio(config: Any, auto: str) -> None:
    """Refuse, before it is loaded, a text-to-audio model whose class generates its audio step by step."""
    import transformers
    from transformers.models.auto import modeling_auto

    name = modeling_auto.MODEL_FOR_TEXT_TO_WAVEFORM_MAPPING_NAMES.get(config.model_type)
    spectrogram = modeling_auto.MODEL_FOR_TEXT_TO_SPECTROGRAM_MAPPING_NAMES.get(config.model_type)
    cls = getattr(transformers, name or "", None)
    if name is None:
        what = (f"its class for speech ({spectrogram}) gives spectrogram frames, which a vocoder makes a waveform of"
                if spectrogram else "transformers has no text-to-waveform class for it")
        raise InvalidInputError(f"onnxport does not export {config.model_type} models for text-to-audio: {what}",
                                fix="export a model whose forward gives the waveform (VITS, MMS-TTS), or the model "
                                "with onnxport.export")
    if cls is not None and getattr(cls, "can_generate", lambda: False)():
        raise InvalidInputError(
            f"onnxport does not export {config.model_type} models for text-to-audio yet: {name} makes its audio by "
            "generating it step by step (transformers' generate), a loop onnxport does not write for audio",
            fix="export a model whose forward gives the waveform (VITS, MMS-TTS), or the model's parts with "
                "onnxport.export")


def vits_tokenizer(directory: str) -> dict[str, Any] | None:
    """The ``tokenizer.json`` (as a dict) that gives the ids the VITS tokenizer in ``directory`` gives, or None
    where the directory has a ``tokenizer.json`` already or no VITS vocabulary; an ``InvalidInputError`` where
    the Python tokenizer does what a ``tokenizer.json`` cannot (phonemes from espeak, upper-case tokens)."""
    if os.path.isfile(os.path.join(directory, TOKENIZER_FILE)):
        return None
    try:
        with open(os.path.join(directory, "vocab.json"), encoding="utf-8") as f:
            vocab = json.load(f)
        with open(os.path.join(directory, "tokenizer_config.json"), encoding="utf-8") as f:
            settings = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(vocab, dict) or settings.get("tokenizer_class") != "VitsTokenizer":
        return None
    fix = "export it for onnxruntime (no target) and run it with onnxport.hf.pipeline, whose tokenizer is Python's"
    if settings.get("phonemize", True):
        raise InvalidInputError("the checkpoint's tokenizer reads phonemes that espeak makes of the text "
                                "(tokenizer_config.json: phonemize), which transformers.js cannot make", fix=fix)
    normalize, blank = settings.get("normalize", True), settings.get("add_blank", True)
    if normalize and any(token != token.lower() for token in vocab):
        raise InvalidInputError("the checkpoint's vocabulary holds upper-case tokens, which its tokenizer keeps "
                                "while it lowers the rest of the text: tokenizer.json cannot say so", fix=fix)
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers

    unk = settings.get("unk_token", "<unk>")
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token=unk if unk in vocab else None))
    steps = []
    if normalize:
        characters = "".join(sorted(t for t in vocab if len(t) == 1))
        steps += [normalizers.Lowercase(), normalizers.Replace(Regex(f"[^{_class(characters)}]"), ""),
                  normalizers.Strip()]
    pieces = "."
    if blank:
        token = next((t for t, i in vocab.items() if i == 0), None)
        if token is None:
            return None
        steps.append(normalizers.Replace(Regex(""), token))  # before each character, and at the end
        pieces = f"{re.escape(token)}|." if len(token) > 1 else "."
    if steps:
        tokenizer.normalizer = normalizers.Sequence(steps)
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(pieces), behavior="isolated")
    return json.loads(tokenizer.to_str())


def _class(characters: str) -> str:
    """``characters`` escaped for a regular expression's character class."""
    return "".join("\\" + c if c in "\\]^-[" else c for c in characters)
