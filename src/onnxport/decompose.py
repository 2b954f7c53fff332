"""Stage 2: decompose only the ops that have no translator, then list whatever is still missing.

A full ``run_decompositions()`` costs several times the capture itself; translating the ops
torch.export emits directly and decomposing the rest selectively keeps export cheap. A custom op
(``torch.library``) with no translation is traced through its own implementation into ATen ops,
when that implementation traces on fake inputs; a translation, when registered, always wins.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import inspect
import io
import warnings
from collections.abc import Mapping
from typing import Any

import torch

from onnxport.errors import CaptureError, SourceLocation, UnsupportedOpError, location_from_stack_trace
from onnxport.report import Report
from onnxport.translate import target_name, untranslated_ops
from onnxport.translate.registry import Translator
from onnxport.versions import symint_hint

__all__ = ["decompose", "missing_ops"]

_MAX_ROUNDS = 4


@functools.lru_cache(maxsize=1)
def _core_aten_table() -> dict[Any, Any]:
    """torch's core ATen decompositions (the wider table rewrites into prims, which have no translators)."""
    return dict(torch.export.default_decompositions().items())


def is_view(target: Any) -> bool:
    """An op whose output aliases its input (``select``, ``slice``, ``view``, ``transpose``, ...)."""
    if not isinstance(target, torch._ops.OpOverload):
        return False
    returns = target._schema.returns
    return bool(returns) and returns[0].alias_info is not None and not returns[0].alias_info.is_write


def _aliases(node: torch.fx.Node) -> bool:
    """Whether ``node``'s value may share its input's storage: a view, save a ``to`` that changes the dtype
    (its schema says it may alias; it aliases only when it changes nothing)."""
    if not is_view(node.target):
        return False
    if node.target in (torch.ops.aten.to.dtype, torch.ops.aten.to.dtype_layout) and node.args:
        before, after = getattr(node.args[0], "meta", {}).get("val"), node.meta.get("val")
        if isinstance(before, torch.Tensor) and isinstance(after, torch.Tensor) and before.dtype != after.dtype:
            return False
    return True


def needs_functionalization(gm: torch.fx.GraphModule) -> torch.fx.Node | None:
    """The first in-place op that writes through a view, into an input or state, or into a tensor that a
    view reads later. The translator handles the other in-place ops (``relu_`` on a fresh value) by
    rebinding the mutated value; these need torch's functionalization to become ``*_scatter`` ops."""
    for node in gm.graph.nodes:
        target = node.target
        if not (isinstance(target, torch._ops.OpOverload) and target._schema.is_mutable and node.args):
            continue
        base = node.args[0]
        if not isinstance(base, torch.fx.Node) or base.op != "call_function" or _aliases(base):
            return node
        if any(is_view(user.target) for user in base.users if user is not node):
            return node
    for node in gm.graph.nodes:
        sub = getattr(gm, node.target, None) if node.op == "get_attr" else None
        if isinstance(sub, torch.fx.GraphModule) and (found := needs_functionalization(sub)) is not None:
            return found
    return None


def uses_vmap(gm: torch.fx.GraphModule) -> bool:
    """Whether the graph (or a subgraph) holds ``torch.vmap``'s pre-dispatch markers
    (``_add_batch_dim``, ``_remove_batch_dim``, ...): torch.export keeps vmap unexpanded until the
    program is retraced, which ``run_decompositions`` does through functorch's batching rules."""
    for node in gm.graph.nodes:
        if node.op == "call_function" and getattr(node.target, "__module__", "") == "torch._functorch.predispatch":
            return True
        sub = getattr(gm, node.target, None) if node.op == "get_attr" else None
        if isinstance(sub, torch.fx.GraphModule) and uses_vmap(sub):
            return True
    return False


