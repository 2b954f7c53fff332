"""Sizes where torch.export's guards fail: a model that branches on its sizes as Python numbers, or reads them as
floats, is captured for the example's branch or value, with a guard its program checks when called and an ONNX
graph cannot. An ``if`` comparing two sizes is rewritten into ``torch.cond`` (both branches captured) and
verified at sizes that take the other branch; one that cannot be rewritten is verified there as captured, and
refused, saying why, where it differs; a guard the model itself requires (eager refuses those sizes) passes; a
size expression pinned to the example's value is captured strict, where it stays an expression."""

from __future__ import annotations

import math

import pytest
import torch
from torch.export import Dim

import onnxport

DIMS = ({0: Dim("a", min=2, max=64)}, {0: Dim("b", min=2, max=64)})


class SameRows(torch.nn.Module):
    """Branches on two inputs' batch sizes being equal: the example (4 and 6) takes the else branch."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if x.shape[0] == y.shape[0]:
            return x - 1
        return x + 1


class SameRowsOtherShape(torch.nn.Module):
    """The same branch, its two sides of different shapes (torch.cond gives the output a size of its own)."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if x.shape[0] == y.shape[0]:
            return x[:1] - 1
        return x + 1


class SubtractsSameRows(torch.nn.Module):
    """A branch that traces only where its test holds (x - y needs equal rows): torch.cond cannot capture it."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if x.shape[0] == y.shape[0]:
            return x - y
        return x + 1


class RequiresOtherRows(torch.nn.Module):
    """The same comparison as a requirement: eager refuses equal sizes."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if x.shape[0] == y.shape[0]:
            raise ValueError("x and y must have different batch sizes")
        return x + 1


def _example() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(4, 3), torch.randn(6, 3)


@pytest.mark.parametrize("model", [SameRows, SameRowsOtherShape])
def test_an_if_on_two_sizes_becomes_torch_cond_and_is_right_in_both_branches(model) -> None:
    prog = onnxport.export(model(), _example(), dynamic_shapes=DIMS)
    assert [r.kind for r in prog.report.rewrites] == ["size"] and "If" in {n.op_type for n in prog.model.graph}
    runs = prog.report.verification.runs
    assert any("b=4 (the other branch of an if on sizes: Ne(a, b) is false)" in run for run in runs)
    for a, b in ((5, 5), (3, 7), (2, 2)):
        x, y = torch.randn(a, 3), torch.randn(b, 3)
        torch.testing.assert_close(prog(x, y), model()(x, y))


def test_an_if_on_sizes_torch_cond_cannot_hold_is_refused_where_it_differs() -> None:
    with pytest.raises(onnxport.VerificationError) as caught:
        onnxport.export(SubtractsSameRows(), _example(), dynamic_shapes=DIMS)
    error = caught.value
    assert "where the program's guard Ne(a, b) fails" in str(error)
    assert "torch.sym_ite or torch.cond" in error.fix
    assert any("b=4 (where the program's guard" in run and "differs from eager" in run
               for run in error.verification.runs)


def test_a_guard_the_model_requires_passes() -> None:
    prog = onnxport.export(RequiresOtherRows(), _example(), dynamic_shapes=DIMS)
    assert prog.report.verification.ok and not prog.report.rewrites
    runs = prog.report.verification.runs
    assert any("where the program's guard" in run and "eager PyTorch refuses it" in run for run in runs)


