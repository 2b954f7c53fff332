"""SigLIP 2's positions resized to each image's grid and LFM2-VL's merge of each image's blocks, computed with tensor
ops (``onnxport.hf._naflex``, swapped in during the capture), against transformers' loops over the images: grids of
several shapes, padded to the batch's most patches."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from onnxport.hf._naflex import merged_image_features, naflex_positions  # noqa: E402
from onnxport.hf.multimodal.examples import naflex_pixels  # noqa: E402

pytestmark = pytest.mark.transformers

GRIDS = [[(3, 4)], [(3, 4), (1, 8), (4, 2)], [(2, 2), (4, 4), (1, 3)]]  # in units of the downsampling factor


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.Lfm2VlConfig(
        vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                           patch_size=4, num_patches=64),
        text_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                         num_key_value_heads=1, vocab_size=64, layer_types=["full_attention", "conv"]),
        projector_hidden_size=32, downsample_factor=2)
    return transformers.Lfm2VlModel(config).eval()


@pytest.mark.parametrize("grids", GRIDS)
def test_positions_resized_as_siglip2_resizes_them(grids) -> None:
    from transformers.models.siglip2.modeling_siglip2 import Siglip2VisionEmbeddings

    table = torch.randn(8, 8, 16, generator=torch.Generator().manual_seed(0))
    shapes = torch.tensor([[2 * h, 2 * w] for h, w in grids])
    longest = int(shapes.prod(-1).max()) + 3  # padding patches too
    want = Siglip2VisionEmbeddings.resize_positional_embeddings(table, shapes, longest)
    torch.testing.assert_close(naflex_positions(table, shapes, longest), want, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("grids", GRIDS)
def test_lfm2_vl_rows_as_its_loop_gives_them(grids) -> None:
    model = _model()
    given = naflex_pixels(model.config, grids)
    with torch.no_grad():
        want = torch.cat(list(model.get_image_features(**given, return_dict=True).pooler_output))
        got = merged_image_features(model, **given).pooler_output
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
