"""Dynamic shapes, input side: torch.export called directly, then onnxport.capture.dynamic on what it made."""

from __future__ import annotations

import pytest
import sympy
import torch
from torch.export import Dim, export
from torch.export.graph_signature import InputKind
from torch.utils import _pytree as pytree

from onnxport.capture import dynamic as dyn
from onnxport.errors import CaptureError, InvalidInputError
from onnxport.verify.sizes import other_sizes
from tests.seed_models import DerivedDimExample1, DerivedDimExample2, DynamicModel, DynamicShapesExample1, Foo

# ---------------------------------------------------------------------------------------------
# The seeds' models.


class DynamicShapesExample3(torch.nn.Module):
    def forward(self, x, y):
        if x.shape[0] <= 16:
            return x @ y[:, :16]
        return y


def dynamic_model_inputs():
    return torch.randn(6, 5), torch.randn(4), torch.randn(8, 4), torch.randn(32)


def tensor_inputs(ep):
    """The fake tensors of the user's tensor inputs, in order."""
    nodes = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    vals = [nodes[s.arg.name].meta["val"] for s in ep.graph_signature.input_specs if s.kind == InputKind.USER_INPUT]
    return [v for v in vals if isinstance(v, torch.Tensor)]


def shape_of(ep, i):
    return tensor_inputs(ep)[i].shape


def run_samples(ep, args, kwargs, specs, **kw):
    """other_sizes for ``ep``; each set must run through ep.module()."""
    flat = pytree.tree_leaves((args, kwargs))
    sets = other_sizes(ep, flat, specs, **kw)
    for inputs in sets:
        call_args, call_kwargs = pytree.tree_unflatten(inputs, ep.call_spec.in_spec)
        ep.module()(*call_args, **call_kwargs)
    return sets


def exec_fix(error: CaptureError) -> object:
    """Run the ``fix`` code; it ends in ``dynamic_shapes=...``."""
    code = error.fix.split("\n", 1)[1].split("\nor keep")[0]
    scope = {"Dim": Dim}
    exec(code, scope)
    return scope["dynamic_shapes"]


def violation(model, args, dynamic_shapes):
    with pytest.raises(Exception) as info:
        export(model, args, dynamic_shapes=dynamic_shapes)
    return info.value


# ---------------------------------------------------------------------------------------------
# DynamicShapesExample1..3


def test_example1_bounds_names_and_samples():
    inp = torch.randn(10, 10, 2)
    d0, d1 = Dim("inp1_dim0"), Dim("inp1_dim1", min=4, max=18)
    shapes = {"x": {0: d0, 1: d1}}
    ep = export(DynamicShapesExample1(), (inp,), dynamic_shapes=shapes)
    specs = dyn.input_dim_specs(DynamicShapesExample1(), (inp,), {}, shapes)
    assert specs == [{0: d0, 1: d1}]
    names = dyn.dim_names(ep, specs, ["x"])
    shape = shape_of(ep, 0)
    assert names == {str(shape[0]): "inp1_dim0", str(shape[1]): "inp1_dim1"}
    sets = run_samples(ep, (inp,), {}, specs)
    assert len(sets) == 3
    for (t,), text in zip(sets, sets.descriptions):
        assert 4 <= t.shape[1] <= 18 and t.shape[2] == 2 and t.shape[0] >= 2
        assert tuple(t.shape[:2]) != tuple(inp.shape[:2])
        assert f"inp1_dim0={t.shape[0]}" in text and f"inp1_dim1={t.shape[1]}" in text


def test_example1_example_outside_the_range():
    inp = torch.randn(10, 10, 2)
    bad = Dim("inp1_dim1_bad", min=11, max=18)
    shapes = {"x": {0: Dim("inp1_dim0"), 1: bad}}
    exc = violation(DynamicShapesExample1(), (inp,), shapes)
    error = dyn.explain_constraint_violation(exc, DynamicShapesExample1(), shapes)
    assert isinstance(error, CaptureError)
    assert f"size {inp.shape[1]}" in error.message and f"[{bad.min}, {bad.max}]" in error.message
    fixed = exec_fix(error)
    assert fixed["x"][1].min == inp.shape[1] and fixed["x"][1].max == bad.max
    export(DynamicShapesExample1(), (inp,), dynamic_shapes=fixed)


