"""Sibling ``MatMulNBits`` products fused into one: the layers that read the same input (an attention
block's q, k and v projections; an MLP's gate and up projections) become one product over their weights
concatenated along the output dim, then a ``Split`` into each layer's output.

At a decode step (one token) each product is small and its cost is mostly per call: onnxruntime
quantizes the input to int8 once per product (``accuracy_level`` 4), and hands work to its threads once per
product. One product for the group pays those once. The packed weights, scales and zero points of
``MatMulNBits`` are laid out row by row (``[N, blocks, bytes]``, ``[N * blocks]``, ``[N * packed]``), so
joining the layers' rows is a concatenation of each.
"""

from __future__ import annotations

import re

import numpy as np
import onnx_ir as ir

from onnxport.optimize._match import new_initializer

__all__ = ["fuse_siblings"]

_MS_DOMAIN = "com.microsoft"
_SAME = ("K", "bits", "block_size", "accuracy_level")  # the attributes the members must share (N differs)


def fuse_siblings(graph: ir.Graph) -> list[list[str]]:
    """Fuse, in place, each group of two or more ``MatMulNBits`` of the main graph that read the same input
    with the same ``K``, bits, block size and accuracy level, their weights constant and their own; returns
    the groups fused, as their layers' weight names (the packed weights' names, ``<weight>.q4`` as
    ``quantize_model`` writes them, without the suffix)."""
    groups: dict[tuple, list[ir.Node]] = {}
    for node in graph:
        key = _key(graph, node)
        if key is not None:
            groups.setdefault(key, []).append(node)
    fused = []
    for members in groups.values():
        if len(members) > 1:
            fused.append([_layer(m) for m in members])
            _fuse(graph, members)
    return fused


def _key(graph: ir.Graph, node: ir.Node) -> tuple | None:
    """What a ``MatMulNBits`` must share with its siblings to be fused with them, or None when it cannot be:
    an input beyond the zero points (``g_idx``, a bias), a packed input that is not its own constant, or an
    output the model returns (whose name must stay)."""
    if node.domain != _MS_DOMAIN or node.op_type != "MatMulNBits" or not 3 <= len(node.inputs) <= 4:
        return None
    if node.inputs[0] is None or node.outputs[0].is_graph_output():
        return None
    for value in node.inputs[1:]:
        if (value is None or value.const_value is None or graph.initializers.get(value.name or "") is not value
                or len(list(value.uses())) != 1):
            return None
    attrs = tuple(node.attributes[name].value if name in node.attributes else None for name in _SAME)
    return (id(node.inputs[0]), len(node.inputs), node.inputs[2].const_value.dtype, *attrs)


def _fuse(graph: ir.Graph, members: list[ir.Node]) -> None:
    first = members[0]
    bits = int(first.attributes["bits"].value) if "bits" in first.attributes else 4
    base = _joined([_layer(m) for m in members])
    packed = [np.concatenate([np.asarray(m.inputs[i].const_value.numpy()) for m in members])
              for i in range(1, len(first.inputs))]
    suffixes = (f"q{bits}", "scales", "zero_points")
    inputs = [first.inputs[0], *(new_initializer(graph, f"{base}.{suffix}", array)
                                 for suffix, array in zip(suffixes, packed))]
    sizes = [int(m.attributes["N"].value) for m in members]
    attributes = [ir.AttrInt64("N", sum(sizes)),
                  *(ir.AttrInt64(name, int(first.attributes[name].value)) for name in _SAME if name in first.attributes)]
    product = ir.Node(_MS_DOMAIN, "MatMulNBits", inputs, attributes=attributes, name=f"{base}.product",
                      metadata_props=dict(first.metadata_props))
    split_sizes = new_initializer(graph, f"{base}.split", np.asarray(sizes, dtype=np.int64))
    split = ir.Node("", "Split", [product.outputs[0], split_sizes], attributes=[ir.AttrInt64("axis", -1)],
                    num_outputs=len(members), name=f"{base}.split")
    dtype = first.inputs[0].dtype  # the product computes in its input's float type
    product.outputs[0].dtype = dtype
    graph.insert_before(first, [product, split])
    for member, out in zip(members, split.outputs):
        old = member.outputs[0]
        out.dtype, out.shape = dtype, old.shape
        ir.convenience.replace_all_uses_with(old, out)
    own = [v.name for m in members for v in m.inputs[1:]]  # the members' packed weights, unread once they go
    for member in members:
        graph.remove(member, safe=True)
    for name in own:
        graph.initializers.pop(name, None)


def _layer(node: ir.Node) -> str:
    """The weight name of a ``MatMulNBits``' layer: its packed weight's, less the ``.q<bits>`` suffix."""
    name = node.inputs[1].name or "weight"
    return re.sub(r"\.q[0-9]+$", "", name)


def _joined(names: list[str]) -> str:
    """One name for a group's weights: their common prefix and suffix around the parts that differ
    (``layers.0.attn.q_proj.weight``, ``...k_proj...``, ``...v_proj...`` -> ``layers.0.attn.q_proj+k_proj+v_proj.weight``)."""
    split = [n.split(".") for n in names]
    head = 0
    while all(len(s) > head + 1 for s in split) and len({s[head] for s in split}) == 1:
        head += 1
    tail = 0
    while all(len(s) > head + tail + 1 for s in split) and len({s[-1 - tail] for s in split}) == 1:
        tail += 1
    middles = [".".join(s[head:len(s) - tail]) for s in split]
    return ".".join([*split[0][:head], "+".join(middles), *(split[0][len(split[0]) - tail:] if tail else [])])
