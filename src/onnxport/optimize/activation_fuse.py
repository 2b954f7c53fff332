"""ActivationFusePass: activations written out elementwise become their ONNX op (``Gelu``, ``HardSwish``, ``Mish``).

Models write GELU's tanh approximation out in many arrangements (GPT-2, GPT-J and Phi's
``0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x ** 3)))``, Bloom's
``x * 0.5 * (1 + tanh(0.79788456 * x * (1 + 0.044715 * x * x)))``, ...), and the erf form, hard-swish and
mish too. Rather than one pattern per arrangement, the pass takes each ``Mul`` or ``Div`` as the end of a
candidate: the nodes behind it that act on each element alone, whose results nothing else reads, with
exactly one non-constant input ``x`` and scalar constants otherwise (at most ``_MOST_NODES`` nodes, so
the pass stays linear in the graph). It evaluates that function of one variable in float64 on a grid over
[-12, 12] and compares it with each known activation; one that agrees within float32 rounding of its
constants everywhere on the grid becomes that op. The ops allowed are smooth (no comparison or ``Where``)
but for the clips of hard-swish, so agreement on a dense grid is agreement of the functions.
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

from onnxport.optimize import _match as m

__all__ = ["ActivationFusePass"]

_MOST_NODES = 16
# The dtypes onnxruntime has these activations' kernels for (the translators compose them for the others).
_KERNEL_DTYPES = (ir.DataType.FLOAT, ir.DataType.FLOAT16)
_GRID = np.concatenate([np.linspace(-12.0, 12.0, 2401), [-1e-3, -1e-6, 0.0, 1e-6, 1e-3]])
_ERF = np.vectorize(math.erf)

# What each elementwise op computes, on float64 arrays.
_EVAL = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide, "Pow": np.power,
    "Neg": np.negative, "Abs": np.abs, "Sqrt": np.sqrt, "Reciprocal": np.reciprocal, "Exp": np.exp,
    "Log": np.log, "Tanh": np.tanh, "Erf": _ERF, "Sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "Softplus": lambda x: np.logaddexp(0.0, x), "Relu": lambda x: np.maximum(x, 0.0),
    "Min": np.minimum, "Max": np.maximum,
    "Clip": lambda x, lo=None, hi=None: np.clip(x, -np.inf if lo is None else lo, np.inf if hi is None else hi),
}

_TANH_C = math.sqrt(2 / math.pi)
# (op, attributes, opset that has it, the function) in the order tried.
_KNOWN = [
    ("Gelu", {"approximate": "tanh"}, 20, lambda x: 0.5 * x * (1 + np.tanh(_TANH_C * (x + 0.044715 * x**3)))),
    ("Gelu", {}, 20, lambda x: 0.5 * x * (1 + _ERF(x / math.sqrt(2)))),
    ("HardSwish", {}, 14, lambda x: x * np.clip(x / 6 + 0.5, 0.0, 1.0)),
    ("Mish", {}, 18, lambda x: x * np.tanh(np.logaddexp(0.0, x))),
]
_EXPECTED = [f(_GRID) for *_, f in _KNOWN]


def _cone(root: ir.Node, order: dict[ir.Node, int]) -> list[ir.Node] | None:
    """The elementwise nodes behind ``root`` that only it (through each other) reads, in graph order (in
    ``root``'s own graph: a subgraph's outer values are inputs to it)."""
    found: dict[ir.Node, None] = {root: None}
    stack = [root]
    while stack and len(found) <= _MOST_NODES:
        for value in stack.pop().inputs:
            node = value.producer() if value is not None else None
            if node in order and node not in found and not node.domain and node.op_type in _EVAL:
                found[node] = None
                stack.append(node)
    kept: set[ir.Node] = {root}
    for node in sorted(found, key=order.__getitem__, reverse=True)[1:]:  # readers before their producers
        out = node.outputs[0]
        if not out.is_graph_output() and all(user in kept for user, _ in out.uses()):
            kept.add(node)
    return sorted(kept, key=order.__getitem__) if len(kept) >= 3 else None


def _function(nodes: list[ir.Node]) -> tuple[ir.Value, list[ir.Node]] | None:
    """``(x, sub)`` when the nodes ending at the last one compute a function of one value ``x`` and
    scalar constants: the cone's own input, or, where two values meet in it (a bias added before the
    activation), the earliest value inside it from which the rest follows alone."""
    made_by = {node.outputs[0]: node for node in nodes}
    scalars = {v for node in nodes for v in node.inputs if v is not None and m.scalar(v) is not None}
    for x in (None, *(node.outputs[0] for node in nodes[:-1])):
        sub: dict[ir.Node, None] = {}
        leaves: set[ir.Value] = set()
        stack = [nodes[-1]]
        while stack:
            node = stack.pop()
            if node in sub:
                continue
            sub[node] = None
            for v in node.inputs:
                if v is None or v in scalars:
                    continue
                if v is not x and v in made_by:
                    stack.append(made_by[v])
                else:
                    leaves.add(v)
        inner = [node for node in nodes if node in sub]
        if len(leaves) != 1 or len(inner) < 3:
            continue
        if all(user in sub for node in inner[:-1] for user, _ in node.outputs[0].uses()):
            x = leaves.pop()
            return (x, inner) if x.dtype in _KERNEL_DTYPES else None
    return None


def _evaluate(x: ir.Value, nodes: list[ir.Node]) -> np.ndarray | None:
    values: dict[ir.Value, np.ndarray] = {x: _GRID}
    with np.errstate(all="ignore"):
        for node in nodes:
            if node.attributes or len(node.outputs) != 1:  # attributes change what the op computes
                return None
            args = [None if v is None else values[v] if v in values else m.scalar(v) for v in node.inputs]
            values[node.outputs[0]] = np.asarray(_EVAL[node.op_type](*args), dtype=np.float64)
    return values[nodes[-1].outputs[0]]


def _which(result: np.ndarray, opset: int) -> int | None:
    """The index in ``_KNOWN`` of the activation ``result`` is, if any."""
    for i, ((_, _, since, _), expected) in enumerate(zip(_KNOWN, _EXPECTED)):
        if opset >= since and result.shape == expected.shape and bool(
                np.all(np.abs(result - expected) <= 1e-6 * (1 + np.abs(expected)))):
            return i
    return None


class ActivationFusePass(ir.passes.InPlacePass):
    """Replace written-out activations with ``Gelu`` (tanh or erf), ``HardSwish`` or ``Mish``."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        opset = model.opset_imports.get("", 0)
        modified = False
        for graph in (model.graph, *model.graph.subgraphs()):
            order = {node: i for i, node in enumerate(graph)}
            gone: set[ir.Node] = set()
            for root in reversed(list(graph)):
                if root in gone or root.domain or root.op_type not in ("Mul", "Div"):
                    continue
                cone = _cone(root, order)
                found = _function(cone) if cone is not None else None
                result = _evaluate(*found) if found is not None else None
                which = _which(result, opset) if result is not None else None
                if which is None:
                    continue
                x, nodes = found
                op, attributes, _, _ = _KNOWN[which]
                fused = ir.Node("", op, [x], [ir.AttrString(k, v) for k, v in attributes.items()],
                                name=f"{root.name}_{op.lower()}")
                m.replace_node(graph, root, fused, nodes)
                gone.update(nodes)
                modified = True
        return ir.passes.PassResult(model, modified)
