"""Find the user's lines that use ``Tensor.data`` while torch.export traces the model, and the writes
into the model's state that reading ``.data`` as ``.detach()`` would let through.

torch.export's failure on ``.data`` ("fake tensor in the exported program constant's list") names no
line. Running the non-strict capture again under ``DataWatcher``, a ``TorchFunctionMode`` that sees
every ``.data`` get and set, gives the lines; nothing runs on real tensors, so neither the model nor the
inputs change. ``state_writes`` finds, in the captured graph, in-place ops that write into a parameter
or buffer through a view (``w = self.w.data; w.mul_(2)``), which the source rewrite cannot see, or any
write into one (``self.steps.add_(1)``), for the line to name when such a write is refused.
"""

from __future__ import annotations

import linecache
import os
import sys
import types
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from onnxport.errors import SourceLocation, is_user_file, location_from_stack_trace

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
    if frame is None or not is_user_file(frame.f_code.co_filename):
        return None
    file, line = frame.f_code.co_filename, frame.f_lineno
    return SourceLocation(file, line, frame.f_code.co_name, linecache.getline(file, line).strip())


def state_writes(
    ep: torch.export.ExportedProgram, *, through_data: bool = True
) -> list[tuple[str, SourceLocation | None]]:
    """``(parameter or buffer, user line)`` for each in-place op of ``ep`` that writes into the model's state:
    only through a detached view of it (what ``t.data`` becomes) when ``through_data``, else any such write,
    directly or through a view, in the graph or in the subgraphs of its higher-order ops (``torch.no_grad()``
    blocks, ``torch.cond`` branches)."""
    kinds = (torch.export.graph_signature.InputKind.PARAMETER, torch.export.graph_signature.InputKind.BUFFER)
    state = {spec.arg.name: spec.target for spec in ep.graph_signature.input_specs if spec.kind in kinds}
    roots = {n: (state[n.name], False) for n in ep.graph.nodes if n.op == "placeholder" and n.name in state}
    found: list[tuple[str, SourceLocation | None, bool]] = []
    _find_writes(ep.graph_module, roots, found)
    return [(target, where) for target, where, detached in found if detached or not through_data]


def _find_writes(
    gm: torch.fx.GraphModule, roots: dict[torch.fx.Node, tuple[str, bool]],
    found: list[tuple[str, SourceLocation | None, bool]],
) -> None:
    """Append ``(state name, user line, whether through a detached view)`` for each write of ``gm`` into one
    of ``roots`` (the nodes holding the model's state, with whether they are detached already)."""
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        target = node.target
        if isinstance(target, torch._ops.OpOverload):
            for i, arg in enumerate(target._schema.arguments):
                if arg.alias_info is None or not arg.alias_info.is_write:
                    continue
                written = node.args[i] if i < len(node.args) else node.kwargs.get(arg.name)
                hit = _state_of(written, roots)
                if hit is not None:
                    found.append((hit[0], location_from_stack_trace(node.meta.get("stack_trace")), hit[1]))
            continue
        # A higher-order op: its subgraphs take the operands that follow them, in order.
        subgraphs = [i for i, a in enumerate(node.args) if isinstance(a, torch.fx.Node) and a.op == "get_attr"
                     and isinstance(getattr(gm, a.target, None), torch.fx.GraphModule)]
        if not subgraphs:
            continue
        operands = torch.utils._pytree.tree_leaves(list(node.args[subgraphs[-1] + 1:]))
        for i in subgraphs:
            sub = getattr(gm, node.args[i].target)
            placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
            inner = {p: hit for p, o in zip(placeholders, operands) if (hit := _state_of(o, roots)) is not None}
            if inner:
                _find_writes(sub, inner, found)


def _state_of(value: Any, roots: dict[torch.fx.Node, tuple[str, bool]]) -> tuple[str, bool] | None:
    """The state ``value`` is a view of (through ``detach``, ``select``, ...), and whether it is detached."""
    detached = False
    while isinstance(value, torch.fx.Node) and value.op == "call_function" and _is_alias(value.target):
        detached |= value.target is torch.ops.aten.detach.default  # what ``.data`` is read as
        value = value.args[0]
    if not isinstance(value, torch.fx.Node) or value not in roots:
        return None
    name, root_detached = roots[value]
    return name, detached or root_detached


def _is_alias(target: Any) -> bool:
    """An op whose output aliases its first input (``detach``, ``select``, ``view``, ...)."""
    if not isinstance(target, torch._ops.OpOverload) or not target._schema.returns:
        return False
    alias = target._schema.returns[0].alias_info
    return alias is not None and not alias.is_write
