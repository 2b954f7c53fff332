"""The default pass pipeline: what it leaves for onnxruntime to load."""

from __future__ import annotations

import torch

import onnxport


class PoolToItsOwnSize(torch.nn.Module):
    """adaptive_avg_pool1d to the input's own length is an Identity of the graph input."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.adaptive_avg_pool1d(x, 12)
        return h * (1.0 / max(h.shape[0] - 1, 1))


def test_identities_are_removed_before_onnxruntime_sees_them() -> None:
    """onnxruntime's default level removed such an Identity and left its reader dangling ('not a graph
    input, initializer, or output of a previous node'): the file failed to load where users run it."""
    x = torch.randn(3, 6, 12)
    prog = onnxport.export(PoolToItsOwnSize(), (x,), dynamic_shapes={"x": {0: torch.export.Dim.DYNAMIC}})
    assert "Identity" not in {n.op_type for n in prog.model.graph}
    assert prog.report.verification.ok and prog.report.verification.optimization == "all"
    torch.testing.assert_close(prog(x[:2]), PoolToItsOwnSize()(x[:2]))
