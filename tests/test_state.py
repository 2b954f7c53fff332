"""The exported program and the live model's state (issue 18, point 5).

(a) A model whose ``forward`` updates its own buffers or parameters cannot be an ONNX model, which has no
state: the update would be dropped and the outputs differ from eager PyTorch from the second call on. Such a
model is refused, naming the tensor and the user's line, except the running statistics of a BatchNorm in
training mode (warned about; its outputs do not depend on them).

(b) The program's weights wrap the model's memory: a change to the model after ``export`` (a training step)
would reach the file ``prog.save`` writes and the outputs ``prog(...)`` computes, though it was never
verified. Both refuse, before writing anything, naming what changed.
"""

from __future__ import annotations

import inspect
import os
import warnings

import numpy as np
import onnx
import pytest
import torch

import onnxport
from onnxport.errors import CaptureError, OnnxportError


def _line_of(cls: type, text: str) -> int:
    """The line of ``cls``'s forward holding ``text``."""
    lines, start = inspect.getsourcelines(cls.forward)
    return start + next(i for i, line in enumerate(lines) if text in line)


# -- (a) state updated in forward ---------------------------------------------------------------------


class Steps(torch.nn.Module):
    """The model of the report: eager returns 2, 3, 4 on three calls; the ONNX model, a constant."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("steps", torch.ones(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.steps.add_(1)
        return x * self.steps


class Count(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("count", torch.zeros((), dtype=torch.int64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.count += 1
        return x + self.count


class IndexWrite(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("last", torch.zeros(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.last[0] = x.sum()
        return x * self.last


class CopyInto(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("seen", torch.zeros(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.copy_(x)
        return x * 2


class Reassign(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("total", torch.zeros(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.total = self.total + x
        return x * self.total


class ParamUpdate(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            self.scale.mul_(2)
        return x * self.scale


class Inner(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.add_(1)
        return x - self.calls


class Outer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = Inner()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x) * 2


def test_the_reported_model_updates_its_buffer_in_eager() -> None:
    model, x = Steps(), torch.ones(())
    assert [float(model(x)) for _ in range(3)] == [2.0, 3.0, 4.0]


@pytest.mark.parametrize(
    ("cls", "name", "code", "inner"),
    [
        (Steps, "steps", "self.steps.add_(1)", Steps),
        (Count, "count", "self.count += 1", Count),
        (IndexWrite, "last", "self.last[0] = x.sum()", IndexWrite),
        (CopyInto, "seen", "self.seen.copy_(x)", CopyInto),
        (Reassign, "total", "self.total = self.total + x", Reassign),
        (ParamUpdate, "scale", "self.scale.mul_(2)", ParamUpdate),
        (Outer, "inner.calls", "self.calls.add_(1)", Inner),
    ],
)
def test_state_updated_in_forward_is_refused_with_its_name_and_line(cls, name, code, inner) -> None:
    model = cls()
    x = torch.ones(3)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(CaptureError) as info:
        onnxport.export(model, (x,))
    error = info.value
    assert repr(name) in error.message
    assert error.location is not None
    assert os.path.samefile(error.location.file, __file__)
    assert error.location.line == _line_of(inner, code)
    assert error.fix and "input" in error.fix and "output" in error.fix
    # Refused before verification ran the model: its state is as it was.
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, before[key])


def test_every_updated_buffer_is_named() -> None:
    class Two(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("a", torch.zeros(2))
            self.register_buffer("b", torch.zeros(2))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.a.add_(x)
            self.b.sub_(x)
            return x + self.a + self.b

    with pytest.raises(CaptureError) as info:
        onnxport.export(Two(), (torch.ones(2),))
    assert "'a'" in info.value.message and "'b'" in info.value.message
    assert info.value.location is not None and info.value.location.line == _line_of(Two, "self.a.add_(x)")


class TrainBN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bn = torch.nn.BatchNorm1d(3)
        self.fc = torch.nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.bn(x))


@pytest.mark.parametrize("optimize", [True, False])
def test_train_mode_batchnorm_keeps_working(tmp_path, optimize: bool) -> None:
    """Its running statistics change at every call, but its outputs use the batch's: they match per call."""
    torch.manual_seed(0)
    model = TrainBN().train()
    with pytest.warns(UserWarning, match="training mode"):
        prog = onnxport.export(model, (torch.randn(4, 3),), optimize=optimize)
    for _ in range(3):
        x = torch.randn(4, 3)
        torch.testing.assert_close(prog(x), model(x).detach())  # eager updates the running stats
    assert int(model.bn.num_batches_tracked) >= 3
    prog.save(tmp_path / "bn.onnx")  # what changed (running stats) is no weight the program was verified with
    onnx.checker.check_model(str(tmp_path / "bn.onnx"))