def decompose(
    ep: torch.export.ExportedProgram, *, custom: Mapping[Any, Translator], opset: int, report: Report
) -> torch.export.ExportedProgram:
    """Decompose untranslated ops round by round; raise ``UnsupportedOpError`` listing what remains."""
    mutation = needs_functionalization(ep.graph_module)
    vmap = uses_vmap(ep.graph_module)
    if mutation is not None or vmap:
        try:
            with warnings.catch_warnings(), _keep_small_dims_dynamic():
                warnings.simplefilter("ignore")
                ep = ep.run_decompositions({})  # functionalizes; decomposes nothing
        except Exception as exc:  # noqa: BLE001 - torch refuses some mutations (of constants, through .data)
            why = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
            if mutation is None:
                raise CaptureError(f"torch cannot expand the model's torch.vmap into batched ops: {why}",
                                   fix="write the function over the batch directly (broadcasting, or a loop "
                                   "over a static count) instead of torch.vmap") from None
            raise CaptureError(
                f"torch cannot turn the in-place write {mutation.name} = {target_name(mutation.target)} into "
                f"functional code: {why}",
                location=location_from_stack_trace(mutation.meta.get("stack_trace")),
                fix="write to a copy (y = x.clone(); y[...] = v) instead of writing through .data or into a "
                "constant, or register the tensor as a buffer",
            ) from None
        if mutation is not None:
            report.warn("in-place writes through views or into inputs: the graph was functionalized")
        if vmap:
            report.notes.append("torch.vmap in the model: its batched functions were traced into plain "
                                "ATen ops over the batch (torch's own batching rules)")
    untraceable: dict[Any, str] = {}  # custom op -> why its implementation cannot be traced
    for _ in range(_MAX_ROUNDS):
        missing = untranslated_ops(ep.graph_module, custom)
        # Custom ops first, in a round of their own: a failure then says whose implementation failed.
        traced = _custom_op_table(missing, untraceable)
        table = traced or {t: fn for t in missing if (fn := _core_aten_table().get(t)) is not None}
        if not table:
            break
        for target, nodes in missing.items():
            if target in table:
                record = report.traced_ops if target in traced else report.decomposed
                record[target_name(target)] = record.get(target_name(target), 0) + len(nodes)
        try:
            with warnings.catch_warnings(), _keep_small_dims_dynamic():
                warnings.simplefilter("ignore")
                ep = ep.run_decompositions(table)
        except Exception as exc:  # torch's decompositions fail in many ways; the ops stay untranslated
            names = ", ".join(sorted(target_name(t) for t in table))
            why = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            report.warn(f"torch could not decompose {names}: {why}")
            for target in table:
                report.decomposed.pop(target_name(target), None)
                report.traced_ops.pop(target_name(target), None)
            untraceable.update({t: f"tracing its implementation in the program failed: {why}" for t in traced})
            if traced:
                continue  # the ATen ops still get their round
            break
    missing = untranslated_ops(ep.graph_module, custom)
    if missing:
        raise unsupported_error(missing, opset, untraceable)
    return ep


# -- custom ops without a translation: trace their own implementation ----------------------------

_BUILTIN_NAMESPACES = frozenset({"aten", "prims", "prim"})


def _custom_op_table(missing: Mapping[Any, list[torch.fx.Node]], untraceable: dict[Any, str]) -> dict[Any, Any]:
    """Decompositions that call each untranslated custom op's own implementation, for the ops whose
    implementation traces on the node's fake inputs; ``untraceable`` gets why the others do not."""
    table = {}
    for target, nodes in missing.items():
        if not isinstance(target, torch._ops.OpOverload) or target.namespace in _BUILTIN_NAMESPACES:
            continue
        if target not in untraceable:
            why = _why_untraceable(target, nodes[0])
            if why is None:
                table[target] = _call_implementation(target)
            else:
                untraceable[target] = why
    return table


