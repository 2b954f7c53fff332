"""More SymInt/SymFloat/SymBool arithmetic on dynamic sizes (symbolic_math.py): powers, abs, boolean logic,
``sym_not``, ``sym_ite``, ``sym_sum`` and ``sym_sqrt``; each compared with eager at sizes other than the
example's.

torch.export's verifier refuses the other math functions on sizes (``torch._sym_cos``, ``_sym_log2``, ...) and
SymBool ``^`` as graph ops in the torches onnxport supports, so no exported program holds them; their translators
are there for a program that does."""

from __future__ import annotations

import pytest
import torch

from tests.ops._runner import OpCase, params, run_case
from tests.ops._symbolic_inputs import sizes_case

CASES = [
    sizes_case("pow_int", lambda x, a, b: a ** 2 + b),  # int ** non-negative int stays int
    sizes_case("pow_float", lambda x, a, b: (a / b) ** 0.5),
    sizes_case("abs", lambda x, a, b: abs(a - b)),
    sizes_case("and", lambda x, a, b: torch.sym_ite((a > 3) & (b > 3), 1, 0)),
    sizes_case("or", lambda x, a, b: torch.sym_ite((a > 3) | (b > 5), 2, 0)),
    sizes_case("sym_not", lambda x, a, b: torch.sym_ite(torch.sym_not(a == b), 1, 0)),
    sizes_case("sym_ite", lambda x, a, b: torch.sym_ite(a > b, a, b * 2)),
    sizes_case("sym_sum", lambda x, a, b: torch.sym_sum([a, b, 3])),
    sizes_case("sym_sqrt", lambda x, a, b: torch.sym_sqrt(a * b), tol={torch.float64: (1e-6, 1e-6)}),
]


@pytest.mark.parametrize(("case", "dtype"), params(CASES))
def test_op(case: OpCase, dtype: torch.dtype | None) -> None:
    run_case(case, dtype)