def test_eval_mode_batchnorm_exports_without_warning() -> None:
    model = TrainBN().eval()
    x = torch.randn(4, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        prog = onnxport.export(model, (x,))
    torch.testing.assert_close(prog(x), model(x).detach())


class MovesItsTable(torch.nn.Module):
    """Writes its buffer back to itself at every call, moved to the input's device (as transformers' CTRL does):
    no state changes. ``cast`` writes it back in another dtype, which does change it."""

    def __init__(self, cast: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.register_buffer("table", torch.randn(10, 4))
        self.cast = cast

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        self.table = self.table.to(device=ids.device, dtype=self.cast)
        return self.table[ids].float()


def test_a_buffer_written_back_unchanged_is_no_update() -> None:
    model = MovesItsTable()
    ids = torch.tensor([[1, 2, 3], [4, 5, 6]])
    prog = onnxport.export(model, (ids,), dynamic_shapes={"ids": {1: torch.export.Dim.DYNAMIC}})
    torch.testing.assert_close(prog(ids[:, :2]), model(ids[:, :2]))


def test_a_buffer_written_back_in_another_dtype_is_refused() -> None:
    with pytest.raises(onnxport.CaptureError, match="updates the buffer 'table'"):
        onnxport.export(MovesItsTable(torch.float16), (torch.tensor([[1, 2]]),))


def test_user_input_mutation_is_left_alone() -> None:
    class WritesInput(torch.nn.Module):
        def forward(self, x: torch.Tensor, buf: torch.Tensor) -> torch.Tensor:
            buf.add_(1)
            return x * buf

    prog = onnxport.export(WritesInput(), (torch.ones(2), torch.ones(2)))
    torch.testing.assert_close(prog(torch.ones(2), torch.ones(2)), torch.full((2,), 2.0))


# -- (b) the model changed after export -------------------------------------------------------------------


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)
        self.register_buffer("shift", torch.zeros(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) + self.shift


def _weights(path) -> dict[str, np.ndarray]:
    model = onnx.load(str(path))
    return {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}


def _change_weight(model: Net) -> None:
    with torch.no_grad():
        model.fc.weight.add_(1)


def _optimizer_step(model: Net) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model(torch.randn(2, 4)).square().sum().backward()
    optimizer.step()


def _load_state_dict(model: Net) -> None:
    model.load_state_dict({k: torch.randn_like(v) for k, v in model.state_dict().items()})


def _change_buffer(model: Net) -> None:
    model.shift.fill_(3.0)


@pytest.mark.parametrize(
    ("change", "first"),
    [
        (_change_weight, "fc.weight"),
        (_optimizer_step, "fc.weight"),
        (_load_state_dict, "fc.weight"),
        (_change_buffer, "shift"),
    ],
)
def test_save_after_the_model_changed_is_refused_before_writing(tmp_path, change, first) -> None:
    torch.manual_seed(0)
    model = Net()
    x = torch.randn(2, 4)
    prog = onnxport.export(model, (x,))
    change(model)
    path = tmp_path / "net.onnx"
    for external_data in (False, True):
        with pytest.raises(OnnxportError) as info:
            prog.save(path, external_data=external_data)
        assert first in info.value.message
        assert info.value.fix and "export" in info.value.fix
        assert os.listdir(tmp_path) == []  # not even a staging file
    with pytest.raises(OnnxportError) as info:
        prog(x)
    assert first in info.value.message


def test_save_before_the_change_holds_the_verified_weights(tmp_path) -> None:
    torch.manual_seed(0)
    model = Net()
    x = torch.randn(2, 4)
    verified = model.fc.weight.detach().clone()
    prog = onnxport.export(model, (x,))
    expected = prog(x)
    prog.save(tmp_path / "a.onnx")
    prog.save(tmp_path / "b.onnx")  # saving twice, unchanged, is fine
    _change_weight(model)
    saved = _weights(tmp_path / "a.onnx")
    np.testing.assert_array_equal(saved["fc.weight"].T, verified.numpy())  # stored [in, out] for MatMul
    # A fresh export after the change holds and computes the new weights.
    again = onnxport.export(model, (x,))
    again.save(tmp_path / "c.onnx")
    np.testing.assert_array_equal(_weights(tmp_path / "c.onnx")["fc.weight"].T, model.fc.weight.detach().numpy())
    assert not torch.allclose(again(x), expected)


def test_a_tensor_attribute_changed_after_export_is_refused(tmp_path) -> None:
    """A plain tensor attribute (not a buffer) becomes a constant initializer over the same memory."""

    class Table(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.table = torch.arange(3.0)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * self.table

    model = Table()
    prog = onnxport.export(model, (torch.ones(3),))
    model.table.mul_(10)
    with pytest.raises(OnnxportError) as info:
        prog.save(tmp_path / "t.onnx")
    assert "table" in info.value.message
    assert os.listdir(tmp_path) == []


def test_a_function_closing_over_a_tensor_is_watched_too(tmp_path) -> None:
    scale = torch.tensor([1.0, 2.0, 3.0])
    prog = onnxport.export(lambda x: x * scale, (torch.ones(3),))
    torch.testing.assert_close(prog(torch.ones(3)), scale)
    scale.add_(1)
    with pytest.raises(OnnxportError):
        prog(torch.ones(3))
    with pytest.raises(OnnxportError):
        prog.save(tmp_path / "f.onnx")
    assert os.listdir(tmp_path) == []


def test_half_export_refuses_after_a_change_too(tmp_path) -> None:
    """A float16 export holds copies of the weights; the model still changed since it was verified."""
    model = Net()
    prog = onnxport.export(model, (torch.randn(2, 4),), dtype=torch.float16)
    _change_weight(model)
    with pytest.raises(OnnxportError) as info:
        prog.save(tmp_path / "h.onnx")
    assert "fc.weight" in info.value.message


def test_streamed_weights_export_saves(tmp_path) -> None:
    """weights= exports: the model's tensors are on the meta device, the weights come from a state dict."""
    torch.manual_seed(0)
    real = Net()
    state = {k: v.detach().clone() for k, v in real.state_dict().items()}
    with torch.device("meta"):
        model = Net()
    prog = onnxport.export(model, (torch.randn(2, 4),), weights=state)
    prog.save(tmp_path / "s.onnx")
    x = torch.randn(2, 4)
    torch.testing.assert_close(prog(x), real(x).detach())
    state["fc.weight"].add_(1)  # the weights the program holds changed since export
    with pytest.raises(OnnxportError) as info:
        prog.save(tmp_path / "t.onnx")
    assert "fc.weight" in info.value.message


def test_model_proto_holds_the_verified_weights_or_refuses() -> None:
    """``prog.model_proto`` (what ``onnxport.generate`` and ``prog.text()`` read) copies the weights when built."""
    torch.manual_seed(0)
    model = Net()
    x = torch.randn(2, 4)
    built = onnxport.export(model, (x,))
    proto = built.model_proto  # built before the change: a copy of the verified weights
    late = onnxport.export(model, (x,))
    verified = model.fc.weight.detach().clone()
    _change_weight(model)
    assert built.model_proto is proto
    weight = next(t for t in proto.graph.initializer if t.name == "fc.weight")
    np.testing.assert_array_equal(onnx.numpy_helper.to_array(weight).T, verified.numpy())
    with pytest.raises(OnnxportError) as info:
        late.model_proto
    assert "fc.weight" in info.value.message
