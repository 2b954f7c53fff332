"""export-hf's image-text-to-text folders run by onnxruntime-genai as they are: its own processor reads the image
files (genai_image_processor.json) and expands the prompt's image placeholder, its generator computes the
positions (the Qwen VL line's three per token) and runs vision.onnx, embedding.onnx and model.onnx; its greedy
tokens and its scores on the prompt are transformers' on the same images. Tiny random models, nothing
downloaded. (Mistral 3's is in test_export_hf_vlm.py.)"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

from onnxport.hf import export_hf
from onnxport.hf.multimodal.genai import GENAI_PROCESSOR, genai_names, why_not_genai

transformers = pytest.importorskip("transformers")
og = pytest.importorskip("onnxruntime_genai")

from tests.vlm_dirs import QWEN_IMAGE, images, qwen_inputs, write_gemma3, write_qwen_vl  # noqa: E402

pytestmark = pytest.mark.transformers  # run on the second pinned transformers too (make test-transformers)

NEW = 6


def genai_greedy(out: str, prompt: str, paths: list[str], new: int = NEW) -> tuple[list[int], np.ndarray]:
    """The prompt's tokens and ``new`` greedy ones as onnxruntime-genai makes them from the folder and the image
    files, and its scores for the prompt's last token."""
    model = og.Model(out)
    inputs = model.create_multimodal_processor()(prompt, images=og.Images.open(*paths) if paths else None)
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=model_length(out), do_sample=False)
    generator = og.Generator(model, params)
    generator.set_inputs(inputs)
    generator.generate_next_token()
    first_scores = np.array(generator.get_output("logits"))[0, -1]
    for _ in range(new - 1):
        if generator.is_done():
            break
        generator.generate_next_token()
    return [int(t) for t in generator.get_sequence(0)], first_scores


def model_length(out: str) -> int:
    with open(os.path.join(out, "genai_config.json"), encoding="utf-8") as f:
        return json.load(f)["model"]["context_length"]


def saved(tmp_path, *sizes: tuple[int, int]) -> list[str]:
    """Random pictures of ``sizes`` saved as PNG files (what genai's processor reads)."""
    paths = []
    for i, picture in enumerate(images(*sizes)):
        picture.save(tmp_path / f"image{i}.png")
        paths.append(str(tmp_path / f"image{i}.png"))
    return paths


def transformers_greedy(model: torch.nn.Module, inputs: dict, new: int = NEW) -> tuple[list[int], np.ndarray]:
    with torch.no_grad():
        tokens = model.generate(**inputs, do_sample=False, max_new_tokens=new)[0].tolist()
        scores = model(**inputs).logits[0, -1].numpy()
    return tokens, scores


# Qwen2-VL in make test, Qwen2.5-VL and Qwen3-VL (their windows, their deepstack columns) in the sweep
@pytest.fixture(scope="module", params=["qwen2_vl", *(pytest.param(k, marks=pytest.mark.sweep)
                                                      for k in ("qwen2_5_vl", "qwen3_vl"))])
def qwen(request, tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, str, str]:
    """A model of the Qwen VL line, its directory, and the folder export-hf wrote for it with default arguments."""
    directory = str(tmp_path_factory.mktemp(request.param))
    model = write_qwen_vl(directory, request.param)
    out = str(tmp_path_factory.mktemp(f"{request.param}_onnx"))
    export_hf(directory, "image-text-to-text", out)
    return model, directory, out


def test_qwen_vl_folder_generates_in_onnxruntime_genai_as_transformers(qwen, tmp_path):
    """genai's 3-d positions (get_rope_index's rule) and its patches of the image (PatchImage) are transformers';
    Qwen3-VL's deepstack columns ride in image_features as wide as inputs_embeds (decoder.hidden_size)."""
    from PIL import Image

    model, directory, out = qwen
    paths = saved(tmp_path, (32, 48))  # a size both processors keep: multiples of 16 within 16x16 to 64x64
    prompt = f"user: {QWEN_IMAGE} what is in this picture ? assistant:"
    tokens, first_scores = genai_greedy(out, prompt, paths)
    expected, scores = transformers_greedy(model, qwen_inputs(directory, [prompt], [Image.open(p) for p in paths]))
    assert len(expected) == 25 + NEW  # 6 image tokens (a grid of 4x6 patches, merged 2x2) in the prompt
    assert tokens == expected
    np.testing.assert_allclose(first_scores, scores, atol=1e-4, rtol=1e-4)


