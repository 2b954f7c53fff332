"""Swin-style layers pad an image to their patches, to even sides and to their windows behind Python tests of its
sides; during a capture they pad and crop at every size (``onnxport.hf._window_padding``), so one file takes
images of any side, each matching eager PyTorch."""

from __future__ import annotations

import pytest
import torch
import transformers
from torch.export import Dim

import onnxport


def _swin(kind: str) -> torch.nn.Module:
    common = {"image_size": 32, "patch_size": 4, "embed_dim": 8, "depths": [1, 2], "num_heads": [1, 2],
              "window_size": 2, "num_labels": 3}
    if kind == "swinv2":
        return transformers.Swinv2ForImageClassification(transformers.Swinv2Config(**common)).eval()
    return transformers.SwinForImageClassification(transformers.SwinConfig(**common)).eval()


@pytest.mark.parametrize("kind", ["swin", pytest.param("swinv2", marks=pytest.mark.sweep)])  # 30 s each
def test_a_swin_exported_at_one_size_is_right_at_sides_of_every_remainder(kind) -> None:
    torch.manual_seed(0)
    model = _swin(kind)
    side = Dim.DYNAMIC
    prog = onnxport.export(model, (torch.randn(1, 3, 32, 32),), dynamic_shapes=({2: side, 3: side},))
    assert "If" not in {n.op_type for n in prog.model.graph}  # padded at every size, not branched
    # sides not a multiple of the patch (4), patch grids of odd sides (9: merged to 5), grids not a multiple of the
    # window (2)
    for height, width in ((34, 30), (36, 44), (20, 52)):
        pixels = torch.randn(1, 3, height, width)
        with torch.no_grad():
            expected = model(pixel_values=pixels).logits
        torch.testing.assert_close(prog(pixels)[0], expected, atol=1e-4, rtol=1e-4)
    # verification's eager runs at made-up sizes (an image smaller than a window shrinks Swin's) left it as it was
    assert {block.window_size for stage in model.base_model.encoder.layers for block in stage.blocks} == {2}


class Fused(torch.nn.Module):
    """DPT's fusion layer called as its neck calls it: a hidden state and the residual from the level above."""

    def __init__(self) -> None:
        super().__init__()
        config = transformers.DPTConfig(fusion_hidden_size=8)
        self.layer = transformers.models.dpt.modeling_dpt.DPTFeatureFusionLayer(config)

    def forward(self, hidden: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.layer(hidden, residual)


def test_a_dpt_fusion_layer_exported_at_equal_sizes_takes_a_residual_of_another_size() -> None:
    """The layer resizes its residual only where the sizes differ (ZoeDepth's levels do for an image side of 93):
    during capture the residual comes resized already (``onnxport.hf._fusion_residuals``), the identity at equal
    sizes, so the file holds both cases."""
    torch.manual_seed(0)
    model = Fused().eval()
    side = Dim.DYNAMIC
    example = (torch.randn(1, 8, 8, 8), torch.randn(1, 8, 8, 8))
    prog = onnxport.export(model, example, dynamic_shapes=({2: side, 3: side}, {2: side, 3: side}))
    for hidden, residual in (((1, 8, 12, 10), (1, 8, 6, 5)), ((1, 8, 8, 8), (1, 8, 8, 8))):
        inputs = torch.randn(*hidden), torch.randn(*residual)
        with torch.no_grad():
            expected = model(*inputs)
        torch.testing.assert_close(prog(*inputs), expected, atol=1e-5, rtol=1e-4)


def test_a_four_stage_swin_keeps_each_stages_sides_one_short_expression() -> None:
    """Each stage's padded, merged and windowed sides are written in the form of Swin's own halved sizes
    (``(height + 1) // 2``), so torch sees them equal to the sizes the next stage is told: the sizes stay a chain of
    four halvings, where another form of the same numbers grew to thousands of characters (and the capture of four
    stages from seconds to minutes)."""
    torch.manual_seed(0)
    config = transformers.SwinConfig(image_size=32, patch_size=4, embed_dim=8, depths=[1, 1, 1, 1],
                                     num_heads=[1, 1, 1, 1], window_size=2)
    model = transformers.SwinModel(config).eval()
    side = Dim.DYNAMIC
    prog = onnxport.export(model, (torch.randn(1, 3, 96, 128),), dynamic_shapes=({2: side, 3: side},))
    longest = max((str(value.shape) for node in prog.model.graph for value in node.outputs
                   if value.shape is not None), key=len)
    assert len(longest) < 300, longest
    # the last stage is at least the window wide (a smaller image shrinks Swin's window, which eager refuses)
    for height, width in ((96, 129), (65, 77), (200, 131)):
        pixels = torch.randn(1, 3, height, width)
        with torch.no_grad():
            expected = model(pixel_values=pixels).last_hidden_state
        torch.testing.assert_close(prog(pixels)[0], expected, atol=1e-4, rtol=1e-4)
