"""LinearWeightLayoutPass: a linear layer is ``MatMul(x, W^T) + b`` with ``W^T`` stored as an initializer
under the parameter's name; a weight read elsewhere too (tied) keeps one copy and its Transpose; a
weight streamed from a file is transposed when written, a bounded piece at a time."""

from __future__ import annotations

import io
from collections import Counter

import numpy as np
import onnx_ir as ir
import pytest
import torch
from torch.export import Dim

import onnxport
from onnxport.optimize import linear_layout
from onnxport.verify import OrtRunner


class Tied(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(50, 16)
        self.up = torch.nn.Linear(16, 24)
        self.down = torch.nn.Linear(24, 16, bias=False)
        self.head = torch.nn.Linear(16, 50, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        return self.head(h + self.down(torch.relu(self.up(h))))


def test_linear_weights_are_stored_transposed_for_matmul_and_tied_ones_kept_once() -> None:
    torch.manual_seed(0)
    model = Tied().eval()
    ids = torch.randint(0, 50, (2, 7))
    prog = onnxport.export(model, (ids,), dynamic_shapes=({0: Dim("batch"), 1: Dim("seq")},))
    assert prog.report.verification.ok
    graph = prog.model.graph
    ops = Counter(n.op_type for n in graph)
    assert ops["Gemm"] == 0 and ops["MatMul"] == 3 and ops["Transpose"] == 1  # the tied head's
    for name, param in (("up.weight", model.up.weight), ("down.weight", model.down.weight)):
        value = graph.initializers[name]
        assert [(u.node.op_type, u.idx) for u in value.uses()] == [("MatMul", 1)]
        np.testing.assert_array_equal(value.const_value.numpy(), param.detach().numpy().T)
    # one copy of the table, for the Gather and the head's Transpose
    (table,) = [v for v in graph.initializers.values() if list(v.shape) == [50, 16]]
    assert len(graph.initializers) == 4 and sorted(u.node.op_type for u in table.uses()) == ["Gather", "Transpose"]
    other = torch.randint(0, 50, (1, 3))
    torch.testing.assert_close(prog(other), model(other).detach(), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("shape", [(37, 5), (1, 8), (64, 64)])
def test_a_streamed_weight_is_written_transposed_piece_by_piece(shape: tuple[int, int], monkeypatch) -> None:
    array = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    source = ir.LazyTensor(lambda: ir.Tensor(array), dtype=ir.DataType.FLOAT, shape=ir.Shape(shape))
    monkeypatch.setattr(linear_layout, "_CHUNK_BYTES", 3 * shape[1] * 4)  # three source rows a piece
    lazy = linear_layout._transposed_lazily(source)
    assert not lazy.meta.get(linear_layout.COMPUTED_WHEN_READ)  # streamed: saved as external data
    assert list(lazy.shape) == [shape[1], shape[0]]
    out = io.BytesIO(b"x" * 5)
    out.seek(5)  # the tensor's offset in the data file
    lazy.tofile(out)
    assert out.tell() == 5 + array.nbytes
    written = np.frombuffer(out.getvalue()[5:], dtype=np.float32).reshape(shape[1], shape[0])
    np.testing.assert_array_equal(written, array.T)
    np.testing.assert_array_equal(lazy.numpy(), array.T)


def test_a_weight_in_memory_is_computed_when_read_and_saved_inline(tmp_path) -> None:
    model = torch.nn.Linear(8, 4).eval()
    prog = onnxport.export(model, (torch.randn(3, 8),))
    weight = prog.model.graph.initializers["weight"].const_value
    assert isinstance(weight, ir.LazyTensor) and weight.meta.get(linear_layout.COMPUTED_WHEN_READ)
    prog.save(tmp_path / "m.onnx")
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"]  # no external data for a small model
    x = torch.randn(3, 8)
    (out,) = OrtRunner(ir.load(str(tmp_path / "m.onnx"))).run([x])
    torch.testing.assert_close(out, model(x).detach(), atol=1e-6, rtol=1e-6)
