"""Verification's cost: one session for every input set, eager PyTorch once per set, generated sets by
need, and a time budget that may skip generated sets but never the example, and says so."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from torch._subclasses.fake_tensor import is_fake
from torch.export import Dim

import onnxport
from onnxport.verify.ahead import EagerAhead
from onnxport.verify import OrtRunner, SessionProcess, session_level
from onnxport.verify.session import _structure_and_weights


@pytest.fixture(autouse=True)
def _eager_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every eager run in this process, where the model's call log sees it: the example's run beside the
    capture, in a child process, is tested in test_ahead."""
    monkeypatch.setattr(EagerAhead, "start", classmethod(lambda cls, *a: None))


class Counting(torch.nn.Module):
    """Records the shapes of every eager call (not the fake-tensor calls of capture)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.calls: list[tuple[tuple[int, ...], ...]] = []

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if not is_fake(x):
            self.calls.append((tuple(x.shape), tuple(y.shape)))
        return self.lin(x).sum(1).sum(-1) + y.sum(-1)


def _counting_export(*, floor: bool = False, **kwargs):
    """The Counting model with a dynamic batch and sequence (from 2 with ``floor``: no size-1 sets)."""
    model = Counting().eval()
    args = (torch.randn(2, 5, 4), torch.randn(2, 3))
    if floor:
        batch, seq = Dim("batch", min=2), Dim("seq", min=2)
        shapes = ({0: batch, 1: seq}, {0: batch})
    else:
        shapes = ({0: Dim.DYNAMIC, 1: Dim.DYNAMIC}, {0: Dim.DYNAMIC})
    return model, onnxport.export(model, args, dynamic_shapes=shapes, **kwargs)


def test_one_session_and_one_eager_run_per_set() -> None:
    before, in_process = SessionProcess.started, OrtRunner.constructed
    model, prog = _counting_export()
    assert SessionProcess.started - before == 1  # example, batch and seq sets all in one session
    assert OrtRunner.constructed == in_process  # built in the child process, not here
    verification = prog.report.verification
    # batch (2) and seq (5) are two groups: one set each, moving alone to 1, which the Dims allow though
    # torch.export's range starts at 2; eager PyTorch decides size 1 (outside what torch.export captured)
    assert model.calls == [((2, 5, 4), (2, 3)), ((1, 5, 4), (1, 3)), ((2, 1, 4), (2, 3))]
    assert len(verification.runs) == 3 and verification.ok
    assert prog.report.sizes_verified == ["x_dim0=1", "x_dim1=1"]
    assert verification.time_split.keys() == {"session", "eager", "onnxruntime", "comparison"}
    assert "the export before it" in str(prog.report)
    prog(torch.randn(4, 6, 4), torch.randn(4, 3))
    assert SessionProcess.started - before == 1 and OrtRunner.constructed == in_process + 1  # prog's own, here


def test_a_given_set_at_another_size_makes_that_groups_set_unneeded() -> None:
    model, prog = _counting_export(verify_inputs=[(torch.randn(4, 5, 4), torch.randn(4, 3))])
    assert model.calls == [((2, 5, 4), (2, 3)), ((4, 5, 4), (4, 3)), ((2, 1, 4), (2, 3))]
    runs = prog.report.verification.runs
    assert [r.split(":")[0] for r in runs] == ["example", "verify_inputs[0]", runs[2].split(":")[0]]
    assert runs[2].startswith("example resized to") and len(prog.report.sizes_verified) == 1


def test_budget_skips_generated_sets_never_the_example_and_says_so() -> None:
    with pytest.warns(UserWarning, match="time budget"):
        model, prog = _counting_export(floor=True, verify_budget=0)
    verification = prog.report.verification
    assert model.calls == [((2, 5, 4), (2, 3))]  # the example alone
    assert verification.ok and verification.runs[0].startswith("example:")
    assert len(verification.over_budget) == 2 and prog.report.sizes_verified == []
    assert all("skipped: over the time budget" in r for r in verification.runs[1:])
    text = str(prog.report)
    assert "for its time budget (0x the export so far)" in text and "verify_budget=None" in text


def test_size_one_is_checked_whatever_the_budget() -> None:
    """Size 1, the size most deployments run and one torch.export did not capture, is never left out."""
    model, prog = _counting_export(verify_budget=0)
    assert model.calls == [((2, 5, 4), (2, 3)), ((1, 5, 4), (1, 3)), ((2, 1, 4), (2, 3))]
    assert prog.report.sizes_verified == ["x_dim0=1", "x_dim1=1"] and not prog.report.verification.over_budget


def test_no_budget_checks_everything() -> None:
    model, prog = _counting_export(verify_budget=None)
    assert len(prog.report.verification.runs) == 3 and not prog.report.verification.over_budget
    assert "no time budget" in str(prog.report.verification)


@pytest.mark.parametrize("budget", [-1, "2", True, float("nan")])
def test_budget_must_be_a_number(budget) -> None:
    with pytest.raises(onnxport.InvalidInputError, match="verify_budget"):
        onnxport.export(torch.nn.ReLU(), (torch.randn(2),), verify_budget=budget)


@torch.library.custom_op("onnxport_verify_test::times_rows", mutates_args=())
def times_rows(x: torch.Tensor) -> torch.Tensor:
    return x * x.shape[0]


@times_rows.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def _rows_baked_in(ctx, x):  # right only at the example's 2 rows
    return ctx.op.Mul(x, ctx.const(2.0, like=x))


class TimesRows(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.onnxport_verify_test.times_rows(x)


def _export_rows(rows=None, **kwargs):
    return onnxport.export(
        TimesRows(), (torch.randn(2, 3),), dynamic_shapes={"x": {0: rows or Dim("rows")}},
        custom_translations={"onnxport_verify_test::times_rows": _rows_baked_in}, **kwargs,
    )


def test_a_mismatch_at_another_size_is_still_caught() -> None:
    with pytest.raises(onnxport.VerificationError) as info:
        _export_rows()
    runs = info.value.verification.runs
    assert runs[0].startswith("example:") and runs[1].startswith("example resized to rows=1")
    assert "differs from eager PyTorch" in runs[1]  # below torch.export's range: the next size decides
    assert runs[2].startswith("example resized to rows=3") and not info.value.verification.ok


def test_the_budget_can_miss_it_and_the_report_says_what_was_not_checked() -> None:
    with pytest.raises(onnxport.VerificationError, match="at rows=1"):  # size 1 runs whatever the budget
        _export_rows(verify_budget=0)
    with pytest.warns(UserWarning, match="time budget") as record:
        prog = _export_rows(Dim("rows", min=2), verify_budget=0)
    assert not [w for w in record if "does not match" in str(w.message)]
    assert prog.report.verification.ok and prog.report.verification.over_budget == ["example resized to rows=3"]
    assert any("time budget" in w for w in prog.report.warnings)


def data_if(x: torch.Tensor) -> torch.Tensor:
    if x.sum() > 0:
        return x * 2
    return -x


def test_branch_search_stops_for_the_budget_and_says_so() -> None:
    with pytest.warns(UserWarning, match="time budget"):
        prog = onnxport.export(data_if, (torch.ones(3),), verify_budget=0)
    coverage = prog.report.verification.branches
    assert coverage.out_of_time and coverage.tries == 0
    assert "stopped by the time budget" in str(prog.report)
    full = onnxport.export(data_if, (torch.ones(3),))
    assert full.report.verification.branches.complete and len(full.report.verification.runs) == 2


class MatMulWeight(torch.nn.Module):
    """A weight a MatMul reads as it is (a linear layer's is stored transposed: a copy, computed when read)."""

    def __init__(self, size: int = 256) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(size, size) / size**0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w


def test_verification_runs_the_model_as_it_ships_in_a_child_process() -> None:
    """onnxruntime's default level (what prog(...) and users' sessions run), in a process of its own."""
    prog = onnxport.export(torch.nn.Conv2d(3, 8, 3), (torch.randn(1, 3, 8, 8),))
    verification = prog.report.verification
    assert verification.optimization == "all" and verification.isolated
    assert "level 'all' (onnxruntime's default) in a child process" in str(prog.report)


def test_weights_that_cannot_be_held_twice_are_fed_in_place() -> None:
    """At level all onnxruntime copies the weights; where the memory free cannot hold them, level none."""
    prog = onnxport.export(MatMulWeight(), (torch.randn(2, 256),), verify=False)
    assert session_level(prog.model, available=1 << 30) == "all"
    assert session_level(prog.model, available=256 * 256 * 4) == "none"


def test_session_reads_the_weights_in_place() -> None:
    model = MatMulWeight()
    prog = onnxport.export(model, (torch.randn(2, 256),), verify=False)
    proto, names, weights = _structure_and_weights(prog.model)
    assert proto.ByteSize() < 4096 and len(names) == 1  # the 256 KiB weight is not serialised
    assert np.shares_memory(weights[0], model.w.detach().numpy())
    x = torch.randn(2, 256)
    runner = OrtRunner(prog.model, optimization="none")
    torch.testing.assert_close(runner.run([x])[0], model(x).detach(), atol=1e-4, rtol=1e-4)


def test_made_up_sets_get_a_multiple_of_the_export_so_far(monkeypatch) -> None:
    """A fake clock: 1 s of export before verification, 2 s for the example's check, budget 2."""
    from onnxport.verify import budget as budget_module

    now = [100.0]
    monkeypatch.setattr(budget_module.time, "perf_counter", lambda: now[0])
    clock = budget_module.Budget(2.0, export_seconds=1.0)
    now[0] += 2.0  # the example's check
    assert clock.allows(5.9) and clock.limit == 6.0  # 2 x (1 + 2)
    now[0] += 4.0  # one made-up set ran
    assert clock.allows(1.9) and not clock.allows(2.1)
    assert budget_module.Budget(None, export_seconds=1.0).allows(1e9)


class Conv(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x).relu()


def test_a_batch_of_two_is_checked_at_one_where_the_user_allows_it() -> None:
    """torch.export takes dynamic dims to be >= 2; size 1, which the user's Dim allows, is checked in place of
    3: the size most deployments run, at half the example's cost instead of one and a half times it."""
    model = Conv().eval()
    prog = onnxport.export(model, (torch.randn(2, 3, 8, 8),), dynamic_shapes=({0: Dim("batch")},))
    assert prog.report.sizes_verified == ["batch=1"]
    assert prog.report.verification.ok and not prog.report.warnings
    x = torch.randn(1, 3, 8, 8)
    torch.testing.assert_close(prog(x), model(x).detach(), atol=1e-5, rtol=1e-4)


def test_a_user_minimum_of_two_is_kept() -> None:
    prog = onnxport.export(Conv().eval(), (torch.randn(2, 3, 8, 8),), dynamic_shapes=({0: Dim("batch", min=2)},))
    assert prog.report.sizes_verified == ["batch=3"]


class SqueezesSizeOne(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.squeeze() * 2  # drops the batch dim when it is 1: torch.export captured the >= 2 case


def test_a_model_that_treats_size_one_apart_fails_at_size_one() -> None:
    """Size 1, which the Dim allows, is decided by eager PyTorch: the captured >= 2 path differs there,
    and the export fails saying so, with how to narrow the dim."""
    with pytest.raises(onnxport.VerificationError) as info:
        onnxport.export(SqueezesSizeOne(), (torch.randn(2, 3),), dynamic_shapes=({0: Dim("batch")},))
    runs = info.value.verification.runs
    assert "batch=1" in runs[1] and "differs from eager PyTorch" in runs[1]
    assert runs[2].startswith("example resized to batch=3")
    fix = info.value.fix
    assert "at batch=1" in fix and "matches it at batch=3" in fix and "Dim('batch', min=2)" in fix
    prog = onnxport.export(SqueezesSizeOne(), (torch.randn(3, 3),), dynamic_shapes=({0: Dim("batch", min=2)},))
    assert prog.report.verification.ok and prog.report.sizes_verified == ["batch=2"]


class TwiceAtOneThriceOtherwise(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2 if x.shape[0] == 1 else x * 3


@pytest.mark.parametrize("batch", [2, 3, 4])
def test_size_one_is_checked_whatever_the_examples_batch(batch) -> None:
    """A Python size-1 path: never reported as checked at batch 1 unless eager PyTorch decided it."""
    with pytest.raises(onnxport.VerificationError, match="at batch=1"):
        onnxport.export(TwiceAtOneThriceOtherwise(), (torch.ones(batch, 3),), dynamic_shapes=({0: Dim("batch")},))


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads the resident size from /proc")
def test_verification_session_feeds_the_weights_instead_of_copying_them() -> None:
    """onnxruntime copies initializers given as values into memory of its own; fed as inputs, the
    verification session reads the model's weights where they are."""
    model = MatMulWeight(4096).eval()  # 64 MiB of weight
    prog = onnxport.export(model, (torch.randn(2, 4096),), verify=False)
    before = _rss_bytes()
    fed = OrtRunner(prog.model, optimization="none", weights_as_inputs=True)
    assert _rss_bytes() - before < 16 << 20
    assert fed.input_names == [prog.model.graph.inputs[0].name]
    copied = OrtRunner(prog.model, optimization="none")
    x = torch.randn(2, 4096)
    torch.testing.assert_close(fed.run([x])[0], copied.run([x])[0], atol=1e-5, rtol=1e-4)  # packed or not
    torch.testing.assert_close(fed.run([x])[0], model(x).detach(), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("as_inputs,level", [(True, "none"), (False, "all"), (False, "basic")])
def test_a_linear_weight_is_given_in_place_and_transposed_in_the_session(as_inputs: bool, level: str) -> None:
    """A linear layer's weight, which the file stores transposed, reaches the session as the parameter's
    own memory, transposed by the graph: fed as a graph input (level none, where memory is short), or as
    an initializer onnxruntime folds the Transpose of (the other levels): this process holds no
    transposed copy while the session lives."""
    model = torch.nn.Linear(256, 128).eval()
    prog = onnxport.export(model, (torch.randn(2, 256),), verify=False)
    proto, names, weights = _structure_and_weights(prog.model, as_inputs=as_inputs)
    fed = weights[names.index("weight.untransposed")]
    assert np.shares_memory(fed, model.weight.detach().numpy())
    assert [n.op_type for n in proto.graph.node][0] == "Transpose"
    assert ("weight.untransposed" in [i.name for i in proto.graph.input]) == as_inputs
    x = torch.randn(2, 256)
    runner = OrtRunner(prog.model, optimization=level, weights_as_inputs=as_inputs)
    torch.testing.assert_close(runner.run([x])[0], model(x).detach(), atol=1e-5, rtol=1e-5)
