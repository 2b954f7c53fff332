"""LLaVA-NeXT's and LLaVA-OneVision's any-resolution rows computed with tensor ops (``onnxport.hf._any_resolution``,
swapped in during the capture) against transformers' loop over the images: images of several sizes whose best
pinpoints differ, tiles padded to the batch's most, OneVision's prompts of several images (untiled) and its
bilinear shrink of a grid over its budget of tiles."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from onnxport.hf._any_resolution import any_resolution_features  # noqa: E402

pytestmark = pytest.mark.transformers

PINPOINTS = [[32, 32], [32, 64], [64, 32], [64, 64], [32, 96]]
SIZES = [(40, 48), (16, 20), (64, 30), (20, 90), (90, 20), (33, 33), (64, 64), (32, 96)]


def _model(kind: str) -> torch.nn.Module:
    torch.manual_seed(0)
    config_class = {"llava_next": transformers.LlavaNextConfig, "llava_onevision": transformers.LlavaOnevisionConfig}
    vision = dict(model_type="siglip_vision_model" if kind == "llava_onevision" else "clip_vision_model",
                  hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2, image_size=32,
                  patch_size=8)
    text = dict(model_type="llama", hidden_size=16, num_attention_heads=2, num_hidden_layers=1, vocab_size=64)
    config = config_class[kind](vision_config=vision, text_config=text, image_grid_pinpoints=PINPOINTS,
                                vision_feature_layer=-1)
    model = {"llava_next": transformers.LlavaNextModel, "llava_onevision": transformers.LlavaOnevisionModel}[kind]
    return model(config).eval()


def _tiles(sizes: list[tuple[int, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Random tiles of each image, as many as its best pinpoint gives, padded to the batch's most with zeros."""
    from transformers.models.llava_next.modeling_llava_next import image_size_to_num_patches

    counts = [image_size_to_num_patches(list(s), PINPOINTS, 32) for s in sizes]
    pixels = torch.zeros(len(sizes), max(counts), 3, 32, 32)
    for i, n in enumerate(counts):
        pixels[i, :n] = torch.randn(n, 3, 32, 32, generator=torch.Generator().manual_seed(i))
    return pixels, torch.tensor(sizes)


def _loop(model: torch.nn.Module, pixels: torch.Tensor, sizes: torch.Tensor, **kwargs) -> torch.Tensor:
    with torch.no_grad():
        rows = model.get_image_features(pixel_values=pixels, image_sizes=sizes, return_dict=True, **kwargs)
    return torch.cat(list(rows.pooler_output))


@pytest.mark.parametrize("sizes", [SIZES[:1], SIZES[:3], SIZES[3:], SIZES])
def test_llava_next_rows_as_its_loop_gives_them(sizes) -> None:
    model = _model("llava_next")
    pixels, image_sizes = _tiles(sizes)
    want = _loop(model, pixels, image_sizes)
    with torch.no_grad():
        got = any_resolution_features(model, pixels, image_sizes).pooler_output
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("aspect", ["anyres_max_9", "anyres_max_1"])  # 1: the larger grids shrink bilinearly
@pytest.mark.parametrize("per_prompt", [[1, 1, 1, 1], [1, 3], [2, 2]])
def test_llava_onevision_rows_as_its_loop_gives_them(aspect, per_prompt) -> None:
    model = _model("llava_onevision")
    pixels, image_sizes = _tiles([SIZES[3], SIZES[6], SIZES[0], SIZES[7]])
    kwargs = dict(vision_aspect_ratio=aspect, batch_num_images=torch.tensor(per_prompt))
    want = _loop(model, pixels, image_sizes, **kwargs)
    with torch.no_grad():
        got = any_resolution_features(model, pixels, image_sizes, **kwargs).pooler_output
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
