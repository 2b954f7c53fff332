"""The feature levels' sizes of a deformable-attention detector, kept symbolic during a capture.

Grounding DINO (and the models that copy its model's forward: MM Grounding DINO, Deformable DETR) collects each
feature level's ``(height, width)`` from ``.shape`` and turns the list into a tensor with
``torch.as_tensor(spatial_shapes_list, dtype=torch.long)`` (``spatial_shapes``, from which ``level_start_index``
is computed). ``as_tensor`` reads each size as a Python int, which under torch.export fixes the image's height and
width at the example's (guards like ``((1 + (H // 4)) // 2) == 16``), though the rest of the forward (the split of
the values by ``height * width`` in the deformable attention, the reshapes) takes symbolic sizes as they are.

Their encoders' reference points (``get_reference_points``) and proposals' grids likewise call
``torch.linspace(0.5, height - 0.5, height)``, whose ends and count torch reads as Python numbers too, and the text
masks (``generate_masks_with_special_tokens_and_transfer_map``) ``torch.tensor(seq_len)``, which records an in-place
``detach_`` that torch cannot make functional.

During the capture (:func:`level_shapes_symbolic`) those modules see a ``torch`` whose ``as_tensor`` builds a nested
list that holds symbolic sizes in the graph, one scalar tensor per size stacked (``tensor`` likewise), and whose
``linspace`` of a symbolic count is ``start + arange(steps) * (end - start) / (steps - 1)`` (exact for these grids'
steps of 1); every other call, and each of them on plain numbers, is torch's own. RT-DETR and D-FINE fill their
``spatial_shapes`` item by item, which torch.export keeps symbolic already.
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterator
from typing import Any

import torch

from onnxport.hf.attribute_swap import swapped

__all__ = ["level_shapes_symbolic"]

_MODULES = ("transformers.models.grounding_dino.modeling_grounding_dino",
            "transformers.models.mm_grounding_dino.modeling_mm_grounding_dino",
            "transformers.models.deformable_detr.modeling_deformable_detr")


def _symbolic(data: Any) -> bool:
    if isinstance(data, (list, tuple)):
        return any(_symbolic(item) for item in data)
    return isinstance(data, torch.SymInt)


def _stacked(data: Any, dtype: torch.dtype | None, device: Any) -> torch.Tensor:
    if isinstance(data, (list, tuple)):
        return torch.stack([_stacked(item, dtype, device) for item in data])
    return torch.scalar_tensor(data, dtype=dtype or torch.long, device=device)


def as_tensor(data: Any, dtype: torch.dtype | None = None, device: Any = None) -> torch.Tensor:
    """``torch.as_tensor``, building a (nested) list or tuple of sizes that holds a ``torch.SymInt`` in the graph
    (not a ragged one, nor an empty level: a detector's ``(height, width)`` per level)."""
    if _symbolic(data):
        return _stacked(data, dtype, device)
    return torch.as_tensor(data, dtype=dtype, device=device)


def tensor(data: Any, *, dtype: torch.dtype | None = None, device: Any = None, **kwargs: Any) -> torch.Tensor:
    """``torch.tensor``, building sizes that hold a ``torch.SymInt`` in the graph as :func:`as_tensor` does."""
    if _symbolic(data) and not kwargs:
        return _stacked(data, dtype, device)
    return torch.tensor(data, dtype=dtype, device=device, **kwargs)


def linspace(start: Any, end: Any, steps: Any, *, dtype: torch.dtype | None = None, device: Any = None,
             **kwargs: Any) -> torch.Tensor:
    """``torch.linspace``, computed in the graph where ``steps`` (a feature level's height or width) is symbolic."""
    if not isinstance(steps, torch.SymInt) or kwargs:
        return torch.linspace(start, end, steps, dtype=dtype, device=device, **kwargs)
    span = torch.scalar_tensor(end - start, dtype=torch.float64, device=device)
    gaps = torch.scalar_tensor(steps - 1, dtype=torch.float64, device=device).clamp(min=1)  # one step: [start]
    values = start + torch.arange(steps, dtype=torch.float64, device=device) * (span / gaps)
    return values.to(dtype or torch.get_default_dtype())


class _Torch(types.ModuleType):
    """``torch`` as the detectors' modules see it during the capture: its own attributes, but :func:`as_tensor`,
    :func:`tensor` and :func:`linspace`."""

    as_tensor = staticmethod(as_tensor)
    tensor = staticmethod(tensor)
    linspace = staticmethod(linspace)

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)


_TORCH = _Torch("torch")


@contextlib.contextmanager
def level_shapes_symbolic(model: torch.nn.Module) -> Iterator[None]:
    """Inside the context, the modules of transformers' deformable-attention detectors that ``model`` runs build
    their ``spatial_shapes`` with symbolic sizes (see the module's docstring); nothing changes for another model."""
    kinds = {type(m).__module__ for m in model.modules()}
    changes = [(sys.modules[name], "torch", _TORCH) for name in _MODULES if name in kinds and name in sys.modules]
    with swapped(changes):
        yield
