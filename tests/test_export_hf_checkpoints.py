"""export-hf on checkpoints as users save them: configs with ``"use_cache": false`` or a pad id, GPT-2 and
Llama saved with ``save_pretrained`` (sharded, eos lists, either dtype key, bfloat16 weights), ``dtype=``, and
Hub ids read through an offline Hub cache; latent attention's cache of two widths, a decoder vocabulary of its
own, a hybrid cache, a model without a cache, token ids torch.export fixes; the folder runs in onnxruntime-genai
and generates transformers' greedy tokens. Tiny random models, nothing downloaded. The loaded exports and most variants are a ``sweep``
(``make test-sweep``)."""

from __future__ import annotations

import pytest
import torch

import onnxport
from onnxport.hf import export_hf
from tests.hf_dirs import NEW_TOKENS, PROMPT, edit_config, genai_greedy, save_spread, write_tokenizer

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.transformers


def write_gpt2(directory: str, **config: object) -> torch.nn.Module:
    torch.manual_seed(0)
    settings = dict(vocab_size=99, n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=1, eos_token_id=2)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**{**settings, **config})).eval()
    model.save_pretrained(directory)
    write_tokenizer(directory, 99)
    return model


def greedy(model: torch.nn.Module) -> list[int]:
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS, do_sample=False,
                              use_cache=True)[0].tolist()


# The streamed exports in make test (no verification: quicker), the loaded ones (export-hf's default for a
# checkpoint that fits in memory) in the sweep (make test-sweep).
STREAMED = [True, pytest.param(False, marks=pytest.mark.sweep)]


@pytest.mark.parametrize("streaming", STREAMED)
@pytest.mark.parametrize("config", [{"use_cache": False}, {"pad_token_id": 0}, {"pad_token_id": 0, "use_cache": False}],
                         ids=["no-cache", "pad-id", "both"])
def test_text_generation_of_checkpoints_saved_as_users_save_them(config, streaming, tmp_path) -> None:
    """``"use_cache": false`` (fine-tuned checkpoints are saved so): the model still takes and returns its cache.
    A pad id: the streamed export's run on meta tensors does not read input_ids for transformers' warning."""
    directory, out = str(tmp_path / "gpt2"), tmp_path / "out"
    model = write_gpt2(directory, **config)
    prog = export_hf(directory, "text-generation", out, streaming=streaming)
    outputs = [o.name for o in prog.model.graph.outputs]
    assert outputs == ["logits", *(f"present.{i}.{kv}" for i in range(2) for kv in ("key", "value"))]
    assert [i.name for i in prog.model.graph.inputs][-4:] == [f"past_key_values.{i}.{kv}" for i in range(2)
                                                              for kv in ("key", "value")]
    tokens, _ = genai_greedy(out)
    assert tokens == greedy(model)


@pytest.mark.parametrize("variant", ["sharded", *(pytest.param(v, marks=pytest.mark.sweep) for v in
                                                  ("eos-list", "torch_dtype", "no-dtype", "generation-config"))])
def test_text_generation_of_llama_checkpoint_variants(variant, tmp_path) -> None:
    """Sharded safetensors with their index, a list of end-of-sequence ids, the dtype under its older key
    (``torch_dtype``) or none, a generation_config.json of its own: each folder generates transformers' tokens."""
    import os

    from tests.hf_dirs import TINY_LLAMA

    directory, out = str(tmp_path / "llama"), tmp_path / "out"
    torch.manual_seed(0)
    sizes = dict(TINY_LLAMA, eos_token_id=[2, 7]) if variant == "eos-list" else TINY_LLAMA
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**sizes)).eval()
    model.save_pretrained(directory, max_shard_size="20KB" if variant == "sharded" else "5GB")
    write_tokenizer(directory, 99)
    if variant == "sharded":
        assert "model.safetensors.index.json" in os.listdir(directory)
    if variant == "torch_dtype":
        edit_config(directory, dtype=None, torch_dtype="float32")
    if variant == "no-dtype":
        edit_config(directory, dtype=None, torch_dtype=None)
    if variant == "generation-config":
        transformers.GenerationConfig(bos_token_id=1, eos_token_id=[2, 9], pad_token_id=0, do_sample=True,
                                      temperature=0.7).save_pretrained(directory)
    export_hf(directory, "text-generation", out)
    tokens, _ = genai_greedy(out)
    assert tokens == greedy(model)


