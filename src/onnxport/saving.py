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

__all__ = ["save_atomically"]

_OWNER = ".owner"  # in a staging folder: the pid of the process writing it


def save_atomically(path: str, write_plain: Callable[[str], None], model: ir.Model | None) -> None:
    """Write ``path``: ``write_plain(staged_path)`` for a self-contained file, or ``model`` with its
    initializers in a content-named data file beside it when ``model`` is given. Raises OSError."""
    directory, name = os.path.split(os.path.abspath(path))
    _sweep(directory, name)
    staging = tempfile.mkdtemp(prefix=f".{name}.", dir=directory)
    try:
        with open(os.path.join(staging, _OWNER), "w", encoding="ascii") as f:
            f.write(str(os.getpid()))
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
    try:
        with open(os.path.join(folder, _OWNER), encoding="ascii") as f:
            pid = int(f.read().strip())
    except (OSError, ValueError):
        return False  # a folder from before owners were written, or half-made: nobody to wait for
    if pid == os.getpid():
        return True  # another save in this process (a thread) is under way
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    return True
