"""AttentionCacheFusePass: the KV-cache append becomes ``Attention``'s own past/present inputs and outputs.

A decoder with a cache computes ``present = Concat(past, new, axis=2)`` for keys and values and attends
over ``present``; opset-23 ``Attention`` takes ``past_key``/``past_value`` and returns the concatenation
as ``present_key``/``present_value``, and onnxruntime runs it without materialising a separate Concat
before the scores.
"""

from __future__ import annotations

import onnx_ir as ir

from onnxport.optimize import _match as m

__all__ = ["AttentionCacheFusePass"]


def _append(value: ir.Value | None) -> ir.Node | None:
    """The ``Concat(past, new)`` along the sequence axis of 4-D (batch, heads, seq, embed) tensors."""
    concat = m.producer(value, "Concat")
    if concat is None or len(concat.inputs) != 2 or any(v is None or v.shape is None for v in concat.inputs):
        return None
    if any(v.shape.rank() != 4 for v in concat.inputs) or m.attr(concat, "axis") not in (2, -2):
        return None
    return concat


def _take_over(old: ir.Value, new: ir.Value) -> None:
    """Every reader of ``old`` (a graph output included, under its name) reads ``new`` instead."""
    name, old.name = old.name, None
    ir.convenience.replace_all_uses_with(old, new, replace_graph_outputs=True)
    new.name = name


class AttentionCacheFusePass(ir.passes.InPlacePass):
    """Move the past-and-new Concat of keys and values into ``Attention``'s past and present slots."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in (model.graph, *model.graph.subgraphs()):
            changed = False
            for node in list(graph):
                if node.op_type != "Attention" or node.domain or len(node.inputs) > 4 or len(node.outputs) != 1:
                    continue
                # is_causal with a past aligns the mask to the last query, torch's to the first
                if m.attr(node, "is_causal", 0):
                    continue
                k, v = _append(node.inputs[1]), _append(node.inputs[2])
                if k is None or v is None:
                    continue
                self._fuse(graph, node, k, v)
                changed = True
            if changed:
                graph.sort()
            modified |= changed
        return ir.passes.PassResult(model, modified)

    @staticmethod
    def _fuse(graph: ir.Graph, node: ir.Node, k: ir.Node, v: ir.Node) -> None:
        q, mask = node.inputs[0], node.inputs[3] if len(node.inputs) > 3 else None
        inputs = [q, k.inputs[1], v.inputs[1], mask, k.inputs[0], v.inputs[0]]
        attrs = [ir.Attr(a.name, a.type, a.value) for a in node.attributes.values()]
        fused = ir.Node("", "Attention", inputs, attrs, num_outputs=3, name=node.name)
        graph.insert_before(node, fused)
        for old, new in zip((node.outputs[0], k.outputs[0], v.outputs[0]), fused.outputs):
            new.dtype, new.shape = old.dtype, old.shape
            _take_over(old, new)
        graph.remove([node, k, v], safe=True)
