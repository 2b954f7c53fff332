"""``export_hf`` without loading the weights (``streaming=True``, and the default for checkpoints too big to load):
the ONNX model matches transformers' on the same checkpoint, keeps the checkpoint's dtype, and copies the weights
from the safetensors files, never into memory; its report says on its first line that it is not verified. Left
to choose, export_hf loads and verifies what fits in memory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import onnx_ir as ir
import pytest
import torch

import onnxport
from onnxport.hf import cache_argument, export_hf
from tests.hf_dirs import save_spread, write_llama

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.transformers  # run on the second pinned transformers too (make test-transformers)
safetensors = pytest.importorskip("safetensors.torch")
_ONNX = {torch.float32: ir.DataType.FLOAT, torch.float16: ir.DataType.FLOAT16, torch.bfloat16: ir.DataType.BFLOAT16}


def _empty_cache(config: object, batch: int, dtype: torch.dtype) -> object:
    cache = transformers.DynamicCache(config=config)
    heads, size = config.num_key_value_heads, config.hidden_size // config.num_attention_heads
    for layer in range(config.num_hidden_layers):
        cache.update(torch.zeros(batch, heads, 0, size, dtype=dtype), torch.zeros(batch, heads, 0, size, dtype=dtype),
                     layer)
    return cache


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_streamed_llama_matches_transformers_in_the_checkpoint_dtype(dtype: torch.dtype, tmp_path) -> None:
    directory = str(tmp_path / "llama")
    write_llama(directory, dtype)
    prog = export_hf(directory, "text-generation", tmp_path / "out", dtype="auto", streaming=True)
    assert prog.report.verification is None
    assert str(prog.report).splitlines()[0].startswith("onnxport export report: NOT VERIFIED (the weights were "
                                                       "streamed from the safetensors files, never loaded")
    weights = {v.name: v.dtype for v in prog.model.graph.initializers.values() if "rotary" not in v.name}
    assert set(weights.values()) == {_ONNX[dtype]}  # the checkpoint's dtype (auto), not float32
    model = transformers.AutoModelForCausalLM.from_pretrained(directory).eval()  # loaded as transformers loads it
    assert model.dtype == dtype
    ids = torch.tensor([[5, 17, 33, 8, 61, 2], [9, 40, 3, 3, 77, 12]])
    positions = torch.arange(6).expand(2, 6)
    got = prog(input_ids=ids, attention_mask=torch.ones_like(ids), position_ids=positions,
               **{cache_argument(model): _empty_cache(model.config, 2, dtype)})["logits"]
    with torch.no_grad():
        expected = model(input_ids=ids).logits
    tol = {torch.float32: 1e-4, torch.float16: 2e-3, torch.bfloat16: 1e-2}[dtype]
    torch.testing.assert_close(got.float(), expected.float(), atol=tol, rtol=tol)


def test_weights_are_copied_from_the_checkpoint_never_held(tmp_path) -> None:
    directory = str(tmp_path / "llama")
    write_llama(directory, tie_word_embeddings=True)
    prog = export_hf(directory, "text-generation", tmp_path / "out", streaming=True)
    checkpoint = os.path.join(directory, "model.safetensors")
    for value in prog.model.graph.initializers.values():
        if "rotary" in value.name:  # computed by the model, not in the checkpoint
            continue
        assert isinstance(value.const_value, ir.LazyTensor), value.name
        source = value.const_value.raw()  # what a read would give: the checkpoint's bytes, memory-mapped
        if _read_by_matmul(value):  # a linear layer's weight, stored [in, out]: transposed from the checkpoint
            source = source.raw.raw()
        assert isinstance(source, ir.ExternalTensor) and source.path == checkpoint, value.name
    saved = ir.load(str(tmp_path / "out" / "model.onnx"))
    expected = safetensors.load_file(checkpoint)
    compared = 0
    for name, value in saved.graph.initializers.items():
        key = "model.embed_tokens.weight" if name == "lm_head.weight" else name  # tied: one tensor, one name
        if key in expected:
            array = value.const_value.numpy()
            np.testing.assert_array_equal(array.T if _read_by_matmul(value) else array, expected[key].numpy())
            compared += 1
    assert compared == len(expected)


def _read_by_matmul(value: ir.Value) -> bool:
    return any(use.node.op_type == "MatMul" and use.idx == 1 for use in value.uses())


_PEAK = textwrap.dedent("""
    import json, sys
    import onnxport

    def memory():
        with open("/proc/self/status") as f:
            return {l.split(":")[0]: int(l.split()[1]) * 1024 for l in f if l.startswith(("VmRSS", "VmHWM"))}

    small, big, out = sys.argv[1:4]
    onnxport.export_hf(small, "text-generation", out + "-warm", streaming=True)  # torch's lazy imports and caches, once
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak RSS restarts from the current RSS
    before = memory()["VmRSS"]
    onnxport.export_hf(big, "text-generation", out, streaming=True)
    print(json.dumps(memory()["VmHWM"] - before))
