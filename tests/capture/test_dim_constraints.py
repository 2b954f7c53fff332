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


class Recurrent(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        state, out = torch.zeros_like(x[:, 0]), []
        for t in range(x.shape[1]):  # unrolled at the example's length: the dim cannot stay dynamic
            state = state * 0.5 + x[:, t]
            out.append(state)
        return torch.stack(out, 1)


def test_a_dim_fixed_by_the_model_names_the_line_that_fixed_it() -> None:
    with pytest.raises(onnxport.CaptureError) as info:
        onnxport.export(Recurrent(), (torch.randn(2, 5, 3),), dynamic_shapes=({0: Dim.DYNAMIC, 1: Dim.DYNAMIC},))
    err = info.value
    assert err.location is not None and err.location.file == __file__
    assert err.location.code.startswith("for t in range(x.shape[1])")
    assert "a Python loop over a size" in str(err) and "1: 5" in err.fix