def test_example1_max_below_the_example():
    inp = torch.randn(10, 10, 2)
    shapes = {"x": (Dim("a"), Dim("b", min=4, max=8), Dim.STATIC)}
    exc = violation(DynamicShapesExample1(), (inp,), shapes)
    error = dyn.explain_constraint_violation(exc, DynamicShapesExample1(), shapes)
    fixed = exec_fix(error)
    assert (fixed["x"][1].min, fixed["x"][1].max) == (shapes["x"][1].min, inp.shape[1]) and fixed["x"][2] == Dim.STATIC
    export(DynamicShapesExample1(), (inp,), dynamic_shapes=fixed)


def test_example3_suggested_fixes():
    x, y = torch.randn(8, 16), torch.randn(16, 32)
    shapes = {"x": {i: Dim(f"inp4_dim{i}") for i in range(2)}, "y": {i: Dim(f"inp5_dim{i}") for i in range(2)}}
    exc = violation(DynamicShapesExample3(), (x, y), shapes)
    error = dyn.explain_constraint_violation(exc, DynamicShapesExample3(), shapes)
    assert "y.shape[0]" in error.message and "x.shape[1]" in error.message
    fixed = exec_fix(error)
    assert fixed["y"][0] is fixed["x"][1]  # y.shape[0] == x.shape[1] is now one Dim
    assert fixed["x"][0].max == 16 and fixed["y"][1].min == 17  # torch says min=16; its guard says != 16
    ep = export(DynamicShapesExample3(), (x, y), dynamic_shapes=fixed)
    assert isinstance(shape_of(ep, 1)[0], torch.SymInt)


# ---------------------------------------------------------------------------------------------
# DynamicModel: Dim.AUTO, Dim.DYNAMIC and named Dims


def test_dynamic_model_auto():
    model, args = DynamicModel(), dynamic_model_inputs()
    shapes = dyn.auto_dynamic_shapes(model, args)
    assert shapes == {n: tuple(Dim.AUTO for _ in a.shape) for n, a in zip("wxyz", args)}
    ep = export(model, args, dynamic_shapes=shapes)
    specs = dyn.input_dim_specs(model, args, {}, shapes)
    warnings = dyn.check_specialization(ep, specs, list("wxyz"))
    assert len(warnings) == 1 and "w.shape[1]" in warnings[0] and "guard" in warnings[0]
    names = dyn.dim_names(ep, specs, list("wxyz"))
    w, x, y, z = (shape_of(ep, i) for i in range(4))
    assert names[str(w[0])] == "w_dim0" and names[str(x[0])] == "x_dim0" and names[str(y[0])] == "y_dim0"
    assert str(y[1]) == str(x[0])  # torch found y.shape[1] == x.shape[0]: one symbol, one name
    assert sympy.sympify(dyn.rename_expr(str(z[0]), names)) == sympy.sympify("x_dim0*y_dim0")
    for w_, x_, y_, z_ in run_samples(ep, args, {}, specs):
        assert w_.shape[1] == 5 and y_.shape[1] == x_.shape[0] and z_.shape[0] == y_.shape[0] * y_.shape[1]


def test_dynamic_model_dim_dynamic_specialised():
    model, args = DynamicModel(), dynamic_model_inputs()
    shapes = dyn.auto_dynamic_shapes(model, args)
    shapes["w"] = (Dim.AUTO, Dim.DYNAMIC)
    exc = violation(model, args, shapes)
    error = dyn.explain_constraint_violation(exc, model, shapes)
    assert "w.shape[1]" in error.message
    fixed = exec_fix(error)
    assert fixed["w"] == (Dim.AUTO, args[0].shape[1])
    export(model, args, dynamic_shapes=fixed)


def test_dynamic_model_named_dims():
    model, args = DynamicModel(), dynamic_model_inputs()
    batch, n, m = Dim("batch"), Dim("n", min=3, max=64), Dim("m")
    shapes = {"w": (batch, 5), "x": (n,), "y": (m, n), "z": (Dim.AUTO,)}
    ep = export(model, args, dynamic_shapes=shapes)
    specs = dyn.input_dim_specs(model, args, {}, shapes)
    assert dyn.check_specialization(ep, specs, list("wxyz")) == []
    names = dyn.dim_names(ep, specs, list("wxyz"))
    w, x, y, z = (shape_of(ep, i) for i in range(4))
    assert (names[str(w[0])], names[str(x[0])], names[str(y[0])]) == ("batch", "n", "m")
    for _, x_, y_, z_ in run_samples(ep, args, {}, specs, count=4):
        assert n.min <= x_.shape[0] <= n.max and z_.shape[0] == y_.shape[0] * y_.shape[1]


