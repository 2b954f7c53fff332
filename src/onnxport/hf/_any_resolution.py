"""LLaVA-NeXT's any-resolution image rows (LLaVA-NeXT-Video's, LLaVA-OneVision's), computed with tensor ops so that
torch.export can capture them for any number of images of any sizes.

A LLaVA-NeXT processor cuts each image into tiles of the vision tower's side after resizing it to the grid
pinpoint (``image_grid_pinpoints``) that fits it best, and gives them beside a base tile of the whole image,
padded with empty tiles to the batch's most. ``get_image_features`` then loops over the images in Python: it counts
each image's tiles from the values of ``image_sizes``, runs the tower on those alone, lays each image's tiles out
as its grid, crops the grid's rows (or columns) that the resize padded (``unpad_image``), ends each row with the
``image_newline`` row and puts the base tile's rows first. Every count there is a value of ``image_sizes``, which
one graph for every image cannot hold as Python numbers.

During the capture :func:`any_resolution_features` runs the tower on every tile (the padding ones too), and
:func:`packed_rows` gathers each image's rows from them: the best pinpoint by the processor's rule (the most
effective resolution, then the least waste, then the first), in float64 as Python computes it; the kept rows and
columns by ``unpad_image``'s rule; then one index per output row, into the tiles' rows and the newline, over a grid
as large as the largest pinpoint's, and a mask that keeps each image's own. The rows selected by the mask are the
loop's rows, in its order; their count is data, as it is.

LLaVA-OneVision tiles only an image alone in its prompt (``batch_num_images``: another gives its base tile and a
newline row), and shrinks a grid of more than ``anyres_max_N``'s N tiles (by more than 1.1 times their side) with
a bilinear resize: each row there weighs its four nearest rows of the grid by the resize's rule (``align_corners``
off), four gathers where one suffices elsewhere.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["any_resolution_features", "packed_rows"]


def any_resolution_features(self: Any, pixel_values: torch.Tensor, image_sizes: torch.Tensor,
                            vision_feature_layer: Any = None, vision_feature_select_strategy: str | None = None,
                            vision_aspect_ratio: str | None = None, batch_num_images: torch.Tensor | None = None,
                            **kwargs: Any) -> Any:
    """LLaVA-NeXT's ``get_image_features`` (its base model's, and LLaVA-OneVision's) for ``pixel_values`` of
    ``[images, tiles, ...]``, as the loop computes it, with no Python number of the images' sizes (see the
    module)."""
    config = self.config
    layer = config.vision_feature_layer if vision_feature_layer is None else vision_feature_layer
    strategy = config.vision_feature_select_strategy if vision_feature_select_strategy is None \
        else vision_feature_select_strategy
    images, tiles = pixel_values.shape[:2]
    out = self.vision_tower(pixel_values.flatten(0, 1), output_hidden_states=True, return_dict=True)
    layers = [layer] if isinstance(layer, int) else list(layer)
    hidden = torch.cat([out.hidden_states[i] for i in layers], dim=-1)
    if strategy == "default":
        hidden = hidden[:, 1:]
    rows = self.multi_modal_projector(hidden)
    vision = config.vision_config
    aspect = getattr(config, "vision_aspect_ratio", None) if vision_aspect_ratio is None else vision_aspect_ratio
    most = int(aspect.strip("anyres_max_")) if aspect is not None else None  # LLaVA-OneVision's budget of tiles
    patched = _patched(batch_num_images, images) if most is not None and batch_num_images is not None else None
    out.pooler_output = packed_rows(rows, image_sizes, tiles, config.image_grid_pinpoints, vision.image_size,
                                    vision.image_size // vision.patch_size, self.image_newline, patched, most)
    return out


def _patched(batch_num_images: torch.Tensor, images: Any) -> torch.Tensor:
    """Whether each image is tiled (LLaVA-OneVision tiles an image alone in its prompt, and takes only the base
    tile of each image of a prompt of several): its prompt's count of images is 1."""
    counts = batch_num_images.reshape(-1).to(torch.int64)
    ends = torch.cumsum(counts, 0)[:, None]
    image = torch.arange(images, device=counts.device)[None, :]
    within = (image >= ends - counts[:, None]) & (image < ends)
    return (within.to(torch.int64) * counts[:, None]).sum(0) == 1


def _best_pinpoints(image_sizes: torch.Tensor, pinpoints: list[list[int]]) -> torch.Tensor:
    """Each image's best pinpoint ``[images, 2]`` (height, width), as ``select_best_resolution`` picks it."""
    pins = torch.tensor(pinpoints, dtype=torch.float64, device=image_sizes.device)
    height, width = image_sizes[:, :1].to(torch.float64), image_sizes[:, 1:].to(torch.float64)
    scale = torch.minimum(pins[:, 1] / width, pins[:, 0] / height)
    effective = torch.minimum(torch.floor(width * scale) * torch.floor(height * scale), width * height)
    wasted = pins[:, 0] * pins[:, 1] - effective
    best = torch.argmax(effective * 2.0 ** 26 - wasted, dim=1)  # the most effective, then the least waste, the first
    return pins.to(torch.int64)[best]