def test_qwen_vl_folder_in_onnxruntime_genai_takes_two_images_of_different_sizes(qwen, tmp_path):
    """Two images of different grids: genai runs vision.onnx once per image, each into its rows of the buffer."""
    from PIL import Image

    model, directory, out = qwen
    paths = saved(tmp_path, (32, 48), (64, 64))
    prompt = f"user: {QWEN_IMAGE} and {QWEN_IMAGE} what is in this picture ? assistant:"
    tokens, first_scores = genai_greedy(out, prompt, paths)
    expected, scores = transformers_greedy(model, qwen_inputs(directory, [prompt], [Image.open(p) for p in paths]))
    assert tokens == expected
    np.testing.assert_allclose(first_scores, scores, atol=1e-4, rtol=1e-4)


def test_qwen_vl_folder_generates_from_text_alone_in_onnxruntime_genai(qwen):
    model, directory, out = qwen
    text = "what is a cat ?"
    tokens, first_scores = genai_greedy(out, text, [])
    expected, scores = transformers_greedy(model, dict(transformers.AutoTokenizer.from_pretrained(directory)(
        [text], return_tensors="pt")))
    assert tokens == expected
    np.testing.assert_allclose(first_scores, scores, atol=1e-4, rtol=1e-4)


def write_gemma3_256(directory: str) -> torch.nn.Module:
    """A random Gemma 3 whose images are 64x64 pixels pooled to 256 tokens: genai expands <start_of_image> to 256
    image tokens, whatever the model's mm_tokens_per_image."""
    return write_gemma3(directory, side=64, tokens=256)


def test_gemma3_folder_generates_in_onnxruntime_genai_as_transformers(tmp_path):
    """genai's processor expands <start_of_image> to 256 image tokens; the image flag column rides in
    image_features (decoder.hidden_size is the hidden size and one), so the image tokens attend both ways, past
    the sliding window of 16, as in transformers."""
    from PIL import Image

    directory, out = str(tmp_path / "gemma3"), str(tmp_path / "onnx")
    model = write_gemma3_256(directory)
    export_hf(directory, "image-text-to-text", out)
    paths = saved(tmp_path, (64, 64))  # the size the vision tower reads: no resize on either side
    prompt = "user: <start_of_image> what is in this picture ? assistant:"
    tokens, first_scores = genai_greedy(out, prompt, paths)
    processor = transformers.AutoProcessor.from_pretrained(directory)
    inputs = processor(text=[prompt], images=[[Image.open(paths[0])]], return_tensors="pt")
    expected, scores = transformers_greedy(model, dict(inputs))
    assert len(expected) > 256 + NEW
    assert tokens == expected
    np.testing.assert_allclose(first_scores, scores, atol=1e-4, rtol=1e-4)


@pytest.mark.sweep
def test_gemma3_folder_in_onnxruntime_genai_takes_two_images_in_a_prompt(tmp_path):
    """Gemma 3's image encoder gives its rows per image, [images, 256, width], so genai counts 256 image tokens per
    image of a prompt of two."""
    from PIL import Image

    directory, out = str(tmp_path / "gemma3"), str(tmp_path / "onnx")
    model = write_gemma3_256(directory)
    export_hf(directory, "image-text-to-text", out)
    paths = saved(tmp_path, (64, 64), (64, 64))
    prompt = "user: <start_of_image> and <start_of_image> what are these ? assistant:"
    tokens, first_scores = genai_greedy(out, prompt, paths)
    processor = transformers.AutoProcessor.from_pretrained(directory)
    inputs = processor(text=[prompt], images=[[Image.open(p) for p in paths]], return_tensors="pt")
    expected, scores = transformers_greedy(model, dict(inputs))
    assert len(expected) > 2 * 256 + NEW
    assert tokens == expected
    np.testing.assert_allclose(first_scores, scores, atol=1e-4, rtol=1e-4)


def test_no_genai_files_for_a_model_genai_cannot_run():
    """genai's Gemma processor puts 256 image tokens per image whatever the model's mm_tokens_per_image
    (gemma_image_processor.cpp); it has no LLaVA or InternVL type (model_type.h)."""
    other = transformers.Gemma3Config(mm_tokens_per_image=16)
    assert genai_names(other) == ()
    assert "256 image tokens" in why_not_genai(other)
    assert genai_names(transformers.Gemma3Config()) == ("genai_config.json", GENAI_PROCESSOR)
    assert genai_names(transformers.LlavaConfig()) == ()
    assert "no LLaVA model type" in why_not_genai(transformers.LlavaConfig())
