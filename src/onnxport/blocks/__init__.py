"""Repeated blocks captured once: the layers of a transformer, the blocks of a ResNet stage.

``torch.export`` traces every layer of a model, though the 32 layers of a decoder run the same code, so
export time grows with depth. onnxport finds submodules that are provably identical, captures one of each
kind on its own (its parameters and buffers as inputs, every dim of its tensor inputs free to vary), and
lets the whole-model capture see each layer as one opaque call ``onnxport_blocks::<kind>`` whose output
shapes follow from the kind's own capture. The kind is translated once, to an ONNX function; each call
becomes a copy of it reading that layer's weights, inlined into the main graph after translation, so the
file holds plain ONNX ops, exactly what the whole-model capture would have given.

Identical means: same class and submodule classes, parameters and buffers of the same names, shapes and
dtypes, no hooks, no forward replaced on the instance, and every plain attribute the kind's capture read
(``self.scaling``, ``self.training``, ``self.layer_idx``) equal. A call whose inputs differ from what the
kind was captured with (a constant argument, a dtype, a size the kind fixed) runs the layer's own forward
instead, traced as usual; so does every layer of a kind whose capture fails (it changes its inputs or
state in place, takes a cache object, returns a non-tensor, has an op without translation...). The report
lists the kinds reused and why any was not.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import onnx_ir as ir
import torch

from onnxport.blocks._groups import differing, find_groups, global_hooks, same_reads, varying_ints
from onnxport.blocks._kind import DOMAIN, KINDS, Kind, capture_kind, first_line, forwarder, record_calls
from onnxport.blocks._onnx import as_function, prepare_graph, token, translator, uses_function

__all__ = ["DOMAIN", "BlockReuse", "find_groups"]

MAX_CAPTURES = 8  # kinds captured per export at most


class BlockReuse:
    """Finds, captures and translates the repeated blocks of ``model``; see the module docstring.

    ``translate_block(ep, dim_names) -> ir.Model`` decomposes and translates one kind's program (the
    export's opset and custom translations, the size symbols named by ``dim_names``); it raises when the
    kind cannot be translated.
    """

    def __init__(self, model: torch.nn.Module, translate_block: Callable[..., ir.Model]):
        self.model = model
        self.translate_block = translate_block
        self.kinds: list[Kind] = []
        self.notes: list[str] = []
        self.active = True
        self.traced = False  # whether the recording trace got through (it may once an if is rewritten)

    # -- before capture -------------------------------------------------------------------------

    def prepare(self, trace: Callable[[], Any], capturing: Callable[[], Any]) -> None:
        """Find the groups of identical blocks, see how the capture calls each (one trace of the model that
        traces one layer per group and stubs the others), then capture and translate one of each kind.
        ``trace()`` runs the model's capture under ``capturing()``. Never raises: what fails is noted, and
        those layers are traced one by one. When the trace itself fails (an ``if`` on a tensor not rewritten
        yet), ``traced`` stays False and the capture calls this again after its rewrites."""
        self.traced = True
        if global_hooks():
            self.notes.append("traced layer by layer: global module hooks are registered")
            return
        groups = find_groups(self.model)
        if not groups:
            return
        try:
            calls = record_calls(groups, trace)
        except Exception as exc:  # noqa: BLE001 - the capture itself reports the model's failure
            self.traced = False
            self.notes = [f"traced layer by layer: the model's capture failed ({first_line(exc)})"]
            return
        self.notes = []
        for group in groups:
            call = calls.get(id(group))
            if call is None:
                continue
            remaining = list(group)
            while len(remaining) >= 2 and len(self.kinds) < MAX_CAPTURES:
                qualname, module = remaining[0]
                try:
                    with capturing():
                        kind = capture_kind(qualname, module, call, varying_ints([m for _, m in remaining]))
                    self._translate(kind)
                except Exception as exc:  # noqa: BLE001 - any failure: trace these layers as usual
                    self.notes.append(f"{type(module).__name__} ({_span([q for q, _ in remaining])}) traced layer "
                                      f"by layer: {first_line(exc)}")
                    remaining = []
                    break
                same = [(q, m) for q, m in remaining if same_reads(kind.reads, module, m)]
                remaining = [(q, m) for q, m in remaining if not any(m is s for _, s in same)]
                if len(same) >= 2:
                    kind.members = [q for q, _ in same]
                    kind.module_refs = [m for _, m in same]
                    self.kinds.append(kind)
                    KINDS[kind.name] = kind
                else:
                    why = differing(kind.reads, module, remaining)
                    self.notes.append(f"{type(module).__name__} {qualname} traced as usual: {why} from every other")
            for qualname, module in remaining:
                self.notes.append(f"{type(module).__name__} {qualname} traced as usual: no other layer is the same")

    # -- during capture -------------------------------------------------------------------------

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        """Each member layer's forward calls its kind's op (when its inputs fit the kind)."""
        patched = []
        try:
            if self.active:
                for kind in self.kinds:
                    kind.calls, kind.fallbacks = 0, []
                    for module in kind.module_refs:
                        if "forward" in module.__dict__:
                            continue
                        module.forward = forwarder(kind, module)
                        patched.append(module)
            yield
        finally:
            for module in patched:
                del module.forward

    def retranslate(self, translate_block: Callable[..., ir.Model]) -> None:
        """Translate every kind again with ``translate_block`` (another opset or target for a program made
        from the same capture); a kind that fails now raises, as the model's own translation would."""
        self.translate_block = translate_block
        for kind in self.kinds:
            self._translate(kind)

    def _translate(self, kind: Kind) -> None:
        """The kind's ONNX graph (and function, when it holds subgraphs), its sizes named by their symbols."""
        dim_names = {str(symbol): token(symbol) for symbol in kind.program.range_constraints}
        kind.graph = prepare_graph(self.translate_block(kind.program, dim_names))
        kind.function = as_function(kind.graph, kind.name) if uses_function(kind) else None

    def translators(self) -> dict[Any, Callable[..., Any]]:
        """A translator per kind op: one call of the kind's ONNX function."""
        return {kind.op: translator(kind) for kind in self.kinds if kind.calls}

    def summary(self) -> list[str]:
        """Report lines: the kinds reused, their calls, and what was not reused and why."""
        lines = list(self.notes)
        for kind in self.kinds:
            if kind.calls:
                lines.append(f"{type(kind.module).__name__} captured once for {kind.calls} calls "
                             f"({_span(kind.members)})")
            lines.extend(kind.fallbacks[:3])
        return lines

    # -- after translation ----------------------------------------------------------------------

    def inline(self, model: ir.Model) -> None:
        """Inline every call of a kind's function into the graph; the file keeps no trace of them."""
        used = [kind for kind in self.kinds if kind.calls and kind.function is not None]
        if not used:
            return
        from onnx_ir.passes.common import InlinePass, RemoveUnusedFunctionsPass

        for kind in used:
            model.functions[kind.function.identifier()] = kind.function
        model.opset_imports.pop(DOMAIN, None)
        InlinePass()(model)
        RemoveUnusedFunctionsPass()(model)
        model.graph.opset_imports.pop(DOMAIN, None)
        model.opset_imports.pop(DOMAIN, None)

    def close(self) -> None:
        """Forget the kinds (they hold the model); their ops refuse to run from now on."""
        for kind in self.kinds:
            KINDS.pop(kind.name, None)


def _span(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{names[0]} ... {names[-1]}"
