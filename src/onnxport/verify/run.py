"""Checking input sets: eager PyTorch once per set, all sets through one onnxruntime session.

The session is built for verification alone (``prog(...)`` builds its own, fully optimised one when
first called). It skips onnxruntime's graph optimisations unless the graph computes on its weights
(a weight transposed before a MatMul, say), where constant folding saves redoing that work on every
run; the extended fusions, layout changes, weight prepacking and spinning worker threads, which pay
off over many runs and not over a few, are never applied (on ViT-B/16, onnxruntime's default level
with prepacking took 0.5 s longer to load and saved less than that over two runs), and without graph
optimisation the weights are fed as inputs, which onnxruntime does not copy (see ``session``). Should
onnxruntime fail at that level, the set is run again at its default level, so the choice can never
turn into a false alarm.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from typing import Any

import onnx_ir as ir
import torch
from torch.utils import _pytree as pytree

from onnxport.errors import VerificationError
from onnxport.verify.budget import Budget
from onnxport.verify.compare import OutputCheck, Verification, compare
from onnxport.verify.session import OrtRunner

__all__ = ["Checker", "eager_outputs", "verification_optimization"]

InputSet = tuple[tuple, dict[str, Any]]

_FOLD_MIN_BYTES = 64 * 1024  # a constant computation worth folding once rather than redoing per run


def eager_outputs(model: torch.nn.Module, args: tuple, kwargs: dict[str, Any]) -> Any:
    """Run the model eagerly on copies of the inputs (a model may modify its inputs in place)."""
    args_c, kwargs_c = pytree.tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, (args, kwargs))
    with torch.no_grad():
        return model(*args_c, **kwargs_c)


def verification_optimization(model: ir.Model) -> str:
    """``"basic"`` (constant folding) when a node of the main graph computes only on constants of which
    one is large, else ``"none"``."""
    for node in model.graph:
        if node.op_type == "Constant" or not node.inputs:
            continue
        inputs = [v for v in node.inputs if v is not None]
        if inputs and all(_is_constant(v) for v in inputs) and any(_nbytes(v) >= _FOLD_MIN_BYTES for v in inputs):
            return "basic"
    return "none"


def _is_constant(value: ir.Value) -> bool:
    producer = value.producer()
    return value.is_initializer() or (producer is not None and producer.op_type == "Constant")


def _nbytes(value: ir.Value) -> int:
    if value.const_value is not None:
        return value.const_value.nbytes
    producer = value.producer()
    attr = producer.attributes.get("value") if producer is not None else None
    return attr.value.nbytes if attr is not None and hasattr(attr.value, "nbytes") else 0


class Checker:
    """Checks input sets one at a time against eager PyTorch and keeps, per output, the worst error.

    The first set checked (the example) builds the session and sets the unit that the cost of the
    others is predicted from; generated sets (``generated=True``) are skipped when the ``budget``
    cannot afford them or when eager PyTorch itself refuses them (a size the model cannot take).
    """

    def __init__(self, program: Any, model: torch.nn.Module, budget: Budget,
                 *, label: str = "onnxruntime vs eager PyTorch"):
        self.program = program
        self.model = model
        self.budget = budget
        self.result = Verification(label, [], budget=budget.ratio, export_seconds=budget.export_seconds)
        program.report.verification = self.result
        self.eager_runs = 0
        self.difference = ""  # the worst output of the last tentative set that did not match
        self.reference: Any = None  # the example's eager outputs
        self.session_seconds = 0.0  # building the onnxruntime session (not part of any one set's cost)
        self._split = dict.fromkeys(("eager", "onnxruntime", "comparison"), 0.0)
        self._runner: OrtRunner | None = None
        self._unit: tuple[float, float, int] | None = None  # eager s, onnxruntime s, input elements

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

    def check(self, label: str, inputs: InputSet, *, generated: bool = False, tentative: bool = False,
              derived: Any = None) -> str:
        """Check one set: ``"checked"``, or why not: ``"over budget"``, ``"refused"`` (eager PyTorch
        refuses a generated set) or ``"unrunnable"`` (onnxruntime has no kernel for the model here).
        A ``tentative`` set (a size outside what torch.export guarantees) that does not match is
        ``"differs"``: listed with its worst output, kept out of the result. ``derived`` outputs (the
        example's rows, see ``rows``) stand in for an eager run; should they not match, eager PyTorch
        runs and decides."""
        args, kwargs = inputs
        flat = self.program.flatten_inputs(args, kwargs)
        described = f"{label}: " + ", ".join(f"{n}={_describe(t)}" for n, t in zip(self.program.input_names, flat))
        predicted = self.predicted(flat, eager=derived is None)
        if generated and not self.budget.allows(predicted):
            self.result.runs.append(f"{described} (skipped: over the time budget, about {predicted:.2f} s more)")
            self.result.over_budget.append(label)
            return "over budget"
        if self._runner is None:
            # before eager PyTorch runs: its idle threads keep spinning for a while after it and slow down
            # onnxruntime's load (on ViT-B/16, 1.4 s instead of 0.4 s); a failure is met again in _run
            with contextlib.suppress(Exception):
                self._build(verification_optimization(self.program.model))
        start = time.perf_counter()
        try:
            if derived is None:
                self.eager_runs += 1
            expected = derived if derived is not None else eager_outputs(self.model, args, kwargs)
        except Exception as exc:  # noqa: BLE001 - the model's own error on a made-up input
            if not generated:
                raise
            self.result.runs.append(f"{described} (skipped: eager PyTorch refuses it: {_first_line(exc)})")
            return "refused"
        if self.reference is None:
            self.reference = expected
        eager_s = time.perf_counter() - start
        start, session_s = time.perf_counter(), self.session_seconds
        try:
            actual = self._run(flat)
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own exception types
            if "NOT_IMPLEMENTED" in str(exc) and self._unit is None:
                # e.g. bfloat16 kernels missing on the CPU provider: valid ONNX, but unverifiable here
                self.result.skipped = "onnxruntime cannot run it here: " + str(exc).split(":")[-1].strip()
                return "unrunnable"
            actual = exc
        ort_s = time.perf_counter() - start - (self.session_seconds - session_s)
        if self._unit is None:
            self._unit = (eager_s, ort_s, _elements(flat))
        self._split["eager"] += eager_s
        self._split["onnxruntime"] += ort_s
        start = time.perf_counter()
        names = self.program.output_names
        if isinstance(actual, Exception):
            problem = f"onnxruntime failed on {described}: {_first_line(actual)}"
            checks = [OutputCheck(name, "", (), 0, 0, 0, 0, False, problem) for name in names]
        else:
            checks = compare(names, self.program.onnx_leaves(expected), actual, random=self.program.random_outputs,
                             float64_as_float32=bool(self.program.float64_as_float32))
        self._split["comparison"] += time.perf_counter() - start
        if derived is not None:
            if not all(c.ok for c in checks):
                return self.check(label, inputs, generated=generated, tentative=tentative)
            described += " (eager outputs: the example's, rows resized: the captured program keeps rows apart)"
        if tentative and not all(c.ok for c in checks):
            worst = next(c for c in checks if not c.ok)
            self.difference = f"{worst.name}: {worst.problem}"
            self.result.runs.append(f"{described} (differs from eager PyTorch: {self.difference})")
            return "differs"
        outputs = self.result.outputs
        self.result.outputs = checks if not outputs else [_worst(a, b) for a, b in zip(outputs, checks)]
        self.result.runs.append(described)
        return "checked"

    def _run(self, flat: list[Any]) -> list[torch.Tensor]:
        tensors = [torch.as_tensor(t) for t in flat]
        try:
            if self._runner is None:
                self._build(verification_optimization(self.program.model))
            return self._runner.run(tensors)
        except Exception:
            if self.result.optimization == "all":
                raise
        # onnxruntime's own default level decides whether this is the model's fault
        self._build("all")
        return self._runner.run(tensors)

    def _build(self, optimization: str) -> None:
        start = time.perf_counter()
        self.result.optimization = optimization
        try:
            self._runner = OrtRunner(self.program.model, optimization=optimization, prepack=optimization == "all",
                                     spinning=False, weights_as_inputs=optimization == "none")
        finally:
            self.session_seconds += time.perf_counter() - start

    def finish(self, *, raise_on_mismatch: bool = True) -> Verification:
        """Close the result: its time, and a warning, or ``VerificationError``, when it failed."""
        result, report = self.result, self.program.report
        self._runner = None  # the session and its hold on the weights end with verification
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
                    fix="pass verify_mode='warn' to keep the model anyway, and report the model to onnxport",
                )
            warnings.warn(f"onnxport: the ONNX model does not match eager PyTorch\n{result}", stacklevel=4)
            report.warn("verification failed: " + "; ".join(o.name for o in result.outputs if not o.ok))
        return result


def _elements(flat: list[Any]) -> int:
    return sum(t.numel() for t in flat if isinstance(t, torch.Tensor))


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
