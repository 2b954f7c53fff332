"""Verification's onnxruntime session, in a child process that may crash without taking the user's along.

Verification checks the model as it ships: in a session at onnxruntime's default settings (graph
optimisation level ``all``, weights prepacked), the one ``prog(...)`` and every user's
``InferenceSession`` build. At that level onnxruntime's fusions and kernels can do what its plain
kernels do not, down to a segmentation fault (a bfloat16 ``RNN``; a float16 ``MultiheadAttention`` at
another batch size), so the session lives in a process of its own, forked from this one: a crash there
is a failed verification, and the user's process goes on. The fork shares the model's weights with
this process (nothing is serialised or copied to start it); each input set goes to it over a pipe.

Where ``fork`` is missing (Windows; macOS, whose system libraries are not safe to fork), or this process may
not start children (a daemonic ``multiprocessing.Pool`` worker), the session is built in this process
instead, at the same level, and the report says why.
"""

from __future__ import annotations

import gc
import multiprocessing
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx_ir as ir
import torch

from onnxport.verify.session import OrtRunner

__all__ = ["Crashed", "SessionProcess", "forking_available", "from_wire", "no_fork_reason", "start_forked", "to_wire"]

_BFLOAT16 = "bfloat16"


class Crashed(RuntimeError):
    """The child process died (``signal`` names what killed it) building the session or running a set."""

    def __init__(self, stage: str, exitcode: int | None):
        self.stage = stage
        self.signal = _signal_name(exitcode)
        super().__init__(f"onnxruntime crashed the process ({self.signal}) {stage}")


def start_forked(process: Any) -> None:
    """Start a forked child with every object of this process out of reach of the child's garbage collector
    (``gc.freeze``). Garbage this process has not collected yet, an onnxruntime session among it, would
    otherwise be destroyed in the child, where the session's thread pool does not exist: its destructor
    then waits forever for threads that only this process has (a hang in ``pthread_cond_destroy``)."""
    gc.freeze()
    try:
        process.start()
    finally:
        gc.unfreeze()


def no_fork_reason() -> str | None:
    """Why verification cannot start a child process here, or None where it can."""
    if not sys.platform.startswith("linux") or "fork" not in multiprocessing.get_all_start_methods():
        return f"forking is not safe or not available on {sys.platform}"
    if multiprocessing.current_process().daemon:
        return "this process is a daemonic worker (a multiprocessing.Pool's), which may not start child processes"
    return None


def forking_available() -> bool:
    return no_fork_reason() is None


