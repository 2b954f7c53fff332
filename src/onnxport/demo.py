"""The bundled default models that ``onnxport demo`` exports.

``ModelWithControlFlowTest`` is the gallery model whose submodule tests ``if x.sum():``, exactly as
written there: onnxport rewrites that ``if`` into ``torch.cond`` so both branches survive export.
``ModelWithCond`` is the same model with the submodule written with ``torch.cond`` by hand, as the
gallery's fix does; ``SmallCNN`` is a small image classifier. :func:`generation_demo` exports a tiny
random-weight Llama with its KV cache (when transformers is installed) and generates with it in onnxruntime.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

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


def generation_demo(path: str, progress: bool = True) -> list[str]:
    """Export a tiny random-weight Llama from a decode step with its ``DynamicCache``, save it at ``path``, and
    generate 8 tokens greedily for two prompts (one left-padded) in onnxruntime with ``onnxport.generate``,
    next to ``model.generate``'s tokens. Returns the lines to print (one saying why, without transformers)."""
    try:
        import transformers
    except ImportError:
        return ["skipped: transformers is not installed (pip install transformers)"]
    from onnxport.api import export
    from onnxport.generate import generate

    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    model = transformers.LlamaForCausalLM(config).eval()
    model.generation_config.eos_token_id = None  # eight tokens on both sides
    model.generation_config.pad_token_id = 0
    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(3, 128, (2, 4), generator=generator)
    with torch.no_grad():
        cache = model(input_ids=prompt, attention_mask=torch.ones_like(prompt), use_cache=True).past_key_values
    step = {"input_ids": torch.randint(3, 128, (2, 3), generator=generator),
            "attention_mask": torch.ones(2, 7, dtype=torch.long),
            "position_ids": torch.arange(4, 7).expand(2, 3), "past_key_values": cache}
    prog = export(model, (), step, dynamic_shapes="auto", progress=progress)
    prog.save(path)
    ids = torch.randint(3, 128, (2, 6), generator=generator)
    mask = torch.ones_like(ids)
    ids[1, :2], mask[1, :2] = 0, 0  # a shorter prompt, left-padded
    tokens = generate(prog, ids, mask, max_new_tokens=8)
    expected = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=8)
    inputs = ", ".join(f"{v.name}{[str(d) for d in v.shape]}" for v in prog.model.graph.inputs[:4])
    return [
        f"inputs: {inputs}, ... ({len(prog.input_names)} in all)",
        str(prog.report.verification),
        "greedy generation in onnxruntime (onnxport.generate), 8 new tokens:",
        *(f"  prompt {i}: {ids[i][mask[i].bool()].tolist()} -> {tokens[i, 6:].tolist()}" for i in range(2)),
        "transformers model.generate: " + ("the same tokens" if torch.equal(tokens, expected) else
                                           f"DIFFERENT tokens {expected[:, 6:].tolist()}"),
    ]
