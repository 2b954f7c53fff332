"""Vision towers that pack every image's patches in one sequence (Qwen2-VL, GLM-4V, ...): captured with one
attention masked per image (:mod:`onnxport.hf._packed_attention`) instead of transformers' split by sizes
that are data, which torch.export cannot capture."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.export import Dim

import onnxport
from onnxport.hf._packed_attention import packed_attention, packed_attention_on

transformers = pytest.importorskip("transformers")
from transformers.models.glm4v import modeling_glm4v  # noqa: E402
from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl  # noqa: E402
from transformers.models.qwen2_vl import modeling_qwen2_vl  # noqa: E402
from transformers.models.qwen3_vl import modeling_qwen3_vl  # noqa: E402

pytestmark = pytest.mark.transformers


def _qwen2_vl_tower() -> torch.nn.Module:
    config = transformers.Qwen2VLConfig().vision_config.__class__(
        depth=2, embed_dim=32, hidden_size=32, num_heads=2, mlp_ratio=2, in_channels=3, patch_size=4,
        spatial_merge_size=2, temporal_patch_size=2)
    return modeling_qwen2_vl.Qwen2VisionTransformerPretrainedModel(config).eval()


def _glm4v_tower() -> torch.nn.Module:
    config = transformers.Glm4vConfig().vision_config.__class__(
        depth=2, hidden_size=32, num_heads=2, intermediate_size=64, in_channels=3, image_size=32, patch_size=4,
        spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=32)
    return modeling_glm4v.Glm4vVisionModel(config).eval()


def _qwen2_5_vl_tower() -> torch.nn.Module:
    """Windows of 2 x 2 merged patches in its first layer, full attention in its second."""
    config = transformers.Qwen2_5_VLConfig().vision_config.__class__(
        depth=2, hidden_size=32, intermediate_size=64, num_heads=2, in_channels=3, patch_size=4,
        spatial_merge_size=2, temporal_patch_size=2, window_size=16, fullatt_block_indexes=[1], out_hidden_size=32)
    return modeling_qwen2_5_vl.Qwen2_5_VisionTransformerPretrainedModel(config).eval()


def _qwen3_vl_tower() -> torch.nn.Module:
    """Learned positions (an 8 x 8 table) interpolated to each image's grid."""
    config = transformers.Qwen3VLConfig().vision_config.__class__(
        depth=2, hidden_size=32, intermediate_size=64, num_heads=2, in_channels=3, patch_size=4,
        spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=32, num_position_embeddings=64,
        deepstack_visual_indexes=[0])
    return modeling_qwen3_vl.Qwen3VLVisionModel(config).eval()


def _patches(tower: torch.nn.Module, grid: list[list[int]]) -> dict[str, torch.Tensor]:
    config = tower.config
    width = config.in_channels * config.temporal_patch_size * config.patch_size**2
    count = sum(t * h * w for t, h, w in grid)
    return {"hidden_states": torch.randn(count, width), "grid_thw": torch.tensor(grid)}


# Qwen2.5-VL takes every piece (packed attention, positions, windows), Qwen3-VL the interpolated positions (in
# the sweep: make test exports Qwen3-VL whole); the other two (slow: the same pieces) are for `make test-slow`.
@pytest.mark.parametrize("build", [pytest.param(_qwen2_vl_tower, marks=pytest.mark.slow),
                                   pytest.param(_glm4v_tower, marks=pytest.mark.slow), _qwen2_5_vl_tower,
                                   pytest.param(_qwen3_vl_tower, marks=pytest.mark.sweep)],
                         ids=["qwen2_vl", "glm4v", "qwen2_5_vl", "qwen3_vl"])
