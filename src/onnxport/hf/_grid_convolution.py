"""LFM3-VL's vision convolution over each frame's patch grid, computed for every image at once during the capture.

LFM3-VL's vision tower mixes its attention layers with gated depthwise convolutions (``Lfm3VlVisionShortConv``)
over each frame's grid of patches. transformers reads the grids into Python numbers (``grid_thw.tolist()``) and
convolves image by image, shaping each by its grid's values, which one graph for any number and size of images
cannot hold. During the capture (:func:`grid_convolution_on`) the convolution gathers, for each patch, its
neighbours within its own frame at each offset of the kernel (none past the frame's edge: the zero padding) and
weighs them by the kernel, for all images at once; the tower's forward keeps the grids as a tensor for it
(:data:`_GRIDS`). The patches come in blocks of ``merge x merge`` (the processor's order), so the patch at row
``r`` and column ``c`` of a frame ``w`` patches wide is the ``(r % m) * m + c % m``-th of block
``(r // m) * (w / m) + c // m``.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import sys
from collections.abc import Iterator
from typing import Any

import torch

from onnxport.hf._vision_windows import patch_layout
from onnxport.hf.attribute_swap import swapped

__all__ = ["grid_convolution", "grid_convolution_on"]

_MODULE = "transformers.models.lfm3_vl.modeling_lfm3_vl"
# The grids of the images the tower's forward is computing, for its convolutions (which get them as Python lists).
_GRIDS: contextvars.ContextVar[torch.Tensor | None] = contextvars.ContextVar("onnxport_grids", default=None)


def grid_convolution(states: torch.Tensor, grid_thw: torch.Tensor, merge: int, conv: torch.nn.Conv2d) -> torch.Tensor:
    """``conv`` (depthwise, odd square kernel, zero padding of half of it, no bias) over each frame's grid of the
    patches ``states`` ``[patches, channels]``, in blocks of ``merge x merge``; ``[patches, channels]``."""
    rows_cols, height, width = patch_layout(grid_thw, merge, False)
    row, col = rows_cols.unbind(1)
    frame_start = torch.arange(row.shape[0], device=states.device) - _in_frame(row, col, width, merge)
    side = conv.kernel_size[0]
    steps = torch.arange(side, device=states.device) - side // 2
    near_row = (row[:, None, None] + steps[None, :, None]).expand(-1, side, side)
    near_col = (col[:, None, None] + steps[None, None, :]).expand(-1, side, side)
    inside = (near_row >= 0) & (near_row < height[:, None, None]) & (near_col >= 0) & (near_col < width[:, None, None])
    near_row = near_row.clamp(min=0).minimum(height[:, None, None] - 1)  # outside: any patch, weighed 0
    near_col = near_col.clamp(min=0).minimum(width[:, None, None] - 1)
    index = frame_start[:, None, None] + _in_frame(near_row, near_col, width[:, None, None], merge)
    taps = states[index.reshape(index.shape[0], -1)] * inside.reshape(index.shape[0], -1, 1).to(states.dtype)
    kernel = conv.weight.reshape(conv.weight.shape[0], side * side).t()  # [taps, channels]
    return (taps * kernel[None]).sum(1)


def _in_frame(row: torch.Tensor, col: torch.Tensor, width: torch.Tensor, merge: int) -> torch.Tensor:
    """The index within its frame of the patch at ``row``, ``col`` of a frame ``width`` patches wide, its patches in
    blocks of ``merge x merge`` (see the module)."""
    return ((row // merge) * (width // merge) + col // merge) * merge * merge + (row % merge) * merge + col % merge


def _short_conv_forward(self: torch.nn.Module, hidden_states: torch.Tensor, grid_thw: Any, **kwargs: Any
                        ) -> torch.Tensor:
    """``Lfm3VlVisionShortConv.forward`` with :func:`grid_convolution` over the grids the tower keeps."""
    input_gate, output_gate, conv_input = self.in_proj(hidden_states).chunk(3, dim=-1)
    mixed = grid_convolution(input_gate * conv_input, _GRIDS.get(), self.spatial_merge_size, self.spatial_conv)
    return self.out_proj(output_gate * mixed)


def _keeping_grids(forward: Any) -> Any:
    @functools.wraps(forward)
    def tower_forward(self: torch.nn.Module, pixel_values: torch.Tensor, grid_thw: torch.Tensor, *args: Any,
                      **kwargs: Any) -> Any:
        token = _GRIDS.set(grid_thw)
        try:
            return forward(self, pixel_values, grid_thw, *args, **kwargs)
        finally:
            _GRIDS.reset(token)

    return tower_forward


@contextlib.contextmanager
def grid_convolution_on() -> Iterator[None]:
    """LFM3-VL's vision convolutions compute with :func:`grid_convolution` inside the context, where its modeling
    module is loaded; restored on exit."""
    module = sys.modules.get(_MODULE)
    if module is None:
        yield
        return
    tower, conv = module.Lfm3VlVisionModel, module.Lfm3VlVisionShortConv
    with swapped([(tower, "forward", _keeping_grids(tower.forward)), (conv, "forward", _short_conv_forward)]):
        yield
