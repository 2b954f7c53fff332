"""Targets: the runtime a file is for picks its opset, its IR version and the fused ops it holds.

Whether each target's files load and compute right in the runtimes themselves (older onnxruntime wheels,
onnxruntime-node and -web) is tests/runtimes; here, what each target writes and that it matches eager.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import onnx
import onnx_ir as ir
import pytest
import torch

import onnxport
from onnxport import metadata, targets
from onnxport.cli import main
from onnxport.targets import Forms, Target, ir_version_for, parse
from tests import tiny_models

pytest.importorskip("transformers")

FUSED = {"Attention", "RMSNormalization", "RotaryEmbedding"}


class AddMul(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x * y + x


def _pair() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(2, 3), torch.randn(2, 3)


def _llama_inputs(batch: int = 2, seq: int = 8) -> dict[str, Any]:
    """A left-padded batch: the padding rows are where a wrong Attention shows."""
    ids = torch.randint(0, 100, (batch, seq), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    return {"input_ids": ids, "attention_mask": mask, "use_cache": False}


_DYN = {"input_ids": {0: torch.export.Dim.DYNAMIC, 1: torch.export.Dim.DYNAMIC},
        "attention_mask": {0: torch.export.Dim.DYNAMIC, 1: torch.export.Dim.DYNAMIC}, "use_cache": None}


def _ops(prog: onnxport.OnnxProgram) -> Counter[str]:
    return Counter(node.op_type for node in prog.model.graph.all_nodes())


def test_default_target_is_portable() -> None:
    prog = onnxport.export(AddMul(), _pair())
    assert str(parse(targets.DEFAULT_TARGET)) == "onnxruntime>=1.18"
    assert prog.model.opset_imports[""] == 21 and prog.model.ir_version == 10
    assert prog.model_proto.ir_version == 10
    assert prog.model.metadata_props[metadata.TARGET] == "onnxruntime>=1.18"


@pytest.mark.parametrize("opset, ir_version", [(18, 8), (19, 9), (20, 9), (21, 10), (22, 10), (23, 11), (25, 13),
                                               (26, 13)])
def test_ir_version_is_the_lowest_the_opset_allows(opset: int, ir_version: int) -> None:
    prog = onnxport.export(AddMul(), _pair(), opset=opset)
    assert (prog.model.opset_imports[""], prog.model_proto.ir_version) == (opset, ir_version)


def test_ir_version_rises_for_newer_element_types() -> None:
    graph = ir.Graph([], [], nodes=[], opset_imports={"": 18, "com.microsoft": 1})
    model = ir.Model(graph, ir_version=3)
    assert ir_version_for(model) == 8
    graph.initializers["w"] = ir.Value(name="w", type=ir.TensorType(ir.DataType.INT4), shape=ir.Shape([4]),
                                       const_value=ir.tensor([1, 2, 3, 4], dtype=ir.DataType.INT4))
    assert ir_version_for(model) == 10


def test_fused_files_are_fenced_off_older_releases_by_their_ir_version() -> None:
    """A file with Attention (wrong on padded rows in 1.23) is stamped IR 12, which 1.23 does not read."""
    model = tiny_models.llama(max_position_embeddings=64)
    fused = onnxport.export(model, (), _llama_inputs(), dynamic_shapes=_DYN, target="onnxruntime>=1.24")
    plain = onnxport.export(model, (), _llama_inputs(), dynamic_shapes=_DYN, target="onnxruntime>=1.23")
    assert targets.forms_used(fused.model) >= {"Attention", "RMSNormalization"}
    assert (fused.model.opset_imports[""], fused.model_proto.ir_version) == (23, 12)
    assert "Attention" not in targets.forms_used(plain.model) and plain.model_proto.ir_version == 11


def test_opset_alone_means_every_release_that_loads_it() -> None:
    prog = onnxport.export(AddMul(), _pair(), opset=23)
    assert prog.model.metadata_props[metadata.TARGET] == "onnxruntime>=1.23"
    assert prog.model.opset_imports[""] == 23


@pytest.mark.parametrize("kwargs, message", [
    ({"target": "onnxruntime>=1.18", "opset": 23}, "opset 23 is newer than onnxruntime>=1.18 loads"),
    ({"target": "onnxruntimes>=1.18"}, "not a runtime onnxport writes for"),
    ({"target": "onnxruntime>=1.2"}, "older than onnxport writes for"),
    ({"target": 5}, "not a runtime onnxport writes for"),
    ({"target": "onnxruntime=1.20"}, "not a runtime onnxport writes for"),
])
def test_bad_targets_are_named(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(onnxport.InvalidInputError, match=message) as info:
        onnxport.export(AddMul(), _pair(), verify=False, **kwargs)
    assert info.value.fix


def test_target_spellings() -> None:
    assert parse("onnxruntime-node>=1.22") == Target("onnxruntime", (1, 22))  # the same core and releases
    assert parse(" onnxruntime-web >= 1.26.1 ") == Target("onnxruntime-web", (1, 26))
    assert parse("onnxruntime") == Target("onnxruntime", (1, 14))
    # the newest opset the oldest release loads, up to 23 (older releases are fenced off by the IR version)
    assert [parse(f"onnxruntime>=1.{v}").opset for v in (18, 20, 22, 23, 24, 26, 40)] == [21, 21, 22, 23, 23, 23, 23]
    assert parse("tensorrt>=10.0").opset == 20


def test_fused_forms_follow_the_oldest_release_that_loads_the_file() -> None:
    def forms(spec: str, opset: int | None = None, half: bool = False) -> Forms:
        return Forms(parse(spec), opset or parse(spec).opset, half)

    f32, f16 = ir.DataType.FLOAT, ir.DataType.FLOAT16
    assert forms("onnxruntime>=1.24").attention(f32, grouped=True)
    assert forms("onnxruntime>=1.24").attention(f16, grouped=False)
    assert not forms("onnxruntime>=1.24").attention(f16, grouped=True)  # NaN in 1.24-1.25
    assert not forms("onnxruntime>=1.24", half=True).attention(f32, grouped=True)
    # grouped float16 is right from 1.26, but at opset 23 no IR version keeps 1.24 out: only at opset 26
    assert not forms("onnxruntime>=1.26").attention(f16, grouped=True)
    assert forms("onnxruntime>=1.26", 26).attention(f16, grouped=True)
    assert not forms("onnxruntime>=1.23").attention(f32, grouped=False)  # padding NaN in 1.23
    assert forms("onnxruntime>=1.23").allows("RMSNormalization")
    # a 1.23 target's oldest release reads IR 11 at most: no fence against itself
    assert not forms("onnxruntime>=1.23", 23).attention(f32, grouped=False)
    assert not forms("onnxruntime>=1.26", 22).allows("RotaryEmbedding")  # no fused op below opset 23
    assert not forms("tensorrt>=11.0").allows("RMSNormalization")


def _grouped(prog: onnxport.OnnxProgram) -> list[bool]:
    """Per Attention node: does it read fewer key heads than query heads (the cache not repeated)?"""
    out = []
    for node in prog.model.graph.all_nodes():
        if node.op_type == "Attention":
            q_heads, kv_heads = node.attributes.get("q_num_heads"), node.attributes.get("kv_num_heads")
            if q_heads is not None:
                out.append(kv_heads.value < q_heads.value)
            else:
                out.append(node.inputs[1].shape[1] != node.inputs[0].shape[1])
    return out


@pytest.mark.parametrize("target, dtype, fused, grouped", [
    (None, None, set(), None),
    (None, torch.float16, set(), None),
    ("onnxruntime>=1.23", None, {"RMSNormalization", "RotaryEmbedding"}, None),
    ("onnxruntime>=1.26", None, FUSED, True),
    ("onnxruntime>=1.24", None, FUSED, True),
    ("onnxruntime>=1.24", torch.float16, FUSED, False),  # grouped float16 is NaN before 1.26: heads repeated
    ("onnxruntime>=1.26", torch.float16, FUSED, False),  # no fence at opset 23 keeps 1.24-1.25 out
    ("onnxruntime-web>=1.22", None, set(), None),
    # the web's WebGPU provider has no kernel for Attention (placed on the CPU): written out, the norms fused
    ("onnxruntime-web>=1.26", None, {"RMSNormalization", "RotaryEmbedding"}, None),
])
def test_llama_per_target(target: str | None, dtype: torch.dtype | None, fused: set[str], grouped: bool | None) -> None:
    """A grouped-heads Llama with a left-padded batch: each target holds the fused ops it computes right,
    and every one matches eager (verified, float16 against eager float32)."""
    model = tiny_models.llama(max_position_embeddings=64)
    prog = onnxport.export(model, (), _llama_inputs(), dynamic_shapes=_DYN, target=target, dtype=dtype)
    assert prog.report.verification.ok, str(prog.report.verification)
    assert set(_ops(prog)) & FUSED == fused
    if grouped is not None:
        assert set(_grouped(prog)) == {grouped}
    onnx.checker.check_model(prog.model_proto, full_check=True)
    inputs = _llama_inputs(batch=3, seq=5)
    with torch.no_grad():
        expected = model(**inputs).logits
    if dtype is not None:
        actual = prog(**inputs).logits.float()
        torch.testing.assert_close(actual, expected, atol=1e-2, rtol=1e-2)
    else:
        torch.testing.assert_close(prog(**inputs).logits, expected, atol=1e-4, rtol=1e-3)


class _LowestMask(torch.nn.Module):
    """Attention under an additive mask that fills hidden keys with ``finfo.min``, as transformers' models do
    (Parakeet's relative-position scores): a padded query's row is hidden entirely."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        both = keep[:, None, :, None] & keep[:, None, None, :]
        bias = torch.zeros(both.shape, dtype=q.dtype).masked_fill(~both, torch.finfo(q.dtype).min)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias)


