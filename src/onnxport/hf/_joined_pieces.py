"""Per-image pieces of a count that is data, captured as the one piece they join into.

A multimodal model's ``get_image_features`` computes every image's features in one batch, then hands them back
as a list of per-image pieces: ``torch.split(features, sizes.tolist())`` (Qwen2-VL and the families built like
it, Idefics3, Mistral 3), or ``list(features)`` (LLaVA). The model's forward joins the pieces again
(``torch.cat``) before it scatters them into the prompt's image tokens. For a dynamic number of images neither
is capturable: ``.tolist()`` of a tensor whose length is symbolic, or iterating over a symbolic dim, is a list
of unknown length.

During the capture (:func:`joined_pieces`) such a list is one piece: what ``torch.cat`` of the pieces along
their dim would give. Both go through ``unbind`` (``.tolist()`` of a fake tensor iterates over it): unbinding a
symbolic dim (``list(t)`` asks ``len(t)`` first, which then raises the ``TypeError`` that makes ``list`` iterate
without it) gives one piece with that dim merged into the next, or, for a 1-d tensor of sizes, one
:class:`Size` marker, which ``torch.split``/``Tensor.split`` take as "one piece, the whole tensor". Nothing
else changes: a tensor of static length converts and iterates as always, and any other use of a marker
(arithmetic, a comparison) raises, naming the limit. Code that treats each piece alike computes the same on the
joined piece; code that does not (per-image padding, a newline row per image) differs from eager PyTorch, which
verification runs without this mode, so the export is refused rather than wrong.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from onnxport.capture.rewrite_len import DynamicLength

__all__ = ["Size", "joined_pieces"]

_SPLITS = (torch.split, torch.Tensor.split, torch.Tensor.split_with_sizes, torch.split_with_sizes)
_UNBINDS = (torch.unbind, torch.Tensor.unbind)


def _symbolic(size: Any) -> bool:
    return isinstance(size, torch.SymInt) and not size.node.is_constant()


class Size:
    """One item of ``.tolist()`` of per-piece sizes whose count is data (the one item that stands for all of
    them): only a split may take it, as one piece, the whole tensor."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor

    def item(self) -> Size:
        return self

    def _refuse(self, *args: Any) -> Any:
        raise TypeError("onnxport captures per-image sizes whose count is data (a .tolist() of a tensor of dynamic "
                        "length) only as the sizes of a torch.split, one piece for all images; this code reads them "
                        "otherwise")

    __int__ = __index__ = __add__ = __radd__ = __mul__ = __rmul__ = __floordiv__ = __lt__ = __gt__ = __eq__ = _refuse
    __hash__ = object.__hash__


def _joined(tensor: torch.Tensor, dim: int) -> tuple[Any, ...]:
    """The one piece that stands for ``tensor.unbind(dim)``: what ``torch.cat`` of the pieces gives."""
    if tensor.dim() == 1:
        return (Size(tensor),)
    dim = dim % tensor.dim()
    return (tensor.movedim(dim, 0).reshape(-1, *tensor.movedim(dim, 0).shape[2:]),)


class _JoinedPieces(TorchFunctionMode):
    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func in _UNBINDS:
            tensor, dim = args[0], args[1] if len(args) > 1 else kwargs.get("dim", 0)
            if isinstance(tensor, torch.Tensor) and tensor.dim() >= 1 and _symbolic(tensor.shape[dim]):
                return _joined(tensor, dim)
        if func is torch.Tensor.__len__ and args[0].dim() >= 1 and _symbolic(args[0].shape[0]):
            # list(t) asks the length first, as a hint: a TypeError sends it on to iterate (one joined piece);
            # capture reads a len(t) of the model's own as t.shape[0] (onnxport.capture.rewrite_len)
            raise DynamicLength()
        if func in _SPLITS:
            sizes = args[1] if len(args) > 1 else kwargs.get("split_size_or_sections", kwargs.get("split_sizes"))
            if isinstance(sizes, (list, tuple)) and len(sizes) == 1 and isinstance(sizes[0], Size):
                return (args[0],)
        return func(*args, **kwargs)


@contextlib.contextmanager
def joined_pieces() -> Iterator[None]:
    """Inside the context, per-piece lists of a symbolic count are one joined piece (see the module)."""
    with _JoinedPieces():
        yield
