"""``tokenizer.json`` for the character tokenizers transformers has in Python alone, which transformers.js reads
from a ``tokenizer.json`` only: VITS's (``VitsTokenizer``: characters in, with a blank between them) and the CTC
speech models' (``Wav2Vec2CTCTokenizer``: characters out, repeats merged and blanks dropped). Each is built with the
``tokenizers`` package from the checkpoint's ``vocab.json`` and ``tokenizer_config.json``, to give the ids (or the
text) transformers' Python tokenizer gives; ``tokenizer_json`` picks the one the directory's tokenizer needs.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from onnxport.errors import InvalidInputError

__all__ = ["TOKENIZER_FILE", "ctc_tokenizer", "tokenizer_json", "vits_tokenizer"]

TOKENIZER_FILE = "tokenizer.json"
_FIX = "export it for onnxruntime (no target) and run it with onnxport.hf.pipeline, whose tokenizer is Python's"


def tokenizer_json(directory: str) -> dict[str, Any] | None:
    """The ``tokenizer.json`` (as a dict) that the Python tokenizer in ``directory`` stands for, where it is one of
    these and the directory has none; None otherwise."""
    if os.path.isfile(os.path.join(directory, TOKENIZER_FILE)):
        return None
    vocab, settings = _read(directory)
    if vocab is None:
        return None
    kind = settings.get("tokenizer_class")
    return vits_tokenizer(vocab, settings) if kind == "VitsTokenizer" else \
        ctc_tokenizer(vocab, settings) if kind == "Wav2Vec2CTCTokenizer" else None


def _read(directory: str) -> tuple[dict[str, int] | None, dict[str, Any]]:
    try:
        with open(os.path.join(directory, "vocab.json"), encoding="utf-8") as f:
            vocab = json.load(f)
        with open(os.path.join(directory, "tokenizer_config.json"), encoding="utf-8") as f:
            settings = json.load(f)
    except (OSError, ValueError):
        return None, {}
    if not isinstance(vocab, dict) or not isinstance(settings, dict):
        return None, {}
    if vocab and all(isinstance(v, dict) for v in vocab.values()):  # a vocabulary per language: the first
        vocab = next(iter(vocab.values()))
    return vocab, settings


def vits_tokenizer(vocab: dict[str, int], settings: dict[str, Any]) -> dict[str, Any] | None:
    """VITS's: lower case, characters outside the vocabulary dropped, ends stripped, the blank token (id 0) before
    each character and at the end. An ``InvalidInputError`` where the Python tokenizer does what a
    ``tokenizer.json`` cannot (phonemes from espeak, upper-case tokens)."""
    if settings.get("phonemize", True):
        raise InvalidInputError("the checkpoint's tokenizer reads phonemes that espeak makes of the text "
                                "(tokenizer_config.json: phonemize), which transformers.js cannot make", fix=_FIX)
    normalize, blank = settings.get("normalize", True), settings.get("add_blank", True)
    if normalize and any(token != token.lower() for token in vocab):
        raise InvalidInputError("the checkpoint's vocabulary holds upper-case tokens, which its tokenizer keeps "
                                "while it lowers the rest of the text: tokenizer.json cannot say so", fix=_FIX)
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


def ctc_tokenizer(vocab: dict[str, int], settings: dict[str, Any]) -> dict[str, Any]:
    """A CTC speech model's: each id a character; decoding merges repeats, drops the blank (the pad token) and reads
    the word delimiter as a space, as transformers' ASR pipeline decodes a CTC model's ids (its special tokens are
    not skipped: none is special here, so transformers.js's decoding skips none either). The decoder's ``cleanup``
    is on: without it, transformers.js (as the ``tokenizers`` package) keeps the delimiter instead of a space; with
    it, it also joins `` 's``, `` n't``, `` .`` and the like, as Python does only with
    ``clean_up_tokenization_spaces``."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    unk, delimiter = settings.get("unk_token", "<unk>"), settings.get("word_delimiter_token", "|")
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token=unk if unk in vocab else None))
    tokenizer.normalizer = normalizers.Replace(" ", delimiter)  # encoding: a character per token, as Python's
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tokenizer.decoder = decoders.CTC(pad_token=settings.get("pad_token", "<pad>"), word_delimiter_token=delimiter,
                                     cleanup=True)
    return json.loads(tokenizer.to_str())
