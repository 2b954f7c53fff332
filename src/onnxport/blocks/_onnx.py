"""A kind's translated graph, and the nodes each call of it becomes in the model's graph.

The kind is translated once, with its size symbols named by tokens (``@s3@``). Each call copies the
graph's nodes into the model's graph, reading that call's inputs, with every size written in the model's
own dim names (``@s3@`` -> ``batch_size``), so the copy is what translating the layer in place gives and
the optimizer's passes see the same graph. A kind whose graph holds subgraphs (If, Loop) becomes an ONNX
function instead, called once per layer and inlined by ``onnx_ir`` after translation.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import onnx_ir as ir
import sympy
import torch

from onnxport import metadata
from onnxport.blocks._kind import DOMAIN, Kind, NotReusable
from onnxport.blocks._shapes import bind

__all__ = ["as_function", "prepare_graph", "token", "translator", "uses_function"]

def token(symbol: Any) -> str:
    """The dim name a kind's size symbol gets in its own translation."""
    return f"@{symbol}@"


def prepare_graph(model: ir.Model) -> ir.Graph:
    """The kind's translated graph with its initializers as Constant nodes (a copy per call, or a function,
    holds no initializers)."""
    for key in (metadata.RANDOM_OUTPUTS, metadata.COMPLEX_INPUTS, metadata.COMPLEX_OUTPUTS):
        if key in model.metadata_props:
            raise NotReusable("it has random or complex values")
    graph = model.graph
    constants = []
    for value in list(graph.initializers.values()):
        node = ir.node("Constant", [], attributes={"value": value.const_value}, num_outputs=1)
        node.outputs[0].name = value.name
        node.outputs[0].dtype = value.dtype
        node.outputs[0].shape = value.shape
        value.replace_all_uses_with(node.outputs[0])
        constants.append(node)
    graph.initializers.clear()
    if constants:
        graph.insert_before(graph[0], constants) if len(graph) else graph.extend(constants)
    return graph


def _has_subgraphs(graph: ir.Graph) -> bool:
    return any(attr.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
               for node in graph for attr in node.attributes.values())


def translator(kind: Kind) -> Callable[..., Any]:
    """The translation of one call: a copy of the kind's graph, or a call of its function."""
    if _has_subgraphs(kind.graph):
        outputs = len(kind.out_meta)

        def call(ctx: Any, inputs: list[Any]) -> Any:
            result = ctx.emit(kind.name, list(inputs), {}, num_outputs=outputs, domain=DOMAIN)
            return [result] if outputs == 1 else list(result)

        return call

    def copy(ctx: Any, inputs: list[Any]) -> Any:
        graph = kind.graph
        for domain, version in graph.opset_imports.items():
            if domain:
                ctx.domains.setdefault(domain, version)
        names = _dim_names(kind, ctx)
        values: dict[int, ir.Value] = {id(a): b for a, b in zip(graph.inputs, inputs)}
        prefix = ctx.node.name if ctx.node is not None else kind.name
        for node in graph:
            clone = ir.Node(
                node.domain, node.op_type, [values[id(v)] if v is not None else None for v in node.inputs],
                list(node.attributes.values()), num_outputs=len(node.outputs), overload=node.overload,
                name=ctx.names.unique(f"{prefix}__{node.name or node.op_type}"),
            )
            for old, new in zip(node.outputs, clone.outputs):
                new.name = ctx.names.unique(f"{prefix}__{old.name}")
                new.dtype = old.dtype
                new.shape = _renamed(old.shape, names)
                values[id(old)] = new
            ctx.graph.append(clone)
            ctx._step.append(clone)
        return [values[id(v)] for v in graph.outputs]

    return copy


def _dim_names(kind: Kind, ctx: Any) -> Callable[[str], int | str | None]:
    """The kind's dim names (``2*@s3@``) -> this call's: an int, or the name the model's own translation
    gives the same size (``2*batch_size``); None where a size of the kind has no counterpart."""
    vals = [arg.meta.get("val") for arg in ctx.node.args[0]] if ctx.node is not None else []
    env = bind(kind, vals[len(kind.state_names):], check=False) or {}
    subs = {sympy.Symbol(str(symbol)): size.node.expr if isinstance(size, torch.SymInt) else sympy.Integer(size)
            for symbol, size in env.items()}
    names: dict[str, int | str | None] = {}

    def name(text: str) -> int | str | None:
        if text not in names:
            expr = _parsed(kind, text)
            if expr is None or not expr.free_symbols <= subs.keys():
                names[text] = None
            else:
                expr = expr.xreplace(subs)
                names[text] = int(expr) if expr.is_Integer else ctx.dim_name(expr)
        return names[text]

    return name


def _parsed(kind: Kind, text: str) -> sympy.Expr | None:
    """A dim name of the kind's translation as an expression of its size symbols (by name)."""
    cache = kind.__dict__.setdefault("_parsed_dims", {})
    if text not in cache:
        try:
            cache[text] = sympy.sympify(re.sub(r"@([^@]+)@", r"\1", text)) if "@" in text else None
        except (sympy.SympifyError, SyntaxError, TypeError):
            cache[text] = None
    return cache[text]


def _renamed(shape: ir.Shape | None, name: Callable[[str], int | str | None]) -> ir.Shape | None:
    if shape is None:
        return None
    return ir.Shape([dim if isinstance(dim, int) else None if dim.value is None else name(dim.value)
                     for dim in shape])


def as_function(graph: ir.Graph, name: str) -> ir.Function:
    """The kind's graph as an ONNX function: outputs that are inputs pass through Identity, and values keep
    their static sizes, not the kind's size names."""
    inputs = {id(v) for v in graph.inputs}
    for i, value in enumerate(list(graph.outputs)):
        if id(value) in inputs or value.producer() is None:
            node = ir.node("Identity", [value], num_outputs=1)
            node.outputs[0].name = f"{value.name}_out"
            graph.append(node)
            graph.outputs[i] = node.outputs[0]
    for value in [*graph.inputs, *(v for node in graph.all_nodes() for v in node.outputs)]:
        if value.shape is not None:
            value.shape = ir.Shape([d if isinstance(d, int) else None for d in value.shape])
    graph.name = name
    return ir.Function(DOMAIN, name, "", graph=graph, attributes=[])


def uses_function(kind: Kind) -> bool:
    """Whether the kind's calls are function calls (its graph holds subgraphs), inlined after translation."""
    return _has_subgraphs(kind.graph)
