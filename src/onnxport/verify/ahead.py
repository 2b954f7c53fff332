"""The example's eager run, started before capture in a child process, so that it runs beside it.

Verification needs eager PyTorch's outputs on the example; the example is known before anything else
is. torch.export's capture is Python work on one core, so on a machine of few cores the model's own
forward can run on the others meanwhile: ``EagerAhead`` forks a child that runs the model on the example
(on copies, under ``torch.no_grad()``, with one thread fewer than this process) and sends back what it
returned; verification takes those outputs instead of running the model again. On R3D-18 at batch 2 that
hides its 0.2 s forward under the 0.35 s capture.

The child is a speed-up and nothing more: where its answer cannot stand for a run here, this process
runs the model itself. That is when the example changed in place since (its version counters moved),
when the child's outputs could not be sent (pickling failed), when the model raised (the error is
raised here, from here, with its traceback) and when the child died or outlived its time. It is
started only where fork is safe and cheap: on Linux, for a model whose parameters and example are on
the CPU, with CUDA not initialised.
"""

from __future__ import annotations

import io
import multiprocessing
import pickle
import time
from typing import Any

import torch
from torch.utils import _pytree as pytree

from onnxport.capture.integrations import registered_types
from onnxport.verify.child import _from_wire, _to_wire, forking_available

__all__ = ["EagerAhead"]

_PATIENCE = 3.0  # once this process waits: the child may take this many times what it took so far, ...
_LEAST_WAIT_S = 30.0  # ... and at least this long, before this process runs the model itself


class EagerAhead:
    """``start`` the example's eager run in a child (or return None where it cannot); ``take`` its
    outputs and the seconds the child ran them, or None; ``close`` ends the child (killing it if it is
    still running: a forward whose outputs nobody will read)."""

    def __init__(self, process: Any, conn: Any, inputs: tuple, versions: list[int]):
        self._process, self._conn = process, conn
        self._inputs, self._versions = inputs, versions  # the example, and its version counters when sent
        self._started = time.perf_counter()

    @classmethod
    def start(cls, model: Any, args: tuple, kwargs: dict[str, Any]) -> EagerAhead | None:
        if not _safe_to_fork(model, args, kwargs):
            return None
        leaves = _leaves((args, kwargs))
        context = multiprocessing.get_context("fork")
        conn, child_end = context.Pipe(duplex=False)
        threads = max(1, torch.get_num_threads() - 1)
        process = context.Process(target=_run, args=(child_end, model, args, kwargs, threads), daemon=True,
                                  name="onnxport-eager")
        process.start()
        child_end.close()
        return cls(process, conn, (args, kwargs), [_version(t) for t in leaves])

    def take(self, args: tuple, kwargs: dict[str, Any]) -> tuple[Any, float] | None:
        """The outputs eager PyTorch gave on these inputs (the very objects it started on) in the child,
        and its seconds; None where this process must run the model itself. Once only: it ends the child."""
        example_args, example_kwargs = self._inputs
        same = args is example_args and (kwargs is example_kwargs or not kwargs and not example_kwargs)
        if self._process is None or not same:
            return None
        if [_version(t) for t in _leaves((args, kwargs))] != self._versions:
            self.close()  # the example changed in place since the child ran on it
            return None
        patience = max(_LEAST_WAIT_S, _PATIENCE * (time.perf_counter() - self._started))
        try:
            message = self._conn.recv() if self._conn.poll(patience) else None
        except (EOFError, OSError):
            message = None  # it died
        self.close()
        if message is None or message[0] != "ok":
            return None
        try:
            return _loads(message[1]), message[2]
        except Exception:  # noqa: BLE001 - an output type that does not rebuild here: run it here
            return None

    def close(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        self._conn.close()
        if process.is_alive():
            process.kill()
        process.join(timeout=5)

    def __del__(self) -> None:
        if getattr(self, "_process", None) is not None:
            self.close()


def _safe_to_fork(model: Any, args: tuple, kwargs: dict[str, Any]) -> bool:
    if not forking_available() or not callable(model):
        return False
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return False  # a forked child cannot use CUDA once it is initialised
    tensors = list(_leaves((args, kwargs)))
    if isinstance(model, torch.nn.Module):
        tensors += [*model.parameters(), *model.buffers()]
    return all(t.device.type == "cpu" for t in tensors)


def _leaves(tree: Any) -> list[torch.Tensor]:
    with registered_types():
        return [leaf for leaf in pytree.tree_leaves(tree) if isinstance(leaf, torch.Tensor)]


def _version(tensor: torch.Tensor) -> int:
    try:
        return tensor._version
    except Exception:  # noqa: BLE001 - tensors without a version counter (inference tensors)
        return -1


def _run(conn: Any, model: Any, args: tuple, kwargs: dict[str, Any], threads: int) -> None:
    """The child: one eager run of the model on copies of the example; its outputs, pickled, or why not."""
    from onnxport.verify.run import eager_outputs

    torch.set_num_threads(threads)
    start = time.perf_counter()
    try:
        outputs = eager_outputs(model, args, kwargs)
        answer = ("ok", _dumps(outputs), time.perf_counter() - start)
    except BaseException as exc:  # noqa: BLE001 - the parent runs the model itself and sees the error
        answer = ("failed", f"{type(exc).__name__}: {exc}")
    try:
        conn.send(answer)
    except OSError:
        pass


class _Pickler(pickle.Pickler):
    """Tensors as numpy arrays (bfloat16 as its bits, see ``child``): no torch storage machinery (shared
    memory files) crosses the pipe."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor) and type(obj) in (torch.Tensor, torch.nn.Parameter):
            return _from_wire, (_to_wire(obj),)
        return NotImplemented


def _dumps(obj: Any) -> bytes:
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buffer.getvalue()


def _loads(data: bytes) -> Any:
    return pickle.loads(data)
