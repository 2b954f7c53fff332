"""Dtypes onnxruntime has no kernel for compute in the nearest wider one (``translate/legalize.py``)."""

from __future__ import annotations

import onnx_ir as ir
import pytest
import torch

import onnxport
from onnxport.translate.legalize import _kernels

D = ir.DataType


class Select(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.where(a > 0, b, ~b), b < ~b


class Trig(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.acos(x.clamp(-1, 1)) + torch.sinh(x)


class Twice(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x + 1) * 2


class Branch(torch.nn.Module):
    def forward(self, x: torch.Tensor, flags: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, lambda f: torch.where(f, ~f, f), lambda f: f < ~f, (flags,))


def _dtypes(prog: onnxport.OnnxProgram, op_type: str) -> set[D]:
    return {n.inputs[-1].dtype for n in prog.model.graph if n.op_type == op_type}


CASES = [
    # (model, inputs, op whose inputs must change dtype, dtype it computes in)
    pytest.param(Select(), lambda: (torch.randn(6), torch.rand(6) > 0.5), "Where", D.UINT8, id="bool_where"),
    # onnxruntime 1.18, the oldest release onnxport writes for, has no uint8 Less: int32
    pytest.param(Select(), lambda: (torch.randn(6), torch.rand(6) > 0.5), "Less", D.INT32, id="bool_less"),
    pytest.param(torch.nn.Conv1d(2, 3, 3).double(), lambda: (torch.randn(2, 2, 9, dtype=torch.float64),), "Conv",
                 D.FLOAT, id="float64_conv"),
    pytest.param(Trig(), lambda: (torch.randn(4, 5, dtype=torch.float64),), "Acos", D.FLOAT, id="float64_acos"),
    pytest.param(Twice(), lambda: (torch.randn(4, 5).to(torch.bfloat16),), "Add", D.FLOAT, id="bfloat16_add"),
]


@pytest.mark.parametrize(("model", "inputs", "op_type", "wide"), CASES)
def test_compute_in_a_wider_dtype_and_match_eager(model, inputs, op_type, wide) -> None:
    args = inputs()
    assert _kernels(op_type, 23) and any(a.dtype.is_floating_point or a.dtype == torch.bool for a in args)
    prog = onnxport.export(model, args)
    assert prog.report.verification.ok
    assert _dtypes(prog, op_type) == {wide}
    expected, actual = model(*args), prog(*args)
    for e, a in zip(torch.utils._pytree.tree_leaves(expected), torch.utils._pytree.tree_leaves(actual)):
        assert a.dtype == e.dtype  # outputs keep the model's dtype
        torch.testing.assert_close(a, e, atol=1e-5, rtol=1e-5)


def test_outputs_keep_their_names_and_casts_are_shared() -> None:
    a, b = torch.randn(6), torch.rand(6) > 0.5
    prog = onnxport.export(Select(), (a, b), output_names=["picked", "less"])
    graph = prog.model.graph
    assert [o.name for o in graph.outputs] == ["picked", "less"]
    assert [o.dtype for o in graph.outputs] == [D.BOOL, D.BOOL]
    # b is read by Where and Not (in uint8) and by Less (in int32): one copy of it per dtype.
    casts = [n for n in graph if n.op_type == "Cast" and n.inputs[0] is graph.inputs[1]]
    assert sorted(c.outputs[0].dtype for c in casts) == sorted([D.UINT8, D.INT32])


def test_float16_is_left_to_the_runtime() -> None:
    x = torch.randn(4, 5).to(torch.float16)
    prog = onnxport.export(Twice(), (x,))
    assert not any(n.op_type == "Cast" for n in prog.model.graph)
    torch.testing.assert_close(prog(x), Twice()(x))


def test_integer_division_never_moves_to_float() -> None:
    class Halve(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.div(x, 3, rounding_mode="trunc")

    x = torch.randint(-50, 50, (7,), dtype=torch.int8)
    prog = onnxport.export(Halve(), (x,))
    assert all(n.inputs[0].dtype not in (D.FLOAT, D.DOUBLE) for n in prog.model.graph if n.op_type == "Div")
    torch.testing.assert_close(prog(x), Halve()(x))


def test_subgraphs_are_legalized_too() -> None:
    x, flags = torch.randn(3), torch.rand(5) > 0.5
    prog = onnxport.export(Branch(), (x, flags), verify_inputs=[(-x, flags)])
    (branch,) = [n for n in prog.model.graph if n.op_type == "If"]
    bodies = [branch.attributes["then_branch"].as_graph(), branch.attributes["else_branch"].as_graph()]
    ops = {(n.op_type, n.inputs[-1].dtype) for g in bodies for n in g if n.op_type in ("Where", "Less")}
    assert ops == {("Where", D.UINT8), ("Less", D.INT32)}
    for inputs in ((x, flags), (-x, flags)):
        torch.testing.assert_close(prog(*inputs), Branch()(*inputs))


def test_float64_computed_in_float32_is_verified_at_float32_precision() -> None:
    """onnxruntime has no float64 Acos: the node computes in float32, so a float64 output can be only as
    precise as float32; near 1, where acos is steep, float64's own tolerance would raise a false alarm."""
    x = torch.tensor([[0.99999, -0.99998, 0.5, 1.0, -1.0]], dtype=torch.float64)
    prog = onnxport.export(Trig(), (x,))
    assert prog.float64_as_float32 == ["Acos", "Sinh"]
    check = prog.report.verification.outputs[0]
    assert check.ok and (check.atol, check.rtol) == (1e-4, 1e-3)
    assert check.max_abs > 1e-7  # beyond float64's tolerance: the case the relaxed one is for
    twice = onnxport.export(Twice(), (x,))  # float64 kernels exist: float64's tolerance stays
    assert twice.float64_as_float32 == [] and twice.report.verification.outputs[0].atol == 1e-7
