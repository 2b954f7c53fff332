"""Benchmark onnxport against ``torch.onnx.export(dynamo=True)`` on the models of ``bench/models.py``.

    python bench/run.py [--models mlp,cnn] [--repeat 5] [--out results.md]

Prints one markdown table (see bench/README.md for the columns). A failure of either exporter, or of
onnxruntime on its model, shows in that model's cells and the run goes on with the next model.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import logging
import os
import platform
import random
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import torch
from torch.utils import _pytree as pytree

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import MODELS  # noqa: E402

import onnxport  # noqa: E402

LATENCY_MIN_RUNS = 20
LATENCY_MAX_RUNS = 500
LATENCY_BUDGET_S = 1.0


@dataclass
class Side:
    """What one exporter gave on one model; a string in a numeric slot is a failure message."""

    export_s: float | str | None = None
    nodes: int | str | None = None
    latency_ms: float | str | None = None
    max_err: float | str | None = None


@dataclass
class Row:
    name: str
    floor_s: float | str | None = None
    verify_s: float | str | None = None
    ours: Side = field(default_factory=Side)
    theirs: Side = field(default_factory=Side)
    failures: list[str] = field(default_factory=list)


# -- helpers -------------------------------------------------------------------------------------------


@contextlib.contextmanager
def quiet():
    """Swallow the exporters' prints, warnings and log lines so the table stays readable."""
    # torch's log handlers hold the original stderr, so redirecting sys.stderr alone misses them.
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "torch.export", "torch._dynamo", "onnxscript")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def short(exc: BaseException, width: int = 70) -> str:
    """``Type: message`` on one line; an UnsupportedOpError names its missing ops."""
    ops = getattr(exc, "ops", None)
    if isinstance(ops, dict) and ops:
        text = f"{type(exc).__name__}: {', '.join(map(str, ops))}"
    else:
        lines = [ln.strip() for ln in str(exc).strip().splitlines()]
        kept = []
        for ln in lines:
            if ln.startswith("fix:"):
                break
            kept.append(ln)
        text = f"{type(exc).__name__}: {' '.join(k for k in kept if k)}"
    return text if len(text) <= width else text[: width - 1] + "…"


def timed_in_turn(fns: dict[str, Callable[[], Any]], repeat: int) -> dict[str, tuple[float, Any] | BaseException]:
    """Median wall time of ``repeat`` calls of each function after one warm-up call each (the first pays
    one-off costs). The functions run in turn (A B C A B C ...) so the machine's drift hits them alike;
    one that raises is dropped from the rounds and its exception returned in its place."""
    results: dict[str, Any] = {}
    times: dict[str, list[float]] = {}
    for label, fn in fns.items():
        log(f"  {label}")
        try:
            with quiet():
                results[label] = fn()
            times[label] = []
        except Exception as exc:  # noqa: BLE001 - a failure is a result to report
            results[label] = exc
    for _ in range(repeat):
        for label in times:
            gc.collect()
            with quiet():
                start = time.perf_counter()
                results[label] = fns[label]()
                times[label].append(time.perf_counter() - start)
    return {k: (statistics.median(times[k]), v) if k in times else v for k, v in results.items()}


