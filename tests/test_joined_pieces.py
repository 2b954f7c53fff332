"""Per-image pieces of a count that is data (``torch.split(t, sizes.tolist())``, ``list(t)``) captured as the one piece
they join into, as a transformers model's ``get_image_features`` returns them (``onnxport.hf._joined_pieces``): the
file computes eager PyTorch's result for any count; code that reads the sizes otherwise is refused, and code that
treats the pieces unlike one another is caught by verification, not exported wrong."""

from __future__ import annotations

import inspect

import pytest
import torch
from torch.export import Dim

import onnxport
from onnxport.errors import OnnxportError, VerificationError
from onnxport.hf._joined_pieces import Size, joined_pieces

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.transformers


class Features(transformers.PreTrainedModel):
    """A stand-in for a multimodal model's image features: rows for every image, then ``how`` with the pieces."""

    config_class = transformers.PretrainedConfig

    def __init__(self, how: str) -> None:
        super().__init__(transformers.PretrainedConfig())
        self.proj = torch.nn.Linear(4, 4)
        self.how = how

    def forward(self, rows: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        features = self.proj(rows)
        if self.how == "split":  # Qwen2-VL's: per-image pieces, joined again by the caller
            return torch.cat(torch.split(features, counts.tolist()))
        if self.how == "list":  # LLaVA's: a batch of images as a list
            return torch.cat([f * 2 for f in list(features.reshape(counts.shape[0], -1, 4))])
        if self.how == "per-piece":  # a newline row after each image: not alike for every piece
            return torch.cat([torch.cat([f, f.new_ones(1, 4)]) for f in torch.split(features, counts.tolist())])
        return features * len(counts.tolist())  # the sizes read as a count


def _export(how: str, model: Features | None = None) -> onnxport.OnnxProgram:
    rows, counts = torch.randn(6, 4), torch.tensor([3, 3])
    return onnxport.export(model or Features(how).eval(), (rows, counts),
                           dynamic_shapes=({0: Dim.DYNAMIC}, {0: Dim.DYNAMIC}), verify_inputs=[
                               ((torch.randn(9, 4), torch.tensor([3, 3, 3])), {})])


@pytest.mark.parametrize("how", ["split", "list"])
def test_pieces_of_a_dynamic_count_export_as_their_join_and_match_eager_at_other_counts(how):
    model = Features(how).eval()
    prog = _export(how, model)
    rows, counts = torch.randn(12, 4), torch.tensor([3, 3, 3, 3])
    with torch.no_grad():
        torch.testing.assert_close(prog(rows, counts), model(rows, counts))


def test_pieces_treated_unlike_each_other_are_caught_by_verification():
    with pytest.raises(VerificationError):
        _export("per-piece")


def test_sizes_read_otherwise_than_by_a_split_are_refused():
    with pytest.raises(OnnxportError):
        _export("count")


def test_outside_a_capture_nothing_changes():
    with joined_pieces():
        assert torch.tensor([1, 2]).tolist() == [1, 2]
        assert [t.tolist() for t in torch.ones(2, 3)] == [[1.0] * 3] * 2
        assert len(torch.split(torch.ones(5), [2, 3])) == 2
    with pytest.raises(TypeError, match="onnxport captures per-image sizes"):
        Size(torch.ones(2)) + 1


class Counted(transformers.PreTrainedModel):
    """Pieces counted with ``len()`` of tensors whose first dim is dynamic, the counts then the sizes of a split
    (DepthPro's patches of each scale)."""

    config_class = transformers.PretrainedConfig

    def __init__(self) -> None:
        super().__init__(transformers.PretrainedConfig())
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        pieces = [rows.reshape(-1, 4), rows[:, :2].reshape(-1, 4)]
        counts = [len(p) for p in pieces]
        first, second = torch.split(self.proj(torch.cat(pieces)), counts)
        return first * len(second)


def line_of(text: str) -> int:
    lines, first = inspect.getsourcelines(Counted.forward)
    return first + next(i for i, line in enumerate(lines) if text in line)


def test_len_of_a_dynamic_first_dim_is_read_as_its_size_and_matches_eager_at_other_sizes():
    model = Counted().eval()
    prog = onnxport.export(model, (torch.randn(2, 4, 4),), dynamic_shapes=({0: Dim.DYNAMIC},))
    lines = [line_of("counts = ["), line_of("len(second)")]
    assert [(r.kind, r.line) for r in prog.report.rewrites] == [("len", line) for line in lines]
    rows = torch.randn(5, 4, 4)
    with torch.no_grad():
        torch.testing.assert_close(prog(rows), model(rows))

