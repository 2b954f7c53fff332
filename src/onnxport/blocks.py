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
import dataclasses
import functools
import itertools
import operator
import types
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import onnx_ir as ir
import sympy
import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true
from torch.utils import _pytree as pytree

from onnxport.decompose import _is_view

__all__ = ["DOMAIN", "BlockReuse"]

DOMAIN = "onnxport.blocks"     # the ONNX domain of the functions, gone once they are inlined
_NAMESPACE = "onnxport_blocks"  # the torch op namespace
MIN_MODULES = 3                 # a block holds at least this many modules (itself included)
MIN_REPEATS = 4                 # and comes at least this many times: fewer are traced faster than captured apart
MAX_CAPTURES = 8                # kinds captured per export at most
_LIBRARY = torch.library.Library(_NAMESPACE, "FRAGMENT")
_KINDS: dict[str, Kind] = {}    # op name -> kind, while its export runs
_counter = itertools.count()
_PLAIN = (tuple, list, dict, type(None))
_CONSTANTS = (int, float, bool, str, type(None), torch.dtype, torch.device)


class NotReusable(Exception):
    """Why a kind of block is traced layer by layer after all."""


@dataclasses.dataclass
class Kind:
    """One kind of block: its capture, translation and the layers that reuse it."""

    name: str
    module: torch.nn.Module                  # the layer it was captured from
    members: list[str]
    state_names: list[str]                   # parameters then buffers, as the op takes them
    in_spec: pytree.TreeSpec
    is_tensor: list[bool]                    # per input leaf
    constants: list[Any]                     # the non-tensor leaves, in order
    in_meta: list[tuple[torch.dtype, list[Any]]]   # per tensor input: dtype, dims (int or sympy expression)
    out_meta: list[tuple[torch.dtype, list[Any]]]
    out_spec: tuple[pytree.TreeSpec, list[bool], list[Any]]  # as in_spec, is_tensor and constants
    ranges: dict[sympy.Symbol, Any]
    reads: dict[str, dict[str, Any]]         # submodule path -> plain attributes the capture read
    program: torch.export.ExportedProgram | None = None
    module_refs: list[torch.nn.Module] = dataclasses.field(default_factory=list)
    function: ir.Function | None = None
    calls: int = 0
    fallbacks: list[str] = dataclasses.field(default_factory=list)
    op: Any = None  # the OpOverload each member calls


class BlockReuse:
    """Finds, captures and translates the repeated blocks of ``model``; see the module docstring.

    ``translate_block(ep) -> ir.Model`` decomposes and translates one kind's program (the export's
    opset and custom translations); it raises when the kind cannot be translated.
    """

    def __init__(self, model: torch.nn.Module, translate_block: Callable[[torch.export.ExportedProgram], ir.Model]):
        self.model = model
        self.translate_block = translate_block
        self.kinds: list[Kind] = []
        self.notes: list[str] = []
        self.active = True

    # -- before capture -------------------------------------------------------------------------

    def prepare(self, trace: Callable[[], Any], capturing: Callable[[], Any]) -> None:
        """Find the groups of identical blocks, see how the capture calls each (one trace of the model that
        traces one layer per group and stubs the others), then capture and translate one of each kind.
        ``trace()`` runs the model's capture under ``capturing()``. Never raises: what fails is noted, and
        those layers are traced one by one."""
        if _global_hooks():
            self.notes.append("traced layer by layer: global module hooks are registered")
            return
        groups = find_groups(self.model)
        if not groups:
            return
        try:
            calls = _record_calls(groups, trace)
        except Exception as exc:  # noqa: BLE001 - the capture itself reports the model's failure
            self.notes.append(f"traced layer by layer: the model's capture failed ({_first_line(exc)})")
            return
        for group in groups:
            call = calls.get(id(group))
            if call is None:
                continue
            remaining = list(group)
            while len(remaining) >= 2 and len(self.kinds) < MAX_CAPTURES:
                qualname, module = remaining[0]
                try:
                    with capturing():
                        kind = _capture_kind(qualname, module, call)
                    kind.function = _as_function(self.translate_block(kind.program), kind.name)
                except Exception as exc:  # noqa: BLE001 - any failure: trace these layers as usual
                    self.notes.append(f"{type(module).__name__} ({_span([q for q, _ in remaining])}) traced layer "
                                      f"by layer: {_first_line(exc)}")
                    remaining = []
                    break
                same = [(q, m) for q, m in remaining if _same_reads(kind, module, m)]
                remaining = [(q, m) for q, m in remaining if not any(m is s for _, s in same)]
                if len(same) >= 2:
                    kind.members = [q for q, _ in same]
                    kind.module_refs = [m for _, m in same]
                    self.kinds.append(kind)
                    _KINDS[kind.name] = kind
                else:
                    why = _differing(kind, module, remaining)
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
                        module.forward = _forwarder(kind, module)
                        patched.append(module)
            yield
        finally:
            for module in patched:
                del module.forward

    def translators(self) -> dict[Any, Callable[..., Any]]:
        """A translator per kind op: one call of the kind's ONNX function."""
        return {kind.op: _translator(kind) for kind in self.kinds if kind.calls}

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
            _KINDS.pop(kind.name, None)


