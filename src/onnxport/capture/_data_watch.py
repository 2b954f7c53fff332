"""Find the user's lines that use ``Tensor.data`` while torch.export traces the model, and the writes
into the model's state that reading ``.data`` as ``.detach()`` would let through.

torch.export's failure on ``.data`` ("fake tensor in the exported program constant's list") names no
line. Running the non-strict capture again under ``DataWatcher``, a ``TorchFunctionMode`` that sees
every ``.data`` get and set, gives the lines; nothing runs on real tensors, so neither the model nor the
inputs change. ``state_writes`` finds, in the captured graph, in-place ops that write into a parameter
or buffer through a view (``w = self.w.data; w.mul_(2)``), which the source rewrite cannot see.
"""

from __future__ import annotations

import linecache
import os
import sys
import types
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from onnxport.errors import SourceLocation, _is_user_file, location_from_stack_trace

__all__ = ["MARKER", "DataWatcher", "reads_data", "state_writes"]

# What torch.export says when a tensor it could not trace (what .data returns) ends up in the program.
MARKER = "fake tensor in the exported program constant"

# The descriptor behind ``Tensor.data``: a TorchFunctionMode sees its __get__/__set__ method-wrappers.
_DESCRIPTOR = torch._C.TensorBase.__dict__["data"]
_TORCH = os.path.dirname(torch.__file__)
# torch's own frames between the user's line and this mode (besides other modes' __torch_function__).
_PLUMBING = frozenset({
    __file__,
    torch.overrides.__file__,
    os.path.join(_TORCH, "_export", "non_strict_utils.py"),
    os.path.join(_TORCH, "utils", "_python_dispatch.py"),
})


def reads_data(exc: BaseException) -> bool:
    """Whether ``exc`` is torch.export failing on a tensor it could not trace, as ``.data`` gives."""
    return MARKER in str(exc)


class DataWatcher(TorchFunctionMode):
    """Records, in order, the user lines that get or set ``.data`` of a tensor (torch's own uses are not)."""

    def __init__(self) -> None:
        super().__init__()
        self.sites: list[SourceLocation] = []

    def __torch_function__(self, func: Any, types_: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if getattr(func, "__self__", None) is _DESCRIPTOR:
            site = _user_caller(sys._getframe(1))
            if site is not None and all((s.file, s.line) != (site.file, site.line) for s in self.sites):
                self.sites.append(site)
        return func(*args, **(kwargs or {}))


def _user_caller(frame: types.FrameType | None) -> SourceLocation | None:
    """The frame that used ``.data``, past torch's dispatch plumbing, if it is the user's."""
    while frame is not None and (frame.f_code.co_filename in _PLUMBING or frame.f_code.co_name == "__torch_function__"):
        frame = frame.f_back
    if frame is None or not _is_user_file(frame.f_code.co_filename):
        return None
    file, line = frame.f_code.co_filename, frame.f_lineno
    return SourceLocation(file, line, frame.f_code.co_name, linecache.getline(file, line).strip())


def state_writes(ep: torch.export.ExportedProgram) -> list[tuple[str, SourceLocation | None]]:
    """``(parameter or buffer, user line)`` for each in-place op of ``ep`` that writes into the model's state
    through a detached view of it (what ``t.data`` becomes)."""
    kinds = (torch.export.graph_signature.InputKind.PARAMETER, torch.export.graph_signature.InputKind.BUFFER)
    state = {spec.arg.name: spec.target for spec in ep.graph_signature.input_specs if spec.kind in kinds}
    found = []
    for node in ep.graph.nodes:
        target = node.target
        if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload) or not node.args:
            continue
        if not target._schema.is_mutable:
            continue
        base, detached = node.args[0], False
        while isinstance(base, torch.fx.Node) and base.op == "call_function" and _is_alias(base.target):
            detached |= base.target is torch.ops.aten.detach.default  # what ``.data`` is read as
            base = base.args[0]
        if detached and isinstance(base, torch.fx.Node) and base.op == "placeholder" and base.name in state:
            found.append((state[base.name], location_from_stack_trace(node.meta.get("stack_trace"))))
    return found


def _is_alias(target: Any) -> bool:
    """An op whose output aliases its first input (``detach``, ``select``, ``view``, ...)."""
    if not isinstance(target, torch._ops.OpOverload) or not target._schema.returns:
        return False
    alias = target._schema.returns[0].alias_info
    return alias is not None and not alias.is_write
