"""Walks the FX graph of an ExportedProgram once and builds the ONNX model.

Placeholders become graph inputs or initializers (wrapping the tensors' memory, never copying it);
each ``call_function`` node goes to its registered translator; nested GraphModules (``torch.cond``
branches, loop bodies) become subgraphs through ``Ctx.subgraph``.
"""

from __future__ import annotations

import dataclasses
import json
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import onnx_ir as ir
import sympy
import torch
from onnx_ir.tensor_adapters import TorchTensor
from torch.export.graph_signature import InputKind, OutputKind

from onnxport import metadata
from onnxport.errors import BUG_FIX, OnnxportError, TranslationError, location_from_stack_trace
from onnxport.targets import Forms
from onnxport.translate import ops as _ops  # noqa: F401  (registers the built-in translators)
from onnxport.translate.builder import Ctx, Names, onnx_dtype
from onnxport.translate.legalize import legalize_dtypes
from onnxport.translate.ops.complex import complex_translator, is_complex, touches_complex
from onnxport.translate.registry import BUILTIN, Translator, functional_variant, lookup, target_name

__all__ = [
    "DRAWS", "Translated", "is_random", "name_output_dims", "random_outputs", "subgraphs", "translate",
    "translator_for", "untranslated_ops",
]

# torch's standard draws, each one value of the graph that verification can feed (see onnxport.verify.draws)
DRAWS = frozenset((torch.ops.aten.randn.default, torch.ops.aten.randn_like.default, torch.ops.aten.rand.default,
                    torch.ops.aten.rand_like.default))
# Ops whose values differ from run to run (Dropout only with its training_mode input, i.e. in training).
_RANDOM_OPS = frozenset(
    "RandomNormal RandomUniform RandomNormalLike RandomUniformLike Multinomial Bernoulli".split()
)


@dataclasses.dataclass
class Translated:
    """The ONNX model plus how user-level inputs and outputs map onto its graph inputs and outputs."""

    model: ir.Model
    input_used: list[bool]          # per flattened user input: True when it is an ONNX graph input
    output_slots: list[Any]         # per flattened user output: an int (ONNX output index) or ("const", v)


def untranslated_ops(gm: torch.fx.GraphModule, custom: Mapping[Any, Translator] | None = None) -> dict[Any, list[torch.fx.Node]]:
    """Every call target in ``gm`` and its nested subgraphs that has no translator, with its nodes."""
    missing: dict[Any, list[torch.fx.Node]] = {}
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            sub = _attr(gm, node.target)
            if isinstance(sub, torch.fx.GraphModule):
                for target, nodes in untranslated_ops(sub, custom).items():
                    missing.setdefault(target, []).extend(nodes)
        elif node.op == "call_function" and node.target is not operator.getitem:
            if translator_for(node, custom) is None:
                missing.setdefault(node.target, []).append(node)
    return missing


def translator_for(node: torch.fx.Node, custom: Mapping[Any, Translator] | None = None) -> Translator | None:
    """The translator of ``node``: a user's first; for a node with complex tensors, one that knows their
    layout (``ops/complex.py``), never a built-in real one."""
    fn = lookup(node.target, custom)
    if not touches_complex(node) or (fn is not None and all(fn is not b for b in BUILTIN.values())):
        return fn
    found = complex_translator(node.target)
    if found is None and isinstance(node.target, torch._ops.OpOverload):
        functional = functional_variant(node.target)  # mul_ of complex tensors translates as mul
        found = complex_translator(functional) if functional is not None else None
    return found


def _attr(gm: torch.nn.Module, dotted: str) -> Any:
    obj: Any = gm
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


