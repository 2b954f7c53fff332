"""Scaled dot-product attention (and the modules that emit it) against eager PyTorch."""

import pytest
import torch
from torch import randn

import onnxport
from onnxport.translate.registry import ops
from tests.ops._runner import OpCase, params, run_case

aten = ops.aten  # an op this torch lacks is an AbsentOp: its cases are skipped
F = torch.nn.functional
f32, f16 = torch.float32, torch.float16
Dim = torch.export.Dim
F16_TOL = {f16: (2e-2, 2e-2)}


def qkv(b: int = 2, h: int = 3, lq: int = 4, s: int = 5, e: int = 8, hk: int | None = None, ev: int | None = None):
    hk = h if hk is None else hk
    return randn(b, h, lq, e), randn(b, hk, s, e), randn(b, hk, s, ev or e)


def bool_mask(lq: int = 4, s: int = 5) -> torch.Tensor:
    mask = torch.rand(lq, s) > 0.5
    mask[:, 0] = True
    return mask


def left_padded_mask(lq: int = 4, s: int = 5) -> torch.Tensor:
    """Causal, with the first two keys padding: the first query row sees nothing (torch: zero weights)."""
    mask = torch.ones(lq, s, dtype=torch.bool).tril(s - lq)
    mask[:, :2] = False
    return mask


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None, **kw) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kw)


def sdpa_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def sdpa_scale(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, scale=0.3)


def sdpa_gqa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)


def sdpa_gqa_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True, is_causal=True)


FLASH_CPU = aten._scaled_dot_product_flash_attention_for_cpu.default


def flash_cpu_masked(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, **kw
) -> tuple[torch.Tensor, ...]:
    return FLASH_CPU(q, k, v, attn_mask=mask, **kw)


SEQ = (({2: Dim("l", min=2)}, {2: Dim("s", min=2)}, {2: Dim("s", min=2)}),)

CASES = [
    OpCase(aten.scaled_dot_product_attention.default, args=lambda: qkv(), expect_ops=["Attention"],
           dtypes=(f32, f16), tol=F16_TOL),
    OpCase(sdpa, args=lambda: (*qkv(ev=6), bool_mask()), name="bool_mask", expect_ops=["Attention"], dtypes=(f32, f16),
           tol=F16_TOL),
    OpCase(sdpa, args=lambda: (*qkv(), left_padded_mask()), name="fully_masked_rows", dtypes=(f32, f16), tol=F16_TOL),
    OpCase(sdpa, args=lambda: (*qkv(), torch.zeros(4, 5).masked_fill(~left_padded_mask(), float("-inf"))),
           name="fully_masked_rows_float"),
    OpCase(sdpa, args=lambda: (*qkv(), randn(2, 1, 4, 5)), name="float_mask", expect_ops=["Attention"], dtypes=(f32, f16),
           tol=F16_TOL),
    OpCase(sdpa_causal, args=lambda: qkv(lq=5, s=5), expect_ops=["Attention"], dtypes=(f32, f16), tol=F16_TOL),
    OpCase(sdpa_causal, args=lambda: qkv(lq=3, s=6), name="rectangular"),
    OpCase(sdpa_scale, args=lambda: qkv()),
    OpCase(sdpa_gqa, args=lambda: qkv(h=6, hk=2), dtypes=(f32, f16), tol=F16_TOL),
    OpCase(sdpa_gqa_causal, args=lambda: qkv(h=4, hk=2, lq=5, s=5)),
    OpCase(sdpa, args=lambda: (randn(3, 4, 8), randn(3, 6, 8), randn(3, 6, 8)), name="3d"),
    OpCase(sdpa_causal, args=lambda: qkv(lq=5, s=5), name="dynamic_seq", dynamic_shapes=SEQ),
    OpCase(sdpa, args=lambda: qkv(), name="dynamic_embed",
           dynamic_shapes=(({3: Dim("e", min=2)}, {3: Dim("e", min=2)}, {3: Dim("e", min=2)}),)),
    OpCase(sdpa_gqa, args=lambda: qkv(h=4, hk=2), name="dynamic_heads",
           dynamic_shapes=(({1: 2 * Dim("hk")}, {1: Dim("hk")}, {1: Dim("hk")}),)),
    OpCase(sdpa_gqa, args=lambda: qkv(h=6, hk=3), name="dynamic_batch",
           dynamic_shapes=(({0: Dim("b", min=2)}, {0: Dim("b", min=2)}, {0: Dim("b", min=2)}),)),
    # the CPU flash kernel: the attention output and each query row's logsumexp (float32 for half inputs)
    OpCase(FLASH_CPU, args=lambda: qkv(), expect_ops=["Attention"], dtypes=(f32, f16), tol=F16_TOL),
    OpCase(FLASH_CPU, args=lambda: qkv(lq=3, s=6), kwargs={"is_causal": True}, name="causal"),
    OpCase(FLASH_CPU, args=lambda: qkv(lq=6, s=3), kwargs={"is_causal": True}, name="causal_long_query"),
    OpCase(flash_cpu_masked, args=lambda: (*qkv(), randn(2, 1, 4, 5)), kwargs={"scale": 0.3}, name="mask_scale"),
    OpCase(flash_cpu_masked, args=lambda: (*qkv(lq=5, s=5), randn(5, 5)), kwargs={"is_causal": True},
           name="mask_causal"),
    OpCase(flash_cpu_masked, name="fully_masked_rows",
           args=lambda: (*qkv(), torch.zeros(4, 5).masked_fill(~left_padded_mask(), float("-inf")))),
    OpCase(FLASH_CPU, args=lambda: qkv(h=6, hk=2), name="gqa", dtypes=(f32, f16), tol=F16_TOL),
    OpCase(FLASH_CPU, args=lambda: qkv(lq=5, s=5), kwargs={"is_causal": True}, name="dynamic",
           dynamic_shapes=(({0: Dim("b", min=2), 2: Dim("l", min=2)}, {0: Dim("b", min=2), 2: Dim("s", min=2)},
                            {0: Dim("b", min=2), 2: Dim("s", min=2)}),)),
]


