"""Language models with a transformers KV cache: exported once, they serve prefill and decode, and
``onnxport.generate`` in onnxruntime picks the tokens ``model.generate`` picks."""

from __future__ import annotations

import copy
import dataclasses
import types
import warnings
from typing import Any

import pytest
import torch
from torch.utils import _pytree as pytree

import onnxport
from onnxport.hf import cache as hf_cache
from onnxport.hf import cache_argument, cache_of

transformers = pytest.importorskip("transformers")
from transformers import DynamicCache, StaticCache  # noqa: E402

pytestmark = pytest.mark.transformers  # run on the second pinned transformers too (make test-transformers)

TINY = dict(vocab_size=99, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=128)


@dataclasses.dataclass
class LLMCase:
    """A decoder family from a tiny config; ``config`` holds its keyword arguments."""

    name: str
    config: str
    model: str
    kwargs: dict[str, Any]


CASES = [
    LLMCase("llama", "LlamaConfig", "LlamaForCausalLM", dict(TINY, num_key_value_heads=2)),
    LLMCase("qwen2", "Qwen2Config", "Qwen2ForCausalLM", dict(TINY, num_key_value_heads=2)),
    LLMCase("mistral", "MistralConfig", "MistralForCausalLM", dict(TINY, num_key_value_heads=2, sliding_window=None)),
    LLMCase("phi3", "Phi3Config", "Phi3ForCausalLM", dict(TINY, num_key_value_heads=2, pad_token_id=0)),
    LLMCase("gemma", "GemmaConfig", "GemmaForCausalLM", dict(TINY, num_key_value_heads=1, head_dim=8)),
    # Sliding windows shorter than prompt plus generation: the window decides what each token sees.
    LLMCase("gemma2", "Gemma2Config", "Gemma2ForCausalLM", dict(TINY, num_key_value_heads=2, head_dim=8, sliding_window=5)),
    LLMCase("mistral_window", "MistralConfig", "MistralForCausalLM", dict(TINY, num_key_value_heads=2, sliding_window=6)),
    LLMCase("qwen3", "Qwen3Config", "Qwen3ForCausalLM", dict(TINY, num_key_value_heads=2, head_dim=8)),
    LLMCase("falcon", "FalconConfig", "FalconForCausalLM", dict(vocab_size=99, hidden_size=32, num_hidden_layers=2,
                                                                 num_attention_heads=4)),
    LLMCase("gpt_neox", "GPTNeoXConfig", "GPTNeoXForCausalLM", dict(TINY)),
    LLMCase("gpt2", "GPT2Config", "GPT2LMHeadModel", dict(vocab_size=99, n_embd=32, n_layer=2, n_head=4, n_positions=128)),
    LLMCase("opt", "OPTConfig", "OPTForCausalLM", dict(vocab_size=99, hidden_size=32, ffn_dim=64, num_hidden_layers=2,
                                                        num_attention_heads=4, max_position_embeddings=128,
                                                        word_embed_proj_dim=32, pad_token_id=1)),
]
_EXPORTED: dict[str, tuple[torch.nn.Module, onnxport.OnnxProgram]] = {}


def _build(case: LLMCase) -> torch.nn.Module:
    torch.manual_seed(0)
    config = getattr(transformers, case.config)(**case.kwargs)
    model = getattr(transformers, case.model)(config).eval()
    model.generation_config.eos_token_id = None  # eight tokens every time, on both sides
    model.generation_config.pad_token_id = 0
    return model


def _decode_inputs(model: torch.nn.Module, batch: int = 2, past: int = 4, new: int = 3) -> dict[str, Any]:
    """A decode step after a prefill of ``past`` tokens: what the exported model is captured from. The cache
    goes under the name the model's forward takes (``cache`` from transformers 5.24 on)."""
    torch.manual_seed(1)
    prompt = torch.randint(3, 99, (batch, past))
    with torch.no_grad():
        cache = cache_of(model(input_ids=prompt, attention_mask=torch.ones_like(prompt), use_cache=True))
    return {"input_ids": torch.randint(3, 99, (batch, new)), "attention_mask": torch.ones(batch, past + new, dtype=torch.long),
            "position_ids": torch.arange(past, past + new).expand(batch, new), cache_argument(model): cache}


