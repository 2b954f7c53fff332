"""Automatic rewrite of data-dependent Python ``if`` into ``torch.cond``: each shape real code takes,
compared with eager on inputs that take every branch, and the refusals with their messages."""

from __future__ import annotations

import inspect
import linecache
import os

import pytest
import torch

import onnxport

THIS = os.path.abspath(__file__)
SCALE = 3.0


def line_of(obj, text: str) -> int:
    """The line number in this file of the first line of ``obj``'s source containing ``text``."""
    lines, first = inspect.getsourcelines(obj)
    return first + next(i for i, line in enumerate(lines) if text in line)


def check(model, *input_sets, n_rewrites: int | None = None, **kwargs) -> onnxport.OnnxProgram:
    """Export on the first input set, then compare onnxruntime with eager on every set."""
    prog = onnxport.export(model, input_sets[0], **kwargs)
    for inputs in input_sets:
        torch.testing.assert_close(prog(*inputs), model(*inputs), atol=1e-5, rtol=1e-4)
    if n_rewrites is not None:
        assert len(prog.report.rewrites) == n_rewrites, str(prog.report)
    assert "If" in {n.op_type for n in prog.model.graph.all_nodes()}
    return prog


POS, NEG = torch.ones(2, 3), -torch.ones(2, 3)


class TruthOfTensor(torch.nn.Module):
    def forward(self, x):
        if x.sum():
            return x * 2
        return -x


