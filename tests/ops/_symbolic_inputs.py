"""Inputs for the SymInt/SymFloat/SymBool op tests (test_symbolic.py, test_symbolic_math.py): an expression of a
tensor's two dynamic sizes, returned as a one-element tensor, exported at (4, 6) and compared with eager at sizes
that order the two every way (less, equal, greater) and make differences negative."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.export import Dim

from tests.ops._runner import OpCase

SIZES = ((7, 3), (2, 9), (9, 9), (5, 5), (3, 11))
DIMS = (({0: Dim("a", min=2, max=64), 1: Dim("b", min=2, max=64)},),)


def _others() -> list[tuple[torch.Tensor]]:
    return [(torch.randn(a, b),) for a, b in SIZES]


def sizes_case(name: str, expression: Callable[[torch.Tensor, Any, Any], Any], **fields: Any) -> OpCase:
    """An ``OpCase`` of ``expression(x, a, b)`` (``a``, ``b``: x's sizes) as a float64 tensor of one element."""

    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.full((1,), expression(x, x.shape[0], x.shape[1]), dtype=torch.float64)

    fn.__name__ = name
    return OpCase(fn, args=lambda: (torch.randn(4, 6),), dynamic_shapes=DIMS, others=_others, **fields)
