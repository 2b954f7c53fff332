"""Compare onnxruntime outputs with eager PyTorch outputs, with tolerances per dtype."""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import torch

__all__ = ["OutputCheck", "Verification", "compare", "tolerance"]

_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-6),
    torch.float32: (1e-4, 1e-3),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (5e-2, 5e-2),
}


# The absolute tolerance of a float32 (float64) output is at least this many units in the last place of its
# largest value.
SCALE_ULPS = 64


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """(atol, rtol) for ``dtype``: exact for integers and booleans."""
    return _TOLERANCES.get(dtype, (0.0, 0.0))


@dataclasses.dataclass
class OutputCheck:
    """One output compared: its worst absolute and relative error and the tolerance it was held to."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    max_abs: float
    max_rel: float
    atol: float
    rtol: float
    ok: bool
    problem: str = ""
    random: bool = False  # fed by random ops: only its shape and dtype were compared
    note: str = ""  # how an output beyond its tolerance was judged right (Checker._integer_rounding, rounding)

    def __str__(self) -> str:
        status = ("ok" + (f" ({self.note})" if self.note else "")) if self.ok else f"MISMATCH {self.problem}".rstrip()
        if self.random:
            head = f"  {self.name}: {self.dtype}{list(self.shape)}"
            return f"{head} depends on random ops: shape and dtype only, {status}"
        return (
            f"  {self.name}: {self.dtype}{list(self.shape)} max_abs={self.max_abs:.3g} max_rel={self.max_rel:.3g} "
            f"(atol={self.atol:g}, rtol={self.rtol:g}) {status}"
        )


@dataclasses.dataclass
class Verification:
    """The result of running the ONNX model against eager PyTorch on one or more input sets.

    ``runs`` lists every input set, checked or skipped (and why); ``over_budget`` the made-up sets left
    out for the time budget; ``seconds`` what verification took and ``export_seconds`` the export before
    it; ``budget`` the ratio the made-up sets ran under (None for none) and ``budget_seconds`` what it
    gave them; ``time_split`` where the time went (session, eager, onnxruntime, comparison);
    ``optimization`` the onnxruntime graph optimisation level of the one session all sets ran in, and
    ``isolated`` whether it ran in a child process; ``eager_ahead`` whether the example's eager outputs
    came from the run started beside the capture, in a child process (see ``ahead``).
    """

    label: str
    outputs: list[OutputCheck]
    runs: list[str] = dataclasses.field(default_factory=list)
    skipped: str = ""  # why onnxruntime could not run the model at all, if it could not
    branches: object = None  # BranchCoverage of the rewritten ifs, when there are any
    over_budget: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    export_seconds: float = 0.0
    budget: float | None = None
    budget_seconds: float | None = None
    optimization: str = ""
    isolated: bool = False  # the session ran in a child process
    in_process_because: str | None = None  # why it ran in this process instead, where it could not be isolated
    eager_ahead: bool = False  # the example's eager run was beside the capture, in a child process
    time_split: dict[str, float] = dataclasses.field(default_factory=dict)
    reference: Any = dataclasses.field(default=None, repr=False, compare=False)  # the example's eager outputs
    integer_rounding: str = ""  # quantized outputs judged by onnxruntime's level 'basic' (see Checker)
    float_rounding: str = ""  # float32 outputs judged by eager PyTorch in float64 (see rounding)
    draws_fed: int = 0  # the random draws of the model fed eager PyTorch's own on each set (see draws)

    @property
    def ok(self) -> bool:
        return not self.skipped and all(o.ok for o in self.outputs)

    @property
    def status(self) -> str:
        return f"skipped: {self.skipped}" if self.skipped else ("passed" if self.ok else "FAILED")

    @property
    def cost(self) -> str:
        """``took 2.31 s, 1.52x the export before it (session 0.10 s, eager 1.20 s, ...); one session at
        onnxruntime optimisation level 'all' (onnxruntime's default) in a child process; made-up input sets: up to 2x the export so far (6.1 s)``."""
        ratio = f"{self.seconds / self.export_seconds:.2f}x" if self.export_seconds > 0 else "n/a"
        split = ", ".join(f"{k} {v:.2f} s" for k, v in self.time_split.items())
        level = f" at onnxruntime optimisation level {self.optimization!r}" if self.optimization else ""
        if self.optimization == "all":
            level += " (onnxruntime's default)"
        if self.isolated:
            level += " in a child process"
        elif self.in_process_because:
            level += f" in this process ({self.in_process_because})"
        if self.budget is None:
            budget = "no time budget"
        else:
            given = f" ({self.budget_seconds:.2f} s)" if self.budget_seconds is not None else ""
            budget = f"up to {self.budget:g}x the export so far{given}"
        ahead = "; the example's eager run beside the capture, in a child process" if self.eager_ahead else ""
        return (f"took {self.seconds:.2f} s, {ratio} the export before it ({split}); one session{level}{ahead}; "
                f"made-up input sets: {budget}")

    def __str__(self) -> str:
        head = f"verification ({self.label}): {self.status}"
        cost = [f"  {self.cost}"] if self.seconds else []
        runs = [f"  inputs: {r}" for r in self.runs]
        branches = [textwrap.indent(str(self.branches), "  ")] if self.branches is not None else []
        rounding = [f"  {note}" for note in (self.integer_rounding, self.float_rounding) if note]
        fed = self.draws_fed
        draws = [f"  random draws: the model's {fed} (randn, rand) fed eager PyTorch's own on each set, outputs "
                 "compared value for value; the file draws its own"] if fed else []
        return "\n".join([head, *cost, *draws, *runs, *(str(o) for o in self.outputs), *rounding, *branches])


def compare(
    names: Sequence[str],
    expected: Sequence[torch.Tensor | int | float | bool],
    actual: Sequence[torch.Tensor],
    *,
    random: Collection[str] = (),
    random_sizes: Mapping[str, Collection[int]] | None = None,
    float64_as_float32: bool = False,
    computed: Mapping[str, torch.dtype] | None = None,
    steps: Mapping[str, float] | None = None,
) -> list[OutputCheck]:
    """Compare output by output. A Python number expected (a symbolic size the model returns) is compared
    with a 0-d output; for the outputs named in ``random`` only the shape and dtype are compared, and of the
shape not the axes ``random_sizes`` names (sizes drawn at random). With
    ``float64_as_float32`` (the model computes some float64 nodes in float32) float64 outputs are held to
    float32's tolerances. ``computed`` gives, per output, the least precise float dtype it is computed
    through (a bfloat16 softmax cast up to float32): a float output is held to that dtype's tolerance
    where it is looser than its own. ``steps`` gives, per output, an absolute error it may have on top
    (a quantized output's, see ``onnxport.verify.integer.quantized_output_steps``)."""
    checks = []
    for name, exp, act in zip(names, expected, actual):
        through = (computed or {}).get(name)
        checks.append(_compare_one(name, exp, act, random=name in random, float64_as_float32=float64_as_float32,
                                   through=through, free_axes=(random_sizes or {}).get(name, ()),
                                   step=(steps or {}).get(name, 0.0)))
    if len(expected) != len(actual):
        checks.append(OutputCheck("<count>", "", (), 0, 0, 0, 0, False, f"{len(expected)} expected, {len(actual)} produced"))
    return checks


def _compare_one(name: str, exp: torch.Tensor | float, act: torch.Tensor, *, random: bool = False,
                 float64_as_float32: bool = False, through: torch.dtype | None = None,
                 free_axes: Collection[int] = (), step: float = 0.0) -> OutputCheck:
    exp = torch.as_tensor(exp).detach().cpu()
    act = torch.as_tensor(act).detach().cpu()
    narrowed = float64_as_float32 and exp.dtype == torch.float64
    atol, rtol = tolerance(torch.float32 if narrowed else exp.dtype)
    if through is not None and exp.is_floating_point():
        atol, rtol = max(atol, tolerance(through)[0]), max(rtol, tolerance(through)[1])
    if exp.is_floating_point():
        atol = max(atol, step)
    dtype = str(exp.dtype).replace("torch.", "")
    check = OutputCheck(name, dtype, tuple(exp.shape), 0.0, 0.0, atol, rtol, True, random=random)
    def kept(shape: Sequence[int]) -> list[int | None]:
        return [None if random and i in free_axes else n for i, n in enumerate(shape)]

    if exp.dim() != act.dim() or kept(exp.shape) != kept(act.shape):
        check.ok, check.problem = False, f"shape {list(act.shape)} != {list(exp.shape)}"
        return check
    if act.dtype != exp.dtype:
        check.ok, check.problem = False, f"dtype {act.dtype} != {exp.dtype}"
        return check
    if exp.numel() == 0 or random:
        return check
    e, a = exp.double(), act.double()
    diff = (e - a).abs()
    magnitude = e.abs()
    if not bool(torch.isfinite(diff).all()):
        # NaN or inf somewhere: NaN against NaN and an inf against the same inf agree; anything else
        # against a NaN or an inf is off by inf (an inf expected gives no relative slack)
        agree = (torch.isnan(e) & torch.isnan(a)) | (torch.isinf(e) & (e == a))
        inf = float("inf")
        diff = torch.nan_to_num(torch.where(agree, torch.zeros_like(e), diff), nan=inf, posinf=inf)
        magnitude = torch.where(torch.isfinite(e), magnitude, torch.zeros_like(e))
    if through in (None, torch.float32, torch.float64) and exp.dtype in (torch.float32, torch.float64):
        # Float arithmetic knows a result only to a few units in the last place of the largest values it was
        # summed from: an output whose values are large (random weights drawn wide, unnormalised heads) has
        # absolute rounding errors to match, which its small elements show as large relative ones.
        finite = e[torch.isfinite(e)]
        if finite.numel():
            eps = torch.finfo(torch.float32 if narrowed else exp.dtype).eps
            check.atol = atol = max(atol, SCALE_ULPS * eps * float(finite.abs().max()))
    check.max_abs = float(diff.max())
    check.max_rel = float((diff / magnitude.clamp_min(1e-12)).max())
    bad = diff > atol + rtol * magnitude
    if bool(bad.any()):
        check.ok = False
        check.problem = f"{int(bad.sum())} of {exp.numel()} elements out of tolerance"
    return check
