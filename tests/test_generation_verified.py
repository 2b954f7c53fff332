"""export-hf's generation loop (``onnxport.hf.verify_loop``): a text-generation decoder run as its consumers run it,
the prompt then steps fed back through the cache, its logits compared with eager PyTorch's at every step."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import onnx_ir as ir
import pytest
import torch
from torch.utils import _pytree as pytree

import onnxport
from onnxport.cli import main
from onnxport.hf import export_hf, transformers_js, verify_loop
from onnxport.program import OnnxProgram
from onnxport.report import Report

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.transformers

_API = sys.modules["onnxport.api"]  # export_hf imports its export from there when it runs


def _llama(directory: str, **generation: object) -> str:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=99, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                      bos_token_id=1, eos_token_id=2, pad_token_id=0)
    model = transformers.LlamaForCausalLM(config).eval()
    model.generation_config.update(**generation)
    model.save_pretrained(directory)
    return directory


def _qwen3_next(directory: str) -> str:
    torch.manual_seed(0)
    config = transformers.Qwen3NextConfig(
        vocab_size=128, hidden_size=64, num_hidden_layers=2, intermediate_size=128, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
        linear_value_head_dim=16, linear_conv_kernel_dim=4, num_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=32, shared_expert_intermediate_size=32,
        layer_types=["linear_attention", "full_attention"], bos_token_id=1, eos_token_id=2, pad_token_id=0)
    transformers.Qwen3NextForCausalLM(config).eval().save_pretrained(directory)
    return directory


def _decoding(graph: ir.Graph) -> ir.Value:
    """A bool [1] value of ``graph``: true when it runs one token (a decode step), false for a prompt."""
    ids = next(v for v in graph.inputs if v.name == "input_ids")
    one = ir.Value(name="planted/one", const_value=ir.tensor(np.array([1], dtype=np.int64)))
    graph.register_initializer(one)
    length = ir.Node("", "Shape", [ids], [ir.AttrInt64("start", 1), ir.AttrInt64("end", 2)], name="planted/length")
    equal = ir.Node("", "Equal", [length.outputs[0], one], name="planted/equal")
    graph.insert_before(graph[0], [length, equal])
    return equal.outputs[0]


def _position_off_by_one(prog: onnxport.OnnxProgram) -> None:
    """Plant a state bug: each decode step's token is placed (rotated, written to the cache) one position on."""
    graph = prog.model.graph
    decoding = _decoding(graph)
    positions = next(v for v in graph.inputs if v.name == "position_ids")
    uses = list(positions.uses())
    offset = ir.Node("", "Cast", [decoding], [ir.AttrInt64("to", ir.DataType.INT64)], name="planted/offset")
    shifted = ir.Node("", "Add", [positions, offset.outputs[0]], name="planted/shifted")
    graph.insert_after(decoding.producer(), [offset, shifted])
    for node, index in uses:
        node.replace_input_with(index, shifted.outputs[0])


def _states_dropped(prog: onnxport.OnnxProgram) -> None:
    """Plant a state bug: a decode step returns its linear-attention layers' states zeroed (not carried)."""
    graph = prog.model.graph
    decoding = _decoding(graph)
    keep = ir.Node("", "Cast", [ir.Node("", "Not", [decoding], name="planted/not").outputs[0]],
                   [ir.AttrInt64("to", ir.DataType.FLOAT)], name="planted/keep")
    graph.insert_after(decoding.producer(), [keep.inputs[0].producer(), keep])
    for i, value in enumerate(list(graph.outputs)):
        if value.name.endswith(("conv_state", "recurrent_state")):
            zeroed = ir.Node("", "Mul", [value, keep.outputs[0]], name=f"planted/{value.name}")
            graph.append(zeroed)
            name, value.name = value.name, f"{value.name}/carried"
            zeroed.outputs[0].name, zeroed.outputs[0].type, zeroed.outputs[0].shape = name, value.type, value.shape
            graph.outputs[i] = zeroed.outputs[0]


def _planting(monkeypatch: pytest.MonkeyPatch, plant) -> list[onnxport.OnnxProgram]:
    """Export as export-hf does (verified one call at a time), then plant a bug in the file; the programs made."""
    made = []
    real = _API.export

    def export(*args, **kwargs):
        prog = real(*args, **kwargs)
        plant(prog)
        prog._proto = None  # the ModelProto verification built is of the graph before the plant
        made.append(prog)
        return prog

    monkeypatch.setattr(_API, "export", export)
    return made


# (model, bug, the first step it shows at): a state dropped by decode step 1 is first read by step 2
@pytest.mark.parametrize(("build", "plant", "step"),
                         [(_llama, _position_off_by_one, 1),
                          pytest.param(_qwen3_next, _states_dropped, 2, marks=pytest.mark.sweep)],  # (a 30 s export)
                         ids=["cache-one-position-off", "state-not-carried"])
def test_a_planted_state_bug_is_caught_by_default(build, plant, step, tmp_path, monkeypatch) -> None:
    """A bug only a decode step shows passes the one-call verification and fails the generation loop, which names
    the step; nothing is written."""
    made = _planting(monkeypatch, plant)
    directory = build(str(tmp_path / "model"))
    with pytest.raises(onnxport.VerificationError, match=f"at decode step {step} of a generation loop") as caught:
        export_hf(directory, "text-generation", str(tmp_path / "out"))
    assert made[0].report.verification.ok  # today's verification alone passes the file
    check = caught.value.verification
    assert check.steps[0].ok and not check.ok and check.failed_step == step
    assert not os.path.exists(tmp_path / "out" / "model.onnx")


