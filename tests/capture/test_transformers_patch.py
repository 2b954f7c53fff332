"""The transformers settings onnxport changes for capture are restored after every export."""

from __future__ import annotations

import pytest
import torch

import onnxport
from tests.zoo.cases import ZOO, causal

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.transformers  # run on the second pinned transformers too (make test-transformers)


def _mixtral() -> torch.nn.Module:
    return next(case for case in ZOO if case.name == "mixtral").build().eval()


def test_mixture_of_experts_exports_and_config_is_restored() -> None:
    model = _mixtral()
    assert model.config._experts_implementation == "grouped_mm"
    inputs = causal(2, 6)
    prog = onnxport.export(model, (), inputs)
    assert model.config._experts_implementation == "grouped_mm"
    ops = {n.op_type for n in prog.model.graph.all_nodes()}
    assert not any(n.domain.startswith("transformers") for n in prog.model.graph.all_nodes()), ops
    with torch.no_grad():
        expected = model(**inputs).logits
    torch.testing.assert_close(prog(**inputs)["logits"], expected, atol=1e-4, rtol=1e-4)


def test_config_is_restored_after_a_failed_export() -> None:
    model = _mixtral()
    with pytest.raises(onnxport.OnnxportError):
        onnxport.export(model, (), {"input_ids": torch.tensor([[1, 2, 3]]), "use_cache": False},
                        dynamic_shapes={"input_ids": {1: torch.export.Dim("s", max=2)}})
    assert model.config._experts_implementation == "grouped_mm"


def _state(model: torch.nn.Module) -> dict:
    """What an export could leave changed: the pytree registry, transformers' cache and model classes, the
    model's hooks and its config."""
    from transformers import cache_utils

    classes = (cache_utils.DynamicCache, cache_utils.DynamicLayer, cache_utils.StaticCache,
               cache_utils.EncoderDecoderCache, type(model))
    return {
        "pytree": dict(torch.utils._pytree.SUPPORTED_NODES),
        "classes": [dict(vars(cls)) for cls in classes],
        "hooks": [dict(m._forward_pre_hooks) for m in model.modules()] + [dict(m._forward_hooks) for m in model.modules()],
        "config": model.config.to_dict(),
        "forward": model.forward,
    }


def test_transformers_is_untouched_after_a_cache_export_and_a_failed_one() -> None:
    """The cache registration and the capture patches are undone on every path, the failing one included."""
    from onnxport.hf import cache_argument, cache_of
    from tests.test_llm_cache import CASES, _build

    model = _build(CASES[0])
    before = _state(model)
    prompt = torch.tensor([[5, 6, 7, 8]] * 2)
    with torch.no_grad():
        cache = cache_of(model(input_ids=prompt, use_cache=True))
    step = {"input_ids": torch.tensor([[9, 10]] * 2), "attention_mask": torch.ones(2, 6, dtype=torch.long),
            cache_argument(model): cache}
    onnxport.export(model, (), step, dynamic_shapes="auto", verify=False)
    assert _state(model) == before
    with pytest.raises(onnxport.OnnxportError):
        onnxport.export(model, (), step, dynamic_shapes={"input_ids": {1: torch.export.Dim("s", max=1)}})
    assert _state(model) == before


def test_experts_looping_in_python_export_as_batched_matmuls() -> None:
    """A model that keeps transformers' eager experts by default (the OpenAI privacy filter, for its accumulation
    order) loops in Python over the experts a batch hits, a count torch.export cannot carry: captured with
    batched matmuls, and its config restored."""
    if not hasattr(transformers, "OpenAIPrivacyFilterConfig"):
        pytest.skip("this transformers has no OpenAI privacy filter")
    config = transformers.OpenAIPrivacyFilterConfig(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, num_local_experts=4, num_experts_per_tok=2, num_labels=5,
        pad_token_id=0)
    torch.manual_seed(0)
    model = transformers.OpenAIPrivacyFilterForTokenClassification(config).eval()
    assert model.config._experts_implementation == "eager"
    ids = torch.randint(1, 128, (2, 7))
    mask = torch.ones_like(ids)
    mask[1, :2] = 0
    dims = {0: torch.export.Dim.DYNAMIC, 1: torch.export.Dim.DYNAMIC}
    prog = onnxport.export(model, (), {"input_ids": ids, "attention_mask": mask},
                           dynamic_shapes={"input_ids": dims, "attention_mask": dims})
    assert model.config._experts_implementation == "eager"
    other = torch.randint(1, 128, (1, 11))
    with torch.no_grad():
        expected = model(input_ids=other, attention_mask=torch.ones_like(other)).logits
    torch.testing.assert_close(prog(input_ids=other, attention_mask=torch.ones_like(other))["logits"], expected,
                               atol=1e-4, rtol=1e-4)
