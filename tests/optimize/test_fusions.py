"""The fusions on real models: each fused op appears where the model computes it, and the export still
matches eager PyTorch (verified on the example and its resized sets, then checked at another size).
The fused opset-23 ops are emitted for targets that compute them right (``FAST``), not by default."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest
import onnx_ir as ir
import torch

import onnxport
from tests.zoo.cases import ZOO
from tests.zoo.test_zoo import check_other_size, export_case

pytest.importorskip("transformers")

pytestmark = pytest.mark.transformers  # run on the second pinned transformers too (make test-transformers)

_BY_NAME = {case.name: case for case in ZOO}
FAST = "onnxruntime>=1.26"  # every fused form onnxport emits is right from this release on


@dataclasses.dataclass(frozen=True)
class FusionCase:
    """A zoo model (dynamic batch and sequence) and the fused ops its export must hold, with counts."""

    zoo: str
    expect: dict[str, int]
    absent: tuple[str, ...] = ()
    flat_attention: bool = True  # Attention takes (batch, seq, heads * embed) projections, no head transposes


LAYERS = 2
CASES = [
    # Llama and Qwen2: the norms (two per layer and a final one), the rotary of q and k, and attention
    # taking its grouped KV heads as they are (no Expand of keys and values).
    FusionCase("llama", {"RMSNormalization": 2 * LAYERS + 1, "RotaryEmbedding": 2 * LAYERS, "Attention": LAYERS},
               absent=("Softmax", "Neg")),
    FusionCase("qwen2", {"RMSNormalization": 2 * LAYERS + 1, "RotaryEmbedding": 2 * LAYERS, "Attention": LAYERS},
               absent=("Softmax", "Neg")),
    # GPT-2's written-out tanh GELU (gelu_new) becomes Gelu(approximate="tanh"); Bloom writes it otherwise
    FusionCase("gpt2", {"Attention": LAYERS, "LayerNormalization": 2 * LAYERS + 1, "Gelu": LAYERS},
               absent=("Softmax", "Tanh", "Pow")),
    FusionCase("bloom", {"Gelu": LAYERS}, absent=("Tanh",), flat_attention=False),
    FusionCase("phi", {"Gelu": LAYERS, "RotaryEmbedding": 2 * LAYERS}, absent=("Tanh", "Pow"), flat_attention=False),
    FusionCase("bert", {"Attention": LAYERS, "LayerNormalization": 2 * LAYERS + 1, "Gelu": LAYERS},
               absent=("Softmax",)),
    FusionCase("vit", {"Attention": LAYERS, "LayerNormalization": 2 * LAYERS + 1, "Gelu": LAYERS},
               absent=("Softmax",)),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.zoo)
def test_fused_ops_appear_and_match_eager(case: FusionCase) -> None:
    zoo = _BY_NAME[case.zoo]
    model, prog = export_case(zoo, grad=False, target=FAST)
    assert prog.report.verification.ok, str(prog.report.verification)
    ops = Counter(node.op_type for node in prog.model.graph)
    assert {op: ops[op] for op in case.expect} == case.expect, ops
    assert not [op for op in case.absent if ops[op]], ops
    if case.flat_attention:
        assert all(n.attributes.get("q_num_heads") for n in prog.model.graph if n.op_type == "Attention")
    check_other_size(zoo, model, prog)


def test_decoder_cache_goes_into_attention() -> None:
    """A KV-cache export: each layer's Attention takes the past and returns the present itself."""
    from tests.test_llm_cache import CASES as LLM, _build, _decode_inputs

    model = _build(LLM[0])
    prog = onnxport.export(model, (), _decode_inputs(model), dynamic_shapes="auto", target=FAST)
    attention = [node for node in prog.model.graph if node.op_type == "Attention"]
    assert len(attention) == LAYERS
    outputs = {value.name for value in prog.model.graph.outputs}
    for i, node in enumerate(attention):
        assert [v.name for v in node.inputs[4:]] == [f"past_key_values.{i}.key", f"past_key_values.{i}.value"]
        assert {v.name for v in node.outputs[1:]} <= outputs
        assert node.attributes["q_num_heads"].value == 4 and node.attributes["kv_num_heads"].value == 2
    assert "Softmax" not in {node.op_type for node in prog.model.graph}
    spread = [n for n in prog.model.graph if n.op_type == "Expand" and n.inputs[0].dtype == ir.DataType.FLOAT]
    assert not spread, "keys and values are still repeated over the query heads"
    inputs = _decode_inputs(model, batch=3, past=6, new=1)
    with torch.no_grad():
        expected = model(**_decode_inputs(model, batch=3, past=6, new=1))
    out = prog(**inputs)
    torch.testing.assert_close(out.logits, expected.logits, atol=1e-4, rtol=1e-3)


def test_no_fusion_below_opset_23() -> None:
    """At opset 21 the same model keeps the standard ops it had: the fused ones do not exist there."""
    model, _ = export_case(_BY_NAME["llama"], grad=False)
    prog = onnxport.export(model, (), _BY_NAME["llama"].inputs(2, 8), dynamic_shapes=_BY_NAME["llama"].dynamic,
                           opset=21)
    ops = {node.op_type for node in prog.model.graph}
    assert not ops & {"RMSNormalization", "RotaryEmbedding", "Attention"}
    assert {"Softmax", "MatMul"} <= ops
