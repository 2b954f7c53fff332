"""``export_hf`` on local model directories (save_pretrained output plus a tokenizer; nothing downloaded)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

import onnxport
from onnxport.cli import main
from onnxport.hf import export_hf
from tests.hf_dirs import write_tokenizer

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.transformers  # run on the second pinned transformers too (make test-transformers)


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory) -> tuple[str, torch.nn.Module]:
    directory = str(tmp_path_factory.mktemp("tiny-llama"))
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=99, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                      bos_token_id=1, eos_token_id=2, pad_token_id=0)
    model = transformers.LlamaForCausalLM(config).eval()
    model.save_pretrained(directory)
    write_tokenizer(directory, 99)
    return directory, model


@pytest.mark.parametrize("target", [None, "onnxruntime>=1.18"])
def test_text_generation_folder_runs_in_onnxruntime_genai(llama_dir, tmp_path, target) -> None:
    """By default a genai folder is written for the onnxruntime genai requires (fused attention, opset 23);
    target= still chooses another (the portable default of onnxport.export)."""
    og = pytest.importorskip("onnxruntime_genai")
    directory, model = llama_dir
    prog = export_hf(directory, "text-generation", tmp_path, target=target)
    fused = {n.op_type for n in prog.model.graph} & {"Attention", "RMSNormalization", "RotaryEmbedding"}
    assert (prog.model.opset_imports[""], bool(fused)) == ((23, True) if target is None else (21, False))
    assert {"model.onnx", "genai_config.json", "tokenizer.json", "tokenizer_config.json"} <= set(os.listdir(tmp_path))
    prompt = [1, 5, 17, 33, 8]
    genai = og.Model(str(tmp_path))
    params = og.GeneratorParams(genai)
    params.set_search_options(max_length=len(prompt) + 8, do_sample=False)
    generator = og.Generator(genai, params)
    generator.append_tokens(np.array([prompt], dtype=np.int32))
    while not generator.is_done():
        generator.generate_next_token()
    model.generation_config.eos_token_id = None  # eight new tokens on both sides
    expected = model.generate(torch.tensor([prompt]), max_new_tokens=8, do_sample=False)[0].tolist()
    assert [int(t) for t in generator.get_sequence(0)] == expected


def test_text_generation_model_also_runs_with_onnxport_generate(llama_dir, tmp_path) -> None:
    directory, model = llama_dir
    prog = export_hf(directory, "text-generation", tmp_path)
    ids = torch.tensor([[5, 17, 33, 8], [0, 0, 9, 40]])
    mask = (ids != 0).long()
    tokens = onnxport.generate(prog, ids, mask, max_new_tokens=6)
    model.generation_config.eos_token_id = None
    expected = model.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False)
    assert tokens.tolist() == expected.tolist()


@pytest.mark.parametrize(("task", "model_class", "key", "streaming"), [
    ("feature-extraction", "BertModel", "last_hidden_state", True),
    ("text-classification", "BertForSequenceClassification", "logits", True),
    ("text-classification", "BertForSequenceClassification", "logits", False),
])
def test_encoder_tasks(task: str, model_class: str, key: str, streaming: bool, tmp_path) -> None:
    directory = str(tmp_path / "model")
    config = transformers.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64)
    model = getattr(transformers, model_class)(config).eval()
    model.save_pretrained(directory)
    prog = export_hf(directory, task, tmp_path / "out", streaming=streaming)
    assert os.path.isfile(tmp_path / "out" / "model.onnx")
    # Streamed weights are never loaded, so eager PyTorch cannot check them; a loaded model is verified.
    assert prog.report.verification is None if streaming else prog.report.verification.ok
    ids = torch.randint(3, 99, (3, 11))
    torch.testing.assert_close(prog(input_ids=ids, attention_mask=torch.ones_like(ids))[key],
                               getattr(model(input_ids=ids, attention_mask=torch.ones_like(ids)), key),
                               atol=1e-4, rtol=1e-4)


def test_image_classification(tmp_path) -> None:
    directory = str(tmp_path / "vit")
    config = transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                    image_size=32, patch_size=8, num_labels=5)
    model = transformers.ViTForImageClassification(config).eval()
    model.save_pretrained(directory)
    prog = export_hf(directory, "image-classification", tmp_path / "out")
    pixels = torch.randn(3, 3, 32, 32)
    torch.testing.assert_close(prog(pixel_values=pixels)["logits"], model(pixel_values=pixels).logits,
                               atol=1e-4, rtol=1e-4)


def test_bad_directory_and_task(llama_dir, tmp_path) -> None:
    with pytest.raises(onnxport.InvalidInputError, match="no config.json"):
        export_hf(tmp_path, "text-generation", tmp_path / "out")
    with pytest.raises(onnxport.InvalidInputError, match="task 'translation'"):
        export_hf(llama_dir[0], "translation", tmp_path / "out")


def _seq2seq_dir(tmp_path, kind: str) -> tuple[str, torch.nn.Module]:
    directory = str(tmp_path / kind)
    torch.manual_seed(0)
    sizes = dict(vocab_size=99, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                 decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64)
    if kind == "t5":
        config = transformers.T5Config(vocab_size=99, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                                       decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
        model = transformers.T5ForConditionalGeneration(config)
    else:
        config = transformers.WhisperConfig(**sizes, num_mel_bins=8, max_source_positions=16, max_target_positions=32,
                                            decoder_start_token_id=1, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                            suppress_tokens=None, begin_suppress_tokens=None)
        model = transformers.WhisperForConditionalGeneration(config)
    model.eval().save_pretrained(directory)
    write_tokenizer(directory, 99)
    model.generation_config.eos_token_id = None  # eight new tokens on both sides
    model.generation_config.forced_eos_token_id = None
    return directory, model


@pytest.mark.parametrize(("kind", "task"), [("t5", "text2text-generation"), ("whisper", "automatic-speech-recognition")])
def test_seq2seq_tasks_write_three_models_that_generate(kind: str, task: str, tmp_path, capsys) -> None:
    directory, model = _seq2seq_dir(tmp_path, kind)
    out = tmp_path / "out"
    assert main(["export-hf", directory, "--task", task, "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.count("verification (onnxruntime vs eager PyTorch): passed") == 3
    files = ["encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx"]
    assert set(files) <= set(os.listdir(out)) and "tokenizer.json" in os.listdir(out)
    if kind == "t5":
        ids = torch.randint(3, 99, (2, 9), generator=torch.Generator().manual_seed(5))
        mask = torch.ones_like(ids)
        mask[0, -3:] = 0
        inputs = {"input_ids": ids, "attention_mask": mask}
    else:
        inputs = {"input_features": torch.randn(3, 8, 32, generator=torch.Generator().manual_seed(5))}
    start = model.generation_config.decoder_start_token_id
    tokens = onnxport.generate_seq2seq(*(str(out / f) for f in files), *inputs.values(), decoder_start_token_id=start,
                                       max_new_tokens=8)
    expected = model.generate(**inputs, do_sample=False, num_beams=1, max_new_tokens=8)
    assert tokens.shape == (len(expected), 9)  # the start token, then 8 new ones
    # The new tokens: Whisper's generate leaves the start token out of its plain result.
    assert tokens[:, 1:].tolist() == expected[:, -8:].tolist()


def test_cli_text_generation(llama_dir, tmp_path, capsys) -> None:
    directory, model = llama_dir
    out = tmp_path / "out"
    assert main(["export-hf", directory, "-o", str(out), "-q", "--target", "onnxruntime-web>=1.22"]) == 0
    import onnx

    assert onnx.load(str(out / "model.onnx"), load_external_data=False).opset_import[0].version == 22
    printed = capsys.readouterr().out
    assert f"saved {out / 'model.onnx'}" in printed and f"saved {out / 'genai_config.json'}" in printed
    ids = torch.tensor([[5, 17, 33, 8]])
    model.generation_config.eos_token_id = None
    expected = model.generate(ids, max_new_tokens=4, do_sample=False)
    assert onnxport.generate(str(out / "model.onnx"), ids, max_new_tokens=4).tolist() == expected.tolist()


def test_cli_bad_directory_is_a_clean_error(tmp_path, capsys) -> None:
    assert main(["export-hf", str(tmp_path), "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "has no config.json" in err and "Traceback" not in err