""")


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux's /proc peak-RSS reset")
def test_peak_memory_of_a_streamed_export_stays_far_below_the_weights(tmp_path) -> None:
    small, big = str(tmp_path / "small"), str(tmp_path / "big")
    write_llama(small)
    # 1 layer with a large vocabulary: 131 MB of weights, almost all of them two tensors.
    write_llama(big, vocab_size=64000, hidden_size=256, intermediate_size=512, num_hidden_layers=1,
                tie_word_embeddings=False)
    weights = os.path.getsize(os.path.join(big, "model.safetensors"))
    done = subprocess.run([sys.executable, "-c", _PEAK, small, big, str(tmp_path / "out")], capture_output=True,
                          text=True, check=False, cwd=os.path.dirname(os.path.dirname(__file__)))
    assert done.returncode == 0, done.stderr[-2000:]
    peak = json.loads(done.stdout.strip().splitlines()[-1])
    # Measured: about 4 MB; loading the weights would cost at least their 131 MB.
    assert peak < 0.25 * weights, f"peak RSS beyond the RSS before the export: {peak / 1e6:.1f} MB"


def test_sharded_checkpoint_with_a_head_exports_its_base_model(tmp_path) -> None:
    """A text-classification checkpoint (weights named ``bert.*``, in shards) exported for feature-extraction:
    the prefix goes as transformers drops it, and the unused head is left alone."""
    directory = str(tmp_path / "bert")
    config = transformers.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64)
    torch.manual_seed(0)
    transformers.BertForSequenceClassification(config).save_pretrained(directory, max_shard_size="20KB")
    assert os.path.isfile(os.path.join(directory, "model.safetensors.index.json"))
    prog = export_hf(directory, "feature-extraction", tmp_path / "out", streaming=True)
    model = transformers.AutoModel.from_pretrained(directory).eval()
    ids = torch.randint(3, 99, (3, 11), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids)
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(prog(input_ids=ids, attention_mask=mask)["last_hidden_state"], expected,
                               atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("streaming", [True, None])
def test_a_checkpoint_lacking_a_weight_is_refused_naming_it(streaming, tmp_path) -> None:
    directory = str(tmp_path / "llama")
    write_llama(directory)
    path = os.path.join(directory, "model.safetensors")
    tensors = safetensors.load_file(path)
    del tensors["model.layers.1.mlp.up_proj.weight"]
    safetensors.save_file(tensors, path, metadata={"format": "pt"})
    with pytest.raises(onnxport.InvalidInputError, match=r"lacks 1 weights .*layers\.1\.mlp\.up_proj\.weight") as err:
        export_hf(directory, "text-generation", tmp_path / "out", streaming=streaming)
    assert "its head included" in err.value.fix
    assert not os.path.exists(tmp_path / "out")


def test_a_checkpoint_without_safetensors_is_loaded_and_only_streaming_refuses_it(tmp_path) -> None:
    directory = str(tmp_path / "llama")
    model = write_llama(directory)
    os.remove(os.path.join(directory, "model.safetensors"))
    torch.save(model.state_dict(), os.path.join(directory, "pytorch_model.bin"))
    with pytest.raises(onnxport.InvalidInputError, match="no safetensors weights") as err:
        export_hf(directory, "text-generation", tmp_path / "streamed", streaming=True)
    assert "streaming=False" in err.value.fix
    prog = export_hf(directory, "text-generation", tmp_path / "out")  # left to choose: loaded from the .bin file
    assert prog.report.verification.ok and not prog.report.unverified


def test_left_to_choose_it_loads_what_fits_and_streams_what_does_not(tmp_path, monkeypatch) -> None:
    from onnxport import memory

    directory = str(tmp_path / "llama")
    write_llama(directory)
    prog = export_hf(directory, "text-generation", tmp_path / "loaded")
    assert prog.report.verification.ok and str(prog.report).splitlines()[0] == "onnxport export report"
    weights = os.path.getsize(os.path.join(directory, "model.safetensors"))
    monkeypatch.setattr(memory, "available_memory", lambda: 2 * weights + memory.SPARE)  # not three times over
    prog = export_hf(directory, "text-generation", tmp_path / "streamed")
    assert prog.report.verification is None
    first = str(prog.report).splitlines()[0]
    assert first.startswith("onnxport export report: NOT VERIFIED (the weights were streamed") and "GiB free" in first
    monkeypatch.setattr(memory, "available_memory", lambda: 4 * weights + memory.SPARE)
    assert export_hf(directory, "text-generation", tmp_path / "fits").report.verification.ok


def test_seq2seq_tasks_refuse_streaming(tmp_path) -> None:
    directory = str(tmp_path / "llama")
    write_llama(directory)
    with pytest.raises(onnxport.InvalidInputError, match="exported with their weights loaded"):
        export_hf(directory, "text2text-generation", tmp_path / "out", streaming=True)


@pytest.mark.sweep  # the API path is tested in make test
def test_cli_verifies_by_default_and_says_when_it_streamed(tmp_path, capsys) -> None:
    from onnxport.cli import main

    directory = str(tmp_path / "llama")
    write_llama(directory)
    assert main(["export-hf", directory, "-o", str(tmp_path / "loaded")]) == 0
    assert "verification (onnxruntime vs eager PyTorch): passed" in capsys.readouterr().out
    assert main(["export-hf", directory, "-o", str(tmp_path / "streamed"), "--streaming"]) == 0
    assert "NOT VERIFIED: the weights were streamed from the safetensors files, never loaded (streaming=True)" in (
        capsys.readouterr().out)
    with pytest.raises(SystemExit):
        main(["export-hf", directory, "-o", str(tmp_path / "both"), "--streaming", "--in-memory"])


def _write_moe(directory: str, kind: str) -> object:
    """A random Mixtral or Qwen2-MoE saved as save_pretrained saves it: one tensor per expert, which transformers
    merges into one per layer when it loads the checkpoint (Qwen2-MoE's shared-expert gate is a Linear(K, 1))."""

    torch.manual_seed(0)
    sizes = dict(vocab_size=99, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=128, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    if kind == "mixtral":
        model = transformers.MixtralForCausalLM(transformers.MixtralConfig(**sizes, num_local_experts=4,
                                                                           num_experts_per_tok=2))
    else:
        model = transformers.Qwen2MoeForCausalLM(transformers.Qwen2MoeConfig(
            **sizes, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24, shared_expert_intermediate_size=40))
    return save_spread(model, directory)


@pytest.mark.parametrize("kind", ["mixtral", pytest.param("qwen2_moe", marks=pytest.mark.sweep)])
def test_experts_transformers_merges_on_load_are_merged_as_they_stream(kind: str, tmp_path) -> None:
    from tests.hf_dirs import PROMPT, genai_greedy

    directory = str(tmp_path / kind)
    _write_moe(directory, kind)
    keys = safetensors.load_file(os.path.join(directory, "model.safetensors"))
    assert any(".layers.0." in key and ".experts.3." in key for key in keys)  # per expert in the file, merged in the model
    prog = export_hf(directory, "text-generation", tmp_path / "out", streaming=True)
    assert prog.report.unverified
    model = transformers.AutoModelForCausalLM.from_pretrained(directory).eval()
    merged = model.model.layers[1].mlp.experts.gate_up_proj.detach()
    saved = {v.name: v for v in ir.load(str(tmp_path / "out" / "model.onnx")).graph.initializers.values()}
    stored = saved["model.layers.1.mlp.experts.gate_up_proj"].const_value.numpy()
    np.testing.assert_array_equal(stored.reshape(merged.shape) if stored.size == merged.numel() else stored,
                                  merged.numpy())
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        expected = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=False)
    assert genai_greedy(tmp_path / "out")[0] == expected[0].tolist()


@pytest.mark.sweep
def test_a_model_whose_masks_read_tensor_values_streams(tmp_path) -> None:
    """mBART's decoder asks whether its cache offset is 0 before building a mask: on the meta device (the run that
    gives the cache's shapes) there is no value to read, and the run takes the path it takes under torch.export."""
    from tests.hf_dirs import PROMPT, genai_greedy

    directory = str(tmp_path / "mbart")
    torch.manual_seed(0)
    config = transformers.MBartConfig(vocab_size=99, d_model=32, decoder_layers=2, decoder_attention_heads=4,
                                      decoder_ffn_dim=64, encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=64,
                                      max_position_embeddings=64, bos_token_id=1, eos_token_id=2, pad_token_id=0,
                                      decoder_start_token_id=2, forced_eos_token_id=None, is_decoder=True,
                                      is_encoder_decoder=False)
    model = save_spread(transformers.MBartForCausalLM(config), directory)
    export_hf(directory, "text-generation", tmp_path / "out", streaming=True)
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        expected = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=False)
    assert genai_greedy(tmp_path / "out")[0] == expected[0].tolist()
