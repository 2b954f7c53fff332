"""Row-wise programs: a resized batch is checked against the example's eager rows, not another eager run,
only where the captured program provably keeps rows apart; anything else still runs eager PyTorch."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import is_fake
from torch.export import Dim

import onnxport
from onnxport.verify.ahead import EagerAhead
from onnxport.verify.rows import row_axes


@pytest.fixture(autouse=True)
def _eager_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every eager run in this process, where the model's call log sees it: the example's run beside the
    capture, in a child process, is tested in test_ahead."""
    monkeypatch.setattr(EagerAhead, "start", classmethod(lambda cls, *a: None))


class ConvNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3)
        self.norm = torch.nn.BatchNorm2d(8)
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(self.conv(x)).relu()
        return self.head(torch.nn.functional.adaptive_avg_pool2d(y, 1).flatten(1))


class Encoder(torch.nn.Module):
    """Token embedding, a norm, attention over each sequence and a per-token head: rows in the batch."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(50, 16)
        self.norm = torch.nn.LayerNorm(16)
        self.qkv = torch.nn.Linear(16, 48)
        self.cls = torch.nn.Parameter(torch.randn(1, 1, 16))

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.norm(self.embed(ids))
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1)
        q, k, v = self.qkv(x).view(x.shape[0], x.shape[1], 2, 24).transpose(1, 2).chunk(3, -1)
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(x.shape[0], -1, 24)
        return out.softmax(-1), out.mean(1)


def _axes(model: torch.nn.Module, args: tuple, dims: tuple) -> list[int | None] | None:
    ep = torch.export.export(model, args, dynamic_shapes=dims)
    return row_axes(ep, list(ep.range_constraints))


@pytest.mark.parametrize(
    ("model", "args", "axes"),
    [
        (ConvNet().eval(), (torch.randn(2, 3, 8, 8),), [0]),
        (Encoder().eval(), (torch.randint(0, 50, (2, 5)),), [0, 0]),
        (torch.nn.GRUCell(4, 4), (torch.randn(2, 4),), None),  # an op the walk does not know
    ],
)
def test_row_wise_programs(model, args, axes) -> None:
    assert _axes(model, args, ({0: Dim("batch")},)) == axes


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x - x.mean(0),  # a reduction over the rows
        lambda x: x * x.shape[0],  # the number of rows as a number
        lambda x: x.flip(0),  # rows reordered
        lambda x: x.reshape(-1),  # rows merged with another dim
        lambda x: x.T @ x,  # a product contracting the rows
        lambda x: torch.nn.functional.batch_norm(x, None, None, training=True),  # statistics over the rows
        lambda x: x - x[0],  # another row
        lambda x: x.cumsum(0),
        lambda x: torch.arange(x.shape[0]).unsqueeze(1) + x,  # the row's index
    ],
)
def test_programs_mixing_rows_are_not_row_wise(fn) -> None:
    class Fn(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return fn(x)

    assert _axes(Fn(), (torch.randn(3, 4),), ({0: Dim("batch")},)) is None


class CountingConv(ConvNet):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[int] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not is_fake(x):
            self.calls.append(x.shape[0])
        return super().forward(x)


def test_a_row_wise_program_checks_the_resized_batch_without_another_eager_run() -> None:
    """At sizes torch.export captured (>= 2), the example's rows stand for an eager run; never at 1."""
    model = CountingConv().eval()
    prog = onnxport.export(model, (torch.randn(2, 3, 8, 8),), dynamic_shapes=({0: Dim("batch", min=2)},))
    verification = prog.report.verification
    assert model.calls == [2] and verification.ok and prog.report.sizes_verified == ["batch=3"]
    assert "eager outputs: the example's, rows resized" in verification.runs[1]
    model.calls.clear()
    prog = onnxport.export(model, (torch.randn(2, 3, 8, 8),), dynamic_shapes=({0: Dim("batch")},))
    assert model.calls == [2, 1] and prog.report.sizes_verified == ["batch=1"]  # eager PyTorch decides size 1
    assert "rows resized" not in prog.report.verification.runs[1]
    x = torch.randn(3, 3, 8, 8)
    torch.testing.assert_close(prog(x), model(x).detach(), atol=1e-5, rtol=1e-4)


def _relu_right_at_two_rows(ctx, x):  # relu, times 2 / rows: right only at the example's batch of 2
    rows = ctx.op.Cast(ctx.op.Shape(x, start=0, end=1), to=1)
    return ctx.op.Mul(ctx.op.Relu(x), ctx.op.Div(ctx.const(2.0, like=x), rows))


def test_a_size_specific_translation_is_still_caught() -> None:
    """The example's rows do not match; eager PyTorch then runs and decides, as for any set."""
    model = CountingConv().eval()
    with pytest.raises(onnxport.VerificationError) as info:
        onnxport.export(model, (torch.randn(2, 3, 8, 8),), dynamic_shapes=({0: Dim("batch")},),
                        custom_translations={torch.ops.aten.relu.default: _relu_right_at_two_rows})
    runs = info.value.verification.runs
    assert model.calls == [2, 1, 3]
    assert "differs from eager PyTorch" in runs[1] and runs[2].startswith("example resized to batch=3")
