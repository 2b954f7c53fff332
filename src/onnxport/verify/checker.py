"""Checking input sets: eager PyTorch once per set, all sets through one onnxruntime session.

The session is the model as it ships: onnxruntime's default settings (graph optimisation level
``all``, weights prepacked), the session ``prog(...)`` and users build, in a child process (see
``child``) so that an onnxruntime crash fails the verification instead of ending the user's process.
The session starts once eager PyTorch has run the example, and each set runs in eager PyTorch, then in
onnxruntime: the two side by side, on few cores, slowed each other down more than they overlapped
(R3D-18: 1.2 s against 1.0 s). Only where the weights could not be held twice in the memory
free (onnxruntime copies them at that level) does the session run at level ``none`` with the weights
fed in place, and the report says so. When onnxruntime fails at its default level, the set it failed on
is tried at the lower levels so that the error can say whether the fault lies in onnxruntime's graph
optimisations.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any

import onnx_ir as ir
import torch

from onnxport.errors import InvalidInputError, OnnxportError, VerificationError
from onnxport.memory import available_memory
from onnxport.verify.ahead import EagerAhead, eager_outputs
from onnxport.verify.budget import Budget
from onnxport.verify.child import Crashed, SessionProcess, no_fork_reason
from onnxport.verify.compare import OutputCheck, Verification, compare, tolerance
from onnxport.verify.draws import Recording, feed_draws, mismatch, plan
from onnxport.verify.integer import (
    activation_quantization_effect,
    float_products,
    integer_kernels,
    quantized_output_steps,
    saturating_integer_products,
)
from onnxport.verify.rounding import float_rounding
from onnxport.verify.session import initializer_bytes

__all__ = ["Checker", "session_level"]

InputSet = tuple[tuple, dict[str, Any]]


def session_level(model: ir.Model, available: int | None = None) -> str:
    """``"all"`` (onnxruntime's default), or ``"none"`` where a copy of the weights would not fit in the
    memory free (``available`` bytes; read from the system when None)."""
    if available is None:
        available = available_memory()
    return "all" if available is None or 2 * initializer_bytes(model) < available else "none"


_MISMATCHED_RUNS = 4  # the differing sets a quantized model's check at level 'basic' reruns
_NOISE = 2.0  # how many times onnxruntime's own rounding noise a quantized output may differ from eager's
# The share of the activations' quantization effect (eager quantized against eager with float activations) that
# a quantized output may differ from eager's by, where onnxruntime's two levels round alike
_EFFECT_SHARE = 0.5
_FLOATS = {ir.DataType.BFLOAT16: torch.bfloat16, ir.DataType.FLOAT16: torch.float16,
           ir.DataType.FLOAT: torch.float32, ir.DataType.DOUBLE: torch.float64}


def computed_precisions(model: ir.Model) -> dict[str, torch.dtype]:
    """Per graph output, the least precise float dtype among the values computed on its way (the
    outputs of the nodes it depends on); outputs computed through no float value are left out."""
    loosest: dict[ir.Value, torch.dtype | None] = {}

    def looser(a: torch.dtype | None, b: torch.dtype | None) -> torch.dtype | None:
        if a is None or b is None:
            return a or b
        return a if tolerance(a)[0] >= tolerance(b)[0] else b

    for node in model.graph:  # in topological order
        upstream = None
        for value in node.inputs:
            if value is not None:
                upstream = looser(upstream, loosest.get(value))
        for value in node.outputs:
            loosest[value] = looser(upstream, _FLOATS.get(value.dtype) if value.dtype is not None else None)
    return {v.name: loosest[v] for v in model.graph.outputs if loosest.get(v) is not None}


class Checker:
    """Checks input sets one at a time against eager PyTorch and keeps, per output, the worst error.

    The first set checked (the example) starts the session and sets the unit that the cost of the
    others is predicted from; generated sets (``generated=True``) are skipped when the ``budget``
    cannot afford them or when eager PyTorch itself refuses them (a size the model cannot take).
    ``ahead`` holds the example's eager run started before capture (see ``ahead``), if one was.
    """

    def __init__(self, program: Any, model: torch.nn.Module, budget: Budget,
                 *, label: str = "onnxruntime vs eager PyTorch", ahead: EagerAhead | None = None):
        self.program = program
        self.ahead = ahead
        self.model = model
        self.budget = budget
        self.result = Verification(label, [], budget=budget.ratio, export_seconds=budget.export_seconds)
        program.report.verification = self.result
        self.eager_runs = 0
        self.reference: Any = None  # the example's eager outputs
        self.failing: tuple[list[torch.Tensor], Any] | None = None  # the first set onnxruntime failed on, expected
        self.mismatched: tuple[list[torch.Tensor], Any] | None = None  # the first set it computed wrong, expected
        self.mismatched_runs: list[tuple[list[torch.Tensor], Any, Any]] = []  # a few: inputs, expected, outputs
        self.mismatched_calls: list[tuple[tuple, dict[str, Any], Any, Any]] = []  # the same as args and kwargs
        self.session_seconds = 0.0  # building the onnxruntime session (in the child, while eager PyTorch runs)
        self.crash: Crashed | None = None  # what ended the session, if onnxruntime crashed
        self.failure = ""  # the first onnxruntime error (or crash) on a set, for the diagnosis
        self.lower_levels: dict[str, str] = {}  # after a failure at level all: the example at lower levels
        self._split = dict.fromkeys(("eager", "onnxruntime", "comparison"), 0.0)
        self._session: SessionProcess | None = None
        self._precisions: dict[str, torch.dtype] | None = None  # see computed_precisions
        self._quantized_steps: dict[str, float] | None = None  # see quantized_output_steps
        self._unit: tuple[float, float, int] | None = None  # eager s, onnxruntime s, input elements
        self._draws = plan(program.model)  # the random draws fed eager PyTorch's own (see draws), or None
        if self._draws:
            self.result.draws_fed = len(self._draws)

    @property
    def eager_seconds(self) -> float:
        """What one eager run of the example took (0 before the example ran)."""
        return self._unit[0] if self._unit else 0.0

    def predicted(self, flat: list[Any], *, eager: bool = True) -> float:
        """Seconds a set is expected to take: the example's, scaled by the number of input elements
        (onnxruntime's share alone without an ``eager`` run)."""
        if self._unit is None:
            return 0.0
        eager_s, ort_s, elements = self._unit
        return (eager_s * eager + ort_s) * _elements(flat) / max(elements, 1)

    def check(self, label: str, inputs: InputSet, *, generated: bool = False, required: bool = False,
              derived: Any = None) -> str:
        """Check one set: ``"checked"`` (it matches), ``"mismatch"`` (it does not: the result fails), or
        why it was not checked: ``"over budget"``, ``"refused"`` (eager PyTorch refuses a generated set),
        ``"unrunnable"`` (onnxruntime has no kernel for the model here) or ``"crashed"`` (onnxruntime
        crashed on an earlier set: nothing more can run). A ``required`` generated set (size 1) runs
        whatever the budget. ``derived`` outputs (the example's rows, see ``rows``) stand in for an eager run; should they
        not match, eager PyTorch runs and decides."""
        args, kwargs = inputs
        flat = self.program.flatten_inputs(args, kwargs)
        described = f"{label}: " + ", ".join(f"{n}={_describe(t)}" for n, t in zip(self.program.input_names, flat))
        if self.crash is not None:
            self.result.runs.append(f"{described} (not run: onnxruntime crashed on an earlier set)")
            return "crashed"
        predicted = self.predicted(flat, eager=derived is None)
        if generated and not required and not self.budget.allows(predicted):
            self.result.runs.append(f"{described} (skipped: over the time budget, about {predicted:.2f} s more)")
            self.result.over_budget.append(label)
            return "over budget"
        tensors = [torch.as_tensor(t) for t in flat]
        start = time.perf_counter()
        derived = None if self._draws else derived  # a set's draws are its own: eager PyTorch runs each
        taken = self._taken(args, kwargs) if derived is None and not self._draws else None
        drawn: list[torch.Tensor] = []
        try:
            expected = (derived if derived is not None else taken[0] if taken is not None
                        else self._eager(args, kwargs, drawn))
        except Exception as exc:  # noqa: BLE001 - the model's own error
            if not generated:
                raise _eager_fails(label, described, exc) from exc
            self.result.runs.append(f"{described} (skipped: eager PyTorch refuses it: {_first_line(exc)})")
            return "refused"
        formless = _no_onnx_form(self.program, expected) if generated else None
        if formless:  # e.g. a sliding-window cache past its window, which the ONNX model's outputs cannot hold
            self.result.runs.append(f"{described} (skipped: eager PyTorch's outputs there have no ONNX form: "
                                    f"{formless})")
            return "refused"
        eager_s = time.perf_counter() - start
        if self.reference is None:
            self.reference = self.result.reference = expected
        if self._session is None:
            # after eager PyTorch's first run, not beside it: on few cores the two slowed each other down
            # more than they overlapped (R3D-18: 1.2 s of verification against 1.0 s)
            self._start_session()
        if self._draws:
            unfed = mismatch(self._draws, drawn)
            if unfed:
                self.result.runs.append(f"{described} (differs from eager PyTorch: {unfed})")
                self.result.outputs = [OutputCheck(name, "", (), 0, 0, 0, 0, False, unfed)
                                       for name in self.program.output_names]
                return "mismatch"
            tensors += [d.to(_FLOATS.get(v.dtype, d.dtype)) for v, d in zip(self._draws, drawn, strict=True)]
        actual, ort_s = self._outputs(tensors)
        if isinstance(actual, Exception) and "NOT_IMPLEMENTED" in str(actual) and self._unit is None:
            # e.g. bfloat16 kernels missing on the CPU provider: valid ONNX, but unverifiable here
            self.result.skipped = "onnxruntime cannot run it here: " + str(actual).split(":")[-1].strip()
            return "unrunnable"
        if self._unit is None:  # (the child's run had a thread fewer: a cautious unit)
            self._unit = (taken[1] if taken is not None else eager_s, ort_s, _elements(flat))
        self._split["eager"] += eager_s
        self._split["onnxruntime"] += ort_s
        if isinstance(actual, Exception) and self.failing is None and derived is None:
            self.failing = (tensors, expected)
        checks = self._compare(described, expected, actual)
        if derived is None and not all(c.ok for c in checks):
            if self.mismatched is None:
                self.mismatched = (tensors, expected)
            if len(self.mismatched_runs) < _MISMATCHED_RUNS and not isinstance(actual, Exception):
                self.mismatched_runs.append((tensors, expected, actual))
                self.mismatched_calls.append((args, kwargs, expected, actual))
        if derived is not None and not all(c.ok for c in checks) and not isinstance(actual, Exception):
            start = time.perf_counter()
            expected = self._eager(args, kwargs)  # the rows were not what the model computes: eager decides
            self._split["eager"] += time.perf_counter() - start
            checks = self._compare(described, expected, actual)
        elif derived is not None:
            described += " (eager outputs: the example's, rows resized: the captured program keeps rows apart)"
        outputs = self.result.outputs
        self.result.outputs = checks if not outputs else [_worst(a, b) for a, b in zip(outputs, checks)]
        if all(c.ok for c in checks):
            self.result.runs.append(described)
            return "checked"
        worst = next(c for c in checks if not c.ok)
        self.result.runs.append(f"{described} (differs from eager PyTorch: {str(worst).strip()})")
        return "mismatch"

    def _random_outputs(self) -> list[str]:
        """The outputs compared by shape and dtype alone: none where the draws are fed."""
        return [] if self._draws else self.program.random_outputs

    def _random_sizes(self) -> dict[str, list[int]]:
        return {} if self._draws else self.program.random_sizes

    def _steps(self) -> dict[str, float]:
        if self._quantized_steps is None:
            self._quantized_steps = quantized_output_steps(self.program.model)
        return self._quantized_steps

    def _computed(self) -> dict[str, torch.dtype]:
        if self._precisions is None:
            self._precisions = computed_precisions(self.program.model)
        return self._precisions

    def _eager(self, args: tuple, kwargs: dict[str, Any], drawn: list[torch.Tensor] | None = None) -> Any:
        """Eager PyTorch's outputs; where the model's draws are fed, its draws appended to ``drawn``."""
        self.eager_runs += 1
        if not self._draws:
            return eager_outputs(self.model, args, kwargs)
        with Recording() as recording:
            outputs = eager_outputs(self.model, args, kwargs)
        if drawn is not None:
            drawn.extend(recording.draws)
        return outputs

    def _taken(self, args: tuple, kwargs: dict[str, Any]) -> tuple[Any, float] | None:
        """The eager outputs on these inputs from the run started ahead, and its seconds, if it stands."""
        taken = self.ahead.take(args, kwargs) if self.ahead is not None else None
        if taken is not None:
            self.eager_runs += 1
            self.result.eager_ahead = True
        return taken

    def _start_session(self) -> None:
        level = session_level(self.program.model)
        self.result.optimization = level
        self._session = SessionProcess(self.program.model, optimization=level, weights_as_inputs=level == "none",
                                       prepare=self._prepare())
        self.result.isolated = self._session.isolated
        if not self._session.isolated:
            self.result.in_process_because = no_fork_reason()

    def _outputs(self, tensors: list[torch.Tensor]) -> tuple[Any, float]:
        """The set's outputs in onnxruntime (or its exception) and the seconds onnxruntime ran it."""
        assert self._session is not None
        try:
            actual: Any = self._session.run(tensors)
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own exception types
            actual = exc
            self.failure = self.failure or _first_line(exc)
            if isinstance(exc, Crashed):
                self.crash = exc
        self.session_seconds = self._session.build_seconds
        return actual, self._session.run_seconds

    def _compare(self, described: str, expected: Any, actual: Any) -> list[OutputCheck]:
        start = time.perf_counter()
        names = self.program.output_names
        if isinstance(actual, Exception):
            what = "crashed" if isinstance(actual, Crashed) else "failed"
            problem = f"onnxruntime {what} on {described}: {_first_line(actual)}"
            checks = [OutputCheck(name, "", (), 0, 0, 0, 0, False, problem) for name in names]
        else:
            checks = compare(names, self.program.onnx_leaves(expected), actual, random=self._random_outputs(),
                             random_sizes=self._random_sizes(),
                             float64_as_float32=bool(self.program.float64_as_float32), computed=self._computed(),
                             steps=self._steps())
        self._split["comparison"] += time.perf_counter() - start
        return checks

    @property
    def onnxruntime_fault(self) -> bool:
        """Whether onnxruntime failed at its default level on a set that a lower level runs right."""
        return "matches" in self.lower_levels.values()

    def _diagnose_levels(self, failing: tuple[list[torch.Tensor], Any] | None) -> None:
        """After onnxruntime failed, crashed, or computed a quantized model wrong at its default level:
        whether the set it failed on runs and matches at the lower levels (in child processes of their own)."""
        if self.result.optimization != "all" or failing is None:
            return
        inputs, expected = failing
        for level in ("basic", "none"):
            session = SessionProcess(self.program.model, optimization=level, weights_as_inputs=level == "none",
                                     prepare=self._prepare(self._as_torch_computes()))
            try:
                actual = session.run(inputs)
            except Exception as exc:  # noqa: BLE001
                self.lower_levels[level] = f"fails too ({_first_line(exc)})"
                continue
            finally:
                session.close()
            checks = self._compare_basic(expected, actual)
            self.lower_levels[level] = "matches" if all(c.ok for c in checks) else "differs"
            if self.lower_levels[level] == "matches":
                break

    def _integer_rounding(self) -> None:
        """Accept a quantized model whose every difference is rounding: the outputs that differ have no bound
        from quantization steps (a scale computed at run time, a LayerNorm after the last quantized activation:
        ``quantized_output_steps`` holds the others to their steps), this CPU's kernels compute exact products
        (where they saturate, the difference is the model's weight range: it fails, with that fix), and on every
        set that differed, its QuantizeLinear/DequantizeLinear graph at level 'basic' (integer products written
        back as the float products of dequantized values, see ``float_products``) either matches eager PyTorch,
        or differs from it no more than onnxruntime differs from itself: at most ``_NOISE`` times the largest
        difference between its levels 'all' (integer kernels) and 'basic' (float arithmetic) on that set, in
        fewer than ``_NOISE`` times as many elements. Both are the same rounding: a value on a rounding boundary
        of a quantization lands a step away when the float arithmetic before it sums in another order; a wrong
        scale, zero point or layout moves the graph at both levels alike, away from eager. Where the two levels
        round alike (one summation order at both, another than torch's), the differences are held instead to
        ``_EFFECT_SHARE`` of what quantizing the activations moves the outputs (eager PyTorch with float
        activations, ``activation_quantization_effect``): the error the user accepted in quantizing, which a wrong
        scale exceeds. The report states it."""
        if not self.mismatched_runs or saturating_integer_products():
            return
        bounded = self._steps()
        differing = [c for c in self.result.outputs if not c.ok]
        if not differing or any(c.name in bounded or "out of tolerance" not in c.problem for c in differing):
            return
        names = self.program.output_names
        exact, noisy, within = 0, [], []
        session = SessionProcess(self.program.model, optimization="basic",
                                 prepare=self._prepare(self._as_torch_computes()))
        try:
            for (inputs, expected, actual), (args, kwargs, _, _) in zip(self.mismatched_runs, self.mismatched_calls):
                basic = session.run(inputs)
                checks = self._compare_basic(expected, basic)
                if all(c.ok for c in checks):
                    exact += 1
                    continue
                unquantized = None
                for check in checks:
                    if check.ok:
                        continue
                    i = names.index(check.name)
                    noise = _spread(actual[i], basic[i], check)
                    eager = torch.as_tensor(self.program.onnx_leaves(expected)[i])
                    off = _spread(basic[i], eager, check)
                    if noise[0] > 0 and off[0] <= _NOISE * noise[0] and off[1] <= _NOISE * max(noise[1], 1):
                        noisy.append((check.name, off[0], noise[0]))
                        continue
                    # onnxruntime's levels may round alike (one summation order at both), away from torch's: the
                    # difference is then judged against what quantizing the activations moves the output
                    if unquantized is None:
                        unquantized = activation_quantization_effect(self.model, args, kwargs)
                        if unquantized is None:
                            return
                        unquantized = self.program.onnx_leaves(unquantized)
                    effect = _spread(eager, unquantized[i], check)[0]
                    worst = max(off[0], _spread(actual[i], eager, check)[0])
                    if effect == 0 or worst > _EFFECT_SHARE * effect:
                        return
                    within.append((check.name, worst, effect))
        except Exception:  # noqa: BLE001 - onnxruntime's own failure at 'basic': no acceptance
            return
        finally:
            session.close()
        sets = len(self.mismatched_runs)
        how = (f"its Q/DQ graph matches eager PyTorch at level 'basic' on the {sets} differing set{'s' * (sets > 1)}"
               if not noisy and not within else
               "its Q/DQ graph at level 'basic' differs from eager PyTorch no more than onnxruntime's levels "
               "'all' and 'basic' differ from each other (" + ", ".join(
                   f"{name}: {off:.3g} against {noise:.3g}" for name, off, noise in noisy[:3]) + ")"
               if not within else
               f"it differs from eager PyTorch by at most {100 * _EFFECT_SHARE:.0f}% of what quantizing the "
               "activations moves the model's outputs (" + ", ".join(
                   f"{name}: {off:.3g} against {effect:.3g}" for name, (off, effect) in _largest(within)) + ")")
        for check in differing:
            check.ok, check.problem = True, ""
            check.note = "within the rounding of its quantized activations"
        self.result.integer_rounding = (
            "quantized outputs without a bound from quantization steps ("
            + ", ".join(f"{c.name} max_abs={c.max_abs:.3g}" for c in differing)
            + "): integer kernels and float arithmetic round requantized activations each their own way; " + how)

    def _prepare(self, then: Callable[[ir.Model], Any] | None = None) -> Callable[[ir.Model], Any] | None:
        """A session's ``prepare``: the draws made inputs (where they are fed), then ``then``."""
        if not self._draws:
            return then
        feed = feed_draws([v.name for v in self._draws])

        def prepare(model: ir.Model) -> None:
            feed(model)
            if then is not None:
                then(model)

        return prepare

    def _as_torch_computes(self) -> Callable[[ir.Model], int] | None:
        """For a quantized model checked at a lower level: its integer products written back as the float
        products of dequantized values that eager PyTorch computes (see ``float_products``)."""
        return float_products if integer_kernels(self.program.model) else None

    def _compare_basic(self, expected: Any, actual: Any) -> list[OutputCheck]:
        return compare(self.program.output_names, self.program.onnx_leaves(expected), actual,
                       random=self._random_outputs(), random_sizes=self._random_sizes(),
                       float64_as_float32=bool(self.program.float64_as_float32), computed=self._computed(),
                       steps=self._steps())

    def finish(self, *, raise_on_mismatch: bool = True) -> Verification:
        """Close the result: its time, and a warning, or ``VerificationError``, when it failed."""
        result, report = self.result, self.program.report
        self.close()
        if self.failure and not result.ok:
            self._diagnose_levels(self.failing)
        elif not result.ok and not result.skipped and integer_kernels(self.program.model):
            self._diagnose_levels(self.mismatched)
            self._integer_rounding()
        elif not result.ok and not result.skipped and not self.failure and not self._draws:
            result.float_rounding = float_rounding(self.model, self.program.output_names, self.program.onnx_leaves,
                                                   self.mismatched_calls, [o for o in result.outputs if not o.ok])
        result.seconds = self.budget.seconds
        result.time_split = {"session": self.session_seconds, **self._split}
        result.budget_seconds = self.budget.limit
        if result.skipped:
            warnings.warn(f"onnxport: verification {result.status}", stacklevel=4)
            report.warn(f"not verified: {result.skipped}")
        elif not result.ok:
            if raise_on_mismatch:
                raise VerificationError(
                    "the ONNX model does not match eager PyTorch:\n" + str(result),
                    verification=result,
                    fix=self._fix(),
                )
            warnings.warn(f"onnxport: the ONNX model does not match eager PyTorch\n{result}", stacklevel=4)
            report.warn("verification failed: " + "; ".join(o.name for o in result.outputs if not o.ok))
        return result

    def close(self) -> None:
        """End the session: the child process and its copy of the weights end with verification."""
        if self.ahead is not None:
            self.ahead.close()
        if self._session is not None:
            self._session.close()

    def _fix(self) -> str:
        keep = "pass verify_mode='warn' to keep the model anyway"
        if not self.failure and self.lower_levels.get("basic") == "matches" and saturating_integer_products():
            return ("the model's int8 arithmetic is right (onnxruntime computes it at level 'basic'), but the "
                    "integer kernels onnxruntime fuses it into at its default level add each pair of uint8 x int8 "
                    "products in int16 on this CPU (x86 with AVX2 and no VNNI), which weights' codes beyond 64 "
                    "overflow: quantize the weights to [-64, 64] (a PT2E quantizer's weight quant_min/quant_max; "
                    f"onnxport's own int8 quantization does so by default), or {keep} and run it with "
                    "SessionOptions.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_BASIC")
        if not self.failure and not self.onnxruntime_fault:
            return f"{keep}, and report the model to onnxport"
        import onnxruntime

        what = "crashes" if self.crash is not None else "fails on" if self.failure else "computes wrong"
        release = f"onnxruntime {onnxruntime.__version__}"
        fine = next((level for level, outcome in self.lower_levels.items() if outcome == "matches"), None)
        if fine is not None:
            constant = {"basic": "ORT_ENABLE_BASIC", "none": "ORT_DISABLE_ALL"}[fine]
            return (f"{release} {what} this model at its default graph optimisation level ('all') and runs it right "
                    f"at level {fine!r}: a fault in onnxruntime's graph optimisations, which every user's session "
                    f"meets; report the model to onnxport (which can avoid the form that triggers it), or {keep} "
                    f"and run it with SessionOptions.graph_optimization_level = GraphOptimizationLevel.{constant}")
        return f"{release} {what} this model at every optimisation level; {keep}, and report the model to onnxport"


def _largest(found: list[tuple[str, float, float]]) -> list[tuple[str, tuple[float, float]]]:
    """Per output name, the largest difference of the sets with the smallest effect it was held to (first three)."""
    by_name: dict[str, tuple[float, float]] = {}
    for name, off, effect in found:
        seen = by_name.get(name, (0.0, effect))
        by_name[name] = (max(seen[0], off), min(seen[1], effect))
    return list(by_name.items())[:3]


def _spread(a: Any, b: Any, check: OutputCheck) -> tuple[float, int]:
    """The largest absolute difference of ``a`` and ``b`` and how many elements differ beyond ``check``'s
    tolerance."""
    a, b = torch.as_tensor(a).double(), torch.as_tensor(b).double()
    diff = (a - b).abs()
    beyond = diff > check.atol + check.rtol * b.abs()
    return float(diff.max()) if diff.numel() else 0.0, int(beyond.sum())


def _elements(flat: list[Any]) -> int:
    return sum(t.numel() for t in flat if isinstance(t, torch.Tensor))


def _eager_fails(label: str, described: str, exc: BaseException) -> InvalidInputError:
    """Eager PyTorch failing on the user's own inputs: inputs the model does not take."""
    where = "the example" if label == "example" else label
    return InvalidInputError(
        f"eager PyTorch fails on {where} ({described.partition(': ')[2]}): {_first_line(exc)}",
        fix="pass inputs the model runs on as they are (dtypes and shapes it takes: call model(*args, **kwargs) "
        "to see the failure in your code)" + ("" if label == "example" else "; or leave that set out of verify_inputs"),
    )


def _no_onnx_form(program: Any, outputs: Any) -> str | None:
    """Why eager PyTorch's ``outputs`` have no form among the ONNX model's outputs (onnxport's own refusal
    to flatten them), or None when they have one."""
    try:
        program.onnx_leaves(outputs)
    except OnnxportError as exc:
        return _first_line(exc)
    return None


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:240]


def _worst(a: OutputCheck, b: OutputCheck) -> OutputCheck:
    if not b.ok and a.ok:
        return b
    if not a.ok:
        return a
    return b if b.max_abs > a.max_abs else a


def _describe(t: Any) -> str:
    if isinstance(t, torch.Tensor):
        return f"{str(t.dtype).replace('torch.', '')}{list(t.shape)}"
    return repr(t)
