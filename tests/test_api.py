"""The public API: export, OnnxProgram (call, save, names, nested structures), report, options."""

from __future__ import annotations

import os
import re

import numpy as np
import onnx
import onnx_ir as ir
import pytest
import torch

import onnxport
from onnxport.translate.opset import DEFAULT_OPSET, newest_opset


class AddMul(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x * y + x


class Nested(torch.nn.Module):
    def forward(self, pair: tuple[torch.Tensor, torch.Tensor], extra: dict[str, torch.Tensor], scale: float = 2.0):
        a, b = pair
        return {"sum": a + b, "parts": [a * scale, extra["c"] * b]}


class Linear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)


def test_export_names_call_and_report() -> None:
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    prog = onnxport.export(AddMul(), (x, y), input_names=["x", "y"], output_names=["z"])
    assert prog.input_names == ["x", "y"]
    assert prog.output_names == ["z"]
    torch.testing.assert_close(prog(x, y), x * y + x)
    report = str(prog.report)
    for stage in ("capture", "translate", "optimize", "verify"):
        assert stage in report
    assert prog.report.verification.ok
    assert "max_abs" in report


def test_nested_inputs_and_outputs_are_flattened_and_rebuilt() -> None:
    a, b, c = torch.randn(2), torch.randn(2), torch.randn(2)
    model = Nested()
    prog = onnxport.export(model, ((a, b), {"c": c}))
    assert len(prog.input_names) == 3
    assert len(prog.output_names) == 3
    out = prog((a, b), {"c": c})
    expected = model((a, b), {"c": c})
    assert set(out) == {"sum", "parts"}
    torch.testing.assert_close(out["sum"], expected["sum"])
    torch.testing.assert_close(out["parts"][1], expected["parts"][1])


def test_kwargs_are_inputs() -> None:
    x, y = torch.randn(3), torch.randn(3)
    prog = onnxport.export(AddMul(), (x,), {"y": y})
    torch.testing.assert_close(prog(x, y=y), x * y + x)


def test_parameters_become_initializers_sharing_memory() -> None:
    model = Linear()
    prog = onnxport.export(model, (torch.randn(2, 4),))
    inits = prog.model.graph.initializers
    assert set(inits) == {"lin.weight", "lin.bias"}
    # The bias wraps the parameter's storage: no copy was made. The weight, stored transposed for MatMul,
    # is computed from the parameter when read (by a session, by save), not held as a second copy.
    assert inits["lin.bias"].const_value.raw.data_ptr() == model.lin.bias.data_ptr()
    weight = inits["lin.weight"].const_value
    assert isinstance(weight, ir.LazyTensor) and weight.raw.args[0].raw.data_ptr() == model.lin.weight.data_ptr()
    np.testing.assert_array_equal(weight.numpy(), model.lin.weight.detach().numpy().T)


def test_checker_and_determinism(tmp_path) -> None:
    x = torch.randn(2, 4)
    model = Linear()
    paths = [tmp_path / "a.onnx", tmp_path / "b.onnx"]
    for path in paths:
        onnxport.export(model, (x,)).save(path)
    onnx.checker.check_model(str(paths[0]), full_check=True)
    assert paths[0].read_bytes() == paths[1].read_bytes()


def test_save_external_data_roundtrip(tmp_path) -> None:
    x = torch.randn(2, 64)
    prog = onnxport.export(torch.nn.Linear(64, 48), (x,))  # weights large enough to go to the data file
    path = tmp_path / "m.onnx"
    prog.save(path, external_data=True)
    files = sorted(os.listdir(tmp_path))
    assert len(files) == 2 and files[0] == "m.onnx" and re.fullmatch(r"m\.onnx\.[0-9a-f]{16}\.data", files[1])
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (out,) = session.run(None, {prog.input_names[0]: x.numpy()})
    torch.testing.assert_close(torch.from_numpy(out), prog(x))
    # The program still runs and saves after writing external data.
    prog.save(tmp_path / "again.onnx")
    assert (tmp_path / "again.onnx").stat().st_size > 0


def test_opset_option_and_default() -> None:
    prog = onnxport.export(AddMul(), (torch.randn(2), torch.randn(2)), opset=18)
    assert prog.model.opset_imports[""] == 18
    default = onnxport.export(AddMul(), (torch.randn(2), torch.randn(2)))
    assert default.model.opset_imports[""] == DEFAULT_OPSET == 21  # the default target's, on every machine
    newest = onnxport.export(AddMul(), (torch.randn(2), torch.randn(2)), opset=newest_opset())
    assert newest.model.opset_imports[""] == newest_opset() >= DEFAULT_OPSET
    with pytest.raises(onnxport.InvalidInputError, match=f"18..{newest_opset()}"):
        onnxport.export(AddMul(), (torch.randn(2), torch.randn(2)), opset=newest_opset() + 1)


