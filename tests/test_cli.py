"""The command line: export FILE.py:NAME, inspect, demo, and errors without tracebacks."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import onnx
import pytest
import torch

from onnxport.cli import main
from tests.hf_dirs import config_only


def _dims(model: onnx.ModelProto) -> dict[str, list[int | str]]:
    return {
        i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input
    }

MODEL_FILE = textwrap.dedent(
    """
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 2)

        def forward(self, x):
            return self.lin(x).relu()

    net = Net()

    def make():
        return Net(), (torch.randn(3, 4),)

    class Two(torch.nn.Module):
        def forward(self, x, y):
            return x * 2 + y

    def broken():
        raise ValueError("no such config")

    class Never(torch.nn.Module):
        def forward(self, x):
            raise AssertionError("the model ran: the output path was not checked first")
    """
)


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "net.py"
    path.write_text(MODEL_FILE)
    return path


@pytest.mark.parametrize("name", ["Net", "net", "make"])
def test_export_class_instance_or_factory(model_file, tmp_path, name, capsys) -> None:
    out = tmp_path / f"{name}.onnx"
    inputs = [] if name == "make" else ["--input", "x=float32[3,4]"]
    assert main(["export", f"{model_file}:{name}", *inputs, "-o", str(out), "-q"]) == 0
    model = onnx.load(str(out))
    onnx.checker.check_model(model, full_check=True)
    assert [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim] == [3, 4]
    assert capsys.readouterr().out.strip().endswith(f"saved {out}")


def test_export_reports_progress_and_verification(model_file, tmp_path, capsys) -> None:
    out = str(tmp_path / "m.onnx")
    assert main(["export", f"{model_file}:Net", "--input", "x=float32[2,4]", "-o", out, "--progress"]) == 0
    captured = capsys.readouterr()
    for stage in ("load", "capture", "translate", "verify"):
        assert f"[onnxport] {stage}" in captured.err
    assert "verification (onnxruntime vs eager PyTorch): passed" in captured.out


@pytest.mark.parametrize(
    ("flag", "tty", "expect"), [(None, False, False), (None, True, True), ("--no-progress", True, False)]
)
def test_progress_defaults_to_whether_stderr_is_a_terminal(
    model_file, tmp_path, capsys, monkeypatch, flag, tty, expect
) -> None:
    monkeypatch.setattr(sys.stderr, "isatty", lambda: tty)
    flags = [flag] if flag else []
    out = str(tmp_path / "m.onnx")
    assert main(["export", f"{model_file}:Net", "--input", "x=float32[2,4]", "-o", out, *flags]) == 0
    assert ("[onnxport] capture" in capsys.readouterr().err) == expect


def test_inspect(model_file, tmp_path, capsys) -> None:
    out = tmp_path / "m.onnx"
    main(["export", f"{model_file}:Net", "--input", "x=float32[2,4]", "-o", str(out), "-q"])
    capsys.readouterr()
    assert main(["inspect", str(out)]) == 0
    text = capsys.readouterr().out
    assert "x: float[2,4]" in text
    assert "MatMul" in text and "Relu" in text
    assert "initializers: 2" in text
    assert "ir_version: 10" in text and "ai.onnx=21" in text and "target: onnxruntime>=1.18" in text


def test_bad_input_spec_is_a_clean_error(model_file, tmp_path, capsys) -> None:
    assert main(["export", f"{model_file}:Net", "--input", "x=float33[2]", "-o", str(tmp_path / "m.onnx")]) == 1
    err = capsys.readouterr().err
    assert "cannot read --input" in err and "Traceback" not in err
    assert not (tmp_path / "m.onnx").exists()


def test_missing_name(model_file, tmp_path, capsys) -> None:
    assert main(["export", f"{model_file}:Nope", "--input", "x=float32[2,4]", "-o", str(tmp_path / "m.onnx")]) == 1
    assert "has no 'Nope'" in capsys.readouterr().err


def test_inspect_not_onnx(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00\x01garbage")
    assert main(["inspect", str(bad)]) == 1
    assert "not an ONNX model" in capsys.readouterr().err


@pytest.mark.transformers  # its Llama step
def test_demo_exports_verifies_and_prints_its_models(tmp_path) -> None:
    """As `make demo` runs it, in a fresh process (other packages' import-time notices included): it prints
    onnxport's own lines only."""
    captured = subprocess.run([sys.executable, "-m", "onnxport", "demo", "-o", str(tmp_path)], capture_output=True,
                              text=True, timeout=600)
    assert captured.returncode == 0, captured.stderr
    foreign = [line for line in captured.stderr.splitlines() if not line.startswith("[onnxport] ")]
    assert not foreign, foreign
    assert sorted(p.name for p in tmp_path.iterdir()) == ["control_flow.onnx", "small_cnn.onnx", "tiny_llama.onnx"]
    # The control-flow model is verified on two inputs (one per branch), and its text shows the If.
    control_flow = captured.stdout.split("== small_cnn")[0]
    assert control_flow.count("  inputs: example: x=float32[3]") == 1
    assert control_flow.count("  inputs: verify_inputs[0]: x=float32[3]") == 1
    assert " = If (" in control_flow and "then_branch" in control_flow
    assert captured.stdout.count("verification (onnxruntime vs eager PyTorch): passed") == 3
    assert captured.stderr.count("[onnxport] verify") == 3
    # The Llama with its cache generates in onnxruntime the tokens transformers generates.
    llama = captured.stdout.split("== tiny_llama")[1]
    assert "past_key_values.0.key['batch_size', '2', 'past_sequence_length', '16']" in llama
    assert "transformers model.generate: the same tokens" in llama
    for path in tmp_path.iterdir():
        onnx.checker.check_model(str(path), full_check=True)
    # Weights are elided from the printed text, not from the saved files.
    assert '"elided"' in captured.stdout


# --- dynamic dims by name, --dynamic ---------------------------------------------------------------


def test_named_dims_are_dynamic_and_shared(model_file, tmp_path) -> None:
    out = tmp_path / "m.onnx"
    assert main(["export", f"{model_file}:Two", "--input", "x=float32[batch,seq]", "--input", "y=float32[batch,seq]",
                 "-o", str(out), "-q"]) == 0
    assert _dims(onnx.load(str(out))) == {"x": ["batch", "seq"], "y": ["batch", "seq"]}


def test_named_dim_with_example_size_one_stays_dynamic(model_file, tmp_path, capsys) -> None:
    out = tmp_path / "m.onnx"
    assert main(["export", f"{model_file}:Net", "--input", "x=float32[batch=1,4]", "-o", str(out)]) == 0
    assert "size-oblivious for x.shape[0]" in capsys.readouterr().out  # the example really has size 1
    assert _dims(onnx.load(str(out))) == {"x": ["batch", 4]}


def test_dynamic_auto(model_file, tmp_path) -> None:
    out = tmp_path / "m.onnx"
    assert main(["export", f"{model_file}:Two", "--input", "x=float32[2,3]", "--input", "y=float32[2,3]",
                 "--dynamic", "auto", "-o", str(out), "-q"]) == 0
    dims = _dims(onnx.load(str(out)))
    assert all(isinstance(d, str) for d in dims["x"] + dims["y"])
    assert dims["x"] == dims["y"]  # x * 2 + y ties them together


def test_dynamic_auto_keeps_the_named_dims(model_file, tmp_path) -> None:
    out = tmp_path / "m.onnx"
    with pytest.warns(UserWarning, match=r"x.shape\[1\] was given Dim.AUTO but torch.export fixed it to 4"):
        args = ["--input", "x=float32[batch,4]", "--dynamic", "auto", "-o", str(out), "-q"]
        assert main(["export", f"{model_file}:Net", *args]) == 0
    assert _dims(onnx.load(str(out))) == {"x": ["batch", 4]}  # 4 is fixed by the Linear weight


@pytest.mark.parametrize(
    ("spec", "extra", "message"),
    [
        ("x=float32[2b,4]", [], "cannot read the dim '2b'"),
        ("x=float32[batch=2,batch=3]", [], "dim 'batch' has two example sizes, 2 and 3"),
        ("x=float32[batch,4]", ["--dynamic", "static"], "--dynamic static contradicts the dim names batch"),
        ("x=int64[2,4]~5:5", [], "empty range ~5:5"),
    ],
)
def test_bad_dims_are_clean_errors(model_file, tmp_path, capsys, spec, extra, message) -> None:
    assert main(["export", f"{model_file}:Net", "--input", spec, *extra, "-o", str(tmp_path / "m.onnx")]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_bad_dynamic_value_is_an_argparse_error(model_file, tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["export", f"{model_file}:Net", "--input", "x=float32[2,4]", "--dynamic", "yes", "-o", "m.onnx"])
    assert exc.value.code == 2
    assert "invalid choice: 'yes'" in capsys.readouterr().err


# --- --weights -----------------------------------------------------------------------------------


def _net_state() -> dict[str, torch.Tensor]:
    return {"lin.weight": torch.arange(8.0).reshape(2, 4), "lin.bias": torch.tensor([0.5, -0.5])}


def _initializers(path) -> dict[str, list[float]]:
    model = onnx.load(str(path))
    return {t.name: onnx.numpy_helper.to_array(t).ravel().tolist() for t in model.graph.initializer}


@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
def test_weights_are_loaded_before_export(model_file, tmp_path, suffix) -> None:
    weights = tmp_path / f"w{suffix}"
    if suffix == ".pt":
        torch.save(_net_state(), weights)
    else:
        safetensors_torch = pytest.importorskip("safetensors.torch")
        safetensors_torch.save_file(_net_state(), str(weights))
    out = tmp_path / "m.onnx"
    args = ["--input", "x=float32[2,4]", "--weights", str(weights), "-o", str(out), "-q"]
    assert main(["export", f"{model_file}:Net", *args]) == 0
    values = sorted(v for t in _initializers(out).values() for v in t)
    assert values == sorted([*range(8), 0.5, -0.5])  # the file's weights, not the random initial ones


def test_weights_with_wrong_keys_list_them(model_file, tmp_path, capsys) -> None:
    weights = tmp_path / "w.pt"
    torch.save({"module." + k: v for k, v in _net_state().items()}, weights)
    args = ["--input", "x=float32[2,4]", "--weights", str(weights), "-o", str(tmp_path / "m.onnx")]
    assert main(["export", f"{model_file}:Net", *args]) == 1
    err = capsys.readouterr().err
    assert "InvalidInputError" in err and "Traceback" not in err
    assert "missing keys (2): lin.weight, lin.bias" in err
    assert "unexpected keys (2): module.lin.weight, module.lin.bias" in err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("shape", "do not fit Net: size mismatch for lin.weight"),
        ("module", "cannot read the weights in"),  # a pickled module is refused by weights_only=True
        ("garbage", "cannot read the weights in"),
        ("missing", "does not exist"),
    ],
)
def test_bad_weights_are_clean_errors(model_file, tmp_path, capsys, content, message) -> None:
    weights = tmp_path / "w.pt"
    if content == "shape":
        torch.save({"lin.weight": torch.zeros(3, 4), "lin.bias": torch.zeros(3)}, weights)
    elif content == "module":
        torch.save(torch.nn.Linear(4, 2), weights)
    elif content == "garbage":
        weights.write_bytes(b"not a checkpoint")
    args = ["--input", "x=float32[2,4]", "--weights", str(weights), "-o", str(tmp_path / "m.onnx")]
    assert main(["export", f"{model_file}:Net", *args]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


# --- saved torch.export programs -----------------------------------------------------------------


class _Saved(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.lin(x).relu() + y


def _save_program(path, dynamic: bool = True) -> None:
    batch = torch.export.Dim("batch", max=64)
    shapes = {"x": {0: batch}, "y": {0: batch}} if dynamic else None
    ep = torch.export.export(_Saved(), (torch.randn(3, 4), torch.randn(3, 2)), dynamic_shapes=shapes)
    torch.export.save(ep, str(path))


def test_export_a_saved_program_keeps_its_dynamic_dims(tmp_path, capsys) -> None:
    program, out = tmp_path / "prog.pt2", tmp_path / "m.onnx"
    _save_program(program)
    assert main(["export", str(program), "-o", str(out)]) == 0
    assert "verification (onnxruntime vs eager PyTorch): passed" in capsys.readouterr().out
    model = onnx.load(str(out))
    onnx.checker.check_model(model, full_check=True)
    # The names given to the Dims are not saved in a .pt2; a shared dim keeps its first input's name.
    assert _dims(model) == {"x": ["x_dim0", 4], "y": ["x_dim0", 2]}


def test_export_a_saved_program_static_or_at_other_sizes(tmp_path) -> None:
    program = tmp_path / "prog.pt2"
    _save_program(program)
    assert main(["export", str(program), "--dynamic", "static", "-o", str(tmp_path / "a.onnx"), "-q"]) == 0
    assert _dims(onnx.load(str(tmp_path / "a.onnx"))) == {"x": [3, 4], "y": [3, 2]}
    assert main(["export", str(program), "--input", "x=float32[5,4]", "--input", "y=float32[5,2]",
                 "-o", str(tmp_path / "b.onnx"), "-q"]) == 0
    assert _dims(onnx.load(str(tmp_path / "b.onnx"))) == {"x": [5, 4], "y": [5, 2]}


def test_saved_program_keeps_its_ranges(tmp_path, capsys) -> None:
    program = tmp_path / "prog.pt2"
    _save_program(program)  # batch <= 64
    assert main(["export", str(program), "--input", "x=float32[n,4]", "--input", "y=float32[n,2]",
                 "-o", str(tmp_path / "m.onnx")]) == 1
    assert 'n = Dim("n", max=64)' in capsys.readouterr().err


def test_export_a_static_saved_program(tmp_path) -> None:
    program = tmp_path / "prog.pt2"
    _save_program(program, dynamic=False)
    assert main(["export", str(program), "-o", str(tmp_path / "m.onnx"), "-q"]) == 0
    assert _dims(onnx.load(str(tmp_path / "m.onnx"))) == {"x": [3, 4], "y": [3, 2]}


def test_bad_program_is_a_clean_error(tmp_path, capsys) -> None:
    program = tmp_path / "prog.pt2"
    program.write_bytes(b"not a zip")
    assert main(["export", str(program), "-o", str(tmp_path / "m.onnx")]) == 1
    err = capsys.readouterr().err
    assert "is not a saved torch.export program" in err and "Traceback" not in err


# --- other bad arguments -------------------------------------------------------------------------


def test_failing_user_code_is_a_clean_error(model_file, tmp_path, capsys) -> None:
    assert main(["export", f"{model_file}:broken", "-o", str(tmp_path / "m.onnx")]) == 1
    err = capsys.readouterr().err
    assert "calling broken() failed: ValueError: no such config" in err and "Traceback" not in err


def test_missing_output_folder_fails_before_export(model_file, tmp_path, capsys) -> None:
    out = tmp_path / "nope" / "m.onnx"
    assert main(["export", f"{model_file}:Net", "--input", "x=float32[2,4]", "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert "the folder" in err and "does not exist" in err and "Traceback" not in err


# --- output paths and model directories: refused before any work (issue 18) ------------------------------------


def _read_only(folder, monkeypatch) -> None:
    """``folder`` read-only, also for root (which writes anywhere): os.access then answers as for a user."""
    folder.chmod(0o555)
    if os.access(folder, os.W_OK):
        real = os.access
        monkeypatch.setattr(os, "access", lambda path, mode, *a, **k: (
            False if os.path.abspath(path) == str(folder) and mode & os.W_OK else real(path, mode, *a, **k)))


@pytest.mark.parametrize("case", ["folder", "read-only folder", "parent is a file"])
def test_export_output_refused_before_capture(model_file, tmp_path, monkeypatch, capsys, case) -> None:
    """``Never`` fails any run: the output path is refused before the model is captured."""
    if case == "folder":
        out, message = tmp_path / "out", "it is a folder"
        out.mkdir()
    elif case == "read-only folder":
        (tmp_path / "locked").mkdir()
        _read_only(tmp_path / "locked", monkeypatch)
        out, message = tmp_path / "locked" / "m.onnx", "is not writable"
    else:
        (tmp_path / "plain").write_text("a file")
        out, message = tmp_path / "plain" / "m.onnx", "is a file"
    try:
        assert main(["export", f"{model_file}:Never", "--input", "x=float32[2,4]", "-o", str(out)]) == 1
    finally:
        (tmp_path / "locked").exists() and (tmp_path / "locked").chmod(0o755)
    err = capsys.readouterr().err
    assert f"cannot write {out}" in err and message in err and "fix:" in err and "Traceback" not in err
    assert "the model ran" not in err and not out.is_file()


@pytest.mark.parametrize(("config", "message"), [
    ("{'model_type': 'llama'}", "is not valid JSON: Expecting property name enclosed in double quotes at line 1"),
    ('"llama"', "holds a JSON str, not an object of settings"),
    ('{"vocab_size": 99}', "has no model_type"),
])
def test_export_hf_corrupt_config_is_a_clean_error(tmp_path, monkeypatch, capsys, config, message) -> None:
    from onnxport.hf import stream

    monkeypatch.setattr(stream, "meta_model", lambda *a: pytest.fail("the model was loaded before the check"))
    directory, out = config_only(tmp_path, config), tmp_path / "out"
    assert main(["export-hf", str(directory), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"InvalidInputError: {directory / 'config.json'} {message}" in err
    assert "fix:" in err and "Traceback" not in err and not out.exists()


@pytest.mark.parametrize("case", ["file", "read-only folder"])
def test_export_hf_output_refused_before_loading(tmp_path, monkeypatch, capsys, case) -> None:
    from onnxport.hf import stream

    monkeypatch.setattr(stream, "meta_model", lambda *a: pytest.fail("the model was loaded before the check"))
    directory, out = config_only(tmp_path, '{"model_type": "llama"}'), tmp_path / "out"
    if case == "file":
        out.write_text("keep me")
        message = f"cannot write into {out}: it is a file, not a folder"
    else:
        out.mkdir()
        _read_only(out, monkeypatch)
        message = f"cannot write into {out}: the folder {out} is not writable"
    try:
        assert main(["export-hf", str(directory), "-o", str(out)]) == 1
    finally:
        out.chmod(0o755)
    err = capsys.readouterr().err
    assert message in err and "fix:" in err and "Traceback" not in err
    assert out.read_text() == "keep me" if case == "file" else os.listdir(out) == []


def test_inspect_errors_say_what_to_give(tmp_path, capsys) -> None:
    assert main(["inspect", str(tmp_path / "none.onnx")]) == 1
    assert main(["inspect", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "none.onnx does not exist" in err and f"{tmp_path} is a folder" in err
    assert err.count("fix: give the path of an .onnx file") == 2


def test_failing_user_code_has_a_next_step(model_file, tmp_path, capsys) -> None:
    assert main(["export", f"{model_file}:broken", "-o", str(tmp_path / "m.onnx")]) == 1
    assert "fix: fix the line shown" in capsys.readouterr().err


@pytest.mark.parametrize("bits", ["int4", "int8"])
def test_export_quantize_writes_matmulnbits_and_reports_the_error(model_file, tmp_path, capsys, bits) -> None:
    out = tmp_path / "q.onnx"
    target = ["--target", "onnxruntime>=1.23"] if bits == "int8" else []  # 8-bit MatMulNBits: 1.23 on
    assert main(["export", f"{model_file}:Net", "--input", "x=float32[2,4]", "-o", str(out), "--quantize", bits,
                 *target]) == 0
    nodes = [n for n in onnx.load(str(out)).graph.node]
    matmul = [n for n in nodes if n.op_type == "MatMulNBits"]
    assert len(matmul) == 1 and {a.name: a.i for a in matmul[0].attribute}["bits"] == int(bits[3:])
    assert "cosine similarity" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["export", "export-hf"])
def test_bad_quantize_is_refused_before_loading(model_file, tmp_path, monkeypatch, capsys, command) -> None:
    from onnxport.hf import stream

    monkeypatch.setattr(stream, "meta_model", lambda *a: pytest.fail("the model was loaded before the check"))
    if command == "export":  # broken raises when it is loaded
        out = tmp_path / "q.onnx"
        argv = ["export", f"{model_file}:broken", "-o", str(out)]
    else:
        out = tmp_path / "out"
        argv = ["export-hf", str(config_only(tmp_path, '{"model_type": "llama"}')), "-o", str(out)]
    assert main([*argv, "--quantize", "int3"]) == 1
    err = capsys.readouterr().err
    assert "InvalidInputError: quantize must be 'int4' or 'int8'" in err and "not 'int3'" in err
    assert "fix: pass 'int4'" in err and "--quantize int8" in err
    assert "no such config" not in err and "Traceback" not in err and not out.exists()
