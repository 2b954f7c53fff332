"""``t.data`` read as ``t.detach()`` during export: reads and writes through ``.data`` export and match
eager on other inputs than the example (nothing frozen), and the refusals say why."""

from __future__ import annotations

import inspect
import os

import pytest
import torch

import onnxport
from onnxport.capture.diagnose import diagnose

THIS = os.path.abspath(__file__)


def line_of(obj, text: str) -> int:
    lines, first = inspect.getsourcelines(obj)
    return first + next(i for i, line in enumerate(lines) if text in line)


def check(model, *input_sets) -> onnxport.OnnxProgram:
    prog = onnxport.export(model, input_sets[0], verify_inputs=list(input_sets[1:]))
    assert prog.report.verification.ok
    for inputs in input_sets:
        clone = tuple(t.clone() for t in inputs)
        torch.testing.assert_close(prog(*inputs), model(*clone), atol=1e-5, rtol=1e-4)
    return prog


class WriteThroughData(torch.nn.Module):
    """Seed 001's Bad2, as written."""

    def forward(self, x):
        x.data[0, 0] = 3
        return x


class ReadData(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.full((3,), 0.5))

    def forward(self, x):
        return x.data * 2 + self.w.data


def scale(x):
    return x.data.abs() + 1


class UsesHelper(torch.nn.Module):
    def forward(self, x):
        return scale(x) * 2


class Holder:
    """An object with a plain ``data`` attribute: its ``.data`` is left as it is."""

    def __init__(self, data: torch.Tensor):
        self.data = data


class ReadsHolderData(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.holder = Holder(torch.arange(3.0))

    def forward(self, x):
        return x.data + self.holder.data


def test_write_through_data_like_the_seed() -> None:
    prog = check(WriteThroughData(), (torch.randn(3, 3),), (torch.ones(3, 3),))
    (rewrite,) = prog.report.rewrites
    assert (rewrite.kind, rewrite.file, rewrite.line) == ("data", THIS, line_of(WriteThroughData, "x.data[0, 0]"))
    assert rewrite.before.strip() == "x.data[0, 0] = 3"
    assert rewrite.after == "__onnxport_rt__.data(x)[0, 0] = 3"
    assert f"{THIS}:{rewrite.line}" in str(prog.report)
    assert prog.report.verification.branches is None  # a .data rewrite has no branches to explore


def test_reads_through_data_are_not_frozen_to_the_example() -> None:
    prog = check(ReadData(), (torch.randn(3),), (torch.ones(3),), (torch.zeros(3),))
    assert [r.kind for r in prog.report.rewrites] == ["data"]
    assert not prog.model.graph.initializers.get("lifted_tensor_0")


def test_data_in_a_module_level_helper() -> None:
    prog = check(UsesHelper(), (torch.randn(4),), (-torch.ones(4),))
    assert prog.report.rewrites[0].function == "scale"


def test_data_of_other_objects_is_left_alone() -> None:
    check(ReadsHolderData(), (torch.randn(3),), (torch.ones(3),))


@pytest.mark.parametrize("model", [WriteThroughData(), UsesHelper()], ids=["method", "helper"])
def test_user_code_is_restored(model) -> None:
    functions = [type(model).forward, scale]
    codes = [f.__code__ for f in functions]
    onnxport.export(model, (torch.randn(3, 3),))
    assert [f.__code__ for f in functions] == codes
    assert "__onnxport_rt__" not in globals()


def test_doctor_still_lists_data_with_what_onnxport_does() -> None:
    d = diagnose(WriteThroughData(), (torch.randn(3, 3),))
    (issue,) = [i for i in d.issues if i.category == ".data access"]
    assert issue.location.line == line_of(WriteThroughData, "x.data[0, 0]")
    assert "detach" in issue.fix and any(".detach()" in s for s in issue.strategies)


def test_rewrite_off_refuses_at_the_line() -> None:
    with pytest.raises(onnxport.CaptureError, match="uses .data") as info:
        onnxport.export(WriteThroughData(), (torch.randn(3, 3),), rewrite_control_flow=False)
    assert info.value.location.line == line_of(WriteThroughData, "x.data[0, 0]")
    assert "detach()" in info.value.fix and "rewrite_control_flow" in info.value.fix


# -- refusals ------------------------------------------------------------------------------------


class AssignsData(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        y.data = x.data[:1]
        return y


class WritesParameter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(3))

    def forward(self, x):
        self.w.data.mul_(0.5)
        return x * self.w


class WritesBufferItem(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("steps", torch.zeros(3))

    def forward(self, x):
        self.steps.data[0] += 1
        return x + self.steps


@pytest.mark.parametrize(
    ("model", "text", "reason"),
    [
        (AssignsData(), "y.data = x.data[:1]", "`y.data` is assigned"),
        (WritesParameter(), "self.w.data.mul_", "`self.w.data` is written in place"),
        (WritesBufferItem(), "self.steps.data[0]", "`self.steps.data` is written in place"),
    ],
    ids=["assign", "parameter", "buffer"],
)
def test_refusals_say_why_and_where(model, text, reason) -> None:
    state = {k: v.clone() for k, v in model.state_dict().items()}
    code = type(model).forward.__code__
    with pytest.raises(onnxport.CaptureError) as info:
        onnxport.export(model, (torch.randn(3),))
    err = info.value
    assert reason in str(err) and "cannot read it as .detach()" in str(err)
    assert (err.location.file, err.location.line) == (THIS, line_of(type(model), text))
    assert type(model).forward.__code__ is code
    for k, v in model.state_dict().items():  # capture ran on fake tensors: the model's state is unchanged
        assert torch.equal(v, state[k])


class WritesParameterThroughAlias(torch.nn.Module):
    """The write is on another line than the .data: the captured graph shows it."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(3))

    def forward(self, x):
        w = self.w.data
        w.mul_(2)
        return x * self.w


def test_write_into_a_parameter_through_an_alias_of_data_is_refused() -> None:
    model = WritesParameterThroughAlias()
    with pytest.raises(onnxport.CaptureError, match="writes in place into its 'w'") as info:
        onnxport.export(model, (torch.randn(3),))
    assert info.value.location.line == line_of(WritesParameterThroughAlias, "w.mul_(2)")
    assert f"{THIS}:{line_of(WritesParameterThroughAlias, 'w = self.w.data')}" in str(info.value)
    assert torch.equal(model.w, torch.ones(3))
