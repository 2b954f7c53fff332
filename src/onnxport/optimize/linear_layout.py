"""LinearWeightLayoutPass: a linear layer's weight is stored transposed, ``[in, out]``, for ``MatMul``.

A linear layer is translated as ``MatMul(x, Transpose(W))`` (plus ``Add(bias)``), ``W`` being PyTorch's
``[out, in]`` weight. When ``W`` is a constant of the main graph that nothing else reads, this pass stores
``W`` transposed, under its own name, read by the ``MatMul`` directly (names stay the parameters':
what ``skip`` lists and float16 conversion keeps apart go by them). That is the form
runtimes multiply fastest without work at load (no Transpose for the runtime to fold, copying each
weight, while it builds every session) and the one quantization tools look for: onnxruntime's
``MatMulNBitsQuantizer``, ``quantize_dynamic`` and ``quantize_static`` quantize a ``MatMul`` whose second
input is an initializer, as onnxport's own quantizer does.

A quantized weight, ``DequantizeLinear`` of an int8 ``[out, in]`` initializer (a PT2E model's), is stored
transposed the same way, its per-row scales then along axis 1, so that onnxruntime fuses the product with its
quantized operands.

A weight read elsewhere too (an LM head tied to the token embedding, read by a ``Gather``) keeps its one
copy and its ``Transpose``: two copies would grow the file by the size of the table.

The transposed weight is computed when read (by a session, by ``save``), so the export holds no second
copy of the weights; a weight streamed from a file (``export(weights=)``) stays streamed, read and
transposed tensor by tensor when the file is written.
"""

from __future__ import annotations

import functools

import numpy as np
import onnx_ir as ir

from onnxport.optimize import _match as m
from onnxport.optimize.conv_bn_fold import COMPUTED_WHEN_READ

__all__ = ["LinearWeightLayoutPass", "source_of"]


class LinearWeightLayoutPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        done = 0
        for node in list(graph):
            if node.op_type != "Transpose" or node.domain or m.attr(node, "perm") not in ([1, 0], (1, 0)):
                continue
            weight = node.inputs[0]
            if weight is not None and _dequantized_weight(graph, weight):
                done += _store_quantized_transposed(graph, node, weight.producer())
                continue
            if weight is None or weight.is_graph_input() or graph.initializers.get(weight.name or "") is not weight:
                continue
            tensor = weight.const_value
            if tensor is None or len(tensor.shape) != 2 or len(list(weight.uses())) != 1:
                continue
            readers = list(node.outputs[0].uses())
            if not readers or any(u.node.op_type != "MatMul" or u.node.domain or u.idx != 1 for u in readers):
                continue
            if node.outputs[0].is_graph_output():
                continue
            del graph.initializers[weight.name]  # its name goes to the transposed copy
            stored = m.new_initializer(graph, weight.name, _transposed_lazily(tensor))
            ir.convenience.replace_all_uses_with(node.outputs[0], stored)
            graph.remove(node, safe=True)
            done += 1
        return ir.passes.PassResult(model, modified=done > 0)


def _is_initializer(graph: ir.Graph, value: ir.Value | None) -> bool:
    return value is not None and not value.is_graph_input() and graph.initializers.get(value.name or "") is value


def _dequantized_weight(graph: ir.Graph, value: ir.Value) -> bool:
    """``value`` is ``DequantizeLinear`` of a 2-D integer initializer read by nothing else, per tensor or per row
    (axis 0, not in blocks), with constant scale and zero point, and read once: a PT2E linear layer's weight."""
    node = value.producer()
    if node is None or node.op_type != "DequantizeLinear" or node.domain or len(list(value.uses())) != 1:
        return False
    q = node.inputs[0]
    if not _is_initializer(graph, q) or len(q.const_value.shape) != 2 or len(list(q.uses())) != 1:
        return False
    constants = [ir.convenience.get_const_tensor(x) if x is not None else None for x in node.inputs[1:]]
    if m.attr(node, "block_size") not in (None, 0) or constants[0] is None or any(
            x is not None and c is None for x, c in zip(node.inputs[1:], constants)):
        return False
    return len(constants[0].shape) == 0 or m.attr(node, "axis") in (0, -2)


