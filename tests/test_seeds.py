"""Every runnable example of the project's seed documents without dynamic shapes (those are in
test_dynamic_seeds.py), exported and compared with eager PyTorch: control flow on inputs taking both
branches, the tutorial's graph breaks Bad1..Bad4 as written, custom ops with and without a translation."""

from __future__ import annotations

import warnings

import pytest
import torch

import onnxport
from onnxport.demo import ModelWithCond, branch_inputs


def _check(model: torch.nn.Module, args: tuple, *more: tuple, **kwargs) -> onnxport.OnnxProgram:
    prog = onnxport.export(model, args, verify_inputs=list(more), **kwargs)
    assert prog.report.verification.ok
    for inputs in (args, *more):
        torch.testing.assert_close(prog(*inputs), model(*inputs), atol=1e-5, rtol=1e-4)
    return prog


def _op_types(prog: onnxport.OnnxProgram) -> set[str]:
    return {n.op_type for n in prog.model.graph.all_nodes()}


# -- seed 000: the gallery model, fixed with torch.cond ---------------------------------------------


def test_model_with_control_flow_test_fixed_takes_both_branches() -> None:
    torch.manual_seed(0)
    model = ModelWithCond().eval()
    pos, neg = branch_inputs(model)
    prog = _check(model, (pos,), (neg,))
    assert [n.op_type for n in prog.model.graph][-1] == "If"
    assert "If" in prog.text()
    assert not prog.report.rewrites


def test_model_with_control_flow_test_unmodified_is_rewritten() -> None:
    """The gallery model as written: onnxport turns its `if x.sum():` into torch.cond by itself."""
    from onnxport.demo import DEMOS

    model, (example, zero) = DEMOS["control_flow"]()  # biases at zero: x = 0 sums to exactly 0
    prog = _check(model, example, zero)
    (rewrite,) = prog.report.rewrites
    assert rewrite.before.startswith("if x.sum():") and rewrite.function == "ForwardWithControlFlowTest.forward"
    assert [n.op_type for n in prog.model.graph][-1] == "If"
    assert prog.report.verification.branches.complete


def test_seed000_patched_forward_like_the_recipe() -> None:
    """The recipe replaces the submodule's forward on the instance with a torch.cond function."""

    class ForwardWithControlFlowTest(torch.nn.Module):
        def forward(self, x):
            if x.sum():
                return x * 2
            return -x

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.mlp = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1), ForwardWithControlFlowTest())

        def forward(self, x):
            return self.mlp(x)

    def new_forward(x):
        def identity2(x):
            return x * 2

        def neg(x):
            return -x

        return torch.cond(x.sum() > 0, identity2, neg, (x,))

    torch.manual_seed(1)
    model = Model()
    for mod in model.modules():
        if isinstance(mod, ForwardWithControlFlowTest):
            mod.forward = new_forward
    # The layers are affine, so a large input and its negation land on both sides of zero.
    x = torch.randn(3) * 100
    pos, neg = (x, -x) if model.mlp[1](model.mlp[0](x)).sum() > 0 else (-x, x)
    assert model.mlp[1](model.mlp[0](neg)).sum() <= 0
    _check(model, (pos,), (neg,))


# -- seed 001 / 003: the torch.export tutorial ------------------------------------------------------


