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
from onnxport.verify import OrtRunner
from onnxport.verify.session import _structure_and_weights


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


def _counting_export(**kwargs):
    model = Counting().eval()
    args = (torch.randn(2, 5, 4), torch.randn(2, 3))
    shapes = ({0: Dim.DYNAMIC, 1: Dim.DYNAMIC}, {0: Dim.DYNAMIC})
    return model, onnxport.export(model, args, dynamic_shapes=shapes, **kwargs)


def test_one_session_and_one_eager_run_per_set() -> None:
    before = OrtRunner.constructed
    model, prog = _counting_export()
    assert OrtRunner.constructed - before == 1  # example, batch and seq sets all in one session
    verification = prog.report.verification
    # batch (2) and seq (5) are two groups: one set each, moving alone, one below the example's (batch
    # to 1, which the Dim allows though torch.export's range starts at 2); the model keeps its batch rows
    # apart, so the batch set is checked against the example's eager rows, the seq set against eager
    assert model.calls == [((2, 5, 4), (2, 3)), ((2, 4, 4), (2, 3))]
    assert "rows resized" in verification.runs[1] and "rows resized" not in verification.runs[2]
    assert len(verification.runs) == 3 and verification.ok
    assert len(prog.report.sizes_verified) == 2
    assert verification.time_split.keys() == {"session", "eager", "onnxruntime", "comparison"}
    assert "the export before it" in str(prog.report)
    assert OrtRunner.constructed - before == 1  # prog(...) has not been called: no session of its own yet
    prog(torch.randn(4, 6, 4), torch.randn(4, 3))
    assert OrtRunner.constructed - before == 2


def test_a_given_set_at_another_size_makes_that_groups_set_unneeded() -> None:
    model, prog = _counting_export(verify_inputs=[(torch.randn(4, 5, 4), torch.randn(4, 3))])
    assert model.calls == [((2, 5, 4), (2, 3)), ((4, 5, 4), (4, 3)), ((2, 4, 4), (2, 3))]
    runs = prog.report.verification.runs
    assert [r.split(":")[0] for r in runs] == ["example", "verify_inputs[0]", runs[2].split(":")[0]]
    assert runs[2].startswith("example resized to") and len(prog.report.sizes_verified) == 1


def test_budget_skips_generated_sets_never_the_example_and_says_so() -> None:
    with pytest.warns(UserWarning, match="time budget"):
        model, prog = _counting_export(verify_budget=0)
    verification = prog.report.verification
    assert model.calls == [((2, 5, 4), (2, 3))]  # the example alone
    assert verification.ok and verification.runs[0].startswith("example:")
    assert len(verification.over_budget) == 2 and prog.report.sizes_verified == []
    assert all("skipped: over the time budget" in r for r in verification.runs[1:])
    text = str(prog.report)
    assert "for its time budget (0x the export so far)" in text and "verify_budget=None" in text


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


def _export_rows(**kwargs):
    return onnxport.export(
        TimesRows(), (torch.randn(2, 3),), dynamic_shapes={"x": {0: Dim("rows")}},
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
    with pytest.warns(UserWarning, match="time budget") as record:
        prog = _export_rows(verify_budget=0)
    assert not [w for w in record if "does not match" in str(w.message)]
    assert prog.report.verification.ok and prog.report.verification.over_budget == ["example resized to rows=1"]
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


class TransposedWeight(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(256, 256))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w.T


@pytest.mark.parametrize(
    ("model", "args", "level"),
    [
        (TransposedWeight(), (torch.randn(2, 256),), "basic"),  # Transpose(w): folded once, not per run
        (torch.nn.Conv2d(3, 8, 3), (torch.randn(1, 3, 8, 8),), "none"),
        # nn.Linear on (batch, seq, features): Gemm reads the weight as stored, nothing to fold
        (torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.Linear(512, 256, bias=False)),
         (torch.randn(2, 5, 256),), "none"),
    ],
)
def test_session_optimises_only_what_verification_needs(model, args, level) -> None:
    prog = onnxport.export(model, args)
    assert prog.report.verification.optimization == level
    if level == "none":
        assert "Transpose" not in {n.op_type for n in prog.model_proto.graph.node}
    assert f"optimisation level '{level}'" in str(prog.report)


def test_session_reads_the_weights_in_place() -> None:
    model = TransposedWeight()
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


def test_a_model_that_treats_size_one_apart_is_not_a_false_alarm() -> None:
    with pytest.warns(UserWarning, match="batch=1"):
        prog = onnxport.export(SqueezesSizeOne(), (torch.randn(2, 3),), dynamic_shapes=({0: Dim("batch")},))
    verification = prog.report.verification
    assert verification.ok and prog.report.sizes_verified == ["batch=3"]
    assert "differs from eager PyTorch" in verification.runs[1] and "shape" in verification.runs[1]
    assert any("batch=1" in w and ">= 2" in w for w in prog.report.warnings)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads the resident size from /proc")
def test_verification_session_feeds_the_weights_instead_of_copying_them() -> None:
    """onnxruntime copies initializers given as values into memory of its own; fed as inputs, the
    verification session reads the model's weights where they are."""
    model = torch.nn.Linear(4096, 4096).eval()  # 64 MiB of weight
    prog = onnxport.export(model, (torch.randn(2, 4096),), verify=False)
    before = _rss_bytes()
    fed = OrtRunner(prog.model, optimization="none", weights_as_inputs=True)
    assert _rss_bytes() - before < 16 << 20
    assert fed.input_names == [prog.model.graph.inputs[0].name]
    copied = OrtRunner(prog.model, optimization="none")
    x = torch.randn(2, 4096)
    torch.testing.assert_close(fed.run([x])[0], copied.run([x])[0])
    torch.testing.assert_close(fed.run([x])[0], model(x).detach(), atol=1e-4, rtol=1e-4)