# ---------------------------------------------------------------------------------------------
# Derived dims


def test_derived_dim_example1():
    x, y = torch.randn(5), torch.randn(6)
    dimx = Dim("dimx", min=3, max=6)
    shapes = ({0: dimx}, {0: dimx + 1})
    ep = export(DerivedDimExample1(), (x, y), dynamic_shapes=shapes)
    specs = dyn.input_dim_specs(DerivedDimExample1(), (x, y), {}, shapes)
    names = dyn.dim_names(ep, specs, ["x", "y"])
    assert list(names.values()) == ["dimx"]
    assert dyn.rename_expr(shape_of(ep, 1)[0].node.expr, names) == "dimx + 1"
    sets = run_samples(ep, (x, y), {}, specs)
    assert len(sets) == 3
    for x_, y_ in sets:
        assert y_.shape[0] == x_.shape[0] + 1 and dimx.min <= x_.shape[0] <= dimx.max


def test_derived_dim_example2_root_only_in_expressions():
    z, y = torch.randn(4), torch.randn(10)
    dx = Dim("dx", min=3, max=6)
    shapes = ({0: dx + 1}, {0: dx * 3 + 1})
    ep = export(DerivedDimExample2(), (z, y), dynamic_shapes=shapes)
    specs = dyn.input_dim_specs(DerivedDimExample2(), (z, y), {}, shapes)
    names = dyn.dim_names(ep, specs, ["z", "y"])
    assert list(names.values()) == ["dx"]
    assert [dyn.rename_expr(shape_of(ep, i)[0].node.expr, names) for i in range(2)] == ["dx + 1", "3*dx + 1"]
    for z_, y_ in run_samples(ep, (z, y), {}, specs):
        root = z_.shape[0] - 1
        assert y_.shape[0] == 3 * root + 1 and dx.min <= root <= dx.max and root != z.shape[0] - 1


def test_related_dims_suggest_a_derived_dim():
    x, y = torch.randn(5), torch.randn(6)
    shapes = {"x": (Dim("dx"),), "y": (Dim("dy"),)}
    exc = violation(DerivedDimExample1(), (x, y), shapes)
    error = dyn.explain_constraint_violation(exc, DerivedDimExample1(), shapes)
    assert "dx + 1" in error.fix
    fixed = exec_fix(error)
    ep = export(DerivedDimExample1(), (x, y), dynamic_shapes=fixed)
    assert len(ep.range_constraints) >= 1


# ---------------------------------------------------------------------------------------------
# Foo: the constraint-violation example


def test_foo_constraint_violation_dict_form():
    args = (torch.randn(6, 4), torch.randn(6, 4))
    dx, dy, d1 = torch.export.dims("dx", "dy", "d1")
    shapes = {"x": (dx, d1), "y": (dy, d1)}
    exc = violation(Foo(), args, shapes)
    error = dyn.explain_constraint_violation(exc, Foo(), shapes)
    assert isinstance(error, CaptureError)
    assert "dy" in error.message and "dx" in error.message and "d1" in error.message
    assert error.message.count("d1 as dynamic") == 1  # torch repeats it, once per input
    assert error.fix.endswith('dx = Dim("dx")\ndynamic_shapes={"x": (dx, 4), "y": (dx, 4)}')
    assert error.location is not None and error.location.file == __file__
    fixed = exec_fix(error)
    ep = export(Foo(), args, dynamic_shapes=fixed)
    assert fixed["x"][0] is fixed["y"][0] and fixed["x"][1] == args[0].shape[1]
    assert isinstance(shape_of(ep, 0)[0], torch.SymInt)


def test_foo_constraint_violation_tuple_and_dict_per_tensor():
    args = (torch.randn(6, 4), torch.randn(6, 4))
    dx, dy, d1 = torch.export.dims("dx", "dy", "d1")
    shapes = ({0: dx, 1: d1}, {0: dy, 1: d1})
    exc = violation(Foo(), args, shapes)
    error = dyn.explain_constraint_violation(exc, Foo(), shapes)
    assert error.fix.endswith("dynamic_shapes=({0: dx, 1: 4}, {0: dx, 1: 4})")
    export(Foo(), args, dynamic_shapes=exec_fix(error))


