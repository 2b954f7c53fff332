"""Writing a model and its external data so that readers never see one without the other.

Two files cannot be renamed into place at once, so the data file is named after its content
(``model.onnx.<sha256 prefix>.data``): it is placed first, under a name no other content has, then the
model that points to it replaces the old model in one rename. A reader (or a second writer) sees the old
pair or the new pair, never the old model with new data. The same weights give the same name, so saving
the same model twice gives the same files. After the rename, the data files of earlier saves of this path
are removed; so are staging folders and data files left by a save that was killed (its process is gone).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator

import onnx
import onnx_ir as ir
from onnx.external_data_helper import _get_all_tensors

__all__ = ["clean", "save_atomically"]

_OWNER = ".owner"  # in a staging folder: the pid of the process writing it


def save_atomically(path: str, write_plain: Callable[[str], None], model: ir.Model | None) -> None:
    """Write ``path``: ``write_plain(staged_path)`` for a self-contained file, or ``model`` with its
    initializers in a content-named data file beside it when ``model`` is given. Raises OSError."""
    directory, name = os.path.split(os.path.abspath(path))
    _sweep(directory, name)
    staging = tempfile.mkdtemp(prefix=f".{name}.", dir=directory)
    try:
        with open(os.path.join(staging, _OWNER), "w", encoding="ascii") as f:
            f.write(f"{os.getpid()} {_started(os.getpid()) or ''}".strip())
        staged = os.path.join(staging, name)
        previous = _data_files(path)
        if model is None:
            write_plain(staged)
            kept = None
        else:
            kept = _stage_with_data(model, staged, staging, name)
            if kept is not None:
                os.replace(os.path.join(staging, kept), os.path.join(directory, kept))
        os.replace(staged, path)
        for old in previous - {kept}:
            with contextlib.suppress(OSError):
                os.remove(os.path.join(directory, old))
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(staging)


def _stage_with_data(model: ir.Model, staged: str, staging: str, name: str) -> str | None:
    """Save ``model`` to ``staged`` with its data beside it, renamed after its content; returns that name
    (None when every tensor was small enough to stay in the model)."""
    ir.save(model, staged, external_data=f"{name}.data")
    if os.path.getsize(os.path.join(staging, f"{name}.data")) == 0:
        return None
    digest = hashlib.sha256()
    with open(os.path.join(staging, f"{name}.data"), "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            digest.update(chunk)
    data_name = f"{name}.{digest.hexdigest()[:16]}.data"
    os.replace(os.path.join(staging, f"{name}.data"), os.path.join(staging, data_name))
    proto = onnx.load(staged, load_external_data=False)
    for tensor in _external_tensors(proto):
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = data_name
    onnx.save(proto, staged)
    return data_name


def _external_tensors(proto: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    return (t for t in _get_all_tensors(proto) if t.data_location == onnx.TensorProto.EXTERNAL)


def _data_files(path: str) -> set[str]:
    """The data files beside ``path`` that its current model points to and an earlier save wrote (named
    ``<name>.data`` or ``<name>.<digest>.data``); empty when there is no readable model there."""
    name = os.path.basename(path)
    try:
        proto = onnx.load(path, load_external_data=False)
    except Exception:  # noqa: BLE001 - no model, or not one: nothing of ours to remove
        return set()
    locations = {e.value for t in _external_tensors(proto) for e in t.external_data if e.key == "location"}
    return {loc for loc in locations if _ours(loc, name)}


def _ours(file: str, name: str) -> bool:
    return os.path.basename(file) == file and file.startswith(f"{name}.") and file.endswith(".data")


def _sweep(directory: str, name: str) -> None:
    """Remove what killed saves of ``name`` left: staging folders whose writer is gone and, when no save of
    it is under way, data files that the current model does not point to."""
    live = False
    for entry in os.listdir(directory):
        folder = os.path.join(directory, entry)
        if not (entry.startswith(f".{name}.") and os.path.isdir(folder)):
            continue
        if _writer_alive(folder):
            live = True
        else:
            shutil.rmtree(folder, ignore_errors=True)
    if live:
        return
    current = _data_files(os.path.join(directory, name))
    for entry in os.listdir(directory):
        if _ours(entry, name) and entry not in current and entry != f"{name}.data":
            with contextlib.suppress(OSError):
                os.remove(os.path.join(directory, entry))


def _writer_alive(folder: str) -> bool:
    """Whether the process that wrote the staging ``folder`` is still running: its pid is, is no zombie (a killed
    process its parent has not reaped yet), and started when the one that wrote the folder did (a pid is reused
    once its process is gone)."""
    try:
        with open(os.path.join(folder, _OWNER), encoding="ascii") as f:
            pid_text, _, started = f.read().strip().partition(" ")
            pid = int(pid_text)
    except (OSError, ValueError):
        return False  # a folder from before owners were written, or half-made: nobody to wait for
    if pid == os.getpid():
        return True  # another save in this process (a thread) is under way
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # someone else's process: /proc says more where there is one
    state = _stat(pid)
    if state is None:
        return True  # no /proc (not Linux): the pid is all there is to go by
    return state[0] not in ("Z", "X") and (not started or state[1] == started)


def _stat(pid: int) -> tuple[str, str] | None:
    """A process's state letter and start time (clock ticks after boot) from ``/proc/<pid>/stat``; None where
    there is no such file."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()  # after the command name, which may hold spaces and parentheses
    return (fields[0], fields[19]) if len(fields) > 19 else None


def _started(pid: int) -> str | None:
    state = _stat(pid)
    return state[1] if state is not None else None


def clean(path: str) -> list[str]:
    """Remove what killed saves of the model ``path`` left beside it (staging folders of processes that are gone,
    data files its current model does not point to) and return their names; nothing while a save of it is under
    way. A save does the same before it writes, so this is for a folder that is not saved again."""
    path = os.fspath(path)
    directory, name = os.path.split(os.path.abspath(path))
    before = set(os.listdir(directory))
    _sweep(directory, name)
    return sorted(before - set(os.listdir(directory)))
