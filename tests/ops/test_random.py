"""Random ops: exported, verified (value for value where they are torch's standard draws, fed eager PyTorch's own;
on shape and dtype otherwise), and checked on the statistics of their draws.

Each case is a function of one input ``x`` (whose first dim may be dynamic) and a check of the drawn
sample. The runner exports at opset 21 (onnxruntime runs the Random* ops there) and at the default
opset (where the draws come from Dropout masks), runs the model twice, and checks the statistics, that
the two runs differ, and that only the random outputs escaped value comparison.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.export import Dim

import onnxport
from onnxport.translate.opset import DEFAULT_OPSET

OPSETS = (21, DEFAULT_OPSET)
N = 20000  # elements per draw: the mean of N standard normals is within 0.03 of 0 with overwhelming odds


def near(value: float, target: float, tol: float = 0.03) -> None:
    assert abs(value - target) <= tol, f"{value} is not within {tol} of {target}"


def uniform01(s: torch.Tensor, x: torch.Tensor) -> None:
    assert 0 <= s.min() and s.max() < 1
    near(s.mean().item(), 0.5), near(s.std().item(), math.sqrt(1 / 12))


def standard_normal(s: torch.Tensor, x: torch.Tensor) -> None:
    near(s.mean().item(), 0.0), near(s.std().item(), 1.0)


def moments(mean: float, std: float) -> Callable[[torch.Tensor, torch.Tensor], None]:
    def check(s: torch.Tensor, x: torch.Tensor) -> None:
        near(s.double().mean().item(), mean, 0.03 * max(std, 1)), near(s.double().std().item(), std, 0.03 * max(std, 1))

    return check


def integers(low: int, high: int) -> Callable[[torch.Tensor, torch.Tensor], None]:
    def check(s: torch.Tensor, x: torch.Tensor) -> None:
        assert set(s.unique().tolist()) == set(range(low, high))
        near(s.double().mean().item(), (low + high - 1) / 2, 0.05 * (high - low))

    return check


def fraction_zero(p: float) -> Callable[[torch.Tensor, torch.Tensor], None]:
    def check(s: torch.Tensor, x: torch.Tensor) -> None:
        near((s == 0).double().mean().item(), p)
        kept = s != 0
        torch.testing.assert_close(s[kept], (x / (1 - p))[kept].to(s.dtype))

    return check


def whole_channels(s: torch.Tensor, x: torch.Tensor) -> None:
    dropped = (s == 0).flatten(2).all(-1)
    assert bool(((s != 0).flatten(2).all(-1) | dropped).all()), "a channel was dropped in part"
    near(dropped.double().mean().item(), 0.5, 0.06)


def multinomial_frequencies(s: torch.Tensor, x: torch.Tensor) -> None:
    freq = torch.bincount(s.flatten(), minlength=3).double() / s.numel()
    near(freq[0].item(), 0.25), near(freq[2].item(), 0.75)
    assert freq[1] == 0


def distinct_rows(s: torch.Tensor, x: torch.Tensor) -> None:
    assert all(len(set(row.tolist())) == s.shape[-1] for row in s)
    assert set(s.flatten().tolist()) <= {0, 2, 3}  # index 1 has probability 0


def permutation(s: torch.Tensor, x: torch.Tensor) -> None:
    assert sorted(s.tolist()) == list(range(len(s)))


def cauchy_quartiles(median: float, sigma: float) -> Callable[[torch.Tensor, torch.Tensor], None]:
    """Half of a Cauchy sample lies within ``sigma`` of the median (its moments do not exist)."""

    def check(s: torch.Tensor, x: torch.Tensor) -> None:
        near(s.median().item(), median, 0.05 * sigma)
        near(((s - median).abs() < sigma).double().mean().item(), 0.5)

    return check


def log_moments(mean: float, std: float) -> Callable[[torch.Tensor, torch.Tensor], None]:
    def check(s: torch.Tensor, x: torch.Tensor) -> None:
        assert bool((s > 0).all())
        moments(mean, std)(s.log(), x)

    return check


def trials(p: float) -> Callable[[torch.Tensor, torch.Tensor], None]:
    """Geometric: whole numbers of trials, at least 1, with mean 1 / p and P(1) = p."""

    def check(s: torch.Tensor, x: torch.Tensor) -> None:
        assert bool((s >= 1).all() and (s == s.round()).all())
        near(s.double().mean().item(), 1 / p, 0.1), near((s == 1).double().mean().item(), p)

    return check


def alpha_channels(p: float) -> Callable[[torch.Tensor, torch.Tensor], None]:
    """Feature alpha dropout: each channel either kept (``a * x + b``) or dropped whole (one constant)."""
    alpha = -1.7580993408473766
    a = ((1 - p) * (1 + p * alpha**2)) ** -0.5

    def check(s: torch.Tensor, x: torch.Tensor) -> None:
        kept = torch.isclose(s, a * x - a * alpha * p, atol=1e-5).flatten(2).all(-1)
        dropped = torch.isclose(s, torch.tensor(a * alpha - a * alpha * p), atol=1e-5).flatten(2).all(-1)
        assert bool((kept | dropped).all()), "a channel was dropped in part"
        near(dropped.double().mean().item(), p, 0.06)

    return check


def rrelu_slopes(lower: float, upper: float) -> Callable[[torch.Tensor, torch.Tensor], None]:
    def check(s: torch.Tensor, x: torch.Tensor) -> None:
        torch.testing.assert_close(s[x > 0], x[x > 0])
        slopes = s[x < 0] / x[x < 0]
        assert lower - 1e-6 <= slopes.min() and slopes.max() < upper + 1e-6
        near(slopes.mean().item(), (lower + upper) / 2, 0.01)

    return check


@dataclasses.dataclass
class RandomCase:
    """``fn(x)`` returns one random tensor; ``check(sample, x)`` asserts on its statistics."""

    name: str
    fn: Callable[[torch.Tensor], torch.Tensor]
    check: Callable[[torch.Tensor, torch.Tensor], None]
    x: Callable[[], torch.Tensor] = lambda: torch.randn(N // 100, 100)
    dynamic: bool = True
    differs: bool = True  # two runs give different samples


CASES = [
    RandomCase("rand", lambda x: torch.rand(N // 100, 100), uniform01, dynamic=False),
    RandomCase("rand_sym", lambda x: torch.rand(x.shape[0], 100), uniform01),
    RandomCase("randn", lambda x: torch.randn(N), standard_normal, dynamic=False),
    RandomCase("randn_sym", lambda x: torch.randn(x.shape[0], 100), standard_normal),
    RandomCase("randn_f64", lambda x: torch.randn(N, dtype=torch.float64), standard_normal, dynamic=False),
    RandomCase("randn_f16", lambda x: torch.randn(x.shape[0], 100, dtype=torch.float16), standard_normal),
    RandomCase("rand_like", torch.rand_like, uniform01),
    RandomCase("randn_like", torch.randn_like, standard_normal),
    RandomCase("randn_like_int", lambda x: torch.randn_like(x.long(), dtype=torch.float32), standard_normal),
    RandomCase("randint", lambda x: torch.randint(3, 10, (x.shape[0], 100)), integers(3, 10)),
    RandomCase("randint_high", lambda x: torch.randint(4, (N,)), integers(0, 4), dynamic=False),
    RandomCase("randint_sym_high", lambda x: torch.randint(x.shape[1] // 20, (x.shape[0], 100)), integers(0, 5)),
    RandomCase("randint_like", lambda x: torch.randint_like(x, -2, 2), integers(-2, 2)),
    RandomCase("normal_tensor_float", lambda x: torch.normal(torch.zeros_like(x) + 3, 2.0), moments(3, 2)),
    RandomCase("normal_float_tensor", lambda x: torch.normal(-1.0, torch.ones_like(x) * 0.5), moments(-1, 0.5)),
    RandomCase("normal_tensor_tensor", lambda x: torch.normal(x * 0, x * 0 + 2), moments(0, 2)),
    RandomCase("normal_float_float", lambda x: torch.normal(1.0, 3.0, (x.shape[0], 100)), moments(1, 3)),
    RandomCase("normal_", lambda x: torch.empty_like(x).normal_(5.0, 0.5), moments(5, 0.5)),
    RandomCase("uniform_", lambda x: torch.empty_like(x).uniform_(-2.0, 4.0), moments(1, 6 / math.sqrt(12))),
    RandomCase("exponential_", lambda x: torch.empty_like(x).exponential_(2.0), moments(0.5, 0.5)),
    RandomCase("cauchy_", lambda x: torch.empty_like(x).cauchy_(1.5, 2.0), cauchy_quartiles(1.5, 2.0)),
    RandomCase("log_normal_", lambda x: torch.empty_like(x).log_normal_(0.5, 0.75), log_moments(0.5, 0.75)),
    RandomCase("geometric_", lambda x: torch.empty_like(x).geometric_(0.3), trials(0.3)),
    RandomCase("geometric_f64", lambda x: torch.empty_like(x, dtype=torch.float64).geometric_(0.8), trials(0.8)),
    RandomCase("bernoulli", lambda x: torch.bernoulli(torch.full_like(x, 0.3)), moments(0.3, math.sqrt(0.21))),
    RandomCase("bernoulli_p", lambda x: torch.bernoulli(x, 0.8), moments(0.8, 0.4)),
    RandomCase("dropout", lambda x: F.dropout(x, 0.25, training=True), fraction_zero(0.25)),
    RandomCase("dropout_f16", lambda x: F.dropout(x.half(), 0.5, training=True), fraction_zero(0.5)),
    RandomCase(
        "dropout2d", lambda x: F.dropout2d(x, 0.5, training=True), whole_channels, x=lambda: torch.randn(100, 20, 2, 2)
    ),
    RandomCase("alpha_dropout", lambda x: F.alpha_dropout(x, 0.2, training=True), moments(0, 1)),
    RandomCase(
        "feature_alpha_dropout", lambda x: F.feature_alpha_dropout(x, 0.3, training=True), alpha_channels(0.3),
        x=lambda: torch.randn(100, 20, 2, 2),
    ),
    RandomCase("rrelu", lambda x: F.rrelu(x, 0.1, 0.3, training=True), rrelu_slopes(0.1, 0.3)),
    RandomCase(
        "multinomial_replacement",
        lambda x: torch.multinomial(torch.tensor([1.0, 0.0, 3.0]).expand(x.shape[0], 3), 100, replacement=True),
        multinomial_frequencies,
    ),
    RandomCase(
        "multinomial",
        lambda x: torch.multinomial(torch.tensor([1.0, 0.0, 2.0, 3.0]).expand(x.shape[0], 4), 3),
        distinct_rows,
    ),
    RandomCase("randperm", lambda x: torch.randperm(x.shape[0]), permutation, x=lambda: torch.randn(50, 2)),
]


class _Wrap(torch.nn.Module):
    def __init__(self, fn: Callable[[torch.Tensor], Any]):
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> Any:
        return self.fn(x)


def _export(fn: Callable[[torch.Tensor], Any], x: torch.Tensor, opset: int, dynamic: bool) -> onnxport.OnnxProgram:
    shapes = {"x": {0: Dim("n", min=2)}} if dynamic else None
    prog = onnxport.export(_Wrap(fn), (x,), opset=opset, dynamic_shapes=shapes)
    assert prog.report.verification.ok
    return prog


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_random_op(case: RandomCase, opset: int) -> None:
    torch.manual_seed(0)
    x = case.x()
    prog = _export(case.fn, x, opset, case.dynamic)
    assert prog.random_outputs == prog.output_names
    fed = prog.report.verification.draws_fed  # randn, rand and their _like forms: eager PyTorch's draws fed
    assert fed == (case.name.startswith(("rand_", "randn")) or case.name == "rand")
    assert all(check.random != bool(fed) for check in prog.report.verification.outputs)
    ops = {n.op_type for n in prog.model.graph.all_nodes()}
    assert ops & {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Dropout"}
    if opset > 21:  # onnxruntime has no kernel for these from opset 22 on
        assert not ops & {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike"}
    expected = case.fn(x)
    first, second = prog(x), prog(x)
    assert (first.shape, first.dtype) == (expected.shape, expected.dtype)
    case.check(first, x)
    assert not torch.equal(first, second) or not case.differs


@pytest.mark.parametrize("opset", OPSETS)
def test_draws_in_one_model_are_independent(opset: int) -> None:
    """Two equal draws must not be merged by the optimizer into one."""
    prog = _export(lambda x: (torch.randn_like(x), torch.randn_like(x)), torch.zeros(N), opset, dynamic=False)
    a, b = prog(torch.zeros(N))
    near(torch.corrcoef(torch.stack([a, b]))[0, 1].item(), 0.0)


@pytest.mark.parametrize("opset", OPSETS)
def test_only_outputs_fed_by_random_ops_skip_value_comparison(opset: int) -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        noisy = torch.cond(x.sum() > 0, lambda x: x + torch.randn_like(x), lambda x: x * 2, (x,))
        return x * 2, noisy, x.shape[0] + torch.ones_like(x)

    prog = _export(fn, torch.randn(4, 3), opset, dynamic=True)
    assert prog.random_outputs == [prog.output_names[1]]
    checks = prog.report.verification.outputs
    assert [c.random for c in checks] == [False, True, False]
    assert "shape and dtype only" in str(prog.report.verification)
    x = torch.randn(6, 3)
    torch.testing.assert_close(prog(x)[0], x * 2)


def test_a_length_drawn_at_random_is_not_compared() -> None:
    """A model that draws its output's length (as a speech model's noisy durations do): eager PyTorch and
    onnxruntime draw different lengths, which verification does not take for a mismatch; the other dims and
    the rank still count."""

    def fn(x: torch.Tensor) -> torch.Tensor:
        length = torch.randint(1, 1000, ()).item()  # (a standard draw, torch.rand, would be fed: the same length)
        return x.sum() + torch.zeros(x.shape[0], length)

    prog = _export(fn, torch.randn(4, 3), DEFAULT_OPSET, dynamic=False)
    assert prog.random_sizes == {prog.output_names[0]: [1]}
    lengths = {prog(torch.randn(4, 3)).shape[1] for _ in range(3)}
    assert len(lengths) > 1, "the length is drawn at every run"
    check = next(iter(prog.report.verification.outputs))
    assert check.ok and check.random
