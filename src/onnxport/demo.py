"""The bundled default models that ``onnxport demo`` exports.

``ModelWithControlFlowTest`` is the gallery model whose submodule tests ``if x.sum():``, exactly as
written there: onnxport rewrites that ``if`` into ``torch.cond`` so both branches survive export.
``ModelWithCond`` is the same model with the submodule written with ``torch.cond`` by hand, as the
gallery's fix does; ``SmallCNN`` is a small image classifier. :func:`generation_demo` exports a tiny
random-weight Llama with its KV cache (when transformers is installed) and generates with it in onnxruntime
(it lives with the rest of the transformers code, in ``onnxport.hf.demo``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from onnxport.hf.demo import generation_demo

__all__ = ["DEMOS", "ModelWithControlFlowTest", "SmallCNN", "branch_inputs", "generation_demo"]


class ForwardWithControlFlowTest(torch.nn.Module):
    """The gallery's submodule: a Python ``if`` on a tensor value."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum():
            return x * 2
        return -x


class ForwardWithCond(torch.nn.Module):
    """The same test written with ``torch.cond`` (the gallery's hand-made fix)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        def identity2(x: torch.Tensor) -> torch.Tensor:
            return x * 2

        def neg(x: torch.Tensor) -> torch.Tensor:
            return -x

        return torch.cond(x.sum() > 0, identity2, neg, (x,))


class ModelWithControlFlowTest(torch.nn.Module):
    """Two linear layers, then the data-dependent test."""

    def __init__(self, test: type[torch.nn.Module] = ForwardWithControlFlowTest) -> None:
        super().__init__()
        self.mlp = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1), test())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(x)


class ModelWithCond(ModelWithControlFlowTest):
    """``ModelWithControlFlowTest`` with its test written with ``torch.cond``."""

    def __init__(self) -> None:
        super().__init__(ForwardWithCond)


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


def branch_inputs(model: ModelWithControlFlowTest) -> list[torch.Tensor]:
    """Two inputs of shape (3,): the first takes the true branch of the test, the second the false one.

    The layers before the test are affine, so a large input and its negation fall on both sides of 0.
    """
    x = torch.randn(3, generator=torch.Generator().manual_seed(0)) * 100
    with torch.no_grad():
        positive = bool(model.mlp[1](model.mlp[0](x)).sum() > 0)
    return [x, -x] if positive else [-x, x]


def _control_flow() -> tuple[torch.nn.Module, list[tuple[torch.Tensor, ...]]]:
    """The gallery model with its biases at zero: ``if x.sum():`` is false only when the sum is exactly
    zero, and without biases x = 0 gives exactly zero on every runtime, so both branches are reachable."""
    model = ModelWithControlFlowTest().eval()
    with torch.no_grad():
        for layer in model.mlp[:2]:
            layer.bias.zero_()
    x = torch.randn(3, generator=torch.Generator().manual_seed(0))
    return model, [(x,), (torch.zeros(3),)]


def _cnn() -> tuple[torch.nn.Module, list[tuple[torch.Tensor, ...]]]:
    generator = torch.Generator().manual_seed(0)
    return SmallCNN().eval(), [(torch.randn(2, 3, 32, 32, generator=generator),)]


# name -> factory returning (model, input sets); the first input set is the export example.
DEMOS: dict[str, Callable[[], tuple[torch.nn.Module, list[Any]]]] = {
    "control_flow": _control_flow,
    "small_cnn": _cnn,
}