def test_export_each_captures_once_and_equals_an_export_per_variant() -> None:
    model, args = AddMul(), (torch.randn(2, 3), torch.randn(2, 3))
    variants = [{}, {"opset": 18}, {"target": "tensorrt>=10"}, {"opset": newest_opset()}]
    progs = onnxport.export_each(model, args, variants=variants, dynamic_shapes="auto", verify_inputs=[args])
    alone = [onnxport.export(model, args, dynamic_shapes="auto", **v) for v in variants]
    assert [p.model.opset_imports[""] for p in progs] == [p.model.opset_imports[""] for p in alone]
    assert [p.model.metadata_props["onnxport.target"] for p in progs] == [
        p.model.metadata_props["onnxport.target"] for p in alone]
    for prog, one in zip(progs, alone):
        assert [n.op_type for n in prog.model.graph] == [n.op_type for n in one.model.graph]
        assert prog.report.verification.ok  # each program verified on its own
        torch.testing.assert_close(prog(*args), model(*args))
    captures = [[s.seconds for s in p.report.stages if s.name == "capture"] for p in progs]
    assert all(c == captures[0] for c in captures)  # one capture, recorded in each report
    for prog in progs:  # the later stages recorded in each program's report alone
        assert [s.name for s in prog.report.stages] == ["capture", "decompose", "translate", "optimize", "verify"]
    assert progs[0].report.verification is not progs[1].report.verification


def test_export_each_refuses_bad_variants_and_options() -> None:
    args = (torch.randn(2), torch.randn(2))
    for variants in ([], {"opset": 18}, [{"opset": 18, "verify": False}], "onnxruntime>=1.18", [18]):
        with pytest.raises(onnxport.InvalidInputError, match="variants must be"):
            onnxport.export_each(AddMul(), args, variants=variants)
    with pytest.raises(onnxport.InvalidInputError, match="unknown options opset, verfy"):
        onnxport.export_each(AddMul(), args, variants=[{}], opset=18, verfy=False)
    with pytest.raises(onnxport.InvalidInputError, match="opset"):
        onnxport.export_each(AddMul(), args, variants=[{}, {"opset": newest_opset() + 1}])


def test_function_model() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x * 3

    x = torch.randn(4)
    torch.testing.assert_close(onnxport.export(f, (x,))(x), x * 3)


def test_single_tensor_args() -> None:
    x = torch.randn(2, 4)
    model = Linear()
    torch.testing.assert_close(onnxport.export(model, x)(x), model(x), atol=1e-5, rtol=1e-5)


def test_custom_translation_for_custom_op() -> None:
    @torch.library.custom_op("onnxport_test::scaled", mutates_args=())
    def scaled(x: torch.Tensor, factor: float) -> torch.Tensor:
        return torch.from_numpy(x.numpy() * factor)  # numpy: not traceable, so it needs a translation

    @scaled.register_fake
    def _(x: torch.Tensor, factor: float) -> torch.Tensor:
        return torch.empty_like(x)

    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.ops.onnxport_test.scaled(x, 3.0) + 1

    def translate_scaled(ctx, x, factor):
        return ctx.op.Mul(x, ctx.const(factor, like=x))

    x = torch.randn(3)
    with pytest.raises(onnxport.UnsupportedOpError, match="onnxport_test::scaled"):
        onnxport.export(M(), (x,))
    assert "onnxport_test::scaled" in onnxport.unsupported_ops(M(), (x,))
    prog = onnxport.export(M(), (x,), custom_translations={"onnxport_test::scaled": translate_scaled})
    torch.testing.assert_close(prog(x), x * 3 + 1)


def test_custom_translation_to_custom_domain() -> None:
    @torch.library.custom_op("onnxport_test::gelu_like", mutates_args=())
    def gelu_like(x: torch.Tensor) -> torch.Tensor:
        return x.sigmoid() * x

    @gelu_like.register_fake
    def _(x: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x)

    def translate(ctx, x):
        return ctx.op.MySwish(x, _domain="com.example")

    prog = onnxport.export(
        lambda x: torch.ops.onnxport_test.gelu_like(x), (torch.randn(2),),
        custom_translations={torch.ops.onnxport_test.gelu_like.default: translate}, verify=False,
    )
    assert prog.model.opset_imports["com.example"] == 1
    assert [n.op_type for n in prog.model.graph] == ["MySwish"]