def _kept(image_sizes: torch.Tensor, rows: torch.Tensor, columns: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``unpad_image``'s crop of each image's grid of ``rows x columns`` patches: the first kept row and column, and
    how many are kept."""
    height, width = image_sizes[:, 0].to(torch.float64), image_sizes[:, 1].to(torch.float64)
    wide = width / height > columns.to(torch.float64) / rows.to(torch.float64)

    def rounded(x: torch.Tensor) -> torch.Tensor:  # int(round(x, 7))
        return torch.trunc(torch.round(x * 1e7) / 1e7).to(torch.int64)

    new_rows = rounded(height * (columns.to(torch.float64) / width))
    new_columns = rounded(width * (rows.to(torch.float64) / height))
    pad_rows = torch.where(wide, torch.div(rows - new_rows, 2, rounding_mode="floor"), 0)
    pad_columns = torch.where(wide, 0, torch.div(columns - new_columns, 2, rounding_mode="floor"))
    return pad_rows, pad_columns, rows - 2 * pad_rows, columns - 2 * pad_columns


def _taps(out: torch.Tensor, kept: torch.Tensor, shrink: torch.Tensor, at: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The two source places and weights of place ``at`` of ``out`` along a side of ``kept`` places: itself where
    the side is not shrunk, else bilinear interpolation's (``align_corners=False``, float32, as torch computes it)."""
    scale = kept.to(torch.float32) / out.clamp(min=1).to(torch.float32)
    source = ((at.to(torch.float32) + 0.5) * scale - 0.5).clamp(min=0)
    low = source.floor().to(torch.int64)
    high = torch.minimum(low + 1, kept - 1)
    weight = source - low.to(torch.float32)
    return (torch.where(shrink, low, at), torch.where(shrink, high, at),
            torch.where(shrink, 1 - weight, 1.0), torch.where(shrink, weight, 0.0))


def packed_rows(rows: torch.Tensor, image_sizes: torch.Tensor, tiles: Any, pinpoints: list[list[int]], side: int,
                per_side: int, newline: torch.Tensor | None, patched: torch.Tensor | None = None,
                most: int | None = None) -> torch.Tensor:
    """Every image's rows, one image after the other, as ``pack_image_features`` joins them: ``rows`` are the
    projected rows of every tile, ``[images * tiles, per_side ** 2, width]`` (the base tile first in each image's),
    ``side`` the tower's side in pixels, ``per_side`` its side in patches (see the module). LLaVA-OneVision's:
    ``patched`` says which images are tiled (another gives its base tile and a newline), and a grid larger than
    ``most`` tiles is shrunk by a bilinear resize to about that many, as its loop resizes it."""
    images = image_sizes.shape[0]
    width = rows.shape[-1]
    area = per_side * per_side
    best = _best_pinpoints(image_sizes, pinpoints)
    across = torch.div(best[:, 1], side, rounding_mode="floor")  # tiles across and down each image's grid
    grid_rows = torch.div(best[:, 0], side, rounding_mode="floor") * per_side
    grid_columns = across * per_side
    top, left, kept_rows, kept_columns = _kept(image_sizes, grid_rows, grid_columns)
    out_rows, out_columns = kept_rows, kept_columns
    shrink = torch.zeros_like(kept_rows, dtype=torch.bool)
    if most is not None:  # int(curr // ratio), ratio = sqrt(curr_height * curr_width / (most * per_side ** 2))
        ratio = torch.sqrt((kept_rows * kept_columns).to(torch.float64) / (most * area))
        shrink = ratio > 1.1
        out_rows = torch.where(shrink, torch.floor(kept_rows / ratio).to(torch.int64), kept_rows)
        out_columns = torch.where(shrink, torch.floor(kept_columns / ratio).to(torch.int64), kept_columns)
    if patched is not None:  # an image left whole: its base tile, then one newline row
        out_rows, out_columns = torch.where(patched, out_rows, 1), torch.where(patched, out_columns, 0)
    most_rows = max(p[0] // side for p in pinpoints) * per_side
    most_columns = max(p[1] // side for p in pinpoints) * per_side
    device = rows.device
    r = torch.arange(most_rows, device=device)[None, :, None]
    c = torch.arange(most_columns + 1, device=device)[None, None, :]  # one more: the newline
    first_tile = (torch.arange(images, device=device) * tiles)[:, None, None]
    each = (slice(None), None, None)
    ys = _taps(out_rows[each], kept_rows[each], shrink[each], r)
    xs = _taps(out_columns[each], kept_columns[each], shrink[each], c)
    newline_at = c == out_columns[each]
    inside = (r < out_rows[each]) & ((c < out_columns[each]) | (newline_at & (newline is not None)))
    table = rows.reshape(-1, width)
    if newline is not None:
        table = torch.cat([table, newline[None].to(table.dtype)])
    base = first_tile.flatten(1) * area + torch.arange(area, device=device)
    keep = torch.cat([torch.ones_like(base, dtype=torch.bool), inside.flatten(1)], dim=1)
    pairs = [(0, 0)] if most is None else [(0, 0), (0, 1), (1, 0), (1, 1)]  # the bilinear taps, where it shrinks
    joined = None
    for i, j in pairs:
        down, right = ys[i] + top[each], xs[j] + left[each]
        tile = 1 + torch.div(down, per_side, rounding_mode="floor") * across[each] + \
            torch.div(right, per_side, rounding_mode="floor")
        source = (first_tile + tile) * area + (down % per_side) * per_side + right % per_side
        first = joined is None
        weight = (ys[2 + i] * xs[2 + j]).expand(source.shape)
        if newline is not None:
            source = torch.where(newline_at, table.shape[0] - 1, source)
            weight = torch.where(newline_at, 1.0 if first else 0.0, weight)
        source = torch.where(inside, source, 0).flatten(1)
        index = torch.cat([base if first else torch.zeros_like(base), source], dim=1)[keep]
        weights = torch.cat([torch.full(base.shape, 1.0 if first else 0.0, device=device), weight.flatten(1)],
                            dim=1)[keep]
        rows_of = table[index] * weights[:, None].to(table.dtype)
        joined = rows_of if first else joined + rows_of
    return joined
