"""The seeds' dynamic-shape examples through onnxport.export: named ONNX dims, runs at three or more
sizes compared with eager, constraint violations and specialisations explained, dynamic_axes and
inferred dynamic shapes."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.export import Dim

import onnxport
from tests.seed_models import (
    DerivedDimExample1,
    DerivedDimExample2,
    DynamicModel,
    DynamicShapesExample1,
    DynamicShapesExample2,
    Foo,
)


def _dims(value) -> list:
    return [d if isinstance(d, int) else str(d) for d in value.shape.dims]


def _check_sizes(prog: onnxport.OnnxProgram, model: torch.nn.Module, *input_sets: tuple) -> None:
    assert len(input_sets) >= 3
    for inputs in input_sets:
        torch.testing.assert_close(prog(*inputs), model(*inputs), atol=1e-5, rtol=1e-4)


def test_example1_named_dims_with_bounds() -> None:
    inp1_dim0 = Dim("inp1_dim0")
    inp1_dim1 = Dim("inp1_dim1", min=4, max=18)
    model = DynamicShapesExample1()
    prog = onnxport.export(model, (torch.randn(10, 10, 2),), dynamic_shapes={"x": {0: inp1_dim0, 1: inp1_dim1}})
    (x,) = prog.model.graph.inputs
    assert _dims(x) == ["inp1_dim0", "inp1_dim1", 2]
    assert _dims(prog.model.graph.outputs[0]) == ["inp1_dim0", "inp1_dim1 - 2", 2]
    assert '"inp1_dim1": [4, 18]' in prog.model.metadata_props["onnxport.dim_ranges"]
    assert len(prog.report.sizes_verified) >= 2  # verification ran other sizes within the bounds
    _check_sizes(prog, model, (torch.randn(5, 5, 2),), (torch.randn(3, 18, 2),), (torch.randn(20, 4, 2),))


def test_example1_example_outside_bounds_is_explained() -> None:
    too_small = Dim("inp1_dim1", min=11, max=18)
    with pytest.raises(onnxport.InvalidInputError) as info:  # before capture: the example is outside the Dim
        onnxport.export(DynamicShapesExample1(), (torch.randn(10, 10, 2),), dynamic_shapes={"x": {1: too_small}})
    assert "inp1_dim1" in info.value.fix and "min=10" in info.value.fix.replace(" ", "")


def test_example2_shared_inner_dim() -> None:
    inner = Dim("inner_dim")
    shapes = {"x": {0: Dim("inp2_dim0"), 1: inner}, "y": {0: inner, 1: Dim("inp3_dim1")}}
    model = DynamicShapesExample2()
    prog = onnxport.export(model, (torch.randn(4, 8), torch.randn(8, 2)), dynamic_shapes=shapes)
    x, y = prog.model.graph.inputs
    assert _dims(x)[1] == _dims(y)[0] == "inner_dim"
    assert _dims(prog.model.graph.outputs[0]) == ["inp2_dim0", "inp3_dim1"]
    _check_sizes(prog, model, (torch.randn(3, 5), torch.randn(5, 7)), (torch.randn(6, 2), torch.randn(2, 9)),
                 (torch.randn(2, 11), torch.randn(11, 3)))


def test_derived_dims() -> None:
    dimx = Dim("dimx", min=3, max=6)
    model = DerivedDimExample1()
    prog = onnxport.export(model, (torch.randn(5), torch.randn(6)), dynamic_shapes=({0: dimx}, {0: dimx + 1}))
    assert [_dims(v) for v in prog.model.graph.inputs] == [["dimx"], ["dimx + 1"]]
    _check_sizes(prog, model, *[(torch.randn(n), torch.randn(n + 1)) for n in (3, 4, 6)])

    dx = Dim("dx", min=3, max=6)
    model = DerivedDimExample2()
    prog = onnxport.export(model, (torch.randn(4), torch.randn(10)), dynamic_shapes=({0: dx + 1}, {0: dx * 3 + 1}))
    assert [_dims(v) for v in prog.model.graph.inputs] == [["dx + 1"], ["3*dx + 1"]]
    _check_sizes(prog, model, *[(torch.randn(n + 1), torch.randn(3 * n + 1)) for n in (3, 5, 6)])


def _dynamic_model_inputs(b: int, n: int, m: int) -> tuple:
    return torch.randn(b, 5), torch.randn(n), torch.randn(m, n), torch.randn(m * n)


def test_dynamic_model_with_auto_warns_about_the_static_dim() -> None:
    shapes = {"w": (Dim.AUTO, Dim.AUTO), "x": (Dim.AUTO,), "y": (Dim.AUTO, Dim.AUTO), "z": (Dim.AUTO,)}
    model = DynamicModel()
    with pytest.warns(UserWarning, match=r"w.shape\[1\].*5"):
        prog = onnxport.export(model, _dynamic_model_inputs(6, 4, 8), dynamic_shapes=shapes)
    w, x, y, z = prog.model.graph.inputs
    assert _dims(w)[1] == 5 and isinstance(_dims(w)[0], str)
    assert _dims(x)[0] == _dims(y)[1]  # x + y broadcast: the same symbol
    _check_sizes(prog, model, _dynamic_model_inputs(3, 4, 8), _dynamic_model_inputs(6, 7, 2),
                 _dynamic_model_inputs(9, 3, 5))


def test_dynamic_model_with_named_dims() -> None:
    batch, n, m = Dim("batch"), Dim("n"), Dim("m")
    # z has m * n elements, which no single Dim expresses (derived dims are A * Dim + B): AUTO for it.
    shapes = {"w": {0: batch}, "x": {0: n}, "y": {0: m, 1: n}, "z": {0: Dim.AUTO}}
    model = DynamicModel()
    prog = onnxport.export(model, _dynamic_model_inputs(6, 4, 8), dynamic_shapes=shapes)
    w, x, y, z = prog.model.graph.inputs
    assert (_dims(w)[0], _dims(x)[0], _dims(y)) == ("batch", "n", ["m", "n"])
    assert _dims(z) == ["m*n"]
    _check_sizes(prog, model, _dynamic_model_inputs(3, 4, 8), _dynamic_model_inputs(6, 7, 2),
                 _dynamic_model_inputs(9, 3, 5))


def test_constraint_violation_suggests_the_users_own_dynamic_shapes() -> None:
    dx, dy, d1 = torch.export.dims("dx", "dy", "d1")
    with pytest.raises(onnxport.CaptureError) as info:
        onnxport.export(Foo(), (torch.randn(6, 4), torch.randn(6, 4)), dynamic_shapes={"x": (dx, d1), "y": (dy, d1)})
    fix = info.value.fix
    assert 'dynamic_shapes={"x": (dx, 4), "y": (dx, 4)}' in fix
    # The suggestion is valid code: running it exports.
    import textwrap

    namespace = {"Dim": Dim}
    exec(textwrap.dedent(fix.split("accepts:", 1)[1]).strip(), namespace)  # noqa: S102 - our own suggestion
    prog = onnxport.export(Foo(), (torch.randn(6, 4), torch.randn(6, 4)), dynamic_shapes=namespace["dynamic_shapes"])
    _check_sizes(prog, Foo(), *[(torch.randn(n, 4), torch.randn(n, 4)) for n in (2, 5, 9)])


def test_batch_one_example_stays_dynamic() -> None:
    """A dim declared dynamic whose example size is 1 stays dynamic (size-oblivious capture)."""
    model = DynamicShapesExample1()
    prog = onnxport.export(model, (torch.randn(1, 10, 2),), dynamic_shapes={"x": {0: Dim("b")}})
    (x,) = prog.model.graph.inputs
    assert _dims(x)[0] == "b" and prog.report.sizes_verified
    assert "size-oblivious for x.shape[0]" in str(prog.report)
    _check_sizes(prog, model, (torch.randn(1, 10, 2),), (torch.randn(3, 10, 2),), (torch.randn(7, 10, 2),))


def test_batch_one_model_that_needs_size_one_is_said() -> None:
    """Only where the model itself requires the size (here a reshape to a fixed size) is the user told."""

    class Flat(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.reshape(4) * 2

    with pytest.warns(UserWarning, match="refuses every other size"):
        prog = onnxport.export(Flat(), (torch.randn(1, 4),), dynamic_shapes={"x": {0: Dim.DYNAMIC}})
    assert any("dynamic in name only" in w for w in prog.report.warnings)


def test_batch_one_branch_on_size_one_names_the_cause() -> None:
    class SqueezeOne(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.squeeze(0) if x.shape[0] == 1 else x

    with pytest.raises(onnxport.VerificationError, match="MISMATCH") as info:
        onnxport.export(SqueezeOne(), (torch.randn(1, 4),), dynamic_shapes={"x": {0: Dim.DYNAMIC}})
    assert "x.shape[0] had size 0 or 1" in info.value.fix and "size >= 2" in info.value.fix


def test_dynamic_axes_like_torch_onnx() -> None:
    model = DynamicShapesExample2()
    prog = onnxport.export(
        model, (torch.randn(4, 8), torch.randn(8, 2)), input_names=["a", "b"], output_names=["c"],
        dynamic_axes={"a": {0: "rows"}, "b": [1], "c": {0: "rows", 1: "cols"}},
    )
    a, b = prog.model.graph.inputs
    assert _dims(a) == ["rows", 8] and _dims(b)[0] == 8 and isinstance(_dims(b)[1], str)
    assert _dims(prog.model.graph.outputs[0]) == ["rows", "cols"]
    _check_sizes(prog, model, *[(torch.randn(r, 8), torch.randn(8, c)) for r, c in ((2, 3), (5, 1), (9, 7))])


def test_inferred_dynamic_shapes_from_example_sets() -> None:
    model = DynamicShapesExample2()
    sets = [(torch.randn(2, 8), torch.randn(8, 3)), (torch.randn(5, 8), torch.randn(8, 4)), (torch.randn(7, 8), torch.randn(8, 6))]
    shapes = onnxport.infer_dynamic_shapes(sets, model=model)
    prog = onnxport.export(model, sets[0], dynamic_shapes=shapes)
    x, y = prog.model.graph.inputs
    assert isinstance(_dims(x)[0], str) and _dims(x)[1] == 8 and isinstance(_dims(y)[1], str)
    _check_sizes(prog, model, *sets)


def test_auto_makes_every_dim_dynamic_that_can_be() -> None:
    model = DynamicShapesExample2()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = onnxport.export(model, (torch.randn(4, 8), torch.randn(8, 2)), dynamic_shapes="auto")
    x, y = prog.model.graph.inputs
    assert all(isinstance(d, str) for d in _dims(x) + _dims(y))
    assert _dims(x)[1] == _dims(y)[0]
    _check_sizes(prog, model, *[(torch.randn(r, k), torch.randn(k, c)) for r, k, c in ((2, 3, 4), (5, 9, 1), (3, 2, 2))])


def test_both_dynamic_forms_is_an_error() -> None:
    with pytest.raises(onnxport.InvalidInputError, match="both dynamic_shapes and dynamic_axes"):
        onnxport.export(DynamicShapesExample1(), (torch.randn(4, 6, 2),), dynamic_shapes={"x": {0: Dim("b")}},
                        dynamic_axes={"x": [0]})


def test_batch_one_capture_that_bounds_the_dim_is_said() -> None:
    """An LSTM over a dynamic time dim captured from one step: torch.export bounded the dim to 1..2 and
    gave a static output; onnxruntime fails at 2 (in float16 it crashed the process, before verification
    ran in a child process); the error says what the capture did."""

    class LastFeature(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = torch.nn.LSTM(1, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lstm(x[:, :, -1:])[0]

    for dtype in (torch.float32, torch.float16):
        model = LastFeature().to(dtype).eval()
        with pytest.raises(onnxport.VerificationError) as info:
            onnxport.export(model, (torch.randn(1, 2, 4, dtype=dtype),), dynamic_shapes={"x": {0: Dim.DYNAMIC}})
        assert "bounded x.shape[0] (sizes 1 to 2)" in info.value.fix and "static" in info.value.fix