class _GraphTranslator:
    """Translates the nodes of one FX graph into ``ctx.graph``."""

    def __init__(self, ctx: Ctx, gm: torch.fx.GraphModule, custom: Mapping[Any, Translator]):
        self.ctx = ctx
        self.gm = gm
        self.custom = custom
        self.env: dict[torch.fx.Node, Any] = {}

    def run(self, placeholders: Mapping[torch.fx.Node, Any]) -> list[Any]:
        """Translate every node; returns the (unflattened) arguments of the output node."""
        self.env.update(placeholders)
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                if node not in self.env:
                    raise TranslationError(f"placeholder {node.name} has no value", node=node.name, fix=BUG_FIX)
            elif node.op == "get_attr":
                self.env[node] = self._get_attr(node)
            elif node.op == "call_function":
                self._call(node)
            elif node.op == "output":
                out = torch.fx.node.map_arg(node.args[0], self.env.__getitem__)
                return list(out) if isinstance(out, (tuple, list)) else [out]
            else:
                raise TranslationError(f"unexpected FX node kind {node.op!r} ({node.name})", node=node.name,
                                       fix=BUG_FIX)
        raise TranslationError("the FX graph has no output node", fix=BUG_FIX)

    def _get_attr(self, node: torch.fx.Node) -> Any:
        obj = _attr(self.gm, node.target)
        if isinstance(obj, torch.Tensor):
            return self.ctx.const(obj)
        return obj

    def _call(self, node: torch.fx.Node) -> None:
        ctx = self.ctx
        if node.target is operator.getitem and isinstance(self.env.get(node.args[0]), (tuple, list)):
            self.env[node] = self.env[node.args[0]][node.args[1]]
            return
        fn = translator_for(node, self.custom)
        if fn is None:  # the decompose stage reports these before translation starts
            kind = " of complex tensors" if touches_complex(node) else ""
            raise TranslationError(
                f"no translation for {target_name(node.target)}{kind}", node=node.name,
                fix=f"pass custom_translations={{'{target_name(node.target)}': fn}} (docs/custom-ops.md), "
                "or write that line of the model with ops onnxport translates",
            )
        args = torch.fx.node.map_arg(node.args, self.env.__getitem__)
        kwargs = torch.fx.node.map_arg(node.kwargs, self.env.__getitem__)
        ctx.node, ctx._step = node, []
        try:
            result = fn(ctx, *args, **kwargs)
        except OnnxportError:
            raise
        except Exception as exc:
            raise TranslationError(
                f"translating {node.name} = {target_name(node.target)} failed: {type(exc).__name__}: {exc}",
                node=node.name,
                target=target_name(node.target),
                location=location_from_stack_trace(node.meta.get("stack_trace")),
                fix="this is an onnxport bug; please report it with the model. Meanwhile, override the op with "
                "custom_translations={op: fn} (docs/custom-ops.md).",
            ) from exc
        finally:
            ctx.node = None
        self.env[node] = self._finish(node, result)
        if isinstance(node.target, torch._ops.OpOverload) and node.target._schema.is_mutable and node.args:
            first = node.args[0]
            if isinstance(first, torch.fx.Node) and isinstance(result, ir.Value):
                self.env[first] = result  # in-place op: later readers of the input see the new value

    def _finish(self, node: torch.fx.Node, result: Any) -> Any:
        """Name the node's fresh outputs after the FX node and type them from its metadata."""
        val = node.meta.get("val")
        fresh = {id(v) for n in self.ctx._step for v in n.outputs}
        if isinstance(result, ir.Value):
            self._name(result, node.name, val, fresh)
        elif isinstance(result, (tuple, list)):
            vals = val if isinstance(val, (tuple, list)) else [None] * len(result)
            for i, (r, v) in enumerate(zip(result, vals)):
                if isinstance(r, ir.Value):
                    self._name(r, f"{node.name}_{i}", v, fresh)
        return result

    def _name(self, value: ir.Value, name: str, val: Any, fresh: set[int]) -> None:
        if id(value) not in fresh:
            return
        value.name = self.ctx.names.unique(name)
        self.ctx.set_type(value, val)