def _llama(directory: str, dtype: torch.dtype) -> torch.nn.Module:
    """A bfloat16 (or float16) Llama checkpoint, and the model it holds in float32 (its weights upcast exactly)."""
    from tests.hf_dirs import write_llama

    return write_llama(directory, dtype=dtype).float()


@pytest.mark.parametrize("streaming", STREAMED)
def test_a_bfloat16_checkpoint_exports_as_float32_by_default(streaming, tmp_path) -> None:
    import onnx_ir as ir

    directory, out = str(tmp_path / "llama"), tmp_path / "out"
    model = _llama(directory, torch.bfloat16)
    prog = export_hf(directory, "text-generation", out, streaming=streaming)
    assert {v.dtype for v in prog.model.graph.initializers.values()} <= {ir.DataType.FLOAT, ir.DataType.INT64}
    assert {v.dtype for v in (*prog.model.graph.inputs, *prog.model.graph.outputs)} <= {ir.DataType.FLOAT,
                                                                                         ir.DataType.INT64}
    if not streaming:
        assert prog.report.verification.ok
    tokens, _ = genai_greedy(out)  # onnxruntime's Python API feeds it from numpy: no bfloat16 input
    assert tokens == greedy(model)
    prog = export_hf(directory, "text-generation", tmp_path / "int4", quantize="int4")  # float32 layers quantize
    assert prog.report.quantization.quantized


def test_dtype_chooses_the_precision_written(tmp_path) -> None:
    import numpy as np
    import onnx_ir as ir

    from tests.hf_dirs import eager_greedy

    directory = str(tmp_path / "llama")
    model = _llama(directory, torch.bfloat16)
    half = export_hf(directory, "text-generation", tmp_path / "fp16", dtype="fp16")
    assert half.model.graph.outputs[0].dtype == ir.DataType.FLOAT16  # logits, and the cache
    assert ir.DataType.FLOAT16 in {v.dtype for v in half.model.graph.initializers.values()}
    _, logits = genai_greedy(tmp_path / "fp16")
    _, expected = eager_greedy(model)
    np.testing.assert_allclose(logits, expected, atol=2e-2 * np.abs(expected).max())
    kept = export_hf(directory, "text-generation", tmp_path / "bf16", dtype="bf16")
    assert ir.DataType.BFLOAT16 in {v.dtype for v in kept.model.graph.initializers.values()}
    with pytest.raises(onnxport.InvalidInputError, match="not a precision export_hf writes"):
        export_hf(directory, "text-generation", tmp_path / "bad", dtype="float8")
    for refused in ("fp16", "auto"):  # auto would keep this checkpoint's bfloat16 in the fp32 file
        with pytest.raises(onnxport.InvalidInputError, match="precisions are its dtypes"):
            export_hf(directory, "text-generation", tmp_path / "bad", dtype=refused, target="transformers.js")
    with pytest.raises(onnxport.InvalidInputError, match="does not apply to a text-to-image pipeline"):
        export_hf(directory, "text-to-image", tmp_path / "bad", dtype="fp16")
    with pytest.raises(onnxport.InvalidInputError, match="image-text-to-text models as float16"):
        export_hf(directory, "image-text-to-text", tmp_path / "bad", dtype="fp16")
    assert not (tmp_path / "bad").exists()


