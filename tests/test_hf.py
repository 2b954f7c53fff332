"""Tiny Hugging Face models built from small configs with random weights (no downloads)."""

from __future__ import annotations

import pytest
import torch

import onnxport

transformers = pytest.importorskip("transformers")


def _ids(vocab: int, batch: int = 2, seq: int = 8) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(0))


def test_bert_encoder() -> None:
    config = transformers.BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64,
    )
    model = transformers.BertModel(config).eval()
    ids = _ids(100)
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0  # padding in the second sequence exercises the attention mask
    prog = onnxport.export(model, (ids,), {"attention_mask": mask})
    assert prog.report.verification.ok
    out = prog(ids, attention_mask=mask)
    expected = model(ids, attention_mask=mask)
    torch.testing.assert_close(out["last_hidden_state"], expected.last_hidden_state, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(out["pooler_output"], expected.pooler_output, atol=1e-4, rtol=1e-4)


def test_gpt2_lm_head_without_cache() -> None:
    config = transformers.GPT2Config(
        vocab_size=100, n_embd=32, n_layer=2, n_head=2, n_positions=64, use_cache=False,
        bos_token_id=0, eos_token_id=0,
    )
    model = transformers.GPT2LMHeadModel(config).eval()
    ids = _ids(100)
    prog = onnxport.export(model, (ids,), {"use_cache": False})
    assert prog.report.verification.ok
    logits = prog(ids, use_cache=False)["logits"]
    torch.testing.assert_close(logits, model(ids, use_cache=False).logits, atol=1e-4, rtol=1e-4)
