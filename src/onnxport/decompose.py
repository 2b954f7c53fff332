"""Stage 2: decompose only the ops that have no translator, then list whatever is still missing.

A full ``run_decompositions()`` costs several times the capture itself; translating the ops
torch.export emits directly and decomposing the rest selectively keeps export cheap.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import warnings
from collections.abc import Mapping
from typing import Any

import torch

from onnxport.errors import CaptureError, SourceLocation, UnsupportedOpError, location_from_stack_trace
from onnxport.report import Report
from onnxport.translate import target_name, untranslated_ops
from onnxport.translate.registry import Translator

__all__ = ["decompose", "missing_ops"]

_MAX_ROUNDS = 4


@functools.lru_cache(maxsize=1)
def _core_aten_table() -> dict[Any, Any]:
    """torch's core ATen decompositions (the wider table rewrites into prims, which have no translators)."""
    return dict(torch.export.default_decompositions().items())


def _is_view(target: Any) -> bool:
    """An op whose output aliases its input (``select``, ``slice``, ``view``, ``transpose``, ...)."""
    if not isinstance(target, torch._ops.OpOverload):
        return False
    returns = target._schema.returns
    return bool(returns) and returns[0].alias_info is not None and not returns[0].alias_info.is_write


def needs_functionalization(gm: torch.fx.GraphModule) -> torch.fx.Node | None:
    """The first in-place op that writes through a view, into an input or state, or into a tensor that a
    view reads later. The translator handles the other in-place ops (``relu_`` on a fresh value) by
    rebinding the mutated value; these need torch's functionalization to become ``*_scatter`` ops."""
    for node in gm.graph.nodes:
        target = node.target
        if not (isinstance(target, torch._ops.OpOverload) and target._schema.is_mutable and node.args):
            continue
        base = node.args[0]
        if not isinstance(base, torch.fx.Node) or base.op != "call_function" or _is_view(base.target):
            return node
        if any(_is_view(user.target) for user in base.users if user is not node):
            return node
    for node in gm.graph.nodes:
        sub = getattr(gm, node.target, None) if node.op == "get_attr" else None
        if isinstance(sub, torch.fx.GraphModule) and (found := needs_functionalization(sub)) is not None:
            return found
    return None


def decompose(
    ep: torch.export.ExportedProgram, *, custom: Mapping[Any, Translator], opset: int, report: Report
) -> torch.export.ExportedProgram:
    """Decompose untranslated ops round by round; raise ``UnsupportedOpError`` listing what remains."""
    mutation = needs_functionalization(ep.graph_module)
    if mutation is not None:
        try:
            with warnings.catch_warnings(), _keep_small_dims_dynamic():
                warnings.simplefilter("ignore")
                ep = ep.run_decompositions({})  # functionalizes; decomposes nothing
        except Exception as exc:  # noqa: BLE001 - torch refuses some mutations (of constants, through .data)
            raise CaptureError(
                f"torch cannot turn the in-place write {mutation.name} = {target_name(mutation.target)} into "
                f"functional code: {str(exc).splitlines()[0][:300]}",
                location=location_from_stack_trace(mutation.meta.get("stack_trace")),
                fix="write to a copy (y = x.clone(); y[...] = v) instead of writing through .data or into a "
                "constant, or register the tensor as a buffer",
            ) from None
        report.warn("in-place writes through views or into inputs: the graph was functionalized")
    for _ in range(_MAX_ROUNDS):
        missing = untranslated_ops(ep.graph_module, custom)
        table = {t: fn for t in missing if (fn := _core_aten_table().get(t)) is not None}
        if not table:
            break
        for target, nodes in missing.items():
            if target in table:
                report.decomposed[target_name(target)] = report.decomposed.get(target_name(target), 0) + len(nodes)
        try:
            with warnings.catch_warnings(), _keep_small_dims_dynamic():
                warnings.simplefilter("ignore")
                ep = ep.run_decompositions(table)
        except Exception as exc:  # torch's decompositions fail in many ways; the ops stay untranslated
            names = ", ".join(sorted(target_name(t) for t in table))
            report.warn(f"torch could not decompose {names}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
            for target in table:
                report.decomposed.pop(target_name(target), None)
            break
    missing = untranslated_ops(ep.graph_module, custom)
    if missing:
        raise unsupported_error(missing, opset)
    return ep


def missing_ops(missing: Mapping[Any, list[torch.fx.Node]]) -> dict[str, list[SourceLocation | None]]:
    """``{op name: [user source line of each node]}``, most frequent first."""
    ordered = sorted(missing.items(), key=lambda kv: (-len(kv[1]), target_name(kv[0])))
    return {
        target_name(t): [location_from_stack_trace(n.meta.get("stack_trace")) for n in nodes] for t, nodes in ordered
    }


def unsupported_error(missing: Mapping[Any, list[torch.fx.Node]], opset: int) -> UnsupportedOpError:
    ops = missing_ops(missing)
    lines = []
    for name, locations in ops.items():
        lines.append(f"  {name} x{len(locations)}")
        seen = collections.OrderedDict((str(loc), None) for loc in locations if loc is not None)
        lines.extend(f"      at {loc}".replace("\n", "\n      ") for loc in list(seen)[:3])
    first = next((loc for locs in ops.values() for loc in locs if loc is not None), None)
    noun = "operator has" if len(ops) == 1 else "operators have"
    return UnsupportedOpError(
        f"{len(ops)} {noun} no ONNX translation (opset {opset}):\n" + "\n".join(lines),
        ops=ops,
        location=first,
        fix="register one with @onnxport.register_translation('namespace::op') or pass "
        "custom_translations={op: fn} (README 'Custom operators')",
    )


def _keep_small_dims_dynamic() -> contextlib.AbstractContextManager:
    """Re-tracing must not specialise what capture kept dynamic: a dim captured size-obliviously has an
    example size of 0 or 1 (for dims whose example sizes are >= 2 the setting changes nothing)."""
    return torch.fx.experimental._config.patch(backed_size_oblivious=True)