def count_nodes(graph: onnx.GraphProto) -> int:
    """Nodes of ``graph`` and, recursively, of every subgraph (If/Loop/Scan bodies, functions excluded)."""
    total = 0
    for node in graph.node:
        total += 1
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                total += count_nodes(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                total += sum(count_nodes(g) for g in attr.graphs)
    return total


def _graphs(graph: onnx.GraphProto):
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                yield from _graphs(sub)


def model_bytes(path: str) -> int:
    """The model file and every external data file its tensors name."""
    proto = onnx.load(path, load_external_data=False)
    files = {os.path.abspath(path)}
    for graph in _graphs(proto.graph):
        tensors = list(graph.initializer)
        for node in graph.node:
            tensors += [a.t for a in node.attribute if a.type == onnx.AttributeProto.TENSOR]
        for tensor in tensors:
            for entry in tensor.external_data:
                if entry.key == "location":
                    files.add(os.path.abspath(os.path.join(os.path.dirname(path), entry.value)))
    return sum(os.path.getsize(f) for f in files)


def session_options(threads: int = 1):
    """onnxruntime CPU options for a timed session: ``threads`` intra-op threads, one inter-op thread,
    onnxruntime's default graph optimisations (ORT_ENABLE_ALL).

    Spinning is off: after a run, onnxruntime's intra-op threads spin waiting for the next one, and
    ``latency_ms`` runs several sessions in turn, so each session's spinning threads would take the cores
    from the next session timed (on 2 cores, a float Llama decode step measured 24 ms interleaved with
    spinning on and 6 ms alone; with spinning off, 6.7 ms interleaved)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    return options


def make_session(proto: onnx.ModelProto):
    import onnxruntime as ort

    return ort.InferenceSession(proto.SerializeToString(), session_options(1), providers=["CPUExecutionProvider"])


def feeds_for(session, flat_inputs: Sequence[torch.Tensor], names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """Map flat user inputs to the session's inputs: by name when the model dropped some, else by order."""
    wanted = [i.name for i in session.get_inputs()]
    arrays = [t.detach().cpu().numpy() for t in flat_inputs]
    if len(wanted) == len(arrays):
        return dict(zip(wanted, arrays))
    if names is not None and len(names) == len(arrays):
        by_name = dict(zip(names, arrays))
        if all(n in by_name for n in wanted):
            return {n: by_name[n] for n in wanted}
    raise RuntimeError(f"cannot match {len(arrays)} inputs to the model's inputs {wanted}")


def publish(table: str, out: str | None) -> None:
    """Print the markdown table, and write it to ``out`` when one is given."""
    print(table)
    if out:
        with open(out, "w", encoding="utf-8") as f:
            f.write(table)


def latency_ms(runs: Sequence[tuple[Any, dict[str, np.ndarray]]]) -> list[float]:
    """Median latency of each (session, feeds), the sessions run in turn so that the machine's drift hits
    them alike: at least LATENCY_MIN_RUNS each, then until the time budget or LATENCY_MAX_RUNS. Each round
    visits them in a new random order (seeded): in a fixed order a session always runs after the same one,
    whose traces in the caches then count for or against it every time (two files of the same graph, int4
    weights, timed 2.59 and 2.20 ms, the first right after the float32 model)."""
    for session, feeds in runs:
        for _ in range(5):
            session.run(None, feeds)
    times: list[list[float]] = [[] for _ in runs]
    spent = 0.0
    order = list(range(len(runs)))
    shuffle = random.Random(0).shuffle
    while len(times[0]) < LATENCY_MIN_RUNS or (spent < LATENCY_BUDGET_S * len(runs) and len(times[0]) < LATENCY_MAX_RUNS):
        shuffle(order)
        for i in order:
            session, feeds = runs[i]
            start = time.perf_counter()
            session.run(None, feeds)
            times[i].append(time.perf_counter() - start)
            spent += times[i][-1]
    return [statistics.median(own) * 1e3 for own in times]


def max_abs_err(outputs: Sequence[Any], expected: Sequence[torch.Tensor]) -> float:
    if len(outputs) != len(expected):
        raise RuntimeError(f"{len(outputs)} ONNX outputs for {len(expected)} eager outputs")
    err = 0.0
    for got, want in zip(outputs, expected):
        got_t = torch.as_tensor(np.asarray(got))
        if tuple(got_t.shape) != tuple(want.shape):
            raise RuntimeError(f"output shape {tuple(got_t.shape)} != eager {tuple(want.shape)}")
        if want.numel():
            err = max(err, (got_t.double() - want.double()).abs().max().item())
    return err


def input_names(model: torch.nn.Module, n: int) -> list[str] | None:
    import inspect

    try:
        params = list(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        return None
    return params[:n] if len(params) >= n else None


# -- one model -----------------------------------------------------------------------------------------


def run_side(
    side: Side, row: Row, label: str, proto_fn: Callable[[], onnx.ModelProto], flat_in, names, expected
) -> tuple[Any, dict[str, np.ndarray]] | None:
    """Node count and error of one exported model, and its session and feeds for the latency run;
    failures land in the cells."""
    try:
        proto = proto_fn()
    except Exception as exc:  # noqa: BLE001 - any failure is a result to report
        side.nodes = side.latency_ms = side.max_err = "n/a"
        row.failures.append(f"{label} model_proto: {short(exc, 400)}")
        return None
    side.nodes = count_nodes(proto.graph)
    try:
        session = make_session(proto)
        feeds = feeds_for(session, flat_in, names)
        side.max_err = max_abs_err(session.run(None, feeds), expected)
        return session, feeds
    except Exception as exc:  # noqa: BLE001
        msg = "fail: " + short(exc, 40)
        side.latency_ms = msg if side.latency_ms is None else side.latency_ms
        side.max_err = msg if side.max_err is None else side.max_err
        row.failures.append(f"{label} onnxruntime: {short(exc, 400)}")
        return None


def bench_model(name: str, factory, repeat: int) -> Row:
    row = Row(name)
    try:
        model, args = factory()
    except Exception as exc:  # noqa: BLE001
        row.failures.append(f"building the model: {short(exc, 400)}")
        row.floor_s = "fail: " + short(exc, 40)
        return row
    try:
        with torch.no_grad():
            expected, _ = pytree.tree_flatten(model(*args))
    except Exception as exc:  # noqa: BLE001
        row.failures.append(f"running the model eagerly: {short(exc, 400)}")
        row.floor_s = "fail: " + short(exc, 40)
        return row
    expected = [t for t in expected if isinstance(t, torch.Tensor)]
    flat_in = [t for t in pytree.tree_flatten(args)[0] if isinstance(t, torch.Tensor)]
    names = input_names(model, len(flat_in))

    timings = timed_in_turn(
        {
            "torch.export": lambda: torch.export.export(model, args),
            "onnxport": lambda: onnxport.export(model, args, verify=False),
            "onnxport verify=True": lambda: onnxport.export(model, args),
            "torch.onnx": lambda: torch.onnx.export(model, args, dynamo=True, verbose=False, optimize=True),
        },
        repeat,
    )

    def outcome(label: str) -> tuple[float | str, Any]:
        result = timings[label]
        if isinstance(result, BaseException):
            row.failures.append(f"{label}: {short(result, 400)}")
            return "fail: " + short(result, 40), None
        return result

    row.floor_s, _ = outcome("torch.export")
    row.ours.export_s, prog = outcome("onnxport")
    row.verify_s, _ = outcome("onnxport verify=True")
    row.theirs.export_s, theirs = outcome("torch.onnx")
    measured = []
    for side, label, program in ((row.ours, "onnxport", prog), (row.theirs, "torch.onnx", theirs)):
        if program is None:
            side.nodes = side.latency_ms = side.max_err = "n/a"
            continue
        log(f"  {label} onnxruntime")
        run = run_side(side, row, label, lambda p=program: p.model_proto, flat_in, names, expected)
        if run is not None:
            measured.append((side, run))
    for (side, _), ms in zip(measured, latency_ms([run for _, run in measured])):
        side.latency_ms = ms
    return row


# -- table ---------------------------------------------------------------------------------------------

HEADER = [
    "model",
    "torch.export (floor) s",
    "onnxport s",
    "onnxport verify=True s",
    "torch.onnx s",
    "onnxport / torch.onnx",
    "onnxport / floor",
    "nodes onnxport",
    "nodes torch.onnx",
    "ORT ms onnxport",
    "ORT ms torch.onnx",
    "ORT onnxport / torch.onnx",
    "max abs err onnxport",
    "max abs err torch.onnx",
]


def fmt(value: Any, spec: str) -> str:
    if value is None:
        return "—"
    if isinstance(value, str):
        return value.replace("|", "\\|")
    return format(value, spec)


def ratio(a: Any, b: Any) -> str:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b > 0:
        return f"{a / b:.2f}x"
    return "—"


def render(rows: Sequence[Row], repeat: int) -> str:
    import onnxruntime

    lines = [
        f"Export times: median of {repeat} after one warm-up; ORT: median latency, 1 intra-op thread, "
        "default graph optimizations; nodes include subgraphs.",
        "",
        f"torch {torch.__version__}, onnxport {onnxport.__version__}, onnx {onnx.__version__}, "
        f"onnxruntime {onnxruntime.__version__}, Python {platform.python_version()}, {platform.machine()}",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "|".join(["---"] + ["---:"] * (len(HEADER) - 1)) + "|",
    ]
    for r in rows:
        cells = [
            r.name,
            fmt(r.floor_s, ".3f"),
            fmt(r.ours.export_s, ".3f"),
            fmt(r.verify_s, ".3f"),
            fmt(r.theirs.export_s, ".3f"),
            ratio(r.ours.export_s, r.theirs.export_s),
            ratio(r.ours.export_s, r.floor_s),
            fmt(r.ours.nodes, "d"),
            fmt(r.theirs.nodes, "d"),
            fmt(r.ours.latency_ms, ".3f"),
            fmt(r.theirs.latency_ms, ".3f"),
            ratio(r.ours.latency_ms, r.theirs.latency_ms),
            fmt(r.ours.max_err, ".2e"),
            fmt(r.theirs.max_err, ".2e"),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    failures = [(r.name, f) for r in rows for f in r.failures]
    if failures:
        lines += ["", "Failures:", ""]
        lines += [f"- {name}: {f}".replace("\n", " ") for name, f in failures]
    return "\n".join(lines) + "\n"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, from: {', '.join(MODELS)}")
    parser.add_argument("--repeat", type=int, default=5, help="timed exports per exporter and model (median)")
    parser.add_argument("--out", help="also write the markdown table to this file")
    opts = parser.parse_args(argv)
    names = [n.strip() for n in opts.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    if opts.repeat < 1:
        parser.error("--repeat must be at least 1")
    # One thread keeps the comparison fair and leaves the machine's other cores alone.
    torch.set_num_threads(1)
    rows = []
    for name in names:
        log(f"{name}:")
        try:
            rows.append(bench_model(name, MODELS[name], opts.repeat))
        except Exception as exc:  # noqa: BLE001 - one broken model must not end the run
            rows.append(Row(name, floor_s="fail: " + short(exc, 40), failures=[f"benchmark: {short(exc, 400)}"]))
    table = render(rows, opts.repeat)
    publish(table, opts.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
