"""export-hf's image-text-to-text for the families whose image rows are not the model's get_image_features of the
processor's outputs as they are named: Llama 4 (its forward projects the vision model's rows after
get_image_features: ``Family.projector``), Video-LLaVA (its image processor names the pixels
``pixel_values_images``: ``IMAGE_INPUT_ALIASES``), DeepSeek-VL hybrid (two towers, and get_image_features on its
base model only), PaddleOCR-VL (its projector merges each image's blocks by its grid's values, in a loop:
``_vision_windows.merged_projector_forward`` during the capture), InstructBLIP (its Q-Former reads a text prompt
beside each image: ``qformer_input_ids``), LLaVA-NeXT and LLaVA-OneVision (each image's tiles laid out and cropped
by its size: ``_any_resolution``), LFM2-VL (NaFlex patches, each image's blocks merged by its grid: ``_naflex``) and
InstructBLIP-Video (videos, each frame's rows at the video tokens: ``VIDEOS_AS_IMAGES``). Each folder generates
transformers' tokens in onnxport's runner on one image and on a padded batch of prompts of one and two images."""

from __future__ import annotations

import pytest
import torch

from onnxport.hf import export_hf
from onnxport.hf.multimodal import generate_vlm

transformers = pytest.importorskip("transformers")

from tests.vlm_dirs import (  # noqa: E402
    grid_inputs,
    images,
    token_inputs,
    write_any_resolution,
    write_deepseek_vl_hybrid,
    write_instructblip,
    write_instructblipvideo,
    write_lfm2_vl,
    write_llama4,
    write_paddleocr_vl,
    write_video_llava,
)

pytestmark = [pytest.mark.transformers, pytest.mark.sweep]

TEXTS = ["user: <image> what is in this picture ? assistant:", "<image> a cat <image> describe it"]


def _generates_as_transformers(model: torch.nn.Module, out: str, inputs: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        expected = model.generate(**inputs, do_sample=False, max_new_tokens=6)
    got = generate_vlm(out, inputs={k: v.numpy() for k, v in inputs.items()}, max_new_tokens=6)
    assert expected.shape[1] > inputs["input_ids"].shape[1]  # new tokens past the prompt
    assert torch.equal(got, expected)


def test_llama4_folder_projects_its_rows_after_get_image_features(tmp_path):
    directory, out = str(tmp_path / "llama4"), str(tmp_path / "onnx")
    model = write_llama4(directory)
    export_hf(directory, "image-text-to-text", out)
    pixels = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(0))  # one tile per image
    for texts, tiles in (([TEXTS[0]], pixels[:1]), (TEXTS, pixels)):
        inputs = token_inputs(directory, [t.replace("<image>", "<|image|>") for t in texts], "<|image|>",
                              [4] * len(tiles))
        _generates_as_transformers(model, out, {**inputs, "pixel_values": tiles})


def test_video_llava_folder_takes_its_processors_pixel_values_images(tmp_path):
    directory, out = str(tmp_path / "video_llava"), str(tmp_path / "onnx")
    model = write_video_llava(directory)
    export_hf(directory, "image-text-to-text", out)
    processor = transformers.VideoLlavaImageProcessor.from_pretrained(directory)
    for texts, sizes in (([TEXTS[0]], [(40, 48)]), (TEXTS, [(40, 48), (32, 64), (56, 40)])):
        pixels = processor(images(*sizes), return_tensors="pt")
        assert "pixel_values_images" in pixels  # the name its forward takes, and get_image_features' older one
        inputs = token_inputs(directory, texts, "<image>", [16] * len(sizes))
        _generates_as_transformers(model, out, {**inputs, "pixel_values_images": pixels["pixel_values_images"]})


def test_deepseek_vl_hybrid_folder_takes_both_towers_pixels(tmp_path):
    directory, out = str(tmp_path / "deepseek"), str(tmp_path / "onnx")
    model = write_deepseek_vl_hybrid(directory)
    export_hf(directory, "image-text-to-text", out)
    processor = transformers.DeepseekVLHybridImageProcessorPil.from_pretrained(directory)
    rows = int(model.model.get_image_features(**processor(images((40, 48)), return_tensors="pt"),
                                              return_dict=True).pooler_output[0].shape[0])
    for texts, sizes in (([TEXTS[0]], [(40, 48)]), (TEXTS, [(40, 48), (32, 64), (56, 40)])):
        pixels = processor(images(*sizes), return_tensors="pt")
        inputs = token_inputs(directory, texts, "<image>", [rows] * len(sizes))
        _generates_as_transformers(model, out, {**inputs, **pixels})


