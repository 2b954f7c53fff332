"""Functions test_concurrency runs in Pool workers and threads (importable by a spawned worker)."""

from __future__ import annotations

import os

import torch

import onnxport


class Branchy(torch.nn.Module):
    def __init__(self, seed: int):
        super().__init__()
        torch.manual_seed(seed)
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        if y.sum() > 0:
            return y * 2
        return -y


def export_mlp(batch: int) -> dict:
    """A two-layer MLP exported (verified) in this process: its report and outputs."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()
    x = torch.randn(batch, 8)
    prog = onnxport.export(model, (x,), dynamic_shapes=({0: onnxport.Dim("batch")},))
    check = prog.report.verification
    return {"status": check.status, "cost": check.cost, "onnx": prog(x).tolist(),
            "eager": model(x).detach().tolist()}


def export_hf_folder(directory: str, out: str) -> list[str]:
    onnxport.export_hf(directory, "text-generation", out)
    return sorted(os.listdir(out))


def export_branchy(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(onnxruntime's output, eager's) for Branchy(seed) exported with a dynamic batch, at another batch."""
    model = Branchy(seed).eval()
    prog = onnxport.export(model, (torch.randn(2, 4),), dynamic_shapes=({0: onnxport.Dim("batch")},))
    x = torch.randn(5, 4)
    with torch.no_grad():
        return prog(x), model(x)
