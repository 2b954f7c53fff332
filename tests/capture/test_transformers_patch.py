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
