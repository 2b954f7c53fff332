"""Census of transformers' model types: does a tiny random model of each type export with onnxport?

    python bench/census.py                       # every type, raw rows appended to bench/census.jsonl
    python bench/census.py --resume              # skip the types already in bench/census.jsonl
    python bench/census.py --types bert,llama    # a subset (replaces those types' rows)
    python bench/census.py --report              # only rewrite bench/census.md from bench/census.jsonl

For each type of ``CONFIG_MAPPING_NAMES`` (sorted), in its own forked process with a time limit (``--timeout``,
120 s for everything of one type), one type at a time: shrink the config class's defaults to a tiny config
(``bench/census_build.py``), build the base model (``MODEL_MAPPING_NAMES``, else the first task model) with
random weights, try candidate example inputs (batch 2) until one runs in eager PyTorch under ``no_grad``,
then export it with ``onnxport.export`` twice, static (``dynamic_shapes=None``) and dynamic (batch and
sequence dims ``Dim.DYNAMIC``), verification on. An export whose verification fails is tried again with every
weight drawn anew (``census_build.redraw_weights``): transformers' tiny default init leaves scores nearly
tied, and a difference that goes away with spread weights is the order of a top-k turning on rounding, not a
wrong graph (counted apart). One JSON line per type goes to ``bench/census.jsonl``;
``bench/census.md`` is rendered from it (counts, one row per type, failures grouped by root cause).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import re
import signal
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
JSONL = os.path.join(HERE, "census.jsonl")
MD = os.path.join(HERE, "census.md")
LOGS = os.path.join(tempfile.gettempdir(), "census-logs")
MAX_PARAMS = 150_000_000


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# -- one type, in the child -------------------------------------------------------------------------


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else "")[:300]


def classify(exc: BaseException) -> dict[str, Any]:
    """The export failure as a status, the onnxport error class, its first line and enough text to group by."""
    from onnxport import errors

    name = type(exc).__name__
    text = str(exc)
    out: dict[str, Any] = {"error": name, "message": _first_line(exc)}
    if isinstance(exc, errors.UnsupportedOpError):
        out["status"] = "untranslated"
        out["ops"] = sorted(map(str, exc.ops))
    elif isinstance(exc, errors.VerificationError):
        out["status"] = "verify mismatch"
    elif isinstance(exc, errors.CaptureError):
        out["status"] = "capture error"
        attempts = getattr(exc, "attempts", [])
        text += "\n" + "\n".join(f"[{s}] {m}" for s, m in attempts)
        out["attempts"] = [[s, str(m)[:600]] for s, m in attempts]
    elif isinstance(exc, errors.TranslationError):
        out["status"] = "translate error"
    else:
        out["status"] = "other"
        text += "\n" + "".join(traceback.format_exception(exc)[-6:])
    out["text"] = text if len(text) <= 4000 else text[:3000] + "\n...\n" + text[-1000:]  # the fix comes last
    return out


def _export(model: Any, inputs: dict[str, Any], dynamic: Any) -> dict[str, Any]:
    import onnxport

    start = time.perf_counter()
    try:
        prog = onnxport.export(model, (), inputs, dynamic_shapes=dynamic)
        out: dict[str, Any] = {"status": "ok"}
        ver = getattr(prog.report, "verification", None)
        if ver is not None and getattr(ver, "ok", True) is False:
            out["status"] = "verify mismatch"
    except Exception as exc:  # noqa: BLE001 - recorded, never raised
        out = classify(exc)
    out["seconds"] = round(time.perf_counter() - start, 2)
    return out


def _shape(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return [str(value.dtype).replace("torch.", ""), list(value.shape)]
    return type(value).__name__


def run_type(model_type: str, row: dict[str, Any], save) -> None:
    """Fill ``row`` stage by stage, calling ``save()`` after each so a killed child leaves what it did."""
    import torch

    import census_build as cb

    torch.manual_seed(0)
    torch.set_num_threads(1)
    row["stage"] = "build"
    save()
    try:
        config = cb.tiny_config(model_type)
        row["config_class"] = type(config).__name__
        cls = cb.model_class(model_type)
        row["model_class"] = cls.__name__
        with torch.device("meta"):
            meta = cls(config)
        n = sum(p.numel() for p in meta.parameters())
        del meta
        row["params"] = n
        if n > MAX_PARAMS:
            raise MemoryError(f"{n / 1e6:.0f}M parameters after shrinking (limit {MAX_PARAMS / 1e6:.0f}M)")
        model = cls(config).eval()
    except Exception as exc:  # noqa: BLE001
        row["built"] = False
        row["build_error"] = f"{type(exc).__name__}: {_first_line(exc)}"
        row["stage"] = "done"
        return
    row["built"] = True
    row["stage"] = "eager"
    save()
    errors = []
    inputs = None
    for kind, candidate in cb.candidate_inputs(model, config):
        try:
            with torch.no_grad():
                model(**candidate)
            inputs, row["input_kind"] = candidate, kind
            break
        except Exception as exc:  # noqa: BLE001
            errors.append(f"{kind}: {type(exc).__name__}: {_first_line(exc)}")
    if inputs is None:
        row["eager"] = False
        row["eager_error"] = errors[0] if errors else "no candidate inputs"
        row["eager_errors"] = errors[:6]
        row["stage"] = "done"
        return
    row["eager"] = True
    row["inputs"] = {k: _shape(v) for k, v in inputs.items()}
    row["stage"] = "static"
    save()
    row["static"] = _export(model, inputs, None)
    row["stage"] = "dynamic"
    save()
    row["dynamic"] = _export(model, inputs, cb.dynamic_shapes(inputs))
    mismatched = [key for key in ("static", "dynamic") if row[key]["status"] == "verify mismatch"]
    if mismatched:  # again with spread weights: does the difference hold, or was it near-tied scores?
        row["stage"] = "redrawn"
        save()
        cb.redraw_weights(model)
        for key in mismatched:
            row[key]["redrawn"] = _export(model, inputs, None if key == "static" else cb.dynamic_shapes(inputs))
    row["stage"] = "done"


def run_in_fork(work: Callable[[dict[str, Any], Callable[[], None]], None], row: dict[str, Any], log_path: str,
                timeout: float, prefix: str = "census-",
                default: Callable[[Any], Any] = str) -> tuple[dict[str, Any] | None, int | None, float]:
    """Run ``work(row, save)`` in a forked child, in a process group of its own, its stdout and stderr going to
    ``log_path``; ``save()`` writes ``row`` (JSON, ``default`` for what JSON lacks) to a file that the parent reads
    back, so that a child killed part way leaves what it did. An exception escaping ``work`` is recorded as
    ``row["crash"]``. The child's whole group is killed once ``timeout`` seconds have passed. Returns the row as
    the child last saved it (None if it saved nothing), the child's exit code (None when it was killed) and the
    seconds it took. Used by this census and by ``export_hf_census.py``."""
    fd, path = tempfile.mkstemp(prefix=prefix, suffix=".json")
    os.close(fd)
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        try:
            _child(work, row, log_path, path, default)
        finally:
            os._exit(1)
    status = None
    while time.perf_counter() - start < timeout:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.2)
    else:
        status = None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    saved: dict[str, Any] | None
    try:
        with open(path) as f:
            saved = json.load(f)
    except (OSError, ValueError):
        saved = None
    os.unlink(path)
    code = None if status is None else os.waitstatus_to_exitcode(status)
    return saved, code, time.perf_counter() - start


def _child(work: Callable[[dict[str, Any], Callable[[], None]], None], row: dict[str, Any], log_path: str,
           path: str, default: Callable[[Any], Any]) -> None:
    os.setpgid(0, 0)
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1)
    os.dup2(fd, 2)

    def save() -> None:
        with open(path + ".tmp", "w") as f:
            json.dump(row, f, default=default)
        os.replace(path + ".tmp", path)

    warnings.simplefilter("ignore")
    try:
        work(row, save)
    except BaseException as exc:  # noqa: BLE001
        row["crash"] = f"{type(exc).__name__}: {_first_line(exc)}"
        traceback.print_exc()
    save()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_forked(model_type: str, timeout: float) -> dict[str, Any]:
    saved, code, seconds = run_in_fork(lambda row, save: run_type(model_type, row, save), {"type": model_type},
                                       os.path.join(LOGS, model_type + ".log"), timeout)
    row = saved or {"type": model_type}
    row["total_s"] = round(seconds, 1)
    if row.get("stage") != "done":
        if code is None:
            row["timeout"] = row.get("stage", "start")
            stage = row.get("stage")
            if stage in ("static", "dynamic"):
                row[stage] = {"status": "timeout", "error": "timeout", "seconds": round(timeout, 1),
                              "message": f"the type's {timeout:.0f} s ran out during this export"}
        elif "crash" not in row:
            row["crash"] = f"child died (exit {code}) in stage {row.get('stage')}"
    row.pop("stage", None)
    return row


# -- the census --------------------------------------------------------------------------------------


def all_types() -> list[str]:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return sorted(CONFIG_MAPPING_NAMES)


def load_rows(path: str = JSONL) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    row = json.loads(line)
                    rows[row["type"]] = row  # a later line for a type replaces an earlier one
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--types", help="comma-separated model types (default: all)")
    parser.add_argument("--resume", action="store_true", help="skip types already in the jsonl file")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds for everything of one type")
    parser.add_argument("--report", action="store_true", help="only render census.md from census.jsonl")
    parser.add_argument("--jsonl", default=JSONL)
    parser.add_argument("--md", default=MD)
    opts = parser.parse_args(argv)
    if not opts.report:
        import onnxport  # noqa: F401 - imported once here, so each forked child starts with it loaded
        import torch  # noqa: F401
        import transformers  # noqa: F401

        known = all_types()
        types = [t.strip() for t in opts.types.split(",") if t.strip()] if opts.types else known
        unknown = sorted(set(types) - set(known))
        if unknown:
            parser.error(f"unknown model type(s): {', '.join(unknown)}")
        done = load_rows(opts.jsonl) if opts.resume else {}
        todo = [t for t in types if t not in done]
        start = time.perf_counter()
        for i, model_type in enumerate(todo, 1):
            row = run_forked(model_type, opts.timeout)
            with open(opts.jsonl, "a") as f:
                f.write(json.dumps(row, default=str) + "\n")
            log(f"[{i}/{len(todo)} {time.perf_counter() - start:.0f}s] {model_type}: {summary(row)}")
            if i % 10 == 0:
                write_md(load_rows(opts.jsonl), opts.md)
    write_md(load_rows(opts.jsonl), opts.md)
    return 0


def summary(row: dict[str, Any]) -> str:
    if not row.get("built"):
        return "not built: " + str(row.get("build_error") or row.get("crash") or row.get("timeout"))
    if not row.get("eager"):
        return "eager failed: " + str(row.get("eager_error") or row.get("crash") or row.get("timeout"))
    parts = []
    for key in ("static", "dynamic"):
        r = row.get(key)
        parts.append(f"{key} {cell(r)}" if r else f"{key} -")
    return "; ".join(parts)


def cell(r: dict[str, Any] | None) -> str:
    if not r:
        return "-"
    if r["status"] == "ok":
        return f"ok {r['seconds']:.1f}s"
    if r["status"] == "untranslated":
        return f"untranslated ({', '.join(r.get('ops', []))}) {r['seconds']:.1f}s"
    return f"{r['status']} {r['seconds']:.1f}s"


# -- the report --------------------------------------------------------------------------------------

CAUSES = [
    ("data-dependent `if`/size in transformers code (not turned into torch.cond)",
     r"data.dependent|GuardOnDataDependent|Could not guard on data|Could not extract specialized integer|"
     r"unbacked|u\d+ [<>=!]|Eq\(u\d|nonzero|item\(\)"),
    ("dims the model fixes to the example's size (a Python loop over the sequence, a fixed-size table)",
     r"Constraints violated|must be specialized|specialized to|multiple of|Mod\(|satisfy the generated guard|"
     r"inferred to be equal|must be equal|relationship between|specializ"),
    ("torch.vmap `_add_batch_dim`", r"_add_batch_dim|_remove_batch_dim|vmap"),
    ("cache layers onnxport does not take (linear-attention/SSM layers, empty layers)", r"past_key_values layer"),
    ("forward updates a buffer (model state)", r"updates the buffer"),
    ("broadcast mismatch under fake tensors (eager runs)", r"Attempting to broadcast a dimension"),
]


def detail(x: dict[str, Any]) -> str:
    """The first line of the error; for a mismatch, the first output that differs and by how much."""
    m = re.search(r"differs from eager PyTorch: ([^(]*?max_abs=[^ ]+)", x.get("text", ""))
    if x.get("status") == "verify mismatch" and m:
        return f"{x.get('error')}: {m.group(1)}"
    if x.get("status") == "capture error":
        m = re.search(r"^\[non-strict\] (.+)$", x.get("text", ""), re.M)
        if m:
            return f"{x.get('error')}: non-strict: {m.group(1)}"
    if x.get("status") == "untranslated":
        return f"{x.get('error')}: {', '.join(x.get('ops', []))}"
    return f"{x.get('error')}: {x.get('message')}"


def where(x: dict[str, Any]) -> str:
    """The line of transformers (or torch) a capture failure points at, if its message names one."""
    text = x.get("text", "")
    m = re.search(r'raised this error:\s*File "[^"]*?site-packages/([^"]+)", line (\d+), in [^\n]*\n\s*([^\n]*)', text)
    if m:
        return f"{m.group(1).replace('transformers/models/', '')}:{m.group(2)} `{m.group(3).strip()[:100]}`"
    m = re.search(r"Caused by: \(([^)]+)\)", text)
    return m.group(1) if m else ""


def failure_cause(r: dict[str, Any]) -> str:
    if r["status"] == "untranslated":
        return CAUSES[2][0] if any("_add_batch_dim" in op for op in r.get("ops", [])) else "untranslated ops"
    if r["status"] == "timeout":
        return "slow: ran past the time limit"
    if r["status"] == "verify mismatch":
        if (r.get("redrawn") or {}).get("status") == "ok":
            return ("verified once the weights were drawn anew (spread, not transformers' tiny default init, under "
                    "which near-tied scores order a top-k by rounding)")
        example_differs = re.search(r"inputs: example: [^\n]*\(differs", r.get("text", ""))
        if not example_differs and re.search(r"above the sizes \d+ to \d+ that torch.export captured",
                                             r.get("text", "") + r.get("fix", "")):
            return "graph bound to the example's range (a Python loop over chunks), wrong above it: verification fails"
        return "verification mismatch"
    text = (r.get("message", "") + "\n" + r.get("text", ""))
    for label, pattern in CAUSES:
        if re.search(pattern, text):
            return label
    return f"other: {r['status']} ({r.get('error')})"


def write_md(rows: dict[str, dict[str, Any]], path: str) -> None:
    import onnxruntime
    import torch
    import transformers

    import onnxport

    total = len(all_types())
    ordered = [rows[t] for t in sorted(rows)]
    built = [r for r in ordered if r.get("built")]
    eager = [r for r in built if r.get("eager")]
    st_ok = [r for r in eager if (r.get("static") or {}).get("status") == "ok"]
    dy_ok = [r for r in eager if (r.get("dynamic") or {}).get("status") == "ok"]
    run_s = sum(r.get("total_s", 0) for r in ordered)
    lines = [
        "# Census of transformers model types",
        "",
        f"Generated {datetime.date.today().isoformat()} by `python bench/census.py` (see its docstring): onnxport "
        f"{getattr(onnxport, '__version__', '?')}, torch {torch.__version__}, transformers {transformers.__version__}, "
        f"onnxruntime {onnxruntime.__version__}, Python {platform.python_version()}, {platform.machine()}, one thread.",
        "",
        "Method: for each model type of transformers' `CONFIG_MAPPING_NAMES`, the config class's defaults are "
        "shrunk to a tiny random config (hidden 64, 2 layers, 4 heads, 2 kv heads, FFN 128, vocab <= 1024, "
        "image 64 / patch 8, 4 experts, sub-configs alike; `bench/census_build.py`), the base model class "
        "(`MODEL_MAPPING_NAMES`, else the first task model) is built with random weights, and candidate example "
        "inputs (batch 2: token ids and mask, pixels at the config's image size, raw audio or features, decoder "
        "ids for encoder-decoders, whatever else forward requires) are tried until one runs in eager PyTorch. "
        "That example is exported with `onnxport.export` twice, verification on: static (`dynamic_shapes=None`) "
        "and dynamic (batch, and the sequence of token-like inputs and raw audio, as `Dim.DYNAMIC`); an export "
        "whose verification fails is tried again with every weight drawn anew, spread (`redraw_weights`). Each type runs "
        "in its own process, one at a time, with a 120 s limit for everything of the type. "
        "Raw results: `bench/census.jsonl`.",
        "",
        "## Counts",
        "",
        "| | types |",
        "|---|---:|",
        f"| model types in transformers | {total} |",
        f"| run so far | {len(ordered)} |",
        f"| built from a tiny config | {len(built)} |",
        f"| eager forward ok | {len(eager)} |",
        f"| static export verified | {len(st_ok)} |",
        f"| dynamic export verified | {len(dy_ok)} |",
        f"| static and dynamic verified | {len([r for r in st_ok if r in dy_ok])} |",
        f"| mismatch at the default init, verified with weights drawn anew (static / dynamic) | "
        f"{_redrawn_ok(eager, 'static')} / {_redrawn_ok(eager, 'dynamic')} |",
        "",
        f"Time for the rows here: {run_s / 60:.0f} min in all ({run_s / max(1, len(ordered)):.0f} s a type).",
        "",
    ]
    lines += _failure_sections(eager, built, ordered)
    lines += ["## All types", "",
              "| type | model class | params | inputs | eager | static | dynamic | error (first line) |",
              "|---|---|---:|---|---|---|---|---|"]
    for r in ordered:
        lines.append("| " + " | ".join(_row_cells(r)) + " |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def _redrawn_ok(rows: list[dict[str, Any]], key: str) -> int:
    return sum(((r.get(key) or {}).get("redrawn") or {}).get("status") == "ok" for r in rows)


def _esc(text: Any, width: int = 160) -> str:
    s = str(text).replace("|", "\\|").replace("\n", " ").replace("`", "'")
    return s if len(s) <= width else s[: width - 1] + "…"


def _row_cells(r: dict[str, Any]) -> list[str]:
    params = f"{r['params'] / 1e6:.2f}M" if r.get("params") else ""
    if not r.get("built"):
        why = r.get("build_error") or r.get("crash") or (f"timeout in {r['timeout']}" if r.get("timeout") else "")
        return [r["type"], _esc(r.get("model_class", "")), params, "", "not built", "", "", _esc(why)]
    if not r.get("eager"):
        why = r.get("eager_error") or r.get("crash") or (f"timeout in {r['timeout']}" if r.get("timeout") else "")
        return [r["type"], r.get("model_class", ""), params, "", "fail", "", "", _esc(why)]
    err = ""
    for key in ("static", "dynamic"):
        x = r.get(key) or {}
        if x and x.get("status") != "ok":
            err = f"{key}: {detail(x)}"
            break
    if r.get("crash"):
        err = err or r["crash"]

    def short_cell(x: dict[str, Any] | None) -> str:
        if not x:
            return "-"
        label = {"ok": "ok", "verify mismatch": "mismatch", "capture error": "capture", "translate error": "translate",
                 "untranslated": "ops", "timeout": "timeout"}.get(x["status"], x["status"])
        return f"{label} {x['seconds']:.1f}s"

    kinds = r.get("input_kind", "")
    return [r["type"], r.get("model_class", ""), params, kinds, "ok", short_cell(r.get("static")),
            short_cell(r.get("dynamic")), _esc(err)]


def _failure_sections(eager: list, built: list, ordered: list) -> list[str]:
    out = ["## Failures by cause", "",
           "Each export failure once per type and mode (s = static, d = dynamic); a type whose static export fails "
           "the same way as its dynamic one is listed under both letters.", ""]
    groups: dict[str, list[str]] = defaultdict(list)
    ops: Counter[str] = Counter()
    op_types: dict[str, list[str]] = defaultdict(list)
    examples: dict[str, str] = {}
    places: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for r in eager:
        for key in ("static", "dynamic"):
            x = r.get(key)
            if not x or x["status"] == "ok":
                continue
            cause = failure_cause(x)
            groups[cause].append(f"{r['type']} ({key[0]})")
            examples.setdefault(cause, detail(x))
            if where(x):
                places[cause][where(x)].append(r["type"])
            for op in x.get("ops", []):
                if key == "static" or op not in (r.get("static") or {}).get("ops", []):
                    ops[op] += 1
                    op_types[op].append(r["type"])
    slow = [f"{r['type']} ({k[0]} {r[k]['seconds']:.0f}s)" for r in eager for k in ("static", "dynamic")
            if r.get(k) and r[k]["status"] == "ok" and r[k]["seconds"] > 30]
    for cause in sorted(groups, key=lambda c: -len(groups[c])):
        out += [f"### {cause}: {len(groups[cause])}", "", f"Example: `{_esc(examples[cause], 300)}`", "",
                ", ".join(groups[cause]), ""]
        if places.get(cause):
            out += ["Where:", ""] + [f"- {_esc(p, 220)}: {', '.join(sorted(set(ts)))}"
                                     for p, ts in sorted(places[cause].items(), key=lambda kv: -len(kv[1]))] + [""]
        if cause == "untranslated ops":
            out += ["| op | types |", "|---|---|"]
            out += [f"| `{op}` | {n}: {', '.join(sorted(set(op_types[op])))} |" for op, n in ops.most_common()]
            out.append("")
    if slow:
        out += [f"### slow exports (verified, over 30 s): {len(slow)}", "", ", ".join(slow), ""]
    unbuilt = [r for r in ordered if not r.get("built")]
    reasons: dict[str, list[str]] = defaultdict(list)
    for r in unbuilt:
        why = r.get("build_error") or r.get("crash") or f"timeout in {r.get('timeout')}"
        reasons[_esc(re.sub(r"\d+", "N", why.split(":")[0] + ": " + why.split(":", 1)[-1][:70]), 120)].append(r["type"])
    out += [f"### not built from a tiny config: {len(unbuilt)}", ""]
    out += [f"- {why}: {', '.join(ts)}" for why, ts in sorted(reasons.items(), key=lambda kv: -len(kv[1]))]
    out.append("")
    no_eager = [r for r in built if not r.get("eager")]
    out += [f"### built, but no example input ran in eager PyTorch: {len(no_eager)}", ""]
    out += [f"- {r['type']}: {_esc(r.get('eager_error') or r.get('crash') or r.get('timeout'), 200)}" for r in no_eager]
    out.append("")
    return out


if __name__ == "__main__":
    sys.exit(main())
