"""Tiny Hugging Face models built from small configs with random weights (no downloads)."""

from __future__ import annotations

import pytest
import torch

import onnxport
from tests import tiny_models

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.transformers  # run on the second pinned transformers too (make test-transformers)


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


def _right_padded(vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = _ids(vocab, batch=2, seq=8)
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    return ids, mask


def test_gpt2_dynamic_right_padded_verifies_at_other_sizes() -> None:
    """Regression: other sizes once got random masks (rows of zeros) and mismatched batches: a false alarm."""
    config = transformers.GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=2, n_positions=64, use_cache=False)
    model = transformers.GPT2LMHeadModel(config).eval()
    ids, mask = _right_padded(100)
    dyn = {0: torch.export.Dim.DYNAMIC, 1: torch.export.Dim.DYNAMIC}
    prog = onnxport.export(model, (ids,), {"attention_mask": mask, "use_cache": False},
                           dynamic_shapes={"input_ids": dyn, "attention_mask": dyn, "use_cache": None})
    assert prog.report.verification.ok and len(prog.report.sizes_verified) == 2  # batch, seq: one set each
    ids3, mask3 = _ids(100, batch=3, seq=5), torch.ones(3, 5, dtype=torch.int64)
    mask3[0, 3:] = 0
    torch.testing.assert_close(prog(ids3, attention_mask=mask3, use_cache=False)["logits"],
                               model(ids3, attention_mask=mask3, use_cache=False).logits, atol=1e-4, rtol=1e-4)


def test_llama_autograd_on_dynamic_right_padded() -> None:
    """Called as users call an exporter: autograd on (Llama's rotary embedding runs under no_grad)."""
    model = tiny_models.llama(seed=None, max_position_embeddings=64)
    ids, mask = _right_padded(100)
    dyn = {0: torch.export.Dim.DYNAMIC, 1: torch.export.Dim.DYNAMIC}
    assert torch.is_grad_enabled()
    prog = onnxport.export(model, (ids,), {"attention_mask": mask, "use_cache": False},
                           dynamic_shapes={"input_ids": dyn, "attention_mask": dyn, "use_cache": None})
    assert prog.report.verification.ok and prog.report.sizes_verified


def test_clip_dynamic_right_padded_verifies_at_other_sizes() -> None:
    config = transformers.CLIPConfig(
        text_config={"vocab_size": 100, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                     "num_attention_heads": 2, "max_position_embeddings": 32},
        vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
                       "image_size": 32, "patch_size": 8},
        projection_dim=16,
    )
    model = transformers.CLIPModel(config).eval()
    ids, mask = _right_padded(100)
    pixels = torch.randn(2, 3, 32, 32)
    dyn = {0: torch.export.Dim.DYNAMIC, 1: torch.export.Dim.DYNAMIC}
    prog = onnxport.export(model, (), {"input_ids": ids, "attention_mask": mask, "pixel_values": pixels},
                           dynamic_shapes={"input_ids": dyn, "attention_mask": dyn, "pixel_values": {0: torch.export.Dim.DYNAMIC}})
    assert prog.report.verification.ok and prog.report.sizes_verified
