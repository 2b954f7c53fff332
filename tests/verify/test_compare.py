"""Output comparison: NaN and inf agree only with themselves."""

from __future__ import annotations

import pytest
import torch

from onnxport.verify.compare import compare

NAN, INF = float("nan"), float("inf")
EXPECTED = torch.tensor([1.0, NAN, INF, -INF, 2.0])


@pytest.mark.parametrize(
    ("actual", "ok"),
    [
        ([1.0, NAN, INF, -INF, 2.0], True),
        ([1.0, NAN, INF, -INF, 2.0001], True),  # within rtol
        ([1.0, 1.0, INF, -INF, 2.0], False),  # a number where eager gives NaN
        ([1.0, NAN, -INF, -INF, 2.0], False),  # the other infinity
        ([1.0, NAN, 3.0e38, -INF, 2.0], False),  # a finite number where eager gives inf
        ([1.0, NAN, INF, -INF, NAN], False),  # NaN where eager gives a number
        ([1.0, NAN, INF, -INF, INF], False),  # inf where eager gives a number
    ],
)
def test_nan_and_inf(actual: list[float], ok: bool) -> None:
    (check,) = compare(["y"], [EXPECTED], [torch.tensor(actual)])
    assert check.ok is ok, check


def test_large_outputs_are_held_to_the_rounding_of_their_largest_values() -> None:
    """A float32 output whose values reach 5e5 (a head on random weights drawn wide) knows its small elements
    only to the rounding of the sums they came from: 0.9 off at an element near zero is rounding there, not a
    wrong graph; the same error in an output of ordinary size is one."""
    expected = torch.tensor([476562.0, -3.0e5, 0.05, 1.0])
    (check,) = compare(["logits"], [expected], [expected + torch.tensor([0.0, 0.0, 0.9, 0.0])])
    assert check.ok and check.atol > 1.0, check
    (check,) = compare(["logits"], [expected], [expected + torch.tensor([0.0, 0.0, 10.0, 0.0])])
    assert not check.ok, check  # more than the rounding of the largest values
    small = torch.tensor([4.0, -3.0, 0.05, 1.0])
    (check,) = compare(["logits"], [small], [small + torch.tensor([0.0, 0.0, 0.001, 0.0])])
    assert not check.ok and check.atol == 1e-4, check
    half = expected.half()
    (check,) = compare(["logits"], [half], [half])
    assert check.atol == 1e-2  # float16's tolerances as they were


def test_a_report_says_on_its_first_line_when_nothing_was_compared() -> None:
    from onnxport.report import Report
    from onnxport.verify.compare import Verification

    checked = Report(verification=Verification("onnxruntime vs eager PyTorch", []))
    assert str(checked).splitlines()[0] == "onnxport export report"
    skipped = Report(verification=Verification("onnxruntime vs eager PyTorch", [],
                                               skipped="onnxruntime cannot run it here: NOT_IMPLEMENTED"))
    assert str(skipped).splitlines()[0] == ("onnxport export report: NOT VERIFIED (onnxruntime cannot run it here: "
                                            "NOT_IMPLEMENTED)")
    assert str(Report(unverified="verify=False")).splitlines()[0] == "onnxport export report: NOT VERIFIED (verify=False)"