def _exported(case: LLMCase) -> tuple[torch.nn.Module, onnxport.OnnxProgram]:
    if case.name not in _EXPORTED:
        model = _build(case)
        _EXPORTED[case.name] = model, onnxport.export(model, (), _decode_inputs(model), dynamic_shapes="auto")
    return _EXPORTED[case.name]


@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "left_padded"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_greedy_generation_matches_transformers(case: LLMCase, padded: bool) -> None:
    model, prog = _exported(case)
    torch.manual_seed(2)
    ids = torch.randint(3, 99, (2, 6))
    mask = torch.ones_like(ids)
    if padded:
        mask[1, :2] = 0
        ids[1, :2] = 0
    tokens, logits = onnxport.generate(prog, ids, mask, max_new_tokens=8, output_logits=True)
    expected = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=8, output_logits=True,
                              return_dict_in_generate=True)
    assert torch.equal(tokens, expected.sequences)
    for step, (got, want) in enumerate(zip(logits, expected.logits)):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-3, msg=lambda m: f"step {step}: {m}")


@pytest.mark.parametrize("case", [CASES[0], next(c for c in CASES if c.name == "gemma2")], ids=lambda c: c.name)
def test_export_under_no_grad_gives_the_same_model(case: LLMCase) -> None:
    """The other tests export with autograd on, as most users call an exporter; under no_grad it is the same."""
    model, prog = _exported(case)
    with torch.no_grad():
        quiet = onnxport.export(model, (), _decode_inputs(model), dynamic_shapes="auto")
    ids = torch.randint(3, 99, (2, 5), generator=torch.Generator().manual_seed(4))
    assert torch.equal(onnxport.generate(quiet, ids, max_new_tokens=4), onnxport.generate(prog, ids, max_new_tokens=4))
    assert [n.op_type for n in quiet.model.graph] == [n.op_type for n in prog.model.graph]


ONE_TOKEN = ["llama", "gemma2", "gpt2", "opt", "falcon", "phi3"]


@pytest.mark.parametrize("case", [c for c in CASES if c.name in ONE_TOKEN], ids=lambda c: c.name)
def test_export_from_one_token_decode_step_at_batch_one(case: LLMCase) -> None:
    """The call a user writes: a cache from a first forward pass, one new token, batch 1, no position_ids.
    Both sizes of 1 stay dynamic, and the model generates transformers' tokens for a padded batch of 2."""
    model = _build(case)
    inputs = _decode_inputs(model, batch=1, past=4, new=1)
    del inputs["position_ids"]
    prog = onnxport.export(model, (), inputs, dynamic_shapes="auto")
    assert [str(d) for d in prog.model.graph.inputs[0].shape] == ["batch_size", "sequence_length"]
    assert any("widened to two tokens" in note for note in prog.report.notes)
    ids = torch.randint(3, 99, (2, 6), generator=torch.Generator().manual_seed(3))
    mask = torch.ones_like(ids)
    mask[0, :3], ids[0, :3] = 0, 0
    expected = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=6)
    assert torch.equal(onnxport.generate(prog, ids, mask, max_new_tokens=6), expected)


@pytest.mark.parametrize("given", ["past_key_values", "cache"])
def test_either_name_of_the_cache_argument_exports(given: str, caplog: pytest.LogCaptureFixture) -> None:
    """transformers 5.24 renamed forward's ``past_key_values`` to ``cache``. Either name exports, the ONNX names
    stay, and the model is called by the name its forward takes: no deprecation warning on any version."""
    model = _build(CASES[0])
    inputs = _decode_inputs(model)
    inputs[given] = inputs.pop(cache_argument(model))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prog = onnxport.export(model, (), inputs, dynamic_shapes="auto")
    deprecations = [str(w.message) for w in caught if "deprecated" in str(w.message)]
    deprecations += [r.getMessage() for r in caplog.records if "deprecated" in r.getMessage()]
    assert not deprecations
    assert prog.input_names[3:] == [f"past_key_values.{i}.{kv}" for i in range(2) for kv in ("key", "value")]
    assert prog.output_names[1:] == [f"present.{i}.{kv}" for i in range(2) for kv in ("key", "value")]
    ids = torch.randint(3, 99, (2, 5), generator=torch.Generator().manual_seed(4))
    expected = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=4)
    assert torch.equal(onnxport.generate(prog, ids, max_new_tokens=4), expected)
    for name in ("past_key_values", "cache"):  # the program takes the cache under either name too
        step = _decode_inputs(model, batch=3, past=5, new=2)
        with torch.no_grad():
            logits = model(**step).logits
        step = _decode_inputs(model, batch=3, past=5, new=2)
        step[name] = step.pop(cache_argument(model))
        torch.testing.assert_close(prog(**step).logits, logits, atol=1e-4, rtol=1e-3)