def test_not_a_constraint_violation():
    assert dyn.explain_constraint_violation(RuntimeError("boom"), Foo(), None) is None


# ---------------------------------------------------------------------------------------------
# 0/1 specialisation


def test_zero_one_specialisation_auto_warns():
    model, args = torch.nn.Linear(4, 3), (torch.randn(1, 4),)
    shapes = {"input": (Dim.AUTO, Dim.STATIC)}
    ep = export(model, args, dynamic_shapes=shapes)
    warnings = dyn.check_specialization(ep, dyn.input_dim_specs(model, args, {}, shapes), ["input"])
    assert len(warnings) == 1 and "input.shape[0]" in warnings[0] and "0 and 1" in warnings[0]
    assert run_samples(ep, args, {}, dyn.input_dim_specs(model, args, {}, shapes)) == []


@pytest.mark.parametrize("hint", [Dim("b"), Dim.DYNAMIC])
def test_zero_one_specialisation_named_or_dynamic(hint):
    model, args = torch.nn.Linear(4, 3), (torch.randn(1, 4),)
    shapes = {"input": (hint, Dim.STATIC)}
    exc = violation(model, args, shapes)
    error = dyn.explain_constraint_violation(exc, model, shapes)
    fixed = exec_fix(error)
    assert fixed["input"][0] == 1
    export(model, args, dynamic_shapes=fixed)


def test_check_specialization_raises_for_named_dims():
    model, args = torch.nn.Linear(4, 3), (torch.randn(1, 4),)
    ep = export(model, args)  # static: as if torch had not noticed
    with pytest.raises(CaptureError, match=r"input\.shape\[0\].*0 and 1"):
        dyn.check_specialization(ep, [{0: Dim("b")}], ["input"])


# ---------------------------------------------------------------------------------------------
# dynamic_axes


class TwoInputs(torch.nn.Module):
    def forward(self, x, y):
        return x.sum(1) + y.sum(1)


def test_dynamic_axes_dict_form_shared_names():
    args = (torch.randn(3, 4), torch.randn(3, 5))
    axes = {"a": {0: "batch"}, "b": {0: "batch", 1: "seq"}, "out": {0: "batch"}}
    shapes = dyn.dynamic_shapes_from_axes(TwoInputs(), args, None, axes, ["a", "b"])
    assert set(shapes) == {"x", "y"} and shapes["x"][0] is shapes["y"][0]
    assert dyn.output_dynamic_axes(TwoInputs(), args, None, axes, ["a", "b"]) == {"out": {0: "batch"}}
    ep = export(TwoInputs(), args, dynamic_shapes=shapes)
    specs = dyn.input_dim_specs(TwoInputs(), args, {}, shapes)
    assert sorted(dyn.dim_names(ep, specs, ["a", "b"]).values()) == ["batch", "seq"]
    for x_, y_ in run_samples(ep, args, {}, specs):
        assert x_.shape[0] == y_.shape[0] and x_.shape[1] == args[0].shape[1]


def test_dynamic_axes_list_form_and_default_names():
    args = (torch.randn(3, 4), torch.randn(3, 5))
    shapes = dyn.dynamic_shapes_from_axes(TwoInputs(), args, None, {"x": [0], "y": [0, 1]}, None)
    assert shapes == {"x": {0: Dim.DYNAMIC}, "y": {0: Dim.DYNAMIC, 1: Dim.DYNAMIC}}
    ep = export(TwoInputs(), args, dynamic_shapes=shapes)
    names = dyn.dim_names(ep, dyn.input_dim_specs(TwoInputs(), args, {}, shapes), None)
    assert sorted(names.values()) == ["x_dim0", "y_dim1"]  # torch tied y.shape[0] to x.shape[0]


