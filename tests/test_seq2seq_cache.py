"""Encoder-decoder models with a transformers ``EncoderDecoderCache``: exported as encoder, decoder and decoder
with past (``onnxport.export_seq2seq``), they generate in onnxruntime the tokens ``model.generate`` picks."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.utils import _pytree as pytree

import onnxport

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.transformers  # run on the second pinned transformers too (make test-transformers)
from transformers import DynamicCache, EncoderDecoderCache  # noqa: E402

SIZES = dict(vocab_size=99, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
             decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64)


def _text(batch: int = 2, length: int = 7) -> dict[str, torch.Tensor]:
    ids = torch.randint(3, 99, (batch, length), generator=torch.Generator().manual_seed(3))
    mask = torch.ones_like(ids)
    mask[1, -2:] = 0  # a right-padded row, as a tokenizer pads an encoder batch
    return {"input_ids": ids, "attention_mask": mask}


def _audio(batch: int = 2) -> dict[str, torch.Tensor]:
    return {"input_features": torch.randn(batch, 8, 32, generator=torch.Generator().manual_seed(3))}


@dataclasses.dataclass
class Seq2SeqCase:
    """An encoder-decoder family from a tiny config, with its example encoder inputs."""

    name: str
    config: str
    model: str
    kwargs: dict[str, Any]
    inputs: Callable[[], dict[str, torch.Tensor]]


CASES = [
    Seq2SeqCase("t5", "T5Config", "T5ForConditionalGeneration",
                dict(vocab_size=99, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, decoder_start_token_id=0,
                     pad_token_id=0), _text),
    Seq2SeqCase("bart", "BartConfig", "BartForConditionalGeneration",
                dict(SIZES, max_position_embeddings=64, forced_eos_token_id=None), _text),
    Seq2SeqCase("whisper", "WhisperConfig", "WhisperForConditionalGeneration",
                dict(SIZES, num_mel_bins=8, max_source_positions=16, max_target_positions=32, decoder_start_token_id=1,
                     pad_token_id=0, bos_token_id=1, eos_token_id=2, suppress_tokens=None,
                     begin_suppress_tokens=None), _audio),
]
_EXPORTED: dict[str, tuple[torch.nn.Module, onnxport.Seq2SeqPrograms]] = {}


def _build(case: Seq2SeqCase) -> torch.nn.Module:
    torch.manual_seed(0)
    model = getattr(transformers, case.model)(getattr(transformers, case.config)(**case.kwargs)).eval()
    model.generation_config.eos_token_id = None  # eight tokens every time, on both sides
    model.generation_config.forced_eos_token_id = None
    return model


def _exported(case: Seq2SeqCase) -> tuple[torch.nn.Module, onnxport.Seq2SeqPrograms]:
    if case.name not in _EXPORTED:
        model = _build(case)
        _EXPORTED[case.name] = model, onnxport.export_seq2seq(model, case.inputs())
    return _EXPORTED[case.name]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name, marks=pytest.mark.sweep if c.name in ("whisper", "t5")
                                                else ())
                                  for c in CASES])  # whisper, t5: make test generates their folders (test_export_hf)
def test_greedy_generation_matches_transformers(case: Seq2SeqCase) -> None:
    model, progs = _exported(case)
    inputs = case.inputs()
    start = model.generation_config.decoder_start_token_id
    tokens, logits = onnxport.generate_seq2seq(*progs, *inputs.values(), decoder_start_token_id=start,
                                               max_new_tokens=8, output_logits=True)
    expected = model.generate(**inputs, do_sample=False, num_beams=1, max_new_tokens=8, output_logits=True,
                              return_dict_in_generate=True)
    assert tokens.shape == (2, 9)
    assert torch.equal(tokens, expected.sequences)
    for step, (got, want) in enumerate(zip(logits, expected.logits)):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-3, msg=lambda m: f"step {step}: {m}")


def test_names_and_dims_follow_optimum() -> None:
    _, progs = _exported(CASES[0])
    layers = [f"{kind}.{i}.{part}.{kv}" for kind in ("past_key_values", "present") for i in range(2)
              for part in ("decoder", "encoder") for kv in ("key", "value")]
    assert progs.encoder.input_names == ["input_ids", "attention_mask"]
    assert progs.encoder.output_names == ["last_hidden_state"]
    step = ["input_ids", "encoder_attention_mask", "encoder_hidden_states"]
    assert progs.decoder.input_names == step and progs.decoder.output_names == ["logits", *layers[8:]]
    assert progs.decoder_with_past.input_names == [*step, *layers[:8]]
    assert progs.decoder_with_past.output_names == ["logits", *layers[8:]]
    graph = progs.decoder_with_past.model.graph
    shapes = {v.name: [str(d) for d in v.shape] for v in [*graph.inputs, *graph.outputs]}
    assert shapes["input_ids"] == ["batch_size", "decoder_sequence_length"]
    assert shapes["encoder_attention_mask"] == ["batch_size", "encoder_sequence_length"]
    assert shapes["past_key_values.1.decoder.value"] == ["batch_size", "4", "past_decoder_sequence_length", "8"]
    assert shapes["past_key_values.0.encoder.key"] == ["batch_size", "4", "encoder_sequence_length", "8"]
    assert shapes["present.0.decoder.key"] == ["batch_size", "4",
                                               "decoder_sequence_length + past_decoder_sequence_length", "8"]


def test_program_takes_and_returns_an_encoder_decoder_cache() -> None:
    model, progs = _exported(CASES[1])
    inputs = _text(batch=3, length=5)
    with torch.no_grad():
        states = model.get_encoder()(**inputs).last_hidden_state
        step = {"input_ids": torch.randint(3, 99, (3, 4)), "encoder_attention_mask": inputs["attention_mask"],
                "encoder_hidden_states": states}
        cache = onnxport.hf.seq2seq.DecoderPart(model)(**step)["present"]
        step["input_ids"] = step["input_ids"][:, :1]
        out = progs.decoder_with_past(**step, past_key_values=cache)
        expected = onnxport.hf.seq2seq.DecoderPart(model)(**step, past_key_values=cache)
    assert isinstance(out["present"], EncoderDecoderCache)
    torch.testing.assert_close(out["logits"], expected["logits"], atol=1e-4, rtol=1e-3)
    torch.testing.assert_close(out["present"].self_attention_cache.layers[1].keys,
                               expected["present"].self_attention_cache.layers[1].keys)


def test_registration_is_undone_after_export_and_failed_export() -> None:
    model = _build(CASES[0])
    assert EncoderDecoderCache not in pytree.SUPPORTED_NODES and DynamicCache not in pytree.SUPPORTED_NODES
    onnxport.export_seq2seq(model, _text(), verify=False)
    assert EncoderDecoderCache not in pytree.SUPPORTED_NODES and DynamicCache not in pytree.SUPPORTED_NODES
    decoder = onnxport.hf.seq2seq.DecoderPart(model)
    states = model.get_encoder()(**_text()).last_hidden_state
    with torch.no_grad():
        cache = decoder(torch.randint(3, 99, (2, 3)), encoder_hidden_states=states)["present"]
    step = {"input_ids": torch.randint(3, 99, (2, 2)), "encoder_hidden_states": states, "past_key_values": cache}
    with pytest.raises(onnxport.OnnxportError):
        onnxport.export(decoder, (), step, dynamic_shapes={"input_ids": {1: torch.export.Dim("s", max=1)}})
    assert EncoderDecoderCache not in pytree.SUPPORTED_NODES and DynamicCache not in pytree.SUPPORTED_NODES


def test_a_decoder_alone_with_an_unfilled_cross_attention_cache_exports_with_dynamic_sizes() -> None:
    """A BERT-style decoder built without cross-attention returns an EncoderDecoderCache whose cross-attention
    layers hold nothing: exported with it and ``dynamic_shapes="auto"``, the model takes the self-attention pairs
    alone, its mask spans their past and the new tokens, and it verifies (sizes 1 included)."""
    torch.manual_seed(0)
    config = transformers.MegatronBertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                             intermediate_size=64, is_decoder=True)
    model = transformers.MegatronBertForCausalLM(config).eval()
    with torch.no_grad():
        cache = model(input_ids=torch.tensor([[1, 5, 17, 33, 8]] * 2), use_cache=True).past_key_values
    assert isinstance(cache, EncoderDecoderCache)
    inputs = {"input_ids": torch.tensor([[3, 4]] * 2), "attention_mask": torch.ones(2, 7, dtype=torch.int64),
              "past_key_values": cache}
    prog = onnxport.export(model, (), inputs, dynamic_shapes="auto")
    assert prog.report.verification.ok
    assert [v.name for v in prog.model.graph.inputs][2:] == [f"past_key_values.{i}.decoder.{kv}" for i in range(2)
                                                             for kv in ("key", "value")]