def test_names_follow_onnxruntime_genai() -> None:
    _, prog = _exported(CASES[0])
    layers = [f"{kind}.{i}.{part}" for kind in ("past_key_values", "present") for i in range(2) for part in ("key", "value")]
    assert prog.input_names == ["input_ids", "attention_mask", "position_ids", *layers[:4]]
    assert prog.output_names == ["logits", *layers[4:]]
    shapes = {v.name: [str(d) for d in v.shape] for v in [*prog.model.graph.inputs, *prog.model.graph.outputs]}
    assert shapes["input_ids"] == ["batch_size", "sequence_length"]
    assert shapes["attention_mask"] == ["batch_size", "past_sequence_length + sequence_length"]
    assert shapes["past_key_values.1.value"] == ["batch_size", "2", "past_sequence_length", "8"]
    assert shapes["present.0.key"] == ["batch_size", "2", "past_sequence_length + sequence_length", "8"]


def test_program_takes_and_returns_a_cache() -> None:
    model, prog = _exported(CASES[0])
    inputs = _decode_inputs(model, batch=3, past=5, new=2)
    out = prog(**inputs)
    assert isinstance(cache_of(out), DynamicCache)
    with torch.no_grad():
        expected = model(**_decode_inputs(model, batch=3, past=5, new=2))
    torch.testing.assert_close(out.logits, expected.logits, atol=1e-4, rtol=1e-3)
    torch.testing.assert_close(cache_of(out).layers[1].keys, cache_of(expected).layers[1].keys)


def test_explicit_dynamic_shapes_for_the_cache() -> None:
    model = _build(CASES[0])
    batch, past, seq = torch.export.Dim("batch"), torch.export.Dim("past"), torch.export.Dim("seq")
    layer = {0: batch, 2: past}
    shapes = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: torch.export.Dim.AUTO},
              "position_ids": {0: batch, 1: seq}, cache_argument(model): [(layer, layer), (layer, layer)]}
    prog = onnxport.export(model, (), _decode_inputs(model), dynamic_shapes=shapes)
    dims = [str(d) for d in prog.model.graph.inputs[3].shape]
    assert dims == ["batch", "2", "past", "8"]


def test_sliding_layers_take_the_whole_past() -> None:
    """A sliding-window layer's ONNX cache holds every past token (the mask applies the window), so all layers
    share one past length, and the model's present is its past plus the new tokens."""
    model, prog = _exported(next(c for c in CASES if c.name == "gemma2"))
    inputs = _decode_inputs(model, batch=2, past=3, new=2)
    assert [layer.is_sliding for layer in inputs[cache_argument(model)].layers] == [True, False]
    shapes = {v.name: [str(d) for d in v.shape] for v in [*prog.model.graph.inputs, *prog.model.graph.outputs]}
    assert shapes["past_key_values.0.key"] == shapes["past_key_values.1.key"]
    assert shapes["present.0.key"] == ["batch_size", "2", "past_sequence_length + sequence_length", "8"]
    out = prog(**inputs)
    assert cache_of(out).layers[0].keys.shape[2] == 5


def test_sliding_cache_that_dropped_tokens_is_refused() -> None:
    model = _build(next(c for c in CASES if c.name == "gemma2"))
    inputs = _decode_inputs(model, past=6)  # more than the window of 5: layer 0 kept only the last 4
    with pytest.raises(onnxport.InvalidInputError, match="layer 0 is a sliding-window layer that has dropped") as err:
        onnxport.export(model, (), inputs, dynamic_shapes="auto")
    assert "fewer than 5 tokens" in err.value.fix


