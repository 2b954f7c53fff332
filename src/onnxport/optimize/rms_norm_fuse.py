"""RmsNormFusePass: RMS normalisation written out in ATen ops becomes one opset-23 ``RMSNormalization``.

transformers' RMSNorm modules (Llama, Qwen2, Mistral, Gemma, T5, ...) compute
``w * (x * rsqrt(mean(x * x, -1, keepdim=True) + eps))``, which reaches ONNX as seven nodes:
``Mul(x, x) | Pow(x, 2) -> ReduceMean(axes=[-1]) -> Add(eps) -> Sqrt -> Reciprocal | Div(1, .) -> Mul(x, .)
-> Mul(w, .)``. The fused op computes the same in the input's dtype (``stash_type`` float32).
"""

from __future__ import annotations

import onnx_ir as ir

from onnxport.optimize import _match as m
from onnxport.targets import Forms

__all__ = ["RmsNormFusePass"]


def _squared(value: ir.Value | None) -> ir.Value | None:
    """``x`` where ``value`` is ``x * x`` or ``x ** 2``."""
    node = m.producer(value, "Mul", "Pow")
    if node is None:
        return None
    if node.op_type == "Mul":
        return node.inputs[0] if node.inputs[0] is node.inputs[1] else None
    return node.inputs[0] if m.scalar(node.inputs[1]) == 2.0 else None


def _inverse_rms(value: ir.Value | None) -> tuple[ir.Value, float, list[ir.Node]] | None:
    """``(x, eps, nodes)`` where ``value`` is ``1 / sqrt(mean(x * x, -1) + eps)``."""
    recip = m.producer(value, "Reciprocal", "Div")
    if recip is None or (recip.op_type == "Div" and m.scalar(recip.inputs[0]) != 1.0):
        return None
    sqrt = m.producer(recip.inputs[-1], "Sqrt")
    add = m.producer(sqrt.inputs[0], "Add") if sqrt is not None else None
    if add is None:
        return None
    for mean_in, eps_in in ((add.inputs[0], add.inputs[1]), (add.inputs[1], add.inputs[0])):
        mean, eps = m.producer(mean_in, "ReduceMean"), m.scalar(eps_in)
        if mean is not None and eps is not None:
            break
    else:
        return None
    x = _squared(mean.inputs[0])
    rank = x.shape.rank() if x is not None and x.shape is not None else None
    if rank is None or len(mean.inputs) < 2 or not m.attr(mean, "keepdims", 1):
        return None
    if [a % rank for a in m.int_list(mean.inputs[1]) or []] != [rank - 1]:
        return None
    chain = [mean.inputs[0].producer(), mean, add, sqrt, recip]
    if not all(m.only_use(a.outputs[0], b) for a, b in zip(chain, chain[1:])):
        return None
    return x, eps, chain


def _match(node: ir.Node) -> tuple[ir.Value, ir.Value, float, list[ir.Node]] | None:
    """``(x, weight, eps, nodes)`` when ``node`` is the weight's ``Mul`` ending an RMS norm of x."""
    for normed, weight in ((node.inputs[0], node.inputs[1]), (node.inputs[1], node.inputs[0])):
        scale = m.producer(normed, "Mul")
        if scale is None or not m.only_use(normed, node):
            continue
        for x, inv in ((scale.inputs[0], scale.inputs[1]), (scale.inputs[1], scale.inputs[0])):
            found = _inverse_rms(inv)
            if found is None or found[0] is not x or not m.only_use(inv, scale):
                continue
            x_dims, w_dims = m.dims(x), m.dims(weight)
            if x_dims is None or w_dims is None or w_dims != x_dims[-1:] or not isinstance(w_dims[0], int) or weight.dtype != x.dtype:
                continue
            return x, weight, found[1], [*found[2], scale, node]
    return None


class RmsNormFusePass(ir.passes.InPlacePass):
    """Replace written-out RMS norms with ``RMSNormalization`` (where the target computes it right)."""

    def __init__(self, forms: Forms):
        super().__init__()
        self.forms = forms

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        if not self.forms.allows("RMSNormalization"):
            return ir.passes.PassResult(model, False)
        modified = False
        for graph in (model.graph, *model.graph.subgraphs()):
            for node in list(graph):
                if node.op_type != "Mul" or node.domain or node.graph is None:
                    continue
                found = _match(node)
                if found is None:
                    continue
                x, weight, eps, nodes = found
                fused = ir.Node("", "RMSNormalization", [x, weight],
                                [ir.AttrInt64("axis", -1), ir.AttrFloat32("epsilon", eps)], name=f"{node.name}_rms")
                m.replace_node(graph, node, fused, nodes)
                modified = True
        return ir.passes.PassResult(model, modified)
