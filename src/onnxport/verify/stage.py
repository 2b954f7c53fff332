"""The verify stage: which input sets to check, chosen by need, within a time budget.

1. The given sets: the example (always, whatever the budget) and the user's ``verify_inputs``.
2. Where dims are dynamic: per group of dims that move together and that no given set already shows
   at another size, one set in which that group alone takes another size (see ``sizes``); should
   eager PyTorch refuse that size, the next one is tried, up to three.
3. Where onnxport rewrote ``if``s into ``torch.cond``: variants of the example that take a branch the
   given sets do not (see ``branches``); the search itself stops when the budget runs out.

Every set goes through one onnxruntime session (see ``run``) and eager PyTorch once, except a set of
type 2 where the captured program keeps the group's rows apart (see ``rows``): its expected outputs are
the example's eager outputs with their rows resized as the inputs were, and eager PyTorch runs only
should they not match. Sets 2 and 3 are made up: each runs only if its predicted cost fits the budget,
``budget`` times the export so far when the first of them is considered (see ``budget``); those left
out are listed in the report and warned about, with what verification took.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch.utils import _pytree as pytree

from onnxport.capture import Captured
from onnxport.capture.integrations import registered_types
from onnxport.errors import VerificationError
from onnxport.verify.branches import explore_branches
from onnxport.verify.budget import DEFAULT_BUDGET, Budget
from onnxport.verify.compare import Verification
from onnxport.verify.run import Checker
from onnxport.verify.rows import row_axes
from onnxport.verify.sizes import resize_keeping_ends, sizes_by_group

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
    budget: float | None = DEFAULT_BUDGET,
) -> Verification:
    """Check ``program`` against ``model`` on the ``given`` input sets (the example first), plus inputs
    that take the other branches of rewritten ifs, plus inputs at other sizes the dynamic dims allow."""
    checker = Checker(program, model, Budget(budget, export_seconds=program.report.total_seconds))
    labels = ["example"] + [f"verify_inputs[{i}]" for i in range(len(given) - 1)]
    for label, inputs in zip(labels, given):
        if checker.check(label, inputs) == "unrunnable":
            return checker.finish()
    tried, verified = _check_other_sizes(checker, captured, given, input_names)
    program.report.sizes_verified = verified
    if captured.rewriter is not None:  # after the sizes: its search is open-ended, theirs is not
        explored, checker.result.branches = explore_branches(
            model, given, captured.rewriter, affordable=lambda: checker.budget.allows(checker.eager_seconds)
        )
        for inputs in explored:
            checker.check("an example variant taking another branch", inputs, generated=True)
    _note_budget(checker.result, program.report)
    try:
        result = checker.finish(raise_on_mismatch=raise_on_mismatch)
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
    _note_refused_sizes(tried, verified, result, program.report)
    return result


def _check_other_sizes(
    checker: Checker, captured: Captured, given: list[InputSet], input_names: Any
) -> tuple[list[str], list[str]]:
    """Check one set per group of dynamic dims that needs one; the sizes tried, and those verified."""
    if not captured.specs:
        return [], []
    leaves, spec = pytree.tree_flatten(given[0])
    groups = sizes_by_group(captured.program, leaves, captured.specs, input_names=input_names,
                            given=[pytree.tree_leaves(inputs) for inputs in given[1:]])
    tried, verified = [], []
    for candidates in groups:
        differs = ""  # size 1 (below torch.export's range) did not match
        axes = row_axes(captured.program, candidates.symbols) if checker.reference is not None else None
        for sample, description, below, size in zip(candidates, candidates.descriptions, candidates.below_range,
                                                     candidates.sizes):
            tried.append(description)
            derived = _rows_resized(checker.reference, axes, size)
            outcome = checker.check(f"example resized to {description}", pytree.tree_unflatten(sample, spec),
                                    generated=True, tentative=below, derived=derived)
            if outcome == "differs":
                differs = f"{description} ({checker.difference})"
                continue
            if outcome == "checked":
                verified.append(description)
                if differs and checker.result.ok:
                    _note_differs_below_range(differs, description, checker.program.report)
            if outcome != "refused":
                break
    return tried, verified


def _rows_resized(reference: Any, axes: list[int | None] | None, size: int) -> Any:
    """The example's eager outputs with their rows cut or repeated as ``resize_keeping_ends`` does to the
    inputs: what the captured program computes on the resized example where it keeps rows apart."""
    if axes is None:
        return None
    with registered_types():
        leaves, spec = pytree.tree_flatten(reference)
    if len(leaves) != len(axes):
        return None
    resized = [resize_keeping_ends(leaf, axis, size) if axis is not None and isinstance(leaf, torch.Tensor) else leaf
               for leaf, axis in zip(leaves, axes)]
    return pytree.tree_unflatten(resized, spec)


def _note_differs_below_range(differs: str, verified: str, report: Any) -> None:
    """Size 1 lies outside torch.export's range; where another size matched, a difference at 1 is the
    model's own size-1 path, which the capture left out: a note, not a failed export."""
    message = (
        f"at {differs} the ONNX model differs from eager PyTorch, and matches it at {verified}: torch.export "
        "captures dynamic dims for sizes >= 2, and the model treats size 1 apart (a `squeeze()`, an "
        "`if x.shape[0] == 1`); feed the ONNX model sizes >= 2 there, or export with an example of size 1 "
        "to capture that path"
    )
    report.warn(message)
    warnings.warn(f"onnxport: {message}", stacklevel=5)


def _note_budget(result: Verification, report: Any) -> None:
    """Say which made-up sets the time budget left out (never the example or the user's sets)."""
    coverage = result.branches
    stopped = coverage is not None and coverage.out_of_time
    if result.over_budget or stopped:
        left_out = [*result.over_budget, *(["the search for inputs taking other branches"] if stopped else [])]
        message = (
            f"verification left out {len(left_out)} made-up check(s) for its time budget "
            f"({result.budget:g}x the export so far): {'; '.join(left_out)}; "
            "pass verify_budget=None (or a larger one) to run them"
        )
        report.warn(message)
        warnings.warn(f"onnxport: {message}", stacklevel=4)


def _note_refused_sizes(tried: list[str], verified: list[str], result: Verification, report: Any) -> None:
    """Dims declared dynamic at which eager PyTorch refuses every other size: the model needs the example's."""
    refused = [run for run in result.runs if "example resized to" in run and "eager PyTorch refuses it" in run]
    if tried and not verified and len(refused) == len(tried):
        message = (
            f"eager PyTorch refuses every other size tried ({'; '.join(tried)}): the model only runs at the "
            "example's sizes there, so those dims are dynamic in name only; make them static in dynamic_shapes"
        )
        report.warn(message)
        warnings.warn(f"onnxport: {message}", stacklevel=4)
