"""MainIdentityPass: an ``Identity`` of the main graph is removed, its readers reading its input.

onnxruntime's own identity elimination (its default level) left the reader of a removed ``Identity`` of a
graph input dangling ("not a graph input, initializer, or output of a previous node"), so the file failed
to load where users run it. Subgraphs keep theirs: an ``If`` branch returns an outer value through one
(onnxruntime refuses a branch whose output is an outer value itself), and so does an ``Identity`` whose
output is a graph output.
"""

from __future__ import annotations

import onnx_ir as ir

__all__ = ["MainIdentityPass"]


class MainIdentityPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        kept = set(graph.outputs) | _subgraph_outputs(graph)
        modified = False
        for node in list(graph):
            if node.op_type != "Identity" or node.domain not in ("", "ai.onnx") or len(node.inputs) != 1:
                continue
            source, result = node.inputs[0], node.outputs[0]
            if source is None or result in kept:
                continue
            result.replace_all_uses_with(source)
            graph.remove(node, safe=True)
            modified = True
        return ir.passes.PassResult(model, modified)


def _subgraph_outputs(graph: ir.Graph) -> set[ir.Value]:
    """The values every subgraph (at any depth) returns."""
    found: set[ir.Value] = set()
    for node in ir.traversal.RecursiveGraphIterator(graph):
        for attr in node.attributes.values():
            if attr.type == ir.AttributeType.GRAPH:
                found.update(attr.value.outputs)
            elif attr.type == ir.AttributeType.GRAPHS:
                for sub in attr.value:
                    found.update(sub.outputs)
    return found