def test_a_float_mask_hiding_a_row_averages_its_values_as_torch() -> None:
    """torch averages the values uniformly in a row of the lowest value (the lowest swamps the scores); the fused
    ``Attention`` of onnxruntime zeroes such a row unless the mask is lifted off the lowest."""
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 6, 8, generator=generator) for _ in range(3))
    keep = torch.ones(2, 6, dtype=torch.bool)
    keep[1, 4:] = False
    prog = onnxport.export(_LowestMask(), (q, k, v, keep), target="onnxruntime>=1.24")
    assert _ops(prog)["Attention"] == 1
    assert prog.report.verification.ok, str(prog.report.verification)
    got = prog(q, k, v, keep)
    torch.testing.assert_close(got[1, :, 4:], v[1].mean(-2, keepdim=True).expand(2, 2, 8), atol=1e-5, rtol=1e-4)


def test_cli_target(tmp_path: Any, capsys: Any) -> None:
    path = tmp_path / "two.py"
    path.write_text("import torch\nclass Two(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n")
    out = tmp_path / "two.onnx"
    assert main(["export", f"{path}:Two", "--input", "x=float32[2,3]", "-o", str(out), "-q",
                 "--target", "onnxruntime>=1.26"]) == 0
    saved = onnx.load(str(out))
    assert (saved.opset_import[0].version, saved.ir_version) == (23, 11)  # no fused op: no fence
    assert main(["export", f"{path}:Two", "--input", "x=float32[2,3]", "-o", str(out), "-q",
                 "--target", "onnxruntime>=1.18", "--opset", "23"]) == 1
    assert "newer than onnxruntime>=1.18 loads" in capsys.readouterr().err


@pytest.mark.parametrize("target, inputs", [(None, 3), ("onnxruntime>=1.20", 3), ("onnxruntime>=1.26", 2)])
def test_layer_norm_without_bias_gets_zeros_where_onnxruntime_1_18_loads_the_file(target, inputs) -> None:
    """onnxruntime 1.18 aborts at load on a LayerNormalization without its bias (tests/runtimes: ModernBERT);
    a file it loads (opset 21 and below) spells the bias out as zeros."""
    model = torch.nn.LayerNorm(8, bias=False)
    x = torch.randn(2, 8)
    prog = onnxport.export(model, (x,), target=target)
    norms = [n for n in prog.model.graph if n.op_type == "LayerNormalization"]
    assert [len(n.inputs) for n in norms] == [inputs]
    torch.testing.assert_close(prog(x), model(x).detach())