@pytest.mark.parametrize(("case", "dtype"), params(CASES))
def test_op(case: OpCase, dtype: torch.dtype | None) -> None:
    run_case(case, dtype)


def test_gqa_symbolic_head_counts_at_other_sizes() -> None:
    """enable_gqa with symbolic head counts: the group size is computed from the shapes at run time."""

    class Gqa(torch.nn.Module):
        def forward(self, q, k, v):
            return sdpa_gqa(q, k, v)

    hk = Dim("hk", max=16)
    prog = onnxport.export(Gqa(), qkv(h=4, hk=2), dynamic_shapes=({1: 2 * hk}, {1: hk}, {1: hk}), verify=False)
    for kv_heads in (1, 3):
        args = qkv(h=2 * kv_heads, hk=kv_heads)
        torch.testing.assert_close(prog(*args), Gqa()(*args), atol=1e-5, rtol=1e-5)


def test_causal_mask_follows_runtime_sequence_length() -> None:
    """The causal mask is built from Shape, so another sequence length than the example's still works."""
    class M(torch.nn.Module):
        def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    seq = Dim("t", min=2)
    prog = onnxport.export(M(), qkv(lq=5, s=5), dynamic_shapes=({2: seq}, {2: seq}, {2: seq}), verify=False)
    other = qkv(lq=9, s=9)
    torch.testing.assert_close(prog(*other), M()(*other), atol=1e-4, rtol=1e-4)


def _module_case(module: torch.nn.Module, *args: torch.Tensor) -> None:
    module.eval()
    with torch.no_grad():
        expected = module(*args)
    prog = onnxport.export(module, args, verify=False)
    actual = prog(*args)
    exp = [t for t in torch.utils._pytree.tree_leaves(expected) if isinstance(t, torch.Tensor)]
    act = [t for t in torch.utils._pytree.tree_leaves(actual) if isinstance(t, torch.Tensor)]
    assert len(exp) == len(act)
    for e, a in zip(exp, act):
        torch.testing.assert_close(a, e, atol=1e-4, rtol=1e-4)


class _MHA(torch.nn.Module):
    def __init__(self, need_weights: bool):
        super().__init__()
        self.attn = torch.nn.MultiheadAttention(8, 2, batch_first=True)
        self.need_weights = need_weights

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        return self.attn(x, x, x, attn_mask=mask, need_weights=self.need_weights)


@pytest.mark.parametrize("need_weights", [True, False])
def test_multihead_attention(need_weights: bool) -> None:
    # need_weights=True runs bmm + softmax + mean; False runs scaled_dot_product_attention.
    _module_case(_MHA(need_weights), randn(2, 5, 8), torch.triu(torch.ones(5, 5, dtype=torch.bool), 1))


def test_transformer_encoder_layer() -> None:
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.1, batch_first=True)
    _module_case(layer, randn(2, 5, 8))


def test_layers_sharing_a_mask_find_its_hidden_rows_once() -> None:
    """Below opset 23 (the default target), the rows a mask hides entirely are found from the mask once,
    not from each layer's scores: two attention calls on one mask give one ReduceMax, and each layer adds
    the mask's bias and scales its weights, left-padded rows (zero weights in torch) included."""
    import onnxport

    class TwoLayers(torch.nn.Module):
        def forward(self, q, k, v, mask):
            return sdpa(sdpa(q, k, v, mask), k, v, mask)

    args = (*qkv(lq=5, s=5), left_padded_mask(5, 5).expand(2, 1, 5, 5))
    prog = onnxport.export(TwoLayers(), args, opset=21)
    ops = [n.op_type for n in prog.model_proto.graph.node]
    assert ops.count("ReduceMax") == 1 and ops.count("Softmax") == 2, ops
    torch.testing.assert_close(prog(*args), TwoLayers()(*args), atol=1e-5, rtol=1e-5)
