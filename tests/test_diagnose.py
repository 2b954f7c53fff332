"""diagnose() and `onnxport doctor`: every graph break of a model at once, each at its line with its fix."""

from __future__ import annotations

import inspect
import textwrap

import numpy as np
import torch

from onnxport.capture.diagnose import Diagnosis, Issue, diagnose
from onnxport.cli import main

# The graph-break examples of the torch.export tutorial (seeds 001 and 003), as written there.


class Bad1(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return torch.sin(x)
        return torch.cos(x)


class Bad2(torch.nn.Module):
    def forward(self, x):
        x.data[0, 0] = 3
        return x


class Bad3(torch.nn.Module):
    def forward(self, x):
        x = x + 1
        return x + id(x)


class Bad4(torch.nn.Module):
    def forward(self, x):
        try:
            x = x + 1
            raise RuntimeError("bad")
        except:  # noqa: E722 - the tutorial's code, verbatim
            x = x + 2
        return x


class TwoProblems(torch.nn.Module):
    def forward(self, x):
        scale = x.abs().sum().item()
        if scale > 1.0:
            x = x / scale
        y = np.sin(x)
        return x + torch.as_tensor(y)


class Clean(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        return torch.relu(self.lin(x)) + x.shape[0]


def _line_of(obj: object, snippet: str) -> int:
    """The line of ``obj``'s source that contains ``snippet``, counted in this file."""
    lines, start = inspect.getsourcelines(obj)
    return start + next(i for i, line in enumerate(lines) if snippet in line)


def _x() -> tuple[torch.Tensor]:
    return (torch.randn(3, 3),)


def _only(diagnosis: Diagnosis, category: str) -> Issue:
    found = [i for i in diagnosis.issues if i.category == category]
    assert len(found) == 1, str(diagnosis)
    return found[0]


def test_bad1_data_dependent_if_is_a_warning_onnxport_rewrites() -> None:
    d = diagnose(Bad1(), _x())
    issue = _only(d, "data-dependent control flow")
    assert issue.location.file == __file__
    assert issue.location.line == _line_of(Bad1, "if x.sum() > 0")
    assert issue.location.function == "forward"
    assert issue.location.code == "if x.sum() > 0:"
    assert issue.severity == "warning"
    assert "torch.cond" in issue.fix
    assert any("rewrite" in s for s in issue.strategies)
    assert not d.capturable


def test_bad2_data_access() -> None:
    d = diagnose(Bad2(), _x())
    issue = _only(d, ".data access")
    assert (issue.location.file, issue.location.line) == (__file__, _line_of(Bad2, "x.data[0, 0] = 3"))
    assert "detach" in issue.fix
    assert not d.capturable  # non-strict export fails on it


def test_bad3_id_is_an_error_even_though_non_strict_bakes_it_in() -> None:
    d = diagnose(Bad3(), _x())
    issue = _only(d, "untraceable builtin")
    assert (issue.location.file, issue.location.line) == (__file__, _line_of(Bad3, "id(x)"))
    assert issue.severity == "error" and "__init__" in issue.fix
    assert d.capturable and not d.ok  # it captures, but with id(x) frozen into a constant


def test_bad4_try_except() -> None:
    d = diagnose(Bad4(), _x())
    issue = _only(d, "exception handling")
    assert (issue.location.file, issue.location.line) == (__file__, _line_of(Bad4, "try:"))
    assert "torch._check" in issue.fix
    assert issue.severity == "warning" and d.ok


def test_two_problems_reported_in_one_pass_each_at_its_line() -> None:
    d = diagnose(TwoProblems(), _x())
    scalar = _only(d, "tensor to Python scalar")
    numpy_call = _only(d, "numpy on tensor")
    assert (scalar.location.file, scalar.location.line) == (__file__, _line_of(TwoProblems, ".item()"))
    assert (numpy_call.location.file, numpy_call.location.line) == (__file__, _line_of(TwoProblems, "np.sin"))
    assert "torch.sin" in numpy_call.fix and "torch._check" in scalar.fix
    assert not d.ok
    text = str(d)
    assert f"{__file__}:{_line_of(TwoProblems, 'np.sin')} in forward" in text
    assert text.splitlines()[-1].startswith(f"{len(d.issues)} graph breaks: ")


def test_while_on_a_tensor_is_a_warning_onnxport_rewrites_into_while_loop() -> None:
    class Loop(torch.nn.Module):
        def forward(self, x):
            while x.sum() > 0:
                x = x - 1
            return x

    issue = _only(diagnose(Loop(), _x()), "data-dependent control flow")
    assert issue.location.line == _line_of(Loop, "while")
    assert issue.severity == "warning" and "while_loop" in issue.fix


def test_clean_model_has_no_issues() -> None:
    d = diagnose(Clean(), _x())
    assert d.issues == [] and d.ok and d.capturable
    assert str(d).splitlines()[-1] == "no graph breaks found"


def test_inputs_are_not_mutated() -> None:
    x = torch.randn(3, 3)
    before = x.clone()
    diagnose(Bad2(), (x,))
    assert torch.equal(x, before)


MODEL_FILE = textwrap.dedent(
    """
    import torch

    class Branchy(torch.nn.Module):
        def forward(self, x):
            if x.mean() > 0:
                return x * 2
            return -x

    class Fine(torch.nn.Module):
        def forward(self, x):
            return x * 2
    """
)


def test_cli_doctor(tmp_path, capsys) -> None:
    path = tmp_path / "branchy.py"
    path.write_text(MODEL_FILE)
    line = MODEL_FILE.splitlines().index("        if x.mean() > 0:") + 1
    assert main(["doctor", f"{path}:Branchy", "--input", "x=float32[2,3]"]) == 1
    out = capsys.readouterr().out
    assert "data-dependent control flow" in out
    assert f"{path}:{line} in forward" in out
    assert "torch.cond" in out
    assert main(["doctor", f"{path}:Fine", "--input", "x=float32[2,3]"]) == 0
    assert "no graph breaks found" in capsys.readouterr().out
