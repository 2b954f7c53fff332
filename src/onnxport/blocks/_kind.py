"""One kind of block: how the model calls it, its capture on its own, and the op each member calls."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from typing import Any

import onnx_ir as ir
import sympy
import torch
from torch.utils import _pytree as pytree

from onnxport.blocks import _cache
from onnxport.blocks._cache import SLOT
from onnxport.blocks._groups import CONSTANTS, reading
from onnxport.blocks._shapes import bind, evaluate, known_equal
from onnxport.decompose import is_view
from onnxport.errors import exception_chain

__all__ = ["DOMAIN", "KINDS", "Kind", "NotReusable", "capture_kind", "first_line", "forwarder", "record_calls"]

DOMAIN = "onnxport.blocks"     # the ONNX domain of the kinds' functions, gone once they are inlined
_NAMESPACE = "onnxport_blocks"  # the torch op namespace
_LIBRARY = torch.library.Library(_NAMESPACE, "FRAGMENT")
KINDS: dict[str, Kind] = {}     # op name -> kind, while its export runs
_DEFINED: set[str] = set()      # op names in the library: each serves whichever kind holds it in KINDS
_PLAIN = (tuple, list, dict, type(None))


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
    graph: ir.Graph | None = None            # its translation, initializers as Constant nodes
    function: ir.Function | None = None      # the same as a function, when it holds subgraphs
    calls: int = 0
    fallbacks: list[str] = dataclasses.field(default_factory=list)
    op: Any = None  # the OpOverload each member calls
    wrapper: Any = None  # the block as a function of its state and inputs, as captured
    slot: list[Any] | None = None  # with a cache argument: its slot's (dtype, dims) when captured filled, or []
    slot_index: tuple[str, str] | None = None  # the attribute (submodule path, name) that picks the slot



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
    slot: list[tuple[torch.dtype, list[int], list[bool]]] | None = None  # the cache slot's keys and values
    slots: Any = None  # the cache the slot is of, as a ``_cache.CacheSlots``


def record_calls(groups: list[list[tuple[str, torch.nn.Module]]], trace: Callable[[], Any]) -> dict[int, _Call]:
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
    return any(isinstance(each, kind) for each in exception_chain(exc))


def _describe_call(args: tuple, kwargs: dict[str, Any]) -> _Call:
    args, kwargs, cache = _cache.split_cache(args, kwargs)
    leaves, spec = pytree.tree_flatten((args, kwargs))
    tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
    call = _Call(
        spec,
        [isinstance(x, torch.Tensor) for x in leaves],
        [x for x in leaves if not isinstance(x, torch.Tensor)],
        [_describe(t) for t in tensors],
        tensors,
    )
    if cache is not None:
        call.slot = [_describe(t) for t in _cache.layer_state(cache) or []]
        call.slots = cache
    return call


def _describe(t: torch.Tensor) -> tuple[torch.dtype, list[int], list[bool]]:
    return t.dtype, [_hint(d) for d in t.shape], [isinstance(d, torch.SymInt) for d in t.shape]


def _hint(size: Any) -> int:
    if isinstance(size, int):
        return size
    hint = size.node.hint
    if hint is None:
        raise NotReusable("an input's size depends on the data")
    return int(hint)


def _looks_same(call: _Call, args: tuple, kwargs: dict[str, Any]) -> bool:
    args, kwargs, _ = _cache.split_cache(args, kwargs)
    leaves, spec = pytree.tree_flatten((args, kwargs))
    if spec != call.spec or [isinstance(x, torch.Tensor) for x in leaves] != call.is_tensor:
        return False
    constants = [x for x in leaves if not isinstance(x, torch.Tensor)]
    if any(type(a) is not type(b) or a is not b and a != b for a, b in zip(constants, call.constants)):
        return False
    tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
    return all(
        a.dtype == b.dtype and a.dim() == b.dim() and all(known_equal(x, y) for x, y in zip(a.shape, b.shape))
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
                 is_tensor: list[bool], constants: list[Any], record: Callable[[Any], None], slot: Any = None):
        super().__init__()
        self._block = [block]
        self.state_names, self.in_spec, self.is_tensor, self.constants = state_names, in_spec, is_tensor, constants
        self._record = record  # a function, shared by the copies torch.export may make of this module
        self.slot = slot  # when the block is handed a cache slot: the function that makes a cache of one layer

    def forward(self, state: list[torch.Tensor], tensors: list[torch.Tensor],
                slot: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, ...]:
        args, kwargs = rebuild(self.in_spec, self.is_tensor, self.constants, tensors)
        cache = self.slot(list(slot or [])) if self.slot is not None else None
        if cache is not None:
            args, kwargs = pytree.tree_map(lambda x: cache if x is SLOT else x, (args, kwargs))
        out = torch.func.functional_call(self._block[0], dict(zip(self.state_names, state)), args, kwargs)
        leaves, spec = pytree.tree_flatten(out)
        constants = [x for x in leaves if not isinstance(x, torch.Tensor)]
        if not all(isinstance(x, CONSTANTS) for x in constants):
            raise NotReusable(f"it returns a {type(next(x for x in constants if not isinstance(x, CONSTANTS))).__name__}")
        is_tensor = [isinstance(x, torch.Tensor) for x in leaves]
        tensors_out = [x for x in leaves if isinstance(x, torch.Tensor)]
        index = None
        if cache is not None:
            if len({(o.path, o.name) for o in cache.indices}) != 1:
                raise NotReusable("it is handed the cache but does not update one slot of it")
            index = (cache.indices[0].path, cache.indices[0].name)
            tensors_out += [cache.layers[0].keys, cache.layers[0].values]
        self._record(((spec, is_tensor, constants), index))
        return tuple(tensors_out)


def rebuild(spec: pytree.TreeSpec, is_tensor: list[bool], constants: list[Any], tensors: list[Any]) -> Any:
    t, c = iter(tensors), iter(constants)
    return pytree.tree_unflatten([next(t) if flag else next(c) for flag in is_tensor], spec)


def capture_kind(
    qualname: str, module: torch.nn.Module, call: _Call, opaque: list[tuple[str, str]] = ()
) -> Kind:
    """Capture ``module`` on its own as ``call`` describes it. With a cache argument, the ``opaque``
    attributes (ints that differ between the layers) may only pick the cache's slot."""
    spec, is_tensor, constants = call.spec, call.is_tensor, call.constants
    if not _plain_spec(spec):
        foreign = _foreign_type(spec)
        if foreign.endswith("Cache"):
            foreign += " not of plain growing layers (sliding-window or static ones are traced per layer)"
        raise NotReusable(f"its inputs include a {foreign}")
    if not all(isinstance(x, CONSTANTS) or x is SLOT for x in constants):
        raise NotReusable("an input is neither a tensor nor a constant")
    tensors = [_example(dtype, sizes) for dtype, sizes, _ in call.tensors]
    slot = [_example(dtype, sizes) for dtype, sizes, _ in call.slot or []]
    named = list(module.named_parameters()) + list(module.named_buffers())
    state_names = [n for n, _ in named]
    out_specs: list[Any] = []
    wrapper = _Functional(module, state_names, spec, is_tensor, constants, out_specs.append,
                         call.slots.slot_cache if call.slots is not None else None)
    auto = torch.export.Dim.AUTO

    def dims(described: list[tuple[torch.dtype, list[int], list[bool]]]) -> list[Any]:
        return [{i: auto for i, free in enumerate(symbolic) if free} or None for _, _, symbolic in described]

    stand_ins = {key: (lambda key=key: _cache.Opaque(*key)) for key in opaque} if call.slot is not None else {}
    inputs, dynamic = ([t for _, t in named], tensors), ([None] * len(named), dims(call.tensors))
    if call.slot is not None:
        inputs, dynamic = (*inputs, slot), (*dynamic, dims(call.slot))
    with reading(module, stand_ins) as reads:
        ep = torch.export.export(wrapper, inputs, dynamic_shapes=dynamic, strict=False)
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
    # The first name no running export holds: the same in every export of a process, so its files are the
    # same too (the name reaches the ONNX value names through the FX graph).
    base = type(module).__name__.lower()
    name = next(f"{base}_{i}" for i in itertools.count() if f"{base}_{i}" not in KINDS)
    out_spec, slot_index = out_specs[-1]
    kind = Kind(name, module, [qualname], state_names, spec, is_tensor, constants, in_meta, out_meta,
                out_spec, dict(ep.range_constraints), reads)
    kind.program, kind.wrapper, kind.slot, kind.slot_index = ep, wrapper, call.slot, slot_index
    define(kind)
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
            while isinstance(arg, torch.fx.Node) and arg.op == "call_function" and is_view(arg.target):
                arg = arg.args[0]
            if isinstance(arg, torch.fx.Node) and arg.op == "placeholder":
                return True
    return False


