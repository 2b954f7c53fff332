"""ConvBatchNormFoldPass: an eval-mode BatchNorm after a Conv is folded into the Conv's weight and bias;
the file keeps no BatchNormalization there and matches eager PyTorch, at the example and another batch."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from torch.export import Dim

import onnxport
from onnxport.verify import OrtRunner


def _stats(bn: torch.nn.Module) -> None:
    """Running statistics far from (0, 1), so that a fold that ignored them would show."""
    with torch.no_grad():
        bn.running_mean.uniform_(-2.0, 2.0)
        bn.running_var.uniform_(0.2, 4.0)
        bn.weight.uniform_(0.5, 2.0)
        bn.bias.uniform_(-1.0, 1.0)


class ConvBn(torch.nn.Module):
    def __init__(self, dims: int, *, bias: bool, groups: int = 1) -> None:
        super().__init__()
        conv = {1: torch.nn.Conv1d, 2: torch.nn.Conv2d, 3: torch.nn.Conv3d}[dims]
        norm = {1: torch.nn.BatchNorm1d, 2: torch.nn.BatchNorm2d, 3: torch.nn.BatchNorm3d}[dims]
        self.conv = conv(4, 8, 3, padding=1, bias=bias, groups=groups)
        self.bn = norm(8)
        _stats(self.bn)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x)))


def _ops(prog: onnxport.OnnxProgram) -> Counter:
    return Counter(node.op_type for node in prog.model.graph)


def _check_at(prog: onnxport.OnnxProgram, model: torch.nn.Module, x: torch.Tensor, dtype: torch.dtype) -> None:
    (actual,) = OrtRunner(prog.model).run([x])
    with torch.no_grad():
        expected = model(x)
    tol = 2e-2 if dtype == torch.float16 else 1e-4
    torch.testing.assert_close(actual, expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("dims", [1, 2, 3])
@pytest.mark.parametrize("bias", [True, False])
def test_conv_then_batchnorm_is_one_conv(dims: int, bias: bool) -> None:
    torch.manual_seed(dims)
    model = ConvBn(dims, bias=bias).eval()
    x = torch.randn(2, 4, *[6] * dims)
    prog = onnxport.export(model, (x,), dynamic_shapes=({0: Dim("batch")},))
    ops = _ops(prog)
    assert ops["BatchNormalization"] == 0 and ops["Conv"] == 1, ops
    conv = next(n for n in prog.model.graph if n.op_type == "Conv")
    assert len(conv.inputs) == 3 and conv.inputs[2] is not None  # the folded bias, with or without one before
    _check_at(prog, model, torch.randn(5, 4, *[6] * dims), torch.float32)


def test_grouped_and_float16_convolutions_fold() -> None:
    torch.manual_seed(0)
    model = ConvBn(2, bias=True, groups=2).eval().half()
    x = torch.randn(2, 4, 8, 8).half()
    prog = onnxport.export(model, (x,), dynamic_shapes=({0: Dim("batch")},))
    assert _ops(prog)["BatchNormalization"] == 0
    _check_at(prog, model, torch.randn(3, 4, 8, 8).half(), torch.float16)


class ConvReadTwice(torch.nn.Module):
    """The convolution's output is read by the norm and by the sum: folding would change the sum."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)
        _stats(self.bn)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return self.bn(y) + y


class NormFirst(torch.nn.Module):
    """A norm before the convolution (the pre-activation order) has nothing to fold into."""

    def __init__(self) -> None:
        super().__init__()
        self.bn = torch.nn.BatchNorm2d(3)
        self.conv = torch.nn.Conv2d(3, 4, 3)
        _stats(self.bn)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(self.bn(x))


@pytest.mark.parametrize("cls", [ConvReadTwice, NormFirst])
def test_a_norm_that_cannot_fold_stays(cls: type) -> None:
    torch.manual_seed(0)
    model = cls().eval()
    prog = onnxport.export(model, (torch.randn(2, 3, 8, 8),), dynamic_shapes=({0: Dim("batch")},))
    assert _ops(prog)["BatchNormalization"] == 1
    _check_at(prog, model, torch.randn(4, 3, 8, 8), torch.float32)


class SharedWeight(torch.nn.Module):
    """One convolution applied twice, each time followed by a norm of its own: two folded weights."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 3, 3, padding=1)
        self.bn1, self.bn2 = torch.nn.BatchNorm2d(3), torch.nn.BatchNorm2d(3)
        _stats(self.bn1)
        _stats(self.bn2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn2(self.conv(self.bn1(self.conv(x))))


def test_a_weight_shared_by_two_folds_gets_one_copy_each() -> None:
    torch.manual_seed(0)
    model = SharedWeight().eval()
    prog = onnxport.export(model, (torch.randn(2, 3, 8, 8),), dynamic_shapes=({0: Dim("batch")},))
    assert _ops(prog)["BatchNormalization"] == 0
    weights = {n.inputs[1].name for n in prog.model.graph if n.op_type == "Conv"}
    assert len(weights) == 2
    assert model.conv.weight.abs().sum() > 0  # the model's own weight is untouched
    _check_at(prog, model, torch.randn(1, 3, 8, 8), torch.float32)


def test_a_folded_model_saves_as_one_file_and_loads(tmp_path) -> None:
    import onnxruntime as ort

    torch.manual_seed(0)
    model = ConvBn(2, bias=True).eval()
    x = torch.randn(2, 4, 6, 6)
    prog = onnxport.export(model, (x,))
    prog.save(tmp_path / "conv.onnx")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conv.onnx"]  # in-memory weights: no data file
    session = ort.InferenceSession(str(tmp_path / "conv.onnx"), providers=["CPUExecutionProvider"])
    (out,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    with torch.no_grad():
        torch.testing.assert_close(torch.from_numpy(out), model(x), rtol=1e-4, atol=1e-4)
