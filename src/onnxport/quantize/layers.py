"""The linear layers of an exported model, as every quantizer finds them.

A linear layer is ``output = x @ W^T + bias`` with a constant 2-D float weight, in one of the forms onnxport
writes (``Gemm(transB=1)`` in older files, ``MatMul`` on the weight stored transposed, ``MatMul`` of the
``Transpose`` of a weight shared with an embedding).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir

from onnxport.optimize._match import attr, producer

__all__ = ["Linear", "const_dims", "find_linear", "linear_layers", "shared"]

_FLOATS = (ir.DataType.FLOAT, ir.DataType.FLOAT16)




@dataclasses.dataclass
class Linear:
    """A linear layer ``output = x @ W^T + bias`` with a constant 2-D float weight, in one of the forms
    onnxport writes:

    - ``Gemm(x, W[N, K], bias, transB=1)`` (or ``transB=0`` with ``W[K, N]``);
    - ``MatMul(x, W[K, N])``, ``W`` an initializer, and ``Add(bias)`` after it when the bias is a
      constant ``[N]`` and the MatMul's only reader;
    - ``MatMul(x, Transpose(W[N, K]))`` (a weight shared with an embedding), ``Add(bias)`` likewise.

    ``nodes`` are those the quantized layer replaces (the Gemm, or the MatMul and its Add; a Transpose
    goes when nothing else reads it), ``output`` the value it computes."""

    x: ir.Value
    weight: ir.Value
    transposed: bool  # the initializer is [K, N] rather than [N, K]
    bias: ir.Value | None
    nodes: list[ir.Node]
    output: ir.Value

    @property
    def name(self) -> str:
        return self.weight.name or "?"

    def weight_nk(self) -> np.ndarray:
        """The weight as PyTorch holds it, ``[N (out), K (in)]``."""
        array = np.asarray(self.weight.const_value.numpy())
        return array.T if self.transposed else array


def find_linear(graph: ir.Graph, node: ir.Node) -> Linear | None:
    """The linear layer whose product ``node`` is (a ``Gemm`` or ``MatMul``), else None."""
    if node.domain or node.op_type not in ("Gemm", "MatMul") or len(node.inputs) < 2:
        return None
    x, b = node.inputs[0], node.inputs[1]
    if x is None or b is None:
        return None
    if node.op_type == "Gemm":
        if attr(node, "transA", 0) or attr(node, "alpha", 1.0) != 1.0:
            return None
        bias = node.inputs[2] if len(node.inputs) > 2 else None
        if bias is not None and attr(node, "beta", 1.0) != 1.0:
            return None
        weight, transposed = _initializer(graph, b), not attr(node, "transB", 0)
        if weight is None or not _same_dtype(x, weight):
            return None
        return Linear(x, weight, transposed, bias, [node], node.outputs[0])
    weight, transposed = _initializer(graph, b), True
    if weight is None:
        transpose = producer(b, "Transpose")
        perm = attr(transpose, "perm", None) if transpose is not None else None
        if transpose is None or (perm is not None and list(perm) != [1, 0]):
            return None
        weight, transposed = _initializer(graph, transpose.inputs[0]), False
    if weight is None or not _same_dtype(x, weight):
        return None
    out = node.outputs[0]
    uses = list(out.uses())
    if not out.is_graph_output() and len(uses) == 1:
        add, index = uses[0]
        n = weight.shape[1] if transposed else weight.shape[0]
        bias = add.inputs[1 - index] if add.op_type == "Add" and not add.domain and len(add.inputs) == 2 else None
        if bias is not None and ir.convenience.get_const_tensor(bias) is not None and const_dims(bias) == [n]:
            return Linear(x, weight, transposed, bias, [node, add], add.outputs[0])
    return Linear(x, weight, transposed, None, [node], out)


def linear_layers(graph: ir.Graph) -> list[Linear]:
    """The main graph's linear layers, in graph order."""
    return [found for node in graph if (found := find_linear(graph, node)) is not None]


def _initializer(graph: ir.Graph, value: ir.Value | None) -> ir.Value | None:
    """``value`` when it is a constant 2-D float initializer (not a graph input), else None."""
    if value is None or value.is_graph_input() or graph.initializers.get(value.name or "") is not value:
        return None
    tensor = value.const_value
    if tensor is None or tensor.dtype not in _FLOATS or len(tensor.shape) != 2:
        return None
    return value


def _same_dtype(x: ir.Value, weight: ir.Value) -> bool:
    return x.dtype is None or x.dtype == weight.const_value.dtype


def const_dims(value: ir.Value) -> list[int] | None:
    """The shape of a constant value, None for another."""
    tensor = ir.convenience.get_const_tensor(value)
    return None if tensor is None else [int(d) for d in tensor.shape]


def shared(layer: Linear) -> bool:
    """Whether the value the product reads as its weight (the initializer, or its Transpose) has other
    readers: quantizing it would make a copy per reader."""
    return len(list(layer.nodes[0].inputs[1].uses())) != 1