def _plain_spec(spec: pytree.TreeSpec) -> bool:
    return spec.type in _PLAIN and all(_plain_spec(c) for c in spec.children()) if not spec.is_leaf() else True


def _foreign_type(spec: pytree.TreeSpec) -> str:
    if not spec.is_leaf() and spec.type not in _PLAIN:
        return spec.type.__name__
    return next((f for f in map(_foreign_type, spec.children()) if f), "") if not spec.is_leaf() else ""


def _meta(val: torch.Tensor) -> tuple[torch.dtype, list[Any]]:
    return val.dtype, [d.node.expr if isinstance(d, torch.SymInt) else int(d) for d in val.shape]


# -- the op each member calls ----------------------------------------------------------------------


def define(kind: Kind) -> None:
    """The op ``kind`` is called through; defined once per name, it runs whatever kind holds the name."""
    if kind.name not in _DEFINED:
        _LIBRARY.define(f"{kind.name}(Tensor[] inputs) -> Tensor[]")
        _LIBRARY.impl(kind.name, _eager(kind.name), "CompositeExplicitAutograd")
        torch.library.register_fake(f"{_NAMESPACE}::{kind.name}", _fake(kind.name), lib=_LIBRARY)
        _DEFINED.add(kind.name)
    kind.op = getattr(getattr(torch.ops, _NAMESPACE), kind.name).default