def _inline(ctx: Ctx, gm: torch.fx.GraphModule, bind: list[Any]) -> list[Any]:
    """``Ctx.inline``: translate a nested torch graph into ``ctx``'s graph."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(bind):
        raise TranslationError(f"a subgraph of {ctx.graph.name} takes {len(placeholders)} inputs, given {len(bind)}",
                               fix=BUG_FIX)
    results = _GraphTranslator(ctx, gm, ctx.custom).run(dict(zip(placeholders, bind)))
    return torch.utils._pytree.tree_leaves(results)


def translate(
    ep: torch.export.ExportedProgram,
    *,
    opset: int,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    custom: Mapping[Any, Translator] | None = None,
    custom_opsets: Mapping[str, int] | None = None,
    dim_names: Mapping[str, str] | None = None,
    weights: Mapping[str, ir.TensorProtocol] | None = None,
    forms: Forms | None = None,
) -> Translated:
    """Translate ``ep`` into an ONNX model of the given opset.

    ``dim_names`` maps torch's shape symbols (``"s17"``) to ONNX dim names (``"batch"``); symbolic dims
    of inputs, outputs and intermediate values are written with them (``"2*batch"``). ``weights`` gives
    the initializer of a state-dict entry instead of its tensor in ``ep`` (weights streamed from a file).
    ``forms`` says which fused ops the export's target runs right (default: the default target's).
    """
    gm = ep.graph_module
    names = Names()
    graph = ir.Graph([], [], nodes=[], opset_imports={"": opset}, name="main_graph")
    ctx = Ctx(graph, opset=opset, names=names, inline_fn=_inline, custom=custom, dim_name=_dim_namer(dim_names or {}),
              forms=forms)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    specs = ep.graph_signature.input_specs
    bound: dict[torch.fx.Node, Any] = {}
    input_used: list[bool] = []
    user_inputs = [(n, s) for n, s in zip(placeholders, specs) if s.kind == InputKind.USER_INPUT]
    tensor_inputs = [n for n, _ in user_inputs if isinstance(n.meta.get("val"), (torch.Tensor, torch.SymInt))]
    params = [n for n, s in zip(placeholders, specs) if s.kind == InputKind.PARAMETER and n.users]
    input_names = list(input_names or [])
    if len(input_names) > len(tensor_inputs) + len(params):
        from onnxport.errors import InvalidInputError

        raise InvalidInputError(
            f"input_names has {len(input_names)} names but the model takes {len(tensor_inputs)} tensor inputs "
            f"({', '.join(n.name for n in tensor_inputs)}) and has {len(params)} parameters",
            fix="give one name per tensor in the flattened (args, kwargs); names past the inputs name the parameters",
        )
    # A shorter list names the first inputs; names past the inputs name the parameters, in order.
    chosen = dict(zip(tensor_inputs + params, input_names))
    by_key = input_leaf_names(ep.call_spec.in_spec)
    if len(by_key) == len(user_inputs):
        chosen = {**{n: name for (n, _), name in zip(user_inputs, by_key) if name}, **chosen}
    leaf_names = list(output_names) if output_names is not None else output_leaf_names(ep.call_spec.out_spec)
    if output_names is None:  # an output named as an input (Grounding DINO returns its input_ids): the input keeps
        # its name, which consumers feed it by; the output is "output.<name>"
        inputs = {chosen.get(n) or n.name for n, s in zip(placeholders, specs) if s.kind == InputKind.USER_INPUT}
        leaf_names = [f"output.{name}" if name in inputs else name for name in leaf_names]
    for name in list(chosen.values()) + leaf_names:
        names.reserve(name)
    for node, spec in zip(placeholders, specs):
        if spec.kind == InputKind.USER_INPUT:
            val = node.meta.get("val")
            if isinstance(val, (torch.Tensor, torch.SymInt)):
                value = ir.Value(name=chosen.get(node) or names.unique(node.name))
                ctx.set_type(value, val)
                graph.inputs.append(value)
                bound[node] = value
                input_used.append(True)
            else:
                bound[node] = val
                input_used.append(False)
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            if not node.users:  # e.g. BatchNorm's num_batches_tracked: no initializer for it
                bound[node] = None
                continue
            tensor = ep.state_dict[spec.target] if spec.target in ep.state_dict else ep.constants[spec.target]
            tensor = (weights or {}).get(spec.target, tensor)
            bound[node] = _initializer(graph, chosen.get(node) or names.unique(spec.target), tensor)
        elif spec.kind == InputKind.TOKEN:
            bound[node] = None
        else:
            raise TranslationError(
                f"input {node.name} is a {spec.kind.name}, which ONNX cannot hold",
                fix="pass tensors, or lists/tuples/dicts of tensors, as model inputs and state",
            )
    translator = _GraphTranslator(ctx, gm, ctx.custom)
    results = translator.run(bound)
    flat = torch.utils._pytree.tree_leaves(results, is_leaf=lambda x: x is None)
    out_specs = ep.graph_signature.output_specs
    user_flat = [r for r, s in zip(flat, out_specs) if s.kind == OutputKind.USER_OUTPUT]
    output_slots = _add_outputs(ctx, user_flat, output_names, leaf_names)
    narrowed: set[str] = set()
    legalize_dtypes(graph, opset, narrowed)
    model = ir.Model(graph, ir_version=10, producer_name="onnxport", producer_version=_version())  # set at the end
    if narrowed:
        metadata.write_names(model, metadata.FLOAT64_AS_FLOAT32, sorted(narrowed))
    random = random_outputs(graph)
    if random:
        metadata.write_names(model, metadata.RANDOM_OUTPUTS, random)
        draws = [translator.env[n] for n in gm.graph.nodes if n.op == "call_function" and n.target in DRAWS]
        if draws and all(isinstance(v, ir.Value) and v.name for v in draws):
            metadata.write_names(model, metadata.RANDOM_DRAWS, [v.name for v in draws])
    complex_inputs = [bound[n].name for n in tensor_inputs if is_complex(n.meta.get("val"))]
    complex_outputs = [graph.outputs[slot].name for slot, val in zip(output_slots, _output_vals(gm, out_specs))
                       if isinstance(slot, int) and is_complex(val)]
    for key, names_ in ((metadata.COMPLEX_INPUTS, complex_inputs), (metadata.COMPLEX_OUTPUTS, complex_outputs)):
        if names_:
            metadata.write_names(model, key, names_)
    ranges = _dim_ranges(ep, ctx.dim_name)
    if ranges:
        model.metadata_props[metadata.DIM_RANGES] = ranges
    for domain, version in ctx.domains.items():
        graph.opset_imports.setdefault(domain, (custom_opsets or {}).get(domain, version))
    return Translated(model, input_used, output_slots)


def _output_vals(gm: torch.fx.GraphModule, specs: Sequence[Any]) -> list[Any]:
    """``meta["val"]`` of each user output of ``gm`` (None for a non-node output)."""
    out = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    leaves = torch.utils._pytree.tree_leaves(out.args[0], is_leaf=lambda x: x is None)
    vals = [leaf.meta.get("val") if isinstance(leaf, torch.fx.Node) else leaf for leaf in leaves]
    return [v for v, s in zip(vals, specs) if s.kind == OutputKind.USER_OUTPUT]


def output_leaf_names(spec: torch.utils._pytree.TreeSpec) -> list[str]:
    """Default output names from the output structure: ``output`` for a lone tensor, ``output_0``...
    for a tuple, dict keys and attribute names (``logits``, ``parts_1``) for mappings and model outputs."""
    pytree = torch.utils._pytree
    try:
        dummy = pytree.tree_unflatten(list(range(spec.num_leaves)), spec)
        paths = [path for path, _ in pytree.tree_flatten_with_path(dummy)[0]]
    except Exception:  # noqa: BLE001 - a container type without key paths: keep the FX names
        return []
    names = []
    for path in paths:
        named = _named_by_key(path, output=True)
        if named is not None:
            names.append(named)
            continue
        parts = [str(getattr(k, "key", getattr(k, "idx", getattr(k, "name", k)))) for k in path]
        if not parts or isinstance(path[0], pytree.SequenceKey):
            parts.insert(0, "output")
        names.append(re.sub(r"\W", "_", "_".join(parts)))
    return names if len(set(names)) == len(names) else []


def input_leaf_names(spec: torch.utils._pytree.TreeSpec) -> list[str | None]:
    """Per flattened input, the name a pytree key gives it (``past_key_values.0.key`` below a KV-cache
    layer), else None (the FX placeholder's name is used); empty when the structure has no key paths."""
    pytree = torch.utils._pytree
    try:
        dummy = pytree.tree_unflatten(list(range(spec.num_leaves)), spec)
        return [_named_by_key(path, output=False) for path, _ in pytree.tree_flatten_with_path(dummy)[0]]
    except Exception:  # noqa: BLE001 - a container type without key paths
        return []


def _named_by_key(path: Sequence[Any], *, output: bool) -> str | None:
    """The name given by the first key of ``path`` that names the leaves below it (``leaf_name``)."""
    for i, key in enumerate(path):
        if callable(getattr(key, "leaf_name", None)):
            return key.leaf_name(tuple(path[i + 1 :]), output)
    return None


def _add_outputs(
    ctx: Ctx, results: list[Any], output_names: Sequence[str] | None, leaf_names: Sequence[str]
) -> list[Any]:
    graph = ctx.graph
    onnx_results = [r for r in results if isinstance(r, ir.Value)]
    if output_names is not None and len(output_names) != len(onnx_results):
        from onnxport.errors import InvalidInputError

        raise InvalidInputError(
            f"output_names has {len(output_names)} names but the model returns {len(onnx_results)} tensors",
            fix="give one name per tensor in the flattened output",
        )
    if not onnx_results:
        from onnxport.errors import InvalidInputError

        raise InvalidInputError(
            f"the model returns no tensor for these inputs, only constants ({results!r}): an ONNX model would compute nothing",
            fix="return tensors; for sizes computed from input shapes, export with dynamic_shapes so they stay symbolic",
        )
    names = iter(output_names or [])
    slots: list[Any] = []
    seen: set[int] = set()
    for i, r in enumerate(results):
        if not isinstance(r, ir.Value):
            slots.append(("const", r))
            continue
        value = ctx.output_value(r, seen)
        # Both kinds of names were reserved up front, so no other value holds them.
        if output_names:
            value.name = next(names)
        elif len(leaf_names) == len(results):
            value.name = leaf_names[i]
        slots.append(len(graph.outputs))
        graph.outputs.append(value)
    return slots


def random_outputs(graph: ir.Graph) -> list[str]:
    """Names of the outputs of ``graph`` that depend on a random node (in it or in a subgraph)."""
    tainted: set[int] = set()
    _taint(graph, tainted)
    return [v.name for v in graph.outputs if id(v) in tainted]


def _taint(graph: ir.Graph, tainted: set[int]) -> bool:
    """Add the ids of the values of ``graph`` that random nodes feed to ``tainted``; True if there are any.
    A node with subgraphs counts as random when one holds a random node or reads a tainted value."""
    found = False
    for node in graph:
        random = is_random(node) or any(id(v) in tainted for v in node.inputs if v is not None)
        for sub in subgraphs(node):
            random = _taint(sub, tainted) or random
        if random:
            tainted.update(id(v) for v in node.outputs)
            found = True
    return found


def subgraphs(node: ir.Node) -> list[ir.Graph]:
    """The graphs the node's attributes hold (an If's branches, a Loop's body)."""
    found = []
    for attr in node.attributes.values():
        found.extend({ir.AttributeType.GRAPH: [attr.value], ir.AttributeType.GRAPHS: attr.value}.get(attr.type, []))
    return found


def is_random(node: ir.Node) -> bool:
    if node.domain not in ("", "ai.onnx"):
        return False
    training = node.op_type == "Dropout" and len(node.inputs) > 2 and node.inputs[2] is not None
    return node.op_type in _RANDOM_OPS or training


def _initializer(graph: ir.Graph, name: str, tensor: torch.Tensor | ir.TensorProtocol) -> ir.Value:
    if isinstance(tensor, torch.Tensor):
        tensor = tensor.detach()
        if tensor.is_complex():  # the graph's complex layout, a view of the same memory
            tensor = torch.view_as_real(tensor.resolve_conj())
        if not tensor.is_contiguous():
            tensor = tensor.contiguous()
        onnx_dtype(tensor.dtype)  # refuses the dtypes ONNX lacks
        tensor = TorchTensor(tensor)
    tensor.name = name
    value = ir.Value(name=name, const_value=tensor)
    value.dtype = tensor.dtype
    value.shape = ir.Shape(tensor.shape)
    graph.register_initializer(value)
    return value


def name_output_dims(model: ir.Model, axes: Mapping[str, Mapping[int, str]]) -> None:
    """Give output dims the names torch.onnx-style ``dynamic_axes`` asked for (``{"y": {0: "batch"}}``)."""
    outputs = {v.name: v for v in model.graph.outputs}
    for name, dims in axes.items():
        value = outputs.get(name)
        if value is None or value.shape is None:
            continue
        shape = list(value.shape.dims)
        for axis, dim_name in dims.items():
            if -len(shape) <= axis < len(shape) and not isinstance(shape[axis], int):
                shape[axis] = ir.SymbolicDim(dim_name)
        value.shape = ir.Shape(shape)


def _dim_namer(names: Mapping[str, str]) -> Callable[[Any], str]:
    """``expr -> str`` with torch's shape symbols renamed (``2*s17`` -> ``2*batch``)."""

    def name(expr: Any) -> str:
        symbols = getattr(expr, "free_symbols", ())
        subs = {s: sympy.Symbol(names[str(s)]) for s in symbols if str(s) in names}
        return str(expr.xreplace(subs)) if subs else str(expr)

    return name


def _dim_ranges(ep: torch.export.ExportedProgram, dim_name: Callable[[Any], str]) -> str:
    """The symbolic sizes' ranges, as JSON ``{"batch": [2, 64], ...}`` (``null`` for unbounded)."""
    ranges = {}
    for symbol, bounds in ep.range_constraints.items():
        lower, upper = bounds.lower, bounds.upper
        ranges[dim_name(symbol)] = [_bound(lower), _bound(upper)]
    return json.dumps(dict(sorted(ranges.items()))) if ranges else ""


def _bound(value: Any) -> int | None:
    try:
        number = int(value)
    except Exception:  # noqa: BLE001 - sympy's and torch's infinities refuse int() in several ways
        return None
    return number if abs(number) < 2**62 else None


def _version() -> str:
    from onnxport.versions import __version__

    return __version__
