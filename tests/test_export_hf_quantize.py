"""``export_hf(..., quantize=...)`` and ``export-hf --quantize``: quantized folders that onnxruntime-genai runs."""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
import pytest
import torch

import onnxport
from onnxport.cli import main
from onnxport.hf import export_hf
from tests.hf_dirs import NEW_TOKENS, PROMPT, eager_greedy, genai_greedy, write_llama

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.transformers  # run on the second pinned transformers too (make test-transformers)

INT8 = "onnxruntime>=1.24"  # a target whose oldest release runs MatMulNBits of 8 bits
LINEAR_LAYERS = 2 * 7 + 1  # per layer q, k, v, o, gate, up, down; then the LM head
PRODUCTS = 2 * 4 + 1  # MatMulNBits: q, k and v fused into one product, gate and up into another


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory) -> tuple[str, torch.nn.Module]:
    directory = str(tmp_path_factory.mktemp("tiny-llama"))
    model = write_llama(directory)
    model.generation_config.eos_token_id = None  # NEW_TOKENS new tokens on both sides
    return directory, model


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _bits(folder: os.PathLike[str], name: str = "model.onnx") -> list[tuple[int, int]]:
    """(bits, block_size) of each MatMulNBits of the saved model."""
    graph = onnx.load(os.path.join(folder, name), load_external_data=False).graph
    return [({a.name: a.i for a in n.attribute}["bits"], {a.name: a.i for a in n.attribute}["block_size"])
            for n in graph.node if n.op_type == "MatMulNBits" and n.domain == "com.microsoft"]


def _weight_bytes(folder: os.PathLike[str]) -> int:
    """The bytes of the saved model's initializers (in the model file or its data file)."""
    model = onnx.load(os.path.join(folder, "model.onnx"))
    return sum(onnx.numpy_helper.to_array(t).nbytes for t in model.graph.initializer)


def test_int8_folder_generates_the_float_tokens_in_onnxruntimegenai_greedy(llama_dir, tmp_path) -> None:
    directory, model = llama_dir
    prog = export_hf(directory, "text-generation", tmp_path / "int8", target=INT8, quantize="int8", streaming=True)
    assert len(prog.report.quantization.quantized) == LINEAR_LAYERS and not prog.report.quantization.left
    assert _bits(tmp_path / "int8") == [(8, 32)] * PRODUCTS
    # The quantized layers are in memory, the rest (embedding, norms) still streamed from the checkpoint:
    # the model is saved with external data that holds the embedding.
    proto = onnx.load(str(tmp_path / "int8" / "model.onnx"), load_external_data=False)
    embedding = next(t for t in proto.graph.initializer if t.name == "model.embed_tokens.weight")
    assert embedding.data_location == onnx.TensorProto.EXTERNAL
    tokens, logits = genai_greedy(tmp_path / "int8")
    expected, eager = eager_greedy(model)
    assert tokens == expected
    assert _cosine(logits, eager) > 0.999


@pytest.mark.parametrize("target", [None, pytest.param("onnxruntime>=1.26", marks=pytest.mark.sweep)])
def test_int4_folder_loads_and_generates_in_onnxruntimegenai_greedy(llama_dir, tmp_path, target) -> None:
    directory, model = llama_dir
    export_hf(directory, "text-generation", tmp_path / "float", target=target)
    prog = export_hf(directory, "text-generation", tmp_path / "int4", target=target, quantize="int4")
    assert _bits(tmp_path / "int4") == [(4, 32)] * PRODUCTS
    assert not any(n.op_type in ("MatMul", "Gemm") and n.inputs[1].is_initializer() for n in prog.model.graph)
    with open(tmp_path / "float" / "genai_config.json") as f, open(tmp_path / "int4" / "genai_config.json") as g:
        assert json.load(f) == json.load(g)  # MatMulNBits needs nothing more of onnxruntime-genai
    tokens, logits = genai_greedy(tmp_path / "int4")
    expected, eager = eager_greedy(model)
    # int4 on random weights drifts after a few steps; the first step is close to the float model's.
    assert len(tokens) == len(PROMPT) + NEW_TOKENS and tokens[:len(PROMPT)] == PROMPT
    assert all(0 <= t < model.config.vocab_size for t in tokens)
    assert tokens[len(PROMPT)] == expected[len(PROMPT)] and int(logits.argmax()) == int(eager.argmax())
    assert _cosine(logits, eager) > 0.98
    float_tokens, float_logits = genai_greedy(tmp_path / "float")
    assert float_tokens == expected and _cosine(float_logits, eager) > 0.99999
    # half a byte a weight (and a scale a block) against a byte against four
    export_hf(directory, "text-generation", tmp_path / "int8", target=target or INT8, quantize="int8")
    assert _weight_bytes(tmp_path / "int4") < _weight_bytes(tmp_path / "int8") < _weight_bytes(tmp_path / "float")