# -- finding the groups ----------------------------------------------------------------------------


def find_groups(model: torch.nn.Module) -> list[list[tuple[str, torch.nn.Module]]]:
    """Groups of submodules with the same structure, the outermost ones: a group's members are not
    searched further. Each group has at least ``MIN_REPEATS`` distinct modules of at least ``MIN_MODULES``
    modules each."""
    signatures: dict[int, Any] = {}
    counts: dict[Any, int] = {}
    for module in {id(m): m for m in model.modules()}.values():
        if module is model:
            continue
        signature = _signature(module)
        signatures[id(module)] = signature
        if signature is not None:
            counts[signature] = counts.get(signature, 0) + 1
    groups: dict[Any, dict[int, tuple[str, torch.nn.Module]]] = {}

    def visit(prefix: str, parent: torch.nn.Module) -> None:
        for name, child in parent.named_children():
            qualname = f"{prefix}.{name}" if prefix else name
            signature = signatures.get(id(child))
            if signature is not None and counts[signature] >= MIN_REPEATS:
                groups.setdefault(signature, {}).setdefault(id(child), (qualname, child))
            else:
                visit(qualname, child)

    visit("", model)
    return [list(members.values()) for members in groups.values() if len(members) >= MIN_REPEATS]


def _signature(module: torch.nn.Module) -> Any:
    submodules = list(module.named_modules())
    if len(submodules) < MIN_MODULES:
        return None
    for _, m in submodules:
        if "forward" in m.__dict__ or any(
            getattr(m, hooks, None) for hooks in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks",
                                                   "_backward_pre_hooks")
        ):
            return None
    return (
        tuple((name, type(m)) for name, m in submodules),
        tuple((n, tuple(p.shape), p.dtype, p.requires_grad) for n, p in module.named_parameters()),
        tuple((n, tuple(b.shape), b.dtype) for n, b in module.named_buffers()),
    )


def _global_hooks() -> bool:
    hooks = torch.nn.modules.module
    return any(getattr(hooks, name, None) for name in (
        "_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
        "_global_backward_pre_hooks", "_global_module_registration_hooks",
    ) if name != "_global_module_registration_hooks")


# -- the trace that records how each group is called -------------------------------------------------


@dataclasses.dataclass
class _Call:
    """The first call of a group's layer in the model's capture: the input structure, the constants, and
    per tensor its dtype, example sizes and which of them are symbolic."""

    spec: pytree.TreeSpec
    is_tensor: list[bool]
    constants: list[Any]
    tensors: list[tuple[torch.dtype, list[int], list[bool]]]
    fakes: list[torch.Tensor]
    out: Any = None


