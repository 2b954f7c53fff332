"""Bessel and Airy functions (translate/ops/special_bessel.py) against eager PyTorch."""

from __future__ import annotations

import pytest
import torch

from tests.ops._runner import OpCase, params, run_case
from tests.ops._special_inputs import BESSEL, FD, K_BESSEL, aten, pos_bessel, unary_case

CASES = [
    # Bessel and Airy functions
    *[unary_case(op, x, dts) for op, (x, dts) in BESSEL.items()],
    *[OpCase(op, args=pos_bessel, dtypes=FD, equal_nan=True) for op in K_BESSEL],
    OpCase(aten.special_bessel_y0.default, args=lambda: (torch.arange(0, 30),), name="int"),
]


@pytest.mark.parametrize(("case", "dtype"), params(CASES))
def test_op(case: OpCase, dtype: torch.dtype | None) -> None:
    run_case(case, dtype)
