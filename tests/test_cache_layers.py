"""Caches of layers other than attention ones: a Mamba model's conv and recurrent states, a hybrid model's
mix of gated delta-net and attention layers. Exported with verification (on by default: the ONNX outputs
are compared with eager PyTorch's), each state an output of its own, named ``present.{i}.conv_state`` ..."""

from __future__ import annotations

import copy
import inspect

import pytest
import torch
from torch.export import Dim
from torch.utils import _pytree as pytree

import onnxport
from onnxport.hf import cache as hf_cache
from onnxport.hf.signature import cache_of

transformers = pytest.importorskip("transformers")
from transformers.cache_utils import (  # noqa: E402
    DynamicCache,
    DynamicIndexedLayer,
    DynamicLayer,
    LinearAttentionLayer,
)

pytestmark = pytest.mark.transformers

TINY = dict(vocab_size=128, hidden_size=64, num_hidden_layers=2)


def _mamba() -> torch.nn.Module:
    config = transformers.MambaConfig(**TINY, state_size=8, expand=2, conv_kernel=4)
    return transformers.MambaModel(config).eval()


def _qwen3_next() -> torch.nn.Module:
    config = transformers.Qwen3NextConfig(
        **TINY, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
        linear_conv_kernel_dim=4, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
        shared_expert_intermediate_size=32, layer_types=["linear_attention", "full_attention"])
    return transformers.Qwen3NextModel(config).eval()


def _inputs(batch: int = 2, seq: int = 6) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, TINY["vocab_size"], (batch, seq), generator=torch.Generator().manual_seed(0))
    return {"input_ids": ids, "attention_mask": torch.ones(batch, seq, dtype=torch.long)}


def _states(output: object) -> DynamicCache:
    """The cache a forward pass returned, under the name this transformers gives it."""
    found = cache_of(output)
    return found if found is not None else output.cache_params


def _cache_parameter(model: torch.nn.Module) -> str:
    """Mamba's cache argument: ``cache`` from transformers 5.24, ``cache_params`` before."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "cache_params"


def test_mamba_states_are_outputs() -> None:
    model, inputs = _mamba(), _inputs()
    onnx = onnxport.export(model, (), inputs)  # verified against eager
    assert onnx.output_names == ["last_hidden_state", "present.0.conv_state", "present.0.recurrent_state",
                                 "present.1.conv_state", "present.1.recurrent_state"]
    with torch.no_grad():
        eager = _states(model(**inputs))
    got = onnx(**inputs)
    state = _states(got)
    assert [type(layer) for layer in state.layers] == [LinearAttentionLayer] * 2
    for mine, theirs in zip(state.layers, eager.layers):
        assert mine.has_previous_state == theirs.has_previous_state == {0: True}
        assert mine.conv_kernel_size == theirs.conv_kernel_size
        torch.testing.assert_close(mine.conv_states[0], theirs.conv_states[0], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(mine.recurrent_states[0], theirs.recurrent_states[0], rtol=1e-4, atol=1e-5)


def test_mamba_decode_step_takes_states() -> None:
    """A step of one token fed a prompt's states: they are inputs as well as outputs, the batch dynamic."""
    model, prompt = _mamba(), _inputs()
    name = _cache_parameter(model)
    with torch.no_grad():
        states = _states(model(**prompt, use_cache=True))
    step = {"input_ids": prompt["input_ids"][:, -1:], name: states, "use_cache": True}
    spec = hf_cache.auto_spec(states)
    assert spec == [({0: Dim.AUTO}, {0: Dim.AUTO})] * 2  # one per state; their sizes are fixed by the weights
    onnx = onnxport.export(model, (), step, dynamic_shapes={"input_ids": {0: Dim.AUTO}, name: spec, "use_cache": None})
    assert onnx.input_names == ["input_ids", "past_key_values.0.conv_state", "past_key_values.0.recurrent_state",
                                "past_key_values.1.conv_state", "past_key_values.1.recurrent_state"]
    with torch.no_grad():
        eager = model(**{**step, name: copy.deepcopy(states)})
    got = onnx(**{**step, name: copy.deepcopy(states)})
    torch.testing.assert_close(got.last_hidden_state, eager.last_hidden_state, rtol=1e-4, atol=1e-5)
    for mine, theirs in zip(_states(got).layers, _states(eager).layers):
        torch.testing.assert_close(mine.recurrent_states[0], theirs.recurrent_states[0], rtol=1e-4, atol=1e-5)


def test_hybrid_states_and_keys_are_outputs() -> None:
    model, inputs = _qwen3_next(), _inputs()
    onnx = onnxport.export(model, (), inputs)
    assert onnx.output_names == ["last_hidden_state", "present.0.conv_state", "present.0.recurrent_state",
                                 "present.1.key", "present.1.value"]
    with torch.no_grad():
        eager = _states(model(**inputs))
    got = _states(onnx(**inputs))
    assert [type(layer) for layer in got.layers] == [LinearAttentionLayer, DynamicLayer]
    torch.testing.assert_close(got.layers[0].recurrent_states[0], eager.layers[0].recurrent_states[0],
                               rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got.layers[1].keys, eager.layers[1].keys, rtol=1e-4, atol=1e-5)
    assert got.get_seq_length() == inputs["input_ids"].shape[1]


