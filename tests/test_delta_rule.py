"""onnxport's chunked gated delta rule (:mod:`onnxport.hf._delta_rule`), swapped in for transformers' during
the capture of gated delta-net models: the same results as transformers' own on random inputs, and one
graph, captured from a short prompt, right for prompts of several chunks."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.export import Dim

import onnxport
from onnxport.hf import patches
from onnxport.hf._delta_rule import chunk_gated_delta_rule

transformers = pytest.importorskip("transformers")
from transformers.models.qwen3_next import modeling_qwen3_next  # noqa: E402

pytestmark = pytest.mark.transformers


def _qwen3_next() -> torch.nn.Module:
    config = transformers.Qwen3NextConfig(
        vocab_size=128, hidden_size=64, num_hidden_layers=2, intermediate_size=128, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4, num_experts=4,
        num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32,
        layer_types=["linear_attention", "full_attention"],
    )
    return transformers.Qwen3NextModel(config).eval()


@pytest.mark.parametrize("length", [1, 5, 64, 65, 130])
@pytest.mark.parametrize("with_state", [False, True], ids=["zero_state", "initial_state"])
def test_same_as_transformers(length: int, with_state: bool) -> None:
    """Output and final state within 1e-4 of transformers' eager function, two value heads per key head.
    Without the kernel's L2 normalisation the keys are scaled to unit norm on average: raw ``randn`` keys
    (norm 4) make the chunk's triangular system ill-conditioned, and both solvers' float32 rounding reach
    1e-4 there (transformers' triangular solve included, measured against float64)."""
    torch.manual_seed(length)
    batch, k_heads, v_heads, k_dim, v_dim = 2, 2, 4, 16, 8
    query = torch.randn(batch, length, k_heads, k_dim)
    key = torch.randn(batch, length, k_heads, k_dim)
    value = torch.randn(batch, length, v_heads, v_dim)
    g = -torch.nn.functional.softplus(torch.randn(batch, length, v_heads))
    beta = torch.rand(batch, length, v_heads)
    state = torch.randn(batch, v_heads, k_dim, v_dim) if with_state else None
    for l2norm in (True, False):
        if not l2norm:
            query, key = query * k_dim**-0.5, key * k_dim**-0.5
        kwargs = dict(g=g, beta=beta, initial_state=state, output_final_state=True, use_qk_l2norm_in_kernel=l2norm)
        expected = modeling_qwen3_next.torch_chunk_gated_delta_rule(query, key, value, **kwargs)
        got = chunk_gated_delta_rule(query, key, value, **kwargs)
        torch.testing.assert_close(got[0], expected[0], atol=1e-4, rtol=0)
        torch.testing.assert_close(got[1], expected[1], atol=1e-4, rtol=0)
    assert chunk_gated_delta_rule(query, key, value, g=g, beta=beta)[1] is None


def test_swapped_in_and_restored() -> None:
    """The swap covers the module global and a layer attribute holding transformers' function, and is
    undone on exit, an error included."""
    original = modeling_qwen3_next.torch_chunk_gated_delta_rule
    model = torch.nn.Sequential(torch.nn.Linear(1, 1))
    model[0].chunk_gated_delta_rule = original
    with pytest.raises(RuntimeError), patches._scans_swapped(model):
        assert modeling_qwen3_next.torch_chunk_gated_delta_rule is chunk_gated_delta_rule
        assert model[0].chunk_gated_delta_rule is chunk_gated_delta_rule
        raise RuntimeError
    assert modeling_qwen3_next.torch_chunk_gated_delta_rule is original
    assert model[0].chunk_gated_delta_rule is original


def test_dynamic_export_beyond_one_chunk() -> None:
    """Captured from 8 tokens with a dynamic length, the ONNX graph matches eager PyTorch at 100 tokens
    (two chunks, the second partial): the chunks are scanned, not unrolled to the example's count."""
    ort = pytest.importorskip("onnxruntime")
    torch.manual_seed(0)
    model = _qwen3_next()
    inputs = {"input_ids": torch.randint(0, 128, (2, 8)), "attention_mask": torch.ones(2, 8, dtype=torch.long)}
    dynamic = {0: Dim.DYNAMIC, 1: Dim.DYNAMIC}
    prog = onnxport.export(model, (), inputs, dynamic_shapes={"input_ids": dynamic, "attention_mask": dynamic})
    assert modeling_qwen3_next.torch_chunk_gated_delta_rule is not chunk_gated_delta_rule
    session = ort.InferenceSession(prog.model_proto.SerializeToString(), providers=["CPUExecutionProvider"])
    long = {"input_ids": torch.randint(0, 128, (2, 100)), "attention_mask": torch.ones(2, 100, dtype=torch.long)}
    with torch.no_grad():
        expected = model(**long).last_hidden_state.numpy()
    got = session.run(None, {i.name: long[i.name].numpy() for i in session.get_inputs()})[0]
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=0)
