"""LDL factorization and solve, Bunch-Kaufman pivoting (translate/ops/linalg_ldl.py), against eager PyTorch."""

import pytest
import torch

from tests.ops._linalg_inputs import BATCH, L, aten, ldl_solve_args, spd, sym
from tests.ops._runner import OpCase, params, run_case

CASES = [
    # LDL (Bunch-Kaufman)
    OpCase(aten.linalg_ldl_factor_ex.default, args=lambda: (sym(40, 5, 5),), name="indefinite"),
    OpCase(aten.linalg_ldl_factor.default, args=lambda: (spd(5, 5),)),
    OpCase(aten.linalg_ldl_solve.default, args=ldl_solve_args),
    OpCase(L.ldl_factor, args=lambda: (sym(8, 4, 4),), name="dynamic", dynamic_shapes=(({0: BATCH},),)),
]


@pytest.mark.parametrize(("case", "dtype"), params(CASES))
def test_op(case: OpCase, dtype: torch.dtype | None) -> None:
    run_case(case, dtype)
