"""Diagonals (translate/ops/linalg_diagonal.py: diagonal, diagonal_scatter, linalg.diagonal) against eager
PyTorch."""

import pytest
import torch
from torch import randn

from tests.ops._linalg_inputs import BATCH, Dim, aten, diagonal_dynamic, trace
from tests.ops._runner import OpCase, params, run_case

CASES = [
    # diagonals
    OpCase(aten.diagonal.default, args=lambda: (randn(3, 4, 5), 1, 2, 0), expect_ops=["Gather"]),
    OpCase(aten.linalg_diagonal.default, args=lambda: (randn(2, 5, 4),), kwargs={"offset": -2}),
    OpCase(trace, args=lambda: (randn(4, 6),)),
    OpCase(aten.diagonal_scatter.default, args=lambda: (randn(2, 4, 5), randn(2, 3), -1, 1, 2),
           expect_ops=["ScatterElements"]),
    OpCase(diagonal_dynamic, args=lambda: (randn(2, 5, 4),), name="symbolic_sizes",
           dynamic_shapes=(({0: BATCH, 1: Dim("rows", min=3), 2: Dim("cols", min=3)},),)),
]


@pytest.mark.parametrize(("case", "dtype"), params(CASES))
def test_op(case: OpCase, dtype: torch.dtype | None) -> None:
    run_case(case, dtype)