def test_dynamic_axes_unknown_name_and_non_identifier():
    args = (torch.randn(3, 4), torch.randn(3, 5))
    with pytest.raises(InvalidInputError, match=r"nope.*inputs are x, y"):
        dyn.dynamic_shapes_from_axes(TwoInputs(), args, None, {"nope": [0]}, None, output_names=["out"])
    shapes = dyn.dynamic_shapes_from_axes(TwoInputs(), args, None, {"x": {0: "batch size"}, "y": {0: "batch size"}})
    ep = export(TwoInputs(), args, dynamic_shapes=shapes)
    names = dyn.dim_names(ep, dyn.input_dim_specs(TwoInputs(), args, {}, shapes))
    assert list(names.values()) == ["batch size"]


# ---------------------------------------------------------------------------------------------
# Inferred from several input sets


def test_infer_two_inputs_varying_together():
    sets = [(torch.randn(b, 8), torch.randn(b, s)) for b, s in ((2, 5), (3, 7), (4, 6))]
    shapes = dyn.infer_dynamic_shapes(sets, model=TwoInputs())
    assert shapes["x"] == {0: shapes["y"][0]} and shapes["x"][0].__name__ == "x_dim0"
    assert shapes["y"][1].__name__ == "y_dim1" and shapes["y"][1] is not shapes["x"][0]
    ep = export(TwoInputs(), sets[0], dynamic_shapes=shapes)
    for args in sets[1:]:
        ep.module()(*args)
    positional = dyn.infer_dynamic_shapes(sets)
    assert [sorted(d) for d in positional] == [[0], [0, 1]] and positional[0][0].__name__ == "arg0_dim0"


class Nested(torch.nn.Module):
    def forward(self, inputs, scale=1.0):
        return inputs["ids"].float() * inputs["mask"][0] * scale


def test_infer_nested_dict_input():
    def make(b, s):
        return ({"ids": torch.randint(0, 9, (b, s)), "mask": [torch.ones(b, s)]}, 2.0)

    sets = [make(2, 5), make(3, 5), make(4, 9)]
    shapes = dyn.infer_dynamic_shapes(sets, model=Nested())
    ids, mask = shapes["inputs"]["ids"], shapes["inputs"]["mask"][0]
    assert ids[0] is mask[0] and ids[1] is mask[1] and shapes["scale"] is None
    assert (ids[0].__name__, ids[1].__name__) == ("inputs_ids_dim0", "inputs_ids_dim1")
    ep = export(Nested(), sets[0], dynamic_shapes=shapes)
    for args in sets[1:]:
        ep.module()(*args)


def test_infer_rejects_mismatches():
    with pytest.raises(InvalidInputError, match="rank|dims"):
        dyn.infer_dynamic_shapes([(torch.randn(2, 3),), (torch.randn(2, 3, 4),)])
    with pytest.raises(InvalidInputError, match="structure"):
        dyn.infer_dynamic_shapes([([torch.randn(2)],), ([torch.randn(2), torch.randn(2)],)])
    with pytest.raises(InvalidInputError, match="two or more"):
        dyn.infer_dynamic_shapes([(torch.randn(2),)])


# ---------------------------------------------------------------------------------------------
# input_dim_specs: every form


class KwModel(torch.nn.Module):
    def forward(self, a, b, *, c=None, d=None):
        return a[0] + b["k"] + c + d


def test_input_dim_specs_forms_agree():
    args = ([torch.randn(3, 2)], {"k": torch.randn(3, 2)})
    kwargs = {"d": torch.randn(3, 2), "c": torch.randn(3, 2)}  # not in signature order
    n = Dim("n")
    by_name = {"a": [{0: n}], "b": {"k": (n, None)}, "c": {0: n}, "d": (Dim.AUTO, Dim.STATIC)}
    by_position = ([(n, None)], {"k": {0: n, 1: None}}, {0: n}, {0: Dim.AUTO, 1: Dim.STATIC})
    flat = pytree.tree_leaves((args, kwargs))
    expected = {id(args[0][0]): {0: n}, id(args[1]["k"]): {0: n}, id(kwargs["c"]): {0: n},
                id(kwargs["d"]): {0: Dim.AUTO, 1: Dim.STATIC}}
    got_name = dyn.input_dim_specs(KwModel(), args, kwargs, by_name)
    assert got_name[:1] + got_name[2:] == [expected[id(t)] for i, t in enumerate(flat) if i != 1]
    assert got_name[1] == {0: n, 1: None}
    got_pos = dyn.input_dim_specs(KwModel(), args, kwargs, by_position)
    assert [{k: v for k, v in d.items() if v is not None} for d in got_pos] == [expected[id(t)] for t in flat]
    ep = export(KwModel(), args, kwargs, dynamic_shapes=by_name)
    assert len(tensor_inputs(ep)) == len(got_name)
    sets = run_samples(ep, args, kwargs, got_name)
    assert sets and all(s[0].shape[0] == s[1].shape[0] == s[2].shape[0] != 3 for s in sets)


