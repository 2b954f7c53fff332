"""SigLIP 2's native-resolution ("NaFlex") image rows and LFM2-VL's merge of them, computed with tensor ops so that
torch.export can capture them for any number of images of any sizes.

A NaFlex processor cuts each image into patches at a size that keeps its aspect, gives every image's patches
padded to the batch's most (``pixel_attention_mask``) and each image's grid (``spatial_shapes``). SigLIP 2's vision
embeddings resize their learned square table of positions to each image's grid with an antialiased bilinear
resize, in a Python loop over the images, and LFM2-VL's ``get_image_features`` cuts each image's rows to its grid
and merges each ``f x f`` block of them into one row (``pixel_unshuffle``) before its projector, in another.

During the capture :func:`naflex_positions` weighs the table's rows and columns for every patch of every image at
once by torch's antialiasing rule (:func:`antialiased_taps`, which Cosmos3 Edge's positions use too; a padding
patch takes the first patch's position, as the loop fills it), and :func:`merged_image_features` gathers each
block's ``f * f`` rows (in ``pixel_unshuffle``'s order: row within the block, then column) for every image at once,
keeping the blocks inside each image's grid: their count is data, as it is.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["antialiased_taps", "merged_image_features", "naflex_positions"]


def antialiased_taps(index: torch.Tensor, size: torch.Tensor, side: int) -> torch.Tensor:
    """``[items, side]``: each item's weights on the ``side`` entries of an axis that ``F.interpolate(mode=
    "bilinear", antialias=True, align_corners=False)`` resizes to ``size`` entries, for output entry ``index``:
    a triangle as wide as the scale where it shrinks (1 where it grows), over the entries within its reach, summing
    to 1 (torch's own rule, written for every item at once)."""
    scale = side / size.to(torch.float64)
    support = torch.where(scale >= 1, scale, torch.ones_like(scale))
    center = scale * (index.to(torch.float64) + 0.5)
    low = (center - support + 0.5).trunc().clamp(min=0)
    high = (center + support + 0.5).trunc().clamp(max=side)
    entry = torch.arange(side, device=index.device, dtype=torch.float64)[None]
    weights = (1 - ((entry - center[:, None] + 0.5) / support[:, None]).abs()).clamp(min=0)
    weights = weights * ((entry >= low[:, None]) & (entry < high[:, None]))
    return (weights / weights.sum(-1, keepdim=True)).to(torch.float32)


def naflex_positions(positional_embeddings: torch.Tensor, spatial_shapes: torch.Tensor,
                     max_length: int) -> torch.Tensor:
    """SigLIP 2's ``resize_positional_embeddings``: the ``[side, side, hidden]`` table resized to each image's grid,
    ``[images, max_length, hidden]``, each image's patches row by row, then its first patch's again."""
    images = spatial_shapes.shape[0]
    heights = spatial_shapes[:, 0:1].to(torch.int64).expand(images, max_length)
    widths = spatial_shapes[:, 1:2].to(torch.int64).expand(images, max_length)
    place = torch.arange(max_length, device=spatial_shapes.device)[None].expand(images, max_length)
    place = torch.where(place < heights * widths, place, 0)
    down = antialiased_taps((place // widths).flatten(), heights.flatten(), positional_embeddings.shape[0])
    across = antialiased_taps((place % widths).flatten(), widths.flatten(), positional_embeddings.shape[1])
    resized = torch.einsum("pa,pb,abc->pc", down, across, positional_embeddings.float())
    return resized.reshape(images, max_length, -1).to(positional_embeddings.dtype)


def merged_image_features(self: Any, pixel_values: torch.Tensor, spatial_shapes: torch.Tensor,
                          pixel_attention_mask: torch.Tensor, **kwargs: Any) -> Any:
    """LFM2-VL's ``get_image_features`` (its base model's): every image's blocks of rows merged and projected, one
    image after the other, as its loop gives them (see the module)."""
    out = self.vision_tower(pixel_values=pixel_values, spatial_shapes=spatial_shapes,
                            pixel_attention_mask=pixel_attention_mask, return_dict=True)
    hidden = out.last_hidden_state
    images, length, width = hidden.shape
    projector = self.multi_modal_projector
    f = projector.factor
    heights, widths = spatial_shapes[:, 0].to(torch.int64), spatial_shapes[:, 1].to(torch.int64)
    across = torch.div(widths, f, rounding_mode="floor")
    blocks = torch.arange(length // (f * f), device=hidden.device)[None]
    inside = blocks < (torch.div(heights, f, rounding_mode="floor") * across)[:, None]
    down, right = torch.div(blocks, across[:, None], rounding_mode="floor"), blocks % across[:, None]
    i = torch.arange(f, device=hidden.device)[:, None]
    j = torch.arange(f, device=hidden.device)[None, :]
    source = (down[..., None, None] * f + i) * widths[:, None, None, None] + right[..., None, None] * f + j
    first = (torch.arange(images, device=hidden.device) * length)[:, None, None, None]
    source = torch.where(inside[..., None, None], source, 0) + first
    merged = hidden.reshape(-1, width)[source.flatten(2)].reshape(images, -1, f * f * width)[inside]
    if projector.use_layer_norm:
        merged = projector.layer_norm(merged)
    out.pooler_output = projector.linear_2(projector.act(projector.linear_1(merged)))
    return out
