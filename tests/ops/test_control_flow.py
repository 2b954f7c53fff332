"""Loop higher-order ops: while_loop -> Loop, scan / map -> Scan, nested with torch.cond -> If.

Each case runs through the shared runner on its example inputs, then the same ONNX program runs on
other inputs (other values, sizes and trip counts) and is compared with eager again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import onnx_ir as ir
import pytest
import torch
from functorch.experimental.control_flow import map as hop_map
from torch import randn
from torch._higher_order_ops import scan, while_loop
from torch.export import Dim

import onnxport
from tests.ops._runner import DEFAULT_TOL, OpCase, run_case

DYN = (({0: Dim("n")},),)


# -- while_loop ------------------------------------------------------------------------------------


def count_to_rows(x):
    """``for i in range(x.shape[0])`` written as a while_loop with a tensor counter."""
    n = x.shape[0]
    return while_loop(lambda i, y: i < n, lambda i, y: (i + 1, y * 0.9 + i), (torch.tensor(0), x))


def count_to_tensor(x, n):
    """The bound is a tensor value, so the trip count is only known at run time."""
    return while_loop(lambda i, y: i < n, lambda i, y: (i + 1, y.cos() + 1), (torch.zeros((), dtype=torch.int64), x))


def fibonacci_carries(x, steps):
    """Several carries of different shapes and dtypes."""

    def body(i, a, b, total):
        return i + 1, b.clone(), a + b, total + a.sum()

    init = (torch.tensor(0), x, x * 2, torch.zeros(()))
    return while_loop(lambda i, a, b, total: i < steps, body, init)


def python_int_counter(x):
    """A Python int carry becomes an unbacked SymInt in the graph: an int64 scalar in ONNX."""
    return while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * 2 - 1), (0, x))[1]


def halve_until_small(x):
    """Data-dependent trip count: halve until every entry is below 1 in magnitude."""
    return while_loop(lambda y: y.abs().max() >= 1, lambda y: (y * 0.5,), (x,))


def flag_carry(x):
    """The condition is a carried bool that the body recomputes (do-while)."""

    def body(go, y):
        y = y * 0.5
        return y.abs().max() >= 1, y

    return while_loop(lambda go, y: go.clone(), body, (torch.tensor(True), x))


class LoopWithParams(torch.nn.Module):
    """Parameters and a submodule read by the body reach the graphs as additional_inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.rand(3) * 0.5 + 0.25)
        self.proj = torch.nn.Linear(3, 3)

    def forward(self, x):
        def body(i, y):
            return i + 1, torch.tanh(self.proj(y)) * self.scale

        return while_loop(lambda i, y: i < 4, body, (torch.tensor(0), x))


def while_in_cond(x):
    """A while_loop inside a torch.cond branch (Loop inside If)."""

    def looping(y):
        return while_loop(lambda v: v.sum() < 10, lambda v: (v + 1,), (y,))[0]

    return torch.cond(x.sum() > 0, looping, lambda y: y * -1.0, (x,))


def cond_in_body(x):
    """A torch.cond inside the loop body (If inside Loop)."""

    def body(i, y):
        return i + 1, torch.cond(y.sum() > 0, lambda v: v * 0.5, lambda v: v - 1.0, (y,))

    return while_loop(lambda i, y: i < 5, body, (torch.tensor(0), x))


# -- scan and map ----------------------------------------------------------------------------------


def cumsum_scan(xs):
    def step(carry, x):
        carry = carry + x
        return carry, carry.clone()

    return scan(step, torch.zeros_like(xs[0]), xs)


def scan_many(xs, ws, bias):
    """Two carries, two scanned inputs, two ys, and a closed-over tensor (additional_inputs)."""

    def step(carries, inputs):
        total, peak = carries
        x, w = inputs
        total = total + x * w + bias
        peak = torch.maximum(peak, x)
        return (total, peak), (total.clone(), (x * total).sum(-1))

    return scan(step, (torch.zeros_like(xs[0]), torch.full_like(xs[0], -1e9)), (xs, ws))


def reverse_scan_dim1(x):
    def step(carry, col):
        carry = carry * 0.5 + col
        return carry, carry.clone()

    return scan(step, torch.zeros(x.shape[0]), x, dim=1, reverse=True)


def map_rows(x, w):
    return hop_map(lambda row, w: torch.tanh(row @ w) + 1, x, w)


def map_two(x, y):
    return hop_map(lambda a, b: (a * b, a.sum() + b), x, y)


def _args(*shape: int, scale: float = 1.0) -> Callable[[], tuple[torch.Tensor]]:
    return lambda: (randn(*shape) * scale,)


def _n(value: int) -> torch.Tensor:
    return torch.tensor(value)


