"""ConstantFoldPass: evaluate small nodes whose inputs are all constants, and Shape/Size of static values.

Only cheap integer/shape-style computations are folded (a size limit keeps weights out): what remains
after translation of symbolic-size arithmetic whose static parts are known at export time. Quantization ops
are never folded, nor is anything that reads integer codes through a Cast into float: a
``DequantizeLinear`` (or Cast) of a constant int8/int4 weight folded into a float constant would undo the
quantization, and onnxruntime fuses the dequantization into its integer kernels.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx_ir as ir

from onnxport.optimize import _match as m

__all__ = ["ConstantFoldPass"]

_MAX_ELEMENTS = 1024
_QUANTIZATION = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"})
_CODES = frozenset({ir.DataType.INT4, ir.DataType.UINT4, ir.DataType.INT8, ir.DataType.UINT8})
_FLOATS = frozenset({ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16, ir.DataType.DOUBLE})


def _attr(node: ir.Node, name: str, default: object = None) -> object:
    attr = node.attributes.get(name)
    return default if attr is None else attr.value


def _slice(node: ir.Node, x: np.ndarray, starts, ends, axes=None, steps=None) -> np.ndarray:
    axes = range(len(starts)) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    index = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        index[int(a)] = slice(int(s), int(e), int(st))
    return x[tuple(index)]


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.issubdtype(a.dtype, np.integer):
        return (np.trunc(a / b)).astype(a.dtype)  # ONNX integer Div truncates toward zero
    return (a / b).astype(a.dtype)


_EVAL: dict[str, Callable[..., np.ndarray]] = {
    "Add": lambda n, a, b: a + b,
    "Sub": lambda n, a, b: a - b,
    "Mul": lambda n, a, b: a * b,
    "Div": lambda n, a, b: _div(a, b),
    "Neg": lambda n, a: -a,
    "Abs": lambda n, a: np.abs(a),
    "Min": lambda n, *xs: np.minimum.reduce(xs) if len(xs) > 1 else xs[0],
    "Max": lambda n, *xs: np.maximum.reduce(xs) if len(xs) > 1 else xs[0],
    "Equal": lambda n, a, b: np.equal(a, b),
    "Less": lambda n, a, b: np.less(a, b),
    "Greater": lambda n, a, b: np.greater(a, b),
    "LessOrEqual": lambda n, a, b: np.less_equal(a, b),
    "GreaterOrEqual": lambda n, a, b: np.greater_equal(a, b),
    "Xor": lambda n, a, b: np.logical_xor(a, b),
    "Expand": lambda n, a, s: a * np.ones([int(d) for d in s], dtype=a.dtype),
    "Transpose": lambda n, a: np.transpose(a, _attr(n, "perm")),
    "Tile": lambda n, a, r: np.tile(a, [int(d) for d in r]),
    "Trilu": lambda n, a, k=None: (np.triu if _attr(n, "upper", 1) else np.tril)(a, int(k) if k is not None else 0),
    "Not": lambda n, a: np.logical_not(a),
    "And": lambda n, a, b: np.logical_and(a, b),
    "Or": lambda n, a, b: np.logical_or(a, b),
    "Where": lambda n, c, a, b: np.where(c, a, b),
    "Identity": lambda n, a: a,
    "Cast": lambda n, a: a.astype(ir.DataType(_attr(n, "to")).numpy()),
    "Concat": lambda n, *xs: np.concatenate(xs, axis=int(_attr(n, "axis", 0))),
    "Unsqueeze": lambda n, a, axes: np.expand_dims(a, tuple(int(i) % (a.ndim + len(axes)) for i in axes)),
    "Squeeze": lambda n, a, axes=None: np.squeeze(a) if axes is None else np.squeeze(a, tuple(int(i) % a.ndim for i in axes)),
    "Gather": lambda n, a, i: np.take(a, i, axis=int(_attr(n, "axis", 0))),
    "Reshape": lambda n, a, s: a.reshape([a.shape[i] if d == 0 else int(d) for i, d in enumerate(s)]),
    "Slice": _slice,
    "Range": lambda n, s, e, d: np.arange(s, e, d, dtype=s.dtype),
    "ConstantOfShape": lambda n, s: np.full(
        [int(d) for d in s],
        _attr(n, "value").numpy().reshape(()) if _attr(n, "value") is not None else np.float32(0),
    ),
}


def _constant(value: ir.Value | None) -> np.ndarray | None:
    """The value's array when it comes from a Constant node (weights are left alone)."""
    if value is None:
        return None
    producer = value.producer()
    if producer is None or producer.op_type != "Constant" or producer.domain:
        return None
    tensor = m.const_tensor(value)
    return None if tensor is None else tensor.numpy()


def _static_shape(value: ir.Value) -> list[int] | None:
    if value.shape is None or not all(isinstance(d, int) for d in value.shape.dims):
        return None
    return [int(d) for d in value.shape.dims]


class ConstantFoldPass(ir.passes.InPlacePass):
    """Replace foldable nodes by Constant nodes, in every graph of the model."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in (model.graph, *model.graph.subgraphs()):
            for node in list(graph):
                folded = self._fold(node)
                if folded is None:
                    continue
                out = node.outputs[0]
                const = ir.Node("", "Constant", [], [ir.AttrTensor("value", ir.tensor(folded))], name=f"{node.name}_folded")
                graph.insert_before(node, const)
                const.outputs[0].name = out.name
                const.outputs[0].dtype = ir.DataType.from_numpy(folded.dtype)
                const.outputs[0].shape = ir.Shape(folded.shape)
                out.name = None
                ir.convenience.replace_all_uses_with(out, const.outputs[0], replace_graph_outputs=True)
                graph.remove(node, safe=True)
                modified = True
        return ir.passes.PassResult(model, modified)

    @staticmethod
    def _fold(node: ir.Node) -> np.ndarray | None:
        if node.domain or len(node.outputs) != 1:
            return None
        if node.op_type in ("Shape", "Size") and node.inputs[0] is not None:
            shape = _static_shape(node.inputs[0])
            if shape is None:
                return None
            if node.op_type == "Size":
                return np.array(int(np.prod(shape)), dtype=np.int64)
            start, end = _attr(node, "start", 0), _attr(node, "end", None)
            return np.array(shape[slice(start, end)], dtype=np.int64)
        fn = _EVAL.get(node.op_type)
        if fn is None or node.op_type in _QUANTIZATION or _dequantizes(node):
            return None
        inputs = [_constant(v) if v is not None else None for v in node.inputs]
        if any(a is None for a, v in zip(inputs, node.inputs) if v is not None):
            return None
        if any(a is not None and a.size > _MAX_ELEMENTS for a in inputs):
            return None
        try:
            result = np.asarray(fn(node, *inputs))
        except Exception:  # noqa: BLE001 - anything numpy refuses is simply left to run time
            return None
        if result.size > _MAX_ELEMENTS or (node.outputs[0].dtype is not None and result.dtype != node.outputs[0].dtype.numpy()):
            return None
        return result


def _dequantizes(node: ir.Node) -> bool:
    """A Cast of integer codes (int8/uint8/int4) into a float type: a weight's dequantization, kept as written."""
    if node.op_type != "Cast" or not node.inputs or node.inputs[0] is None:
        return False
    return node.inputs[0].dtype in _CODES and ir.DataType(_attr(node, "to")) in _FLOATS
