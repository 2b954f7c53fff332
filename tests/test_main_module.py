"""``python -m onnxport``: the ``onnxport`` command, with its subcommands, its errors and its exit status."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import onnx
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parent.parent


def onnxport_m(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "onnxport", *args], cwd=cwd, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=path), timeout=300)


def test_help_lists_the_subcommands(tmp_path: Path) -> None:
    done = onnxport_m("--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: onnxport ")
    for name in ("export", "export-hf", "doctor", "demo", "inspect"):
        assert name in done.stdout
    script = Path(sys.executable).with_name("onnxport")  # the console script, where it is installed
    if script.is_file():
        same = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=300)
        assert same.returncode == 0 and same.stdout == done.stdout


def test_a_bad_argument_is_onnxports_error_and_exit_1(tmp_path: Path) -> None:
    (tmp_path / "net.py").write_text(textwrap.dedent("""
        import torch

        class Net(torch.nn.Module):
            def forward(self, x):
                return x * 2
    """))
    done = onnxport_m("export", "net.py:Net", "--input", "x=float33[2,3]", "-o", "net.onnx", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.startswith("onnxport: InvalidInputError: cannot read --input 'x=float33[2,3]'")
    assert "fix:" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "net.onnx").exists()

    done = onnxport_m("inspect", "missing.onnx", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.startswith("onnxport: InvalidInputError: missing.onnx does not exist")


def test_an_unknown_option_exits_2(tmp_path: Path) -> None:
    done = onnxport_m("export", "net.py:Net", "-o", "net.onnx", "--no-such-option", cwd=tmp_path)
    assert done.returncode == 2
    assert "unrecognized arguments: --no-such-option" in done.stderr


def test_a_subcommand_runs(tmp_path: Path) -> None:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), tmp_path / "relu.onnx")
    done = onnxport_m("inspect", "relu.onnx", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "x: float[batch,4]" in done.stdout and "Relu" in done.stdout