class IfElseReturn(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x.sin()
        else:
            return x.cos()


class AnyOfComparison(torch.nn.Module):
    def forward(self, a, b):
        if (a > b).any():
            return a - b
        return a + b


class EarlyReturnFallThrough(torch.nn.Module):
    def forward(self, x):
        y = x + 1
        if y.mean() > 1:
            return y * 10
        z = y - 1
        return z * z


class ElifChain(torch.nn.Module):
    def forward(self, x):
        s = x.sum()
        if s > 10:
            return x * 100
        elif s > 0:
            return x * 10
        elif s > -10:
            return x - 10
        else:
            return -x


class NestedIf(torch.nn.Module):
    def forward(self, x):
        if x.mean() > 0:
            if x.max() > 5:
                y = x * 3
            else:
                y = x * 2
        else:
            y = -x
        return y + 1


class ConditionalExpression(torch.nn.Module):
    def forward(self, x):
        y = x * 2 if x.sum() > 0 else x / 2
        return y + 1


class AssignBothBranches(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            a = x + 1
            b = x * 2
        else:
            a = x - 1
            b = x / 2
        return a * b


class AssignOneBranchWithPrior(torch.nn.Module):
    def forward(self, x):
        y = x.clone()
        if x.sum() > 0:
            y = y * 5
        return y - 1


class CallsSubmoduleAndReadsSelf(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.other = torch.nn.Linear(3, 3)
        self.scale = 4.0

    def forward(self, x):
        if self.lin(x).sum() > 0:
            out = self.lin(x) * self.scale
        else:
            out = self.other(x) * SCALE
        return out


def helper(x):
    if x.sum() > 0:
        return x * SCALE
    return x - SCALE


class UsesHelper(torch.nn.Module):
    def forward(self, x):
        return helper(x) + 1


class Inner(torch.nn.Module):
    def forward(self, x):
        if x.max() > 0.5:
            return x.relu()
        return x.abs()


class Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.block = torch.nn.Sequential(torch.nn.Linear(3, 3), Inner())

    def forward(self, x):
        return self.block(x) * 2


class ItemInTest(torch.nn.Module):
    def forward(self, x):
        if x.sum().item() > 0:
            return x + 1
        return x - 1


class BoolOps(torch.nn.Module):
    def forward(self, a, b):
        if a.sum() > 0 and not b.sum() > 0:
            return a * b
        return a + b


class Base(torch.nn.Module):
    def forward(self, x):
        return x * 2


class UsesSuper(Base):
    def forward(self, x):
        if x.sum() > 0:
            return super().forward(x)
        return x


def make_closure_model(offset: float) -> torch.nn.Module:
    bias = torch.full((3,), offset)

    class Closure(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x + bias
            return x - offset

    return Closure()


def test_truth_of_tensor_like_the_seed() -> None:
    check(TruthOfTensor(), (POS,), (NEG,), (torch.zeros(2, 3),), n_rewrites=1)


def test_if_else_with_returns() -> None:
    check(IfElseReturn(), (POS,), (NEG,), n_rewrites=1)


def test_any_of_comparison() -> None:
    a = torch.randn(4)
    check(AnyOfComparison(), (a, a - 1), (a, a + 1), n_rewrites=1)


def test_early_return_with_fall_through() -> None:
    check(EarlyReturnFallThrough(), (POS,), (NEG,), n_rewrites=1)


def test_elif_chain_rewritten_one_test_at_a_time() -> None:
    prog = check(ElifChain(), (POS * 5,), (POS,), (NEG,), (NEG * 5,), n_rewrites=3)
    lines = [r.line for r in prog.report.rewrites]
    assert lines == [line_of(ElifChain, "if s > 10"), line_of(ElifChain, "elif s > 0"), line_of(ElifChain, "elif s > -10")]


def test_nested_if() -> None:
    check(NestedIf(), (POS,), (POS * 9,), (NEG,), n_rewrites=2)


def test_conditional_expression() -> None:
    check(ConditionalExpression(), (POS,), (NEG,), n_rewrites=1)


def test_assignments_in_both_branches() -> None:
    check(AssignBothBranches(), (POS,), (NEG,), n_rewrites=1)


def test_assignment_in_one_branch_keeps_prior_value() -> None:
    check(AssignOneBranchWithPrior(), (POS,), (NEG,), n_rewrites=1)


def test_branches_call_submodules_read_self_and_globals() -> None:
    torch.manual_seed(0)
    model = CallsSubmoduleAndReadsSelf()
    x = torch.randn(2, 3) * 10
    check(model, (x,), (-x,), n_rewrites=1)


def test_test_inside_a_module_level_helper() -> None:
    prog = check(UsesHelper(), (POS,), (NEG,), n_rewrites=1)
    assert prog.report.rewrites[0].function == "helper"


def test_test_inside_nested_submodule() -> None:
    torch.manual_seed(0)
    model = Outer()
    x = torch.randn(2, 3) * 5
    prog = check(model, (x,), (-x,), (x * 0,), n_rewrites=1)
    assert prog.report.rewrites[0].function == "Inner.forward"


def test_item_in_test() -> None:
    check(ItemInTest(), (POS,), (NEG,), n_rewrites=1)


def test_and_not_in_test() -> None:
    check(BoolOps(), (POS, NEG), (POS, POS), (NEG, NEG), n_rewrites=1)


def test_method_using_super() -> None:
    check(UsesSuper(), (POS,), (NEG,), n_rewrites=1)


def test_closure_variables() -> None:
    check(make_closure_model(2.5), (POS,), (NEG,), n_rewrites=1)


def test_report_lists_file_line_before_and_after() -> None:
    prog = onnxport.export(IfElseReturn(), (POS,))
    (rewrite,) = prog.report.rewrites
    assert (rewrite.file, rewrite.line) == (THIS, line_of(IfElseReturn, "if x.sum() > 0"))
    assert rewrite.before.startswith("if x.sum() > 0:")
    assert "torch.cond" not in rewrite.before and ".cond(" in rewrite.after
    assert f"{THIS}:{rewrite.line}" in str(prog.report)


@pytest.mark.parametrize("model", [IfElseReturn(), UsesHelper(), make_closure_model(1.0)], ids=["method", "helper", "closure"])
def test_user_code_is_restored(model) -> None:
    functions = [type(model).forward, helper]
    codes = [f.__code__ for f in functions]
    onnxport.export(model, (POS,))
    assert [f.__code__ for f in functions] == codes
    assert "__onnxport_rt__" not in globals()


def test_export_after_doctor_in_the_same_process() -> None:
    """TorchDynamo (run by the doctor) leaves resume functions of the same file among the globals: the
    rewrite must still find the user's own function."""
    from onnxport.capture.diagnose import diagnose

    diagnose(IfElseReturn(), (POS,))
    check(IfElseReturn(), (POS,), (NEG,), n_rewrites=1)


def test_rewrite_can_be_turned_off() -> None:
    with pytest.raises(onnxport.CaptureError, match="data-dependent") as info:
        onnxport.export(IfElseReturn(), (POS,), rewrite_control_flow=False)
    assert info.value.location.line == line_of(IfElseReturn, "if x.sum() > 0")


def fill_empty_rows(d):
    """A helper writing into its argument in place, in a branch (as transformers' FastSpeech2 does)."""
    if d.sum() == 0:
        d[d.sum(dim=1).eq(0)] = 1
    return d.cumsum(1)


class WritesItemsInBranch(torch.nn.Module):
    def forward(self, x):
        d = torch.relu(x).round().long()
        total = fill_empty_rows(d)
        return total, d  # d as fill_empty_rows left it: written in place when every entry was 0


def test_item_writes_in_a_branch_reach_the_callers_tensor() -> None:
    model = WritesItemsInBranch()
    zeros, mixed = -torch.rand(2, 5), torch.cat([-torch.rand(1, 5), torch.rand(1, 5) * 3])
    prog = onnxport.export(model, (zeros,), dynamic_shapes=({0: onnxport.Dim.DYNAMIC},))
    assert "write_back" in prog.report.rewrites[0].after
    assert prog.report.verification.branches.complete
    for x in (zeros, mixed, torch.rand(3, 5) * 3):
        for got, want in zip(prog(x), model(x)):
            assert torch.equal(got, want)
    assert model(zeros)[1].eq(1).all()  # eager wrote the caller's tensor: the ONNX model must too


# -- refusals ------------------------------------------------------------------------------------


class OneBranchOnly(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            y = x * 2
        return y


class DifferentShapes(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x
        return x.sum(dim=0)


class SideEffect(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        if x.sum() > 0:
            self.calls += 1
            x = x * 2
        return x


@pytest.mark.parametrize(
    ("model", "line_text", "reason"),
    [
        (OneBranchOnly(), "if x.sum() > 0", "`y` is assigned in the true branch only"),
        (DifferentShapes(), "if x.sum() > 0", "same shapes and dtypes"),
        (SideEffect(), "if x.sum() > 0", "assigns `self.calls`"),
    ],
    ids=["one_branch_only", "different_shapes", "side_effect"],
)
def test_refusals_say_why_where_and_what_to_write(model, line_text, reason) -> None:
    forward = type(model).forward
    code = forward.__code__
    with pytest.raises(onnxport.CaptureError) as info:
        onnxport.export(model, (POS,))
    err = info.value
    assert reason in str(err)
    assert err.location.file == THIS and err.location.line == line_of(type(model), line_text)
    assert line_text in err.location.code
    assert "torch.cond" in err.fix
    assert forward.__code__ is code


# -- verification looks for inputs taking every branch ------------------------------------------


@pytest.mark.parametrize("model", [TruthOfTensor(), ElifChain(), NestedIf(), AssignBothBranches(), UsesHelper()],
                         ids=["truth", "elif", "nested", "assign", "helper"])
def test_verification_exercises_both_branches_of_every_rewrite(model) -> None:
    prog = onnxport.export(model, (POS,))  # one example only: it takes one branch of each if
    coverage = prog.report.verification.branches
    assert coverage.complete, str(coverage)
    assert set(coverage.sites) == {f"{r.file}:{r.line}" for r in prog.report.rewrites}
    assert len(prog.report.verification.runs) >= 2
    assert "true and false" in str(prog.report)


class Unreachable(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 1e9:
            return x * 0
        return x + 1


def test_branch_no_variant_reaches_is_reported() -> None:
    prog = onnxport.export(Unreachable(), (POS,))
    coverage = prog.report.verification.branches
    assert not coverage.complete
    assert "no input taking the true branch" in str(coverage) and "verify_inputs" in str(coverage)
    # Given an input that takes it, coverage is complete.
    prog = onnxport.export(Unreachable(), (POS,), verify_inputs=[(POS * 1e10,)])
    assert prog.report.verification.ok


class PrivateNames(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.__scale = 7.0

    def __double(self, x):
        return x * 2

    def forward(self, x):
        if x.sum() > 0:
            return self.__double(x) * self.__scale
        return x


def test_private_names_keep_their_class_mangling() -> None:
    check(PrivateNames(), (POS,), (NEG,), n_rewrites=1)


_GENERATED = '''
import torch

def doubled(x):
    return x * 2

class Generated(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = doubled(self.lin(x))
        if h.sum() > 0:
            return h.relu()
        return h - 1
'''


@pytest.mark.parametrize("name", [None, "not.a.module"])
def test_code_executed_without_a_module_exports(name) -> None:
    """A model whose code was executed by ``exec`` (a code generator's, a notebook's), with no ``__name__`` (its
    functions' ``__module__`` is None) or a name that is no module: its branch is rewritten from the source
    linecache holds, and it verifies."""
    filename = f"<generated {name}>"
    linecache.cache[filename] = (len(_GENERATED), None, _GENERATED.splitlines(True), filename)
    namespace = {} if name is None else {"__name__": name}
    exec(compile(_GENERATED, filename, "exec"), namespace)  # noqa: S102 - the test's own code
    torch.manual_seed(0)
    prog = onnxport.export(namespace["Generated"]().eval(), (torch.randn(2, 4),))
    assert prog.report.verification.ok
    assert any(n.op_type == "If" for n in prog.model.graph)


def test_code_without_source_is_refused_naming_the_reason() -> None:
    namespace: dict = {}
    exec(compile(_GENERATED, "<no source>", "exec"), namespace)  # noqa: S102 - the test's own code
    with pytest.raises(onnxport.CaptureError, match="source of Generated.forward is not available") as err:
        onnxport.export(namespace["Generated"]().eval(), (torch.randn(2, 4),))
    assert "<no source>" in str(err.value)
