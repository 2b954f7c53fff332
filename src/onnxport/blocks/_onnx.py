"""A kind's translated graph as an ONNX function, and the node each call of it becomes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import onnx_ir as ir

from onnxport.blocks._kind import DOMAIN, Kind, NotReusable

__all__ = ["as_function", "translator"]


def translator(kind: Kind) -> Callable[..., Any]:
    outputs = len(kind.out_meta)

    def translate(ctx: Any, inputs: list[Any]) -> Any:
        result = ctx.emit(kind.name, list(inputs), {}, num_outputs=outputs, domain=DOMAIN)
        return [result] if outputs == 1 else list(result)

    return translate


def as_function(model: ir.Model, name: str) -> ir.Function:
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
