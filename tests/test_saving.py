"""Saving with external data: the model and its data change together, and killed saves leave nothing behind.

A kill is simulated where it matters: between placing the new data and renaming the new model into place
(the old pair must still load and compute the old model), and after the staging folder was made (a folder
whose writing process is gone is removed by the next save; one whose writer lives is left alone).
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnxruntime as ort
import pytest
import torch

import onnxport
from onnxport import saving


def _program(scale: float) -> tuple[onnxport.OnnxProgram, torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 48)  # weights large enough to leave the model for the data file
    with torch.no_grad():
        model.weight.mul_(scale)
    x = torch.randn(2, 64)
    return onnxport.export(model, (x,), verify=False), x


def _run(path: os.PathLike, x: torch.Tensor) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]


def _data_files(folder: os.PathLike) -> list[str]:
    return sorted(f for f in os.listdir(folder) if f.endswith(".data"))


def test_a_new_save_replaces_model_and_data_together(tmp_path) -> None:
    path = tmp_path / "m.onnx"
    first, x = _program(1.0)
    second, _ = _program(2.0)
    first.save(path, external_data=True)
    first.save(path, external_data=True)  # the same weights: the same data file, nothing else left
    assert len(_data_files(tmp_path)) == 1
    second.save(path, external_data=True)
    assert len(_data_files(tmp_path)) == 1  # the first save's data went once nothing pointed to it
    np.testing.assert_allclose(_run(path, x), second(x).numpy(), rtol=1e-6)
    second.save(path)  # self-contained now: no data file is left
    assert _data_files(tmp_path) == []
    np.testing.assert_allclose(_run(path, x), second(x).numpy(), rtol=1e-6)


def test_a_save_killed_before_the_model_rename_leaves_the_old_pair(tmp_path, monkeypatch) -> None:
    path = tmp_path / "m.onnx"
    first, x = _program(1.0)
    second, _ = _program(2.0)
    first.save(path, external_data=True)
    real_replace = os.replace

    def killed(src: str, dst: str) -> None:
        if os.fspath(dst) == os.fspath(path):
            raise KeyboardInterrupt  # the process dies here: the new data is in place, the model is not
        real_replace(src, dst)

    monkeypatch.setattr(saving.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        second.save(path, external_data=True)
    monkeypatch.undo()
    np.testing.assert_allclose(_run(path, x), first(x).numpy(), rtol=1e-6)  # the old model, its own data
    assert len(_data_files(tmp_path)) == 2  # the new data lies unused beside it
    first.save(tmp_path / "m.onnx", external_data=True)  # the next save removes it
    assert len(_data_files(tmp_path)) == 1
    np.testing.assert_allclose(_run(path, x), first(x).numpy(), rtol=1e-6)


def test_staging_folders_of_dead_writers_are_removed(tmp_path) -> None:
    prog, x = _program(1.0)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = tmp_path / ".m.onnx.killed"
    gone.mkdir()
    (gone / ".owner").write_text(dead.stdout.strip())
    (gone / "m.onnx.data").write_bytes(b"\0" * 1024)
    alive = tmp_path / ".m.onnx.running"
    alive.mkdir()
    (alive / ".owner").write_text(str(os.getppid()))  # a live process: a save under way elsewhere
    prog.save(tmp_path / "m.onnx", external_data=True)
    assert not gone.exists() and alive.exists()
    np.testing.assert_allclose(_run(tmp_path / "m.onnx", x), prog(x).numpy(), rtol=1e-6)
