"""Which nodes of a float16 graph compute in float32: the islands.

Chosen by measurement: each op in float16 against float32 on the same float16-rounded inputs in
onnxruntime 1.32 (CPU), and whole models under onnx's reference evaluator, which rounds to float16 after
every op as a float16-native runtime does (onnxruntime's CPU provider computes most float16 ops in float32
between casts of its own, and hides most of what follows):

- Reductions that sum (``ReduceSum``, ``ReduceMean``, ``ReduceSumSquare``, ``ReduceL2``, ``CumSum``, ...):
  a float16 sum overflows where a float32 one does not (4,096 values of 100 +- 10: inf), and a runtime
  may accumulate float16 in float16. ``ReduceMax``/``ReduceMin``/``ArgMax`` are exact and stay float16.
- ``Softmax``/``LogSoftmax``: ONNX leaves the precision of its exponentials and sum to the runtime (the
  fused ``Attention`` has ``softmax_precision`` for this, which the conversion sets instead).
- Normalisations (``LayerNormalization``, ``RMSNormalization``, group and instance norms): their
  ``stash_type`` asks for float32 statistics, and onnxruntime computes them so (within one float16
  rounding of float32 at every scale tried), but not every runtime does: onnx's reference evaluator
  squares in float16, and a tiny Llama whose hidden states reach |x| ~ 400 gave logits off by 0.65 (all
  of them) with the norms in float16, 3e-4 with them in float32. Decomposed norms (``x * x`` then
  ``ReduceMean``) and softmaxes (``Exp`` then ``ReduceSum``) are islands through the growth rules below.
- ``Cos``/``Sin``, and a ``Cast`` from an integer or bool to a float: rotary embeddings take the cosine of
  position x frequency, and float16 rounds an angle of 1,000 to a multiple of 0.5 (a position of 3,000 to
  one of 2), so the angles and the positions they come from are float32 (a tiny Llama at positions
  3,000-3,016: logits off by 3.8e-3 with float16 angles, 5e-4 with float32 ones).
- An op whose ONNX schema has no float16 for its floats (``Range``).

From these seeds an island grows while growing costs no precision and little time:

- backward, to an elementwise op (or a reshape) whose every use is in the island, and to one that widens
  the range (``Exp``, ``Pow``, a square ``x * x``) with any use in it: the values a reduction sums are
  then formed in float32, so ``x * x`` of a hidden state of 300 (90,000) no longer overflows. In a
  transformer the residual additions join too (each is used only by a norm and the next addition): the
  residual stream is float32, as mixed-precision training keeps it, and only the matrix products' outputs
  are cast up into it;
- forward, to any op whose every float input comes from the island or is a small constant (an epsilon,
  the rotary frequencies): ``var + eps`` then ``Sqrt`` then ``Reciprocal``, or ``exp / sum``.

Custom-domain nodes (``com.microsoft``...) keep the dtypes they were given: their contracts are unknown.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Iterable, Iterator

import onnx
import onnx_ir as ir

__all__ = ["SEED_OPS", "SMALL_CONSTANT", "fill_dtypes", "find_islands", "is_small_constant", "slot_types"]

D = ir.DataType
SEED_OPS = frozenset({
    "Softmax", "LogSoftmax", "ReduceSum", "ReduceMean", "ReduceSumSquare", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceProd", "CumSum", "Cos", "Sin",
    "LayerNormalization", "RMSNormalization", "GroupNormalization", "InstanceNormalization",
})
# Ops an island may take in from below: cheap, elementwise or moving data, no accumulation of their own.
_ELEMENTWISE = frozenset({
    "Add", "Sub", "Mul", "Div", "Neg", "Abs", "Pow", "Exp", "Log", "Sqrt", "Reciprocal", "Max", "Min", "Where",
    "Clip", "Identity", "Reshape", "Unsqueeze", "Squeeze", "Expand", "Transpose", "Slice", "Flatten", "Concat",
})
_WIDENING = frozenset({"Exp", "Pow"})
_MOVES = frozenset({"Expand", "Reshape", "Unsqueeze", "Squeeze", "Transpose", "Identity", "Cast"})
_CONTROL_FLOW = frozenset({"If", "Loop", "Scan"})
SMALL_CONSTANT = 1024  # elements: epsilons, masks' fill values, rotary frequencies; never a weight matrix

Eligible = Callable[[ir.Value | None], bool]


def find_islands(nodes: Iterable[ir.Node], eligible: Eligible, opset: int,
                 weights: frozenset[str] = frozenset()) -> tuple[set[ir.Node], set[ir.Node]]:
    """``(islands, frozen)``: the nodes that compute in float32, and those that keep their dtypes (no schema).

    ``eligible`` says which values are (or become) float16; only nodes touching one are considered.
    ``weights`` names the model's parameters, never small constants however small.
    """
    computing = [n for n in nodes if n.op_type != "Constant" and any(map(eligible, [*n.inputs, *n.outputs]))]
    frozen = {n for n in computing if n.domain not in ("", "ai.onnx")}
    island = {n for n in computing if n not in frozen and _seed(n, eligible, opset)}
    candidates = set(computing) - frozen
    queue = collections.deque(island)
    while queue:
        node = queue.popleft()
        for near in [*_producers(node, eligible), *_consumers(node, eligible)]:
            if near in candidates and near not in island and _joins(near, island, eligible, weights):
                island.add(near)
                queue.append(near)
    return island, frozen


def _seed(node: ir.Node, eligible: Eligible, opset: int) -> bool:
    if node.op_type in SEED_OPS:
        return True
    if node.op_type == "Cast":
        source = node.inputs[0].dtype if node.inputs[0] is not None else None
        return source is not None and not source.is_floating_point() and eligible(node.outputs[0])
    # A schema without float16 for a constraint an eligible value has: only float32 will do.
    inputs, outputs = slot_types(node, opset)
    slots = [*zip(node.inputs, inputs), *zip(node.outputs, outputs)]
    return any(eligible(v) and t is not None and t[0] not in t[1] and "tensor(float16)" not in t[1]
               and "tensor(float)" in t[1] for v, t in slots)


def _joins(node: ir.Node, island: set[ir.Node], eligible: Eligible, weights: frozenset[str]) -> bool:
    if node.op_type in _CONTROL_FLOW:
        return False
    return _joins_backward(node, island, eligible) or _joins_forward(node, island, eligible, weights)


def _joins_backward(node: ir.Node, island: set[ir.Node], eligible: Eligible) -> bool:
    if node.op_type not in _ELEMENTWISE:
        return False
    outputs = [v for v in node.outputs if eligible(v)]
    if not outputs or any(v.is_graph_output() for v in outputs):
        return False
    users = [user for v in outputs for user, _ in v.uses()]
    if not users:
        return False
    if _widens(node):
        return any(user in island for user in users)
    return all(user in island for user in users)


def _widens(node: ir.Node) -> bool:
    square = node.op_type == "Mul" and len(node.inputs) == 2 and node.inputs[0] is node.inputs[1]
    return node.op_type in _WIDENING or square


def _joins_forward(node: ir.Node, island: set[ir.Node], eligible: Eligible, weights: frozenset[str]) -> bool:
    inputs = [v for v in node.inputs if eligible(v)]
    from_island = [v for v in inputs if v.producer() in island]
    return bool(from_island) and all(v.producer() in island or is_small_constant(v, weights) for v in inputs)


def is_small_constant(value: ir.Value, weights: frozenset[str] = frozenset()) -> bool:
    """An initializer (not one of the ``weights``) or ``Constant`` output of at most ``SMALL_CONSTANT``
    elements, or one of them moved or broadcast (``Expand(inv_freq[None, :, None], ...)``)."""
    producer = value.producer()
    if producer is not None and producer.op_type in _MOVES:
        floats = [v for v in producer.inputs if v is not None and v.dtype is not None and v.dtype.is_floating_point()]
        return bool(floats) and all(is_small_constant(v, weights) for v in floats)
    if value.name in weights or not (value.is_initializer() or (producer is not None and producer.op_type == "Constant")):
        return False
    shape = value.shape
    if shape is None or not shape.is_static():
        return False
    return math.prod(shape.numpy()) <= SMALL_CONSTANT


def _producers(node: ir.Node, eligible: Eligible) -> Iterator[ir.Node]:
    for value in node.inputs:
        if eligible(value) and value.producer() is not None:
            yield value.producer()


def _consumers(node: ir.Node, eligible: Eligible) -> Iterator[ir.Node]:
    for value in node.outputs:
        if eligible(value):
            for user, _ in value.uses():
                yield user


def fill_dtypes(nodes: Iterable[ir.Node], opset: int) -> int:
    """Give a dtype to each output that lacks one (a fusion may leave it unset) from its schema: the fixed
    type, or that of an input of the same type constraint; returns how many were filled."""
    filled = 0
    for node in nodes:
        missing = [i for i, v in enumerate(node.outputs) if v.dtype is None]
        if not missing:
            continue
        inputs, outputs = slot_types(node, opset)
        known = {t[0]: v.dtype for v, t in zip(node.inputs, inputs) if v is not None and v.dtype is not None and t}
        for i in missing:
            slot = outputs[i]
            fixed = slot is not None and slot[0] in slot[1] and slot[0] in _FIXED
            dtype = _FIXED[slot[0]] if fixed else (known.get(slot[0]) if slot is not None else None)
            if dtype is not None:
                node.outputs[i].dtype = dtype
                filled += 1
    return filled


_FIXED = {"tensor(float)": D.FLOAT, "tensor(float16)": D.FLOAT16, "tensor(int64)": D.INT64, "tensor(bool)": D.BOOL,
          "tensor(int32)": D.INT32}


def slot_types(node: ir.Node, opset: int) -> tuple[list[tuple[str, frozenset[str]] | None], list[tuple[str, frozenset[str]] | None]]:
    """Per input and per output of ``node``: its schema's type constraint name and allowed types
    (``("T", {"tensor(float)", ...})``, or the fixed type as both), None when the schema is unknown."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, node.domain or "")
    except onnx.defs.SchemaError:
        return [None] * len(node.inputs), [None] * len(node.outputs)
    allowed = {c.type_param_str: frozenset(c.allowed_type_strs) for c in schema.type_constraints}

    def spread(formals: list, count: int) -> list[tuple[str, frozenset[str]] | None]:
        kinds = [(f.type_str, allowed.get(f.type_str, frozenset({f.type_str}))) for f in formals]
        if formals and formals[-1].option == onnx.defs.OpSchema.FormalParameterOption.Variadic:
            kinds += [kinds[-1]] * max(count - len(kinds), 0)
        return (kinds + [None] * count)[:count]

    return spread(schema.inputs, len(node.inputs)), spread(schema.outputs, len(node.outputs))
