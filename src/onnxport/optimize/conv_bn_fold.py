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
(float16 through float32) when it is read, not here. The folded weight and bias are
new initializers (the old ones may have other readers; unused ones go with the unused-node pass).
"""

from __future__ import annotations

import functools

import numpy as np
import onnx_ir as ir
import torch
from onnx_ir.tensor_adapters import TorchTensor

from onnxport.optimize import _match as m

__all__ = ["COMPUTED_WHEN_READ", "ConvBatchNormFoldPass"]

# The mark of a LazyTensor computed from tensors in memory when read (unlike the weights ``export(weights=)``
# streams from files, which ``save`` writes as external data).
COMPUTED_WHEN_READ = "onnxport.computed_when_read"

_FOLDED_DTYPES = (ir.DataType.FLOAT16, ir.DataType.FLOAT, ir.DataType.DOUBLE)
_NUMPY = {ir.DataType.FLOAT16: np.float16, ir.DataType.FLOAT: np.float32, ir.DataType.DOUBLE: np.float64}


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
            base = conv.inputs[1].name or "conv.weight"
            new_w = m.new_initializer(graph, f"{base}.bn_folded", weight)
            new_b = m.new_initializer(graph, f"{base}.bn_folded_bias", bias)
            replacement = ir.Node("", "Conv", [conv.inputs[0], new_w, new_b], attributes=list(conv.attributes.values()),
                                  name=conv.name, metadata_props=dict(conv.metadata_props))
            ir.convenience.replace_nodes_and_values(graph, bn, [conv, bn], [replacement], [bn.outputs[0]],
                                                    [replacement.outputs[0]])
            folded += 1
        return ir.passes.PassResult(model, modified=folded > 0)


def _folded(graph: ir.Graph, conv: ir.Node, bn: ir.Node) -> tuple[ir.LazyTensor, np.ndarray] | None:
    """The folded weight (computed when read: see ``_scaled``) and bias, or None when the pair does not
    qualify."""
    w_value = conv.inputs[1] if len(conv.inputs) > 1 else None
    if w_value is None or w_value.dtype not in _FOLDED_DTYPES:
        return None
    b_value = conv.inputs[2] if len(conv.inputs) > 2 else None
    weight = _weight(graph, w_value)
    bias = _constant(graph, b_value) if b_value is not None else None
    stats = [_constant(graph, v) for v in bn.inputs[1:5]]
    if weight is None or (b_value is not None and bias is None) or len(stats) != 4 or any(s is None for s in stats):
        return None
    channels = weight.shape[0] if weight.dim() >= 1 else -1
    scale, shift, mean, var = (np.asarray(s, dtype=np.float64).reshape(-1) for s in stats)
    if any(a.shape != (channels,) for a in (scale, shift, mean, var)):
        return None
    if bias is not None and bias.reshape(-1).shape != (channels,):
        return None
    epsilon = float(m.attr(bn, "epsilon", 1e-5))
    factors = scale / np.sqrt(var + epsilon)
    b0 = np.zeros(channels) if bias is None else bias.astype(np.float64).reshape(-1)
    b = ((b0 - mean) * factors + shift).astype(_NUMPY[w_value.dtype])
    low, high = torch.aminmax(weight) if weight.numel() else (torch.zeros(()), torch.zeros(()))
    largest = max(abs(float(low)), abs(float(high))) * float(np.abs(factors).max(initial=0.0))
    if not (np.all(np.isfinite(b)) and largest < float(torch.finfo(weight.dtype).max)):
        return None  # an overflow in the weight's dtype: the runtime keeps the pair apart
    lazy = ir.LazyTensor(functools.partial(_scaled, weight, factors), dtype=w_value.dtype, shape=ir.Shape(weight.shape))
    lazy.meta[COMPUTED_WHEN_READ] = True  # from memory, not a file: saved like any in-memory weight
    return lazy, b


def _weight(graph: ir.Graph, value: ir.Value) -> torch.Tensor | None:
    """The weight as a torch tensor over its own memory where it has one (a parameter's)."""
    if value.is_graph_input() or (value.is_initializer() and graph.initializers.get(value.name or "") is not value):
        return None
    tensor = ir.convenience.get_const_tensor(value)
    if tensor is None:
        return None
    if isinstance(tensor, TorchTensor):
        return tensor.raw
    return torch.from_numpy(np.require(tensor.numpy(), requirements=("C", "W")))  # a read-only buffer is copied


def _scaled(weight: torch.Tensor, factors: np.ndarray) -> ir.Tensor:
    """The folded weight: each output channel's weights times its factor, in the weight's dtype (float16
    through float32), in one pass. Computed when read (by a session, ``save``), so that the export does
    not hold a second copy of every convolution's weights, nor pay for writing it, before anything needs
    it. In numpy: verification reads it in a forked child, where torch's OpenMP threads do not exist."""
    array = weight.detach().numpy()
    compute = np.float32 if array.dtype == np.float16 else array.dtype
    shape = (-1,) + (1,) * (array.ndim - 1)
    scaled = array.astype(compute, copy=False) * factors.astype(compute).reshape(shape)
    return ir.Tensor(scaled.astype(array.dtype, copy=False))


def _constant(graph: ir.Graph, value: ir.Value | None) -> np.ndarray | None:
    """The array of a constant the graph owns: an initializer that is not also a graph input, or a
    ``Constant`` node's value."""
    if value is None or value.is_graph_input():
        return None
    if value.is_initializer() and graph.initializers.get(value.name or "") is not value:
        return None  # an outer graph's initializer
    tensor = ir.convenience.get_const_tensor(value)
    return None if tensor is None else np.asarray(tensor.numpy())
