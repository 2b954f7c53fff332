"""HunYuan-VL's vision tower, computed for every image at once during the capture.

transformers' tower (``HunYuanVLVisionTransformer``) loops over the images twice, by their grids' values read
into Python numbers: its embedding resizes the learned square table of positions to each image's grid
(``F.interpolate``), and its merger shapes each image's patches to its grid, merges each ``m x m`` block with a
strided convolution, ends each row of blocks with a learned newline and wraps the image in learned begin and end
rows. One graph for any number and size of images cannot hold either loop. During the capture
(:func:`hunyuan_tower_on`) the tower computes the same with tensor ops:

- positions: each patch's taps into the table and their weights, from its row and column
  (``_vision_windows.interpolation_indices_and_weights``, transformers' own formula for ``F.interpolate``);
- the merger: each block's patches gathered (row ``r * m + i``, column ``c * m + j`` of its image, raster order:
  ``_vision_windows.merged_block_index``),
  the convolution as the matrix product it is on them, then every image's rows laid out at once: row ``k`` of
  an image ``w / m`` blocks wide is its begin row for ``k == 0``, its end row for the last, and otherwise, for
  ``k - 1 = q * (w / m + 1) + p``, the newline where ``p == w / m`` and block ``(q, p)`` elsewhere.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

import torch

from onnxport.hf._vision_windows import image_of_each, interpolation_indices_and_weights, merged_block_index
from onnxport.hf.attribute_swap import swapped

__all__ = ["hunyuan_tower_on", "merged_rows", "tower_forward"]

_MODULE = "transformers.models.hunyuan_vl.modeling_hunyuan_vl"


def _positions(embed: torch.nn.Module, grid_thw: torch.Tensor) -> torch.Tensor:
    """Each patch's learned position, the square table resized to its image's grid (raster order, every frame)."""
    side = embed.position_edge
    table = embed.position_embedding.weight[1:].float()
    taps, weights = interpolation_indices_and_weights(grid_thw, side, mode=embed.config.interpolate_mode)
    return (table[taps] * weights[..., None]).sum(1)


def _embedded(embed: torch.nn.Module, pixel_values: torch.Tensor, grid_thw: torch.Tensor) -> torch.Tensor:
    """``HunYuanVLVisionPatchEmbed.forward``: ``[1, patches, hidden]``."""
    pixels = pixel_values.reshape(-1, embed.config.num_channels, embed.patch_size, embed.patch_size)
    patches = embed.patch_embedding(pixels.to(embed.patch_embedding.weight.dtype)).flatten(1)
    return (patches + _positions(embed, grid_thw).to(patches.dtype)).unsqueeze(0)


def merged_rows(merger: torch.nn.Module, states: torch.Tensor, grid_thw: torch.Tensor) -> torch.Tensor:
    """``HunYuanVLVisionPatchMerger`` over every image of ``grid_thw`` (single frames), ``states``
    ``[1, patches, hidden]`` in raster order: ``[1, rows, text hidden]``, each image's rows after the other's."""
    m = merger.spatial_merge_size
    grid = grid_thw.to(torch.int64)
    rows, cols = grid[:, 1], grid[:, 2]
    down, across = rows // m, cols // m
    normed = merger.before_rms(states[0])
    # each block's patches, (i, j) row-major, as the convolution's kernel lays them out: [blocks, m * m, hidden]
    blocks = normed[merged_block_index(grid, m, m)]
    conv = merger.proj_conv
    kernel = conv.weight.permute(0, 2, 3, 1).reshape(conv.weight.shape[0], -1)
    merged = merger.proj_act(blocks.reshape(blocks.shape[0], -1) @ kernel.t() + conv.bias)
    out = merger.proj_out
    merged = merged @ out.weight.reshape(out.weight.shape[0], -1).t() + out.bias
    newline = merger.image_newline.to(merged.dtype)[None]
    features = merger.mlp(torch.cat([merged, newline]))  # the blocks' rows, then the newline's
    blocks_count = merged.shape[0]
    dtype = features.dtype
    table = torch.cat([features, merger.image_begin.to(dtype)[None], merger.image_end.to(dtype)[None]])
    # every image's rows: begin, its rows of blocks each ended by the newline, end
    per_image = down * (across + 1) + 2
    image, local = image_of_each(per_image)
    first_block = torch.cumsum(down * across, 0) - down * across
    k = (local - 1).clamp(min=0)
    wide = across[image] + 1
    row, place = k // wide, k % wide
    index = torch.where(place == across[image], blocks_count, first_block[image] + row * across[image] + place)
    index = torch.where(local == 0, blocks_count + 1, index)
    index = torch.where(local == per_image[image] - 1, blocks_count + 2, index)
    return merger.after_rms(table[index]).unsqueeze(0)


def tower_forward(self: torch.nn.Module, pixel_values: torch.Tensor, grid_thw: torch.Tensor, **kwargs: Any) -> Any:
    """``HunYuanVLVisionTransformer.forward`` for every image at once (see the module)."""
    from transformers.modeling_outputs import BaseModelOutputWithPooling
    from transformers.vision_utils import get_vision_attention_seqlens

    states = _embedded(self.embeddings, pixel_values, grid_thw)
    cu_seqlens, max_seqlen = get_vision_attention_seqlens(grid_thw, self.config, kwargs=kwargs)
    for layer in self.layers:
        states = layer(states, cu_seqlens=cu_seqlens, max_seqlen=max_seqlen, attention_mask=None, **kwargs)
    return BaseModelOutputWithPooling(last_hidden_state=states,
                                      pooler_output=merged_rows(self.patch_merger, states, grid_thw))


@contextlib.contextmanager
def hunyuan_tower_on() -> Iterator[None]:
    """HunYuan-VL's vision tower computes with :func:`tower_forward` inside the context, where its modeling module
    is loaded; restored on exit."""
    module = sys.modules.get(_MODULE)
    if module is None:
        yield
        return
    with swapped([(module.HunYuanVLVisionTransformer, "forward", tower_forward)]):
        yield
