"""The rewrites of vision towers' Python loops over the images (by their grids' values) that run during the
capture, each against the loop it stands for, on images of several sizes at once: PaddleOCR-VL's merging
projector, Muse Glimmer's pixel-shuffle order, ERNIE-VL's frame pairs, Cosmos3 Edge's antialiased positions and
VideoLLaMA 3's downsampling (``_vision_windows``), LFM3-VL's grid convolution
(``_grid_convolution``) and HunYuan-VL's tower (``_hunyuan_vision``)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

pytestmark = pytest.mark.transformers


@pytest.mark.parametrize("grid", [[[1, 4, 4], [1, 4, 4]], [[1, 16, 12], [2, 8, 20], [1, 2, 2]], [[3, 14, 6]]])
def test_merged_projector_as_transformers_computes_it(grid) -> None:
    """PaddleOCR-VL's projector with every image's blocks gathered at once equals its loop over the images."""
    from transformers import PaddleOCRVLConfig
    from transformers.models.paddleocr_vl.modeling_paddleocr_vl import PaddleOCRProjector

    from onnxport.hf._vision_windows import merged_projector_forward

    torch.manual_seed(0)
    config = PaddleOCRVLConfig(vision_config=dict(hidden_size=8, spatial_merge_size=2),
                               text_config=dict(hidden_size=16))
    projector = PaddleOCRProjector(config).eval()
    grid_thw = torch.tensor(grid)
    features = torch.randn(int(grid_thw.prod(-1).sum()), 8)
    with torch.no_grad():
        torch.testing.assert_close(merged_projector_forward(projector, features, grid_thw),
                                   projector(features, grid_thw), atol=1e-6, rtol=1e-6)


def test_unshuffled_tower_as_transformers_computes_it() -> None:
    """VideoLLaMA 3's per-image downsampling by each image's merge size (1 and 2 mixed), for all images at once."""
    from transformers.models.video_llama_3.modeling_video_llama_3 import VideoLlama3VisionModel

    from onnxport.hf._vision_windows import unshuffled_forward

    torch.manual_seed(0)
    grid_thw, merges = torch.tensor([[1, 4, 6], [1, 2, 2], [2, 4, 4], [1, 6, 2]]), torch.tensor([2, 1, 2, 1])
    states = torch.randn(int(grid_thw.prod(-1).sum()), 8)
    expected = VideoLlama3VisionModel.pixel_unshuffle(None, states, grid_thw, merges)
    torch.testing.assert_close(unshuffled_forward(None, states, grid_thw, merges), expected, atol=1e-6, rtol=1e-6)


def test_grid_convolution_as_transformers_computes_it() -> None:
    """LFM3-VL's gated depthwise convolution over each frame's grid (patches in 2x2 blocks), for frames of three
    sizes at once, equals its loop over the images."""
    from transformers import Lfm3VlConfig
    from transformers.models.lfm3_vl.modeling_lfm3_vl import Lfm3VlVisionShortConv

    from onnxport.hf._grid_convolution import grid_convolution

    config = Lfm3VlConfig().vision_config
    config.hidden_size = 8
    torch.manual_seed(0)
    conv = Lfm3VlVisionShortConv(config, 0).eval()
    grid = torch.tensor([[1, 4, 6], [2, 2, 2], [1, 6, 4]])
    states = torch.randn(int(grid.prod(-1).sum()), 8)
    with torch.no_grad():
        gate, out_gate, conv_in = conv.in_proj(states).chunk(3, dim=-1)
        got = conv.out_proj(out_gate * grid_convolution(gate * conv_in, grid, conv.spatial_merge_size,
                                                        conv.spatial_conv))
        torch.testing.assert_close(got, conv(states, grid.tolist()), atol=1e-6, rtol=1e-6)


def test_hunyuan_tower_as_transformers_computes_it() -> None:
    """HunYuan-VL's tower (positions resized per image, blocks merged, newline, begin and end rows) for three
    images of other sizes at once."""
    from transformers import HunYuanVLConfig
    from transformers.models.hunyuan_vl.modeling_hunyuan_vl import HunYuanVLVisionTransformer

    from onnxport.hf._hunyuan_vision import tower_forward

    vision = HunYuanVLConfig(vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                                num_attention_heads=4, patch_size=8, max_image_size=64),
                             text_config=dict(hidden_size=48)).vision_config
    vision._attn_implementation = "sdpa"
    torch.manual_seed(0)
    tower = HunYuanVLVisionTransformer(vision).eval()
    with torch.no_grad():
        for parameter in tower.parameters():
            parameter.normal_(std=0.2)
        grid = torch.tensor([[1, 4, 6], [1, 2, 2], [1, 6, 4]])
        pixels = torch.randn(int(grid.prod(-1).sum()), 3 * 8 * 8)
        expected, got = tower(pixels, grid), tower_forward(tower, pixels, grid)
    rows = (2 * 4 + 2) + (1 * 2 + 2) + (3 * 3 + 2)  # 2x3, 1x1 and 3x2 blocks, a newline a row, begin and end
    assert got.pooler_output.shape == expected.pooler_output.shape == (1, rows, 48)
    torch.testing.assert_close(got.pooler_output, expected.pooler_output, atol=1e-5, rtol=1e-5)


def test_pixel_shuffle_order_as_transformers_computes_it() -> None:
    """Muse Glimmer's order of each image's 2x2 blocks (frames of videos included)."""
    from transformers.models.muse_glimmer.modeling_muse_glimmer import get_vision_pixel_shuffle_index

    from onnxport.hf._vision_windows import pixel_shuffle_index

    grid = torch.tensor([[1, 4, 6], [2, 2, 2], [1, 6, 4]])
    assert torch.equal(pixel_shuffle_index(grid, 2), get_vision_pixel_shuffle_index(grid, 2))


def test_frame_pairs_as_transformers_computes_them() -> None:
    """ERNIE-VL's resampler's even and odd frames side by side, for images and videos of 2, 3 and 4 frames."""
    import types

    from transformers.models.ernie4_5_vl_moe.modeling_ernie4_5_vl_moe import (
        Ernie4_5_VLMoeVariableResolutionResamplerModel as Resampler,
    )

    from onnxport.hf._vision_windows import temporal_slicing

    resampler = types.SimpleNamespace(spatial_merge_size=2)
    grid = torch.tensor([[1, 4, 6], [2, 2, 2], [4, 2, 4], [3, 2, 2], [1, 6, 4]])
    states = torch.randn(int((grid.prod(-1) // 4).sum()), 5)
    assert torch.equal(temporal_slicing(resampler, states, grid), Resampler._temporal_slicing(resampler, states, grid))


def test_antialiased_positions_as_transformers_computes_them() -> None:
    """Cosmos3 Edge's table of positions resized to grids smaller (antialiased) and larger than it, and a video's."""
    from transformers.models.cosmos3_edge.modeling_cosmos3_edge import Cosmos3EdgeVisionEmbeddings

    from onnxport.hf._vision_windows import resized_positions

    torch.manual_seed(0)
    table = torch.randn(8, 8, 5)
    grid = torch.tensor([[1, 4, 6], [2, 2, 2], [1, 12, 16], [1, 8, 8]])
    torch.testing.assert_close(resized_positions(table, grid, 2),
                               Cosmos3EdgeVisionEmbeddings.resize_positional_embeddings(table, grid, 2),
                               atol=1e-5, rtol=1e-5)