# (name, case, other inputs to run the same ONNX program on)
CASES: list[tuple[str, OpCase, Callable[[], Sequence[tuple[Any, ...]]]]] = [
    ("count_static", OpCase(count_to_rows, args=_args(4, 3), expect_ops=["Loop"]), lambda: [(randn(4, 3),)]),
    ("count_dynamic", OpCase(count_to_rows, args=_args(4, 3), expect_ops=["Loop"], dynamic_shapes=DYN),
     lambda: [(randn(2, 3),), (randn(7, 3),)]),
    ("count_tensor_bound", OpCase(count_to_tensor, args=lambda: (randn(3), _n(3)), expect_ops=["Loop"]),
     lambda: [(randn(3), _n(0)), (randn(3), _n(7))]),
    ("several_carries", OpCase(fibonacci_carries, args=lambda: (randn(2, 2), _n(5)), expect_ops=["Loop"]),
     lambda: [(randn(2, 2), _n(1)), (randn(2, 2), _n(9))]),
    ("python_int_carry", OpCase(python_int_counter, args=_args(2, 3), expect_ops=["Loop"]), lambda: [(randn(2, 3),)]),
    ("data_dependent", OpCase(halve_until_small, args=_args(3, 4, scale=10), expect_ops=["Loop"]),
     lambda: [(randn(3, 4) * 1000,), (torch.rand(3, 4) * 0.5,), (randn(3, 4) * 3,)]),
    ("flag_carry", OpCase(flag_carry, args=_args(3, scale=50), expect_ops=["Loop"]),
     lambda: [(torch.rand(3) * 0.1,), (randn(3) * 500,)]),
    ("params", OpCase(LoopWithParams(), args=_args(2, 3), expect_ops=["Loop", "Tanh"]), lambda: [(randn(2, 3),)]),
    ("while_in_cond", OpCase(while_in_cond, args=lambda: (torch.rand(2, 2) + 0.1,), expect_ops=["If", "Loop"]),
     lambda: [(torch.rand(2, 2) * -1 - 0.1,), (torch.rand(2, 2) * 20 + 0.1,)]),
    ("cond_in_body", OpCase(cond_in_body, args=_args(3, 2), expect_ops=["Loop", "If"]),
     lambda: [(randn(3, 2) * 5,), (-torch.rand(3, 2),)]),
    ("cumsum", OpCase(cumsum_scan, args=_args(5, 3), expect_ops=["Scan"]), lambda: [(randn(5, 3),)]),
    ("cumsum_dynamic", OpCase(cumsum_scan, args=_args(5, 3), expect_ops=["Scan"], dynamic_shapes=DYN),
     lambda: [(randn(2, 3),), (randn(9, 3),)]),
    ("scan_many", OpCase(scan_many, args=lambda: (randn(4, 3), randn(4, 3), randn(3)), expect_ops=["Scan"]),
     lambda: [(randn(4, 3), randn(4, 3), randn(3))]),
    ("reverse_dim1", OpCase(reverse_scan_dim1, args=_args(3, 5), expect_ops=["Scan"]), lambda: [(randn(3, 5),)]),
    ("map", OpCase(map_rows, args=lambda: (randn(4, 3), randn(3, 2)), expect_ops=["Scan"]),
     lambda: [(randn(4, 3), randn(3, 2))]),
    ("map_dynamic", OpCase(map_rows, args=lambda: (randn(4, 3), randn(3, 2)), expect_ops=["Scan"],
                           dynamic_shapes=(({0: Dim("n")}, None),)),
     lambda: [(randn(1, 3), randn(3, 2)), (randn(6, 3), randn(3, 2))]),
    ("map_two_outputs", OpCase(map_two, args=lambda: (randn(4, 3), randn(4, 3)), expect_ops=["Scan"]),
     lambda: [(randn(4, 3), randn(4, 3))]),
]


def _compare(actual: Any, expected: Any) -> None:
    exp = [t for t in torch.utils._pytree.tree_leaves(expected) if isinstance(t, torch.Tensor)]
    act = [t for t in torch.utils._pytree.tree_leaves(actual) if isinstance(t, torch.Tensor)]
    assert len(exp) == len(act)
    for e, a in zip(exp, act):
        atol, rtol = DEFAULT_TOL.get(e.dtype, (0, 0))
        torch.testing.assert_close(a, e, atol=atol, rtol=rtol)


@pytest.mark.parametrize(("case", "others"), [pytest.param(c, o, id=name) for name, c, o in CASES])
def test_control_flow(case: OpCase, others: Callable[[], Sequence[tuple[Any, ...]]]) -> None:
    prog = run_case(case)
    for args in others():
        _compare(prog(*args), case.fn(*args))


def test_loop_body_values_are_uniquely_named() -> None:
    """Every value name in the model, subgraphs included, is unique (ONNX scoping rule)."""
    prog = run_case(next(c for name, c, _ in CASES if name == "cond_in_body"))
    names = [v.name for n in prog.model.graph.all_nodes() for v in n.outputs]
    for node in prog.model.graph.all_nodes():
        for attr in node.attributes.values():
            if attr.type == ir.AttributeType.GRAPH:
                names += [v.name for v in attr.as_graph().inputs]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("name", ["count_static", "data_dependent", "cumsum", "map"])
def test_float16(name: str) -> None:
    """Loop and Scan bodies keep float16 carries and slices (ORT checks carried types match)."""
    case = next(c for n, c, _ in CASES if n == name)
    run_case(case, torch.float16)


def test_minimum_opset() -> None:
    """Loop and Scan exist at the minimum supported opset (18)."""
    for name in ("several_carries", "scan_many"):
        case = next(c for n, c, _ in CASES if n == name)
        args = case.args()
        prog = onnxport.export(case.fn, args, opset=18, verify=False)
        _compare(prog(*args), case.fn(*args))


def test_cond_on_a_symbolic_size() -> None:
    """The predicate is a SymBool from a dynamic dim: one ONNX If decides at run time."""
    import onnxport

    class M(torch.nn.Module):
        def forward(self, x):
            return torch.cond(x.shape[0] > 4, lambda x: x * 2, lambda x: x - 1, (x,))

    batch = torch.export.Dim("batch", min=2, max=64)
    prog = onnxport.export(M(), (torch.randn(6, 3),), dynamic_shapes=({0: batch},))
    assert "If" in {n.op_type for n in prog.model.graph.all_nodes()}
    for n in (3, 6, 9):
        x = torch.randn(n, 3)
        torch.testing.assert_close(prog(x), M()(x))
