"""The output length of a speech encoder's convolutions, kept symbolic during a capture.

A speech encoder that downsamples its audio with strided convolutions says how long its output is with
``_get_feat_extract_output_lengths``; Moonshine's computes it with Python's ``int()`` of a float
(``int((length - 127) / 64 + 1)``), which under torch.export fixes the clip's length at the example's.

During the capture (:func:`conv_lengths_symbolic`), a module whose ``_get_feat_extract_output_lengths`` gives, for
a handful of lengths, what its ``Conv1d`` layers in order give (``(length + 2 * padding - dilation * (kernel - 1)
- 1) // stride + 1`` each) computes a symbolic length so, with floor division; a concrete length or a tensor of
lengths goes to the model's own method. A method that does not agree with its convolutions is left alone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from onnxport.hf.attribute_swap import swapped

__all__ = ["conv_lengths_symbolic"]

_METHOD = "_get_feat_extract_output_lengths"
_CHECKED = (4001, 16000, 16007, 48000, 100003)  # lengths (clips of a quarter second and more) to agree at


def _chain(convs: list[torch.nn.Conv1d]) -> Callable[[Any], Any]:
    def length(n: Any) -> Any:
        for conv in convs:
            n = (n + 2 * conv.padding[0] - conv.dilation[0] * (conv.kernel_size[0] - 1) - 1) // conv.stride[0] + 1
        return n

    return length


def _symbolic(method: Callable[[Any], Any], chain: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def lengths(input_lengths: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(input_lengths, torch.SymInt) and not args and not kwargs:
            return chain(input_lengths)
        return method(input_lengths, *args, **kwargs)

    return lengths


def _agrees(method: Callable[[Any], Any], chain: Callable[[Any], Any]) -> bool:
    try:
        return all(int(method(n)) == chain(n) for n in _CHECKED)
    except Exception:  # noqa: BLE001 - a method of other arguments, or one that takes tensors only
        return False


@contextlib.contextmanager
def conv_lengths_symbolic(model: torch.nn.Module) -> Iterator[None]:
    """Inside the context, each module of ``model`` whose ``_get_feat_extract_output_lengths`` agrees with its
    ``Conv1d`` layers computes a symbolic length from them (see the module's docstring)."""
    changes = []
    for module in model.modules():
        method = getattr(module, _METHOD, None)
        convs = [m for m in module.modules() if type(m) is torch.nn.Conv1d and isinstance(m.padding, tuple)]
        if not callable(method) or not convs:
            continue
        chain = _chain(convs)
        if _agrees(method, chain):
            changes.append((module, _METHOD, _symbolic(method, chain)))
    with swapped(changes):
        yield