def test_input_dim_specs_errors():
    x = torch.randn(3, 4)
    with pytest.raises(InvalidInputError, match="shape"):
        dyn.input_dim_specs(DynamicShapesExample1(), (x,), {}, {"x": (Dim("a"),)})
    with pytest.raises(InvalidInputError, match="does not receive"):
        dyn.input_dim_specs(DynamicShapesExample1(), (x,), {}, {"q": None})
    assert dyn.input_dim_specs(DynamicShapesExample1(), (x,), {}, None) == [{}]


def test_other_sizes_keep_integer_values_valid():
    emb = torch.nn.Embedding(10, 3)
    ids = torch.tensor([[1, 7, 3], [2, 9, 4]])
    ep = export(emb, (ids,), dynamic_shapes={"input": (Dim("b"), Dim("s"))})
    specs = [{0: Dim("b"), 1: Dim("s")}]
    sets = run_samples(ep, (ids,), {}, specs, count=2)
    assert len(sets) == 2
    for (t,) in sets:
        assert t.dtype == ids.dtype and int(t.min()) >= int(ids.min()) and int(t.max()) <= int(ids.max())


class _ResizeBack(torch.nn.Module):
    """Pools, then resizes back to ``int()`` of the pooled size: non-strict export reads it as the example's."""

    def forward(self, x):
        y = torch.nn.functional.avg_pool2d(x, 2)
        return torch.nn.functional.interpolate(y, size=(int(y.shape[2] * 2), int(y.shape[3] * 2)), mode="nearest")


def test_a_size_pinned_by_a_guard_is_captured_strict() -> None:
    import onnxport
    from onnxport.capture.strategies import pinned_size_guards

    x = torch.randn(1, 2, 12, 10)
    dims = {"x": {2: Dim.DYNAMIC, 3: Dim.DYNAMIC}}
    pinned = pinned_size_guards(export(_ResizeBack(), (x,), dynamic_shapes=dims, strict=False))
    assert pinned == ["(2*(x.size()[2] // 2)) == 12", "(2*(x.size()[3] // 2)) == 10"]
    prog = onnxport.export(_ResizeBack(), (x,), dynamic_shapes=dims)
    assert [(a.ok, "dynamic size was fixed" in a.error) for a in prog.report.attempts] == [(False, True), (True, False)]
    other = torch.randn(1, 2, 16, 6)  # another number of pooled rows and columns: the ONNX graph resizes to them
    torch.testing.assert_close(torch.as_tensor(prog(other)), _ResizeBack()(other))


def test_pinned_size_guards_leave_static_dims_relations_divisibility_and_sizes_0_and_1() -> None:
    from types import SimpleNamespace

    from onnxport.capture.strategies import pinned_size_guards

    guards = ["L['x'].size()[1] == 8", "(L['x'][0].size()[1]) == 3", "(L['x'].size()[1] % 2) == 0",
              "L['x'].size()[1] == L['y'].size()[1]", "((8*L['m'].size()[0]) // L['t'].size()[0]) == 8",
              "(4*L['x'].size()[0]) == 4", "L['x'].size()[0] >= 2", "(14*(L['x'].size()[2] // 14)) == 84",
              "(1 + (((-1) + L['x'].size()[3]) // 32)) == 1",  # a ResNet's last map of a 32-pixel image
              "(L['x'].size()[0] // (L['x'].size()[0] // 2)) == 2",  # true of every large size
              "(L['x'].size()[1]*L['x'].size()[0]) == 24",  # math.sqrt(h * w) as the example's float
              "(L['x'].size()[1] + L['y'].size()[1]) == 2*L['x'].size()[1]"]  # no number: a relation
    assert pinned_size_guards(SimpleNamespace(_guards_code=guards)) == ["(14*(x.size()[2] // 14)) == 84",
                                                                         "(x.size()[1]*x.size()[0]) == 24"]
