"""Eager runs for verification, started before capture in a child process, so that they run beside it.

Verification needs eager PyTorch's outputs on the example, and at size 1 of each dynamic dim; the
example and the user's ``dynamic_shapes`` are known before anything else is. torch.export's capture is
Python work on one core, so on a machine of few cores the model's own forward can run on the others
meanwhile: ``EagerAhead`` forks a child that runs the model (on copies, under ``torch.no_grad()``, on one
thread) on the example, then on the example with each named ``Dim`` of
the spec at size 1 (as ``sizes`` will make it: the first entry of each of its dims), and sends back
what each returned. Verification takes those outputs for the example (the very objects) and for a set
it makes up that equals one of the others, instead of running the model again. ViT-B/16 at batch 2
hides its 0.8 s forward under capture that way; R3D-18 both of its forwards (0.2 s each).

The child is a speed-up and nothing more: where its answer cannot stand for a run here, this process
runs the model itself. That is when the example changed in place since (its version counters moved),
when a made-up set matches none of the guesses, when the child's outputs could not be sent (pickling
failed), when the model raised (the error is raised here, from here, with its traceback) and when the
child died or outlived its time. It is started only where fork is safe and cheap: on Linux, for a
model whose parameters and example are on the CPU, with CUDA not initialised; and only where torch runs
on at most two threads here, where a forward on one thread beside the capture beats one on all of them
after it.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import pickle
import time
from typing import Any

import torch
from torch.export import Dim
from torch.utils import _pytree as pytree

from onnxport.capture.dynamic import input_dim_specs
from onnxport.capture.integrations import registered_types
from onnxport.verify.child import forking_available, from_wire, start_forked, to_wire
from onnxport.verify.sizes import resize_keeping_ends

__all__ = ["EagerAhead", "eager_outputs"]

InputSet = tuple[tuple, dict[str, Any]]

_PATIENCE = 3.0  # once this process waits: the child may take this many times what it took so far, ...
_LEAST_WAIT_S = 30.0  # ... and at least this long, before this process runs the model itself
# The child runs on one thread (see ``_run``): that pays off beside a capture on one core only where this
# process has few threads to run the model on itself.
_MOST_THREADS = 2
_NICENESS = 10


def eager_outputs(model: torch.nn.Module, args: tuple, kwargs: dict[str, Any]) -> Any:
    """Run the model eagerly on copies of the inputs (a model may modify its inputs in place), its modules' plain
    settings put back after the run: a model may change them for the input it sees (Swin shrinks a layer's
    ``window_size`` for an image smaller than its window, for good), and one made-up size must neither change
    what the next computes nor leave the user's model changed."""
    args_c, kwargs_c = pytree.tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, (args, kwargs))
    saved = _settings(model)
    try:
        with torch.no_grad():
            return model(*args_c, **kwargs_c)
    finally:
        for module, values in saved:
            changed = {name: value for name, value in values.items() if vars(module).get(name, _GONE) is not value}
            vars(module).update(changed)


_GONE = object()
_PLAIN = (int, float, bool, str, type(None), tuple, torch.Size)


def _settings(model: Any) -> list[tuple[torch.nn.Module, dict[str, Any]]]:
    """Each module's attributes of plain values (numbers, strings, tuples), by module."""
    if not isinstance(model, torch.nn.Module):
        return []
    return [(module, {name: value for name, value in vars(module).items()
                      if not name.startswith("_") and isinstance(value, _PLAIN)}) for module in model.modules()]



