"""Region wrappers that torch.export emits when a model is exported with autograd on: grad-mode and
autocast regions are inlined, and an enabled autocast region keeps the dtypes it gives each op."""

from __future__ import annotations

import onnx_ir as ir
import pytest
import torch
from torch import nn

import onnxport

DYN = torch.export.Dim.DYNAMIC


def _wrappers(model: nn.Module, args: tuple) -> set[str]:
    """The region wrappers torch.export puts in the graph (so a test cannot pass on a graph without one)."""
    with torch.enable_grad():
        ep = torch.export.export(model, args)
    return {n.target.name() for n in ep.graph.nodes if isinstance(n.target, torch._ops.HigherOrderOperator)}


class NoGradRegion(nn.Module):
    """transformers' rotary embeddings compute under ``@torch.no_grad()``."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            freqs = torch.arange(x.shape[-1], dtype=torch.float32) / x.shape[-1]
            angle = x * freqs
        with torch.enable_grad():
            gate = self.proj(x).sigmoid()
        return angle.cos() * gate + angle.sin()


class AutocastOff(nn.Module):
    """timm's EfficientViT computes its linear attention in an autocast-disabled region."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(8, 24)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        with torch.autocast(device_type=x.device.type, enabled=False):
            q, k, v = q.float().relu(), k.float().relu(), v.float()
            kv = k.transpose(-1, -2) @ v
            out = (q @ kv) / (q @ k.sum(dim=-2, keepdim=True).transpose(-1, -2) + 1e-5)
        return out


class AutocastHalf(nn.Module):
    """An enabled float16 region: the matmuls run in float16, ``prod`` (on CPU autocast's float32 list)
    goes back to float32; the nested no_grad region runs under the same autocast."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.autocast("cpu", dtype=torch.float16):
            h = self.proj(x)
            with torch.no_grad():
                scores = (h @ h.transpose(-1, -2)).softmax(-1).prod(-1)
        return h, scores


@pytest.mark.parametrize("grad", [True, False], ids=["autograd_on", "no_grad"])
@pytest.mark.parametrize(
    ("model", "wrapper"),
    [(NoGradRegion, "wrap_with_set_grad_enabled"), (AutocastOff, "wrap_with_autocast")],
    ids=["no_grad_region", "autocast_disabled"],
)
def test_region_is_inlined(model: type[nn.Module], wrapper: str, grad: bool) -> None:
    torch.manual_seed(0)
    net, x = model().eval(), torch.randn(2, 5, 8)
    assert wrapper in _wrappers(net, (x,))
    with torch.set_grad_enabled(grad):
        prog = onnxport.export(net, (x,), dynamic_shapes=({0: DYN, 1: DYN},))
    assert prog.report.verification.ok
    assert not any(n.domain for n in prog.model.graph), "no wrapper survives as a custom node"
    y = torch.randn(3, 4, 8)
    torch.testing.assert_close(prog(y), net(y), atol=1e-5, rtol=1e-5)


def test_enabled_autocast_keeps_its_dtypes() -> None:
    torch.manual_seed(0)
    net, x = AutocastHalf().eval(), torch.randn(4, 8)
    assert "wrap_with_autocast" in _wrappers(net, (x,))
    prog = onnxport.export(net, (x,))
    h, scores = prog(x)
    eager_h, eager_scores = net(x)
    assert (h.dtype, scores.dtype) == (eager_h.dtype, eager_scores.dtype) == (torch.float16, torch.float32)
    torch.testing.assert_close(h, eager_h, atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(scores, eager_scores, atol=1e-3, rtol=1e-2)
    matmuls = [n for n in prog.model.graph if n.op_type in ("MatMul", "Gemm")]
    assert matmuls and all(i.dtype == ir.DataType.FLOAT16 for n in matmuls for i in n.inputs[:2]), (
        "the region's matmuls run in float16, as under autocast"
    )
