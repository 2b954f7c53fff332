"""The example's eager run beside the capture, in a child process (verify/ahead.py): its outputs stand
for a run here only when they are the model's on those very inputs; otherwise this process runs it."""

from __future__ import annotations

import os

import pytest
import torch
from torch._subclasses.fake_tensor import is_fake
from torch.export import Dim

import onnxport
from onnxport.verify.ahead import EagerAhead, eager_outputs
from onnxport.verify.child import forking_available

pytestmark = pytest.mark.skipif(not forking_available(), reason="the run ahead needs fork (Linux)")


class Logged(torch.nn.Module):
    """Logs the shapes of its eager calls made in this process (not capture's fake ones)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.calls: list[tuple[int, ...]] = []
        self.parent = os.getpid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not is_fake(x):
            self.calls.append(tuple(x.shape))
        return self.lin(x).softmax(-1)


def test_the_examples_eager_run_is_beside_the_capture() -> None:
    model = Logged().eval()
    prog = onnxport.export(model, (torch.randn(2, 4),))
    verification = prog.report.verification
    assert verification.ok and verification.eager_ahead
    assert model.calls == []  # the example ran in the child, and nothing else needed eager PyTorch
    assert "the example's eager run beside the capture, in a child process" in str(prog.report)


def test_size_one_of_a_named_dim_runs_beside_the_capture_too() -> None:
    model = Logged().eval()
    prog = onnxport.export(model, (torch.randn(3, 4),), dynamic_shapes=({0: Dim("batch")},))
    verification = prog.report.verification
    assert verification.ok and verification.eager_ahead and prog.report.sizes_verified == ["batch=1"]
    assert model.calls == []  # the example and batch=1 both ran in the child


def test_a_guess_that_misses_leaves_the_run_to_this_process() -> None:
    # guesses are made for named dims only: the size-1 set made up for an unnamed one runs here
    model = Logged().eval()
    prog = onnxport.export(model, (torch.randn(3, 4),), dynamic_shapes=({0: Dim.DYNAMIC},))
    assert prog.report.verification.ok and prog.report.sizes_verified == ["x_dim0=1"]
    assert model.calls == [(1, 4)]


def test_the_outputs_taken_are_the_models_own() -> None:
    model = Logged().eval()
    args, kwargs = (torch.randn(3, 4),), {}
    ahead = EagerAhead.start(model, args, kwargs)
    assert ahead is not None
    outputs, seconds = ahead.take(args, kwargs)
    with torch.no_grad():
        assert torch.equal(outputs, model(*args))
    assert seconds > 0
    again = ahead.take(args, kwargs)  # kept, once the child has ended
    assert again is not None and torch.equal(again[0], outputs)
    other = EagerAhead.start(model, args, kwargs)
    assert other.take((args[0].clone(),), kwargs) is None  # equal inputs, other objects: not these
    other.close()


def test_structures_and_bfloat16_outputs_come_back_whole() -> None:
    def fn(x: torch.Tensor) -> dict[str, object]:
        return {"half": x.to(torch.bfloat16) * 3, "pair": (x.sum(), x.argmax()), "n": 7}

    args = (torch.randn(2, 5),)
    ahead = EagerAhead.start(fn, args, {})
    outputs, _ = ahead.take(args, {})
    expected = fn(*args)
    assert outputs["half"].dtype == torch.bfloat16 and torch.equal(outputs["half"], expected["half"])
    assert torch.equal(outputs["pair"][1], expected["pair"][1]) and outputs["n"] == 7


def test_an_example_changed_in_place_since_is_run_here() -> None:
    model = Logged().eval()
    args = (torch.randn(2, 4),)
    ahead = EagerAhead.start(model, args, {})
    args[0].add_(1.0)
    assert ahead.take(args, {}) is None
    ahead.close()


def test_outputs_that_cannot_be_sent_are_run_here() -> None:
    args = (torch.randn(2, 4),)
    ahead = EagerAhead.start(lambda x: (x * 2, lambda: None), args, {})
    assert ahead.take(args, {}) is None


class DiesInChildren(torch.nn.Module):
    """A forward that ends any process but the one that built it (as a crash in the child would)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 2)
        self.parent = os.getpid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if os.getpid() != self.parent:
            os._exit(3)
        return self.lin(x)


def test_a_child_that_dies_leaves_the_run_to_this_process() -> None:
    model = DiesInChildren().eval()
    args = (torch.randn(2, 4),)
    ahead = EagerAhead.start(model, args, {})
    assert ahead.take(args, {}) is None
    prog = onnxport.export(model, args)
    assert prog.report.verification.ok and not prog.report.verification.eager_ahead


def test_a_model_failing_on_its_example_fails_here_with_its_own_error() -> None:
    class Fails(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if not is_fake(x):
                raise ValueError("no real inputs, please")
            return x + 1

    with pytest.raises(onnxport.OnnxportError, match="no real inputs, please") as info:
        onnxport.export(Fails(), (torch.randn(2, 3),))
    assert not isinstance(info.value.__cause__, type(None))


class ShrinksItsWindow(torch.nn.Module):
    """Shrinks its window, for good, for an input shorter than it (as Swin's layers do)."""

    def __init__(self) -> None:
        super().__init__()
        self.window = 4

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[1] < self.window:
            self.window = x.shape[1]
        return x[:, : self.window] * 2


def test_an_eager_run_leaves_the_models_settings_as_they_were() -> None:
    model = ShrinksItsWindow()
    assert eager_outputs(model, (torch.ones(1, 2),), {}).shape == (1, 2)
    assert model.window == 4
    assert eager_outputs(model, (torch.ones(1, 6),), {}).shape == (1, 4)  # not the 2 the short input set
