"""The zoo table: every model of tests/zoo exported with onnxport's defaults, timed and run.

    python bench/zoo.py                       # all zoo models, table to stdout
    python bench/zoo.py --models llama,unet --out bench/zoo.md

Per model: export time (default arguments: dynamic shapes as the case declares them, verification on),
ONNX node count (subgraphs included), onnxruntime latency and eager PyTorch latency on the example
inputs (medians, one thread each), and whether the export verified.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from run import count_nodes, feeds_for, latency_ms, log, make_session, publish, quiet, short  # noqa: E402

import onnxport  # noqa: E402
from tests.zoo.cases import ZOO, ZooCase  # noqa: E402

EAGER_RUNS = 20


def eager_ms(model: torch.nn.Module, inputs: dict) -> float:
    with torch.no_grad():
        for _ in range(3):
            model(**inputs)
        times = []
        for _ in range(EAGER_RUNS):
            start = time.perf_counter()
            model(**inputs)
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def bench_case(case: ZooCase) -> list[str]:
    torch.manual_seed(0)
    model = case.build().eval()
    inputs = case.inputs(*case.example)
    gc.collect()
    with quiet():
        start = time.perf_counter()
        prog = onnxport.export(model, (), inputs, dynamic_shapes=case.dynamic)
        export_s = time.perf_counter() - start
    proto = prog.model_proto
    session = make_session(proto)
    flat = [t for t in prog.flatten_inputs((), inputs) if isinstance(t, torch.Tensor)]
    (ort_ms,) = latency_ms([(session, feeds_for(session, flat, prog.input_names))])
    eager = eager_ms(model, inputs)
    ok = "yes" if prog.report.verification.ok else "no"
    return [case.name, case.family, f"{export_s:.2f}", str(count_nodes(proto.graph)), f"{ort_ms:.3f}", f"{eager:.3f}",
            f"{ort_ms / eager:.2f}x", ok]


HEADER = ["model", "family", "export s", "nodes", "onnxruntime ms", "eager ms", "ORT / eager", "verified"]


def render(rows: Sequence[list[str]]) -> str:
    import onnxruntime

    lines = [
        f"Zoo: {len(rows)} tiny random-config models, exported with `onnxport.export` defaults (dynamic dims as "
        "each case declares, verification on). "
        f"torch {torch.__version__}, onnxruntime {onnxruntime.__version__}, {platform.machine()}, one thread. "
        "Latencies are medians on the example inputs (batch 2).",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "|".join("---" if i < 2 else "---:" for i in range(len(HEADER))) + "|",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    names = [case.name for case in ZOO]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(names), help="comma-separated zoo names (default all)")
    parser.add_argument("--out", help="also write the markdown table to this file")
    opts = parser.parse_args(argv)
    chosen = [n.strip() for n in opts.models.split(",") if n.strip()]
    unknown = sorted(set(chosen) - set(names))
    if unknown:
        parser.error(f"unknown zoo model(s) {', '.join(unknown)}; choose from {', '.join(names)}")
    torch.set_num_threads(1)
    rows = []
    for case in (c for c in ZOO if c.name in chosen):
        log(f"{case.name}")
        try:
            rows.append(bench_case(case))
        except Exception as exc:  # noqa: BLE001 - one broken model must not end the run
            rows.append([case.name, case.family, "fail: " + short(exc, 60), "", "", "", "", "no"])
    table = render(rows)
    publish(table, opts.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
