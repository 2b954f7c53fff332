"""Verification's time budget for the input sets it makes up, relative to the export so far.

The example inputs (and the user's ``verify_inputs``) are always checked. The sets onnxport makes up
(inputs taking other branches, inputs at other sizes) may then take up to ``ratio`` times the export
so far: capture through optimisation plus the checks of the given sets. Both sides grow with the
model's compute, so the rule holds on a small model and a large one alike. Before each made-up set,
its cost is predicted from what the example took (eager PyTorch and onnxruntime, scaled by the number
of input elements); a set that would overrun the budget is skipped and listed in the report.
"""

from __future__ import annotations

import dataclasses
import time

from onnxport.errors import InvalidInputError

__all__ = ["DEFAULT_BUDGET", "Budget", "check_budget"]

# One set per group of dynamic dims costs about the example's check (half of it for a batch of 2 cut
# to 1, 1.5 times it where the batch must grow to 3), so 2 lets a model with one or two groups check
# them all, whatever its size, and stops
# the open-ended work (the search for inputs taking other branches, many groups) on a large model.
DEFAULT_BUDGET = 2.0


def check_budget(budget: float | None) -> float | None:
    """``budget`` as a float when it is a number >= 0, None when None; else ``InvalidInputError``."""
    if budget is None:
        return None
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not budget >= 0:
        raise InvalidInputError(
            f"verify_budget must be a number >= 0 or None, not {budget!r}",
            fix="pass how many times the export so far the made-up input sets may take (e.g. 2), or None for no limit",
        )
    return float(budget)


@dataclasses.dataclass
class Budget:
    """The clock of one verification, started when verification starts."""

    ratio: float | None  # None: no limit
    export_seconds: float  # the export before verification
    start: float = dataclasses.field(default_factory=lambda: time.perf_counter())
    limit: float | None = None  # seconds the made-up sets may take, set when the first is considered
    _generated_start: float = 0.0

    @property
    def seconds(self) -> float:
        """Seconds spent verifying so far."""
        return time.perf_counter() - self.start

    def allows(self, predicted: float) -> bool:
        """Whether made-up work predicted to take ``predicted`` seconds fits in what is left."""
        if self.ratio is None:
            return True
        now = time.perf_counter()
        if self.limit is None:  # the first made-up set: the export so far is known
            self._generated_start = now
            self.limit = self.ratio * (self.export_seconds + now - self.start)
        return now - self._generated_start + predicted <= self.limit
