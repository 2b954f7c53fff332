"""RotaryFusePass: rotary position embeddings written out in ATen ops become opset-23 ``RotaryEmbedding``.

transformers' ``apply_rotary_pos_emb`` computes ``x * cos + rotate_half(x) * sin`` with
``rotate_half(x) = cat(-x[..., d/2:], x[..., :d/2])`` on (batch, heads, seq, d) tensors and cos/sin of
(batch, 1, seq, d) built as ``cat(freqs, freqs)``: seven nodes per tensor
(``Mul, Slice, Slice, Neg, Concat, Mul, Add``). ``RotaryEmbedding`` (not interleaved) computes the same
from the first half of cos and sin, which the pass slices once per model; it fuses only where it can see
that the two halves of cos and sin are equal (both come from one ``Concat(f, f)`` through elementwise ops).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxport.optimize import _match as m
from onnxport.targets import Forms

__all__ = ["RotaryFusePass"]

# Ops that act on each element alone, so equal halves of the input give equal halves of the output.
_ELEMENTWISE = ("Cos", "Sin", "Cast", "Identity", "Neg")


def _halves_equal(value: ir.Value | None) -> bool:
    """Whether ``value[..., :d/2] == value[..., d/2:]``: a ``Concat(f, f)`` on the last axis, through
    elementwise ops and products with a scalar."""
    for _ in range(8):
        node = m.producer(value, "Concat", "Mul", "Div", *_ELEMENTWISE)
        if node is None:
            return False
        if node.op_type == "Concat":
            rank = value.shape.rank() if value.shape is not None else None
            same = len(node.inputs) == 2 and node.inputs[0] is node.inputs[1]
            return same and rank is not None and m.last_axis(int(m.attr(node, "axis", 0)), rank)
        if node.op_type in ("Mul", "Div"):
            if m.scalar(node.inputs[1]) is not None:
                value = node.inputs[0]
            elif node.op_type == "Mul" and m.scalar(node.inputs[0]) is not None:
                value = node.inputs[1]
            else:
                return False
        else:
            value = node.inputs[0]
    return False


def _table(value: ir.Value | None, x: ir.Value) -> ir.Value | None:
    """The (batch or 1, seq, d) cos or sin behind ``value`` = ``Unsqueeze(table, [1])``, sized like ``x``."""
    unsqueeze = m.producer(value, "Unsqueeze")
    if unsqueeze is None or len(unsqueeze.inputs) < 2 or m.int_list(unsqueeze.inputs[1]) not in ([1], [-3]):
        return None
    table, x_dims = unsqueeze.inputs[0], m.dims(x)
    t_dims = m.dims(table)
    if t_dims is None or x_dims is None or t_dims[1:] != x_dims[2:] or t_dims[0] not in (1, x_dims[0]):
        return None
    return table if _halves_equal(table) else None


def _rotate_half(value: ir.Value | None, x: ir.Value, half: int) -> bool:
    """Whether ``value`` is ``Concat(Neg(x[..., half:]), x[..., :half], axis=-1)``."""
    concat = m.producer(value, "Concat")
    if concat is None or len(concat.inputs) != 2 or not m.last_axis(int(m.attr(concat, "axis", 0)), 4):
        return False
    neg = m.producer(concat.inputs[0], "Neg")
    return neg is not None and _slice_of(neg.inputs[0], x, half, None) and _slice_of(concat.inputs[1], x, 0, half)


def _slice_of(value: ir.Value | None, x: ir.Value, start: int, end: int | None) -> bool:
    """Whether ``value`` is ``x[..., start:end]`` (``end`` None: to the end)."""
    node = m.producer(value, "Slice")
    if node is None or node.inputs[0] is not x or len(node.inputs) < 4:
        return False
    starts, ends, axes = (m.int_list(v) for v in node.inputs[1:4])
    steps = m.int_list(node.inputs[4]) if len(node.inputs) > 4 and node.inputs[4] is not None else [1]
    if starts != [start] or ends is None or len(ends) != 1 or axes not in ([3], [-1]) or steps != [1]:
        return False
    return ends[0] >= 2 * start if end is None else ends[0] == end


def _match(add: ir.Node) -> tuple[ir.Value, ir.Value, ir.Value] | None:
    """``(x, cos, sin)`` when ``add`` is ``x * Unsqueeze(cos) + rotate_half(x) * Unsqueeze(sin)``."""
    for left, right in ((add.inputs[0], add.inputs[1]), (add.inputs[1], add.inputs[0])):
        a, b = m.producer(left, "Mul"), m.producer(right, "Mul")
        if a is None or b is None:
            continue
        for x, cos in ((a.inputs[0], a.inputs[1]), (a.inputs[1], a.inputs[0])):
            x_dims = m.dims(x)
            if x_dims is None or len(x_dims) != 4 or not isinstance(x_dims[3], int) or x_dims[3] % 2:
                continue
            for rot, sin in ((b.inputs[0], b.inputs[1]), (b.inputs[1], b.inputs[0])):
                cos_t, sin_t = _table(cos, x), _table(sin, x)
                if cos_t is not None and sin_t is not None and _rotate_half(rot, x, x_dims[3] // 2):
                    return x, cos_t, sin_t
    return None


class RotaryFusePass(ir.passes.InPlacePass):
    """Replace written-out rotary embeddings with ``RotaryEmbedding`` (where the target computes it right)."""

    def __init__(self, forms: Forms):
        super().__init__()
        self.forms = forms

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        if not self.forms.allows("RotaryEmbedding"):
            return ir.passes.PassResult(model, False)
        modified = False
        for graph in (model.graph, *model.graph.subgraphs()):
            halves: dict[tuple[int, object], ir.Value] = {}
            for node in list(graph):
                if node.op_type != "Add" or node.domain:
                    continue
                found = _match(node)
                if found is None:
                    continue
                x, cos, sin = found
                tables = [self._first_half(graph, node, t, x, halves) for t in (cos, sin)]
                fused = ir.Node("", "RotaryEmbedding", [x, *tables], [], name=f"{node.name}_rotary")
                m.replace_node(graph, node, fused, [node])
                modified = True
        return ir.passes.PassResult(model, modified)

    @staticmethod
    def _first_half(graph: ir.Graph, before: ir.Node, table: ir.Value, x: ir.Value,
                    halves: dict[tuple[int, object], ir.Value]) -> ir.Value:
        """``table[..., :d/2]`` (expanded to ``x``'s batch where the table has one row, as
        ``RotaryEmbedding`` wants), once per table and batch however many layers read it, placed before
        its first reader."""
        batch = x.shape.dims[0]
        key = (id(table), batch if table.shape.dims[0] == 1 and batch != 1 else 1)
        if key in halves:
            return halves[key]
        d = table.shape.dims[-1]
        nodes = [_const([0]), _const([d // 2]), _const([-1])]
        nodes.append(ir.Node("", "Slice", [table, *(n.outputs[0] for n in nodes)], []))
        if key[1] != 1:
            rows = ir.Node("", "Shape", [x], [ir.AttrInt64("start", 0), ir.AttrInt64("end", 1)])
            rest = ir.Node("", "Shape", [nodes[-1].outputs[0]], [ir.AttrInt64("start", 1)])
            size = ir.Node("", "Concat", [rows.outputs[0], rest.outputs[0]], [ir.AttrInt64("axis", 0)])
            nodes += [rows, rest, size, ir.Node("", "Expand", [nodes[-1].outputs[0], size.outputs[0]], [])]
        half = nodes[-1].outputs[0]
        half.name, half.dtype = f"{table.name}_half" + ("" if key[1] == 1 else "_rows"), table.dtype
        half.shape = ir.Shape([batch if key[1] != 1 else table.shape.dims[0], *table.shape.dims[1:-1], d // 2])
        graph.insert_before(before, nodes)
        halves[key] = half
        return half


def _const(values: list[int]) -> ir.Node:
    return ir.Node("", "Constant", [], [ir.AttrTensor("value", ir.tensor(np.array(values, np.int64)))])