def test_without_an_if_on_sizes_nothing_is_rewritten_or_added() -> None:
    class Plain(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return x + y.sum()

    prog = onnxport.export(Plain(), _example(), dynamic_shapes=DIMS)
    assert not prog.report.rewrites and len(prog.report.attempts) == 1
    assert not any("guard" in run or "if on sizes" in run for run in prog.report.verification.runs)


def test_a_float_of_two_sizes_is_captured_strict_and_right_at_other_sizes() -> None:
    """``math.sqrt(a * b)``: non-strict export evaluates it as the example's float, guarding ``a*b == 24``, a
    pinned size; strict export keeps ``sym_sqrt`` of the sizes."""

    class Scaled(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * math.sqrt(x.shape[0] * x.shape[1])

    dims = ({0: Dim("a", min=2, max=64), 1: Dim("b", min=2, max=64)},)
    prog = onnxport.export(Scaled(), (torch.randn(4, 6),), dynamic_shapes=dims)
    attempts = prog.report.attempts
    assert not attempts[0].ok and "dynamic size was fixed" in attempts[0].error and attempts[-1].ok
    for shape in ((3, 5), (9, 2)):
        x = torch.randn(*shape)
        torch.testing.assert_close(prog(x), Scaled()(x))


class PadsOddLengths(torch.nn.Module):
    """Pads an odd length to even before summing neighbours in pairs (Swin's ``maybe_pad``): eager takes any length,
    torch.export keeps the example's branch and guards ``Mod(n, 2) == 0``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[1] % 2 == 1:
            x = torch.nn.functional.pad(x, (0, 1))
        return x.reshape(x.shape[0], -1, 2).sum(-1)


class PairsEvenLengths(torch.nn.Module):
    """The same pairing as a requirement: eager refuses an odd length."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0], -1, 2).sum(-1)


def test_an_if_on_a_sizes_remainder_is_verified_where_it_flips() -> None:
    """An ``if`` on one size's remainder: the file holds the example's (even) branch, so an odd length, which eager
    takes, is verified; the file is right there (both branches captured) or refused, never silently wrong."""
    model, dims = PadsOddLengths(), ({1: Dim.DYNAMIC},)
    try:
        prog = onnxport.export(model, (torch.randn(2, 8),), dynamic_shapes=dims)
    except onnxport.VerificationError as error:
        assert "where the program's guard" in str(error) and "Mod(x_dim1, 2)" in str(error)
        assert "torch.sym_ite or torch.cond" in error.fix
        return
    assert any("(the other branch of an if on sizes" in run for run in prog.report.verification.runs)
    for n in (7, 9, 2, 3):
        x = torch.randn(2, n)
        torch.testing.assert_close(prog(x), model(x))


def test_a_remainder_the_model_requires_passes() -> None:
    prog = onnxport.export(PairsEvenLengths(), (torch.randn(2, 8),), dynamic_shapes=({1: Dim.DYNAMIC},))
    assert prog.report.verification.ok


class PairsEvenLengthsElseHalves(torch.nn.Module):
    """Pairs an even length, halves an odd one: the pairing traces only for even lengths, so torch.cond cannot
    hold both branches and the file keeps the even one."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[1] % 2 == 0:
            return x.reshape(x.shape[0], -1, 2).sum(-1)
        return x[:, : x.shape[1] // 2]


def test_a_remainder_branch_is_broken_only_at_sizes_the_inputs_come_in() -> None:
    """Refused where an odd length, which eager takes, gives the other branch; exported where every input's length
    is a multiple of 2 (an image processor's ``ensure_multiple_of``, as ``export_hf`` says through
    ``sizes_in_steps``)."""
    from onnxport.verify.sizes import sizes_in_steps

    model, x, dims = PairsEvenLengthsElseHalves(), torch.randn(2, 8), ({1: Dim.DYNAMIC},)
    with pytest.raises(onnxport.VerificationError) as caught:
        onnxport.export(model, (x,), dynamic_shapes=dims)
    assert "where the program's guard" in error_text(caught.value)
    with sizes_in_steps({"x_dim1": 2}):
        prog = onnxport.export(model, (x,), dynamic_shapes=dims)
    lengths = [int(run.split("x=float32[2, ")[1].split("]")[0]) for run in prog.report.verification.runs]
    assert len(lengths) > 1 and all(n % 2 == 0 for n in lengths), lengths
    for n in (4, 10):
        x = torch.randn(2, n)
        torch.testing.assert_close(prog(x), model(x))


def error_text(error: onnxport.VerificationError) -> str:
    return f"{error}\n{error.fix}"
