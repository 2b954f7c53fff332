"""The command line: export FILE.py:NAME, inspect, demo, and errors without tracebacks."""

from __future__ import annotations

import textwrap

import onnx
import pytest

from onnxport.cli import main

MODEL_FILE = textwrap.dedent(
    """
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 2)

        def forward(self, x):
            return self.lin(x).relu()

    net = Net()

    def make():
        return Net(), (torch.randn(3, 4),)
    """
)


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "net.py"
    path.write_text(MODEL_FILE)
    return path


@pytest.mark.parametrize("name", ["Net", "net", "make"])
def test_export_class_instance_or_factory(model_file, tmp_path, name, capsys) -> None:
    out = tmp_path / f"{name}.onnx"
    inputs = [] if name == "make" else ["--input", "x=float32[3,4]"]
    assert main(["export", f"{model_file}:{name}", *inputs, "-o", str(out), "-q"]) == 0
    model = onnx.load(str(out))
    onnx.checker.check_model(model, full_check=True)
    assert [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim] == [3, 4]
    assert capsys.readouterr().out.strip().endswith(f"saved {out}")


def test_export_reports_progress_and_verification(model_file, tmp_path, capsys) -> None:
    assert main(["export", f"{model_file}:Net", "--input", "x=float32[2,4]", "-o", str(tmp_path / "m.onnx")]) == 0
    captured = capsys.readouterr()
    assert "[onnxport] capture" in captured.err
    assert "verification (onnxruntime vs eager PyTorch): passed" in captured.out


def test_inspect(model_file, tmp_path, capsys) -> None:
    out = tmp_path / "m.onnx"
    main(["export", f"{model_file}:Net", "--input", "x=float32[2,4]", "-o", str(out), "-q"])
    capsys.readouterr()
    assert main(["inspect", str(out)]) == 0
    text = capsys.readouterr().out
    assert "x: float[2,4]" in text
    assert "Gemm" in text and "Relu" in text
    assert "initializers: 2" in text


def test_bad_input_spec_is_a_clean_error(model_file, tmp_path, capsys) -> None:
    assert main(["export", f"{model_file}:Net", "--input", "x=float33[2]", "-o", str(tmp_path / "m.onnx")]) == 1
    err = capsys.readouterr().err
    assert "cannot read --input" in err and "Traceback" not in err
    assert not (tmp_path / "m.onnx").exists()


def test_missing_name(model_file, tmp_path, capsys) -> None:
    assert main(["export", f"{model_file}:Nope", "--input", "x=float32[2,4]", "-o", str(tmp_path / "m.onnx")]) == 1
    assert "has no 'Nope'" in capsys.readouterr().err


def test_inspect_not_onnx(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00\x01garbage")
    assert main(["inspect", str(bad)]) == 1
    assert "not an ONNX model" in capsys.readouterr().err


def test_demo_exports_verifies_and_prints_both_models(tmp_path, capsys) -> None:
    assert main(["demo", "-o", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["control_flow.onnx", "small_cnn.onnx"]
    # The control-flow model is verified on two inputs (one per branch), and its text shows the If.
    control_flow = captured.out.split("== small_cnn")[0]
    assert control_flow.count("  inputs: example: x=float32[3]") == 1
    assert control_flow.count("  inputs: verify_inputs[0]: x=float32[3]") == 1
    assert " = If (" in control_flow and "then_branch" in control_flow
    assert captured.out.count("verification (onnxruntime vs eager PyTorch): passed") == 2
    assert captured.err.count("[onnxport] verify") == 2
    for path in tmp_path.iterdir():
        onnx.checker.check_model(str(path), full_check=True)
    # Weights are elided from the printed text, not from the saved files.
    assert '"elided"' in captured.out
