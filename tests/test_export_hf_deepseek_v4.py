"""DeepSeek V4 (transformers 5's ``deepseek_v4``): its cache layers keep compressor state (tokens awaiting a full
window, the entries compressed so far, their count) that onnxport does not name. Its bare model's features are
exported without a cache; its causal LM is refused, saying what the cache holds (for transformers.js, what
transformers.js feeds instead)."""

from __future__ import annotations

import pytest
import torch

import onnxport
from onnxport.hf import export_hf
from onnxport.versions import torch_at_least
from tests.hf_dirs import save_spread

transformers = pytest.importorskip("transformers")
if not hasattr(transformers, "DeepseekV4Config"):
    pytest.skip("this transformers has no DeepSeek V4", allow_module_level=True)

# One heavily compressed layer and one compressed sparse one; windows of 4 and 16 tokens, so that the prompt and the
# tokens generated after it close some.
TINY = dict(vocab_size=99, hidden_size=32, moe_intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
            head_dim=8, q_lora_rank=16, qk_rope_head_dim=2, n_routed_experts=4, num_experts_per_tok=2,
            o_groups=2, o_lora_rank=16, index_n_heads=2, index_head_dim=8, index_topk=64, sliding_window=16,
            layer_types=["heavily_compressed_attention", "compressed_sparse_attention"],
            mlp_layer_types=["hash_moe", "moe"],
            compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 16},
            bos_token_id=1, eos_token_id=2, pad_token_id=0)


def test_the_bare_models_features_are_exported_without_its_cache(tmp_path) -> None:
    """With use_cache on (its config's default), DeepseekV4Model's forward builds a cache it returns; features need
    none, and the export gives last_hidden_state alone, as eager PyTorch computes it."""
    directory = str(tmp_path / "dsv4")
    torch.manual_seed(0)
    save_spread(transformers.DeepseekV4Model(transformers.DeepseekV4Config(**TINY)), directory)
    if not torch_at_least("2.11"):  # torch 2.10's capture fails onnxruntime at one token (a Reshape): refused, not
        # written; a lead of its own
        with pytest.raises(onnxport.VerificationError, match="input_ids_dim1=1"):
            export_hf(directory, "feature-extraction", tmp_path / "out")
        assert not (tmp_path / "out" / "model.onnx").exists()
        return
    prog = export_hf(directory, "feature-extraction", tmp_path / "out")
    assert prog.report.verification.ok
    assert [v.name for v in prog.model.graph.outputs] == ["last_hidden_state"]


@pytest.mark.parametrize("engine", [None, "transformers.js"])
def test_the_causal_lm_is_refused_saying_what_its_cache_holds(engine, tmp_path) -> None:
    """transformers.js feeds the cache by names of its own, without the compressed entries: refused before anything
    is loaded. For onnxruntime, the layers' compressor state (buffer_kv ...) has no name in onnxport: refused, naming
    it, before capture."""
    directory, out = str(tmp_path / "dsv4"), tmp_path / "out"
    torch.manual_seed(0)
    save_spread(transformers.DeepseekV4ForCausalLM(transformers.DeepseekV4Config(**TINY)), directory)
    if engine is not None:
        with pytest.raises(onnxport.InvalidInputError, match="transformers.js cannot run a deepseek_v4") as err:
            export_hf(directory, "text-generation", out, target=engine)
        assert "past_compressor" in str(err.value) and "compressed_kv" in str(err.value)
        assert "feature-extraction" in err.value.fix and "onnxruntime-genai" not in err.value.fix  # refused there too
        assert not out.exists()
        return
    with pytest.raises(onnxport.InvalidInputError, match="DeepseekV4ForCausalLM's cache cannot be") as err:
        export_hf(directory, "text-generation", out)
    assert "layer 0 is a DeepseekV4HCACache that holds tensors in 'buffer_kv', 'buffer_gate', 'compressed_kv'" \
        in str(err.value)
    assert "feature-extraction" in err.value.fix and not (out / "model.onnx").exists()
