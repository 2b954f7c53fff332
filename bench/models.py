"""Benchmark models: ``MODELS`` maps a name to a factory returning ``(model, args)``.

Every factory builds its model in eval mode with a fixed seed and random weights (nothing is
downloaded), so tests can import ``MODELS`` and reuse the same cases.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from onnxport.demo import ModelWithCond, SmallCNN

__all__ = ["MODELS", "VISION", "r3d_18", "vit_b16"]

Factory = Callable[[], tuple[torch.nn.Module, tuple[Any, ...]]]


def _seed() -> None:
    torch.manual_seed(0)


def mlp() -> tuple[torch.nn.Module, tuple[Any, ...]]:
    _seed()
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 128), torch.nn.GELU(), torch.nn.Linear(128, 10)
    )
    return model.eval(), (torch.randn(8, 64),)


def cnn() -> tuple[torch.nn.Module, tuple[Any, ...]]:
    _seed()
    return SmallCNN().eval(), (torch.randn(2, 3, 32, 32),)


def transformer() -> tuple[torch.nn.Module, tuple[Any, ...]]:
    _seed()
    layer = torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, dropout=0.0, batch_first=True)
    # enable_nested_tensor=False: the nested-tensor fast path is an eager-only optimisation.
    model = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
    return model.eval(), (torch.randn(2, 16, 64),)


def seed_cond() -> tuple[torch.nn.Module, tuple[Any, ...]]:
    _seed()
    return ModelWithCond().eval(), (torch.randn(5, 3),)


def _token_inputs(vocab: int, batch: int = 2, seq: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    input_ids = torch.randint(0, vocab, (batch, seq), dtype=torch.int64)
    attention_mask = torch.ones(batch, seq, dtype=torch.int64)
    attention_mask[1, seq - 4 :] = 0  # one padded row, so the mask really matters
    return input_ids, attention_mask


def tiny_bert() -> tuple[torch.nn.Module, tuple[Any, ...]]:
    from transformers import BertConfig, BertModel

    _seed()
    config = BertConfig(
        vocab_size=1000,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = BertModel(config).eval()
    return _ReturnTuple(model), _token_inputs(config.vocab_size)


def tiny_gpt2() -> tuple[torch.nn.Module, tuple[Any, ...]]:
    from transformers import GPT2Config, GPT2LMHeadModel

    _seed()
    config = GPT2Config(
        vocab_size=1000,
        n_positions=64,
        n_embd=64,
        n_layer=2,
        n_head=4,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,  # the defaults (50256) lie outside this small vocabulary
        eos_token_id=0,
        use_cache=False,
    )
    model = GPT2LMHeadModel(config).eval()
    return _ReturnTuple(model), _token_inputs(config.vocab_size)


def vit_b16(batch: int = 2) -> tuple[torch.nn.Module, tuple[Any, ...]]:
    """ViT-Base/16 at 224 x 224 (transformers' ``ViTModel(ViTConfig())``: 12 layers, hidden 768), random
    weights; returns ``(last_hidden_state, pooler_output)``."""
    from transformers import ViTConfig, ViTModel

    _seed()
    model = ViTModel(ViTConfig()).eval()
    return _PixelsToTuple(model), (torch.randn(batch, 3, 224, 224),)


class _Block3d(torch.nn.Module):
    """A ResNet basic block with 3 x 3 x 3 convolutions; a strided 1 x 1 x 1 projection when the shape changes."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv3d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm3d(cout)
        self.conv2 = torch.nn.Conv3d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm3d(cout)
        self.shortcut = torch.nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = torch.nn.Sequential(
                torch.nn.Conv3d(cin, cout, 1, stride=stride, bias=False), torch.nn.BatchNorm3d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


class R3D18(torch.nn.Module):
    """ResNet-18 with 3-D convolutions for video clips ``(batch, 3, frames, height, width)``: a 3 x 7 x 7
    stem of stride (1, 2, 2), four stages of two basic blocks (64, 128, 256, 512 channels; stages 2-4
    halve every dim), global average pooling and a 400-way classifier."""

    def __init__(self, classes: int = 400) -> None:
        super().__init__()
        self.stem = torch.nn.Sequential(
            torch.nn.Conv3d(3, 64, (3, 7, 7), stride=(1, 2, 2), padding=(1, 3, 3), bias=False),
            torch.nn.BatchNorm3d(64),
            torch.nn.ReLU(),
        )
        blocks, cin = [], 64
        for i, cout in enumerate((64, 128, 256, 512)):
            blocks += [_Block3d(cin, cout, 1 if i == 0 else 2), _Block3d(cout, cout, 1)]
            cin = cout
        self.blocks = torch.nn.Sequential(*blocks)
        self.pool = torch.nn.AdaptiveAvgPool3d(1)
        self.fc = torch.nn.Linear(512, classes)

    def forward(self, clip: torch.Tensor) -> torch.Tensor:
        return self.fc(self.pool(self.blocks(self.stem(clip))).flatten(1))


def r3d_18(batch: int = 2) -> tuple[torch.nn.Module, tuple[Any, ...]]:
    """``R3D18`` with random weights (batch-norm statistics randomised too), on 8 x 64 x 64 clips."""
    _seed()
    model = R3D18()
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm3d):
            module.running_mean.uniform_(-0.1, 0.1)
            module.running_var.uniform_(0.5, 1.5)
    return model.eval(), (torch.randn(batch, 3, 8, 64, 64),)


class _PixelsToTuple(torch.nn.Module):
    """Calls a transformers vision model on ``pixel_values`` and returns its tensors as a plain tuple."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = self.model(pixel_values=pixel_values, return_dict=True)
        return tuple(v for v in out.values() if isinstance(v, torch.Tensor))


class _ReturnTuple(torch.nn.Module):
    """Calls a transformers model with ``use_cache=False`` and returns its outputs as a plain tuple.

    Both exporters accept ModelOutput, but a tuple keeps the eager reference and the ONNX outputs
    trivially comparable.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, return_dict=True)
        return tuple(v for v in out.values() if isinstance(v, torch.Tensor))


MODELS: dict[str, Factory] = {
    "mlp": mlp,
    "cnn": cnn,
    "transformer": transformer,
    "seed_cond": seed_cond,
    "tiny_bert": tiny_bert,
    "tiny_gpt2": tiny_gpt2,
}

# Full-size vision models (slower to export: not in ``MODELS``, which bench/run.py runs by default);
# each factory takes the batch size.
VISION: dict[str, Callable[..., tuple[torch.nn.Module, tuple[Any, ...]]]] = {
    "vit_b16": vit_b16,
    "r3d_18": r3d_18,
}
