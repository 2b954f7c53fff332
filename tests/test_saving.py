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


# A child process saves with external data and stops at one stage of the save, where it is SIGKILLed and left
# unreaped (a zombie, as a parent that has not waited yet sees it); the next save must leave one model and the
# data file it points to, nothing else.
_PAUSED_SAVE = """
import os, sys, time
import torch, onnxport
from onnxport import saving

stage, path = sys.argv[1], sys.argv[2]
torch.manual_seed(1)
prog = onnxport.export(torch.nn.Linear(64, 48), (torch.randn(2, 64),), verify=False)

def pause():
    print("paused", flush=True)
    time.sleep(600)

def after(function, when=lambda *a: True):
    def call(*args, **kwargs):
        result = function(*args, **kwargs)
        if when(*args):
            pause()
        return result
    return call

if stage == "staging":
    saving.tempfile.mkdtemp = after(saving.tempfile.mkdtemp)
elif stage == "data written":
    saving.ir.save = after(saving.ir.save)
elif stage == "data renamed":
    saving.onnx.save = after(saving.onnx.save)
elif stage == "data placed":
    saving.os.replace = after(saving.os.replace, lambda src, dst: os.path.dirname(src) != os.path.dirname(dst)
                              and dst != os.path.abspath(path))
elif stage == "model placed":
    saving.os.replace = after(saving.os.replace, lambda src, dst: dst == os.path.abspath(path))
prog.save(path, external_data=True)
"""

_STAGES = ["data written",
           *(pytest.param(s, marks=pytest.mark.sweep) for s in ("data placed", "staging", "data renamed", "model placed"))]


@pytest.mark.parametrize("previous", [True, False], ids=["over-a-model", "new"])
@pytest.mark.parametrize("stage", _STAGES)
def test_a_save_killed_at_any_stage_leaves_nothing_after_the_next_save(stage, previous, tmp_path) -> None:
    import signal

    path = tmp_path / "m.onnx"
    prog, x = _program(1.0)
    if previous:
        prog.save(path, external_data=True)
    child = subprocess.Popen([sys.executable, "-c", _PAUSED_SAVE, stage, str(path)], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
    try:
        assert child.stdout.readline().strip() == "paused"
        os.kill(child.pid, signal.SIGKILL)
        _until_dead(child.pid)  # and not reaped: a zombie
        assert any(n.startswith(".m.onnx.") for n in os.listdir(tmp_path))  # the kill left its staging folder
        prog.save(path, external_data=True)
        files = sorted(os.listdir(tmp_path))
        assert len(_data_files(tmp_path)) == 1 and files == sorted(["m.onnx", *_data_files(tmp_path)]), files
        np.testing.assert_allclose(_run(path, x), prog(x).numpy(), rtol=1e-6)
        assert saving.clean(path) == []
    finally:
        child.kill()
        child.wait()


def _until_dead(pid: int) -> None:
    """Wait until ``pid`` is a zombie (Linux) or gone."""
    import time

    for _ in range(500):
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as f:
                if f.read().rsplit(")", 1)[-1].split()[0] in ("Z", "X"):
                    return
        except OSError:
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} did not die")


def test_clean_removes_what_a_killed_save_left(tmp_path) -> None:
    """``onnxport.saving.clean(path)`` tidies a folder that is not saved again: a dead writer's staging folder and
    a data file the model does not point to go; the model and its data stay."""
    prog, x = _program(1.0)
    path = tmp_path / "m.onnx"
    prog.save(path, external_data=True)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / ".m.onnx.killed").mkdir()
    (tmp_path / ".m.onnx.killed" / ".owner").write_text(dead.stdout.strip())
    (tmp_path / "m.onnx.0123456789abcdef.data").write_bytes(b"\0" * 64)
    assert saving.clean(path) == [".m.onnx.killed", "m.onnx.0123456789abcdef.data"]
    assert sorted(os.listdir(tmp_path)) == sorted(["m.onnx", *_data_files(tmp_path)]) and len(_data_files(tmp_path)) == 1
    np.testing.assert_allclose(_run(path, x), prog(x).numpy(), rtol=1e-6)


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="process start times come from /proc")
def test_a_reused_pid_is_not_taken_for_the_writer(tmp_path) -> None:
    """A staging folder whose writer's pid now belongs to another process (started later) is a dead writer's."""
    prog, _ = _program(1.0)
    reused = tmp_path / ".m.onnx.reused"
    reused.mkdir()
    (reused / ".owner").write_text(f"{os.getppid()} 1")  # a live pid, but not started at tick 1
    prog.save(tmp_path / "m.onnx", external_data=True)
    assert not reused.exists()
