"""SameShapePass: Shape of values with the same named sizes is computed once."""

from __future__ import annotations

import onnx_ir as ir

from onnxport.optimize.same_shape import SameShapePass


def _model(shapes: list[list]) -> tuple[ir.Model, list[ir.Node]]:
    inputs = [ir.Value(name=f"x{i}", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape(s))
              for i, s in enumerate(shapes)]
    nodes = [ir.node("Shape", [x], num_outputs=1) for x in inputs]
    outputs = [n.outputs[0] for n in nodes]
    for i, out in enumerate(outputs):
        out.name = f"shape{i}"
    add = ir.node("Concat", outputs, attributes={"axis": 0}, num_outputs=1)
    add.outputs[0].name = "out"
    graph = ir.Graph(inputs, [add.outputs[0]], nodes=[*nodes, add], opset_imports={"": 23})
    return ir.Model(graph, ir_version=10), nodes


def test_same_named_sizes_share_one_shape():
    model, nodes = _model([["batch", "seq", 8], ["batch", "seq", 8], ["batch", "seq + past", 8]])
    result = SameShapePass()(model)
    assert result.modified
    concat = model.graph[-1]
    assert concat.inputs[0] is concat.inputs[1] is nodes[0].outputs[0]
    assert concat.inputs[2] is nodes[2].outputs[0]  # another size: its own Shape


def test_unnamed_or_static_sizes_keep_their_shape():
    model, nodes = _model([["batch", None], ["batch", None], [2, 3], [2, 3]])
    assert not SameShapePass()(model).modified
    assert [v.producer() for v in model.graph[-1].inputs] == nodes