def _static_decode_inputs(model: torch.nn.Module, batch: int = 2, past: int = 4, new: int = 3) -> dict[str, Any]:
    cache = StaticCache(config=model.config, max_cache_len=16)
    with torch.no_grad():
        model(input_ids=torch.randint(3, 99, (batch, past)), use_cache=True, **{cache_argument(model): cache})
    return {"input_ids": torch.randint(3, 99, (batch, new)), "attention_mask": torch.ones(batch, past + new, dtype=torch.long),
            "position_ids": torch.arange(past, past + new).expand(batch, new), cache_argument(model): cache}


def test_static_cache_generates_as_transformers() -> None:
    """Fixed-length buffers written in place (torch functionalizes the writes) and a count of the tokens
    written, ``past_key_values.length``; generation feeds ``present.length`` back."""
    model = _build(CASES[0])
    prog = onnxport.export(model, (), _static_decode_inputs(model), dynamic_shapes="auto")
    shapes = {v.name: [str(d) for d in v.shape] for v in [*prog.model.graph.inputs, *prog.model.graph.outputs]}
    assert shapes["past_key_values.0.key"] == ["batch_size", "2", "16", "8"] and shapes["past_key_values.length"] == []
    assert shapes["present.1.value"] == ["batch_size", "2", "16", "8"] and shapes["present.length"] == []
    inputs = _static_decode_inputs(model, batch=3, past=6, new=1)  # another batch and fill level
    out = prog(**copy.deepcopy(inputs))
    with torch.no_grad():
        expected = model(**inputs)
    assert isinstance(cache_of(out), StaticCache) and int(cache_of(out).layers[1].cumulative_length) == 7
    torch.testing.assert_close(out.logits, expected.logits, atol=1e-4, rtol=1e-3)
    torch.manual_seed(2)
    ids = torch.randint(3, 99, (2, 6))
    mask = torch.ones_like(ids)
    mask[1, :2], ids[1, :2] = 0, 0
    tokens, logits = onnxport.generate(prog, ids, mask, max_new_tokens=8, output_logits=True)
    want = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=8, output_logits=True,
                          return_dict_in_generate=True, cache_implementation="static")
    assert torch.equal(tokens, want.sequences)
    for got, exp in zip(logits, want.logits):
        torch.testing.assert_close(got, exp, atol=1e-4, rtol=1e-3)
    with pytest.raises(onnxport.InvalidInputError, match="static cache holds 16 tokens"):
        onnxport.generate(prog, ids, mask, max_new_tokens=11)


def test_inputs_onnxport_cannot_pass_are_named(monkeypatch) -> None:
    model = _build(CASES[0])
    inputs = _decode_inputs(model)
    name = cache_argument(model)
    inputs[name] = types.SimpleNamespace(layers=[])
    with pytest.raises(onnxport.InvalidInputError, match=rf"the input {name} is a types.SimpleNamespace") as err:
        onnxport.export(model, (), inputs)
    assert "register_dataclass" in err.value.fix
    monkeypatch.setattr(hf_cache, "supported", lambda: False)  # as with another transformers major
    with pytest.raises(onnxport.InvalidInputError, match=f"{name} is a transformers") as err:
        onnxport.export(model, (), _decode_inputs(model))
    assert "written for transformers 5.x" in err.value.fix
    monkeypatch.undo()
    sliding = _build(next(c for c in CASES if c.name == "gemma2"))
    inputs = _static_decode_inputs(sliding)
    with pytest.raises(onnxport.InvalidInputError, match="layer 0 is a StaticSlidingWindowLayer"):
        onnxport.export(sliding, (), inputs, dynamic_shapes="auto")


def test_registration_is_undone_after_export_and_failed_export() -> None:
    model = _build(CASES[0])

    def untouched() -> bool:
        return not {DynamicCache, StaticCache} & set(pytree.SUPPORTED_NODES) and dict(model._forward_pre_hooks) == hooks

    hooks = dict(model._forward_pre_hooks)
    assert untouched()
    onnxport.export(model, (), _decode_inputs(model), dynamic_shapes="auto", verify=False)
    assert untouched()
    with pytest.raises(onnxport.OnnxportError):
        onnxport.export(model, (), _decode_inputs(model), dynamic_shapes={"input_ids": {1: torch.export.Dim("s", max=2)}})
    assert untouched()
    onnxport.export(model, (), _static_decode_inputs(model), dynamic_shapes="auto", verify=False)
    assert untouched()