def test_loaded_weights_are_verified_then_quantized_with_the_options_given(llama_dir, tmp_path) -> None:
    directory, model = llama_dir
    options = {"bits": 8, "block_size": 16, "skip": ("lm_head",)}
    prog = export_hf(directory, "text-generation", tmp_path, streaming=False, target=INT8, quantize=options)
    assert prog.report.verification.status == "passed"  # the float export, against eager PyTorch
    assert list(prog.report.quantization.left) == ["lm_head.weight"]
    assert _bits(tmp_path) == [(8, 16)] * (PRODUCTS - 1)
    logits = next(c for c in prog.report.quantization.checks if c.name == "logits")  # measured against eager
    assert logits.cosine > 0.999 and logits.top1 is not None
    ids = torch.tensor([PROMPT])
    expected = model.generate(ids, max_new_tokens=4, do_sample=False)
    assert onnxport.generate(str(tmp_path / "model.onnx"), ids, max_new_tokens=4).tolist() == expected.tolist()


@pytest.mark.parametrize(("quantize", "message"), [
    ("int3", "quantize must be 'int4' or 'int8'"),
    ({"bits": 3}, "bits must be 4 or 8"),
    ({"bitz": 4}, "quantize must be True or a dict"),
])
def test_bad_quantize_is_refused_before_anything_is_loaded_or_written(llama_dir, tmp_path, monkeypatch, quantize,
                                                                      message) -> None:
    from onnxport.hf import stream

    monkeypatch.setattr(stream, "meta_model", lambda *a: pytest.fail("the model was loaded before the check"))
    with pytest.raises(onnxport.InvalidInputError, match=message) as caught:
        export_hf(llama_dir[0], "text-generation", tmp_path / "out", quantize=quantize)
    assert caught.value.fix and not (tmp_path / "out").exists()


def test_a_model_with_nothing_quantized_is_refused_before_writing(tmp_path) -> None:
    directory = str(tmp_path / "bf16")
    write_llama(directory, dtype=torch.bfloat16)  # quantization takes float32 and float16 weights
    with pytest.raises(onnxport.InvalidInputError, match="weights are bfloat16") as caught:
        export_hf(directory, "text-generation", tmp_path / "out", quantize="int4", dtype="bf16")
    assert "float16" in caught.value.fix and not (tmp_path / "out").exists()


@pytest.mark.sweep  # the decoder-only folders are quantized in make test
def test_seq2seq_models_are_quantized_all_three(tmp_path) -> None:
    directory = str(tmp_path / "t5")
    torch.manual_seed(0)
    config = transformers.T5Config(vocab_size=99, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                                   decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    model = transformers.T5ForConditionalGeneration(config).eval()
    model.save_pretrained(directory)
    model.generation_config.eos_token_id = None
    out = tmp_path / "out"
    programs = export_hf(directory, "text2text-generation", out, target=INT8, quantize="int8")
    files = ["encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx"]
    for name, prog in zip(files, programs):
        assert prog.report.quantization.quantized and {b for b, _ in _bits(out, name)} == {8}
    ids = torch.randint(3, 99, (2, 9), generator=torch.Generator().manual_seed(5))
    tokens = onnxport.generate_seq2seq(*(str(out / f) for f in files), ids, torch.ones_like(ids),
                                       decoder_start_token_id=0, max_new_tokens=6)
    expected = model.generate(input_ids=ids, do_sample=False, num_beams=1, max_new_tokens=6)
    assert tokens.tolist() == expected.tolist()


def test_cli_quantize(llama_dir, tmp_path, capsys) -> None:
    directory, model = llama_dir
    out = tmp_path / "out"
    assert main(["export-hf", directory, "-o", str(out), "--quantize", "int4"]) == 0
    printed = capsys.readouterr().out
    assert f"quantized: int4 weights (symmetric, blocks of 32, matmulnbits): {LINEAR_LAYERS} linear layer(s)" in printed
    assert f"saved {out / 'model.onnx'}" in printed and f"saved {out / 'genai_config.json'}" in printed
    assert _bits(out) == [(4, 32)] * PRODUCTS
    tokens, _ = genai_greedy(out)
    assert len(tokens) == len(PROMPT) + NEW_TOKENS


def test_cli_bad_quantize_is_a_clean_error(llama_dir, tmp_path, capsys) -> None:
    out = tmp_path / "out"
    assert main(["export-hf", llama_dir[0], "-o", str(out), "--quantize", "int3"]) == 1
    err = capsys.readouterr().err
    assert "InvalidInputError: quantize must be 'int4' or 'int8'" in err and "not 'int3'" in err
    assert "fix:" in err and "--quantize int4" in err and "Traceback" not in err and not out.exists()
