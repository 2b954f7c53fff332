"""Small helpers the fusion passes share: what produces a value, its constant, whether only one node reads it."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

_SMALL = 64  # constants read while matching are scalars and short index lists, never weights


def producer(value: ir.Value | None, *op_types: str) -> ir.Node | None:
    """The standard-domain node computing ``value`` when its op type is one of ``op_types``."""
    node = value.producer() if value is not None else None
    if node is None or node.domain or node.op_type not in op_types:
        return None
    return node


def constant(value: ir.Value | None) -> np.ndarray | None:
    """The array of a small constant (a ``Constant`` node or an initializer), else None."""
    if value is None or value.shape is None or not all(isinstance(d, int) for d in value.shape.dims):
        return None
    if int(np.prod(value.shape.dims, dtype=np.int64)) > _SMALL:
        return None
    tensor = const_tensor(value)
    return None if tensor is None else tensor.numpy()


def const_tensor(value: ir.Value) -> ir.TensorProtocol | None:
    """The tensor of an initializer or of a ``Constant`` node's ``value``; ``get_const_tensor`` for the
    other forms of ``Constant``. (``Attr.as_tensor`` checks the tensor against a runtime protocol, a
    hundred times the cost of the read: the fusion passes read the same small constants thousands of times.)"""
    if value.const_value is not None:
        return value.const_value
    node = value.producer()
    if node is None or node.op_type != "Constant" or node.domain:
        return None
    found = node.attributes.get("value")
    if found is not None and len(node.attributes) == 1 and not found.is_ref():
        return found.value
    return ir.convenience.get_const_tensor(value)


def scalar(value: ir.Value | None) -> float | None:
    """The number a one-element constant holds, else None."""
    array = constant(value)
    return None if array is None or array.size != 1 else float(array.reshape(()))


def int_list(value: ir.Value | None) -> list[int] | None:
    """The integers of a small integer constant (axes, starts, ends), else None."""
    array = constant(value)
    if array is None or not np.issubdtype(array.dtype, np.integer):
        return None
    return [int(i) for i in array.reshape(-1)]


def only_use(value: ir.Value, node: ir.Node) -> bool:
    """Whether ``node`` is the one reader of ``value`` and no graph output is it, so fusing may drop it."""
    uses = list(value.uses())
    return not value.is_graph_output() and len(uses) == 1 and uses[0][0] is node


def other_input(node: ir.Node, value: ir.Value) -> ir.Value | None:
    """The input of a two-input node that is not ``value`` (for commutative Add and Mul)."""
    a, b = node.inputs[0], node.inputs[1]
    if a is value:
        return b
    return a if b is value else None


def attr(node: ir.Node, name: str, default: object = None) -> object:
    """The value of an attribute, or ``default`` when it is absent."""
    found = node.attributes.get(name)
    return default if found is None else found.value


def dims(value: ir.Value | None) -> list[int | str] | None:
    """The value's dims as ints and symbolic names when every dim is known, else None."""
    if value is None or value.shape is None:
        return None
    out: list[int | str] = []
    for d in value.shape.dims:
        if isinstance(d, int):
            out.append(d)
        elif d.value is None:
            return None
        else:
            out.append(d.value)
    return out


def last_axis(axis: int, rank: int) -> bool:
    """Whether ``axis`` names the last of ``rank`` axes."""
    return axis in (-1, rank - 1)


def replace_node(graph: ir.Graph, node: ir.Node, fused: ir.Node, removed: list[ir.Node]) -> None:
    """Put ``fused`` where ``node`` is: before it in ``graph``, its output taking the place (readers, name,
    type, graph output) of ``node``'s first output; then remove ``removed`` (``node`` among them)."""
    graph.insert_before(node, fused)
    out = node.outputs[0]
    fused.outputs[0].dtype, fused.outputs[0].shape = out.dtype, out.shape
    name, out.name = out.name, None
    ir.convenience.replace_all_uses_with(out, fused.outputs[0], replace_graph_outputs=True)
    fused.outputs[0].name = name
    graph.remove(list(reversed(removed)), safe=True)


def new_initializer(graph: ir.Graph, name: str, data: np.ndarray | ir.TensorProtocol) -> ir.Value:
    """Register ``data`` (an array, or a tensor such as a ``LazyTensor``) as an initializer named ``name``,
    or ``name.2``, ``name.3``, ... where that name is taken."""
    base, n = name, 1
    while name in graph.initializers:
        n += 1
        name = f"{base}.{n}"
    tensor = ir.Tensor(np.ascontiguousarray(data)) if isinstance(data, np.ndarray) else data
    tensor.name = name
    value = ir.Value(name=name, shape=ir.Shape(tensor.shape), type=ir.TensorType(tensor.dtype), const_value=tensor)
    graph.register_initializer(value)
    return value
