"""What onnxport's default verification costs: exports with and without it beside torch.onnx.export.

    python bench/verify_cost.py                          # ViT-B/16 and R3D-18, batch 2, 3 rounds
    python bench/verify_cost.py --models r3d_18 --repeat 1
    python bench/verify_cost.py --zoo                    # also every model of tests/zoo (best of 2)
    python bench/verify_cost.py --zoo-models bert,vit --out bench/verify.md

Per model, in the same process and in turn (so the machine's drift hits them alike), after one warm-up
export of a small model with each exporter: ``onnxport.export(..., verify=False)``, ``onnxport.export``
with its default verification, and ``torch.onnx.export(..., dynamo=True)`` (no verification), all with
the batch dim dynamic (zoo models: the dims their case declares). Reported: the best run of each (the issue's measure: warm, best of the runs) of the export
times, their ratios to torch.onnx, the verification stage's own seconds (and where they went: the
onnxruntime session, eager PyTorch, onnxruntime runs, comparison) and the input sets it checked.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.export import Dim

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
from models import MODELS, VISION  # noqa: E402
from run import log, quiet, short  # noqa: E402

import onnxport  # noqa: E402

TARGET = 0.5  # issue 10: export with default verification at most half torch.onnx's export time
SPLIT = ("session", "eager", "onnxruntime", "comparison")


@dataclass
class Case:
    """One model to export: ``build()`` gives ``(model, args, kwargs, dynamic_shapes)``."""

    name: str
    build: Callable[[], tuple[torch.nn.Module, tuple, dict[str, Any], Any]]


@dataclass
class Result:
    name: str
    times: dict[str, list[float]] = field(default_factory=lambda: {"off": [], "default": [], "torch.onnx": []})
    verify_s: list[float] = field(default_factory=list)
    before_s: list[float] = field(default_factory=list)  # the export before verification, in the default run
    split: dict[str, list[float]] = field(default_factory=dict)
    sets: str = ""
    failures: dict[str, str] = field(default_factory=dict)

    def best(self, key: str) -> float | None:
        values = self.times.get(key) or []
        return min(values) if values else None


def vision_case(name: str, batch: int) -> Case:
    def build() -> tuple[torch.nn.Module, tuple, dict[str, Any], Any]:
        model, args = VISION[name](batch)
        return model, args, {}, ({0: Dim("batch")},)

    return Case(name, build)


def zoo_cases(names: Sequence[str] | None) -> list[Case]:
    from tests.zoo.cases import ZOO

    def builder(case: Any) -> Callable[[], tuple[torch.nn.Module, tuple, dict[str, Any], Any]]:
        def build() -> tuple[torch.nn.Module, tuple, dict[str, Any], Any]:
            torch.manual_seed(0)
            return case.build().eval(), (), case.inputs(*case.example), case.dynamic

        return build

    return [Case(c.name, builder(c)) for c in ZOO if names is None or c.name in names]


def export_calls(model: torch.nn.Module, args: tuple, kwargs: dict, dynamic: Any) -> dict[str, Callable[[], Any]]:
    return {
        "off": lambda: onnxport.export(model, args, kwargs, dynamic_shapes=dynamic, verify=False),
        "default": lambda: onnxport.export(model, args, kwargs, dynamic_shapes=dynamic),
        "torch.onnx": lambda: torch.onnx.export(model, args, kwargs=kwargs, dynamic_shapes=_every_kwarg(dynamic, kwargs),
                                                dynamo=True, optimize=True, verbose=False),
    }


def _every_kwarg(dynamic: Any, kwargs: dict[str, Any]) -> Any:
    """torch.export wants a dict of dynamic shapes to name every keyword input (``None`` for the static
    ones, such as ``use_cache=False``); onnxport fills them in itself."""
    if isinstance(dynamic, dict) and kwargs:
        return {**dict.fromkeys(kwargs), **dynamic}
    return dynamic


def record_verification(result: Result, prog: Any) -> None:
    """The verify stage's seconds, the export before it, the split and the sets, from the report."""
    report = prog.report
    stages = {s.name: s.seconds for s in report.stages}
    result.verify_s.append(stages.get("verify", 0.0))
    result.before_s.append(sum(s for n, s in stages.items() if n != "verify"))
    verification = report.verification
    for key, value in (getattr(verification, "time_split", None) or {}).items():
        result.split.setdefault(key, []).append(value)
    runs = verification.runs if verification is not None else []
    skipped = [r for r in runs if "(skipped:" in r]
    result.sets = f"{len(runs) - len(skipped)} checked" + (f", {len(skipped)} skipped" if skipped else "")


