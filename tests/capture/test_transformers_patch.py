"""The transformers settings onnxport changes for capture are restored after every export."""

from __future__ import annotations

import pytest
import torch

import onnxport
from tests.zoo.cases import ZOO, causal

transformers = pytest.importorskip("transformers")


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
