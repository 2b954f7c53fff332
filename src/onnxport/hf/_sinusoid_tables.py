"""Sinusoidal position tables of any length, during a capture.

Some transformers models (M2M100 and NLLB, Speech2Text, SpeechT5, XGLM, Kosmos-2, MusicGen, SeamlessM4T) embed
positions by looking them up in a precomputed sinusoid table, ``weights``, which their forward grows in Python
(``if max_pos > self.weights.size(0): self.make_weights(...)``) when a sequence is longer than the table. Under
torch.export that comparison is a guard on the sequence length: the capture refuses a dynamic length past the
table (``input_ids.shape[1] <= 65``), or keeps the table's bound, while eager PyTorch takes any length.

During the capture (:func:`tables_of_any_length`), each such module's table is made by its own ``make_weights``
inside the graph, before its forward runs, with more rows than the call can index (a symbolic count: the tokens,
the past, the padding index and the offset), so the comparison is known false and no guard is made. The file
computes the table for the length it is given, as eager PyTorch does; the module's table is put back after.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from typing import Any

import torch

from onnxport.hf.attribute_swap import swapped

__all__ = ["tables_of_any_length"]

# The inputs that run along the positions, and the dimension that counts them.
_ALONG = (("input_ids", -1), ("position_ids", -1), ("inputs_embeds", 1))
# The argument that gives the tokens already in the cache (Speech2Text's is ``cache_length`` in transformers 5.24).
_PAST = ("past_key_values_length", "cache_length")


def _grows_its_table(module: torch.nn.Module) -> bool:
    return (callable(getattr(type(module), "make_weights", None))
            and isinstance(getattr(module, "weights", None), torch.Tensor)
            and isinstance(getattr(module, "embedding_dim", None), int))


def _rows_for(module: torch.nn.Module, arguments: dict[str, Any]) -> Any:
    """More table rows than a call with ``arguments`` indexes: its tokens and past (:data:`_PAST`), the padding
    index, the offset and 2 more (the most any of these models adds to a position)."""
    length = next((arguments[name].shape[dim] for name, dim in _ALONG
                   if isinstance(arguments.get(name), torch.Tensor)), None)
    if length is None:
        return None
    padding = module.padding_idx if isinstance(getattr(module, "padding_idx", None), int) else 0
    offset = getattr(module, "offset", 0)
    past = next((arguments[name] for name in _PAST if arguments.get(name) is not None), 0)
    return length + past + padding + 1 + offset + 2


def _grown_forward(module: torch.nn.Module) -> Any:
    forward = module.forward  # the bound method of its class
    signature = inspect.signature(forward)
    make = inspect.signature(module.make_weights).parameters

    def grown(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        rows = _rows_for(module, bound.arguments)
        if rows is None:
            return forward(*args, **kwargs)
        table = module.weights
        extra = {"padding_idx": module.padding_idx} if "padding_idx" in make else {}
        module.make_weights(rows, module.embedding_dim, **extra)
        try:
            return forward(*args, **kwargs)
        finally:
            module.weights = table

    return grown


@contextlib.contextmanager
def tables_of_any_length(model: torch.nn.Module) -> Iterator[None]:
    """Each submodule of ``model`` that grows a sinusoid table makes it in the graph for the length of each call
    (see the module); put back on exit."""
    with swapped([(m, "forward", _grown_forward(m)) for m in model.modules() if _grows_its_table(m)]):
        yield