def test_images_of_other_sizes_and_counts_than_the_example(build) -> None:
    """Captured from two 4x4-patch images with a dynamic patch count and image count, the graph matches
    eager for two images of other sizes (4x2 and 6x6), for three and for one: each image's bounds and
    positions are computed at run time, not baked in (and Qwen2.5-VL's windows: 1 to 9 of them, full and
    partial, where the example has 1 each). Verification, which cannot resize those dims alone, says so."""
    ort = pytest.importorskip("onnxruntime")
    torch.manual_seed(0)
    tower = build()
    example = _patches(tower, [[1, 4, 4], [1, 4, 4]])
    prog = onnxport.export(tower, (), example, dynamic_shapes={"hidden_states": {0: Dim.DYNAMIC},
                                                                 "grid_thw": {0: Dim.DYNAMIC}})
    assert tower.config._attn_implementation == "sdpa"  # the user's model is left as it was
    session = ort.InferenceSession(prog.model_proto.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    assert names[:2] == ["last_hidden_state", "pooler_output"]
    for grid in ([[1, 4, 2], [1, 6, 6]], [[1, 2, 2], [1, 4, 4], [1, 8, 6]], [[1, 10, 10]]):
        other = _patches(tower, grid)
        with torch.no_grad():
            expected = tower(**other)
        got = session.run(None, {i.name: other[i.name].numpy() for i in session.get_inputs()})
        for name, value in zip(names[:2], got):
            np.testing.assert_allclose(value, expected[name].numpy(), atol=1e-4, rtol=0)
    checked_once = [note for note in prog.report.notes if "checked at the example's size only" in note]
    assert len(checked_once) == 2, prog.report.notes  # the patch count and the image count


@pytest.mark.parametrize("grid", [[[1, 4, 4], [1, 4, 4]], [[1, 16, 12], [2, 8, 20], [1, 2, 2]], [[3, 14, 6]]])
@pytest.mark.parametrize("window", [(112, 14, 2), (16, 4, 2)], ids=["qwen_default", "small"])
def test_window_order_as_transformers_computes_it(grid, window) -> None:
    """The window order from sort keys equals transformers' loop over images, and so do the window bounds
    once the empty windows' repeated bounds are dropped (as transformers drops them)."""
    from transformers import vision_utils

    from onnxport.hf._vision_windows import window_index

    window_size, patch_size, merge = window
    grid_thw = torch.tensor(grid)
    expected = vision_utils.get_vision_window_index(grid_thw, merge, window_size, patch_size)
    got = window_index(grid_thw, merge, window_size, patch_size)
    assert torch.equal(got[0], expected[0])
    assert torch.equal(torch.unique_consecutive(got[1]), expected[1])


@pytest.mark.parametrize("grid", [[[1, 4, 4], [1, 4, 4]], [[1, 16, 12], [2, 8, 20], [1, 2, 2]], [[3, 14, 6]]])
def test_positions_as_transformers_computes_them(grid) -> None:
    """Every patch's (frame,) row and column, for one merge size and for one per image."""
    from transformers import vision_utils

    from onnxport.hf._vision_windows import position_ids

    grid_thw = torch.tensor(grid)
    for merge in (2, torch.tensor([2, 1, 2][: len(grid)])):
        for temporal in (False, True):
            expected = vision_utils.get_vision_position_ids(grid_thw, merge, include_temporal=temporal)
            assert torch.equal(position_ids(grid_thw, merge, include_temporal=temporal), expected)


@pytest.mark.parametrize("options", [{}, {"spatial_merge_size": 2},
                                     {"mode": "bicubic", "align_corners": True, "spatial_merge_size": 2,
                                      "padding": "zeros"}], ids=["raster", "merged", "bicubic"])
def test_interpolated_positions_as_transformers_computes_them(options) -> None:
    """Each patch's taps into the learned position table, and their weights (Qwen3-VL and its kin)."""
    from transformers import vision_utils

    from onnxport.hf._vision_windows import interpolation_indices_and_weights

    for grid in ([[1, 4, 4], [1, 4, 8]], [[2, 6, 10], [1, 2, 2], [1, 8, 2]]):
        grid_thw = torch.tensor(grid)
        expected = vision_utils.get_vision_interpolation_indices_and_weights(grid_thw, 48, **options)
        got = interpolation_indices_and_weights(grid_thw, 48, **options)
        assert torch.equal(got[0], expected[0])
        torch.testing.assert_close(got[1], expected[1], atol=0, rtol=0)


def test_same_as_splitting_per_sequence() -> None:
    """Three sequences (one of a single token) with grouped key/value heads: the masked attention equals
    attending within each piece alone."""
    torch.manual_seed(1)
    bounds = torch.tensor([0, 3, 4, 9])
    query, key, value = torch.randn(1, 4, 9, 8), torch.randn(1, 2, 9, 8), torch.randn(1, 2, 9, 8)
    module = torch.nn.Module()
    got, _ = packed_attention(module, query, key, value, None, scaling=0.5, cu_seq_lens_q=bounds,
                              cu_seq_lens_k=bounds)
    pieces = []
    for start, end in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        k, v = (t[:, :, start:end].repeat_interleave(2, dim=1) for t in (key, value))
        pieces.append(torch.nn.functional.scaled_dot_product_attention(query[:, :, start:end], k, v, scale=0.5))
    torch.testing.assert_close(got, torch.cat(pieces, dim=2).transpose(1, 2))


def test_only_towers_that_split_are_switched_and_restored() -> None:
    """A tower whose layers take ``cu_seqlens`` computes packed only inside the context, an error included;
    a model without such layers is untouched."""
    tower = _qwen2_vl_tower()
    with pytest.raises(RuntimeError), packed_attention_on(tower):
        assert "flash" in tower.config._attn_implementation
        raise RuntimeError
    assert tower.config._attn_implementation == "sdpa"
    text = transformers.BertModel(transformers.BertConfig(hidden_size=32, num_hidden_layers=1,
                                                          num_attention_heads=2, intermediate_size=64))
    with packed_attention_on(text):
        assert text.config._attn_implementation == "sdpa"
