"""Qwen-VL-style vision towers' patch layout (positions, Qwen2.5-VL's windows), computed with tensor ops so
that torch.export can capture it for any number of images.

transformers' ``get_vision_position_ids`` loops over ``grid_thw.tolist()``, one image at a time, which fixes
the number of images to the example's; :func:`position_ids` computes every patch's row and column (and frame)
from its index at once. A patch's index within its frame runs over blocks of ``merge x merge`` patches, the
blocks row by row: block ``b``, place ``j`` in it, give row ``(b // (w / merge)) * merge + j // merge`` and
column ``(b % (w / merge)) * merge + j % merge``.

Qwen2.5-VL's vision tower (and Qwen2.5-Omni's, EXAONE 4.5's) attends within windows of merged patches in
most layers. transformers' ``get_vision_window_index`` lays each image's merged patches out window by
window in a Python loop over ``grid_thw.tolist()``, drops the padding by a boolean mask, and turns the window
sizes into Python numbers (``cu_seqlens.tolist()``), sizes torch.export cannot follow. During the capture
:func:`window_index` computes the same order from sort keys instead, for all images at once.

A merged patch of image ``i`` at frame ``f``, row ``r`` and column ``c`` lies in window
``(f, r // W, c // W)`` of that image, ``W`` being the window's side in merged patches; the windows of an
image run row by row, ``r // W + 1`` of them down and ``c // W + 1`` across (transformers pads every image
by ``W - side % W``, a whole empty window where the side divides). Sorting the patches by (window, row and
column within it) gives the order; counting the patches before each window gives the window bounds. Empty
windows give equal bounds, which the attention (onnxport's packed attention during the capture) takes as
empty sequences; transformers' ``unique_consecutive`` drops them, to the same effect.

Muse Glimmer's ``get_vision_pixel_shuffle_index`` orders each image's ``m x m`` blocks the same way in a loop over
the images: :func:`pixel_shuffle_index` gives the same order from :func:`merged_block_index`.

PaddleOCR-VL's projector merges each image's ``m x m`` blocks of patches into one row, in a Python loop over the
images that reshapes each by its grid's values. During the capture :func:`merged_projector_forward` gathers
every image's blocks at once instead (:func:`merged_block_index`): the row of block ``(f, r, c)`` of an image
takes, in order, the patches ``(f, r * m + i, c * m + j)`` for ``i, j < m``, as the loop's reshape and
transpose lay them out.

Cosmos3 Edge resizes its learned table of positions to each image's grid with an antialiased bilinear resize, in a
loop over the images: :func:`resized_positions` weighs the table's rows and columns for every patch at once by
torch's own antialiasing rule (a triangle as wide as the scale where the table shrinks).

ERNIE-VL's resampler puts each video's even frames beside its odd ones (an image's frame beside itself) in a loop
over the images; :func:`temporal_slicing` gathers both for every image at once.

VideoLLaMA 3's vision tower downsamples each image by its own merge size (``merge_sizes``: 1 for images, 2 for
video frames, as its processor gives them) with a bilinear resize, in a loop over the images. A bilinear resize
to half the size (``align_corners=False``) averages each 2x2 block, and to the same size copies: during the
capture :func:`unshuffled_forward` averages each image's consecutive groups of ``merge * merge`` patches (its
processor lays a block's patches out one after the other), for every image at once. Another merge size would
resize otherwise; verification, which runs the model as it is, then refuses the file.

LLaVA-NeXT's (LLaVA-NeXT-Video's, LLaVA-OneVision's) ``get_image_features`` is :mod:`onnxport.hf._any_resolution`'s
during the capture: its any-resolution tiles laid out, cropped (and shrunk) and joined for every image at once.
SigLIP 2's resize of its positions to each image's grid and LFM2-VL's merge of each image's blocks are
:mod:`onnxport.hf._naflex`'s.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

import torch

from onnxport.hf._any_resolution import any_resolution_features
from onnxport.hf._naflex import antialiased_taps, merged_image_features, naflex_positions
from onnxport.hf.attribute_swap import swapped

__all__ = ["image_of_each", "interpolation_indices_and_weights", "layout_as_tensors", "merged_block_index",
           "merged_projector_forward", "patch_layout", "pixel_shuffle_index", "position_ids", "resized_positions",
           "temporal_slicing", "unshuffled_forward", "window_index"]

_REPLACED = ("get_vision_window_index", "get_vision_position_ids",  # transformers' helpers, by name
             "get_vision_interpolation_indices_and_weights", "get_vision_pixel_shuffle_index")


def image_of_each(counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For ``counts[i]`` items of each image ``i``, one after the other: each item's image and its index
    among its image's items."""
    image = torch.repeat_interleave(torch.arange(counts.shape[0], device=counts.device), counts)
    first = torch.cumsum(counts, 0) - counts
    return image, torch.arange(image.shape[0], device=counts.device) - first[image]


