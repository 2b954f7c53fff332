"""Automatic rewrite of a Python ``while`` on a tensor value into ``while_loop`` (an ONNX ``Loop``): each
loop compared with eager on inputs taking zero, one and several passes, and the refusals with their reasons."""

from __future__ import annotations

import inspect
import os

import pytest
import torch

import onnxport

THIS = os.path.abspath(__file__)


def line_of(obj, text: str) -> int:
    lines, first = inspect.getsourcelines(obj)
    return first + next(i for i, line in enumerate(lines) if text in line)


def check(model, *input_sets, n_rewrites: int = 1, **kwargs) -> onnxport.OnnxProgram:
    """Export on the first input set (the others verified too), then compare onnxruntime with eager on each."""
    prog = onnxport.export(model, input_sets[0], verify_inputs=list(input_sets[1:]), **kwargs)
    assert prog.report.verification.ok
    for inputs in input_sets:
        torch.testing.assert_close(prog(*inputs), model(*inputs), atol=1e-5, rtol=1e-4)
    assert len(prog.report.rewrites) == n_rewrites, str(prog.report)
    assert "Loop" in {n.op_type for n in prog.model.graph.all_nodes()}
    return prog


class Halve(torch.nn.Module):
    def forward(self, x):
        while x.abs().max() > 1:
            x = x / 2
        return x


def passes(x: torch.Tensor) -> int:
    """How many times Halve's body runs on ``x``."""
    n = 0
    while x.abs().max() > 1:
        x, n = x / 2, n + 1
    return n


# The example takes several passes; the others zero and one.
SEVERAL, ZERO, ONE = torch.randn(2, 3) * 50, torch.rand(2, 3) * 0.9, torch.full((2, 3), 1.5)


def test_halving_loop_like_the_issue() -> None:
    assert passes(SEVERAL) > 2 and passes(ZERO) == 0 and passes(ONE) == 1
    prog = check(Halve(), (SEVERAL,), (ZERO,), (ONE,))
    (rewrite,) = prog.report.rewrites
    assert (rewrite.kind, rewrite.file, rewrite.line) == ("while", THIS, line_of(Halve, "while x.abs()"))
    assert rewrite.before.startswith("while x.abs().max() > 1:") and ".while_loop(" in rewrite.after
    assert f"{THIS}:{rewrite.line}" in str(prog.report)
    # One ONNX Loop, no If: the loop test itself is in the graph.
    assert [n.op_type for n in prog.model.graph].count("Loop") == 1


def test_verification_finds_an_input_skipping_the_loop() -> None:
    prog = onnxport.export(Halve(), (SEVERAL,))  # the example enters the loop; a variant skips it
    coverage = prog.report.verification.branches
    assert coverage.complete, str(coverage)
    assert len(prog.report.verification.runs) >= 2


def test_dynamic_batch() -> None:
    batch = onnxport.Dim("batch")
    prog = check(Halve(), (SEVERAL,), (ZERO,), dynamic_shapes=({0: batch},))
    x = torch.randn(5, 3) * 20
    torch.testing.assert_close(prog(x), Halve()(x))


class Counter(torch.nn.Module):
    """Two carried variables, one an int64 counter; the example's loop runs several times."""

    def forward(self, x):
        n = torch.zeros((), dtype=torch.int64)
        while x.sum() > 0:
            x = x - 1
            n = n + 1
        return x, n


def test_several_carried_variables_one_a_counter() -> None:
    check(Counter(), (torch.ones(2, 3),), (-torch.ones(2, 3),), (torch.full((2, 3), 0.1),))


