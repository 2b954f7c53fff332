"""The bundled default models that ``onnxport demo`` exports.

``ModelWithControlFlowTest`` is the gallery model whose submodule tests ``if x.sum():``, with that
submodule written with ``torch.cond`` so both branches survive export; ``SmallCNN`` is a small
image classifier.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["DEMOS", "ModelWithControlFlowTest", "SmallCNN", "branch_inputs"]


class ForwardWithControlFlowTest(torch.nn.Module):
    """``if x.sum(): return x * 2`` / ``return -x``, written with ``torch.cond``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        def identity2(x: torch.Tensor) -> torch.Tensor:
            return x * 2

        def neg(x: torch.Tensor) -> torch.Tensor:
            return -x

        return torch.cond(x.sum() > 0, identity2, neg, (x,))


class ModelWithControlFlowTest(torch.nn.Module):
    """Two linear layers, then the data-dependent test."""

    def __init__(self) -> None:
        super().__init__()
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(3, 2),
            torch.nn.Linear(2, 1),
            ForwardWithControlFlowTest(),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(x)


class SmallCNN(torch.nn.Module):
    """conv-bn-relu-pool twice, then a linear classifier with softmax."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1),
            torch.nn.BatchNorm2d(8),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(8, 16, 3, padding=1),
            torch.nn.BatchNorm2d(16),
            torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1),
        )
        self.classifier = torch.nn.Linear(16, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.classifier(torch.flatten(self.features(x), 1)), dim=-1)


def branch_inputs(model: ModelWithControlFlowTest, tries: int = 100) -> list[torch.Tensor]:
    """Two inputs of shape (3,), one taking each branch of the test (found by sampling)."""
    taken: dict[bool, torch.Tensor] = {}
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for _ in range(tries):
            x = torch.randn(3, generator=generator)
            taken.setdefault(bool(model.mlp[1](model.mlp[0](x)).sum() > 0), x)
            if len(taken) == 2:
                return [taken[True], taken[False]]
    raise RuntimeError("no input found that takes both branches")


def _control_flow() -> tuple[torch.nn.Module, list[tuple[torch.Tensor, ...]]]:
    model = ModelWithControlFlowTest().eval()
    return model, [(x,) for x in branch_inputs(model)]


def _cnn() -> tuple[torch.nn.Module, list[tuple[torch.Tensor, ...]]]:
    generator = torch.Generator().manual_seed(0)
    return SmallCNN().eval(), [(torch.randn(2, 3, 32, 32, generator=generator),)]


# name -> factory returning (model, input sets); the first input set is the export example.
DEMOS: dict[str, Callable[[], tuple[torch.nn.Module, list[Any]]]] = {
    "control_flow": _control_flow,
    "small_cnn": _cnn,
}