def test_paddleocr_vl_folder_merges_each_images_blocks_by_its_grid(tmp_path):
    directory, out = str(tmp_path / "paddleocr_vl"), str(tmp_path / "onnx")
    model = write_paddleocr_vl(directory)
    export_hf(directory, "image-text-to-text", out)
    image = "<|vision_start|><|image_pad|><|vision_end|>"
    texts = [t.replace("<image>", image) for t in TEXTS]
    for prompts, sizes in (([texts[0]], [(40, 48)]), (texts, [(40, 48), (32, 64), (56, 40)])):
        inputs = grid_inputs(directory, prompts, images(*sizes), transformers.PaddleOCRVLImageProcessorPil,
                             "<|image_pad|>")
        _generates_as_transformers(model, out, inputs)


def test_instructblip_folder_reads_each_images_query_prompt(tmp_path):
    directory, out = str(tmp_path / "instructblip"), str(tmp_path / "onnx")
    model = write_instructblip(directory)
    export_hf(directory, "image-text-to-text", out)
    processor = transformers.BlipImageProcessorPil.from_pretrained(directory)
    texts = ["user: <image> what is in this picture ? assistant:", "<image> describe it"]  # an image a prompt
    for prompts, sizes in (([texts[0]], [(40, 48)]), (texts, [(40, 48), (32, 64)])):
        queries = torch.randint(3, 64, (len(sizes), 5), generator=torch.Generator().manual_seed(len(sizes)))
        inputs = {**token_inputs(directory, prompts, "<image>", [4] * len(sizes)),
                  **processor(images(*sizes), return_tensors="pt"), "qformer_input_ids": queries,
                  "qformer_attention_mask": torch.ones_like(queries)}
        _generates_as_transformers(model, out, inputs)


@pytest.mark.parametrize("kind", ["llava_next", "llava_onevision"])
def test_any_resolution_folder_lays_out_each_images_tiles_by_its_size(tmp_path, kind):
    directory, out = str(tmp_path / kind), str(tmp_path / "onnx")
    model = write_any_resolution(directory, kind)
    export_hf(directory, "image-text-to-text", out)
    processor = transformers.AutoImageProcessor.from_pretrained(directory)
    for texts, per_prompt in (([TEXTS[0]], [[(40, 48)]]), (TEXTS, [[(20, 90)], [(64, 64), (33, 33)]])):
        pixels = dict(processor([images(*sizes) for sizes in per_prompt], return_tensors="pt"))
        with torch.no_grad():
            rows = model.model.get_image_features(**pixels, return_dict=True).pooler_output
        assert len(rows) == 1 or len({r.shape[0] for r in rows}) > 1  # the counts of rows follow the sizes
        inputs = token_inputs(directory, texts, "<image>", [r.shape[0] for r in rows])
        _generates_as_transformers(model, out, {**inputs, **pixels})


def test_lfm2_vl_folder_merges_each_images_naflex_blocks_by_its_grid(tmp_path):
    from onnxport.hf.multimodal.examples import naflex_pixels

    directory, out = str(tmp_path / "lfm2_vl"), str(tmp_path / "onnx")
    model = write_lfm2_vl(directory)
    export_hf(directory, "image-text-to-text", out)  # no processor here: NaFlex examples of made-up grids
    for texts, grids in (([TEXTS[0]], [(2, 3)]), (TEXTS, [(4, 1), (2, 2), (1, 5)])):
        pixels = naflex_pixels(model.config, grids, seed=3)
        rows = [h * w for h, w in grids]  # a row per 2x2 block of patches
        inputs = token_inputs(directory, texts, "<image>", rows)
        _generates_as_transformers(model, out, {**inputs, **pixels})


def test_instructblipvideo_folder_reads_each_frame_of_a_video(tmp_path):
    directory, out = str(tmp_path / "instructblipvideo"), str(tmp_path / "onnx")
    model = write_instructblipvideo(directory)
    export_hf(directory, "image-text-to-text", out)  # no processor here: videos of random frames
    generator = torch.Generator().manual_seed(4)
    for texts, frames in (([TEXTS[0]], 4), (TEXTS, 4), (TEXTS, 2)):
        videos = sum(t.count("<image>") for t in texts)
        pixels = torch.randn(videos, frames, 3, 32, 32, generator=generator)
        query = torch.randint(3, 64, (videos, 5), generator=generator)
        prompts = [t.replace("<image>", "<video>") for t in texts]
        inputs = token_inputs(directory, prompts, "<video>", [4 * frames] * videos)  # 4 rows a frame
        _generates_as_transformers(model, out, {**inputs, "pixel_values": pixels, "qformer_input_ids": query,
                                                "qformer_attention_mask": torch.ones_like(query)})