class ReadsSelfAndInputs(torch.nn.Module):
    """The body calls a submodule and reads self; the test reads an input the loop does not change."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.scale = 2.0

    def forward(self, x, limit):
        while (x * self.scale).norm() > limit:
            x = self.lin(x) * 0.5
        return x


def test_body_calls_submodule_and_reads_self_and_inputs() -> None:
    torch.manual_seed(0)
    limit = torch.tensor(1.0)
    check(ReadsSelfAndInputs(), (torch.randn(2, 3) * 10, limit), (torch.randn(2, 3) * 0.01, limit))


class IfInsideBody(torch.nn.Module):
    def forward(self, x):
        while x.abs().max() > 1:
            if x.sum() > 0:
                x = x / 2
            else:
                x = x / 3
        return x


def test_if_inside_the_body_becomes_a_cond_inside_the_loop() -> None:
    prog = check(IfInsideBody(), (torch.rand(2, 3) * 50,), (-torch.rand(2, 3) * 50,), (ZERO,), n_rewrites=2)
    assert [r.kind for r in prog.report.rewrites] == ["while", "if"]
    assert {"Loop", "If"} <= {n.op_type for n in prog.model.graph.all_nodes()}


class NestedWhile(torch.nn.Module):
    def forward(self, x):
        while x.abs().max() > 10:
            x = x / 2
            while x.abs().min() > 1:
                x = x - x.sign() * 0.5
        return x


def test_nested_loops() -> None:
    prog = check(NestedWhile(), (torch.randn(2, 3) * 100 + 200,), (torch.full((2, 3), 0.5),), (ONE * 8,), n_rewrites=2)
    assert [r.kind for r in prog.report.rewrites] == ["while", "while"]


class WhileInIf(torch.nn.Module):
    """A loop inside a rewritten branch; an int counter the code after the loop does not read."""

    def forward(self, x):
        i = 0
        if x.sum() > 0:
            while x.abs().max() > 1:
                x = x / 2
                i = i + 1
        else:
            x = -x
        return x


def test_loop_inside_a_rewritten_if() -> None:
    prog = check(WhileInIf(), (torch.rand(2, 3) * 10,), (-torch.rand(2, 3),), (ZERO,), n_rewrites=2)
    assert [r.kind for r in prog.report.rewrites] == ["if", "while"]


class ItemAndElse(torch.nn.Module):
    """`.item()` and `and` in the test, a temporary in the body, and an else clause."""

    def forward(self, x):
        while x.max().item() > 1 and x.min() > -100:
            t = x * 2
            x = t / 4
        else:
            x = x + 1
        return x


def test_item_and_in_test_temporary_in_body_and_else() -> None:
    check(ItemAndElse(), (torch.rand(2, 3) * 10 + 1,), (ZERO,), (torch.full((2, 3), -200.0),))


def halve_until(x, bound):
    while x.abs().max() > bound:
        x = x / 2
    return x


class UsesHelper(torch.nn.Module):
    def forward(self, x):
        return halve_until(x, 1.0) + 1


def test_loop_inside_a_module_level_helper() -> None:
    prog = check(UsesHelper(), (SEVERAL,), (ZERO,), (ONE,))
    assert prog.report.rewrites[0].function == "halve_until"


@pytest.mark.parametrize("model", [Halve(), UsesHelper()], ids=["method", "helper"])
def test_user_code_is_restored(model) -> None:
    functions = [type(model).forward, halve_until]
    codes = [f.__code__ for f in functions]
    onnxport.export(model, (SEVERAL,))
    assert [f.__code__ for f in functions] == codes
    assert "__onnxport_rt__" not in globals()


def test_rewrite_can_be_turned_off() -> None:
    with pytest.raises(onnxport.CaptureError, match="data-dependent") as info:
        onnxport.export(Halve(), (SEVERAL,), rewrite_control_flow=False)
    assert info.value.location.line == line_of(Halve, "while x.abs()")


# -- refusals ------------------------------------------------------------------------------------


class Breaks(torch.nn.Module):
    def forward(self, x):
        while x.sum() > 1:
            x = x / 2
            if x.max() > 100:
                break
        return x


class Continues(torch.nn.Module):
    def forward(self, x):
        while x.sum() > 1:
            x = x / 2
            continue
        return x


class Returns(torch.nn.Module):
    def forward(self, x):
        while x.sum() > 1:
            x = x / 2
            return x
        return x


class CountsCalls(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        while x.sum() > 1:
            self.calls += 1
            x = x / 2
        return x


class InPlace(torch.nn.Module):
    def forward(self, x):
        x = x.clone()
        while x.sum() > 1:
            x.div_(2)
        return x


class AppendsToList(torch.nn.Module):
    def forward(self, x):
        seen = []
        while x.sum() > 1:
            x = x / 2
            seen.append(x)
        return x


class FirstAssignedInBody(torch.nn.Module):
    def forward(self, x):
        while x.sum() > 1:
            x = x / 2
            y = x * 3
        return y


class GrowsShape(torch.nn.Module):
    def forward(self, x):
        while x.sum() > 1:
            x = torch.cat([x, x]) / 4
        return x


class ChangesDtype(torch.nn.Module):
    def forward(self, x):
        while x.sum() > 1:
            x = (x / 2).to(torch.float64)
        return x


class CarriesFloat(torch.nn.Module):
    def forward(self, x):
        scale = 1.0
        while x.sum() > 1:
            x = x / 2
            scale = scale * 2
        return x * scale


@pytest.mark.parametrize(
    ("model", "reason"),
    [
        (Breaks(), "uses `break`"),
        (Continues(), "uses `continue`"),
        (Returns(), "returns from the function"),
        (CountsCalls(), "assigns `self.calls`"),
        (InPlace(), "calls `x.div_(...)`"),
        (AppendsToList(), "calls `seen.append(...)`"),
        (FirstAssignedInBody(), "`y` is first assigned inside the loop"),
        (GrowsShape(), "changes the shape of `x`"),
        (ChangesDtype(), "changes the dtype of `x`"),
        (CarriesFloat(), "carries `scale`, a float"),
    ],
    ids=["break", "continue", "return", "side_effect", "in_place", "append", "unset_before", "shape", "dtype", "float"],
)
def test_refusals_say_why_where_and_what_to_write(model, reason) -> None:
    forward = type(model).forward
    code = forward.__code__
    with pytest.raises(onnxport.CaptureError) as info:
        onnxport.export(model, (torch.ones(2, 3),))
    err = info.value
    assert reason in str(err) and "while_loop" in str(err)
    assert err.location.file == THIS and err.location.line == line_of(type(model), "while x.sum() > 1")
    assert "while x.sum() > 1" in err.location.code
    assert "while_loop(" in err.fix
    assert forward.__code__ is code


# -- the doctor says what the export will do -----------------------------------------------------


def test_doctor_lists_the_loop_as_a_warning_onnxport_rewrites() -> None:
    from onnxport.capture.diagnose import diagnose

    d = diagnose(Halve(), (SEVERAL,))
    (issue,) = [i for i in d.issues if i.category == "data-dependent control flow"]
    assert issue.location.line == line_of(Halve, "while x.abs()")
    assert issue.severity == "warning" and d.ok
    assert "while_loop" in issue.strategies[0] and "while_loop" in issue.fix


def test_doctor_gives_the_reason_a_loop_cannot_be_rewritten() -> None:
    from onnxport.capture.diagnose import diagnose

    issues = diagnose(Breaks(), (torch.ones(2, 3),)).issues
    (issue,) = [i for i in issues if i.category == "data-dependent control flow"]
    assert issue.severity == "error" and "uses `break`" in issue.reason and "while_loop" in issue.fix
