"""Find the user function behind a failing line and patch its rewritten code in, for one export only."""

from __future__ import annotations

import contextlib
import copy
import types
from collections.abc import Iterator
from typing import Any

import torch

from onnxport.capture import _runtime
from onnxport.capture.rewrite import FunctionRewrite, Rewrite, RewriteRefused
from onnxport.errors import SourceLocation

__all__ = ["ControlFlowRewriter", "model_files"]


def _code_lines(code: types.CodeType) -> tuple[int, int]:
    lines = [line for _, _, line in code.co_lines() if line is not None]
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            lines.extend(_code_lines(const))
    return (min(lines), max(lines)) if lines else (code.co_firstlineno, code.co_firstlineno)


def _functions_of(obj: Any) -> Iterator[types.FunctionType]:
    if isinstance(obj, types.MethodType):
        obj = obj.__func__
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    if isinstance(obj, types.FunctionType):
        yield obj


_RESUME = "torch_dynamo_resume_in_"


def candidate_functions(model: torch.nn.Module) -> list[types.FunctionType]:
    """User functions a model may run: methods of its modules' own classes, functions stored on
    instances (a patched ``forward``), and module-level functions of the files those come from."""
    found: dict[int, types.FunctionType] = {}

    def add(fn: types.FunctionType) -> None:
        # TorchDynamo leaves the resume functions of its graph breaks among the user's globals.
        resume = fn.__code__.co_name.startswith(_RESUME)
        if id(fn) not in found and not (fn.__module__ or "").startswith("torch.") and not resume:
            found[id(fn)] = fn

    for module in model.modules():
        for cls in type(module).__mro__:
            if (cls.__module__ or "").startswith("torch.") or cls is object:
                continue
            for value in vars(cls).values():
                for fn in _functions_of(value):
                    add(fn)
        for value in vars(module).values():
            for fn in _functions_of(value):
                add(fn)
    for fn in list(found.values()):
        for value in list(fn.__globals__.values()):
            for helper in _functions_of(value):
                if helper.__code__.co_filename == fn.__code__.co_filename:
                    add(helper)
        for cell in fn.__closure__ or ():
            with contextlib.suppress(ValueError):
                for inner in _functions_of(cell.cell_contents):
                    add(inner)
    return list(found.values())


def model_files(model: torch.nn.Module) -> set[str]:
    """The files of the model's own code (its modules' classes, their helpers), in a library or not."""
    return {fn.__code__.co_filename for fn in candidate_functions(model)}


class ControlFlowRewriter:
    """Rewrites a model's code one failing line at a time: data-dependent ``if`` and ``while``
    statements into ``torch.cond`` and ``while_loop``, ``t.data`` into ``t.detach()``, and ``len(t)`` into
    ``t.shape[0]``.

    The rewritten code objects are swapped into the functions only inside ``applied()``; outside it
    the user's functions are untouched.
    """

    def __init__(self, model: torch.nn.Module, *, limit: int = 16):
        self.model = model
        self.limit = limit
        self._rewrites: dict[int, FunctionRewrite] = {}
        self._code: dict[int, types.CodeType] = {}
        self._log: list[Rewrite] = []

    @property
    def rewrites(self) -> list[Rewrite]:
        """The control-flow rewrites (``if`` and ``while``) of tensor values: the sites whose branches verification
        explores (those of ``if``s on sizes, its made-up sizes reach; see ``size_branches``)."""
        return [r for r in self._log if r.kind in ("if", "while")]

    @property
    def all_rewrites(self) -> list[Rewrite]:
        """Every rewrite, ``.data`` ones included, in the order they were made."""
        return list(self._log)

    def rewrite(self, location: SourceLocation) -> Rewrite:
        """Rewrite the ``if`` or ``while`` at ``location``; raises ``RewriteRefused`` when it cannot be done."""
        return self._rewrite(location, lambda state: state.rewrite_at(location.line))

    def rewrite_data(self, location: SourceLocation) -> Rewrite:
        """Read each ``t.data`` at ``location`` as ``t.detach()``; raises ``RewriteRefused`` when it cannot be done."""
        return self._rewrite(location, lambda state: state.rewrite_data(location.line), kind="data")

    def rewrite_len(self, location: SourceLocation) -> Rewrite:
        """Read each ``len(t)`` at ``location`` as ``t.shape[0]``; raises ``RewriteRefused`` when it cannot be done."""
        return self._rewrite(location, lambda state: state.rewrite_len(location.line), kind="len")

    def _rewrite(self, location: SourceLocation, how: Any, kind: str = "if") -> Rewrite:
        if len(self._log) >= self.limit:
            raise RewriteRefused(f"more than {self.limit} rewrites were needed", location.line, kind=kind)
        fn = self.function_at(location)
        if fn is None:
            raise RewriteRefused(
                f"no function of the model's code contains {location.file}:{location.line} "
                "(it may be a lambda, a builtin, or code reached through an object onnxport does not see)",
                location.line,
                kind=kind,
            )
        try:
            state = self._rewrites.get(id(fn)) or FunctionRewrite(fn)
            rewrite = how(state)
        except RewriteRefused as refused:
            refused.kind = kind if kind in ("data", "len") else refused.kind
            raise
        self._code[id(fn)] = state.compile()
        self._rewrites[id(fn)] = state
        self._log.append(rewrite)
        return rewrite

    def snapshot(self) -> tuple[dict[int, types.CodeType], dict[int, FunctionRewrite], list[Rewrite]]:
        """The rewrites made so far, for ``restore`` to return to."""
        return dict(self._code), {key: copy.deepcopy(state) for key, state in self._rewrites.items()}, list(self._log)

    def restore(self, snapshot: tuple[dict[int, types.CodeType], dict[int, FunctionRewrite], list[Rewrite]]) -> None:
        """Undo the rewrites made since ``snapshot``."""
        code, rewrites, log = snapshot
        self._code, self._rewrites, self._log = dict(code), dict(rewrites), list(log)

    def source_files(self) -> set[str]:
        """The files of the model's own code (its modules' classes, their helpers), in a library or not."""
        return model_files(self.model)

    def function_at(self, location: SourceLocation) -> types.FunctionType | None:
        """The innermost function of the model's code whose lines hold ``location`` (None if none does)."""
        patched = [fr.fn for fr in self._rewrites.values()]
        best: tuple[int, types.FunctionType] | None = None
        for fn in patched + candidate_functions(self.model):
            code = self._rewrites[id(fn)].code if id(fn) in self._rewrites else fn.__code__
            if code.co_filename != location.file:
                continue
            first, last = _code_lines(code)
            if first <= location.line <= last and (best is None or last - first < best[0]):
                best = (last - first, fn)
        return best[1] if best else None

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        """Swap the rewritten code in (and the runtime into their globals); restore on every path."""
        states = list(self._rewrites.values())
        saved_globals: list[tuple[dict[str, Any], bool, Any]] = []
        try:
            for state in states:
                g = state.fn.__globals__
                saved_globals.append((g, _runtime.NAME in g, g.get(_runtime.NAME)))
                g[_runtime.NAME] = _runtime
                state.fn.__code__ = self._code[id(state.fn)]
            yield
        finally:
            for state in states:
                state.fn.__code__ = state.code
            for g, had, value in reversed(saved_globals):
                if had:
                    g[_runtime.NAME] = value
                else:
                    g.pop(_runtime.NAME, None)
