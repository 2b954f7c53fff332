"""ConstantFoldPass: structure after the pass, and onnxruntime outputs before and after."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import onnxruntime as ort

from onnxport.optimize.constant_fold import ConstantFoldPass


def _run(model: ir.Model, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    data = ir.serde.serialize_model(model).SerializeToString()
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)


def _model() -> ir.Model:
    """y = Reshape(x, Concat(Shape(x)[0:1] * 2, [-1])) with x of static shape [4, 6], plus a dynamic input."""
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([4, 6]))
    z = ir.Value(name="z", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape(["n"]))
    nodes = []

    def node(op, *inputs, **attrs):
        n = ir.Node("", op, inputs, ir.convenience.convert_attributes(attrs), name=f"n{len(nodes)}")
        n.outputs[0].name = f"v{len(nodes)}"
        nodes.append(n)
        return n.outputs[0]

    shape = node("Shape", x, start=0, end=1)
    two = node("Constant", value=ir.tensor(np.array([2], np.int64)))
    minus1 = node("Constant", value=ir.tensor(np.array([-1], np.int64)))
    target = node("Concat", node("Div", shape, two), minus1, axis=0)
    y = node("Reshape", x, target)
    dyn = node("Shape", z)  # symbolic: must stay
    y.name, dyn.name = "y", "zshape"
    graph = ir.Graph([x, z], [y, dyn], nodes=nodes, opset_imports={"": 21})
    return ir.Model(graph, ir_version=10)


def test_folds_static_shape_arithmetic_and_keeps_dynamic() -> None:
    model = _model()
    feeds = {"x": np.arange(24, dtype=np.float32).reshape(4, 6), "z": np.ones(3, np.float32)}
    before = _run(model, feeds)
    result = ConstantFoldPass()(model)
    assert result.modified
    ops = [n.op_type for n in model.graph]
    assert "Div" not in ops and "Concat" not in ops
    assert ops.count("Shape") == 1  # the one of the dynamic input
    reshape = next(n for n in model.graph if n.op_type == "Reshape")
    assert reshape.inputs[1].producer().op_type == "Constant"
    after = _run(model, feeds)
    for b, a in zip(before, after):
        np.testing.assert_array_equal(a, b)
    assert after[0].shape == (2, 12)
