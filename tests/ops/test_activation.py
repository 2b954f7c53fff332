"""Activation functions against eager PyTorch."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import randn

import onnxport
from onnxport.translate.registry import ops
from tests.ops._runner import OpCase, params, run_case

aten = ops.aten  # an op this torch lacks is an AbsentOp: its cases are skipped
f32, f16 = torch.float32, torch.float16
FP = (f32, f16)


def wide(*shape: int) -> torch.Tensor:
    """Values spanning the interesting regions (thresholds, saturation) of most activations."""
    return randn(*shape) * 4


def prelu_channels(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.prelu(x, w)


class PReLUModule(torch.nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.act = torch.nn.PReLU(channels, init=0.1)
        with torch.no_grad():
            self.act.weight.copy_(torch.linspace(-0.5, 0.5, channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(x)


CASES = [
    OpCase(F.relu6, args=lambda: (wide(3, 4),), expect_ops=["Clip"], dtypes=FP),
    OpCase(F.hardtanh, args=lambda: (wide(3, 4),), dtypes=FP),
    OpCase(F.hardtanh, args=lambda: (wide(3, 4), -2.0, 0.5), name="bounds"),
    OpCase(F.gelu, args=lambda: (wide(3, 4),), expect_ops=["Gelu"], dtypes=FP),
    OpCase(F.gelu, args=lambda: (wide(3, 4),), kwargs={"approximate": "tanh"}, name="tanh", dtypes=FP),
    OpCase(F.silu, args=lambda: (wide(3, 4),), expect_ops=["Sigmoid", "Mul"], dtypes=FP),
    OpCase(torch.sigmoid, args=lambda: (wide(3, 4),), expect_ops=["Sigmoid"], dtypes=FP),
    OpCase(torch.sigmoid, args=lambda: (torch.randint(-5, 5, (3, 4)),), name="int"),
    OpCase(torch.tanh, args=lambda: (wide(3, 4),), dtypes=FP),
    OpCase(F.softplus, args=lambda: (wide(3, 4),), expect_ops=["Softplus"], dtypes=FP),
    OpCase(F.softplus, args=lambda: (wide(3, 4),), kwargs={"beta": 2.0, "threshold": 3.0}, name="beta_threshold",
           dtypes=FP),
    OpCase(F.softplus, args=lambda: (randn(3, 4) * 30,), name="large"),
    OpCase(F.hardswish, args=lambda: (wide(3, 4),), expect_ops=["HardSwish"], dtypes=FP),
    OpCase(F.hardsigmoid, args=lambda: (wide(3, 4),), expect_ops=["HardSigmoid"], dtypes=FP),
    OpCase(F.leaky_relu, args=lambda: (wide(3, 4),), expect_ops=["LeakyRelu"], dtypes=FP),
    OpCase(F.leaky_relu, args=lambda: (wide(3, 4), 0.2), name="slope"),
    OpCase(F.elu, args=lambda: (wide(3, 4),), expect_ops=["Elu"], dtypes=FP),
    OpCase(F.elu, args=lambda: (wide(3, 4), 0.5), name="alpha"),
    OpCase(aten.elu.default, args=lambda: (wide(3, 4), 1.2, 1.5, 0.7), name="scales", dtypes=FP),
    OpCase(F.selu, args=lambda: (wide(3, 4),), expect_ops=["Selu"], dtypes=FP),
    OpCase(F.celu, args=lambda: (wide(3, 4),), expect_ops=["Celu"]),
    OpCase(F.celu, args=lambda: (wide(3, 4), 0.7), name="alpha", dtypes=FP),
    OpCase(F.celu, args=lambda: (wide(3, 4).double(),), name="float64"),
    OpCase(F.mish, args=lambda: (wide(3, 4),), dtypes=FP),
    OpCase(F.logsigmoid, args=lambda: (wide(3, 4),), dtypes=FP),
    OpCase(F.logsigmoid, args=lambda: (randn(3, 4) * 40,), name="large"),
    OpCase(aten.log_sigmoid_forward.default, args=lambda: (wide(3, 4),)),
    OpCase(prelu_channels, args=lambda: (wide(2, 3, 4, 5), torch.tensor([0.1, -0.2, 0.3])), name="nchw",
           expect_ops=["PRelu"], dtypes=FP),
    OpCase(prelu_channels, args=lambda: (wide(2, 3), torch.tensor([0.1, -0.2, 0.3])), name="nc"),
    OpCase(prelu_channels, args=lambda: (wide(2, 3, 4), torch.tensor([0.25])), name="shared"),
    OpCase(prelu_channels, args=lambda: (wide(5,), torch.tensor([0.25])), name="1d"),
    OpCase(prelu_channels, args=lambda: (torch.tensor(-3.0), torch.tensor([0.25])), name="rank0"),
    OpCase(F.glu, args=lambda: (randn(3, 8),), expect_ops=["Split"], dtypes=FP),
    OpCase(F.glu, args=lambda: (randn(4, 6, 5), 1), name="dim1"),
    OpCase(F.glu, args=lambda: (randn(6, 5), 0), name="dim0", dynamic_shapes=(({1: torch.export.Dim("n")}, None),)),
    OpCase(F.threshold, args=lambda: (wide(3, 4), 0.5, -2.0), dtypes=FP),
    OpCase(F.hardshrink, args=lambda: (randn(3, 4),), dtypes=FP),
    OpCase(F.softshrink, args=lambda: (randn(3, 4), 0.3), expect_ops=["Shrink"], dtypes=FP),
    OpCase(F.gelu, args=lambda: (wide(5, 4),), name="dynamic", dynamic_shapes=(({0: torch.export.Dim("n")},),)),
    # float64: onnxruntime has no kernel for these ONNX ops, so they are composed from arithmetic
    *[
        OpCase(fn, args=lambda: (wide(3, 40),), name="composed", dtypes=(torch.float64,))
        for fn in (F.leaky_relu, F.elu, F.selu, F.softplus, F.hardswish, F.hardsigmoid, F.mish, F.logsigmoid)
    ],
    OpCase(prelu_channels, args=lambda: (wide(2, 3, 4), torch.tensor([0.1, -0.2, 0.3])), name="composed",
           dtypes=(torch.float64,)),
    # rrelu in eval: the mean of its slope range (training draws slopes: tests/ops/test_random.py)
    OpCase(F.rrelu, args=lambda: (wide(3, 4), 0.1, 0.4), name="eval", expect_ops=["LeakyRelu"], dtypes=FP),
    OpCase(aten.rrelu_with_noise_functional.default, args=lambda: (wide(3, 4), randn(3, 4), 0.2, 0.3), name="eval",
           dtypes=(f32, torch.float64)),
    OpCase(F.feature_alpha_dropout, args=lambda: (wide(2, 3, 4), 0.5, False), name="eval"),
]


@pytest.mark.parametrize(("case", "dtype"), params(CASES))
def test_op(case: OpCase, dtype: torch.dtype | None) -> None:
    run_case(case, dtype)


def test_prelu_module() -> None:
    case = OpCase(PReLUModule(3), args=lambda: (wide(2, 3, 4, 4),), expect_ops=["PRelu"])
    run_case(case)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_formula_before_opset_20(approximate: str) -> None:
    x = wide(3, 4)
    model = torch.nn.GELU(approximate=approximate)
    prog = onnxport.export(model, (x,), opset=18, verify=False)
    ops = {n.op_type for n in prog.model.graph.all_nodes()}
    assert "Gelu" not in ops
    torch.testing.assert_close(prog(x), model(x), atol=1e-5, rtol=1e-5)
