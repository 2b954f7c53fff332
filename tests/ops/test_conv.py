"""Convolutions: aten overloads directly, the functional API, and nn modules as torch.export sees them."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn, randn

from onnxport.translate.registry import ops
from tests.ops._runner import OpCase, params, run_case

aten = ops.aten  # an op this torch lacks is an AbsentOp: its cases are skipped
f32, f16 = torch.float32, torch.float16
Dim = torch.export.Dim
F16_TOL = {f16: (2e-2, 2e-2)}


class ModuleCase(nn.Module):
    """A module built once so its weights are parameters of the exported program."""

    def __init__(self, module: nn.Module):
        super().__init__()
        self.module = module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.module(x)


def _mod(module: nn.Module) -> ModuleCase:
    torch.manual_seed(1)
    wrapped = ModuleCase(module)
    wrapped.__name__ = type(module).__name__
    return wrapped


CASES = [
    # aten overloads with every argument explicit
    OpCase(aten.conv2d.default, args=lambda: (randn(2, 3, 9, 8), randn(4, 3, 3, 3), randn(4), [2, 1], [1, 2], [1, 2], 1),
           name="stride_pad_dil", expect_ops=["Conv"], dtypes=(f32, f16), tol=F16_TOL),
    OpCase(aten.conv2d.default, args=lambda: (randn(2, 4, 7, 7), randn(6, 2, 3, 3)), kwargs={"groups": 2},
           name="groups_nobias", dtypes=(f32, f16), tol=F16_TOL),
    OpCase(aten.conv2d.default, args=lambda: (randn(3, 7, 7), randn(4, 3, 3, 3), randn(4)), name="unbatched"),
    OpCase(aten.conv1d.default, args=lambda: (randn(2, 3, 10), randn(5, 3, 3), randn(5), [2], [1], [1], 1),
           expect_ops=["Conv"], dtypes=(f32, f16), tol=F16_TOL),
    OpCase(aten.conv3d.default, args=lambda: (randn(1, 2, 5, 6, 7), randn(3, 2, 3, 2, 3), randn(3), [1, 2, 1], [1, 0, 1]),
           dtypes=(f32, f16), tol=F16_TOL),
    OpCase(aten.conv2d.padding, args=lambda: (randn(1, 3, 8, 9), randn(4, 3, 4, 3), randn(4), [1, 1], "same", [2, 1]),
           name="same_even_kernel", dtypes=(f32, f16), tol=F16_TOL),
    OpCase(aten.conv1d.padding, args=lambda: (randn(1, 3, 8), randn(4, 3, 4)), kwargs={"padding": "same"}, name="same"),
    OpCase(aten.conv3d.padding, args=lambda: (randn(1, 2, 4, 5, 6), randn(3, 2, 3, 3, 3)), kwargs={"padding": "valid"},
           name="valid"),
    OpCase(aten.convolution.default, args=lambda: (randn(2, 3, 8, 8), randn(4, 3, 3, 3), randn(4), [2, 2], [1, 1], [1, 1],
           False, [0, 0], 1), name="plain", expect_ops=["Conv"]),
    OpCase(aten.convolution.default, args=lambda: (randn(2, 4, 5, 5), randn(4, 3, 3, 3), None, [2, 2], [1, 0], [1, 1],
           True, [1, 0], 2), name="transposed_groups", expect_ops=["ConvTranspose"], dtypes=(f32, f16), tol=F16_TOL),
    OpCase(aten.conv_transpose2d.input, args=lambda: (randn(1, 3, 5, 6), randn(3, 2, 3, 3), randn(2), [2, 3], [1, 1], [1, 2],
           1, [2, 1]), name="stride_pad_outpad_dil", expect_ops=["ConvTranspose"], dtypes=(f32, f16), tol=F16_TOL),
    OpCase(aten.conv_transpose1d.default, args=lambda: (randn(2, 4, 7), randn(4, 3, 3), randn(3), [3], [1], [2]),
           dtypes=(f32, f16), tol=F16_TOL),
    OpCase(aten.conv_transpose3d.input, args=lambda: (randn(1, 2, 3, 4, 5), randn(2, 3, 2, 3, 2)), kwargs={"stride": [2, 1, 2]}),
    OpCase(aten.conv_transpose2d.input, args=lambda: (randn(3, 5, 6), randn(3, 2, 3, 3)), kwargs={"stride": [2, 2]},
           name="unbatched"),
    # the functional API and nn modules, as models write them
    OpCase(F.conv2d, args=lambda: (randn(1, 3, 8, 8), randn(4, 3, 3, 3)), kwargs={"stride": 2, "padding": 1},
           name="int_args"),
    OpCase(F.conv_transpose2d, args=lambda: (randn(1, 3, 8, 8), randn(3, 4, 3, 3)),
           kwargs={"stride": 2, "padding": 1, "output_padding": 1}, name="int_args"),
    OpCase(_mod(nn.Conv2d(3, 8, 3, padding=1, bias=False)), args=lambda: (randn(2, 3, 10, 10),), name="module"),
    OpCase(_mod(nn.Conv2d(3, 6, (3, 5), padding="same", dilation=(2, 1), groups=3)), args=lambda: (randn(2, 3, 9, 9),),
           name="module_same", expect_ops=["Conv"]),
    OpCase(_mod(nn.Conv1d(4, 4, 5, padding=2, padding_mode="zeros")), args=lambda: (randn(2, 4, 16),), name="module"),
    OpCase(_mod(nn.ConvTranspose2d(4, 2, 4, stride=2, padding=1, output_padding=1)), args=lambda: (randn(2, 4, 5, 5),),
           name="module", expect_ops=["ConvTranspose"]),
    OpCase(_mod(nn.ConvTranspose3d(2, 2, 3, stride=2, groups=2)), args=lambda: (randn(1, 2, 3, 3, 3),), name="module"),
    # symbolic batch and spatial sizes
    OpCase(_mod(nn.Conv2d(3, 4, 3, stride=2, padding="valid")), args=lambda: (randn(3, 3, 11, 9),), name="dynamic",
           dynamic_shapes=(({0: Dim("n", min=2), 2: Dim("h", min=4), 3: Dim("w", min=4)},),)),
    OpCase(_mod(nn.Conv1d(3, 4, 4, padding="same")), args=lambda: (randn(3, 3, 11),), name="dynamic_same",
           dynamic_shapes=(({0: Dim("n", min=2), 2: Dim("l", min=4)},),)),
    OpCase(_mod(nn.ConvTranspose2d(3, 4, 3, stride=2, output_padding=1)), args=lambda: (randn(3, 3, 5, 6),), name="dynamic",
           dynamic_shapes=(({0: Dim("n", min=2), 2: Dim("h", min=2)},),)),
]


@pytest.mark.parametrize(("case", "dtype"), params(CASES))
def test_op(case: OpCase, dtype: torch.dtype | None) -> None:
    run_case(case, dtype)


def test_exported_targets() -> None:
    """The overloads torch.export emits for conv modules are the ones translated here."""
    from onnxport.translate.registry import lookup

    cases = [(nn.Conv2d(3, 4, 3), (1, 3, 8, 8)), (nn.Conv2d(3, 4, 3, padding="same"), (1, 3, 8, 8)),
             (nn.ConvTranspose2d(3, 4, 3), (1, 3, 8, 8)), (nn.Conv1d(3, 4, 3), (1, 3, 8)),
             (nn.ConvTranspose1d(3, 4, 3), (1, 3, 8)), (nn.Conv3d(3, 4, 3), (1, 3, 5, 5, 5))]
    for module, shape in cases:
        ep = torch.export.export(module, (randn(*shape),))
        targets = [n.target for n in ep.graph.nodes if n.op == "call_function"]
        assert targets and all(lookup(t) is not None for t in targets), targets


def test_symbolic_padding_is_refused_with_a_fix() -> None:
    """Padding computed from a dynamic size cannot be an ONNX attribute: the error names the line and a fix."""
    import onnxport

    class SizedPad(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.conv1d(x, torch.ones(2, 2, 3), padding=x.shape[-1] // 4)  # the line the error points at

    with pytest.raises(onnxport.TranslationError, match=r"padding \[<symbolic>\] depends on the input sizes") as info:
        onnxport.export(SizedPad(), (torch.randn(1, 2, 8),), dynamic_shapes=({2: 4 * Dim("w", min=2)},), verify=False)
    err = info.value
    assert err.location is not None and "F.conv1d" in err.location.code
    assert err.node == "conv1d" and err.target == "aten::conv1d"
    assert "onnxport bug" not in str(err) and "custom_translations={torch.ops.aten.conv1d.default: fn}" in err.fix
