"""Tiny LFM2-VL and LFM3-VL directories with their processors' settings, as their processors' ``save_pretrained``
writes them (``processor_config.json``, the image processor's nested), written here where the processor cannot be
built: LFM2-VL's image processor and LFM3-VL's video processor need torchvision. Their sizes are the tiny models'
(4-pixel patches, 2x2 blocks). Nothing downloaded."""

from __future__ import annotations

import json
import os

import torch
import transformers

from tests import vlm_dirs

# The tokens LFM2-VL's processor puts around an image's: its start and end, a tile's place, the thumbnail's.
LFM2_VL_TOKENS = ("<image>", "<|image_start|>", "<|image_end|>", "<|img_thumbnail|>",
                  *(f"<|img_row_{r}_col_{c}|>" for r in range(1, 5) for c in range(1, 5)))
# LFM2-VL's image processor's settings that are not its defaults: tiles of 32 pixels, 4 to 16 tokens an image,
# and a tolerance that cuts a picture of 32x64 into two tiles and a thumbnail, not one of 40x48.
LFM2_VL_SIZES = {"tile_size": 32, "min_image_tokens": 4, "max_image_tokens": 16, "max_tiles": 4,
                 "max_pixels_tolerance": 1.9}
LFM3_VL_TOKENS = ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>")
LFM3_VL_IMAGE = "<|vision_start|><|image_pad|><|vision_end|>"  # one image in an LFM3-VL prompt


def lfm2_vl_image_processor(config: transformers.Lfm2VlConfig) -> dict[str, object]:
    """What ``Lfm2VlImageProcessor(**LFM2_VL_SIZES, encoder_patch_size=..., downsample_factor=...)`` saves for a
    model of ``config``, its defaults included (``size``, which its resizing does not read)."""
    patch, factor = config.vision_config.patch_size, config.downsample_factor
    sizes = {"downsample_factor": factor, "encoder_patch_size": patch, **LFM2_VL_SIZES}
    most = max(sizes["max_image_tokens"] * factor**2, (sizes["tile_size"] // patch) ** 2)
    return {"do_image_splitting": True, "do_normalize": True, "do_pad": True, "do_rescale": True, "do_resize": True,
            "image_mean": [0.5, 0.5, 0.5], "image_processor_type": "Lfm2VlImageProcessor",
            "image_std": [0.5, 0.5, 0.5], "max_num_patches": most, "min_tiles": 2, "resample": 2,
            "rescale_factor": 1 / 255, "return_row_col_info": False, "size": {"height": 512, "width": 512},
            "use_thumbnail": True, **sizes}


def write_lfm2_vl_with_processor(directory: str) -> torch.nn.Module:
    """``vlm_dirs.write_lfm2_vl``'s model, its tokenizer with LFM2-VL's image tokens, and its processor's
    settings (``Lfm2VlProcessor``'s)."""
    model = vlm_dirs.write_lfm2_vl(directory, LFM2_VL_TOKENS)
    _save_processor(directory, lfm2_vl_image_processor(model.config), "Lfm2VlProcessor")
    return model


def write_lfm3_vl(directory: str) -> torch.nn.Module:
    """A random LFM3-VL (its vision tower on 4x4 patches merged 2x2, two short-convolution layers then an attention
    one; an LFM3 text model), its tokenizer (``image_token`` named, as its processor reads it) and its processor's
    settings (``Lfm3VlProcessor``'s, its Qwen2-VL image processor's: 4 to 64 tokens an image)."""
    torch.manual_seed(0)
    vocab = vlm_dirs.write_tokenizer(directory, LFM3_VL_TOKENS)
    config = transformers.Lfm3VlConfig(
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
                           num_key_value_heads=2, patch_size=4, spatial_merge_size=2, temporal_patch_size=2),
        text_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=8, vocab_size=len(vocab), max_position_embeddings=512,
                         layer_types=["full_attention", "conv"], bos_token_id=1, eos_token_id=2, pad_token_id=0),
        projector_hidden_size=32, image_token_id=vocab["<|image_pad|>"], video_token_id=vocab["<|video_pad|>"],
        vision_start_token_id=vocab["<|vision_start|>"], vision_end_token_id=vocab["<|vision_end|>"])
    model = transformers.Lfm3VlForConditionalGeneration(config).eval()
    vlm_dirs.spread(model)
    model.save_pretrained(directory)
    image_processor = transformers.Qwen2VLImageProcessorPil(patch_size=4, temporal_patch_size=2, merge_size=2,
                                                            min_pixels=16 * 16, max_pixels=64 * 64)
    _save_processor(directory, json.loads(image_processor.to_json_string()), "Lfm3VlProcessor")
    path = os.path.join(directory, "tokenizer_config.json")
    with open(path, encoding="utf-8") as f:
        settings = json.load(f)
    with open(path, "w", encoding="utf-8") as f:
        json.dump({**settings, "extra_special_tokens": {"image_token": "<|image_pad|>"}}, f)
    return model


def _save_processor(directory: str, image_processor: dict[str, object], processor_class: str) -> None:
    with open(os.path.join(directory, "processor_config.json"), "w", encoding="utf-8") as f:
        json.dump({"image_processor": image_processor, "processor_class": processor_class}, f, indent=2)