def test_cli_dtype(tmp_path, capsys) -> None:
    import onnx

    from onnxport.cli import main

    directory, out = str(tmp_path / "llama"), tmp_path / "out"
    _llama(directory, torch.bfloat16)
    assert main(["export-hf", directory, "-o", str(out), "--dtype", "fp16", "-q"]) == 0
    logits = onnx.load(str(out / "model.onnx"), load_external_data=False).graph.output[0]
    assert logits.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16
    with pytest.raises(SystemExit):
        main(["export-hf", directory, "-o", str(tmp_path / "bad"), "--dtype", "int3"])
    assert "invalid choice" in capsys.readouterr().err


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """An offline Hugging Face cache holding ``tiny/llama`` (main and a tag) as the Hub's tools leave it."""
    from huggingface_hub import constants

    from tests.hf_dirs import write_llama

    cache = tmp_path / "hub"
    repo = cache / "models--tiny--llama"
    for commit in ("a" * 40, "b" * 40):
        write_llama(str(repo / "snapshots" / commit), seed=0 if commit[0] == "a" else 1)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("a" * 40)
    (repo / "refs" / "v2").write_text("b" * 40)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    return repo


def test_a_hub_id_is_fetched_through_the_hub_cache(hub_cache, tmp_path, capsys) -> None:
    from onnxport.cli import main

    prog = export_hf("tiny/llama", "text-generation", tmp_path / "main")
    tagged = export_hf("tiny/llama", "text-generation", tmp_path / "v2", revision="v2")
    weights = lambda p: {k: v.const_value.numpy() for k, v in p.model.graph.initializers.items()}  # noqa: E731
    main_weights, v2_weights = weights(prog), weights(tagged)
    assert any(not (main_weights[k] == v2_weights[k]).all() for k in main_weights)  # the tag's commit, not main's
    tokens, _ = genai_greedy(tmp_path / "main")
    assert tokens == greedy(transformers.AutoModelForCausalLM.from_pretrained(str(hub_cache / "snapshots" / ("a" * 40))))
    assert main(["export-hf", "tiny/llama", "--task", "auto", "-o", str(tmp_path / "cli"), "-q"]) == 0
    for call, match in [
        (lambda: export_hf("tiny/absent", "text-generation", tmp_path / "bad"), "not in the Hub cache"),
        (lambda: export_hf("tiny/llama", "text-generation", tmp_path / "bad", revision="v9"), "not in the Hub cache"),
        (lambda: export_hf(str(hub_cache), "text-generation", tmp_path / "bad", revision="v2"),
         "applies to a Hub model id"),
    ]:
        with pytest.raises(onnxport.InvalidInputError, match=match):
            call()
    assert not (tmp_path / "bad").exists()


@pytest.mark.sweep
def test_latent_attention_caches_one_head_size_for_onnxruntime_genai(tmp_path) -> None:
    """DeepSeek V3's multi-head latent attention caches its compressed latent as keys (kv_lora_rank wide) and its
    rotary part as values (qk_rope_head_dim wide); onnxruntime-genai allocates one head size for both. The folder's
    cache pads the values to the keys' size, and generates transformers' tokens in onnxruntime-genai."""
    import json

    import onnx_ir as ir

    from tests.hf_dirs import PROMPT

    directory, out = str(tmp_path / "deepseek"), tmp_path / "out"
    torch.manual_seed(0)
    config = transformers.DeepseekV3Config(
        vocab_size=99, hidden_size=32, intermediate_size=64, moe_intermediate_size=16, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=16, q_lora_rank=16, qk_nope_head_dim=8,
        qk_rope_head_dim=4, v_head_dim=8, n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1,
        first_k_dense_replace=1, max_position_embeddings=64, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    model = save_spread(transformers.DeepseekV3ForCausalLM(config), directory)
    prog = export_hf(directory, "text-generation", out)
    assert prog.report.verification.ok
    shapes = {v.name: v.shape for v in prog.model.graph.inputs}
    assert shapes["past_key_values.0.key"][3] == shapes["past_key_values.0.value"][3] == 16
    with open(out / "genai_config.json") as f:
        decoder = json.load(f)["model"]["decoder"]
    assert (decoder["head_size"], decoder["num_key_value_heads"]) == (16, 1)
    assert ir.load(str(out / "model.onnx")).graph.outputs[2].shape[3] == 16  # present.0.value, padded
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        expected = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS, do_sample=False)
    tokens = expected[0].tolist()
    assert tokens[-1] == 2 and genai_greedy(out)[0] == tokens[:-1]  # genai's sequence stops before the eos it drew