def _record_calls(groups: list[list[tuple[str, torch.nn.Module]]], trace: Callable[[], Any]) -> dict[int, _Call]:
    """Run ``trace`` with the first layer of each group traced and recorded, and every other layer whose
    inputs look the same returning empty tensors shaped like the first's outputs (the trace is thrown away)."""
    calls: dict[int, _Call] = {}
    patched = []

    def forwarder(group: list[Any], module: torch.nn.Module) -> Callable[..., Any]:
        original = type(module).forward

        def forward(*args: Any, **kwargs: Any) -> Any:
            call = calls.get(id(group))
            if call is None:
                call = calls[id(group)] = _describe_call(args, kwargs)
                if len(calls) == len(groups):
                    raise _Recorded  # every group seen: the rest of the trace is not needed
                call.out = original(module, *args, **kwargs)
                return call.out
            if call.out is not None and _looks_same(call, args, kwargs):
                return pytree.tree_map_only(torch.Tensor, torch.empty_like, call.out)
            return original(module, *args, **kwargs)

        return forward

    try:
        for group in groups:
            for _, module in group:
                module.forward = forwarder(group, module)
                patched.append(module)
        trace()
    except Exception as exc:
        if not _caused_by(exc, _Recorded):
            raise
    finally:
        for module in patched:
            del module.forward
    for call in calls.values():
        call.out = call.fakes = None
    return calls


class _Recorded(Exception):
    """Ends the recording trace once every group has been seen."""


def _caused_by(exc: BaseException | None, kind: type) -> bool:
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, kind):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def _describe_call(args: tuple, kwargs: dict[str, Any]) -> _Call:
    leaves, spec = pytree.tree_flatten((args, kwargs))
    tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
    return _Call(
        spec,
        [isinstance(x, torch.Tensor) for x in leaves],
        [x for x in leaves if not isinstance(x, torch.Tensor)],
        [(t.dtype, [_hint(d) for d in t.shape], [isinstance(d, torch.SymInt) for d in t.shape]) for t in tensors],
        tensors,
    )


def _hint(size: Any) -> int:
    if isinstance(size, int):
        return size
    hint = size.node.hint
    if hint is None:
        raise NotReusable("an input's size depends on the data")
    return int(hint)


def _looks_same(call: _Call, args: tuple, kwargs: dict[str, Any]) -> bool:
    leaves, spec = pytree.tree_flatten((args, kwargs))
    if spec != call.spec or [isinstance(x, torch.Tensor) for x in leaves] != call.is_tensor:
        return False
    constants = [x for x in leaves if not isinstance(x, torch.Tensor)]
    if any(type(a) is not type(b) or a is not b and a != b for a, b in zip(constants, call.constants)):
        return False
    tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
    return all(
        a.dtype == b.dtype and a.dim() == b.dim() and all(_known_equal(x, y) for x, y in zip(a.shape, b.shape))
        for a, b in zip(tensors, call.fakes)
    )


def _example(dtype: torch.dtype, sizes: list[int]) -> torch.Tensor:
    """A tensor to capture a block from: only its dtype and sizes matter to the capture."""
    if dtype.is_floating_point:
        return torch.randn(sizes).to(dtype)
    if dtype == torch.bool:
        return torch.ones(sizes, dtype=dtype)
    return torch.zeros(sizes, dtype=dtype)


# -- capturing one kind ----------------------------------------------------------------------------


