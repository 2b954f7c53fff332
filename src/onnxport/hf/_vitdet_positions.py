"""VitDet's position embeddings, sized in the graph for images of any size during a capture.

VitDet (the backbone of VitMatte, whose image processor pads each image to its own multiple of 32) fits its
position embeddings to each image's grid of patches in Python: the absolute ones are resized only where the grid
differs from the pretraining one (``if size != height``), the relative ones to ``int(2 * max(q, k) - 1)`` entries
only where that differs from their count. Under torch.export each of those fixes the image's size at the example's.

During the capture (:func:`vitdet_any_size`) both are always resized, to sizes the graph computes from the image's:
a resize to the same size is the identity (bicubic and linear interpolation at scale 1 sample each entry at its own
place), so the graph equals eager PyTorch at every size, the pretraining one included. The relative positions of a
query and key grid of one size (VitDet's attention is over one grid) are computed with no Python comparison of
sizes; other sizes go to transformers' own function.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch

from onnxport.hf.attribute_swap import swapped

__all__ = ["vitdet_any_size"]

_MODULE = "transformers.models.vitdet.modeling_vitdet"


def _absolute_positions(self: Any, abs_pos_embeddings: torch.Tensor, has_cls_token: bool, height: Any,
                        width: Any) -> torch.Tensor:
    """``VitDetEmbeddings.get_absolute_positions``, resizing whatever the grid's size."""
    if has_cls_token:
        abs_pos_embeddings = abs_pos_embeddings[:, 1:]
    side = int(abs_pos_embeddings.shape[1] ** 0.5)  # a square of the pretraining grid: a constant
    if side * side != abs_pos_embeddings.shape[1]:
        raise ValueError("Absolute position embeddings must be a square number.")
    grid = abs_pos_embeddings.reshape(1, side, side, -1).permute(0, 3, 1, 2)
    resized = torch.nn.functional.interpolate(grid, size=(height, width), mode="bicubic", align_corners=False)
    return resized.permute(0, 2, 3, 1)


def _relative_positions(original: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """transformers' ``get_rel_pos`` for a query and key grid side of one size, symbolic (``2 * size - 1``
    entries, resized whatever their count); ``original`` for other sizes."""

    def get_rel_pos(q_size: Any, k_size: Any, rel_pos: torch.Tensor) -> torch.Tensor:
        if not isinstance(q_size, torch.SymInt) or q_size is not k_size:
            return original(q_size, k_size, rel_pos)
        entries = 2 * q_size - 1
        table = rel_pos.reshape(1, rel_pos.shape[0], -1).permute(0, 2, 1)
        table = torch.nn.functional.interpolate(table, size=entries, mode="linear")
        table = table.reshape(-1, entries).permute(1, 0)
        coords = torch.arange(q_size)
        return table[coords[:, None] - coords[None, :] + (q_size - 1)]

    return get_rel_pos


@contextlib.contextmanager
def vitdet_any_size(model: torch.nn.Module) -> Iterator[None]:
    """Inside the context, VitDet's position embeddings in ``model`` are sized for any image (see the module's
    docstring); nothing changes for a model without a VitDet backbone."""
    module = sys.modules.get(_MODULE)
    embeddings = getattr(module, "VitDetEmbeddings", None)
    if embeddings is None or not any(isinstance(m, embeddings) for m in model.modules()):
        yield
        return
    changes = [(embeddings, "get_absolute_positions", _absolute_positions)]
    if callable(getattr(module, "get_rel_pos", None)):
        changes.append((module, "get_rel_pos", _relative_positions(module.get_rel_pos)))
    with swapped(changes):
        yield
