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


class ChunkLoop(torch.nn.Module):
    """Loops in Python over chunks of 4: traced from 3 steps, the graph holds one chunk (sizes up to 4)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x[:, i * 4:(i + 1) * 4].cumsum(1) for i in range((x.shape[1] + 3) // 4)], 1)


class PositionTable(torch.nn.Module):
    """Adds a table of 6 positions: eager PyTorch itself refuses more than 6 steps."""

    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(6, 5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.table[: x.shape[1]]


def test_a_range_the_graph_holds_is_checked_above_its_bound() -> None:
    x = torch.randn(2, 3, 5)
    with pytest.raises(onnxport.VerificationError) as info:  # the ONNX model would be wrong from 5 steps
        onnxport.export(ChunkLoop(), (x,), dynamic_shapes=({0: Dim.DYNAMIC, 1: Dim.DYNAMIC},))
    assert "x_dim1=9, above the sizes 2 to 4" in info.value.fix
    prog = onnxport.export(ChunkLoop(), (x,), dynamic_shapes=({1: Dim("steps", max=4)},))  # what it holds
    assert "steps=9" not in str(prog.report)
    prog = onnxport.export(PositionTable(), (x,), dynamic_shapes=({1: Dim.DYNAMIC},))
    assert "x_dim1 takes sizes up to 6 only" in "\n".join(prog.report.notes)


class GrowingTable(torch.nn.Module):
    """Adds sinusoidal positions from a table of 6, rebuilt longer when a longer input comes (as some
    translation models do): the graph holds the table of 6, eager PyTorch runs any length."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("table", self.sinusoids(6), persistent=False)

    @staticmethod
    def sinusoids(length: int) -> torch.Tensor:
        angles = torch.arange(length, dtype=torch.float32)[:, None] / 10.0 ** torch.arange(5.0)
        return torch.sin(angles)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        table = self.sinusoids(x.shape[1]) if x.shape[1] > self.table.shape[0] else self.table
        return x + table[: x.shape[1]]


def test_a_table_rebuilt_for_longer_inputs_names_the_range_to_declare() -> None:
    x = torch.randn(2, 3, 5)
    with pytest.raises(onnxport.VerificationError) as info:  # the ONNX model's table stops at 6 positions
        onnxport.export(GrowingTable(), (x,), dynamic_shapes=({1: Dim.DYNAMIC},))
    assert "above the sizes 2 to 6" in info.value.fix and "position limit" in info.value.fix
    prog = onnxport.export(GrowingTable(), (x,), dynamic_shapes=({1: Dim("steps", max=6)},))
    assert prog.report.sizes_verified  # the declared range is checked, and nothing above it


class PaddedChunks(torch.nn.Module):
    """Pads to a multiple of 4, then loops over the chunks: torch.export keeps the chunk count of the example
    (one) as a guard only, no range, so the bound comes from the guards."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x.shape[1]
        pad = (4 - s % 4) % 4
        chunks = torch.nn.functional.pad(x, (0, 0, 0, pad)).reshape(x.shape[0], (s + pad) // 4, 4, x.shape[-1])
        state, out = torch.zeros_like(chunks[:, 0, 0]), []
        for i in range((s + pad) // 4):
            state = state * 0.5 + chunks[:, i].sum(1)
            out.append(chunks[:, i] + state[:, None])
        return torch.cat(out, 1)[:, :s]


def test_a_bound_kept_as_a_guard_only_is_checked_too() -> None:
    with pytest.raises(onnxport.VerificationError) as info:
        onnxport.export(PaddedChunks(), (torch.randn(2, 3, 5),), dynamic_shapes=({0: Dim.DYNAMIC, 1: Dim.DYNAMIC},))
    assert "x_dim1=7, above the sizes 2 to 3" in info.value.fix
