"""HalfConvertPass: a float16 model with float32 islands, from a float32 or float16 ONNX model.

Every float32 value becomes float16 (``from_float32=True``; a float16 model's own float32 values, the
``.float()`` its code asks for, are kept otherwise), except in the islands (``islands.py``), which compute
in float32 with a ``Cast`` at each boundary. Weights are stored in float16 (finite values beyond float16's
range saturate to +-65504 rather than becoming inf: the ``finfo(float32).min`` of an attention mask stays a
large negative number). The model's parameters are float16 wherever they are read; a buffer or constant
read only inside islands stays float32 (an epsilon of 1e-12, which float16 flushes to 0; the rotary
frequencies, which float16 rounds by up to 5e-4, an angle error of 1.5 at position 3,000). A slot whose schema admits only float32 (``Resize``'s scales) keeps it; the
fused ``Attention`` gets ``softmax_precision`` float32 (its softmax is its own island). Floating graph inputs and outputs are float16.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from collections.abc import Collection

import numpy as np
import onnx_ir as ir
import torch
from onnx_ir.tensor_adapters import TorchTensor

from onnxport.half.islands import fill_dtypes, find_islands, slot_types

__all__ = ["HalfConvertPass", "HalfSummary"]

D = ir.DataType
F16, F32 = D.FLOAT16, D.FLOAT
_F16_MAX = 65504.0
_DTYPE_ATTRS = ("to", "dtype")  # Cast, RandomNormal(Like), EyeLike, Bernoulli...


@dataclasses.dataclass
class HalfSummary:
    """What the conversion did: per op type the nodes computing in float32, the casts at the islands'
    boundaries, the weights now float16 and the small constants kept float32."""

    island_ops: dict[str, int]
    casts: int = 0
    weights: int = 0
    kept_float32: list[str] = dataclasses.field(default_factory=list)

    def __str__(self) -> str:
        ops = ", ".join(f"{op} {n}" for op, n in sorted(self.island_ops.items(), key=lambda kv: (-kv[1], kv[0])))
        return (f"float16: {sum(self.island_ops.values())} nodes in float32 islands ({ops or 'none'}), "
                f"{self.casts} casts, {self.weights} weights converted")


class HalfConvertPass(ir.passes.InPlacePass):
    """Make the model compute in float16 outside float32 islands (see the module's docstring).

    ``from_float32`` turns float32 values into float16 (an export with ``dtype=torch.float16``); without it
    only the float16 values are considered (a float16 model) and its float32 ones are left as they are.
    ``weights`` names the initializers that are the model's parameters: always stored in float16, even
    where only islands read them (a norm's scale is cast up there); other constants read only in islands
    (buffers such as rotary frequencies, epsilons) stay float32. ``keep_io`` leaves the model's float32
    inputs and outputs float32, cast at the boundary (a runtime that feeds float32 whatever the weights). After
    a run, ``summary`` says what was done.
    """

    def __init__(self, opset: int, *, from_float32: bool = True, weights: Collection[str] = (),
                 keep_io: bool = False):
        super().__init__()
        self.opset = opset
        self.from_float32 = from_float32
        self.weights = frozenset(weights)
        self.keep_io = keep_io
        self.summary = HalfSummary({})

    def _eligible(self, value: ir.Value | None) -> bool:
        return value is not None and (value.dtype == F16 or (self.from_float32 and value.dtype == F32))

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graphs = [model.graph, *model.graph.subgraphs()]
        nodes = [node for graph in graphs for node in graph]
        fill_dtypes(nodes, self.opset)
        island, frozen = find_islands(nodes, self._eligible, self.opset, self.weights)
        plan = _Plan(self.opset, island, frozen, self.weights)
        eligible = {v for node in nodes for v in (*node.inputs, *node.outputs) if self._eligible(v)}
        eligible |= {v for graph in graphs for v in (*graph.inputs, *graph.outputs) if self._eligible(v)}
        eligible |= {v for graph in graphs for v in graph.initializers.values() if self._eligible(v)}
        target = plan.targets(graphs, nodes, eligible)
        summary = HalfSummary(dict(collections.Counter(n.op_type for n in island)))
        casts = _Casts()
        for value in [v for v in eligible if v.is_initializer() or _constant(v)]:
            if value.dtype != target[value]:
                _retype_constant(value, target[value])
                if value.is_initializer() and value.dtype == F16:
                    summary.weights += 1
            elif target[value] == F32:
                summary.kept_float32.append(value.name)
        for node in nodes:
            _retype_outputs(node, target, eligible)
            if node.op_type == "Attention" and node not in island and node not in frozen:
                node.attributes.setdefault("softmax_precision", ir.AttrInt64("softmax_precision", F32))
        kept = set(model.graph.inputs) if self.keep_io else set()
        for graph in graphs:
            for value in graph.inputs:
                if value in eligible and value not in kept:
                    value.dtype = F16
        for node in nodes:
            for i, value in enumerate(node.inputs):
                wanted = plan.want(node, i, eligible)
                if wanted is not None and value.dtype != wanted:
                    node.replace_input_with(i, casts.cast(node, value, wanted))
        for graph in graphs:
            wanted = F32 if self.keep_io and graph is model.graph else F16
            for value in list(graph.outputs):
                if value in eligible and value.dtype != wanted:
                    casts.cast_output(graph, value, wanted)
        summary.casts = casts.count
        self.summary = summary
        return ir.passes.PassResult(model, modified=True)


class _Plan:
    """The dtype each node computes in and each value gets."""

    def __init__(self, opset: int, island: set[ir.Node], frozen: set[ir.Node], weights: frozenset[str]):
        self.opset, self.island, self.frozen, self.weights = opset, island, frozen, weights
        self._slots: dict[ir.Node, tuple[list, list]] = {}
        self._original: dict[ir.Value, D] = {}

    def slots(self, node: ir.Node) -> tuple[list, list]:
        if node not in self._slots:
            self._slots[node] = slot_types(node, self.opset)
        return self._slots[node]

    def computes_in(self, node: ir.Node) -> D:
        return F32 if node in self.island else F16

    def want(self, node: ir.Node, i: int, eligible: set[ir.Value]) -> D | None:
        """The dtype input ``i`` of ``node`` must have, None for any (not a float16 candidate, or a Cast)."""
        value = node.inputs[i]
        if value not in eligible or (node.op_type in ("Cast", "CastLike") and i == 0):
            return None
        slot = self.slots(node)[0][i]
        if node in self.frozen or _fixed(slot):
            return self._original.get(value, value.dtype)
        return self.computes_in(node)

    def targets(self, graphs: list[ir.Graph], nodes: list[ir.Node], eligible: set[ir.Value]) -> dict[ir.Value, D]:
        """The new dtype of every eligible value (read before any is changed)."""
        self._original = {v: v.dtype for v in eligible}
        target: dict[ir.Value, D] = {}
        for graph in graphs:
            target.update({v: F16 for v in graph.inputs if v in eligible})
        for node in nodes:
            if node.op_type == "Constant":
                continue
            for value, slot in zip(node.outputs, self.slots(node)[1]):
                if value in eligible:
                    keep = node in self.frozen or _fixed(slot)
                    target[value] = value.dtype if keep else self.computes_in(node)
        for value in eligible:
            if value.is_initializer() or _constant(value):
                wants = {self.want(user, i, eligible) for user, i in value.uses()} - {None}
                inside = wants == {F32} and value.name not in self.weights and not value.is_graph_output()
                target[value] = F32 if inside else F16
        for value in eligible:
            target.setdefault(value, F16)  # outer-scope values of subgraphs are covered above; this is a guard
        return target


def _fixed(slot: tuple[str, frozenset[str]] | None) -> bool:
    """A slot of one fixed type (``tensor(float)``), not a type constraint's."""
    return slot is not None and slot[0] in slot[1]


def _constant(value: ir.Value) -> bool:
    producer = value.producer()
    return producer is not None and producer.op_type == "Constant"


def _retype_outputs(node: ir.Node, target: dict[ir.Value, D], eligible: set[ir.Value]) -> None:
    """The node's eligible outputs get their new dtype, and the attributes that name it follow."""
    for value in node.outputs:
        if value not in eligible or node.op_type == "Constant":
            continue
        old, value.dtype = value.dtype, target[value]
        if old == value.dtype:
            continue
        for name in _DTYPE_ATTRS:
            attr = node.attributes.get(name)
            if attr is not None and attr.type == ir.AttributeType.INT and attr.value == old:
                node.attributes[name] = ir.AttrInt64(name, value.dtype)
        fill = node.attributes.get("value") if node.op_type == "ConstantOfShape" else None
        if fill is not None:
            node.attributes["value"] = ir.AttrTensor("value", _converted(fill.as_tensor(), value.dtype))


def _retype_constant(value: ir.Value, dtype: D) -> None:
    """An initializer or a ``Constant``'s output stored in ``dtype`` from now on."""
    if value.is_initializer():
        value.const_value = _as_dtype(value.const_value, dtype)
    else:
        node = value.producer()
        tensor = value.const_value
        if tensor is None:
            attr = node.attributes.get("value")
            tensor = attr.as_tensor() if attr is not None else ir.tensor(_constant_number(node))
        for name in ("value", "value_float", "value_floats"):
            node.attributes.pop(name, None)
        converted = _converted(tensor, dtype)
        node.attributes["value"] = ir.AttrTensor("value", converted)
        value.const_value = converted
    value.dtype = dtype


def _constant_number(node: ir.Node) -> np.ndarray:
    for name in ("value_float", "value_floats"):
        attr = node.attributes.get(name)
        if attr is not None:
            return np.asarray(attr.value, dtype=np.float32)
    raise AssertionError(f"a float Constant without a value: {node.name}")


def _as_dtype(tensor: ir.TensorProtocol, dtype: D) -> ir.TensorProtocol:
    """``tensor`` in ``dtype``: converted now, or, for a tensor read from a file when saved, then."""
    if isinstance(tensor, ir.LazyTensor):
        lazy = ir.LazyTensor(functools.partial(_converted, tensor, dtype), dtype, tensor.shape, name=tensor.name)
        lazy.meta.update(tensor.meta)  # where it reads from (a file, or memory: see program._streamed)
        return lazy
    return _converted(tensor, dtype)


def _converted(tensor: ir.TensorProtocol, dtype: D) -> TorchTensor:
    source = (tensor.raw if isinstance(tensor, TorchTensor)
              else torch.from_numpy(np.require(tensor.numpy(), requirements="W")))  # a read-only buffer is copied
    out = source.to(torch.float16 if dtype == F16 else torch.float32)
    if dtype == F16:
        overflow = out.isinf() & ~source.isinf()
        if bool(overflow.any()):  # a finite number saturates, as float16 arithmetic would not keep it
            out[overflow] = torch.sign(source[overflow]).to(torch.float16) * _F16_MAX
    return TorchTensor(out.contiguous(), name=tensor.name)


class _Casts:
    """Cast nodes made by one conversion: one per (graph, value, dtype), named after the value."""

    def __init__(self) -> None:
        self.made: dict[tuple[int, int, D], ir.Value] = {}
        self.count = 0

    def _node(self, value: ir.Value, dtype: D) -> ir.Node:
        self.count += 1
        tag = f"{'f32' if dtype == F32 else 'f16'}_{self.count}"
        cast = ir.Node("", "Cast", [value], [ir.AttrInt64("to", dtype)], name=f"half_cast_{tag}")
        cast.outputs[0].name = f"{value.name}__{tag}"
        cast.outputs[0].dtype, cast.outputs[0].shape = dtype, value.shape
        return cast

    def cast(self, node: ir.Node, value: ir.Value, dtype: D) -> ir.Value:
        """``value`` as ``dtype``, cast once in ``node``'s graph, before every use there."""
        graph = node.graph
        key = (id(graph), id(value), dtype)
        if key not in self.made:
            cast = self._node(value, dtype)
            producer = value.producer()
            if producer is not None and producer.graph is graph:
                graph.insert_after(producer, cast)
            else:
                graph.insert_before(node, cast)
            self.made[key] = cast.outputs[0]
        return self.made[key]

    def cast_output(self, graph: ir.Graph, value: ir.Value, dtype: D) -> None:
        """The graph output ``value`` becomes a Cast of it to ``dtype``, under its name."""
        name = value.name
        value.name = f"{name}__{'f32' if value.dtype == F32 else 'f16'}"
        cast = self._node(value, dtype)
        producer = value.producer()
        if producer is not None and producer.graph is graph:
            graph.insert_after(producer, cast)
        else:
            graph.append(cast)
        cast.outputs[0].name = name
        graph.outputs[graph.outputs.index(value)] = cast.outputs[0]
