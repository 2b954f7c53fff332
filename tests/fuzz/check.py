"""Check one random program: export it with onnxport, then run the saved file in onnxruntime at its
default settings and compare with eager PyTorch.

Outcomes:

* ``matched``: the export succeeded, and the file, in a plain ``onnxruntime.InferenceSession(path)``
  (CPU provider, default options: graph optimisation level ``ORT_ENABLE_ALL``), matches eager PyTorch at
  the example and, for a dynamic program, at batch sizes 1, 2, 3 and 5 (the example's rows repeated or
  cut; a size eager PyTorch itself refuses is skipped), within the tolerance of
  ``onnxport.verify.compare.tolerance`` for the loosest floating dtype the program computes in.
* ``refused``: ``onnxport.export`` raised an ``OnnxportError``.
* ``failed``: anything else: another exception from ``export``, a file onnxruntime refuses, crashes
  on or errs on, an output out of tolerance, a dynamic batch exported static.

onnxruntime runs in a worker process (``tests.fuzz.ortworker``), one for many programs: a crash costs
the worker, names the program and the step (session build, or the input set), and the next program
gets a new worker.

    python -m tests.fuzz.check --seed 17          # the program, its export report and its outcome
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import warnings

import torch

import onnxport
from onnxport.verify.compare import tolerance
from tests.fuzz import ortworker
from tests.fuzz.programs import Program, make_program

__all__ = ["Checker", "Outcome", "SIZES", "check_seeds"]

SIZES = (1, 2, 3, 5)  # the batch sizes a dynamic program is run at, besides its example
JOB_TIMEOUT = 120.0  # seconds one program may take in onnxruntime before it counts as a hang
_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclasses.dataclass
class Outcome:
    """What happened to one program. ``cause`` is a short key to group failures (and refusals) by;
    ``detail`` says everything else."""

    seed: int
    status: str  # "matched", "refused", "failed"
    cause: str = ""
    detail: str = ""
    description: str = ""
    sizes: tuple[int, ...] = ()  # the batch sizes compared in onnxruntime
    export_s: float = 0.0
    eager_s: float = 0.0
    ort_s: float = 0.0

    @property
    def line(self) -> str:
        head = f"seed {self.seed}: {self.status}"
        if self.cause:
            head += f" [{self.cause}]"
        return f"{head}\n    program: {self.description}" + (f"\n    {self.detail}" if self.detail else "")


@dataclasses.dataclass
class _Job:
    program: Program
    path: str
    sets: list[tuple[str, int, dict]]  # label, batch size, feeds (name -> (array, bfloat16))
    expected: list[list[torch.Tensor]]
    skipped: list[str]
    warnings: list[str]


def _feeds(names: tuple[str, ...], args: tuple[torch.Tensor, ...]) -> dict:
    feeds = {}
    for name, t in zip(names, args):
        t = t.detach().contiguous()
        feeds[name] = (t.view(torch.uint16).numpy(), True) if t.dtype == torch.bfloat16 else (t.numpy(), False)
    return feeds


def _tensor(array: object, bf16: bool) -> torch.Tensor:
    t = torch.from_numpy(array.copy()) if hasattr(array, "copy") else torch.tensor(array)
    return t.view(torch.bfloat16) if bf16 else t


def _leaves(out: object) -> list:
    """The outputs as onnxport flattens them: tensors and numbers, no None."""
    return [t for t in torch.utils._pytree.tree_leaves(out) if t is not None]


def _compare(exp: object, act: torch.Tensor, atol: float, rtol: float) -> str:
    """'' when ``act`` matches ``exp``, else what differs (NaN agrees with NaN, an inf with the same inf)."""
    exp = torch.as_tensor(exp)
    if tuple(exp.shape) != tuple(act.shape):
        return f"shape {list(act.shape)} != {list(exp.shape)}"
    if exp.dtype != act.dtype:
        return f"dtype {act.dtype} != {exp.dtype}"
    if exp.numel() == 0:
        return ""
    e, a = exp.double(), act.double()
    diff = (e - a).abs()
    magnitude = e.abs()
    agree = (torch.isnan(e) & torch.isnan(a)) | (torch.isinf(e) & (e == a))
    diff = torch.where(agree, torch.zeros_like(diff), torch.nan_to_num(diff, nan=math.inf, posinf=math.inf))
    magnitude = torch.where(torch.isfinite(e), magnitude, torch.zeros_like(e))
    bad = diff > atol + rtol * magnitude
    if not bool(bad.any()):
        return ""
    return (f"{int(bad.sum())} of {exp.numel()} elements out of tolerance, max_abs={float(diff.max()):.3g} "
            f"(atol={atol:g}, rtol={rtol:g})")


def _tolerance(program: Program, dtype: torch.dtype) -> tuple[float, float]:
    pairs = [tolerance(dtype)] + [tolerance(d) for d in program.float_dtypes] if dtype.is_floating_point else [
        tolerance(dtype)]
    return max(p[0] for p in pairs), max(p[1] for p in pairs)


def _short(e: BaseException, limit: int = 300) -> str:
    text = f"{type(e).__name__}: {e}".strip().replace("\n", " | ")
    return text if len(text) <= limit else text[:limit] + " ..."


def _dim_range(model: object, input_name: str) -> tuple[int, float] | None:
    """The declared range of the input's dim 0, from the model's metadata; None when it is static."""
    for value in model.graph.inputs:
        if value.name != input_name:
            continue
        dim = value.shape[0] if value.shape is not None and len(value.shape) else None
        if isinstance(dim, int):
            return None
        ranges = json.loads(model.metadata_props.get("onnxport.dim_ranges", "{}"))
        low, high = ranges.get(str(dim), [0, None])
        return int(low or 0), (math.inf if high is None else int(high))
    return (0, math.inf)


class Checker:
    """Checks programs one after another, with one onnxruntime worker process kept between them."""

    def __init__(self, workdir: str | None = None, **export_options: object):
        self.export_options = export_options  # e.g. verify=False, to tell a justified refusal from a spurious one
        self._tmp = tempfile.TemporaryDirectory(prefix="onnxport-fuzz-") if workdir is None else None
        self.workdir = workdir or self._tmp.name
        self._proc: subprocess.Popen | None = None
        self._stderr = None
        self._stderr_mark = 0
        self.workers_started = 0

    # -- the worker --------------------------------------------------------------------------------

    def _start(self) -> None:
        self._stderr = tempfile.TemporaryFile(dir=self.workdir)
        env = dict(os.environ)
        env["PYTHONPATH"] = _REPO + os.pathsep + env.get("PYTHONPATH", "")
        self._proc = subprocess.Popen([sys.executable, "-m", "tests.fuzz.ortworker"], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=self._stderr, cwd=_REPO, env=env)
        self.workers_started += 1
        kind, *_ = self._recv(60.0)
        if kind != "ready":
            raise RuntimeError(f"the onnxruntime worker did not start: {kind}")

    def _recv(self, timeout: float) -> tuple:
        fd = self._proc.stdout.fileno()
        ready, _, _ = select.select([fd], [], [], timeout)
        if not ready:
            raise TimeoutError
        return ortworker.read_frame(fd)

    def _send(self, obj: object) -> None:
        ortworker.write_frame(self._proc.stdin.fileno(), obj)

    def _dead(self) -> str:
        """Reap the dead worker; what killed it and the end of what it wrote to stderr for this job."""
        code = self._proc.wait()
        self._stderr.seek(self._stderr_mark)
        err = self._stderr.read().decode(errors="replace").strip().splitlines()
        self._stderr.close()
        self._proc = None
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
        return how + (f"; stderr: {' | '.join(err[-3:])[:400]}" if err else "")

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._stderr.close()
            self._proc = None

    def close(self) -> None:
        if self._proc is not None:
            try:
                self._send(None)
                self._proc.stdin.close()
                self._proc.wait(timeout=10)
            except Exception:  # noqa: BLE001
                self._proc.kill()
                self._proc.wait()
            self._stderr.close()
            self._proc = None
        if self._tmp is not None:
            self._tmp.cleanup()

    def __enter__(self) -> Checker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run_job(self, job: dict, timeout: float = JOB_TIMEOUT) -> tuple[str, object, list]:
        """Run one job in the worker: ``("ok", None, results)`` with one ``("out", [(array, bf16)])`` or
        ``("error", message)`` per set; ``("build_error", message, [])``; ``("crash", step, partial)``;
        ``("hang", step, partial)``."""
        if self._proc is None:
            self._start()
        results: list = []
        step: object = "build"
        self._stderr_mark = os.fstat(self._stderr.fileno()).st_size
        self._send(job)
        deadline = time.monotonic() + timeout
        try:
            while True:
                message = self._recv(max(0.0, deadline - time.monotonic()))
                kind = message[0]
                if kind == "step":
                    step = message[1]
                elif kind == "out":
                    results.append(("out", message[2]))
                elif kind == "run_error":
                    results.append(("error", message[2]))
                elif kind == "build_error":
                    self._recv(10.0)  # its "done"
                    return "build_error", message[1], []
                elif kind == "done":
                    return "ok", None, results
        except EOFError:
            return "crash", (step, self._dead()), results
        except TimeoutError:
            self._kill()
            return "hang", (step, f"no answer in {timeout:g} s"), results

    # -- one program -------------------------------------------------------------------------------

    def check(self, seed: int, named: bool | None = None) -> Outcome:
        try:
            program = make_program(seed, named)
        except Exception as e:  # noqa: BLE001 - a generator bug is a failure of the harness, said as such
            return Outcome(seed, "failed", "generator error", _short(e))
        outcome = Outcome(seed, "failed", description=program.description)
        prepared = self._prepare(program, outcome)
        if prepared is None:
            return outcome
        try:
            self._run(prepared, outcome)
        finally:
            if os.path.exists(prepared.path):
                os.remove(prepared.path)
        return outcome

    def _prepare(self, program: Program, outcome: Outcome) -> _Job | None:
        start = time.perf_counter()
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                prog = onnxport.export(program.model, program.args, dynamic_shapes=program.dynamic_shapes,
                                       **self.export_options)
        except onnxport.OnnxportError as e:
            outcome.export_s = time.perf_counter() - start
            outcome.status, outcome.cause = "refused", type(e).__name__
            outcome.detail = _short(e, 500)
            return None
        except Exception as e:  # noqa: BLE001 - the point of the test
            outcome.export_s = time.perf_counter() - start
            outcome.cause = f"foreign exception {type(e).__name__}"
            outcome.detail = _short(e, 500)
            return None
        outcome.export_s = time.perf_counter() - start
        path = os.path.join(self.workdir, f"seed{program.seed}.onnx")
        try:
            prog.save(path)
        except Exception as e:  # noqa: BLE001
            outcome.cause = f"save failed: {type(e).__name__}"
            outcome.detail = _short(e)
            return None
        said = list(prog.report.warnings)
        said += [str(w.message) for w in caught if "onnxport" in str(w.message) and str(w.message) not in said]

        sizes = [program.batch]
        if program.dynamic:
            ranges = [_dim_range(prog.model, name) for name in program.input_names]
            if any(r is None for r in ranges):
                static = [n for n, r in zip(program.input_names, ranges) if r is None]
                outcome.cause = "dynamic batch exported static"
                outcome.detail = f"dim 0 of {static} is static in the ONNX model"
                os.remove(path)
                return None
            high = min(r[1] for r in ranges)
            sizes += [n for n in SIZES if n != program.batch and (n == 1 or n <= high)]
        sets, expected, skipped = [], [], []
        start = time.perf_counter()
        for n in sizes:
            args = program.args if n == program.batch else program.inputs_at(n)
            try:
                with torch.no_grad(), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    out = program.model(*args)
            except Exception as e:  # noqa: BLE001 - eager refuses this size: skip it
                skipped.append(f"B={n} ({type(e).__name__})")
                continue
            label = "example" if n == program.batch else f"B={n}"
            sets.append((label, n, _feeds(program.input_names, args)))
            expected.append(_leaves(out))
        outcome.eager_s = time.perf_counter() - start
        return _Job(program, path, sets, expected, skipped, said)

    def _run(self, job: _Job, outcome: Outcome) -> None:
        program = job.program
        start = time.perf_counter()
        status, info, results = self.run_job({"path": job.path, "sets": [feeds for _, _, feeds in job.sets]})
        outcome.ort_s = time.perf_counter() - start
        labels = [label for label, _, _ in job.sets]
        if status == "build_error":
            outcome.cause = "onnxruntime refuses the file"
            outcome.detail = f"InferenceSession: {info}"[:600]
            return
        problems: list[tuple[str, int, str]] = []  # label, size, problem
        for (label, n, _), exp, result in zip(job.sets, job.expected, results):
            if result[0] == "error":
                problems.append((label, n, f"onnxruntime error: {result[1][:400]}"))
                continue
            actual = [_tensor(a, bf16) for a, bf16 in result[1]]
            if len(actual) != len(exp):
                problems.append((label, n, f"{len(actual)} outputs, eager has {len(exp)}"))
                continue
            for i, (e, a) in enumerate(zip(exp, actual)):
                e = torch.as_tensor(e)
                atol, rtol = _tolerance(program, e.dtype)
                problem = _compare(e, a, atol, rtol)
                if problem:
                    problems.append((label, n, f"output {i}: {problem}"))
                    break
        outcome.sizes = tuple(n for _, n, _ in job.sets[:len(results)])
        if status in ("crash", "hang"):
            step, how = info
            where = "building the session" if step == "build" else f"running {labels[step]}"
            what = "building the session" if step == "build" else "running the model"
            outcome.cause = f"onnxruntime {'crashed' if status == 'crash' else 'hangs'} {what}"
            outcome.detail = f"{status} {where}: {how}"
            if problems:
                outcome.detail += "; before that: " + "; ".join(f"{lab}: {p}" for lab, _, p in problems)
            return
        skipped = f" (eager refuses {', '.join(job.skipped)})" if job.skipped else ""
        if not problems:
            outcome.status = "matched"
            outcome.detail = f"sizes {list(outcome.sizes)}{skipped}"
            return
        bad = sorted({n for _, n, _ in problems})
        errors = [p for p in problems if p[2].startswith("onnxruntime error")]
        if errors:
            where = "other sizes"
            if bad == [1]:
                where = "batch 1 only"
            elif any(lab == "example" for lab, _, _ in errors):
                where = "the example"
            outcome.cause = f"onnxruntime error at {where}"
        elif bad == [1] and program.batch != 1:
            outcome.cause = "wrong at batch 1 only, " + ("report warns" if job.warnings else "report silent")
        elif any(lab == "example" for lab, _, _ in problems):
            outcome.cause = "wrong at the example"
        else:
            outcome.cause = "wrong at other sizes"
        outcome.detail = "; ".join(f"{lab}: {p}" for lab, _, p in problems) + skipped
        if job.warnings:
            outcome.detail += f"; report warnings: {' | '.join(job.warnings)[:300]}"


def check_seeds(seeds: list[int] | range, *, checker: Checker | None = None, progress: bool = False,
                **export_options: object) -> list[Outcome]:
    """Check every seed; one worker for all of them (``checker``'s when given)."""
    own = checker is None
    checker = checker or Checker(**export_options)
    outcomes = []
    try:
        for seed in seeds:
            outcome = checker.check(seed)
            outcomes.append(outcome)
            if progress:
                print(f"{seed:5d} {outcome.status:8s} {outcome.cause}", file=sys.stderr, flush=True)
    finally:
        if own:
            checker.close()
    return outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--quiet", action="store_true", help="the outcome only")
    parser.add_argument("--no-verify", action="store_true",
                        help="export with verify=False: is a VerificationError refusal justified?")
    ns = parser.parse_args(argv)
    options = {"verify": False} if ns.no_verify else {}
    if not ns.quiet:
        program = make_program(ns.seed)
        print(f"# seed {ns.seed}: {program.description}")
        print(program.source)
        print("# inputs: " + ", ".join(f"{n}: {str(a.dtype).replace('torch.', '')}{list(a.shape)}"
                                        for n, a in zip(program.input_names, program.args)))
        print(f"# dynamic_shapes={program.dynamic_shapes}")
        try:
            prog = onnxport.export(program.model, program.args, dynamic_shapes=program.dynamic_shapes, **options)
            print(prog.report)
        except Exception as e:  # noqa: BLE001
            print(f"# export raised {type(e).__name__}: {e}")
        print()
    with Checker(**options) as checker:
        outcome = checker.check(ns.seed)
    print(outcome.line)
    print(f"    export {outcome.export_s:.2f} s, eager {outcome.eager_s:.2f} s, onnxruntime {outcome.ort_s:.2f} s")
    return 0 if outcome.status != "failed" else 1


if __name__ == "__main__":
    sys.exit(main())
