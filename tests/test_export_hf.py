"""``export_hf`` on local model directories (save_pretrained output plus a tokenizer; nothing downloaded)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

import onnxport
from onnxport.hf import export_hf
from tests.hf_dirs import write_tokenizer

transformers = pytest.importorskip("transformers")


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


def test_text_generation_folder_runs_in_onnxruntime_genai(llama_dir, tmp_path) -> None:
    og = pytest.importorskip("onnxruntime_genai")
    directory, model = llama_dir
    export_hf(directory, "text-generation", tmp_path)
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


@pytest.mark.parametrize(("task", "model_class", "key"), [
    ("feature-extraction", "BertModel", "last_hidden_state"),
    ("text-classification", "BertForSequenceClassification", "logits"),
])
def test_encoder_tasks(task: str, model_class: str, key: str, tmp_path) -> None:
    directory = str(tmp_path / "model")
    config = transformers.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64)
    model = getattr(transformers, model_class)(config).eval()
    model.save_pretrained(directory)
    prog = export_hf(directory, task, tmp_path / "out")
    assert os.path.isfile(tmp_path / "out" / "model.onnx") and prog.report.verification.ok
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
