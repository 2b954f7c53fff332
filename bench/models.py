"""Benchmark models: ``MODELS`` maps a name to a factory returning ``(model, args)``.

Every factory builds its model in eval mode with a fixed seed and random weights (nothing is
downloaded), so tests can import ``MODELS`` and reuse the same cases.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from onnxport.demo import ModelWithCond, SmallCNN

__all__ = ["MODELS"]

Factory = Callable[[], tuple[torch.nn.Module, tuple[Any, ...]]]


def _seed() -> None:
    torch.manual_seed(0)


def mlp() -> tuple[torch.nn.Module, tuple[Any, ...]]:
    _seed()
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 128), torch.nn.GELU(), torch.nn.Linear(128, 10)
    )
    return model.eval(), (torch.randn(8, 64),)


def cnn() -> tuple[torch.nn.Module, tuple[Any, ...]]:
    _seed()
    return SmallCNN().eval(), (torch.randn(2, 3, 32, 32),)


def transformer() -> tuple[torch.nn.Module, tuple[Any, ...]]:
    _seed()
    layer = torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, dropout=0.0, batch_first=True)
    # enable_nested_tensor=False: the nested-tensor fast path is an eager-only optimisation.
    model = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
    return model.eval(), (torch.randn(2, 16, 64),)


def seed_cond() -> tuple[torch.nn.Module, tuple[Any, ...]]:
    _seed()
    return ModelWithCond().eval(), (torch.randn(5, 3),)


def _token_inputs(vocab: int, batch: int = 2, seq: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    input_ids = torch.randint(0, vocab, (batch, seq), dtype=torch.int64)
    attention_mask = torch.ones(batch, seq, dtype=torch.int64)
    attention_mask[1, seq - 4 :] = 0  # one padded row, so the mask really matters
    return input_ids, attention_mask


def tiny_bert() -> tuple[torch.nn.Module, tuple[Any, ...]]:
    from transformers import BertConfig, BertModel

    _seed()
    config = BertConfig(
        vocab_size=1000,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = BertModel(config).eval()
    return _ReturnTuple(model), _token_inputs(config.vocab_size)


def tiny_gpt2() -> tuple[torch.nn.Module, tuple[Any, ...]]:
    from transformers import GPT2Config, GPT2LMHeadModel

    _seed()
    config = GPT2Config(
        vocab_size=1000,
        n_positions=64,
        n_embd=64,
        n_layer=2,
        n_head=4,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,  # the defaults (50256) lie outside this small vocabulary
        eos_token_id=0,
        use_cache=False,
    )
    model = GPT2LMHeadModel(config).eval()
    return _ReturnTuple(model), _token_inputs(config.vocab_size)


class _ReturnTuple(torch.nn.Module):
    """Calls a transformers model with ``use_cache=False`` and returns its outputs as a plain tuple.

    Both exporters accept ModelOutput, but a tuple keeps the eager reference and the ONNX outputs
    trivially comparable.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, return_dict=True)
        return tuple(v for v in out.values() if isinstance(v, torch.Tensor))


MODELS: dict[str, Factory] = {
    "mlp": mlp,
    "cnn": cnn,
    "transformer": transformer,
    "seed_cond": seed_cond,
    "tiny_bert": tiny_bert,
    "tiny_gpt2": tiny_gpt2,
}