class SessionProcess:
    """One ``OrtRunner`` (see ``session``) at ``optimization``, in a forked child process (or here, where
    forking is not available). ``run`` sends a set of inputs and returns its outputs (torch tensors), or
    raises what onnxruntime raised, or ``Crashed``. ``build_seconds`` is what the session took to build
    and ``run_seconds`` what the last set took (both measured where the session is); ``started`` counts
    the sessions started in this process (tests use it)."""

    started = 0

    def __init__(self, model: ir.Model, *, optimization: str = "all", weights_as_inputs: bool = False,
                 prepare: Callable[[ir.Model], Any] | None = None):
        """``prepare`` rewrites the model in place before the session is built: the child's copy of it (a copy
        here where the session runs in this process); the caller's model is left as it is."""
        self.optimization = optimization
        self._prepare = prepare
        self.build_seconds = 0.0
        self.run_seconds = 0.0
        self._options = {"optimization": optimization, "prepack": optimization == "all", "spinning": False,
                         "weights_as_inputs": weights_as_inputs}
        self._built = False
        self._build_failure: BaseException | None = None  # the answer to every set when the build failed
        self._local: OrtRunner | None = None
        self._model: ir.Model | None = None
        self._process = None
        SessionProcess.started += 1
        if not forking_available():
            self._model = model
            return
        context = multiprocessing.get_context("fork")
        self._conn, child_end = context.Pipe()
        self._process = context.Process(target=_serve, args=(child_end, model, self._options, prepare), daemon=True,
                                        name="onnxport-verification")
        start_forked(self._process)
        child_end.close()

    @property
    def isolated(self) -> bool:
        """Whether the session runs in a child process."""
        return self._process is not None

    def run(self, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        if self._process is None:
            return self._run_here(inputs)
        try:
            if not self._built:
                kind, value = self._conn.recv()
                self._built = True
                if kind == "failed":
                    self._build_failure = _RemoteError(value)
                else:
                    self.build_seconds = value
            if self._build_failure is not None:
                raise self._build_failure
            self._conn.send([to_wire(t) for t in inputs])
            kind, value, self.run_seconds = self._conn.recv()
        except (EOFError, OSError):
            raise self._crashed("running the model" if self._built else "building the session") from None
        if kind != "ok":
            raise _RemoteError(value)
        return [from_wire(v) for v in value]

    def close(self) -> None:
        """End the child (it holds onnxruntime's copy of the weights)."""
        process, self._process = self._process, None
        self._local = None
        if process is None:
            return
        try:
            self._conn.send(None)
        except (OSError, ValueError):
            pass
        self._conn.close()
        # it exits on its own (freeing onnxruntime's memory and its view of this process's takes a while
        # for a large model: not this process's time); multiprocessing reaps it at the next start or exit
        _ENDED.append(process)
        _reap()

    def __del__(self) -> None:
        if getattr(self, "_process", None) is not None:
            self.close()

    def _run_here(self, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        if self._local is None:
            start = time.perf_counter()
            model = self._model
            if self._prepare is not None:
                model = ir.from_proto(ir.to_proto(model))
                self._prepare(model)
            self._local = OrtRunner(model, **self._options)
            self.build_seconds = time.perf_counter() - start
        start = time.perf_counter()
        outputs = self._local.run(inputs)
        self.run_seconds = time.perf_counter() - start
        return outputs

    def _crashed(self, stage: str) -> Crashed:
        process = self._process
        if process is not None:
            process.join(timeout=5)
        return Crashed(stage, process.exitcode if process is not None else None)


_ENDED: list[Any] = []  # children told to end, not yet seen gone


def _reap() -> None:
    """Forget the ended children that are gone; kill any that outlived a minute since being told to end."""
    for process in list(_ENDED):
        if not process.is_alive():
            process.join()
            _ENDED.remove(process)
        elif getattr(process, "_told", None) is None:
            process._told = time.monotonic()
        elif time.monotonic() - process._told > 60:
            process.kill()


class _RemoteError(RuntimeError):
    """What onnxruntime raised in the child, as its text (its exception types do not cross the pipe)."""


def _serve(conn: Any, model: ir.Model, options: dict[str, Any], prepare: Callable[[ir.Model], Any] | None = None
           ) -> None:
    """The child: prepare its copy of the model, build the session, say so, then run each set received until
    ``None``."""
    # one torch thread: a forked child has none of this process's OpenMP workers, and a parallel torch op
    # there (a weight computed when read, see optimize/conv_bn_fold.py) would wait for them forever
    torch.set_num_threads(1)
    start = time.perf_counter()
    try:
        if prepare is not None:
            prepare(model)
        runner = OrtRunner(model, **options)
    except Exception as exc:  # noqa: BLE001 - sent to the parent as text
        conn.send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("built", time.perf_counter() - start))
    while True:
        try:
            payload = conn.recv()
        except EOFError:
            return
        if payload is None:
            return
        start = time.perf_counter()
        try:
            outputs = [to_wire(o) for o in runner.run([from_wire(v) for v in payload])]
            conn.send(("ok", outputs, time.perf_counter() - start))
        except Exception as exc:  # noqa: BLE001
            conn.send(("failed", f"{type(exc).__name__}: {exc}", time.perf_counter() - start))


def to_wire(t: Any) -> Any:
    """A tensor as numpy (bfloat16 as its bits), so that no torch machinery crosses the pipe."""
    if not isinstance(t, torch.Tensor):
        return t
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return (_BFLOAT16, t.view(torch.uint16).numpy())
    return t.numpy()


def from_wire(v: Any) -> Any:
    if isinstance(v, tuple) and len(v) == 2 and v[0] == _BFLOAT16:
        return torch.from_numpy(np.ascontiguousarray(v[1])).view(torch.bfloat16)
    if isinstance(v, np.ndarray):
        return torch.from_numpy(v)
    return v


def _signal_name(exitcode: int | None) -> str:
    if exitcode is None:
        return "no exit code"
    if exitcode < 0:
        try:
            return signal.Signals(-exitcode).name
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit code {exitcode}"