@pytest.mark.sweep
def test_a_decoder_vocabulary_of_its_own_is_the_genai_vocabulary(tmp_path) -> None:
    """Marian's decoder has a vocabulary of its own (decoder_vocab_size): genai_config.json's vocab_size is the
    exported logits' width, and onnxruntime-genai runs the folder."""
    import json

    from tests.hf_dirs import PROMPT

    directory, out = str(tmp_path / "marian"), tmp_path / "out"
    torch.manual_seed(0)
    config = transformers.MarianConfig(vocab_size=120, decoder_vocab_size=99, d_model=32, decoder_layers=2,
                                       decoder_attention_heads=4, decoder_ffn_dim=64, encoder_layers=2,
                                       encoder_attention_heads=4, encoder_ffn_dim=64, max_position_embeddings=64,
                                       bos_token_id=1, eos_token_id=2, pad_token_id=0, decoder_start_token_id=0,
                                       forced_eos_token_id=None, is_decoder=True, is_encoder_decoder=False,
                                       share_encoder_decoder_embeddings=False)
    model = transformers.MarianForCausalLM(config).eval()
    model.save_pretrained(directory)
    write_tokenizer(directory, 99)
    export_hf(directory, "text-generation", out)
    with open(out / "genai_config.json") as f:
        assert json.load(f)["model"]["vocab_size"] == 99
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        expected = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS, do_sample=False)
    assert genai_greedy(out)[0] == expected[0].tolist()


@pytest.mark.sweep
def test_a_hybrid_cache_says_genai_cannot_feed_it_and_onnxport_generate_runs_it(tmp_path) -> None:
    """LFM2 caches a convolution state in its conv layers besides the attention layers' keys and values:
    onnxruntime-genai's generic decoder feeds keys and values only, so the report says so, and onnxport.generate
    (onnxruntime) starts those states at zeros and generates transformers' tokens."""
    from tests.hf_dirs import PROMPT

    directory, out = str(tmp_path / "lfm2"), tmp_path / "out"
    torch.manual_seed(0)
    config = transformers.Lfm2Config(vocab_size=99, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                     layer_types=["conv", "full_attention"], bos_token_id=1, eos_token_id=2,
                                     pad_token_id=0)
    model = save_spread(transformers.Lfm2ForCausalLM(config), directory)
    prog = export_hf(directory, "text-generation", out)
    assert prog.report.verification.ok
    assert any("onnxruntime-genai's generic decoder does not feed" in w for w in prog.report.warnings)
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        expected = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS, do_sample=False)
    assert onnxport.generate(str(out / "model.onnx"), ids, max_new_tokens=NEW_TOKENS).tolist() == expected.tolist()


@pytest.mark.parametrize("streaming", STREAMED)
def test_a_bert_style_decoder_caches_its_self_attention_alone(streaming, tmp_path) -> None:
    """A BERT-style decoder (Megatron-BERT, RemBERT, RoCBert) returns an EncoderDecoderCache whose cross-attention
    layers hold nothing: its folder takes and returns the self-attention cache under genai's names, and
    onnxruntime-genai generates transformers' tokens."""
    directory, out = str(tmp_path / "megatron"), tmp_path / "out"
    torch.manual_seed(0)
    config = transformers.MegatronBertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                             intermediate_size=64, is_decoder=True, bos_token_id=1, eos_token_id=2,
                                             pad_token_id=0)
    model = save_spread(transformers.MegatronBertForCausalLM(config), directory)
    prog = export_hf(directory, "text-generation", out, streaming=streaming)
    assert [o.name for o in prog.model.graph.outputs] == ["logits", *(f"present.{i}.{kv}" for i in range(2)
                                                                      for kv in ("key", "value"))]
    tokens, _ = genai_greedy(out)
    assert tokens == greedy(model)