class _Functional(torch.nn.Module):
    """A block as a function of its state and its tensor inputs (the block is not a submodule, so its
    parameters are inputs, not constants)."""

    def __init__(self, block: torch.nn.Module, state_names: list[str], in_spec: pytree.TreeSpec,
                 is_tensor: list[bool], constants: list[Any], record: Callable[[Any], None]):
        super().__init__()
        self._block = [block]
        self.state_names, self.in_spec, self.is_tensor, self.constants = state_names, in_spec, is_tensor, constants
        self._record = record  # a function, shared by the copies torch.export may make of this module

    def forward(self, state: list[torch.Tensor], tensors: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        args, kwargs = _rebuild(self.in_spec, self.is_tensor, self.constants, tensors)
        out = torch.func.functional_call(self._block[0], dict(zip(self.state_names, state)), args, kwargs)
        leaves, spec = pytree.tree_flatten(out)
        constants = [x for x in leaves if not isinstance(x, torch.Tensor)]
        if not all(isinstance(x, _CONSTANTS) for x in constants):
            raise NotReusable(f"it returns a {type(next(x for x in constants if not isinstance(x, _CONSTANTS))).__name__}")
        self._record((spec, [isinstance(x, torch.Tensor) for x in leaves], constants))
        return tuple(x for x in leaves if isinstance(x, torch.Tensor))


def _rebuild(spec: pytree.TreeSpec, is_tensor: list[bool], constants: list[Any], tensors: list[Any]) -> Any:
    t, c = iter(tensors), iter(constants)
    return pytree.tree_unflatten([next(t) if flag else next(c) for flag in is_tensor], spec)


def _capture_kind(qualname: str, module: torch.nn.Module, call: _Call) -> Kind:
    spec, is_tensor, constants = call.spec, call.is_tensor, call.constants
    if not _plain_spec(spec):
        raise NotReusable(f"its inputs include a {_foreign_type(spec)}")
    if not all(isinstance(x, _CONSTANTS) for x in constants):
        raise NotReusable("an input is neither a tensor nor a constant")
    tensors = [_example(dtype, sizes) for dtype, sizes, _ in call.tensors]
    named = list(module.named_parameters()) + list(module.named_buffers())
    state_names = [n for n, _ in named]
    out_specs: list[tuple[pytree.TreeSpec, list[bool], list[Any]]] = []

    def record(out_spec: tuple[pytree.TreeSpec, list[bool], list[Any]]) -> None:
        out_specs.append(out_spec)

    wrapper = _Functional(module, state_names, spec, is_tensor, constants, record)
    auto = torch.export.Dim.AUTO
    dynamic = ([None] * len(named), [{i: auto for i, free in enumerate(symbolic) if free} or None
                                     for _, _, symbolic in call.tensors])
    with _reading(module) as reads:
        ep = torch.export.export(wrapper, ([t for _, t in named], tensors), dynamic_shapes=dynamic, strict=False)
    signature = ep.graph_signature
    if signature.buffers_to_mutate or signature.user_inputs_to_mutate or _writes_inputs(ep.graph):
        raise NotReusable("it changes its inputs, parameters or buffers in place")
    placeholders = [n for n in ep.graph.nodes if n.op == "placeholder"]
    user = [n for n, s in zip(placeholders, signature.input_specs) if s.kind.name == "USER_INPUT"]
    in_meta = [_meta(n.meta["val"]) for n in user[len(named):]]
    output = next(n for n in reversed(ep.graph.nodes) if n.op == "output")
    outs = list(output.args[0])
    if not all(isinstance(n, torch.fx.Node) and isinstance(n.meta.get("val"), torch.Tensor) for n in outs):
        raise NotReusable("an output is not a tensor computed by the block")
    out_meta = [_meta(n.meta["val"]) for n in outs]
    known = {d for _, dims in in_meta for d in dims if isinstance(d, sympy.Symbol)}
    free = set().union(*(d.free_symbols for _, dims in out_meta for d in dims if isinstance(d, sympy.Expr)))
    if not free <= known:
        raise NotReusable("an output's size depends on the data (or on a derived input size)")
    name = f"{type(module).__name__.lower()}_{next(_counter)}"
    kind = Kind(name, module, [qualname], state_names, spec, is_tensor, constants, in_meta, out_meta,
                out_specs[-1], dict(ep.range_constraints), reads)
    kind.program = ep
    _define(kind)
    return kind


def _writes_inputs(graph: torch.fx.Graph) -> bool:
    """Whether an in-place op writes into an input of the graph (or a view of one)."""
    for node in graph.nodes:
        target = node.target
        if not (isinstance(target, torch._ops.OpOverload) and target._schema.is_mutable):
            continue
        for arg, schema_arg in zip(node.args, target._schema.arguments):
            if schema_arg.alias_info is None or not schema_arg.alias_info.is_write:
                continue
            while isinstance(arg, torch.fx.Node) and arg.op == "call_function" and _is_view(arg.target):
                arg = arg.args[0]
            if isinstance(arg, torch.fx.Node) and arg.op == "placeholder":
                return True
    return False


def _plain_spec(spec: pytree.TreeSpec) -> bool:
    return spec.type in _PLAIN and all(_plain_spec(c) for c in spec.children_specs) if not spec.is_leaf() else True


def _foreign_type(spec: pytree.TreeSpec) -> str:
    if not spec.is_leaf() and spec.type not in _PLAIN:
        return spec.type.__name__
    return next((f for f in map(_foreign_type, spec.children_specs) if f), "") if not spec.is_leaf() else ""


def _meta(val: torch.Tensor) -> tuple[torch.dtype, list[Any]]:
    return val.dtype, [d.node.expr if isinstance(d, torch.SymInt) else int(d) for d in val.shape]


@contextlib.contextmanager
def _reading(block: torch.nn.Module) -> Iterator[dict[str, dict[str, Any]]]:
    """Record the plain attributes (not parameters, buffers, submodules) each submodule reads."""
    reads: dict[str, dict[str, Any]] = {}
    swapped = []
    try:
        for path, module in block.named_modules():
            seen = reads.setdefault(path, {})
            original = type(module)
            module.__class__ = _reader_class(original, seen)
            swapped.append((module, original))
        yield reads
    finally:
        for module, original in swapped:
            module.__class__ = original


_SKIPPED = frozenset({"_parameters", "_buffers", "_modules", "__dict__", "__class__", "_forward_hooks",
                      "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks", "_state_dict_hooks",
                      "_forward_hooks_with_kwargs", "_forward_pre_hooks_with_kwargs", "_forward_hooks_always_called",
                      "_is_full_backward_hook", "_non_persistent_buffers_set", "_load_state_dict_pre_hooks",
                      "_state_dict_pre_hooks", "_load_state_dict_post_hooks", "_compiled_call_impl"})


def _reader_class(original: type, seen: dict[str, Any]) -> type:
    def __getattribute__(self: Any, name: str) -> Any:  # noqa: N807 - the hook Python calls
        value = original.__getattribute__(self, name)
        if name not in _SKIPPED and name in object.__getattribute__(self, "__dict__"):
            seen.setdefault(name, value)
        return value

    return type(original.__name__, (original,), {"__getattribute__": __getattribute__, "__module__": original.__module__})


def _same_reads(kind: Kind, reference: torch.nn.Module, module: torch.nn.Module) -> bool:
    """Whether ``module`` has the attributes the kind's capture read, equal to the reference's."""
    if module is reference:
        return True
    submodules = dict(module.named_modules())
    for path, attributes in kind.reads.items():
        other = submodules.get(path)
        if other is None:
            return False
        for name, value in attributes.items():
            if name not in other.__dict__ or not _equal(value, other.__dict__[name]):
                return False
    return True


def _differing(kind: Kind, reference: torch.nn.Module, others: list[tuple[str, torch.nn.Module]]) -> str:
    """Which attribute the kind's capture read sets ``reference`` apart from ``others``."""
    submodules = [dict(m.named_modules()) for _, m in others if m is not reference]
    for path, attributes in kind.reads.items():
        for name, value in attributes.items():
            if any(path not in s or not _equal(value, s[path].__dict__.get(name, _MISSING)) for s in submodules):
                return f"{path + '.' if path else ''}{name} differs"
    return "?"


_MISSING = object()


def _equal(a: Any, b: Any, depth: int = 0) -> bool:
    """Whether two attribute values make the same code behave the same: equal values, the same function,
    or objects of one class whose own attributes are equal (a config, an activation, a processor)."""
    if a is b:
        return True
    if type(a) is not type(b) or depth > 4:
        return False
    if isinstance(a, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b))
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_equal(x, y, depth + 1) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k], depth + 1) for k in a)
    if isinstance(a, (*_CONSTANTS, frozenset, set)):
        return a == b
    if isinstance(a, functools.partial):
        return a.func is b.func and _equal(a.args, b.args, depth + 1) and _equal(a.keywords, b.keywords, depth + 1)
    if isinstance(a, (torch.nn.Module, types.FunctionType, types.BuiltinFunctionType, types.MethodType, type)):
        return False  # modules are compared as submodules; functions only when the very same
    state_a, state_b = getattr(a, "__dict__", None), getattr(b, "__dict__", None)
    return state_a is not None and state_b is not None and _equal(state_a, state_b, depth + 1)