def _live(name: str) -> Kind:
    kind = KINDS.get(name)
    if kind is None:
        raise RuntimeError(f"{_NAMESPACE}::{name} is onnxport's stand-in for a block during one export only")
    return kind


def _eager(name: str) -> Callable[[list[torch.Tensor]], list[torch.Tensor]]:
    def run(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        kind = _live(name)
        n, m = len(kind.state_names), len(kind.state_names) + sum(kind.is_tensor)
        slot = inputs[m:] if kind.slot is not None else None
        return [t.clone() for t in kind.wrapper(inputs[:n], inputs[n:m], slot)]

    return run


def _fake(name: str) -> Callable[[list[torch.Tensor]], list[torch.Tensor]]:
    def shapes(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        kind = _live(name)
        tensors = inputs[len(kind.state_names):]
        env = bind(kind, tensors, check=False)
        if env is None:
            raise RuntimeError(f"{_NAMESPACE}::{name} called with inputs its block was not captured for")
        return [tensors[0].new_empty([evaluate(d, env) for d in dims], dtype=dtype) for dtype, dims in kind.out_meta]

    return shapes


def forwarder(kind: Kind, module: torch.nn.Module) -> Callable[..., Any]:
    original = type(module).forward

    def forward(*args: Any, **kwargs: Any) -> Any:
        plain_args, plain_kwargs, cache = _cache.split_cache(args, kwargs) if kind.slot is not None else (
            args, kwargs, None)
        index, slot = _slot_of(kind, module, cache)
        why = _mismatch(kind, plain_args, plain_kwargs, slot)
        if why is not None:
            kind.fallbacks.append(f"a call of {type(module).__name__} traced as usual: {why}")
            return original(module, *args, **kwargs)
        leaves = pytree.tree_leaves((plain_args, plain_kwargs))
        state = [t for _, t in module.named_parameters()] + [t for _, t in module.named_buffers()]
        outs = list(kind.op(state + [x for x in leaves if isinstance(x, torch.Tensor)] + (slot or [])))
        if kind.slot is not None:
            _cache.write_back(cache, index, outs[-2], outs[-1])
            outs = outs[:-2]
        kind.calls += 1
        return rebuild(*kind.out_spec, outs)

    return forward


def _slot_of(kind: Kind, module: torch.nn.Module, cache: Any) -> tuple[int | None, list[torch.Tensor] | None]:
    """The cache slot this layer updates and its keys and values (None: the call does not fit the kind)."""
    if kind.slot is None or cache is None or kind.slot_index is None:
        return None, None
    path, name = kind.slot_index
    index = dict(module.named_modules())[path].__dict__.get(name)
    state = _cache.layer_state(cache, index) if isinstance(index, int) else None
    if not isinstance(index, int) or (state is None) != (not kind.slot):
        return None, None
    return index, state or []


def _mismatch(kind: Kind, args: tuple, kwargs: dict[str, Any], slot: list[torch.Tensor] | None) -> str | None:
    if kind.slot is not None and slot is None:
        return "its cache slot is not the one the captured block was given (filled, or not)"
    leaves, spec = pytree.tree_flatten((args, kwargs))
    if spec != kind.in_spec:
        return "its arguments differ in structure from the captured call"
    if [isinstance(x, torch.Tensor) for x in leaves] != kind.is_tensor:
        return "tensor and constant arguments differ"
    constants = [x for x in leaves if not isinstance(x, torch.Tensor)]
    if any(type(a) is not type(b) or a is not b and a != b for a, b in zip(constants, kind.constants)):
        return "a constant argument differs from the captured call"
    if bind(kind, [x for x in leaves if isinstance(x, torch.Tensor)] + (slot or []), check=True) is None:
        return "a tensor's dtype or size differs from what the captured block allows"
    return None


def first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:200]