@pytest.mark.parametrize("streaming", STREAMED)
def test_a_config_the_auto_class_does_not_map_loads_with_the_class_config_json_names(streaming, tmp_path) -> None:
    """MllamaForCausalLM saves a MllamaTextConfig, which AutoModelForCausalLM does not map: the class that
    config.json's ``architectures`` names loads it, and onnxruntime-genai generates transformers' tokens."""
    directory, out = str(tmp_path / "mllama"), tmp_path / "out"
    torch.manual_seed(0)
    config = transformers.MllamaTextConfig(vocab_size=99, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                           num_attention_heads=4, num_key_value_heads=2, cross_attention_layers=[],
                                           bos_token_id=1, eos_token_id=2, pad_token_id=0)
    model = save_spread(transformers.MllamaForCausalLM(config), directory)
    export_hf(directory, "text-generation", out, streaming=streaming)
    tokens, _ = genai_greedy(out)
    assert tokens == greedy(model)


@pytest.mark.parametrize("engine", [None, "transformers.js"])
def test_a_causal_lm_without_a_kv_cache_exports_without_one(engine, tmp_path) -> None:
    """GPT-1 keeps no cache: its folder's model takes the whole sequence at each step and returns logits alone,
    with no genai_config.json (onnxruntime-genai cannot run it; an earlier export's is removed), the report says
    so, and onnxport.generate gives transformers' greedy tokens. transformers.js folders are refused."""
    directory, out = str(tmp_path / "gpt"), tmp_path / "out"
    torch.manual_seed(0)
    config = transformers.OpenAIGPTConfig(vocab_size=99, n_embd=32, n_layer=2, n_head=4, n_positions=64)
    model = save_spread(transformers.OpenAIGPTLMHeadModel(config), directory)
    if engine is not None:
        with pytest.raises(onnxport.InvalidInputError, match="OpenAIGPTLMHeadModel returns no KV cache") as err:
            export_hf(directory, "text-generation", out, target=engine)
        assert "no target" in err.value.fix and not out.exists()
        return
    out.mkdir()
    (out / "genai_config.json").write_text("{}")
    prog = export_hf(directory, "text-generation", out)
    assert prog.report.verification.ok
    assert any("returns no KV cache" in w and "no genai_config.json" in w for w in prog.report.warnings)
    assert [v.name for v in prog.model.graph.inputs] == ["input_ids", "attention_mask", "position_ids"]
    assert [v.name for v in prog.model.graph.outputs] == ["logits"]
    assert not (out / "genai_config.json").exists()
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        expected = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS, do_sample=False)
    assert onnxport.generate(str(out / "model.onnx"), ids, max_new_tokens=NEW_TOKENS).tolist() == expected.tolist()


def test_token_ids_fixed_to_the_example_length_are_refused_before_anything_is_written(tmp_path) -> None:
    """Jamba's Mamba layers make torch.export fix the sequence length to the example's: the folder would take
    prompts of that length only, so export-hf refuses it (it used to pass verification on the example's length)."""
    directory = str(tmp_path / "jamba")
    torch.manual_seed(0)
    config = transformers.JambaConfig(vocab_size=99, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, num_experts=2, expert_layer_period=2,
                                      attn_layer_period=2, attn_layer_offset=1, mamba_d_state=8, mamba_dt_rank=4,
                                      bos_token_id=1, eos_token_id=2, pad_token_id=0)
    transformers.JambaForCausalLM(config).save_pretrained(directory)
    with pytest.raises(onnxport.InvalidInputError, match=r"torch.export fixed the length \d+ of model.onnx's input_ids"):
        export_hf(directory, "text-generation", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_model_that_prepares_its_own_generation_inputs_is_refused(tmp_path) -> None:
    """XLNet generates with a token appended and perm_mask and target_mapping built by transformers: a folder's
    loop would generate other tokens, so export-hf refuses it, naming those inputs, before anything is written."""
    directory = str(tmp_path / "xlnet")
    torch.manual_seed(0)
    transformers.XLNetLMHeadModel(transformers.XLNetConfig(vocab_size=99, d_model=32, n_layer=1, n_head=4,
                                                           d_inner=64)).save_pretrained(directory)
    with pytest.raises(onnxport.InvalidInputError, match="by inputs it prepares itself .*perm_mask, target_mapping"):
        export_hf(directory, "text-generation", tmp_path / "out")
    assert not (tmp_path / "out").exists()
