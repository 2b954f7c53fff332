"""Real models exported with dynamic batch/sequence/spatial sizes, run at several other sizes vs eager."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import onnx_ir as ir
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.export import Dim

import onnxport

BATCH = Dim("batch", min=2, max=16)
SEQ = Dim("seq", min=2, max=60)

# (batch, seq) pairs: batch and seq varied alone and together, all different from the examples.
SIZES = [(3, 7), (5, 7), (3, 11), (9, 2), (2, 33)]


def _check(
    model: nn.Module,
    make: Callable[[int, int], tuple[tuple, dict[str, Any]]],
    dynamic_shapes: Any,
    sizes: list[tuple[int, int]] = SIZES,
    example: tuple[int, int] = (4, 6),
    tol: float = 1e-4,
) -> None:
    """Export at ``example`` sizes, then compare ONNX with eager at each of ``sizes``."""
    torch.manual_seed(0)
    args, kwargs = make(*example)
    prog = onnxport.export(model, args, kwargs, dynamic_shapes=dynamic_shapes, verify=False)
    dims = [d for value in prog.model.graph.inputs for d in value.shape]
    assert any(isinstance(d, ir.SymbolicDim) for d in dims), f"no input dim stayed dynamic: {dims}"
    for size in [example, *sizes]:
        args, kwargs = make(*size)
        with torch.no_grad():
            expected = model(*args, **kwargs)
        got = prog(*args, **kwargs)
        torch.testing.assert_close(got, expected, atol=tol, rtol=tol, msg=lambda m: f"at sizes {size}: {m}")


def _ids(n: int = 100) -> Callable[[int, int], torch.Tensor]:
    return lambda b, s: torch.randint(0, n, (b, s))


# -- transformers (torch.nn) ---------------------------------------------------------------------------


def _encoder() -> nn.TransformerEncoder:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True)
    return nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).eval()


def _padding_mask(b: int, s: int) -> torch.Tensor:
    mask = torch.zeros(b, s, dtype=torch.bool)
    mask[0, s // 2 + 1 :] = True  # one row padded; every row keeps at least one real token
    return mask


class EncoderPlain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc = _encoder()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.enc(x)


class EncoderPadded(EncoderPlain):
    def forward(self, x: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return self.enc(x, src_key_padding_mask=pad)


class EncoderCausal(EncoderPlain):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1])
        return self.enc(x, mask=mask, is_causal=True)


def test_encoder_plain() -> None:
    _check(EncoderPlain(), lambda b, s: ((torch.randn(b, s, 16),), {}), ({0: BATCH, 1: SEQ},))


def test_encoder_padding_mask() -> None:
    _check(
        EncoderPadded(),
        lambda b, s: ((torch.randn(b, s, 16), _padding_mask(b, s)), {}),
        ({0: BATCH, 1: SEQ}, {0: BATCH, 1: SEQ}),
    )


def test_encoder_causal() -> None:
    _check(EncoderCausal(), lambda b, s: ((torch.randn(b, s, 16),), {}), ({0: BATCH, 1: SEQ},))


class Decoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        layer = nn.TransformerDecoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True)
        self.dec = nn.TransformerDecoder(layer, num_layers=2).eval()

    def forward(self, tgt: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
        return self.dec(tgt, memory, tgt_mask=mask, tgt_is_causal=True)


def test_decoder_causal_cross_attention() -> None:
    mem = Dim("mem", min=2, max=60)
    # memory length follows neither batch nor target length
    _check(
        Decoder(),
        lambda b, s: ((torch.randn(b, s, 16), torch.randn(b, 2 * s + 1, 16)), {}),
        ({0: BATCH, 1: SEQ}, {0: BATCH, 1: mem}),
        sizes=[(3, 7), (5, 7), (3, 11), (9, 2), (2, 25)],
    )


class MHA(nn.Module):
    def __init__(self, need_weights: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.attn = nn.MultiheadAttention(16, 2, batch_first=True).eval()
        self.need_weights = need_weights

    def forward(self, q: torch.Tensor, kv: torch.Tensor) -> Any:
        out, weights = self.attn(q, kv, kv, need_weights=self.need_weights)
        return (out, weights) if self.need_weights else out


@pytest.mark.parametrize("need_weights", [True, False])
def test_multihead_attention(need_weights: bool) -> None:
    kv_len = Dim("kv", min=2, max=60)
    _check(
        MHA(need_weights),
        lambda b, s: ((torch.randn(b, s, 16), torch.randn(b, s + 3, 16)), {}),
        ({0: BATCH, 1: SEQ}, {0: BATCH, 1: kv_len}),
    )


# -- Hugging Face ------------------------------------------------------------------------------------------


def test_hf_bert() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64,
    )
    torch.manual_seed(0)
    model = transformers.BertModel(config).eval()

    def make(b: int, s: int) -> tuple[tuple, dict[str, Any]]:
        mask = torch.ones(b, s, dtype=torch.long)
        mask[1, s // 2 + 1 :] = 0
        return (), {"input_ids": torch.randint(0, 100, (b, s)), "attention_mask": mask}

    class Wrapped(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Any:
            out = self.model(input_ids=input_ids, attention_mask=attention_mask)
            return out.last_hidden_state, out.pooler_output

    dims = {"input_ids": {0: BATCH, 1: SEQ}, "attention_mask": {0: BATCH, 1: SEQ}}
    _check(Wrapped(), make, dims)


def test_hf_gpt2() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        vocab_size=100, n_embd=32, n_layer=2, n_head=2, n_positions=64, use_cache=False,
        bos_token_id=0, eos_token_id=0,
    )
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()

    class Wrapped(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            return self.model(input_ids=input_ids).logits

    _check(Wrapped(), lambda b, s: ((torch.randint(0, 100, (b, s)),), {}), ({0: BATCH, 1: SEQ},))


# -- CNN with dynamic batch and spatial sizes ----------------------------------------------------------------

HEIGHT = Dim("h", min=8, max=64)
WIDTH = Dim("w", min=8, max=64)
HW_SIZES = [(3, 16), (5, 16), (3, 23), (2, 9)]  # (batch, side); width = side + 3


def _image(b: int, side: int) -> tuple[tuple, dict[str, Any]]:
    return (torch.randn(b, 3, side, side + 3),), {}


class CNN(nn.Module):
    def __init__(self, upsample: str) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.pool = nn.AdaptiveAvgPool2d((2, 2))
        self.fc = nn.Linear(32, 5)
        self.upsample = upsample
        self.eval()

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = F.max_pool2d(F.relu(self.bn(self.conv1(x))), 2)
        if self.upsample == "scale":
            y = F.interpolate(y, scale_factor=2.0, mode="nearest")
        else:
            y = F.interpolate(y, size=(y.shape[2] * 2, y.shape[3] * 2), mode="bilinear", align_corners=False)
        y = F.relu(self.conv2(y))
        return self.fc(torch.flatten(self.pool(y), 1)), y


@pytest.mark.parametrize("upsample", ["scale", "size"])
def test_cnn_dynamic_hw(upsample: str) -> None:
    _check(CNN(upsample), _image, ({0: BATCH, 2: HEIGHT, 3: WIDTH},), sizes=HW_SIZES, example=(4, 12))


class AdaptivePool(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return F.adaptive_avg_pool2d(x, (3, 5)), F.adaptive_avg_pool1d(x.flatten(2), 7)


def test_adaptive_avg_pool_dynamic() -> None:
    # uneven windows at most sizes: the averaging matrix is built at run time
    _check(AdaptivePool(), _image, ({0: BATCH, 2: HEIGHT, 3: WIDTH},), sizes=HW_SIZES, example=(4, 12))


# -- shape arithmetic ----------------------------------------------------------------------------------------


def _view(x: torch.Tensor) -> torch.Tensor:
    return x.view(x.shape[0], -1, 4)


def _reshape_product(x: torch.Tensor) -> torch.Tensor:
    b, s = x.shape[0], x.shape[1]
    return x.reshape(b * s, -1)


def _new_zeros(x: torch.Tensor) -> torch.Tensor:
    return x.new_zeros(x.shape[0], 3) + x[:, :1, 0]


def _arange(x: torch.Tensor) -> torch.Tensor:
    return x + torch.arange(x.shape[1]).unsqueeze(-1)


def _half(x: torch.Tensor) -> torch.Tensor:
    return x[:, : x.shape[1] // 2]


def _pad(x: torch.Tensor) -> torch.Tensor:
    return F.pad(x, (0, 0, 0, 8 - x.shape[1] % 8))


def _zeros_plus_one(x: torch.Tensor) -> torch.Tensor:
    z = torch.zeros(x.size(0), x.size(1) + 1)
    return torch.cat([z, x.sum(-1)], dim=1)


def _expand(x: torch.Tensor) -> torch.Tensor:
    return x[:, :, :1].expand(x.shape[0], x.shape[1], 4) + x[..., :4]


def _check_assert(x: torch.Tensor) -> torch.Tensor:
    torch._check(x.shape[0] > 1)
    return x * x.shape[0]


def _sym_min_max(x: torch.Tensor) -> torch.Tensor:
    k = torch.sym_min(x.shape[1], 5)
    m = torch.sym_max(x.shape[0], 4)
    return x[:, :k].sum(-1) * m


def _floordiv_mod(x: torch.Tensor) -> torch.Tensor:
    s = x.shape[1]
    return x.reshape(x.shape[0], -1)[:, : (s // 3) * 8 + s % 3]


def _arange_float(x: torch.Tensor) -> torch.Tensor:
    pos = torch.arange(0, x.shape[1], dtype=torch.float32) / x.shape[1]
    return x + pos[None, :, None]


def _size_arith_tensor(x: torch.Tensor) -> torch.Tensor:
    # a symbolic size used as a tensor operand
    return x / x.shape[1] + x.shape[0]


def _split_heads(x: torch.Tensor) -> torch.Tensor:
    b, s, d = x.shape
    return x.view(b, s, 2, d // 2).transpose(1, 2).reshape(b * 2, s, d // 2)


def _new_ones_full(x: torch.Tensor) -> torch.Tensor:
    return torch.full((x.shape[0], x.shape[1] * 2), 1.5) + x.new_ones(x.shape[0], 1)


def _triu_mask(x: torch.Tensor) -> torch.Tensor:
    s = x.shape[1]
    mask = torch.ones(s, s, dtype=torch.bool).triu(1)
    return x.sum(-1)[:, None, :].expand(-1, s, -1).masked_fill(mask, 0.0)


def _reverse_index_select(x: torch.Tensor) -> torch.Tensor:
    # a Range counting down to -1 feeding Gather (onnxruntime would fuse it into a wrong Slice)
    return x.index_select(1, torch.arange(x.shape[1] - 1, -1, -1))


def _sdpa_causal(x: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(x, x, x, is_causal=True)


def _split_sizes(x: torch.Tensor) -> torch.Tensor:
    a, b = x.split([x.shape[1] - 2, 2], dim=1)
    return a.sum(1) + b.sum(1)


def _narrow(x: torch.Tensor) -> torch.Tensor:
    return x.narrow(1, x.shape[1] - 2, 2)


def _cumsum_positions(x: torch.Tensor) -> torch.Tensor:
    mask = (x[..., 0] > 0).long()
    return mask.cumsum(-1) * mask


def _pow(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1)[: x.shape[1] ** 2] * (x.shape[1] / x.shape[0]) ** 2


def _sym_ite_not_and(x: torch.Tensor) -> torch.Tensor:
    big = torch.sym_ite(x.shape[0] > x.shape[1], x.shape[0], x.shape[1])
    return x * big * torch.sym_not(x.shape[0] == x.shape[1]) + ((x.shape[0] > 3) & (x.shape[1] > 3))


def _stride_abs_sum(x: torch.Tensor) -> torch.Tensor:
    n = torch.sym_sum([x.shape[0], x.shape[1], 3])
    return x.new_ones(n).sum() * x * x.stride(0) + abs(x.shape[0] - x.shape[1])


SHAPE_FNS = [
    _reverse_index_select, _sdpa_causal, _split_sizes, _narrow, _cumsum_positions, _pow, _sym_ite_not_and,
    _stride_abs_sum,
    _view, _reshape_product, _new_zeros, _arange, _half, _pad, _zeros_plus_one, _expand, _check_assert,
    _sym_min_max, _floordiv_mod, _arange_float, _size_arith_tensor, _split_heads, _new_ones_full, _triu_mask,
]


class Fn(nn.Module):
    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


# Slicing to a symbolic end makes torch guard on relations (e.g. ``s // 2 != 1``) that a named Dim
# range cannot prove, so export refuses named dims here; Dim.AUTO lets torch record them instead.
NEEDS_AUTO = {_half, _sym_min_max, _floordiv_mod}


@pytest.mark.parametrize("fn", SHAPE_FNS, ids=lambda f: f.__name__.strip("_"))
def test_shape_arithmetic(fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
    dims = {0: Dim.AUTO, 1: Dim.AUTO} if fn in NEEDS_AUTO else {0: BATCH, 1: SEQ}
    _check(Fn(fn), lambda b, s: ((torch.randn(b, s, 8),), {}), (dims,))


def test_adaptive_avg_pool_uneven_symbolic_height() -> None:
    # was refused ("needs static input sizes"); only h is dynamic, w static and uneven (7 -> 3)
    torch.manual_seed(0)
    _check(
        nn.AdaptiveAvgPool2d(3),
        lambda b, h: ((torch.randn(1, 2, h, 7),), {}),
        ({2: Dim("h", min=4, max=64)},),
        sizes=[(1, 4), (1, 9), (1, 31)],
        example=(1, 7),
    )
