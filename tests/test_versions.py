"""The torch range onnxport supports: ops some releases lack, the tested range and its pins, the warning
for a newer torch, and `onnxport doctor`'s environment."""

from __future__ import annotations

import importlib.metadata
import pathlib
import re
import warnings

import pytest
import torch

import onnxport
from onnxport import versions
from onnxport.cli import main
from onnxport.translate.registry import AbsentOp, absent_ops, aten, ops

ROOT = pathlib.Path(__file__).resolve().parents[1]
_OP_REF = re.compile(r"\b(?:aten_|aten|torch\.ops\.aten)\.([A-Za-z_]\w*)\.([A-Za-z_]\w*)\b")


def _pins(path: pathlib.Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line)
        if m:
            pins[m.group(1).lower().replace("_", "-")] = m.group(2)
    return pins


def test_every_registration_resolves_or_is_a_known_difference():
    """A registration this torch does not have is one of the ops known to differ between releases: a misspelt
    op (``ops.aten.cholesky_typo.default``) would be absent here and fail this test."""
    unknown = sorted(set(absent_ops()) - set(versions.OPS_NOT_IN_EVERY_TORCH))
    assert not unknown, f"registered ops torch {torch.__version__} does not have, not in OPS_NOT_IN_EVERY_TORCH: {unknown}"


def test_a_misspelt_op_is_caught_as_absent():
    fn = aten(ops.aten.cholesky_misspelt.default)(lambda ctx, x: x)
    try:
        assert "aten::cholesky_misspelt.default" in absent_ops()
        assert "aten::cholesky_misspelt.default" not in versions.OPS_NOT_IN_EVERY_TORCH
    finally:
        from onnxport.translate import registry

        registry._ABSENT.pop("aten::cholesky_misspelt.default")
    assert callable(fn)


def test_every_op_named_in_the_source_and_tests_resolves_or_is_a_known_difference():
    """The textual references (``aten_.x.y``, ``aten.x.y``, ``torch.ops.aten.x.y``) in src/ and tests/: each
    names an overload of this torch, or one of the known differences, so a typo in a test fails too."""
    unknown = []
    for path in [*(ROOT / "src").rglob("*.py"), *(ROOT / "tests").rglob("*.py")]:
        if path.name == "test_versions.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for m in _OP_REF.finditer(line):
                packet = getattr(ops.aten, m.group(1))
                if isinstance(packet, AbsentOp):
                    name = f"aten::{m.group(1)}.{m.group(2)}"
                    if name not in versions.OPS_NOT_IN_EVERY_TORCH:
                        unknown.append(f"{path.relative_to(ROOT)}:{number}: {name}")
                elif m.group(2) not in packet.overloads() and not hasattr(packet, m.group(2)):
                    unknown.append(f"{path.relative_to(ROOT)}:{number}: aten::{m.group(1)}.{m.group(2)}")
    assert not unknown, "\n".join(unknown)


def test_an_absent_op_cannot_be_called():
    op = ops.aten.no_such_op_here.default
    assert isinstance(op, AbsentOp)
    with pytest.raises(RuntimeError, match="aten::no_such_op_here.default is not an operator of torch"):
        op(torch.ones(1))


def test_the_tested_range_is_the_pinned_range():
    """versions.TESTED is what CI installs: the newest torch and the other packages of requirements-test.txt,
    the oldest torch of requirements-torch-oldest.txt (pyproject.toml's floor), the newest transformers of
    requirements-transformers-newest.txt."""
    pinned = _pins(ROOT / "requirements-test.txt")
    oldest = _pins(ROOT / "requirements-torch-oldest.txt")
    newest_tf = _pins(ROOT / "requirements-transformers-newest.txt")
    assert versions.TESTED["torch"] == (oldest["torch"], pinned["torch"])
    assert versions.TESTED["transformers"] == (pinned["transformers"], newest_tf["transformers"])
    for package in ("onnx", "onnx-ir", "onnxruntime", "numpy"):
        assert versions.TESTED[package] == (pinned[package], pinned[package]), package
    pyproject = (ROOT / "pyproject.toml").read_text()
    floor = versions.TESTED["torch"][0].rsplit(".", 1)[0]
    assert f'"torch>={floor}"' in pyproject


@pytest.mark.parametrize("version,tested", [("2.10.0", True), ("2.15.1+cpu", True), ("2.12.0+cu128", True),
                                            ("2.16.0.dev20261201", False), ("2.9.1", False)])
def test_in_tested_range(version, tested):
    assert versions.in_tested_range("torch", version) is tested


def test_a_newer_torch_warns_once_naming_the_range(monkeypatch):
    monkeypatch.setattr(torch, "__version__", "2.16.0")
    with pytest.warns(versions.UntestedTorchWarning, match=r"tested with torch 2\.10\.0 to 2\.15\.0; torch 2\.16\.0 "
                      "is newer"):
        versions.check_torch()
    monkeypatch.setattr(torch, "__version__", versions.TESTED["torch"][1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        versions.check_torch()


def test_doctor_without_a_model_prints_the_environment(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"onnxport {onnxport.__version__}, Python")
    torch_line = next(line for line in out.splitlines() if line.strip().startswith("torch "))
    assert importlib.metadata.version("torch") in torch_line and "tested: 2.10.0 to 2.15.0" in torch_line
    assert torch_line.rstrip().endswith("tested")
    assert re.search(r"^translators: \d+ ops", out, re.M)
    for name in absent_ops():
        assert name in out
    assert "verification: onnxruntime in a child process" in out
