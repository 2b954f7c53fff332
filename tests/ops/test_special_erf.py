"""The error functions (translate/ops/special_erf.py: erfc, erfcx, log_ndtr, erfinv, ndtri) against eager PyTorch."""

from __future__ import annotations

import pytest
import torch

from tests.ops._runner import OpCase, params, run_case
from tests.ops._special_inputs import ERF_X, ERFCX_X, FD, FDH, PROB, UNIT, S, aten, grid, inf, nan, unary_case

CASES = [
    # error functions
    unary_case(aten.erfc.default, ERF_X, FDH),
    unary_case(aten.special_erfcx.default, ERFCX_X, FD),
    OpCase(S.log_ndtr, args=lambda: (grid(-40.0, 10.0, 300, -1.0, 0.0, inf, -inf, nan),), dtypes=FD, equal_nan=True),
    unary_case(aten.erfinv.default, UNIT, FDH),
    unary_case(aten.special_ndtri.default, PROB, FD),
    OpCase(aten.erfc.default, args=lambda: (torch.randint(-3, 4, (5,)),), name="int"),
]


@pytest.mark.parametrize(("case", "dtype"), params(CASES))
def test_op(case: OpCase, dtype: torch.dtype | None) -> None:
    run_case(case, dtype)