def test_layers_round_trip_with_names() -> None:
    """Flattened and rebuilt: every kind of layer keeps its class, its settings and its tensors; one not filled
    yet flattens to no leaves, and attention layers keep their ``key``/``value`` names."""
    linear = LinearAttentionLayer()
    linear.update_conv_state(torch.randn(1, 6, 3), conv_kernel_size=4)
    linear.update_recurrent_state(torch.randn(1, 6, 5))
    attention = DynamicLayer()
    attention.update(torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4))
    indexed = DynamicIndexedLayer()
    indexed.update(torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4))
    indexed.update_indexer(torch.randn(1, 3, 8))
    cache = DynamicCache()
    cache.layers = [linear, attention, DynamicLayer(), indexed]
    with hf_cache.registered():
        flat, spec = pytree.tree_flatten_with_path(cache)
        rebuilt = pytree.tree_unflatten([leaf for _, leaf in flat], spec)
    names = [path[0].leaf_name(path[1:], output=False) for path, _ in flat]
    assert names == ["past_key_values.0.conv_state", "past_key_values.0.recurrent_state",
                     "past_key_values.1.key", "past_key_values.1.value",
                     "past_key_values.3.key", "past_key_values.3.value", "past_key_values.3.indexer_key"]
    first, second, third, fourth = rebuilt.layers
    assert type(first) is LinearAttentionLayer and first.conv_kernel_size == {0: 4} and first.has_previous_state[0]
    assert first.conv_states[0] is linear.conv_states[0] and first.recurrent_states[0] is linear.recurrent_states[0]
    assert second.keys is attention.keys and rebuilt.get_seq_length() == 3
    assert type(third) is DynamicLayer and not third.is_initialized and third.keys is None
    assert type(fourth) is DynamicIndexedLayer and fourth.is_indexer_initialized
    assert fourth.indexer_keys is indexed.indexer_keys and fourth.indexer_position_ids is None
    with torch.no_grad():  # and they work on as transformers' own would
        assert fourth.update_indexer(torch.randn(1, 1, 8)).shape == (1, 4, 8)


def test_a_sliding_window_cache_beyond_its_window_bounds_the_sequence() -> None:
    """AFMoE's graph holds sequences shorter than its sliding window (torch.export bounds the dim there), and
    beyond the window eager PyTorch's cache drops tokens, which the ONNX model's cache outputs cannot hold:
    verification's check above the bound is skipped as refused, and the report says where the dim stops."""
    torch.manual_seed(0)
    config = transformers.AfmoeConfig(
        **TINY, intermediate_size=64, moe_intermediate_size=32, num_dense_layers=1, num_attention_heads=2,
        num_key_value_heads=2, head_dim=16, num_experts=4, num_experts_per_tok=2, num_shared_experts=1,
        sliding_window=16, layer_types=["sliding_attention", "full_attention"])
    model = transformers.AfmoeModel(config).eval()
    with torch.no_grad():  # spread weights: at the default init the experts' router scores nearly tie
        for p in model.parameters():
            p.normal_(0.0, p[0].numel() ** -0.5) if p.dim() > 1 else p.normal_(1.0, 0.2)
    ids = torch.randint(0, 128, (2, 8))
    dynamic = {0: Dim.DYNAMIC, 1: Dim.DYNAMIC}
    prog = onnxport.export(model, (), {"input_ids": ids, "attention_mask": torch.ones_like(ids)},
                           dynamic_shapes={"input_ids": dynamic, "attention_mask": dynamic})
    assert any("no ONNX form" in run and "sliding-window" in run for run in prog.report.verification.runs)
    assert any("takes sizes up to" in note for note in prog.report.notes), prog.report.notes


def _inkling() -> torch.nn.Module:
    """A tiny Inkling: layers of sliding-window or full attention whose queries, keys and values go through short
    convolutions, their states held beside the keys and values (transformers' LinearAttentionAnd*AttentionLayer)."""
    config = transformers.InklingTextConfig(
        vocab_size=TINY["vocab_size"], hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, swa_num_attention_heads=4, swa_num_key_value_heads=2, swa_head_dim=16,
        sliding_window_size=16, layer_types=["hybrid_sliding", "hybrid"], mlp_layer_types=["dense", "dense"],
        intermediate_size=128, pad_token_id=0)
    torch.manual_seed(0)
    return transformers.InklingForCausalLM(config).eval()




@pytest.mark.sweep  # once per CI: an export and two generations
def test_a_hybrid_text_generation_folder_generates_as_transformers(tmp_path) -> None:
    """export-hf of a model whose layers hold keys, values and conv states (Inkling's): the count of tokens a layer
    has seen is rebuilt from its keys (the present's is symbolic during the capture, and no pytree context may
    hold it), every past input has its present output, and the folder generates transformers' tokens."""
    from onnxport.hf import export_hf

    model = _inkling()
    model.save_pretrained(tmp_path / "model")
    prog = export_hf(str(tmp_path / "model"), "text-generation", str(tmp_path / "out"))
    pasts = [name for name in prog.input_names if name.startswith("past_key_values.")]
    assert "past_key_values.0.conv_state.0" in pasts and "past_key_values.1.key" in pasts
    assert [name.replace("past_key_values.", "present.", 1) for name in pasts] == prog.output_names[1:]
    ids = torch.tensor([[5, 17, 33, 8, 9], [0, 0, 9, 40, 41]])
    mask = (ids != 0).long()
    model.generation_config.eos_token_id = None
    with torch.no_grad():
        expected = model.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False)
    assert onnxport.generate(prog, ids, mask, max_new_tokens=6).tolist() == expected.tolist()
