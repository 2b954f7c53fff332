"""export-hf's image-text-to-text for the Qwen VL line: tiny random Qwen2-VL, Qwen2.5-VL (windowed vision attention),
Qwen3-VL (deepstack rows), Qwen3-VL-MoE, Qwen3.5 (a gated delta-net layer's states in the cache) and Qwen3.5-MoE
with their image processors, exported with default arguments and generated from in
onnxruntime by ``generate_vlm`` against transformers' ``generate``: prompts with one image and with two images of
different sizes (dynamic image grids: the patches follow each image's size), padded into one batch, three-d
positions from the images' grids. Nothing downloaded."""

from __future__ import annotations

import os

import onnx
import pytest
import torch

from onnxport.hf import export_hf, pick_task
from onnxport.hf.multimodal import generate_vlm

transformers = pytest.importorskip("transformers")

from tests.vlm_dirs import QWEN_IMAGE, images, qwen_inputs, write_qwen_vl  # noqa: E402

pytestmark = pytest.mark.transformers  # run on the second pinned transformers too (make test-transformers)

PROMPTS = [f"user: {QWEN_IMAGE} what is in this picture ? assistant:", f"{QWEN_IMAGE}{QWEN_IMAGE} describe it : a dog"]


# Qwen2-VL in make test, the others (built like it) in the sweep
@pytest.mark.parametrize("kind", ["qwen2_vl", *(pytest.param(k, marks=pytest.mark.sweep) for k in (
    "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe"))])
def test_qwen_vl_folder_generates_as_transformers_on_images_of_three_sizes(kind, tmp_path):
    directory, out = str(tmp_path / kind), str(tmp_path / "onnx")
    model = write_qwen_vl(directory, kind)
    assert pick_task(directory).task == "image-text-to-text"
    export_hf(directory, "auto", out)
    inputs = qwen_inputs(directory, PROMPTS, images((40, 48), (32, 64), (56, 40)))
    grids = inputs["image_grid_thw"].tolist()
    assert len({tuple(g) for g in grids}) == 3 and inputs["attention_mask"].min() == 0  # three sizes, a padded row
    with torch.no_grad():
        expected = model.generate(**inputs, do_sample=False, max_new_tokens=6)
    assert torch.equal(generate_vlm(out, inputs=inputs, max_new_tokens=6), expected)

    one = qwen_inputs(directory, PROMPTS[:1], images((64, 32)))  # one image, of a grid the export never saw
    with torch.no_grad():
        expected = model.generate(**one, do_sample=False, max_new_tokens=6)
    assert torch.equal(generate_vlm(out, inputs=one, max_new_tokens=6), expected)

    decoder = onnx.load(os.path.join(out, "model.onnx"), load_external_data=False)
    shapes = {i.name: [d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim] for i in decoder.graph.input}
    assert shapes["position_ids"][0] == 3  # time, row and column per token
    deepstack = len(getattr(model.config.vision_config, "deepstack_visual_indexes", None) or ())
    assert shapes["inputs_embeds"][2] == 32 * (1 + deepstack)  # Qwen3-VL's deepstack rows ride as more columns


@pytest.mark.sweep
def test_glm_ocr_folder_generates_as_transformers_on_images_of_three_sizes(tmp_path):
    """GLM-OCR: a GLM-4V-style tower and multimodal RoPE with positions of its own rule (get_rope_index)."""
    from tests.vlm_dirs import glm_inputs, write_glm_ocr

    directory, out = str(tmp_path / "glm_ocr"), str(tmp_path / "onnx")
    model = write_glm_ocr(directory)
    export_hf(directory, "image-text-to-text", out)
    image = "<|begin_of_image|><|image|><|end_of_image|>"
    inputs = glm_inputs(directory, [f"user: {image} what is in this picture ?", f"{image}{image} describe it : a dog"],
                        images((40, 48), (32, 64), (56, 40)))
    with torch.no_grad():
        expected = model.generate(**inputs, do_sample=False, max_new_tokens=6)
    assert torch.equal(generate_vlm(out, inputs=inputs, max_new_tokens=6), expected)
