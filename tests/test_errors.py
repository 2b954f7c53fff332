"""Every error class: its message names the cause, the user's line when known, and the next step."""

from __future__ import annotations

import os

import pytest
import torch

import onnxport
from onnxport.errors import location_from_stack_trace

THIS_FILE = os.path.basename(__file__)


class Bad1(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:  # the line the error must point at
            return x.sin()
        return x.cos()


class Twice(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


@torch.library.custom_op("onnxport_err::mystery", mutates_args=())
def mystery(x: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(x.numpy() + 1)  # numpy: onnxport cannot trace it, so it needs a translation


@mystery.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class UsesMystery(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.ops.onnxport_err.mystery(x)
        return torch.ops.onnxport_err.mystery(y) * 2


def test_not_a_module() -> None:
    with pytest.raises(onnxport.InvalidInputError, match="must be a torch.nn.Module") as info:
        onnxport.export(42, (torch.randn(2),))
    assert info.value.fix and THIS_FILE in str(info.value.location)


def test_class_instead_of_instance() -> None:
    with pytest.raises(onnxport.InvalidInputError, match=r"pass Twice\(...\) instead"):
        onnxport.export(Twice, (torch.randn(2),))


def test_args_do_not_match_forward() -> None:
    with pytest.raises(onnxport.InvalidInputError, match="do not match Twice.forward") as info:
        onnxport.export(Twice(), (torch.randn(2), torch.randn(2)))
    assert "fix:" in str(info.value)


def test_bad_opset() -> None:
    with pytest.raises(onnxport.InvalidInputError, match="opset 7"):
        onnxport.export(Twice(), (torch.randn(2),), opset=7)


def test_input_names_count() -> None:
    with pytest.raises(onnxport.InvalidInputError, match="input_names has 2 names"):
        onnxport.export(Twice(), (torch.randn(2),), input_names=["a", "b"])


def test_capture_error_points_at_user_line() -> None:
    with pytest.raises(onnxport.CaptureError) as info:
        onnxport.export(Bad1(), (torch.randn(3),), rewrite_control_flow=False)
    err = info.value
    assert err.location is not None and err.location.file.endswith(THIS_FILE)
    assert "if x.sum() > 0" in err.location.code
    assert "torch.cond" in err.fix
    assert [a[0] for a in err.attempts] == ["non-strict", "strict"]
    assert "data-dependent" in str(err)


def test_unsupported_ops_listed_at_once_with_counts_and_lines() -> None:
    with pytest.raises(onnxport.UnsupportedOpError) as info:
        onnxport.export(UsesMystery(), (torch.randn(3),))
    err = info.value
    assert list(err.ops) == ["onnxport_err::mystery"]
    assert len(err.ops["onnxport_err::mystery"]) == 2
    assert "x2" in str(err) and THIS_FILE in str(err)
    assert "register_translation" in err.fix


def test_translation_error_names_node_and_line() -> None:
    def broken(ctx, x):
        raise RuntimeError("boom")

    with pytest.raises(onnxport.TranslationError, match="boom") as info:
        onnxport.export(UsesMystery(), (torch.randn(3),), custom_translations={"onnxport_err::mystery": broken})
    assert info.value.node.startswith("mystery")
    assert info.value.location is not None and info.value.location.file.endswith(THIS_FILE)


def test_failed_export_leaves_no_file_and_keeps_old_one(tmp_path) -> None:
    path = tmp_path / "model.onnx"
    path.write_bytes(b"previous")
    with pytest.raises(onnxport.CaptureError):
        onnxport.export(Bad1(), (torch.randn(3),), rewrite_control_flow=False).save(path)
    assert path.read_bytes() == b"previous"
    assert os.listdir(tmp_path) == ["model.onnx"]


def test_unwritable_path() -> None:
    prog = onnxport.export(Twice(), (torch.randn(2),))
    with pytest.raises(onnxport.InvalidInputError, match="does not exist"):
        prog.save("/nonexistent-dir/model.onnx")


def test_save_to_a_folder_is_refused(tmp_path) -> None:
    prog = onnxport.export(Twice(), (torch.randn(2),))
    with pytest.raises(onnxport.InvalidInputError, match="it is a folder"):
        prog.save(tmp_path)


def test_location_from_stack_trace_skips_library_frames() -> None:
    trace = (
        f'  File "{os.path.abspath(__file__)}", line 12, in forward\n    y = self.lin(x)\n'
        f'  File "{torch.__file__}", line 99, in linear\n    return F.linear(x)\n'
    )
    loc = location_from_stack_trace(trace)
    assert loc is not None and loc.line == 12 and loc.code == "y = self.lin(x)"


class Projection(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)  # the line eager PyTorch refuses a wrong width at


def test_example_the_model_refuses_in_eager_is_said_so() -> None:
    with pytest.raises(onnxport.InvalidInputError) as info:
        onnxport.export(Projection(), (torch.randn(2, 5),))
    error = info.value
    assert "refuses the example inputs in eager PyTorch" in error.message and "x=float32[2, 5]" in error.message
    assert "mat1 and mat2" in error.message and "simplify" not in str(error)
    assert error.location is not None and error.location.file.endswith(THIS_FILE) and "self.proj(x)" in error.location.code


def test_malformed_dynamic_shapes_said_once_before_capture() -> None:
    with pytest.raises(onnxport.InvalidInputError) as info:
        onnxport.export(Twice(), (torch.randn(2, 3),), dynamic_shapes={"x": (torch.export.Dim("a"),)})
    text = str(info.value)
    assert text.count("shape (2, 3)") == 1 and "strict" not in text


class WithFlag(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor, scale: bool = True) -> torch.Tensor:
        return (x + y) * (2 if scale else 1)


def test_dynamic_shapes_dict_may_leave_out_static_arguments() -> None:
    """torch.export wants a key per passed argument; left-out ones (a flag, a static tensor) mean static."""
    batch = torch.export.Dim("batch")
    prog = onnxport.export(WithFlag(), (torch.randn(3, 2), torch.randn(2)), {"scale": False},
                           dynamic_shapes={"x": {0: batch}})
    assert prog.model.graph.inputs[0].shape[0] == "batch"
    x, y = torch.randn(5, 2), torch.randn(2)
    torch.testing.assert_close(prog(x, y, scale=False), WithFlag()(x, y, scale=False))


def test_running_the_program_on_wrong_inputs_names_the_input() -> None:
    prog = onnxport.export(Projection(), (torch.randn(2, 4),), dynamic_shapes={"x": {0: torch.export.Dim("batch")}})
    with pytest.raises(onnxport.InvalidInputError, match=r"input x has shape \[3, 5\], the model takes \[batch, 4\]"):
        prog(torch.randn(3, 5))
    with pytest.raises(onnxport.InvalidInputError, match="input x is torch.float64"):
        prog(torch.randn(3, 4, dtype=torch.float64))
    assert prog(torch.randn(3, 4)).shape == (3, 3)


_BAD_ARGUMENTS = [
    ({"input_names": 5}, "input_names must be a list of strings"),
    ({"input_names": "x"}, "input_names must be a list of strings"),
    ({"input_names": ["x", "x"]}, "names 'x' twice"),
    ({"input_names": [""]}, "which is not a name"),
    ({"input_names": ["x"], "output_names": ["x"]}, "both an input and an output name"),
    ({"output_names": 5}, "output_names must be a list of strings"),
    ({"custom_translations": 5}, "custom_translations must be a dict"),
    ({"custom_translations": {"aten::relu": 5}}, "is not a function"),
    ({"custom_opsets": {"com.example": "1"}}, "custom_opsets must be a dict"),
    ({"verify_inputs": 5}, "verify_inputs must be a list of input sets"),
    ({"verify": "yes"}, "verify must be True or False"),
    ({"progress": 1}, "progress must be True or False"),
    ({"optimize": None}, "optimize must be True or False"),
    ({"target": "onnxruntime>=1.18", "opset": 23}, "newer than onnxruntime>=1.18 loads"),
    ({"target": ["onnxruntime"]}, "not a runtime onnxport writes for"),
    ({"verify_mode": "loud"}, "verify_mode must be"),
]


@pytest.mark.parametrize("kwargs, message", _BAD_ARGUMENTS, ids=lambda v: str(v)[:40])
def test_bad_arguments_are_named_before_any_work(kwargs, message) -> None:
    """Each wrong argument is an InvalidInputError naming it, with a next step, before capture starts."""
    class Never(torch.nn.Module):
        def forward(self, x):
            raise AssertionError("the model ran: the argument was not checked first")

    with pytest.raises(onnxport.InvalidInputError, match=message) as info:
        onnxport.export(Never(), (torch.randn(2, 3),), **kwargs)
    assert info.value.fix