class EagerAhead:
    """``start`` the eager runs in a child (or return None where it cannot); ``take`` the outputs of
    one set and the seconds the child ran it, or None; ``close`` ends the child (killing it if it is
    still running: a forward whose outputs nobody will read)."""

    def __init__(self, process: Any, conn: Any, sets: list[InputSet], versions: list[int]):
        self._process, self._conn = process, conn
        self._sets = sets  # the example, then the size-1 guesses, in the order the child answers them
        self._versions = versions  # the example's version counters when the child started
        self._answers: list[Any] = []
        self._started = time.perf_counter()

    @classmethod
    def start(cls, model: Any, args: tuple, kwargs: dict[str, Any], dynamic_shapes: Any = None) -> EagerAhead | None:
        if not _safe_to_fork(model, args, kwargs):
            return None
        sets = [(args, kwargs), *_size_one_guesses(model, args, kwargs, dynamic_shapes)]
        context = multiprocessing.get_context("fork")
        conn, child_end = context.Pipe(duplex=False)
        process = context.Process(target=_run, args=(child_end, model, sets), daemon=True,
                                  name="onnxport-eager")
        start_forked(process)
        child_end.close()
        return cls(process, conn, sets, [_version(t) for t in _leaves((args, kwargs))])

    def take(self, args: tuple, kwargs: dict[str, Any]) -> tuple[Any, float] | None:
        """The outputs eager PyTorch gave in the child on the example (the very objects it started on)
        or on a guess equal to these inputs, and its seconds; None where this process must run the model."""
        if self._process is None and not self._answers:
            return None
        example_args, example_kwargs = self._sets[0]
        if args is example_args and (kwargs is example_kwargs or not kwargs and not example_kwargs):
            if [_version(t) for t in _leaves((args, kwargs))] != self._versions:
                return None  # the example changed in place since the child ran on it
            index = 0
        else:
            index = next((i for i, guess in enumerate(self._sets[1:], 1) if _equal((args, kwargs), guess)), None)
            if index is None:
                return None
        while len(self._answers) <= index:
            if self._process is None:
                return None
            patience = max(_LEAST_WAIT_S, _PATIENCE * (time.perf_counter() - self._started))
            try:
                message = self._conn.recv() if self._conn.poll(patience) else None
            except (EOFError, OSError):
                message = None  # it died
            if message is None:
                self.close()
                return None
            self._answers.append(message)
        if len(self._answers) == len(self._sets):
            self.close()  # every answer is in
        message = self._answers[index]
        if message[0] != "ok":
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
    if not forking_available() or not callable(model) or torch.get_num_threads() > _MOST_THREADS:
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


def _size_one_guesses(model: Any, args: tuple, kwargs: dict[str, Any], dynamic_shapes: Any) -> list[InputSet]:
    """Per ``Dim`` the spec names whose range holds 1 and whose example size is >= 2, the example with
    every dim of that name cut to its first entry (the set ``sizes`` makes for size 1, when torch.export
    keeps the name's dims together and apart from the rest); nothing where the spec cannot be read."""
    if dynamic_shapes is None:
        return []
    try:
        specs = input_dim_specs(model, args, kwargs, dynamic_shapes)
        leaves, treespec = pytree.tree_flatten((args, kwargs))
        tensors = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
        if len(tensors) != len(specs):
            return []
        by_name: dict[str, list[tuple[int, int]]] = {}
        for position, spec in zip(tensors, specs):
            for axis, dim in spec.items():
                name = getattr(dim, "__name__", None) if type(dim) is Dim else None  # not a derived dim
                if name is not None and getattr(dim, "min", 0) <= 1 and leaves[position].shape[axis] >= 2:
                    by_name.setdefault(name, []).append((position, axis))
        guesses = []
        for where in by_name.values():
            resized = list(leaves)
            for position, axis in where:
                resized[position] = resize_keeping_ends(resized[position], axis, 1)
            for position, _ in where:
                resized[position] = resized[position].clone()
            guesses.append(pytree.tree_unflatten(resized, treespec))
        return guesses
    except Exception:  # noqa: BLE001 - a guess is optional: verification makes its own sets regardless
        return []


def _equal(a: Any, b: Any) -> bool:
    """Whether two input sets hold the same values (tensors of one dtype and shape, equal; the rest ==)."""
    left, left_spec = pytree.tree_flatten(a)
    right, right_spec = pytree.tree_flatten(b)
    if left_spec != right_spec or len(left) != len(right):
        return False
    for x, y in zip(left, right):
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.dtype == y.dtype
                    and x.shape == y.shape and torch.equal(x, y)):
                return False
        elif not (type(x) is type(y) and x == y):
            return False
    return True


def _run(conn: Any, model: Any, sets: list[InputSet]) -> None:
    """The child: eager runs of the model on copies of each set in turn; per set its outputs, pickled,
    or why not. On one thread: a forked child has none of this process's OpenMP workers, and a parallel
    op would wait for them forever."""

    torch.set_num_threads(1)
    try:
        os.nice(_NICENESS)  # behind the capture and the onnxruntime session, which wait on nothing of it
    except OSError:
        pass
    for args, kwargs in sets:
        start = time.perf_counter()
        try:
            outputs = eager_outputs(model, args, kwargs)
            answer = ("ok", _dumps(outputs), time.perf_counter() - start)
        except BaseException as exc:  # noqa: BLE001 - the parent runs the model itself and sees the error
            answer = ("failed", f"{type(exc).__name__}: {exc}")
        try:
            conn.send(answer)
        except OSError:
            return


class _Pickler(pickle.Pickler):
    """Tensors as numpy arrays (bfloat16 as its bits, see ``child``): no torch storage machinery (shared
    memory files) crosses the pipe."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor) and type(obj) in (torch.Tensor, torch.nn.Parameter):
            return from_wire, (to_wire(obj),)
        return NotImplemented


def _dumps(obj: Any) -> bytes:
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buffer.getvalue()


def _loads(data: bytes) -> Any:
    return pickle.loads(data)
