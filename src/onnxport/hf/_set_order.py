"""Sets of strings iterated in one order in every process, during capture.

Python orders a set of strings by their hashes, which differ from process to process (``PYTHONHASHSEED``). A model
that loops over a set builds its graph in that order: transformers' models with several kinds of layers compute
each kind's rotary table in ``for layer_type in set(self.config.layer_types)`` (ModernBERT, Gemma 3 and 31 more),
so the same export gave files whose nodes came in another order, and other bytes, in another process. During the
capture, the name ``set`` in transformers' modeling modules is a set whose iteration is sorted where its items are
all strings or all numbers (and the set's own order otherwise); the computation is the same, its order fixed.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

from onnxport.hf.attribute_swap import swapped

__all__ = ["SortedSet", "sets_in_order"]


class SortedSet(set):
    """A ``set`` iterated in sorted order when its items are all ``str`` or all numbers."""

    def __iter__(self) -> Iterator[Any]:
        items = list(super().__iter__())
        if all(isinstance(item, str) for item in items) or all(
                isinstance(item, (int, float)) and not isinstance(item, bool) for item in items):
            items.sort()
        return iter(items)


@contextlib.contextmanager
def sets_in_order() -> Iterator[None]:
    """``set`` in every loaded transformers modeling module is :class:`SortedSet` inside the block."""
    modules = [module for name, module in list(sys.modules.items())
               if name.startswith("transformers.models.") and ".modeling_" in name and module is not None
               and "set" not in vars(module)]
    with swapped((module, "set", SortedSet) for module in modules):
        yield
