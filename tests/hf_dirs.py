"""Local transformers model directories for tools that read one (export_hf, onnxruntime-genai's builder)."""

from __future__ import annotations

import json
import os


def write_tokenizer(directory: str, vocab_size: int) -> None:
    """A word-level tokenizer (``<pad>``=0, ``<s>``=1, ``</s>``=2, then ``w3``...) made with the tokenizers
    package and saved as transformers and onnxruntime-genai read it."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, vocab_size)}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(os.path.join(directory, "tokenizer.json"))
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
                   "pad_token": "<pad>"}, f)