def bench(case: Case, repeat: int) -> Result:
    result = Result(case.name)
    model, args, kwargs, dynamic = case.build()
    calls = export_calls(model, args, kwargs, dynamic)
    for _ in range(repeat):
        for key, call in calls.items():
            if key in result.failures:
                continue
            gc.collect()
            try:
                with quiet():
                    start = time.perf_counter()
                    out = call()
                    result.times[key].append(time.perf_counter() - start)
            except Exception as exc:  # noqa: BLE001 - a failure is a result to report
                result.failures[key] = short(exc, 60)
                continue
            if key == "default":
                record_verification(result, out)
    return result


def warm_up() -> None:
    """The first export of a process pays one-off costs (imports, registrations): pay them here."""
    model, args = MODELS["cnn"]()
    for call in export_calls(model, args, {}, ({0: Dim("batch")},)).values():
        with quiet():
            call()


def _s(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _x(num: float | None, den: float | None) -> str:
    return "n/a" if num is None or not den else f"{num / den:.2f}x"


def row(r: Result) -> list[str]:
    off, default, theirs = r.best("off"), r.best("default"), r.best("torch.onnx")
    verify = min(r.verify_s) if r.verify_s else None
    before = min(r.before_s) if r.before_s else None
    cells = [r.name, _s(theirs), _s(off), _s(default), _s(verify), _x(verify, before), _x(default, theirs),
             _x(off, theirs), r.sets]
    for key, message in r.failures.items():
        cells[{"torch.onnx": 1, "off": 2, "default": 3}[key]] = f"fail: {message}"
    return cells


HEADER = ["model", "torch.onnx s", "onnxport verify=False s", "onnxport default s", "verification s",
          "verification / export before it", "default / torch.onnx", "verify=False / torch.onnx", "input sets"]


def table(rows: Sequence[list[str]], header: Sequence[str]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|---" + "|---:" * (len(header) - 1) + "|",
            *("| " + " | ".join(r) + " |" for r in rows)]


def split_table(results: Sequence[Result]) -> list[str]:
    rows = [[r.name, *(_s(min(r.split[k])) if r.split.get(k) else "n/a" for k in SPLIT)]
            for r in results]
    return table(rows, ["model", *(f"{k} s" for k in SPLIT)])


def within_target(results: Sequence[Result]) -> str:
    ratios = [(r.name, r.best("default") / r.best("torch.onnx")) for r in results
              if r.best("default") and r.best("torch.onnx")]
    met = [n for n, x in ratios if x <= TARGET]
    return f"{len(met)} of {len(ratios)} at most {TARGET}x torch.onnx with default verification"


def render(vision: Sequence[Result], zoo: Sequence[Result], repeat: int, batch: int, zoo_repeat: int = 1) -> str:
    import onnxruntime

    lines = [
        "# What default verification costs",
        "",
        f"`python bench/verify_cost.py` (see bench/README.md). torch {torch.__version__}, onnxruntime "
        f"{onnxruntime.__version__}, {platform.machine()}, {os.cpu_count()} CPUs ({torch.get_num_threads()} torch "
        "threads). Export times in seconds; the three exports of a model run in turn.",
    ]
    if vision:
        lines += ["", f"## Vision models, batch {batch}, batch dim dynamic (best of {repeat}, as the issue measures: warm, best run)", "",
                  *table([row(r) for r in vision], HEADER), "", within_target(vision) + ".", "",
                  "Where the verification seconds went:", "", *split_table(vision)]
    if zoo:
        lines += ["", f"## The zoo (tests/zoo/cases.py), dims as each case declares (best of {zoo_repeat})", "",
                  *table([row(r) for r in zoo], HEADER), "", within_target(zoo) + "."]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(VISION), help="vision models from bench/models.py VISION")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3, help="rounds for the vision models")
    parser.add_argument("--zoo-repeat", type=int, default=2, help="rounds for the zoo (the issue's measure: best of two)")
    parser.add_argument("--zoo", action="store_true", help="also every zoo model")
    parser.add_argument("--zoo-models", help="comma-separated zoo models (implies --zoo)")
    parser.add_argument("--out", help="also write the markdown to this file")
    opts = parser.parse_args(argv)
    chosen = [n.strip() for n in opts.models.split(",") if n.strip()]
    unknown = sorted(set(chosen) - set(VISION))
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(VISION)}")
    log("warm-up")
    warm_up()
    vision = []
    for name in chosen:
        log(name)
        vision.append(bench(vision_case(name, opts.batch), opts.repeat))
    zoo = []
    if opts.zoo or opts.zoo_models:
        names = [n.strip() for n in opts.zoo_models.split(",")] if opts.zoo_models else None
        for case in zoo_cases(names):
            log(case.name)
            zoo.append(bench(case, opts.zoo_repeat))
    text = render(vision, zoo, opts.repeat, opts.batch, opts.zoo_repeat)
    print(text)
    if opts.out:
        with open(opts.out, "w", encoding="utf-8") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