def _call_implementation(target: torch._ops.OpOverload) -> Any:
    """A decomposition of ``target``: its kernel for the inputs' device, below the tracing modes, so the
    torch calls of a Python implementation (``torch.library.custom_op``, ``Library.impl``) are traced."""

    def call_implementation(*args: Any, **kwargs: Any) -> Any:
        tensors = [a for a in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
        device = tensors[0].device.type if tensors else "cpu"
        key = getattr(torch._C.DispatchKey, torch._C._dispatch_key_for_device(device))
        return target.redispatch(torch._C.DispatchKeySet(key), *args, **kwargs)

    return call_implementation


def _why_untraceable(target: torch._ops.OpOverload, node: torch.fx.Node) -> str | None:
    """None when ``target``'s implementation traces on fake copies of ``node``'s inputs into a result
    of the shapes and dtypes its fake kernel promised; else the reason, for the error message."""
    schema = target._schema
    if schema.is_mutable or any(r.alias_info is not None for r in schema.returns):
        return "it writes into its inputs or returns a view of them (onnxport traces functional ops only)"
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    def hint(v: Any) -> Any:
        return symint_hint(v, fallback=2) if isinstance(v, torch.SymInt) else v

    expected = node.meta.get("val")
    args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: n.meta.get("val"))
    try:
        with FakeTensorMode(shape_env=ShapeEnv()), warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            args, kwargs = torch.utils._pytree.tree_map(
                lambda v: torch.empty([hint(d) for d in v.shape], dtype=v.dtype, device=v.device)
                if isinstance(v, torch.Tensor) else hint(v),
                (args, kwargs),
            )
            result = _call_implementation(target)(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - whatever the user's implementation raises on fake tensors
        first = (str(exc).strip().splitlines() or [""])[0]
        return f"its implementation cannot be traced into ATen ops: {type(exc).__name__}: {first[:200]}"
    # A size the implementation computes from tensor values (nonzero, unique) has no fixed value: "?".
    got = [([d if isinstance(d, int) else "?" for d in t.shape], t.dtype)
           for t in torch.utils._pytree.tree_leaves(result) if isinstance(t, torch.Tensor)]
    want = [([hint(d) for d in t.shape], t.dtype) for t in torch.utils._pytree.tree_leaves(expected)
            if isinstance(t, torch.Tensor)]
    if got != want:
        return (f"its implementation returns {_describe(got)} where its fake kernel (register_fake) says "
                f"{_describe(want)}")
    return None


def _describe(metas: list[tuple[list[Any], torch.dtype]]) -> str:
    shown = [f"{str(dtype).replace('torch.', '')}[{', '.join(map(str, shape))}]" for shape, dtype in metas]
    return ", ".join(shown) or "no tensor"


def missing_ops(missing: Mapping[Any, list[torch.fx.Node]]) -> dict[str, list[SourceLocation | None]]:
    """``{op name: [user source line of each node]}``, most frequent first."""
    ordered = sorted(missing.items(), key=lambda kv: (-len(kv[1]), target_name(kv[0])))
    return {
        target_name(t): [location_from_stack_trace(n.meta.get("stack_trace")) for n in nodes] for t, nodes in ordered
    }


def unsupported_error(
    missing: Mapping[Any, list[torch.fx.Node]], opset: int, untraceable: Mapping[Any, str] | None = None
) -> UnsupportedOpError:
    """Every op still without a translation, with its call sites; for a custom op also its schema,
    why its implementation was not traced, and the registration code to write."""
    untraceable = untraceable or {}
    ops = missing_ops(missing)
    by_name = {target_name(t): t for t in missing}
    lines = []
    for name, locations in ops.items():
        target = by_name[name]
        lines.append(f"  {name} x{len(locations)}")
        if target in untraceable:
            lines.append(f"      schema: {target._schema}")
        seen = collections.OrderedDict((str(loc), None) for loc in locations if loc is not None)
        lines.extend(f"      at {loc}".replace("\n", "\n      ") for loc in list(seen)[:3])
        if target in untraceable:
            lines.append(f"      not traced: {untraceable[target]}")
    first = next((loc for locs in ops.values() for loc in locs if loc is not None), None)
    noun = "operator has" if len(ops) == 1 else "operators have"
    custom = next((t for t in missing if t in untraceable), None)
    fix = (
        "register one with @onnxport.register_translation('namespace::op') or pass "
        "custom_translations={op: fn} (docs/custom-ops.md)"
    )
    if custom is not None:
        fix = _registration_code(custom)
    return UnsupportedOpError(
        f"{len(ops)} {noun} no ONNX translation (opset {opset}):\n" + "\n".join(lines),
        ops=ops,
        location=first,
        fix=fix,
    )


def _registration_code(target: torch._ops.OpOverload) -> str:
    """The translation to write for ``target``, as code to paste (docs/custom-ops.md)."""
    name = target_name(target)
    params = ", ".join(["ctx", *(a.name for a in target._schema.arguments)])
    first = next((a.name for a in target._schema.arguments if "Tensor" in str(a.type)), "...")
    fn = f"{target._schema.name.split('::')[-1]}_to_onnx"
    return (
        "give it an implementation in torch ops that traces, or register a translation (docs/custom-ops.md):\n"
        f"    @onnxport.register_translation(\"{name}\")\n"
        f"    def {fn}({params}):\n"
        f"        return ctx.op.Identity({first})  # the ONNX ops computing it\n"
        f"or pass custom_translations={{\"{name}\": {fn}}} to onnxport.export"
    )


@contextlib.contextmanager
def _keep_small_dims_dynamic() -> Any:
    """Re-tracing must not specialise what capture kept dynamic: a dim captured size-obliviously has an
    example size of 0 or 1 (for dims whose example sizes are >= 2 the setting changes nothing). Nor check the
    program's guards while it retraces: ``run_decompositions`` calls ``ep.module()``, which (torch 2.9 and later)
    puts a call checking the input guards at the graph's head, and retraced on symbolic sizes a guard over them
    (RT-DETR's, Grounding DINO's image sides) can fail ("True != False") where every real input satisfies it; the
    sizes that break a guard are verification's to run (``verify.sizes``), not this retrace's."""
    with torch.fx.experimental._config.patch(backed_size_oblivious=True), _guards_unchecked():
        yield


@contextlib.contextmanager
def _guards_unchecked() -> Any:
    """``ExportedProgram.module()`` without its guard-checking call, for the block (where it takes
    ``check_guards``)."""
    original = torch.export.ExportedProgram.module
    if "check_guards" not in inspect.signature(original).parameters:
        yield
        return

    def module(self: torch.export.ExportedProgram, *args: Any, check_guards: bool = False, **kwargs: Any) -> Any:
        return original(self, *args, check_guards=check_guards, **kwargs)

    torch.export.ExportedProgram.module = module
    try:
        yield
    finally:
        torch.export.ExportedProgram.module = original
