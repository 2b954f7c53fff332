"""Custom operators without a translation: onnxport traces their Python implementation into ATen ops and
says so in the report; a registered translation still wins; an implementation that does not trace
(numpy, a Python decision on a tensor value) keeps the UnsupportedOpError with the code to write."""

from __future__ import annotations

import inspect
import os

import numpy as np
import pytest
import torch

import onnxport

THIS = os.path.abspath(__file__)
NS = torch.ops.onnxport_custom_ops_test


@torch.library.custom_op("onnxport_custom_ops_test::relu", mutates_args=())
def relu(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x)


@relu.register_fake
def _(x):
    return torch.empty_like(x)


@torch.library.custom_op("onnxport_custom_ops_test::scale_shift", mutates_args=())
def scale_shift(x: torch.Tensor, y: torch.Tensor, scale: float, shift: int) -> tuple[torch.Tensor, torch.Tensor]:
    return x * scale + shift, (x - y).abs().sum(dim=-1)


@scale_shift.register_fake
def _(x, y, scale, shift):
    return torch.empty_like(x), x.new_empty(x.shape[:-1])


@torch.library.custom_op("onnxport_custom_ops_test::numpy_sin", mutates_args=())
def numpy_sin(x: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(np.sin(x.numpy()))


@numpy_sin.register_fake
def _(x):
    return torch.empty_like(x)


@torch.library.custom_op("onnxport_custom_ops_test::python_branch", mutates_args=())
def python_branch(x: torch.Tensor) -> torch.Tensor:
    if x.sum().item() > 0:
        return x * 2
    return x.clone()


@python_branch.register_fake
def _(x):
    return torch.empty_like(x)


@torch.library.custom_op("onnxport_custom_ops_test::wrong_fake", mutates_args=())
def wrong_fake(x: torch.Tensor) -> torch.Tensor:
    return x.sum(dim=0)


@wrong_fake.register_fake
def _(x):
    return torch.empty_like(x)


class UsesRelu(torch.nn.Module):
    def forward(self, x):
        return torch.ops.onnxport_custom_ops_test.relu(x.sin()).cos()


class UsesScaleShift(torch.nn.Module):
    def forward(self, x, y):
        a, b = torch.ops.onnxport_custom_ops_test.scale_shift(x, y, 0.5, 3)
        return a + b.unsqueeze(-1)


class UsesNumpy(torch.nn.Module):
    def forward(self, x):
        return torch.ops.onnxport_custom_ops_test.numpy_sin(x) + 1


class UsesPythonBranch(torch.nn.Module):
    def forward(self, x):
        return torch.ops.onnxport_custom_ops_test.python_branch(x) - 1


class UsesWrongFake(torch.nn.Module):
    def forward(self, x):
        return torch.ops.onnxport_custom_ops_test.wrong_fake(x)


class BranchUsesRelu(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return torch.ops.onnxport_custom_ops_test.relu(x) * 2
        return -x


def line_of(obj, text: str) -> int:
    lines, first = inspect.getsourcelines(obj)
    return first + next(i for i, line in enumerate(lines) if text in line)


def check(model, *input_sets, **kwargs) -> onnxport.OnnxProgram:
    prog = onnxport.export(model, input_sets[0], verify_inputs=list(input_sets[1:]), **kwargs)
    assert prog.report.verification.ok
    for inputs in input_sets:
        torch.testing.assert_close(prog(*inputs), model(*inputs), atol=1e-5, rtol=1e-4)
    return prog


def op_types(prog: onnxport.OnnxProgram) -> list[str]:
    return [n.op_type for n in prog.model.graph.all_nodes()]


# -- traced ------------------------------------------------------------------------------------------


def test_relu_custom_op_is_traced_through_its_implementation() -> None:
    prog = check(UsesRelu(), (torch.randn(3, 4),), (-torch.ones(3, 4),))
    assert op_types(prog) == ["Sin", "Relu", "Cos"]
    assert prog.report.traced_ops == {"onnxport_custom_ops_test::relu": 1}
    assert "custom ops traced through their implementation" in str(prog.report)
    assert "onnxport_custom_ops_test::relu x1" in str(prog.report)
    assert onnxport.unsupported_ops(UsesRelu(), (torch.randn(3, 4),)) == {}


def test_scalar_arguments_and_several_outputs() -> None:
    x, y = torch.randn(2, 5), torch.randn(2, 5)
    prog = check(UsesScaleShift(), (x, y), (y, x))
    assert prog.report.traced_ops == {"onnxport_custom_ops_test::scale_shift": 1}


def test_traced_with_dynamic_shapes() -> None:
    batch = onnxport.Dim("batch")
    prog = check(UsesRelu(), (torch.randn(3, 4),), dynamic_shapes=({0: batch},))
    x = torch.randn(7, 4)
    torch.testing.assert_close(prog(x), UsesRelu()(x))
    assert prog.report.sizes_verified


def test_traced_inside_a_rewritten_branch() -> None:
    prog = check(BranchUsesRelu(), (torch.ones(2, 3),), (-torch.ones(2, 3),))
    assert "If" in op_types(prog) and "Relu" in op_types(prog)
    assert prog.report.traced_ops == {"onnxport_custom_ops_test::relu": 1}


# -- a translation wins ----------------------------------------------------------------------------


def relu_as_max(ctx, x):
    return ctx.op.Max(x, ctx.const(0.0, like=x))


def test_custom_translation_is_preferred() -> None:
    prog = check(UsesRelu(), (torch.randn(3, 4),), custom_translations={"onnxport_custom_ops_test::relu": relu_as_max})
    assert "Max" in op_types(prog) and "Relu" not in op_types(prog)
    assert not prog.report.traced_ops


def test_registered_translation_is_preferred() -> None:
    @torch.library.custom_op("onnxport_custom_ops_test::relu_registered", mutates_args=())
    def relu_registered(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)

    @relu_registered.register_fake
    def _(x):
        return torch.empty_like(x)

    onnxport.register_translation("onnxport_custom_ops_test::relu_registered", relu_as_max)
    prog = check(lambda x: torch.ops.onnxport_custom_ops_test.relu_registered(x) + 1, (torch.randn(4),))
    assert "Max" in op_types(prog) and "Relu" not in op_types(prog)
    assert not prog.report.traced_ops


# -- not traceable: the UnsupportedOpError of before --------------------------------------------------


@pytest.mark.parametrize(
    ("model", "op", "why"),
    [
        (UsesNumpy(), "numpy_sin", "numpy"),
        (UsesPythonBranch(), "python_branch", "data-dependent"),
        (UsesWrongFake(), "wrong_fake", "where its fake kernel (register_fake) says float32[3, 4]"),
    ],
    ids=["numpy", "python_decision_on_item", "fake_disagrees"],
)
def test_untraceable_implementation_keeps_the_unsupported_op_error(model, op, why) -> None:
    name = f"onnxport_custom_ops_test::{op}"
    with pytest.raises(onnxport.UnsupportedOpError) as info:
        onnxport.export(model, (torch.randn(3, 4),))
    err = info.value
    text = str(err)
    assert list(err.ops) == [name]
    assert f"schema: {getattr(NS, op).default._schema}" in text  # the op and its schema
    assert why in text  # why its implementation was not traced
    assert (err.location.file, err.location.line) == (THIS, line_of(type(model), f"onnxport_custom_ops_test.{op}("))
    assert f'@onnxport.register_translation("{name}")' in err.fix  # the registration code to write
    assert f"def {op}_to_onnx(ctx, x):" in err.fix and "custom_translations=" in err.fix
    assert name in onnxport.unsupported_ops(model, (torch.randn(3, 4),))


def test_untraceable_op_exports_with_a_translation() -> None:
    def sin(ctx, x):
        return ctx.op.Sin(x)

    prog = check(UsesNumpy(), (torch.randn(3, 4),), custom_translations={"onnxport_custom_ops_test::numpy_sin": sin})
    assert op_types(prog)[0] == "Sin"
