"""The pieces a vision-language model is split into (``onnxport.hf.multimodal.components``), in PyTorch, against the
model's own forward, for the family traits no folder test reaches: Molmo 2's image processor needs torchvision, so
its folders are checked by the census (bench/image_text_census.md) and its traits here. Molmo 2 adds its image rows
to the image tokens' embeddings (``Family.rows_added``) and lets its image tokens attend to each other both ways
while it fills its cache, a decision its forward takes from the cache (``Family.flag_blocks``)."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from onnxport.hf.multimodal.components import FeatureMerge, ImageEncoder, WideDecoder  # noqa: E402
from onnxport.hf.multimodal.families import Family  # noqa: E402
from onnxport.hf.signature import cache_argument, cache_of  # noqa: E402
from tests.vlm_dirs import spread  # noqa: E402

pytestmark = pytest.mark.transformers

IMAGE = 1020  # Molmo 2's image_patch_id, moved into the tiny vocabulary


def _molmo2() -> torch.nn.Module:
    sizes = {"hidden_size": 64, "num_attention_heads": 4, "head_dim": 16, "intermediate_size": 128}
    config = transformers.Molmo2Config(
        text_config={**sizes, "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 1024,
                     "additional_vocab_size": 128},
        vision_config={**sizes, "num_key_value_heads": 4, "num_hidden_layers": 2, "image_size": [64, 64],
                       "patch_size": 8, "num_position_embeddings": 64},
        adapter_config={**sizes, "num_key_value_heads": 4, "vision_feature_layer": [-1, -2], "text_hidden_size": 64},
        image_patch_id=IMAGE, image_start_token_id=1023, low_res_image_start_token_id=1022, image_end_token_id=1021,
        frame_start_token_id=1019, frame_end_token_id=1018, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    torch.manual_seed(0)
    model = transformers.Molmo2ForConditionalGeneration(config).eval()
    spread(model)  # so that the attention's pattern counts: transformers' init leaves its scores nearly tied
    return model


def _inputs() -> dict[str, torch.Tensor]:
    """A left-padded batch of two prompts, of one image (8 rows: a 2x2 and a 2x2 grid of pooled tokens) and of
    two (8 and 2 rows), with the processor's pooling of each image's crop's 64 patches."""
    generator = torch.Generator().manual_seed(1)
    grids = torch.tensor([[2, 2, 2, 2], [2, 2, 2, 2], [1, 1, 1, 1]])
    rows = int((grids[:, 0] * grids[:, 1] + grids[:, 2] * grids[:, 3]).sum())
    first = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 5, *[IMAGE] * 8, 17, 33]
    second = [1, 7, *[IMAGE] * 8, 12, 9, *[IMAGE] * 2, 21, 30, 40, 41, 42, 43, 44, 45]
    ids = torch.tensor([first, second])
    return {"input_ids": ids, "attention_mask": torch.tensor([[0] * 10 + [1] * 12, [1] * 22]),
            "mm_token_type_ids": (ids == IMAGE).long(),
            "pixel_values": torch.randn(3, 64, 192, generator=generator),
            "image_token_pooling": torch.randint(0, 3 * 64, (rows, 4), generator=generator),
            "image_grids": grids}


def test_molmo2_split_adds_its_rows_and_lets_its_image_tokens_see_each_other_as_its_forward_does() -> None:
    model = _molmo2()
    inputs = _inputs()
    family = Family.of(model, model.config)
    assert family.rows_added and family.flag_blocks and family.flag_argument == "mm_token_type_ids"
    mask, ids = inputs["attention_mask"], inputs["input_ids"]
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        expected = model(**inputs, position_ids=positions, use_cache=True)
        rows = ImageEncoder(model, family)(inputs["pixel_values"], image_token_pooling=inputs["image_token_pooling"],
                                           image_grids=inputs["image_grids"])
        embeds = FeatureMerge(model, family)(ids, rows)
        decoder = WideDecoder(model, family)
        got = decoder(embeds, mask, positions, **{cache_argument(model): transformers.DynamicCache(
            config=model.config)})
        assert torch.allclose(got.logits, expected.logits, atol=1e-4)
        # without the block of image tokens (as the captured forward decides from a cache of tensors), it differs
        plain = model(inputs_embeds=embeds[..., :family.hidden], attention_mask=mask, position_ids=positions)
        assert not torch.allclose(plain.logits, expected.logits, atol=1e-2)
        # a step with the cache: the new token attends causally, as transformers' forward without the flags
        new = expected.logits[:, -1].argmax(-1, keepdim=True)
        mask = torch.cat([mask, torch.ones_like(new)], dim=1)
        step = positions[:, -1:] + 1
        later = model(input_ids=new, attention_mask=mask, position_ids=step,
                      **{cache_argument(model): cache_of(expected)})
        got = decoder(FeatureMerge(model, family)(new, rows[:0]), mask, step,
                      **{cache_argument(model): cache_of(got)})
        assert torch.allclose(got.logits, later.logits, atol=1e-4)
