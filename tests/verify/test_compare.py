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
