"""A dynamic dim the model lets take only some sizes (multiples of a chunk): kept dynamic under
Dim.DYNAMIC/AUTO, said in the report with the user's line, and verified at another size it takes."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch
from torch.export import Dim

import onnxport


class Chunks(torch.nn.Module):
    """Sums the sequence in chunks of ``chunk``, after dropping ``skip`` leading steps."""

    def __init__(self, chunk: int, skip: int = 0) -> None:
        super().__init__()
        self.chunk, self.skip = chunk, skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        x = x[:, self.skip:]
        return x.reshape(b, (s - self.skip) // self.chunk, self.chunk, d).sum(2)


def _sizes_verified(prog: onnxport.OnnxProgram) -> list[str]:
    return prog.report.sizes_verified


@pytest.mark.parametrize(("chunk", "skip", "seq", "says", "other"), [
    (4, 0, 8, "multiples of 4", 12),
    (64, 0, 128, "multiples of 64", 192),
    (4, 1, 9, "sizes 4*k + 1", 1),  # size 1 is 4*0 + 1: the model takes it
])
def test_multiple_of_a_chunk_is_noted_and_verified(chunk: int, skip: int, seq: int, says: str, other: int) -> None:
    model = Chunks(chunk, skip)
    prog = onnxport.export(model, (torch.randn(2, seq, 3),), dynamic_shapes=({0: Dim.DYNAMIC, 1: Dim.DYNAMIC},))
    notes = [n for n in prog.report.notes if n.startswith("x_dim1 takes")]
    assert len(notes) == 1 and says in notes[0], prog.report.notes
    assert "test_dim_constraints.py:25" in notes[0]  # the reshape's line
    assert f"x_dim1={other}" in prog.report.sizes_verified
    assert prog.model_proto.graph.input[0].type.tensor_type.shape.dim[1].dim_param == "x_dim1"
    sess = ort.InferenceSession(prog.model_proto.SerializeToString(), providers=["CPUExecutionProvider"])
    x = torch.randn(1, seq + 2 * chunk, 3)
    np.testing.assert_allclose(sess.run(None, {"x": x.numpy()})[0], model(x).numpy(), rtol=1e-5, atol=1e-5)


def test_any_size_gets_no_note() -> None:
    class Halves(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x[:, : x.shape[1] // 2] * 2  # a floor division, but every size runs

    prog = onnxport.export(Halves(), (torch.randn(2, 8),), dynamic_shapes="auto")
    assert not [n for n in prog.report.notes if "takes" in n]
    assert "x_dim1=1" in prog.report.sizes_verified


def test_a_named_dim_is_refused_with_one_line_and_the_derived_dim_to_use() -> None:
    with pytest.raises(onnxport.CaptureError) as info:
        onnxport.export(Chunks(4), (torch.randn(2, 8, 3),), dynamic_shapes=({1: Dim("s")},))
    message = str(info.value)
    assert message.count("not all values of s = x.shape[1]") == 1, message  # torch gives one line per guard
    assert "4*_s" in info.value.fix
