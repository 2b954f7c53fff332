"""Activations written out elementwise become their ONNX op, in whatever arrangement the model writes
them; a function that only looks like one stays as it is. Each export is verified against eager."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable

import pytest
import torch
from torch.export import Dim

import onnxport

C = math.sqrt(2 / math.pi)
CASES: list[tuple[str, Callable[[torch.Tensor], torch.Tensor], str, dict[str, str]]] = [
    ("gelu_new", lambda x: 0.5 * x * (1.0 + torch.tanh(C * (x + 0.044715 * torch.pow(x, 3.0)))), "Gelu",
     {"approximate": "tanh"}),
    ("fast_gelu", lambda x: 0.5 * x * (1.0 + torch.tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x))), "Gelu",
     {"approximate": "tanh"}),
    ("bloom_gelu", lambda x: x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x))), "Gelu",
     {"approximate": "tanh"}),
    ("erf_gelu", lambda x: x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0))), "Gelu", {}),
    ("hard_swish", lambda x: x * torch.nn.functional.relu6(x + 3) / 6, "HardSwish", {}),
    ("mish", lambda x: x * torch.tanh(torch.nn.functional.softplus(x)), "Mish", {}),
]


class Act(torch.nn.Module):
    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor], bias: bool = False) -> None:
        super().__init__()
        self.fn = fn
        self.lin = torch.nn.Linear(8, 8)
        self.bias = torch.nn.Parameter(torch.randn(8)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        if self.bias is not None:
            h = h * 1.5 + self.bias  # two values meet before the activation
        return self.fn(h)


def _export(fn: Callable[[torch.Tensor], torch.Tensor], **kwargs) -> tuple[Counter, onnxport.OnnxProgram]:
    torch.manual_seed(0)
    prog = onnxport.export(Act(fn, **kwargs).eval(), (torch.randn(2, 5, 8) * 4,),
                           dynamic_shapes=({0: Dim("batch"), 1: Dim("seq")},))
    assert prog.report.verification.ok, str(prog.report.verification)
    return Counter(node.op_type for node in prog.model.graph), prog


@pytest.mark.parametrize(("name", "fn", "op", "attributes"), CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("bias", [False, True], ids=["plain", "after_bias"])
def test_written_out_activation_becomes_its_op(name, fn, op, attributes, bias) -> None:
    ops, prog = _export(fn, bias=bias)
    assert ops[op] == 1, ops
    assert not ops & Counter({"Tanh": 1, "Erf": 1, "Pow": 1, "Clip": 1, "Softplus": 1}), ops
    node = next(n for n in prog.model.graph if n.op_type == op)
    assert {k: a.value for k, a in node.attributes.items()} == attributes


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: 0.5 * x * (1.0 + torch.tanh(C * (x + 0.05 * torch.pow(x, 3.0)))),  # another constant
        lambda x: 0.5 * x * (1.0 + torch.tanh(C * x)),  # no cubic term
        lambda x: x * torch.nn.functional.relu6(x + 2) / 6,  # shifted
    ],
)
def test_a_near_miss_stays_written_out(fn) -> None:
    ops, _ = _export(fn)
    assert not ops & Counter({"Gelu": 1, "HardSwish": 1, "Mish": 1}), ops


def test_no_fusion_where_the_opset_lacks_the_op() -> None:
    prog = onnxport.export(Act(CASES[0][1]).eval(), (torch.randn(2, 5, 8),), opset=18)
    ops = {node.op_type for node in prog.model.graph}
    assert "Gelu" not in ops and "Tanh" in ops
