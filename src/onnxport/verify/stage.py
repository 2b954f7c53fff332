"""The verify stage: which input sets to check, chosen by need, within a time budget.

1. The given sets: the example (always, whatever the budget) and the user's ``verify_inputs``.
2. Where dims are dynamic: per group of dims that move together and that no given set already shows
   at another size, one set in which that group alone takes another size (see ``sizes``): size 1 first
   where the user's spec allows it, since torch.export captures dynamic dims for sizes >= 2 only and
   a model may treat size 1 apart; a difference there fails the export, saying how to narrow the dim.
   Should eager PyTorch refuse a size, the next one is tried, up to three.
3. Where onnxport rewrote ``if``s into ``torch.cond``: variants of the example that take a branch the
   given sets do not (see ``branches``); the search itself stops when the budget runs out.

Every set goes through one onnxruntime session at its default settings (see ``run``) and eager
PyTorch once, except a set of type 2 at a size torch.export captured where the captured program keeps
the group's rows apart (see ``rows``): its expected outputs are the example's eager outputs with their
rows resized as the inputs were, and eager PyTorch runs only should they not match. Sets 2 and 3 are
made up: each runs only if its predicted cost fits the budget, ``budget`` times the export so far when
the first of them is considered (see ``budget``); those left out are listed in the report and warned
about, with what verification took.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch.utils import _pytree as pytree

from onnxport.capture import Captured
from onnxport.capture._dim_constraints import relational_guards
from onnxport.capture.integrations import registered_types
from onnxport.errors import VerificationError
from onnxport.verify.ahead import EagerAhead
from onnxport.verify.branches import explore_branches
from onnxport.verify.budget import DEFAULT_BUDGET, Budget
from onnxport.verify.compare import Verification
from onnxport.verify.checker import Checker
from onnxport.verify.rows import row_axes
from onnxport.verify.sizes import GroupSizes, guard_breaking_sets, resize_keeping_ends, sizes_by_group

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
    ahead: EagerAhead | None = None,
) -> Verification:
    """Check ``program`` against ``model`` on the ``given`` input sets (the example first), plus inputs
    that take the other branches of rewritten ifs, plus inputs at other sizes the dynamic dims allow.
    ``ahead``: the example's eager run, started before capture (see ``ahead``), if one was."""
    checker = Checker(program, model, Budget(budget, export_seconds=program.report.total_seconds), ahead=ahead)
    try:
        return _verify(checker, program, model, given, captured, input_names, raise_on_mismatch)
    finally:
        checker.close()


def _verify(checker: Checker, program: Any, model: Any, given: list[InputSet], captured: Captured, input_names: Any,
            raise_on_mismatch: bool) -> Verification:
    groups = _size_groups(captured, given, input_names)
    _, spec = pytree.tree_flatten(given[0])
    resized = [[pytree.tree_unflatten(sample, spec) for sample in candidates] for candidates in groups]
    labels = ["example"] + [f"verify_inputs[{i}]" for i in range(len(given) - 1)]
    for label, inputs in zip(labels, given):
        if checker.check(label, inputs) == "unrunnable":
            return checker.finish()
    tried, verified, size_one = _check_other_sizes(checker, captured, groups, resized)
    broken = _check_guards(checker, captured, given[0], spec, input_names)
    above = _check_above_ranges(checker, groups, spec, program.report, verified)
    _note_bound_by_data(groups, program.report)
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
        fix = (_guard_fix(broken) if broken else _size_one_fix(size_one) if size_one
               else _size_oblivious_fix(captured) if captured.size_oblivious else _above_fix(above) if above else None)
        if fix is None or checker.onnxruntime_fault:  # said as such (see Checker)
            raise
        raise VerificationError(exc.message, verification=exc.verification, fix=fix) from None
    _note_refused_sizes(tried, verified, result, program.report)
    return result


def _check_guards(checker: Checker, captured: Captured, example: InputSet, spec: Any, input_names: Any) -> str:
    """Run the example resized where a guard comparing dynamic sizes fails (see ``sizes.guard_breaking_sets``),
    whatever the budget: the sizes at which the ONNX model, holding the example's branch, may be wrong. The
    first that differs from eager PyTorch, described ("" when none does)."""
    if not captured.specs:
        return ""
    sets = guard_breaking_sets(captured.program, pytree.tree_leaves(example), captured.specs, input_names=input_names,
                               rewritten=captured.size_branches)
    for flat, description in zip(sets, sets.descriptions):
        label = f"example resized to {description}"
        if checker.check(label, pytree.tree_unflatten(flat, spec), generated=True, required=True) == "mismatch":
            return description
    return ""


def _guard_fix(description: str) -> str:
    return (f"at {description} the ONNX model differs from eager PyTorch: the model compares input sizes as Python "
            "numbers (an `if` on x.shape[0] == y.shape[0], say), torch.export kept the example's branch, and its "
            "program checks the guard when called, which an ONNX graph cannot; write the condition with "
            "torch.sym_ite or torch.cond so that both branches are captured, or keep one of those dims static")


def _size_oblivious_fix(captured: Captured) -> str:
    dims = ", ".join(captured.size_oblivious)
    if captured.narrowed:
        return (f"{dims} had size 0 or 1 in the example, and capturing from it torch.export bounded "
                f"{', '.join(captured.narrowed)}: the graph holds the example's size (a shape rule or the model "
                "ties it to it); keep that dim static (its example size, or Dim.STATIC), or export with an "
                "example of size >= 2 there to see what in the model fixes the size")
    return (f"{dims} had size 0 or 1 in the example, so onnxport captured the general case for every size; "
            "if the model branches on that size being 1 (e.g. `if x.shape[0] == 1`), export with an example "
            f"of size >= 2 there, or keep {dims} static")


