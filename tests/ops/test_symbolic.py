"""SymInt and SymFloat arithmetic on dynamic sizes (symbolic.py): sizes, comparisons, Python's floor division and
modulo (negative operands too), true division, conversions, and the assertions torch.export records; each
compared with eager at sizes other than the example's."""

from __future__ import annotations

import math

import pytest
import torch

import onnxport
from tests.ops._runner import OpCase, params, run_case
from tests.ops._symbolic_inputs import sizes_case

CASES = [
    sizes_case("add_sub_mul", lambda x, a, b: a * b - a + 3),
    sizes_case("floordiv", lambda x, a, b: a // 3 + b // 2),
    sizes_case("floordiv_negative", lambda x, a, b: (a - b) // 3),  # Python floors toward -inf
    sizes_case("mod_negative", lambda x, a, b: (a - b) % 3),  # the divisor's sign
    sizes_case("truediv", lambda x, a, b: a / b),
    sizes_case("sym_float", lambda x, a, b: torch.sym_float(a) * 0.5),
    sizes_case("ceil", lambda x, a, b: math.ceil(a / 3)),
    sizes_case("floor", lambda x, a, b: math.floor((a - b) / 3)),
    sizes_case("trunc", lambda x, a, b: math.trunc((a - b) / 3)),  # toward zero
    sizes_case("sym_int", lambda x, a, b: torch.sym_int((a - b) / 3)),
    sizes_case("neg", lambda x, a, b: -a + b),
    sizes_case("eq_ne", lambda x, a, b: torch.sym_ite(a == b, 1, 0) + torch.sym_ite(a != b, 2 * b, b)),
    sizes_case("lt_le_gt_ge", lambda x, a, b: torch.sym_ite(a < b, 1, 0) + torch.sym_ite(a <= b, 2, 0)
               + torch.sym_ite(a > b, 4, 0) + torch.sym_ite(a >= b, 8, 0)),
    sizes_case("sym_max_min", lambda x, a, b: torch.sym_max(a, b) * 10 + torch.sym_min(a, b)),
    sizes_case("sym_numel", lambda x, a, b: x.numel() + 1),
    sizes_case("item", lambda x, a, b: x.abs().sum().ceil().long().item() * 0 + a),  # _local_scalar_dense
]


@pytest.mark.parametrize(("case", "dtype"), params(CASES))
def test_op(case: OpCase, dtype: torch.dtype | None) -> None:
    run_case(case, dtype)


def test_recorded_assertions_add_no_node() -> None:
    """``torch._check`` on a value read from a tensor becomes ``_assert_scalar``: no ONNX node (the file is the
    one without the check), and it computes as eager on other values."""

    class Scaled(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * x.abs().sum().ceil().long().item()

    class Checked(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            n = x.abs().sum().ceil().long().item()
            torch._check(n >= 0)
            return x * n

    x = torch.randn(4, 6)
    ep = torch.export.export(Checked(), (x,))
    assert "aten._assert_scalar.default" in {str(node.target) for node in ep.graph.nodes}
    checked, plain = (onnxport.export(model(), (x,), verify=False) for model in (Checked, Scaled))
    assert [node.op_type for node in checked.model.graph] == [node.op_type for node in plain.model.graph]
    for scale in (0.1, 7.0):
        y = torch.randn(4, 6) * scale
        torch.testing.assert_close(checked(y), Checked()(y))
