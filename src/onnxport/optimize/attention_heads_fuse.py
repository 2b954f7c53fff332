"""AttentionHeadsFusePass: ``Attention`` reads grouped key/value heads as they are, not repeated.

transformers' ``repeat_kv`` spreads each key/value head over the query heads it serves
(``Unsqueeze -> Expand -> Reshape``) before attention; at decode time that copies the whole cache in every
layer. Opset-23 ``Attention`` groups heads itself (query head ``h`` reads key/value head
``h // (q_heads / kv_heads)``, the order the repeat makes), so the repeat is dropped.
"""

from __future__ import annotations

import onnx_ir as ir

from onnxport.optimize import _match as m
from onnxport.targets import Forms

__all__ = ["AttentionHeadsFusePass"]


def grouped_source(value: ir.Value | None) -> ir.Value | None:
    """The (batch, kv_heads, seq, embed) tensor that ``value`` repeats over heads, or None.

    The repeat is ``Reshape(Expand(Unsqueeze(kv, [2]), [B, KV, G, S, E]), [B, KV * G, S, E])``; the dims the
    shape annotations give prove that Expand broadcasts only the new axis and Reshape merges it into the
    heads (every other dim the same as ``kv``'s, so the element count fixes the heads to ``KV * G``).
    """
    reshape = m.producer(value, "Reshape")
    expand = m.producer(reshape.inputs[0], "Expand") if reshape is not None else None
    unsqueeze = m.producer(expand.inputs[0], "Unsqueeze") if expand is not None else None
    if unsqueeze is None or len(unsqueeze.inputs) < 2:
        return None
    kv = unsqueeze.inputs[0]
    kv_dims, spread, out = m.dims(kv), m.dims(expand.outputs[0]), m.dims(value)
    if kv_dims is None or spread is None or out is None or len(kv_dims) != 4 or len(spread) != 5 or len(out) != 4:
        return None
    if [a % 5 for a in m.int_list(unsqueeze.inputs[1]) or []] != [2]:
        return None
    if spread[:2] + spread[3:] != kv_dims or [out[0], *out[2:]] != [kv_dims[0], *kv_dims[2:]]:
        return None
    return kv


class AttentionHeadsFusePass(ir.passes.InPlacePass):
    """Feed ``Attention`` the grouped key/value heads instead of their repeat over the query heads, where the
    target computes grouped heads right in that dtype."""

    def __init__(self, forms: Forms):
        super().__init__()
        self.forms = forms

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in (model.graph, *model.graph.subgraphs()):
            for node in graph:
                if node.op_type != "Attention" or node.domain or len(node.inputs) < 3:
                    continue
                k, v = grouped_source(node.inputs[1]), grouped_source(node.inputs[2])
                if k is None or v is None or not self.forms.attention(k.dtype, grouped=True):
                    continue
                node.replace_input_with(1, k)
                node.replace_input_with(2, v)
                modified = True
        return ir.passes.PassResult(model, modified)
