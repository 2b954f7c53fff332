"""A float32 difference beyond the tolerance judged by eager PyTorch in float64: float32's rounding passes, with
the report saying so; a wrong graph fails as before, whatever the rounding around it."""

from __future__ import annotations

import pytest
import torch

import onnxport
from onnxport.verify.compare import compare
from onnxport.verify.rounding import float_rounding


class Cancelling(torch.nn.Module):
    """Two large products that nearly cancel: float32 keeps a few digits of their difference, which onnxruntime's
    and PyTorch's matmuls, summing in their own orders, round each their own way (0.04 apart, values near 1)."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.a = torch.nn.Parameter(torch.randn(512, 64, generator=g) * 30)
        self.b = torch.nn.Parameter(self.a.detach() + torch.randn(512, 64, generator=g) * 1e-3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.a - x @ self.b


def _x(batch: int = 3) -> torch.Tensor:
    return torch.randn(batch, 512, generator=torch.Generator().manual_seed(1)) * 30


def test_float32_rounding_is_not_a_mismatch() -> None:
    model, x = Cancelling(), _x()
    prog = onnxport.export(model, (x,))
    verification = prog.report.verification
    (check,) = verification.outputs
    assert verification.ok and "float32 rounding" in check.note
    assert check.max_abs > check.atol  # beyond the fixed tolerance: the float64 run judged it
    assert "eager PyTorch in float64" in str(verification)
    # the file is as near the exact result as eager float32 is
    with torch.no_grad():
        exact = model.double()(x.double())
    assert (prog(x).double() - exact).abs().max() <= 4 * (model.float()(x).double() - exact).abs().max()


def test_a_wrong_output_beside_rounding_still_fails() -> None:
    @torch.library.custom_op("onnxport_test::halve", mutates_args=())
    def halve(x: torch.Tensor) -> torch.Tensor:
        return x / 2

    @halve.register_fake
    def _(x: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x)

    def wrong(ctx, x):  # x / 1.9: 5% off, far beyond float32's rounding of the products beside it
        return ctx.op.Div(x, ctx.const(1.9, like=x))

    cancelling = Cancelling()

    def fn(x: torch.Tensor) -> torch.Tensor:
        y = cancelling(x)
        return y + torch.ops.onnxport_test.halve(y.abs() + 1)

    with pytest.raises(onnxport.VerificationError, match="does not match eager"):
        onnxport.export(fn, (_x(),), custom_translations={"onnxport_test::halve": wrong})


def _judged(actual: torch.Tensor, model: torch.nn.Module, x: torch.Tensor) -> tuple[str, bool]:
    with torch.no_grad():
        expected = model(x)
    (check,) = compare(["y"], [expected], [actual])
    assert not check.ok  # beyond the fixed tolerance: the case the float64 run judges
    note = float_rounding(model, ["y"], lambda out: [out], [((x,), {}, expected, [actual])], [check])
    return note, check.ok


def test_another_summation_order_is_rounding() -> None:
    model, x = Cancelling(), _x()
    with torch.no_grad():  # the same products summed in another order: float32's rounding, not another graph
        other = sum(x[:, i:i + 64] @ model.a[i:i + 64] for i in reversed(range(0, 512, 64))) \
            - sum(x[:, i:i + 64] @ model.b[i:i + 64] for i in reversed(range(0, 512, 64)))
    note, ok = _judged(other, model, x)
    assert ok and "as near it as eager float32 is" in note


def test_an_offset_beyond_rounding_is_not() -> None:
    model, x = Cancelling(), _x()
    with torch.no_grad():
        exact = model.double()(x.double())
        noise = (model.float()(x).double() - exact).abs().max()
    note, ok = _judged((exact + 8 * noise).float(), model.float(), x)
    assert not ok and note == ""


def test_a_half_model_is_not_judged() -> None:
    """float16 weights: no float32 rounding to speak of, the dtype's own tolerance holds."""
    model, x = Cancelling(), _x()
    with torch.no_grad():
        expected = model(x)
    (check,) = compare(["y"], [expected], [expected + 1])
    assert float_rounding(model.half(), ["y"], lambda out: [out], [((x,), {}, expected, [expected + 1])],
                          [check]) == ""
