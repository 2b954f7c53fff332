"""A child process that runs ONNX files in onnxruntime at its default settings, for the fuzz check.

onnxruntime can crash the process on a file (a segmentation fault, an abort), so the fuzz check runs
its sessions here, in a process of their own, started once (``python -m tests.fuzz.ortworker``) and fed
one job after another. The worker imports only numpy and onnxruntime (about 0.3 s to start, against
some 3 s for a process that imports torch). A job is a model path and input sets; before each step
(building the session, running a set) the worker reports it, so that when it dies the parent knows the
step that killed it, and starts a new worker for the next job.

Frames both ways are a pickled object behind its length (8 bytes, little-endian). bfloat16 arrays, which
numpy lacks, travel as uint16 with a flag. The frames go over a copy of the original stdout; fd 1 itself
points to stderr, so that nothing onnxruntime or a library prints can corrupt them.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import struct
import sys
import traceback

BFLOAT16 = 16  # onnx.TensorProto.BFLOAT16

__all__ = ["read_frame", "write_frame"]


def write_frame(fd: int, obj: object) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(struct.pack("<Q", len(data)) + data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _read_exactly(fd: int, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int) -> object:
    """The next frame's object; ``EOFError`` when the other side closed or died."""
    head = _read_exactly(fd, 8)
    if head is None:
        raise EOFError
    data = _read_exactly(fd, struct.unpack("<Q", head)[0])
    if data is None:
        raise EOFError
    return pickle.loads(data)


def _feed(ort: object, array: object, bf16: bool) -> object:
    if bf16:
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(array, BFLOAT16)
    return ort.OrtValue.ortvalue_from_numpy(array)


def _fetch(np: object, value: object) -> tuple[object, bool]:
    if value.data_type() == "tensor(bfloat16)":
        raw = ctypes.string_at(value.data_ptr(), value.tensor_size_in_bytes())
        return np.frombuffer(raw, dtype=np.uint16).reshape(value.shape()).copy(), True
    return value.numpy(), False


def _first_line(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".strip()
    return text[:2000]


def _job(ort: object, np: object, out: int, job: dict) -> None:
    if job.get("debug") == "abort":  # for the harness's own test
        write_frame(out, ("step", "build"))
        os.abort()
    write_frame(out, ("step", "build"))
    try:
        session = ort.InferenceSession(job["path"], providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - reported to the parent
        write_frame(out, ("build_error", _first_line(e)))
        return
    names = [i.name for i in session.get_inputs()]
    for k, feeds in enumerate(job["sets"]):
        write_frame(out, ("step", k))
        try:
            missing = [n for n in names if n not in feeds]
            if missing:
                raise KeyError(f"no input set for the model's inputs {missing}")
            values = {n: _feed(ort, *feeds[n]) for n in names}
            outputs = session.run_with_ort_values(None, values)
            write_frame(out, ("out", k, [_fetch(np, v) for v in outputs]))
        except Exception as e:  # noqa: BLE001 - reported to the parent
            write_frame(out, ("run_error", k, _first_line(e)))


def main() -> None:
    out = os.dup(1)
    os.dup2(2, 1)  # stray prints go to stderr
    sys.stdout = sys.stderr
    import numpy as np
    import onnxruntime as ort

    ort.set_default_logger_severity(4)  # errors come back in frames; a crash's stderr stays readable
    write_frame(out, ("ready", ort.__version__))
    while True:
        try:
            job = read_frame(0)
        except EOFError:
            return
        if job is None:
            return
        try:
            _job(ort, np, out, job)
        except Exception:  # noqa: BLE001 - a bug here: say so and go on
            write_frame(out, ("build_error", "worker error: " + traceback.format_exc()[-2000:]))
        write_frame(out, ("done",))


if __name__ == "__main__":
    main()