def position_ids(grid_thw: torch.Tensor, spatial_merge_size: int | torch.Tensor, include_temporal: bool = False,
                 kwargs: dict | None = None) -> torch.Tensor:
    """``[patches, 2]`` (row, column), or ``[patches, 3]`` (frame, row, column) with ``include_temporal``, as
    transformers' ``get_vision_position_ids`` returns them."""
    if kwargs is not None and (given := kwargs.pop("position_ids", None)) is not None:
        return given
    return patch_layout(grid_thw, spatial_merge_size, include_temporal)[0]


def interpolation_indices_and_weights(grid_thw: torch.Tensor, num_grid_per_side: int, mode: str = "bilinear",
                                      align_corners: bool = False, spatial_merge_size: int = 1,
                                      padding: str = "border", kwargs: dict | None = None
                                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' ``get_vision_interpolation_indices_and_weights`` (each patch's taps into a square table
    of learned positions, and their weights), its rows and columns from :func:`position_ids`: transformers'
    own pads a cumulative sum (``F.pad(counts.cumsum(0)[:-1], (1, 0))``), which fixes the number of images."""
    from transformers import vision_utils

    if kwargs is not None:
        indices, weights = kwargs.pop("interp_indices", None), kwargs.pop("interp_weights", None)
        if indices is not None and weights is not None:
            return indices, weights
    (rows_cols, heights, widths) = patch_layout(grid_thw, spatial_merge_size, False)
    axis = vision_utils._interpolation_axis_taps_weights
    h_taps, h_weights = axis(rows_cols[:, 0], heights, num_grid_per_side, mode, align_corners, padding)
    w_taps, w_weights = axis(rows_cols[:, 1], widths, num_grid_per_side, mode, align_corners, padding)
    taps = h_taps.shape[1]
    indices = (h_taps[:, :, None] * num_grid_per_side + w_taps[:, None, :]).reshape(-1, taps * taps)
    weights = (h_weights[:, :, None] * w_weights[:, None, :]).reshape(-1, taps * taps)
    return indices, weights


def patch_layout(grid_thw: torch.Tensor, spatial_merge_size: int | torch.Tensor, include_temporal: bool
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each patch's (frame,) row and column, and its image's height and width, in patches."""
    grid = grid_thw.to(torch.int64)
    frames, rows, cols = grid.unbind(1)
    merge = torch.as_tensor(spatial_merge_size, device=grid.device).to(torch.int64).expand(grid.shape[0])
    image, local = image_of_each(frames * rows * cols)
    per_frame = rows[image] * cols[image]
    frame, at = local // per_frame, local % per_frame
    m = merge[image]
    block, place = at // (m * m), at % (m * m)
    blocks_across = cols[image] // m
    row = (block // blocks_across) * m + place // m
    col = (block % blocks_across) * m + place % m
    return torch.stack([frame, row, col] if include_temporal else [row, col], dim=-1), rows[image], cols[image]


def window_index(grid_thw: torch.Tensor, spatial_merge_size: int, window_size: int, patch_size: int,
                 kwargs: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(window_index, cu_window_seqlens)`` as transformers' ``get_vision_window_index`` returns them:
    the merged patches' indices in window order, and the windows' cumulative bounds in patches (int32)."""
    if kwargs is not None:
        index, bounds = kwargs.pop("window_index", None), kwargs.pop("cu_window_seqlens", None)
        if index is not None and bounds is not None:
            return index, bounds
    side = window_size // spatial_merge_size // patch_size  # a window's side, in merged patches
    unit = spatial_merge_size**2  # patches per merged patch
    grid = grid_thw.to(torch.int64)
    frames, rows, cols = grid[:, 0], grid[:, 1] // spatial_merge_size, grid[:, 2] // spatial_merge_size
    patches = frames * rows * cols  # merged patches per image
    across = cols // side + 1
    windows = frames * (rows // side + 1) * across  # per image, the padding windows counted
    first_window = torch.cumsum(windows, 0) - windows

    image, local = image_of_each(patches)
    per_frame = rows[image] * cols[image]
    frame, at = local // per_frame, local % per_frame
    row, col = at // cols[image], at % cols[image]
    window = first_window[image] + (frame * (rows[image] // side + 1) + row // side) * across[image] + col // side
    order = torch.argsort(window * side * side + (row % side) * side + col % side)

    starts = torch.arange(windows.sum().item() + 1, device=grid.device)
    bounds = torch.searchsorted(window[order].contiguous(), starts)  # patches before each window
    return order, (bounds * unit).to(torch.int32)


def merged_block_index(grid_thw: torch.Tensor, merge_h: int, merge_w: int) -> torch.Tensor:
    """``[blocks, merge_h * merge_w]``: for each ``merge_h x merge_w`` block of patches of every image (frame by
    frame, the blocks row by row), the indices of its patches in the patches of all images, row-major."""
    grid = grid_thw.to(torch.int64)
    frames, rows, cols = grid.unbind(1)
    down, across = rows // merge_h, cols // merge_w
    image, local = image_of_each(frames * down * across)
    first = torch.cumsum(frames * rows * cols, 0) - frames * rows * cols  # each image's first patch
    per_frame = down[image] * across[image]
    frame, at = local // per_frame, local % per_frame
    width = cols[image]
    corner = first[image] + frame * rows[image] * width + (at // across[image]) * merge_h * width \
        + (at % across[image]) * merge_w
    inside = (torch.arange(merge_h, device=grid.device)[:, None] * width[:, None, None]
              + torch.arange(merge_w, device=grid.device)[None, None, :])
    return (corner[:, None, None] + inside).reshape(corner.shape[0], merge_h * merge_w)


def pixel_shuffle_index(grid_thw: torch.Tensor, merge_size: int, kwargs: dict | None = None) -> torch.Tensor:
    """Muse Glimmer's ``get_vision_pixel_shuffle_index``: the patches of every image, each ``merge x merge`` block's
    after one another (:func:`merged_block_index`, flat)."""
    if kwargs is not None and (given := kwargs.pop("pixel_shuffle_index", None)) is not None:
        return given
    return merged_block_index(grid_thw, merge_size, merge_size).reshape(-1)


def merged_projector_forward(self: torch.nn.Module, image_features: torch.Tensor,
                             image_grid_thw: torch.Tensor) -> torch.Tensor:
    """PaddleOCR-VL's projector (``PaddleOCRProjector.forward``) with every image's blocks gathered at once."""
    normed = self.pre_norm(image_features.reshape(-1, image_features.shape[-1]))
    index = merged_block_index(image_grid_thw, *self.merge_kernel_size)
    merged = normed[index].reshape(index.shape[0], -1)
    return self.linear_2(self.act(self.linear_1(merged)))


def unshuffled_forward(self: torch.nn.Module, hidden_states: torch.Tensor, grid_thw: torch.Tensor,
                       merge_sizes: torch.Tensor) -> torch.Tensor:
    """VideoLLaMA 3's ``pixel_unshuffle``: each image's groups of ``merge * merge`` consecutive patches averaged,
    for every image at once."""
    grid = grid_thw.to(torch.int64)
    merge = merge_sizes.to(torch.int64)
    patches = grid.prod(-1)
    groups = patches // (merge * merge)
    image, local = image_of_each(patches)
    group = (torch.cumsum(groups, 0) - groups)[image] + local // (merge * merge)[image]
    total = torch.zeros(groups.sum().item(), hidden_states.shape[-1], dtype=hidden_states.dtype,
                        device=hidden_states.device).index_add(0, group, hidden_states)
    return total / (merge * merge).repeat_interleave(groups)[:, None].to(hidden_states.dtype)


def temporal_slicing(self: torch.nn.Module, hidden_states: torch.Tensor, grid_thw: torch.Tensor) -> torch.Tensor:
    """ERNIE-VL's resampler's ``_temporal_slicing``: each image's (or video's) rows of even frames beside those of
    the odd frames that follow them (an image, one frame: its rows beside themselves), for every image at once."""
    grid = grid_thw.to(torch.int64)
    frames = grid[:, 0]
    spatial = grid[:, 1] * grid[:, 2] // (self.spatial_merge_size ** 2)  # rows a frame, merged
    pairs = torch.where(frames > 1, frames // 2, torch.ones_like(frames))
    image, local = image_of_each(pairs * spatial)
    first_row = torch.cumsum(frames * spatial, 0) - frames * spatial
    pair, at = local // spatial[image], local % spatial[image]
    even = first_row[image] + 2 * pair * spatial[image] + at
    odd = torch.where(frames[image] > 1, even + spatial[image], even)
    return torch.cat([hidden_states[even], hidden_states[odd]], dim=-1)


def resized_positions(positional_embeddings: torch.Tensor, grid_thw: torch.Tensor,
                      spatial_merge_size: int) -> torch.Tensor:
    """Cosmos3 Edge's ``resize_positional_embeddings``: the learned ``[side, side, hidden]`` table resized to each
    image's grid (antialiased bilinear), each patch's row taken in the processor's block order, every frame."""
    rows_cols, heights, widths = patch_layout(grid_thw, spatial_merge_size, False)
    side = positional_embeddings.shape[0]
    down = antialiased_taps(rows_cols[:, 0], heights, side)
    across = antialiased_taps(rows_cols[:, 1], widths, side)
    table = positional_embeddings.float()
    return torch.einsum("pa,pb,abc->pc", down, across, table).to(positional_embeddings.dtype)


# Module classes whose forward (or method) loops over the images by their grids' values, and onnxport's, by module,
# class and method.
_FORWARDS = {
    ("transformers.models.paddleocr_vl.modeling_paddleocr_vl", "PaddleOCRProjector", "forward"):
        merged_projector_forward,
    ("transformers.models.video_llama_3.modeling_video_llama_3", "VideoLlama3VisionModel", "pixel_unshuffle"):
        unshuffled_forward,
    ("transformers.models.ernie4_5_vl_moe.modeling_ernie4_5_vl_moe", "Ernie4_5_VLMoeVariableResolutionResamplerModel",
     "_temporal_slicing"): temporal_slicing,
    ("transformers.models.cosmos3_edge.modeling_cosmos3_edge", "Cosmos3EdgeVisionEmbeddings",
     "resize_positional_embeddings"): staticmethod(resized_positions),
    ("transformers.models.llava_next.modeling_llava_next", "LlavaNextModel", "get_image_features"):
        any_resolution_features,
    ("transformers.models.llava_next_video.modeling_llava_next_video", "LlavaNextVideoModel", "get_image_features"):
        any_resolution_features,
    ("transformers.models.llava_onevision.modeling_llava_onevision", "LlavaOnevisionModel", "get_image_features"):
        any_resolution_features,
    ("transformers.models.siglip2.modeling_siglip2", "Siglip2VisionEmbeddings", "resize_positional_embeddings"):
        staticmethod(naflex_positions),
    ("transformers.models.lfm2_vl.modeling_lfm2_vl", "Lfm2VlModel", "get_image_features"): merged_image_features,
}


@contextlib.contextmanager
def layout_as_tensors() -> Iterator[None]:
    """Every loaded transformers module that imported one of the helpers ``_REPLACED`` names uses onnxport's
    inside the context, and the classes of ``_FORWARDS`` onnxport's forward; restored on exit."""
    ours = {"get_vision_window_index": window_index, "get_vision_position_ids": position_ids,
            "get_vision_interpolation_indices_and_weights": interpolation_indices_and_weights,
            "get_vision_pixel_shuffle_index": pixel_shuffle_index}
    changes = []
    for name, module in list(sys.modules.items()):
        if not name.startswith("transformers.") or module is None:
            continue
        for helper in _REPLACED:
            function = vars(module).get(helper)
            if callable(function) and function is not ours[helper]:
                changes.append((module, helper, ours[helper]))
    for (name, cls, method), forward in _FORWARDS.items():
        kind = getattr(sys.modules.get(name), cls, None)
        if kind is not None:
            changes.append((kind, method, forward))
    with swapped(changes):
        yield