# -- the op each member calls ----------------------------------------------------------------------


def _define(kind: Kind) -> None:
    _LIBRARY.define(f"{kind.name}(Tensor[] inputs) -> Tensor[]")
    _LIBRARY.impl(kind.name, _eager(kind.name), "CompositeExplicitAutograd")
    torch.library.register_fake(f"{_NAMESPACE}::{kind.name}", _fake(kind.name), lib=_LIBRARY)
    kind.op = getattr(getattr(torch.ops, _NAMESPACE), kind.name).default


def _live(name: str) -> Kind:
    kind = _KINDS.get(name)
    if kind is None:
        raise RuntimeError(f"{_NAMESPACE}::{name} is onnxport's stand-in for a block during one export only")
    return kind


def _eager(name: str) -> Callable[[list[torch.Tensor]], list[torch.Tensor]]:
    def run(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        kind = _live(name)
        n = len(kind.state_names)
        args, kwargs = _rebuild(kind.in_spec, kind.is_tensor, kind.constants, inputs[n:])
        out = torch.func.functional_call(kind.module, dict(zip(kind.state_names, inputs[:n])), args, kwargs)
        return [t.clone() for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]

    return run


def _fake(name: str) -> Callable[[list[torch.Tensor]], list[torch.Tensor]]:
    def shapes(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        kind = _live(name)
        tensors = inputs[len(kind.state_names):]
        env = _bind(kind, tensors, check=False)
        if env is None:
            raise RuntimeError(f"{_NAMESPACE}::{name} called with inputs its block was not captured for")
        return [tensors[0].new_empty([_evaluate(d, env) for d in dims], dtype=dtype) for dtype, dims in kind.out_meta]

    return shapes


def _forwarder(kind: Kind, module: torch.nn.Module) -> Callable[..., Any]:
    original = type(module).forward

    def forward(*args: Any, **kwargs: Any) -> Any:
        why = _mismatch(kind, args, kwargs)
        if why is not None:
            kind.fallbacks.append(f"a call of {type(module).__name__} traced as usual: {why}")
            return original(module, *args, **kwargs)
        leaves = pytree.tree_leaves((args, kwargs))
        state = [t for _, t in module.named_parameters()] + [t for _, t in module.named_buffers()]
        outs = kind.op(state + [x for x in leaves if isinstance(x, torch.Tensor)])
        kind.calls += 1
        return _rebuild(*kind.out_spec, list(outs))

    return forward


def _mismatch(kind: Kind, args: tuple, kwargs: dict[str, Any]) -> str | None:
    leaves, spec = pytree.tree_flatten((args, kwargs))
    if spec != kind.in_spec:
        return "its arguments differ in structure from the captured call"
    if [isinstance(x, torch.Tensor) for x in leaves] != kind.is_tensor:
        return "tensor and constant arguments differ"
    constants = [x for x in leaves if not isinstance(x, torch.Tensor)]
    if any(type(a) is not type(b) or a != b for a, b in zip(constants, kind.constants)):
        return "a constant argument differs from the captured call"
    if _bind(kind, [x for x in leaves if isinstance(x, torch.Tensor)], check=True) is None:
        return "a tensor's dtype or size differs from what the captured block allows"
    return None


def _bind(kind: Kind, tensors: list[torch.Tensor], *, check: bool) -> dict[sympy.Symbol, Any] | None:
    """Map the kind's size symbols to this call's sizes; None when the call does not fit the kind.

    With ``check``, two sizes the kind has as one symbol (or as an expression of others) must be equal;
    where torch does not know it yet, ``torch._check`` says so to the model's capture, as the layer's
    own code would have when traced (the kind's capture found that equality in that code).
    """
    env: dict[sympy.Symbol, Any] = {}
    equal: list[tuple[Any, sympy.Expr]] = []
    for t, (dtype, dims) in zip(tensors, kind.in_meta):
        if check and (t.dtype != dtype or t.dim() != len(dims)):
            return None
        for size, want in zip(t.shape, dims):
            if isinstance(want, int) or want.is_number:
                if check and not _known_equal(size, int(want)):
                    return None
            elif want.is_Symbol and want not in env:
                if check and not _within(size, kind.ranges.get(want)):
                    return None
                env[want] = size
            else:
                equal.append((size, want))
    if not check:
        return env
    for size, want in equal:
        value = _evaluate(want, env)
        if value is None or isinstance(size, int) and isinstance(value, int) and size != value:
            return None
        if not _known_equal(size, value):
            if isinstance(size, int) or isinstance(value, int):
                return None  # a size the example fixed on one side only
            torch._check(size == value)
    for _, dims in kind.out_meta:
        if any(_evaluate(d, env) is None for d in dims):
            return None
    return env


def _known_equal(a: Any, b: Any) -> bool:
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return statically_known_true(a == b)


def _within(size: Any, bounds: Any) -> bool:
    if bounds is None:
        return True
    if isinstance(size, int):
        return bool(bounds.lower <= size <= bounds.upper)
    node = size.node
    have = node.shape_env.bound_sympy(node.expr)
    return bool(bounds.lower <= have.lower) and bool(have.upper <= bounds.upper)


_EVALUATORS: dict[Any, Callable[..., Any]] = {
    sympy.Add: lambda *xs: sum(xs[1:], xs[0]),
    sympy.Mul: lambda *xs: _product(xs),
    torch.utils._sympy.functions.FloorDiv: operator.floordiv,
    torch.utils._sympy.functions.Mod: operator.mod,
    torch.utils._sympy.functions.PythonMod: operator.mod,
    sympy.Max: lambda *xs: _fold(torch.sym_max, xs),
    sympy.Min: lambda *xs: _fold(torch.sym_min, xs),
}


def _evaluate(expr: Any, env: Mapping[sympy.Symbol, Any]) -> Any:
    """``expr`` (a size of the kind's capture) in this call's sizes; None when it cannot be."""
    if isinstance(expr, int):
        return expr
    if expr.is_Integer:
        return int(expr)
    if expr.is_Symbol:
        return env.get(expr)
    if isinstance(expr, sympy.Pow) and expr.exp.is_Integer and int(expr.exp) > 0:
        base = _evaluate(expr.base, env)
        return None if base is None else _product([base] * int(expr.exp))
    fn = _EVALUATORS.get(type(expr))
    if fn is None:
        return None
    args = [_evaluate(a, env) for a in expr.args]
    return None if any(a is None for a in args) else fn(*args)


def _product(xs: Any) -> Any:
    out = xs[0]
    for x in xs[1:]:
        out = out * x
    return out


def _fold(fn: Callable[[Any, Any], Any], xs: Any) -> Any:
    out = xs[0]
    for x in xs[1:]:
        out = fn(out, x)
    return out


# -- translation -----------------------------------------------------------------------------------


def _translator(kind: Kind) -> Callable[..., Any]:
    outputs = len(kind.out_meta)

    def translate(ctx: Any, inputs: list[Any]) -> Any:
        result = ctx.emit(kind.name, list(inputs), {}, num_outputs=outputs, domain=DOMAIN)
        return [result] if outputs == 1 else list(result)

    return translate


def _as_function(model: ir.Model, name: str) -> ir.Function:
    """The kind's translated graph as an ONNX function: initializers become Constant nodes, outputs that
    are inputs pass through Identity, and inner values lose their shapes (the kind's own size names)."""
    for key in ("onnxport.random_outputs", "onnxport.complex_inputs", "onnxport.complex_outputs"):
        if key in model.metadata_props:
            raise NotReusable("it has random or complex values")
    graph = model.graph
    constants = []
    for value in list(graph.initializers.values()):
        node = ir.node("Constant", [], attributes={"value": value.const_value}, num_outputs=1)
        node.outputs[0].name = value.name
        node.outputs[0].dtype = value.dtype
        value.replace_all_uses_with(node.outputs[0])
        constants.append(node)
    graph.initializers.clear()
    if constants:
        graph.insert_before(graph[0], constants) if len(graph) else graph.extend(constants)
    inputs = {id(v) for v in graph.inputs}
    for i, value in enumerate(list(graph.outputs)):
        if id(value) in inputs or value.producer() is None:
            node = ir.node("Identity", [value], num_outputs=1)
            node.outputs[0].name = f"{value.name}_out"
            graph.append(node)
            graph.outputs[i] = node.outputs[0]
    for node in graph.all_nodes():
        for value in node.outputs:
            value.shape = None
    for value in graph.inputs:
        value.shape = None
    graph.name = name
    return ir.Function(DOMAIN, name, "", graph=graph, attributes=[])


def _span(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{names[0]} ... {names[-1]}"


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:200]
