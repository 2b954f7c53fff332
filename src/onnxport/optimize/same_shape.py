"""SameShapePass: ``Shape`` of values whose sizes are known to be the same is computed once.

Every dim of a value is an int or a named symbolic size (``batch_size``, ``past_sequence_length +
sequence_length``) from torch's own reasoning about shapes, so two values with the same names have the
same sizes at run time. A ``Shape`` of the second then reads the first's; CSE merges what follows (the
``Gather`` of one dim, the ``Concat`` of a reshape's target), so size arithmetic a model repeats per layer
(each layer reshaping its own activations) runs once. Dims without a name keep their ``Shape``.
"""

from __future__ import annotations

import onnx_ir as ir

__all__ = ["SameShapePass"]


class SameShapePass(ir.passes.InPlacePass):
    """Replace each ``Shape`` whose input has the named sizes of an earlier ``Shape``'s input by that one."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        seen: dict[tuple, ir.Value] = {}
        modified = False
        for node in model.graph:  # the main graph only: a subgraph's value may not reach the next one
            if node.op_type != "Shape" or node.domain not in ("", "ai.onnx") or not node.inputs:
                continue
            key = _key(node)
            if key is None:
                continue
            first = seen.setdefault(key, node.outputs[0])
            if first is not node.outputs[0]:
                node.outputs[0].replace_all_uses_with(first)
                modified = True
        return ir.passes.PassResult(model, modified)


def _key(node: ir.Node) -> tuple | None:
    shape = node.inputs[0].shape if node.inputs[0] is not None else None
    if shape is None:
        return None
    dims = []
    for dim in shape:
        if isinstance(dim, int):
            dims.append(dim)
        elif dim.value is None:
            return None
        else:
            dims.append(dim.value)
    if all(isinstance(d, int) for d in dims):
        return None  # a static shape: constant folding makes it a constant
    start = node.attributes.get("start")
    end = node.attributes.get("end")
    return (start.as_int() if start else 0, end.as_int() if end else None, tuple(dims))
