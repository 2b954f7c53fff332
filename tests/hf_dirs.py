"""Local transformers model directories for tools that read one (export_hf, onnxruntime-genai's builder)."""

from __future__ import annotations

import json
import os


def config_only(parent: os.PathLike[str], config: str) -> os.PathLike[str]:
    """``parent/model`` holding just a ``config.json`` of the text given (bad ones included)."""
    directory = parent / "model"
    directory.mkdir()
    (directory / "config.json").write_text(config)
    return directory


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


def save_spread(model: object, directory: str, vocab_size: int = 99) -> object:
    """``model`` with every weight drawn anew from N(0, 0.2) (greedy tokens that do not turn on rounding), saved in
    ``directory`` with a tokenizer of ``vocab_size``; returns it, in eval mode."""
    import torch

    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0, 0.2)
    model.eval().save_pretrained(directory)
    write_tokenizer(directory, vocab_size)
    return model


TINY_LLAMA = dict(vocab_size=99, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=128, bos_token_id=1, eos_token_id=2, pad_token_id=0)


def write_llama(directory: str, dtype: object = None, seed: int = 0, **sizes: object) -> object:
    """A random ``LlamaForCausalLM`` (``TINY_LLAMA`` updated by ``sizes``) saved in ``dtype`` with a tokenizer;
    returns the model as saved."""
    import torch
    import transformers

    torch.manual_seed(seed)
    config = transformers.LlamaConfig(**{**TINY_LLAMA, **sizes})
    model = transformers.LlamaForCausalLM(config).eval()
    if dtype is not None:
        model = model.to(dtype)
    model.save_pretrained(directory)
    write_tokenizer(directory, config.vocab_size)
    return model


# The prompt and the number of new tokens the greedy-generation tests compare on.
PROMPT = [1, 5, 17, 33, 8]
NEW_TOKENS = 8


def genai_greedy(folder: os.PathLike[str]) -> tuple[list[int], object]:
    """onnxruntime-genai's greedy tokens for PROMPT from ``folder``, and its logits of the first new token."""
    import numpy as np
    import pytest

    og = pytest.importorskip("onnxruntime_genai")
    model = og.Model(str(folder))
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(PROMPT) + NEW_TOKENS, do_sample=False)
    generator = og.Generator(model, params)
    generator.append_tokens(np.array([PROMPT], dtype=np.int32))
    first = np.array(generator.get_logits(), dtype=np.float64).reshape(-1)
    while not generator.is_done():
        generator.generate_next_token()
    return [int(t) for t in generator.get_sequence(0)], first


def eager_greedy(model: object) -> tuple[list[int], object]:
    """transformers' greedy tokens for PROMPT (NEW_TOKENS new ones), and its logits of the first new token."""
    import torch

    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, -1].double().numpy()
    return model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False)[0].tolist(), logits


def edit_config(directory: str, **changes: object) -> None:
    """Edit ``directory``'s config.json as a checkpoint saved another way has it: each key set to its value, or
    removed where the value is None."""
    path = os.path.join(directory, "config.json")
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
