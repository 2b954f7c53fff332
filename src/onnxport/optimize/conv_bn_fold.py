"""ConvBatchNormFoldPass: a BatchNormalization in inference mode after a Conv folds into the Conv.

With ``s = scale / sqrt(var + epsilon)`` per output channel, ``BatchNormalization(Conv(x, W, b))`` is
``Conv(x, W * s, (b - mean) * s + B)``: one node and four small tensors fewer per convolution, and a file
that runtimes load without folding it themselves. onnxruntime does fold the pair, at its default level,
by copying each weight it folds while it builds the session: on R3D-18 that touched 350 MB more than
the weights and took two thirds of the session's build (0.2 of 0.3 s), in every session of every user.

The pass folds a pair when the Conv's output has no other reader, the Conv's weight and bias and the
normalisation's four tensors are constants (initializers, not graph inputs), the normalisation computes
with its running statistics (one output, no ``training_mode``) and the weight is float16, float32 or
float64. The per-channel factors are computed in float64; the weight is multiplied in its own dtype
(float16 through float32), in one pass. The folded weight and bias are
new initializers (the old ones may have other readers; unused ones go with the unused-node pass).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import torch

from onnxport.optimize import _match as m

__all__ = ["ConvBatchNormFoldPass"]

_FOLDED_DTYPES = (ir.DataType.FLOAT16, ir.DataType.FLOAT, ir.DataType.DOUBLE)


class ConvBatchNormFoldPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        folded = 0
        for bn in list(graph):
            if bn.op_type != "BatchNormalization" or bn.domain or len(bn.outputs) != 1:
                continue
            if m.attr(bn, "training_mode", 0):
                continue
            conv = m.producer(bn.inputs[0], "Conv")
            if conv is None or conv.graph is not graph or not m.only_use(conv.outputs[0], bn):
                continue
            arrays = _folded(graph, conv, bn)
            if arrays is None:
                continue
            weight, bias = arrays
            new_w = _initializer(graph, conv.inputs[1], weight, "bn_folded")
            new_b = _initializer(graph, conv.inputs[1], bias, "bn_folded_bias")
            replacement = ir.Node("", "Conv", [conv.inputs[0], new_w, new_b], attributes=list(conv.attributes.values()),
                                  name=conv.name, metadata_props=dict(conv.metadata_props))
            ir.convenience.replace_nodes_and_values(graph, bn, [conv, bn], [replacement], [bn.outputs[0]],
                                                    [replacement.outputs[0]])
            folded += 1
        return ir.passes.PassResult(model, modified=folded > 0)


def _folded(graph: ir.Graph, conv: ir.Node, bn: ir.Node) -> tuple[np.ndarray, np.ndarray] | None:
    """The folded weight and bias, or None when the pair does not qualify."""
    w_value = conv.inputs[1] if len(conv.inputs) > 1 else None
    if w_value is None or w_value.dtype not in _FOLDED_DTYPES:
        return None
    b_value = conv.inputs[2] if len(conv.inputs) > 2 else None
    weight = _constant(graph, w_value)
    bias = _constant(graph, b_value) if b_value is not None else None
    stats = [_constant(graph, v) for v in bn.inputs[1:5]]
    if weight is None or (b_value is not None and bias is None) or len(stats) != 4 or any(s is None for s in stats):
        return None
    channels = weight.shape[0] if weight.ndim >= 1 else -1
    scale, shift, mean, var = (np.asarray(s, dtype=np.float64).reshape(-1) for s in stats)
    if any(a.shape != (channels,) for a in (scale, shift, mean, var)):
        return None
    if bias is not None and bias.reshape(-1).shape != (channels,):
        return None
    epsilon = float(m.attr(bn, "epsilon", 1e-5))
    s = scale / np.sqrt(var + epsilon)
    b0 = np.zeros(channels) if bias is None else bias.astype(np.float64).reshape(-1)
    # the weight in its own dtype (float16: through float32) times s rounded to it: one pass over it
    compute = torch.float32 if weight.dtype == np.float16 else torch.from_numpy(weight[:0]).dtype
    w_t = torch.from_numpy(weight).to(compute) * torch.from_numpy(s).to(compute).reshape((-1,) + (1,) * (weight.ndim - 1))
    w = w_t.to(torch.from_numpy(weight[:0]).dtype).numpy()
    b = ((b0 - mean) * s + shift).astype(weight.dtype)
    if not (bool(torch.isfinite(torch.from_numpy(w)).all()) and np.all(np.isfinite(b))):
        return None  # an overflow in the weight's dtype: the runtime keeps the pair apart
    return w, b


def _constant(graph: ir.Graph, value: ir.Value | None) -> np.ndarray | None:
    """The array of a constant the graph owns: an initializer that is not also a graph input, or a
    ``Constant`` node's value."""
    if value is None or value.is_graph_input():
        return None
    if value.is_initializer() and graph.initializers.get(value.name or "") is not value:
        return None  # an outer graph's initializer
    tensor = ir.convenience.get_const_tensor(value)
    return None if tensor is None else np.asarray(tensor.numpy())


def _initializer(graph: ir.Graph, like: ir.Value, array: np.ndarray, suffix: str) -> ir.Value:
    base = f"{like.name or 'conv.weight'}.{suffix}"
    name, n = base, 1
    while name in graph.initializers:
        n += 1
        name = f"{base}.{n}"
    tensor = ir.Tensor(np.ascontiguousarray(array), name=name)
    value = ir.Value(name=name, shape=ir.Shape(array.shape), type=ir.TensorType(tensor.dtype), const_value=tensor)
    graph.register_initializer(value)
    return value
