"""The fuzz test's own parts, always on and quick (a few seconds): the generator is deterministic and draws
valid programs of every kind, the checker tells matched from refused from failed, and a crash in
onnxruntime is reported with its step instead of killing the test."""

from __future__ import annotations

import collections

import pytest
import torch

import onnxport
from tests.fuzz import programs
from tests.fuzz.check import Checker, Outcome, _compare
from tests.fuzz.run import summary


def test_same_seed_same_program_weights_and_inputs() -> None:
    a, b = programs.make_program(7), programs.make_program(7)
    assert a.source == b.source and a.description == b.description
    for x, y in zip(a.args, b.args):
        assert torch.equal(x, y)
    sa, sb = a.model.state_dict(), b.model.state_dict()
    assert sa.keys() == sb.keys()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert programs.make_program(8).source != a.source


def test_generator_draws_valid_programs_of_every_kind() -> None:
    families, dtypes, dynamic = collections.Counter(), collections.Counter(), 0
    for seed in range(120):
        p = programs.make_program(seed)
        assert p.attempt <= 3, (seed, p.attempt)  # an invalid draw now and then, not a broken generator
        assert p.dynamic == (seed % 2 == 1) and p.batch in (1, 2, 3, 4)
        assert all(a.shape[0] == p.batch for a in p.args)
        families.update(p.families)
        dtypes[p.dtype] += 1
        dynamic += p.dynamic
    assert dynamic == 60
    assert set(dtypes) == {torch.float32, torch.float16, torch.float64, torch.bfloat16}
    for family in ("unary", "reduce", "linear", "conv", "pool", "norm", "reshape", "slice", "cat", "softmax",
                   "where", "cumsum", "pad", "attention", "rnn", "cast", "size"):
        assert families[family] > 0, family


def test_inputs_at_other_sizes_repeat_or_cut_rows() -> None:
    p = programs.make_program(3)
    small, large = p.inputs_at(1), p.inputs_at(5)
    for x, s, l in zip(p.args, small, large):
        assert s.shape[0] == 1 and torch.equal(s[0], x[0])
        assert l.shape[0] == 5 and torch.equal(l[p.batch], x[0]) and torch.equal(l[:p.batch], x)


def test_compare_tolerance_and_nan() -> None:
    e = torch.tensor([1.0, float("nan"), float("inf")])
    assert _compare(e, e.clone(), 1e-4, 1e-3) == ""
    assert "out of tolerance" in _compare(e, torch.tensor([1.1, float("nan"), float("inf")]), 1e-4, 1e-3)
    assert "out of tolerance" in _compare(e, torch.tensor([1.0, 0.0, float("inf")]), 1e-4, 1e-3)
    assert _compare(e, torch.ones(2), 1e-4, 1e-3).startswith("shape")


def test_checker_matched_and_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with Checker() as checker:
        assert checker.check(0).status in ("matched", "refused", "failed")  # whatever onnxport does today

        def refuse(*args, **kwargs):
            raise onnxport.CaptureError("no")

        def foreign(*args, **kwargs):
            raise KeyError("oops")

        monkeypatch.setattr(onnxport, "export", refuse)
        assert checker.check(2).status == "refused"
        monkeypatch.setattr(onnxport, "export", foreign)
        outcome = checker.check(2)
        assert (outcome.status, outcome.cause) == ("failed", "foreign exception KeyError")


def test_a_crash_in_onnxruntime_is_reported_and_the_worker_replaced() -> None:
    with Checker() as checker:
        status, (step, how), _ = checker.run_job({"debug": "abort"})
        assert (status, step) == ("crash", "build") and "SIGABRT" in how
        status, message, _ = checker.run_job({"path": checker.workdir + "/missing.onnx", "sets": []})
        assert status == "build_error" and message
        assert checker.workers_started == 2


def test_summary_groups_failures_by_cause() -> None:
    outcomes = [Outcome(0, "matched"), Outcome(3, "failed", "wrong at batch 1 only, report silent", "B=1: x", "p3"),
                Outcome(5, "failed", "wrong at batch 1 only, report silent", "B=1: y", "p5"),
                Outcome(2, "refused", "CaptureError", "no", "p2")]
    text = summary(outcomes)
    assert "2  wrong at batch 1 only, report silent" in text
    assert "python -m tests.fuzz.check --seed 3" in text and "seeds: 3, 5" in text