def _size_one_fix(size_one: SizeOne) -> str:
    """Size 1 differs (the model's own size-1 path, which torch.export does not capture)."""
    elsewhere = f" and matches it at {size_one.matched}" if size_one.matched else ""
    return (
        f"at {size_one.description} the ONNX model differs from eager PyTorch{elsewhere}: torch.export captures "
        f"dynamic dims for sizes >= 2, and the model treats size 1 apart (a `squeeze()`, an `if x.shape[0] == 1`); "
        f"declare {size_one.group} from 2 (e.g. Dim('{size_one.group}', min=2)) to export a model for sizes >= 2, "
        "remove the size-1 path from the model (squeeze(dim) for the dims meant), or keep that dim static"
    )


class SizeOne:
    """A group of dims at which size 1 did not match eager PyTorch: ``description`` (``batch=1``), the
    group's name, and the other size that matched, if one did."""

    def __init__(self, description: str, group: str):
        self.description, self.group, self.matched = description, group, ""


def _size_groups(captured: Captured, given: list[InputSet], input_names: Any) -> list[GroupSizes]:
    """The candidate sets per group of dynamic dims that needs one (see ``sizes``)."""
    if not captured.specs:
        return []
    return sizes_by_group(captured.program, pytree.tree_leaves(given[0]), captured.specs, input_names=input_names,
                          given=[pytree.tree_leaves(inputs) for inputs in given[1:]])


def _check_other_sizes(
    checker: Checker, captured: Captured, groups: list[GroupSizes], resized: list[list[InputSet]]
) -> tuple[list[str], list[str], SizeOne | None]:
    """Check one set per group of dynamic dims that needs one (``resized``: each group's candidate sets),
    size 1 first where it is allowed (eager PyTorch decides it); the sizes tried, those verified, and the
    first group that differed at size 1."""
    tried, verified, size_one = [], [], None
    # A program with guards comparing sizes (conditions torch.export checks when its program is called, and an
    # ONNX graph cannot) stands for the sizes they allow alone: eager PyTorch decides every other size.
    guarded = bool(relational_guards(captured.program))
    for candidates, sets in zip(groups, resized):
        axes = row_axes(captured.program, candidates.symbols) if checker.reference is not None and not guarded \
            else None
        differs = None
        for inputs, description, below, size in zip(sets, candidates.descriptions, candidates.below_range,
                                                    candidates.sizes):
            tried.append(description)
            # size 1 lies outside what torch.export captured, and a capture from a size-1 example (size-
            # oblivious) may hold that size's path: the captured program's rows stand for neither
            derived = None if below or captured.size_oblivious else _rows_resized(checker.reference, axes, size)
            outcome = checker.check(f"example resized to {description}", inputs, generated=True, required=below,
                                    derived=derived)
            if outcome == "checked":
                verified.append(description)
                if differs is not None:
                    differs.matched = description
            if below and outcome == "mismatch":
                differs = SizeOne(description, candidates.group)
                size_one = size_one or differs
                continue  # another size says whether the difference is size 1's alone
            if outcome not in ("refused", "unrunnable"):
                break
    return tried, verified, size_one


def _check_above_ranges(checker: Checker, groups: list[GroupSizes], spec: Any, report: Any, verified: list[str]) -> str:
    """Run each group just above the range torch.export recorded for it, where the user's spec allows more
    (see ``sizes._above_range``): eager PyTorch refusing it too is a bound of the model, said in the report;
    the ONNX model differing there is a graph fixed to the example's range. The first such, described."""
    differs = ""
    for candidates in groups:
        if candidates.above is None:
            continue
        flat, size, (lower, upper) = candidates.above
        description = f"{candidates.group}={size}"
        outcome = checker.check(f"example taken above the sizes {lower} to {upper} that torch.export captured, to "
                                f"{description}", pytree.tree_unflatten(flat, spec), generated=True, required=True)
        if outcome == "checked":
            verified.append(description)
        elif outcome == "refused":
            report.notes.append(f"{candidates.group} takes sizes up to {upper} only: torch.export bounded it "
                                f"there, and eager PyTorch refuses {size} too")
        elif outcome == "mismatch" and not differs:
            differs = f"{description}, above the sizes {lower} to {upper} that torch.export captured for {candidates.group}"
    return differs


def _note_bound_by_data(groups: list[GroupSizes], report: Any) -> None:
    """Dims no made-up set can move (see ``sizes``): checked at the example's size, said in the report."""
    for candidates in groups:
        if candidates.bound_by_data is not None:
            report.notes.append(
                f"{candidates.group} is checked at the example's size only: the model ties it to sizes read from "
                f"input values ({candidates.bound_by_data}), which no example resized alone keeps; pass "
                "verify_inputs=[...] with inputs of other sizes to check it there")


def _above_fix(above: str) -> str:
    """A size above the captured range differs: the graph holds the example's range, eager goes on."""
    return (f"at {above}, the ONNX model differs from eager PyTorch: the model took one path for that range while "
            "torch.export traced it, and eager PyTorch runs larger sizes another way (a Python loop over chunks of "
            "the dim runs once per chunk of the example; a table of positions is rebuilt longer when a longer input "
            "comes); declare the dim's range to what the graph holds (Dim(name, max=...), e.g. the model's position "
            "limit), export from an example as large as the largest size you will run, or keep the dim static")


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
