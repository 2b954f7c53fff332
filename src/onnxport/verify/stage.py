"""The verify stage: which input sets to check, then the comparison itself."""

from __future__ import annotations

import warnings
from typing import Any

from torch.utils import _pytree as pytree

from onnxport.capture import Captured
from onnxport.errors import VerificationError
from onnxport.verify.branches import explore_branches
from onnxport.verify.compare import Verification
from onnxport.verify.run import verify_program
from onnxport.verify.sizes import other_sizes

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
    labels = ["example"] + [f"verify_inputs[{i}]" for i in range(len(given) - 1)]
    coverage = None
    if captured.rewriter is not None:
        explored, coverage = explore_branches(model, sets, captured.rewriter)
        sets += explored
        labels += ["an example variant taking another branch"] * len(explored)
    resized, descriptions = _other_sizes(captured, given[0], input_names, program.report)
    labels += [f"example resized to {d}" for d in descriptions]
    try:
        result = verify_program(
            program, model, sets + resized, raise_on_mismatch=raise_on_mismatch, generated=len(resized), labels=labels
        )
    except VerificationError as exc:
        if not captured.size_oblivious:
            raise
        dims = ", ".join(captured.size_oblivious)
        raise VerificationError(
            exc.message,
            verification=exc.verification,
            fix=f"{dims} had size 0 or 1 in the example, so onnxport captured the general case for every size; "
            "if the model branches on that size being 1 (e.g. `if x.shape[0] == 1`), export with an example "
            f"of size >= 2 there, or keep {dims} static",
        ) from None
    _note_refused_sizes(captured, descriptions, result, program.report)
    result.branches = coverage
    return result


def _note_refused_sizes(captured: Captured, descriptions: list[str], result: Any, report: Any) -> None:
    """Dims declared dynamic at which eager PyTorch refuses every other size: the model needs the example's."""
    tried = [run for run in result.runs if "example resized to" in run]
    if tried and all("skipped: eager PyTorch refuses it" in run for run in tried):
        message = (
            f"eager PyTorch refuses every other size tried ({'; '.join(descriptions)}): the model only runs at the "
            "example's sizes there, so those dims are dynamic in name only; make them static in dynamic_shapes"
        )
        report.warn(message)
        warnings.warn(f"onnxport: {message}", stacklevel=4)


def _other_sizes(
    captured: Captured, example: InputSet, input_names: Any, report: Any
) -> tuple[list[InputSet], list[str]]:
    """Input sets at other sizes that the dynamic dims allow (none for a static model), and their sizes."""
    if not captured.specs:
        return [], []
    leaves, spec = pytree.tree_flatten(example)
    samples = other_sizes(captured.program, leaves, captured.specs, input_names=input_names)
    report.sizes_verified = list(samples.descriptions)
    return [pytree.tree_unflatten(sample, spec) for sample in samples], list(samples.descriptions)
