"""A tiny transformers Llama with random weights (no downloads), for the tests that export or quantize one.

``llama_config`` gives the small sizes, ``llama`` the model; each test passes what it needs otherwise (its
vocabulary, width, depth, ``tie_word_embeddings``, ``attn_implementation``...) as overrides. transformers
is imported only when a model is built: files that skip without it can import this module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from transformers import LlamaConfig, LlamaForCausalLM

SIZES: dict[str, Any] = {"vocab_size": 100, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                         "num_attention_heads": 4, "num_key_value_heads": 2}


def llama_config(**overrides: Any) -> LlamaConfig:
    """``SIZES`` (grouped key/value heads: 4 query heads, 2 kv heads) updated by ``overrides``."""
    import transformers

    return transformers.LlamaConfig(**{**SIZES, **overrides})


def llama(seed: int | None = 0, **overrides: Any) -> LlamaForCausalLM:
    """A ``LlamaForCausalLM`` of ``llama_config(**overrides)`` in eval mode, its weights drawn after
    ``torch.manual_seed(seed)`` (``None``: from the global generator as it is)."""
    import transformers

    if seed is not None:
        torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(llama_config(**overrides)).eval()
