"""Swin-style padding of an image to its patches and windows, kept symbolic during a capture.

Swin (and the models that copy its layers: Swin V2, Donut's encoder, MaskFormer's backbone, Swin2SR, CLAP's audio
encoder, FocalNet) pads an image whose sides are not multiples of its patch size, of 2 (before merging patches) and
of its window size, each behind a Python test of the sizes: ``if width % patch != 0: pad``, ``if height % 2 == 1 or
width % 2 == 1: pad``, and after the windowed attention ``if pad_values[3] > 0 or pad_values[5] > 0: crop``. Under
torch.export each test is a guard on the image's height and width (``Mod(H // 4, 2) == 0``), which an ONNX graph
cannot check: the file keeps the example's branch, and an image of another parity fails in onnxruntime (a
broadcast of 63 positions by 80) or is wrong.

During the capture (:func:`window_padding_any_size`) each of those modules pads, and crops back, at every size, by
amounts the graph computes from the sizes: a padding of 0 and a crop to the whole are the identity, so the graph
equals eager PyTorch at every size, multiples included. Other ``maybe_pad``s (Dinat's, which pads an image smaller
than its window) stay as they are.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from typing import Any

import torch

from onnxport.hf.attribute_swap import swapped

__all__ = ["window_padding_any_size"]

_MODULES = tuple(f"transformers.models.{name}" for name in (
    "swin.modeling_swin", "swinv2.modeling_swinv2", "donut.modeling_donut_swin", "maskformer.modeling_maskformer_swin",
    "swin2sr.modeling_swin2sr", "clap.modeling_clap", "focalnet.modeling_focalnet"))


class _Padding(int):
    """A padding amount whose test ``> 0`` is true at every size (the layer then crops to the unpadded sides, the
    identity where nothing was padded). Never read as a number: ``maybe_pad`` has already padded by it."""

    def __gt__(self, other: Any) -> bool:
        return True


def _to_multiple(size: Any, step: int) -> Any:
    """What brings ``size`` up to a multiple of ``step``: ``(size + step - 1) // step``, the form of Swin's own
    halved sizes (``(height + 1) // 2``), so that each stage's padded, merged and windowed sides are one expression
    torch's symbolic sizes see as equal to the sizes the next stage is told. Another form of the same number (a
    remainder, ``-(-size // step)``) makes torch prove equalities of nested floor divisions at every view: a
    four-stage Swin at window 2 took 411 s to capture that way, 4 s this way."""
    return (size + step - 1) // step * step - size


def _to_patches(self: torch.nn.Module, pixel_values: torch.Tensor, height: Any, width: Any) -> torch.Tensor:
    """The patch embeddings' ``maybe_pad``: right and bottom to multiples of the patch size, by 0 where they are."""
    patch_height, patch_width = self.patch_size
    return torch.nn.functional.pad(pixel_values, (0, _to_multiple(width, patch_width), 0,
                                                  _to_multiple(height, patch_height)))


def _to_even(self: torch.nn.Module, input_feature: torch.Tensor, height: Any, width: Any) -> torch.Tensor:
    """The patch merging's ``maybe_pad``: height and width to even sizes."""
    return torch.nn.functional.pad(input_feature, (0, 0, 0, _to_multiple(width, 2), 0, _to_multiple(height, 2)))


def _to_windows(self: torch.nn.Module, hidden_states: torch.Tensor, height: Any, width: Any
                ) -> tuple[torch.Tensor, tuple[Any, ...]]:
    """The window layer's ``maybe_pad``: to multiples of the window, the amounts tested ``> 0`` true."""
    right, bottom = _to_multiple(width, self.window_size), _to_multiple(height, self.window_size)
    hidden_states = torch.nn.functional.pad(hidden_states, (0, 0, 0, right, 0, bottom))
    return hidden_states, (0, 0, 0, _Padding(), 0, _Padding())


def _replacement(module: torch.nn.Module) -> Any:
    name = type(module).__name__
    if name.endswith("PatchEmbeddings") and hasattr(module, "patch_size"):
        return _to_patches
    if name.endswith("PatchMerging"):
        return _to_even
    if name.endswith("Layer") and isinstance(getattr(module, "window_size", None), int):
        return _to_windows
    return None


@contextlib.contextmanager
def window_padding_any_size(model: torch.nn.Module) -> Iterator[None]:
    """Inside the context, the Swin-style modules ``model`` runs pad (and crop) at every size, by amounts computed
    in the graph (see the module's docstring); nothing changes for another model."""
    changes = [(module, "maybe_pad", types.MethodType(fn, module)) for module in model.modules()
               if type(module).__module__ in _MODULES and "maybe_pad" in vars(type(module))
               and (fn := _replacement(module)) is not None]
    with swapped(changes):
        yield
