"""The verify stage: which input sets to check, then the comparison itself."""

from __future__ import annotations

from typing import Any

from torch.utils import _pytree as pytree

from onnxport.capture import Captured, sample_inputs
from onnxport.verify.branches import explore_branches
from onnxport.verify.compare import Verification
from onnxport.verify.run import verify_program

__all__ = ["verify_export"]

InputSet = tuple[tuple, dict[str, Any]]


def verify_export(
    program: Any,
    model: Any,
    given: list[InputSet],
    captured: Captured,
    input_names: Any = None,
    *,
    raise_on_mismatch: bool = True,
) -> Verification:
    """Check ``program`` against ``model`` on the ``given`` input sets (the example first), plus inputs
    that take the other branches of rewritten ifs, plus inputs at other sizes the dynamic dims allow."""
    sets = list(given)
    coverage = None
    if captured.rewriter is not None:
        explored, coverage = explore_branches(model, sets, captured.rewriter)
        sets += explored
    other_sizes = _other_sizes(captured, given[0], input_names, program.report)
    result = verify_program(
        program, model, sets + other_sizes, raise_on_mismatch=raise_on_mismatch, generated=len(other_sizes)
    )
    result.branches = coverage
    return result


def _other_sizes(captured: Captured, example: InputSet, input_names: Any, report: Any) -> list[InputSet]:
    """Input sets at other sizes that the dynamic dims allow (none for a static model)."""
    if not captured.specs:
        return []
    leaves, spec = pytree.tree_flatten(example)
    samples = sample_inputs(captured.program, leaves, captured.specs, input_names=input_names)
    report.sizes_verified = list(samples.descriptions)
    return [pytree.tree_unflatten(sample, spec) for sample in samples]
