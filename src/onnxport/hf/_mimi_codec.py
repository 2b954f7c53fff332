"""Mimi's encoder and decoder of a symbolic clip length, during a capture.

Written for transformers 5.x (``transformers.models.mimi.modeling_mimi``). Two of its layers lose or fix the length
under torch.export:

- ``MimiConv1d`` pads the input of each convolution so that the kernel covers every sample
  (``_get_extra_padding_for_conv1d``), by amounts computed from buffers (the kernel size, stride and total padding
  are tensors: ``torch.ceil`` of a float division) that ``pad`` reads with ``.item()``: each becomes a size torch
  knows nothing of, the clip's length is lost behind them, and the attention that follows branches on a length it
  cannot decide. During the capture the same amounts are computed from the ``Conv1d``'s own integers: transformers'
  extra padding, ``ceil((length - kernel + total) / stride) * stride + kernel - total - length`` with ``total =
  kernel - stride``, is what brings the length to a multiple of the stride, ``-length % stride``; the fixed padding
  is ``total`` on the left for a causal convolution, else split as transformers splits it.
- ``MimiEuclideanCodebook.quantize`` measures distances with ``torch.cdist``, which picks its algorithm by the sizes
  (matrix products where either side has more than 25 rows) and so checks the number of frames; with more than 25
  codes in the book it takes the matrix products at every length, and during the capture it is told so
  (``compute_mode``), with no check on the frames.

A concrete length, or a streaming call (a padding cache), goes to transformers' own forward.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from onnxport.hf.attribute_swap import swapped

__all__ = ["mimi_any_length"]

_MODULE = "transformers.models.mimi.modeling_mimi"
_CDIST_ROWS = 25  # past this many rows on either side, torch.cdist computes euclidean distances by matrix products


def _integer_padding(module: torch.nn.Module, original: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    conv = module.conv
    kernel = (conv.kernel_size[0] - 1) * conv.dilation[0] + 1
    stride = conv.stride[0]
    total = kernel - stride

    def forward(hidden_states: torch.Tensor, padding_cache: Any = None) -> torch.Tensor:
        length = hidden_states.shape[-1]
        if padding_cache is not None or not isinstance(length, torch.SymInt):
            return original(hidden_states, padding_cache)
        extra = -length % stride
        left, right = (total, extra) if module.causal else (total - total // 2, total // 2 + extra)
        return conv(module._pad1d(hidden_states, (left, right), mode=module.pad_mode))

    return forward


def _products(module: torch.nn.Module, original: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    def quantize(hidden_states: torch.Tensor) -> torch.Tensor:
        if not isinstance(hidden_states.shape[0], torch.SymInt):
            return original(hidden_states)
        dists = torch.cdist(hidden_states[None].float(), module.embed[None].float(), p=2,
                            compute_mode="use_mm_for_euclid_dist")[0]
        return dists.argmin(dim=-1)

    return quantize


def _changes(module: torch.nn.Module) -> list[tuple[Any, str, Any]]:
    kind = type(module)
    if kind.__module__ != _MODULE:
        return []
    if kind.__name__ == "MimiConv1d":
        return [(module, "forward", _integer_padding(module, module.forward))]
    if kind.__name__ == "MimiEuclideanCodebook" and module.codebook_size > _CDIST_ROWS:
        return [(module, "quantize", _products(module, module.quantize))]
    return []


@contextlib.contextmanager
def mimi_any_length(model: torch.nn.Module) -> Iterator[None]:
    """Inside the context, Mimi's convolutions pad a symbolic length by integer amounts and its codebooks measure
    distances by the algorithm eager PyTorch picks at every length (see the module's docstring); put back on exit."""
    with swapped([change for module in model.modules() for change in _changes(module)]):
        yield