def test_register_translation_decorator() -> None:
    @torch.library.custom_op("onnxport_test::plus_one", mutates_args=())
    def plus_one(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    @plus_one.register_fake
    def _(x: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x)

    @onnxport.register_translation("onnxport_test::plus_one")
    def _translate(ctx, x):
        return ctx.op.Add(x, ctx.const(1.0, like=x))

    x = torch.randn(5)
    prog = onnxport.export(lambda x: torch.ops.onnxport_test.plus_one(x), (x,))
    torch.testing.assert_close(prog(x), x + 1)


def test_verification_mismatch_raises_or_warns() -> None:
    @torch.library.custom_op("onnxport_test::double", mutates_args=())
    def double(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @double.register_fake
    def _(x: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x)

    def wrong(ctx, x):  # a translation that computes x * 3
        return ctx.op.Mul(x, ctx.const(3.0, like=x))

    fn = lambda x: torch.ops.onnxport_test.double(x)  # noqa: E731
    x = torch.ones(4)
    custom = {"onnxport_test::double": wrong}
    with pytest.raises(onnxport.VerificationError, match="does not match eager"):
        onnxport.export(fn, (x,), custom_translations=custom)
    with pytest.warns(UserWarning, match="does not match"):
        prog = onnxport.export(fn, (x,), custom_translations=custom, verify_mode="warn")
    assert not prog.report.verification.ok


def test_verify_inputs_are_checked_too() -> None:
    model = AddMul()
    prog = onnxport.export(model, (torch.randn(2), torch.randn(2)), verify_inputs=[(torch.ones(2), torch.zeros(2))])
    assert len(prog.report.verification.runs) == 2


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.bool])
def test_dtypes_export_valid_models(dtype) -> None:
    class M(torch.nn.Module):
        def forward(self, x, y):
            return x * y if dtype == torch.bool else x * y + x

    if dtype.is_floating_point:
        x, y = torch.randn(3, 4).to(dtype), torch.randn(3, 4).to(dtype)
    elif dtype == torch.bool:
        x, y = torch.randn(3, 4) > 0, torch.randn(3, 4) > 0
    else:
        x, y = torch.randint(-5, 5, (3, 4), dtype=dtype), torch.randint(-5, 5, (3, 4), dtype=dtype)
    import warnings

    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        prog = onnxport.export(M(), (x, y))
    onnx.checker.check_model(prog.model_proto, full_check=True)
    assert prog.model.graph.inputs[0].dtype.name == {torch.float16: "FLOAT16", torch.bfloat16: "BFLOAT16",
                                                      torch.int64: "INT64", torch.int32: "INT32", torch.bool: "BOOL"}[dtype]
    # bfloat16 included: onnxruntime's CPU provider has no bfloat16 Add/Mul, so they compute in float32
    assert prog.report.verification.ok and not prog.report.verification.skipped
    atol, rtol = onnxport.verify.tolerance(dtype)
    torch.testing.assert_close(prog(x, y), M()(x, y), atol=atol, rtol=rtol)


def test_training_mode_is_warned_about() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.0))
    with pytest.warns(UserWarning, match=r"training mode \(Dropout"):
        prog = onnxport.export(model, (torch.randn(2, 4),))
    assert any("model.eval()" in w for w in prog.report.warnings)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        onnxport.export(model.eval(), (torch.randn(2, 4),))


WITHOUT_TRANSFORMERS = """
import importlib.abc, sys

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("transformers", "diffusers"):
            raise ImportError(f"{name} is not installed")

sys.meta_path.insert(0, Block())
import torch, onnxport
model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU())
prog = onnxport.export(model, (torch.randn(2, 3),), dynamic_shapes=({0: torch.export.Dim("batch")},))
x = torch.randn(5, 3)
torch.testing.assert_close(prog(x), model(x))
assert prog.report.verification.ok and "transformers" not in sys.modules
print("exported without transformers")
"""


def test_exports_without_transformers_installed() -> None:
    """The plain ``pip install`` route has no transformers: nothing on the export path may need it."""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", WITHOUT_TRANSFORMERS], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "exported without transformers" in result.stdout


def test_an_output_named_as_an_input_leaves_the_input_its_name() -> None:
    """A model returning one of its inputs under its own name (Grounding DINO's input_ids): the input is fed by that
    name, so the output takes another."""
    class Echo(torch.nn.Module):
        def forward(self, input_ids: torch.Tensor, x: torch.Tensor) -> dict[str, torch.Tensor]:
            return {"logits": x * 2, "input_ids": input_ids}

    ids, x = torch.tensor([[1, 2]]), torch.randn(1, 2)
    prog = onnxport.export(Echo(), (ids, x))
    assert [i.name for i in prog.model.graph.inputs] == ["input_ids", "x"]
    assert [o.name for o in prog.model.graph.outputs] == ["logits", "output.input_ids"]
    out = prog(ids, x)
    torch.testing.assert_close(out["input_ids"], ids)
    torch.testing.assert_close(out["logits"], x * 2)