def _store_quantized_transposed(graph: ir.Graph, transpose: ir.Node, dequantize: ir.Node) -> int:
    """``MatMul(x, Transpose(DequantizeLinear(Q)))`` -> ``MatMul(x, DequantizeLinear(Q^T, axis=1))``: onnxruntime
    then fuses the product with its quantized operands (a Transpose between them stops its QDQ fusion, and the
    weight would be dequantized and transposed at every run)."""
    q = dequantize.inputs[0]
    readers = list(transpose.outputs[0].uses())
    if not readers or any(u.node.op_type != "MatMul" or u.node.domain or u.idx != 1 for u in readers) \
            or transpose.outputs[0].is_graph_output():
        return 0
    del graph.initializers[q.name]
    stored = m.new_initializer(graph, q.name, _transposed_lazily(q.const_value))
    dequantize.replace_input_with(0, stored)
    if len(ir.convenience.get_const_tensor(dequantize.inputs[1]).shape) == 1:
        dequantize.attributes["axis"] = ir.AttrInt64("axis", 1)
    dequantize.outputs[0].shape = transpose.outputs[0].shape
    ir.convenience.replace_all_uses_with(transpose.outputs[0], dequantize.outputs[0])
    graph.remove(transpose, safe=True)
    return 1


def _transposed_lazily(tensor: ir.TensorProtocol) -> ir.LazyTensor:
    rows, cols = tensor.shape
    shape = ir.Shape([cols, rows])
    lazy = ir.LazyTensor(functools.partial(_Transposed, tensor, shape), dtype=tensor.dtype, shape=shape)
    # A weight in memory gives a weight computed from memory; one streamed from a file stays streamed.
    streamed = isinstance(tensor, ir.LazyTensor) and not tensor.meta.get(COMPUTED_WHEN_READ)
    if not streamed:
        lazy.meta[COMPUTED_WHEN_READ] = True
    return lazy


def source_of(tensor: ir.TensorProtocol) -> ir.TensorProtocol | None:
    """The ``[N, K]`` weight a transposed one stored by this pass is computed from; None for other tensors."""
    thunk = tensor.raw if isinstance(tensor, ir.LazyTensor) else None
    if isinstance(thunk, functools.partial) and thunk.func is _Transposed:
        return thunk.args[0]
    return None


_CHUNK_BYTES = 8 << 20  # how much of the weight ``tofile`` holds at once (twice: read, transposed)


class _Transposed:
    """``source`` (``[N, K]``) transposed, computed in numpy (a forked child reads it, where torch's OpenMP
    threads do not exist). ``numpy()`` makes the whole copy; ``tofile`` (``save``) writes it from
    ``_CHUNK_BYTES`` of the source's rows at a time, each read from the file, transposed and written in
    place, so a weight bigger than memory is written without being held."""

    def __init__(self, source: ir.TensorProtocol, shape: ir.Shape) -> None:
        self.name = source.name
        self._source = source
        self._shape = shape

    @property
    def dtype(self) -> ir.DataType:
        return self._source.dtype

    @property
    def shape(self) -> ir.Shape:
        return self._shape

    @property
    def raw(self) -> ir.TensorProtocol:
        return self._source

    @property
    def size(self) -> int:
        return int(np.prod(self._shape.numpy()))

    @property
    def nbytes(self) -> int:
        return int(self.size * self.dtype.itemsize)

    def __array__(self, dtype: object = None, copy: object = None) -> np.ndarray:
        array = self.numpy()
        return array if dtype is None else array.astype(dtype)

    def numpy(self) -> np.ndarray:
        return _transposed_rows(self._source, slice(None))

    def tobytes(self) -> bytes:
        return self.numpy().tobytes()

    def tofile(self, file) -> None:
        cols, rows = self._shape.numpy()  # the output is [K, N]: row k holds column k of the source
        itemsize = self.dtype.itemsize
        step = max(1, _CHUNK_BYTES // max(1, int(cols * itemsize)))
        start = file.tell()
        for first in range(0, rows, step):
            block = _transposed_rows(self._source, slice(first, first + step))  # [K, step]
            for k in range(cols):
                file.seek(start + int((k * rows + first) * itemsize))
                file.write(block[k].tobytes())
        file.seek(start + int(rows * cols * itemsize))


def _transposed_rows(source: ir.TensorProtocol, rows: slice) -> np.ndarray:
    """The source's ``rows``, transposed into memory of their own; a file the read mapped is unmapped."""
    tensor = source.raw() if isinstance(source, ir.LazyTensor) else source
    array = np.asarray(tensor.numpy())
    out = np.array(array[rows].T, order="C", copy=True)  # a copy even where the transpose is contiguous ([1, K])
    del array  # the last view of the mapping
    if isinstance(tensor, ir.ExternalTensor):
        tensor.release()
    return out