class MyModule(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(100, 10)

    def forward(self, x, y):
        return torch.nn.functional.relu(self.lin(x + y), inplace=True)


def test_my_module_inplace_relu() -> None:
    _check(MyModule(), (torch.randn(8, 100), torch.randn(8, 100)))


class Bad1Fixed(torch.nn.Module):
    def forward(self, x):
        def true_fn(x):
            return torch.sin(x)

        def false_fn(x):
            return torch.cos(x)

        return torch.cond(x.sum() > 0, true_fn, false_fn, [x])


def test_bad1_fixed_with_cond_both_branches() -> None:
    prog = _check(Bad1Fixed(), (torch.ones(3, 3),), (-torch.ones(3, 3),))
    assert "If" in _op_types(prog)


def test_functorch_cond_import() -> None:
    from functorch.experimental.control_flow import cond

    class M(torch.nn.Module):
        def forward(self, x):
            return cond(x.sum() > 0, lambda x: x.sin(), lambda x: x.cos(), [x])

    _check(M(), (torch.ones(2, 2),), (-torch.ones(2, 2),))


def test_cond_with_static_python_predicate() -> None:
    """ExportDB's cond_predicate: the predicate is a Python bool decided by static shapes."""

    def cond_predicate(x):
        pred = x.dim() > 2 and x.shape[2] > 10
        return torch.cond(pred, lambda x: x.cos(), lambda y: y.sin(), [x])

    _check(cond_predicate, (torch.randn(6, 4, 3),))
    _check(cond_predicate, (torch.randn(2, 3, 12),))


def test_cond_in_class_method_reading_self() -> None:
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.scale = 3.0

        def true_fn(self, x):
            return self.lin(x) * self.scale

        def false_fn(self, x):
            return self.lin(-x)

        def forward(self, x):
            return torch.cond(x.mean() > 0, self.true_fn, self.false_fn, (x,))

    _check(M(), (torch.ones(2, 4),), (-torch.ones(2, 4),))


def test_cond_several_operands_and_outputs() -> None:
    class M(torch.nn.Module):
        def forward(self, x, y):
            def t(x, y):
                return x + y, x * y

            def f(x, y):
                return x - y, x / (y.abs() + 1)

            a, b = torch.cond((x > y).all(), t, f, (x, y))
            return a * b

    x = torch.randn(5)
    _check(M(), (x + 10, x), (x, x + 10))


def test_nested_cond() -> None:
    class M(torch.nn.Module):
        def forward(self, x):
            def outer_true(x):
                return torch.cond(x.max() > 5, lambda x: x * 10, lambda x: x + 1, (x,))

            return torch.cond(x.sum() > 0, outer_true, lambda x: -x, (x,))

    _check(M(), (torch.full((3,), 9.0),), (torch.ones(3),), (-torch.ones(3),))


def test_run_decompositions_example_linear() -> None:
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(3, 4)

        def forward(self, x):
            return self.linear(x)

    _check(M(), (torch.randn(2, 3),))


@torch.library.custom_op("my_custom_library::custom_op", mutates_args={})
def custom_op(input: torch.Tensor) -> torch.Tensor:
    return torch.relu(input)


@custom_op.register_fake
def custom_op_meta(x):
    return torch.empty_like(x)


class CustomOpExample(torch.nn.Module):
    def forward(self, x):
        x = torch.sin(x)
        x = torch.ops.my_custom_library.custom_op(x)
        x = torch.cos(x)
        return x


def test_custom_op_example_exports_through_its_implementation() -> None:
    """No translation registered: onnxport traces the op's Python implementation (torch.relu)."""
    x = torch.randn(3, 3)
    prog = _check(CustomOpExample(), (x,))
    assert [n.op_type for n in prog.model.graph] == ["Sin", "Relu", "Cos"]
    assert prog.report.traced_ops == {"my_custom_library::custom_op": 1}
    assert "my_custom_library::custom_op x1" in str(prog.report)


def test_custom_op_example_prefers_a_translation() -> None:
    x = torch.randn(3, 3)
    prog = _check(
        CustomOpExample(), (x,), custom_translations={"my_custom_library::custom_op": lambda ctx, x: ctx.op.Relu(x)}
    )
    assert [n.op_type for n in prog.model.graph] == ["Sin", "Relu", "Cos"]
    assert not prog.report.traced_ops


# Seed 001's form: torch.library.Library + impl(..., "CompositeExplicitAutograd") + impl_abstract.
_seed001_lib = torch.library.Library("my_custom_library_001", "DEF")
_seed001_lib.define("custom_op(Tensor input) -> Tensor")


@torch.library.impl(_seed001_lib, "custom_op", "CompositeExplicitAutograd")
def _seed001_custom_op(x):
    print("custom_op called!")
    return torch.relu(x)


with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # impl_abstract is deprecated for register_fake; the seed uses it

    @torch.library.impl_abstract("my_custom_library_001::custom_op")
    def _seed001_custom_op_meta(x):
        return torch.empty_like(x)


class CustomOpExample001(torch.nn.Module):
    def forward(self, x):
        x = torch.sin(x)
        x = torch.ops.my_custom_library_001.custom_op(x)
        x = torch.cos(x)
        return x


def test_seed001_library_custom_op_exports_through_its_implementation() -> None:
    prog = _check(CustomOpExample001(), (torch.randn(3, 3),), (-torch.ones(3, 3),))
    assert [n.op_type for n in prog.model.graph] == ["Sin", "Relu", "Cos"]
    assert prog.report.traced_ops == {"my_custom_library_001::custom_op": 1}


# -- seed 002: the TorchScript exporter's documentation ---------------------------------------------


class AlexNetLike(torch.nn.Module):
    """torchvision's AlexNet layout at a smaller width (torchvision is not a dependency)."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 11, stride=4, padding=2), torch.nn.ReLU(inplace=True), torch.nn.MaxPool2d(3, 2),
            torch.nn.Conv2d(16, 32, 5, padding=2), torch.nn.ReLU(inplace=True), torch.nn.MaxPool2d(3, 2),
            torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.ReLU(inplace=True), torch.nn.MaxPool2d(3, 2),
        )
        self.avgpool = torch.nn.AdaptiveAvgPool2d((6, 6))
        self.classifier = torch.nn.Sequential(
            torch.nn.Dropout(), torch.nn.Linear(32 * 6 * 6, 64), torch.nn.ReLU(inplace=True), torch.nn.Linear(64, classes)
        )

    def forward(self, x):
        x = torch.flatten(self.avgpool(self.features(x)), 1)
        return self.classifier(x)


def test_alexnet_with_input_and_parameter_names() -> None:
    model = AlexNetLike().eval()
    input_names = ["actual_input_1"] + [f"learned_{i}" for i in range(10)]
    prog = _check(model, (torch.randn(2, 3, 224, 224),), input_names=input_names, output_names=["output1"])
    assert prog.input_names == ["actual_input_1"]
    assert prog.output_names == ["output1"]
    assert "learned_0" in prog.model.graph.initializers


class MyRelu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input):
        ctx.save_for_backward(input)
        return input.clamp(min=0)


class MyLogExp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input):
        ctx.save_for_backward(input)
        h = input.exp()
        return h.log().log()


def test_autograd_functions_are_inlined() -> None:
    prog = _check(lambda x: MyRelu.apply(x), (torch.randn(5),))
    assert _op_types(prog) & {"Clip", "Max", "Relu"}
    prog = _check(lambda x: MyLogExp.apply(x), (torch.rand(5) + 0.5,))
    assert {"Exp", "Log"} <= _op_types(prog)


@torch.library.custom_op("custom_ops::foo_forward", mutates_args=())
def foo_forward(input1: torch.Tensor, input2: torch.Tensor, attr1: float, attr2: int) -> torch.Tensor:
    return input1 * attr1 + input2 * attr2


@foo_forward.register_fake
def _(input1, input2, attr1, attr2):
    return torch.empty_like(input1)


class FooModel(torch.nn.Module):
    def __init__(self, attr1, attr2):
        super().__init__()
        self.attr1 = attr1
        self.attr2 = attr2

    def forward(self, input1, input2):
        return torch.ops.custom_ops.foo_forward(input1, input2, self.attr1, self.attr2)


def test_custom_op_foo_exports_through_its_implementation() -> None:
    x, y = torch.randn(3), torch.randn(3)
    prog = _check(FooModel(1.5, 2), (x, y))
    assert prog.report.traced_ops == {"custom_ops::foo_forward": 1}


def test_custom_op_to_custom_domain_with_opset_version() -> None:
    def symbolic_foo_forward(ctx, input1, input2, attr1, attr2):
        return ctx.op.Foo(input1, input2, attr1_f=float(attr1), attr2_i=int(attr2), _domain="custom_domain")

    x = torch.randn(3)
    prog = onnxport.export(
        FooModel(1.5, 2), (x, x), custom_translations={"custom_ops::foo_forward": symbolic_foo_forward},
        custom_opsets={"custom_domain": 2}, verify=False,
    )
    assert prog.model.opset_imports["custom_domain"] == 2
    (node,) = list(prog.model.graph)
    assert (node.domain, node.op_type) == ("custom_domain", "Foo")
    assert node.attributes["attr1_f"].as_float() == 1.5 and node.attributes["attr2_i"].as_int() == 2


def test_shape_only_output_is_refused_statically() -> None:
    class Model(torch.nn.Module):
        def forward(self, states):
            batch_size, seq_length = states.shape[:2]
            real_seq_length = seq_length
            real_seq_length += 2
            return real_seq_length + seq_length

    with pytest.raises(onnxport.InvalidInputError, match="returns no tensor"):
        onnxport.export(Model(), (torch.randn(2, 5, 3),))


# -- the tutorial's graph breaks (Bad1..Bad4) through export, as the tutorial writes them ---------


class Bad1(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return torch.sin(x)
        return torch.cos(x)


class Bad2(torch.nn.Module):
    def forward(self, x):
        x.data[0, 0] = 3
        return x


class Bad3(torch.nn.Module):
    def forward(self, x):
        x = x + 1
        return x + id(x)


class Bad4(torch.nn.Module):
    def forward(self, x):
        try:
            x = x + 1
            raise RuntimeError("bad")
        except:  # noqa: E722 - the tutorial's code as written
            x = x + 2
        return x


def test_bad1_data_dependent_if_is_rewritten_and_both_branches_verified() -> None:
    prog = _check(Bad1(), (torch.ones(3, 3),), (-torch.ones(3, 3),))
    assert [r.kind for r in prog.report.rewrites] == ["if"]
    assert prog.report.verification.branches.complete


def test_bad2_write_through_data_is_read_as_detach() -> None:
    import inspect

    x = torch.randn(3, 3)
    prog = _check(Bad2(), (x.clone(),), (torch.ones(3, 3),))
    (rewrite,) = prog.report.rewrites
    lines, first = inspect.getsourcelines(Bad2)
    assert rewrite.kind == "data"
    assert rewrite.line == first + next(i for i, text in enumerate(lines) if "x.data[0, 0]" in text)
    expected = x.clone()
    expected[0, 0] = 3
    torch.testing.assert_close(prog(x), expected)


def test_bad3_id_is_frozen_into_the_program_and_doctor_says_so() -> None:
    """Non-strict export bakes id(x) in as a constant, as the tutorial shows; an id is ~1e14, so eager
    and ONNX agree only to float32 precision. onnxport's doctor reports it as an error."""
    from onnxport.capture.diagnose import diagnose

    x = torch.randn(3, 3)
    prog = onnxport.export(Bad3(), (x,))
    assert prog.report.verification.ok
    torch.testing.assert_close(prog(x), Bad3()(x), rtol=1e-5, atol=0)
    (issue,) = [i for i in diagnose(Bad3(), (x,)).issues if i.category == "untraceable builtin"]
    assert issue.severity == "error"


def test_bad4_try_except_takes_the_path_of_the_example() -> None:
    _check(Bad4(), (torch.randn(3, 3),), (torch.ones(3, 3),))


class HalveWhile(torch.nn.Module):
    """Control flow the tutorial writes with while_loop, written as a Python while: onnxport rewrites it."""

    def forward(self, x):
        while x.abs().max() > 1:
            x = x / 2
        return x


def test_python_while_on_a_tensor_becomes_an_onnx_loop() -> None:
    prog = _check(HalveWhile(), (torch.randn(3, 3) * 40,), (torch.rand(3, 3) * 0.5,), (torch.full((3, 3), 1.5),))
    assert [r.kind for r in prog.report.rewrites] == ["while"]
    assert "Loop" in _op_types(prog)
