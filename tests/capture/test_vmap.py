"""torch.vmap inside a model: torch.export keeps it as pre-dispatch markers (``_add_batch_dim``...),
which onnxport expands into batched ATen ops before translating."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import torch
from torch.export import Dim

import onnxport


class PerRow(torch.nn.Module):
    """vmap over rows, with a submodule closed over, ``in_dims`` with None, and a nested vmap."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(6, 5)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        scores = torch.vmap(lambda row: self.proj(row).softmax(-1))(x)
        scaled = torch.vmap(lambda a, b: a * b, in_dims=(0, None))(x, y[0])
        scaled = torch.vmap(lambda a: a.cumsum(0))(scaled)
        outer = torch.vmap(torch.vmap(lambda a, b: a * b, in_dims=(None, 0)), in_dims=(0, None))(x[:, 0], y[0])
        return scores.sum(-1, keepdim=True) + scaled.mean(-1, keepdim=True) + outer.sum(-1, keepdim=True)


def _run(prog: onnxport.OnnxProgram, **feeds: torch.Tensor) -> np.ndarray:
    sess = ort.InferenceSession(prog.model_proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {k: v.numpy() for k, v in feeds.items()})[0]


def test_vmap_exports_at_other_batch_sizes() -> None:
    model = PerRow().eval()
    x, y = torch.randn(4, 6), torch.randn(3, 6)
    prog = onnxport.export(model, (x, y), dynamic_shapes=({0: Dim.DYNAMIC}, None))
    assert any("torch.vmap" in note for note in prog.report.notes)
    ops = {n.op_type for n in prog.model_proto.graph.node}
    assert not any("batch_dim" in op.lower() for op in ops)
    for n in (1, 7):
        x2 = torch.randn(n, 6)
        np.testing.assert_allclose(_run(prog, x=x2, y=y), model(x2, y).detach().numpy(), rtol=1e-5, atol=1e-5)
