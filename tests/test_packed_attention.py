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
from transformers.models.qwen2_vl import modeling_qwen2_vl  # noqa: E402

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


def _patches(tower: torch.nn.Module, grid: list[list[int]]) -> dict[str, torch.Tensor]:
    config = tower.config
    width = config.in_channels * config.temporal_patch_size * config.patch_size**2
    count = sum(t * h * w for t, h, w in grid)
    return {"hidden_states": torch.randn(count, width), "grid_thw": torch.tensor(grid)}


@pytest.mark.parametrize("build", [_qwen2_vl_tower, _glm4v_tower], ids=["qwen2_vl", "glm4v"])
def test_images_of_other_sizes_than_the_example(build) -> None:
    """Captured from two 4x4-patch images with a dynamic patch count, the graph matches eager for two
    images of other sizes (4x2 and 6x6): each image's bounds are read at run time, not baked in."""
    ort = pytest.importorskip("onnxruntime")
    torch.manual_seed(0)
    tower = build()
    example = _patches(tower, [[1, 4, 4], [1, 4, 4]])
    prog = onnxport.export(tower, (), example, dynamic_shapes={"hidden_states": {0: Dim.DYNAMIC},
                                                                 "grid_thw": {0: 2}})
    assert tower.config._attn_implementation == "sdpa"  # the user's model is left as it was
    session = ort.InferenceSession(prog.model_proto.SerializeToString(), providers=["CPUExecutionProvider"])
    other = _patches(tower, [[1, 4, 2], [1, 6, 6]])
    with torch.no_grad():
        expected = tower(**other)
    got = session.run(None, {i.name: other[i.name].numpy() for i in session.get_inputs()})
    names = [o.name for o in session.get_outputs()]
    assert names == ["last_hidden_state", "pooler_output"]
    for name, value in zip(names, got):
        np.testing.assert_allclose(value, expected[name].numpy(), atol=1e-4, rtol=0)
    assert any("checked at the example's size only" in note for note in prog.report.notes)


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