def test_a_planted_bug_only_warns_with_warn(tmp_path, monkeypatch) -> None:
    _planting(monkeypatch, _position_off_by_one)
    with pytest.warns(UserWarning, match="decode step 1"):
        prog = export_hf(_llama(str(tmp_path / "model")), "text-generation", str(tmp_path / "out"),
                         verify_generation="warn")
    assert not prog.report.generation.ok and os.path.exists(tmp_path / "out" / "model.onnx")


@pytest.mark.parametrize("target", [None, "transformers.js"])
def test_a_right_decoder_passes_and_the_report_says_so(target, tmp_path) -> None:
    extra = {"target": target, "dtypes": ["fp32"]} if target else {}
    prog = export_hf(_llama(str(tmp_path / "model")), "text-generation", str(tmp_path / "out"), **extra)
    check = prog.report.generation
    assert check.ok and len(check.steps) == verify_loop.STEPS + 1
    assert check.file == ("onnx/model.onnx" if target else "model.onnx")
    text = str(prog.report)
    assert f"generation loop ({check.file}): passed" in text
    assert f"batch {verify_loop.BATCH}" in text and "4 decode steps" in text and "logits max_abs per step" in text


@pytest.mark.sweep  # Qwen3-Next's export takes 25 s; the planted test above has its prompt and first step pass
def test_a_hybrid_decoder_passes(tmp_path) -> None:
    prog = export_hf(_qwen3_next(str(tmp_path / "model")), "text-generation", str(tmp_path / "out"))
    assert prog.report.generation.ok


def test_no_false_alarm_on_generation_processors(tmp_path) -> None:
    """generate's processors change its choices, not the raw logits compared: the tokens fed are its own."""
    directory = _llama(str(tmp_path / "model"), repetition_penalty=3.0, forced_eos_token_id=2, no_repeat_ngram_size=2,
                       bad_words_ids=[[5]], do_sample=True, temperature=0.7)
    with open(os.path.join(directory, "generation_config.json"), encoding="utf-8") as f:
        assert json.load(f)["repetition_penalty"] == 3.0
    prog = export_hf(directory, "text-generation", str(tmp_path / "out"))
    assert prog.report.generation.ok


def test_turned_off_and_not_run_where_it_cannot_compare(tmp_path, capsys) -> None:
    directory = _llama(str(tmp_path / "model"))
    for flags, printed in (([], True), (["--no-verify-generation"], False)):
        assert main(["export-hf", directory, "--task", "text-generation", "-o", str(tmp_path / "a"), *flags]) == 0
        assert ("generation loop (model.onnx): passed" in capsys.readouterr().out) == printed
    prog = export_hf(directory, "text-generation", str(tmp_path / "b"), streaming=True)
    assert prog.report.generation is None
    assert "generation loop not run: the weights were streamed" in str(prog.report)
    half = export_hf(directory, "text-generation", str(tmp_path / "d"), dtype="fp16")
    assert "generation loop not run: the file's logits are not float32" in str(half.report)
    with pytest.raises(onnxport.InvalidInputError, match="verify_generation"):
        export_hf(directory, "text-generation", str(tmp_path / "c"), verify_generation="yes")


def _logits_off(prog: onnxport.OnnxProgram) -> None:
    """Plant a bug every call shows: the logits 1% off."""
    graph = prog.model.graph
    scale = ir.Value(name="planted/scale", const_value=ir.tensor(np.array(1.01, dtype=np.float32)))
    graph.register_initializer(scale)
    i, logits = next((i, v) for i, v in enumerate(graph.outputs) if v.name == "logits")
    scaled = ir.Node("", "Mul", [logits, scale], name="planted/logits")
    graph.append(scaled)
    logits.name, scaled.outputs[0].name = "logits/right", "logits"
    scaled.outputs[0].type, scaled.outputs[0].shape = logits.type, logits.shape
    graph.outputs[i] = scaled.outputs[0]


def _copy(prog: onnxport.OnnxProgram) -> OnnxProgram:
    count = len(prog.model.graph.outputs)
    return OnnxProgram(prog.model.clone(), report=Report(), in_spec=pytree.tree_flatten(((), {}))[1],
                       out_spec=pytree.tree_flatten(list(range(count)))[1], input_used=[],
                       output_slots=list(range(count)))


def test_a_merged_decoder_runs_its_two_branches(tmp_path) -> None:
    """A merged decoder (transformers.js's use_cache_branch) runs the prompt on its no-cache branch and the decode
    steps on its cache branch: a bug in either branch alone fails the loop at the step that branch ran."""
    directory = _llama(str(tmp_path / "model"))
    prog = export_hf(directory, "text-generation", str(tmp_path / "out"), verify_generation=False)
    model = transformers.LlamaForCausalLM.from_pretrained(directory).eval()
    right = _copy(prog)
    _logits_off(prog)
    for first, with_past, step in [(prog, right, 0), (right, prog, 1)]:
        merged = transformers_js.merge_decoders(first, with_past)
        check = verify_loop.check_decoder(model, merged, "onnx/decoder_model_merged.onnx")
        assert check.failed_step == step and all(c.ok for c in check.steps[step + 1:] if step == 0)
        assert "use_cache_branch false for the prompt, true after" in str(check)
    check = verify_loop.check_decoder(model, transformers_js.merge_decoders(right, right), "merged")
    assert check.ok
