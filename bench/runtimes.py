"""Which runtime computes which file right: tests/runtimes' models exported at each opset, fused form and
target, in float32 and float16, run in every installed onnxruntime wheel, onnxruntime-node and -web.

    make runtimes && python bench/runtimes.py --out bench/runtimes.md      # or: make bench-runtimes

Columns: opsets 18-23 as ``opset=`` writes them, opset 23 with each set of the fused ops (Attention,
RMSNormalization, RotaryEmbedding) switched on by hand (the target rules in ``onnxport.targets.FUSED_SINCE``
are overridden for the export, so a form no target emits is measured too), and each named target. A cell is
``ok`` (every input set of every model loads and matches eager), ``refused`` (refused at load), or the sets
that run wrong or fail. A Identity probe per opset (at IR 8) and per IR version (at opset 18) gives the
newest each Python wheel loads.

    python bench/runtimes.py --zoo --out bench/runtimes.md   # the zoo's models at the default target

``--zoo`` exports every model of tests/zoo/cases.py at the default target (float32) instead, runs each at its
example size and its other size in every installed runtime (or those ``--runtimes`` names; the default target
claims them all), and writes one table, model by runtime, as the "Zoo at the default target" section of
``--out`` (the rest of the file is kept; the full run keeps that section too).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import onnx  # noqa: E402
import torch  # noqa: E402

from onnxport import targets as _targets  # noqa: E402
from onnxport.errors import InvalidInputError  # noqa: E402
from tests.runtimes import cases, runtimes  # noqa: E402

FUSED = ("Attention", "RMSNormalization", "RotaryEmbedding")
# label -> (export options, the fused ops forced on at opset 23, or None to follow the target rules)
VARIANTS: dict[str, tuple[dict, tuple[str, ...] | None]] = {
    **{f"opset {n}": ({"opset": n}, None) for n in (18, 20, 21, 22)},
    "23 plain": ({"opset": 23}, ()),
    "23 +Attention": ({"opset": 23}, ("Attention",)),
    "23 +RMSNorm +Rotary": ({"opset": 23}, ("RMSNormalization", "RotaryEmbedding")),
    "23 +all three": ({"opset": 23}, FUSED),
    **{t: ({"target": t}, None) for t in _targets.TARGETS},
}
DTYPES = (torch.float32, torch.float16)
PROBE_OPSETS = range(18, 29)
PROBE_IRS = range(8, 16)
ZOO_SECTION = "## Zoo at the default target"


@contextlib.contextmanager
def forced(ops: tuple[str, ...] | None) -> Iterator[None]:
    """Emit exactly ``ops``, whatever ``FUSED_SINCE`` says for any runtime (None: leave it)."""
    if ops is None:
        yield
        return
    saved = {form: dict(since) for form, since in _targets.FUSED_SINCE.items()}
    try:
        for form, since in _targets.FUSED_SINCE.items():
            for runtime in since:  # every runtime: the rules ask each one that loads the opset
                since[runtime] = (1, 0) if form.split(".")[0] in ops else None
        yield
    finally:
        for form, since in saved.items():
            _targets.FUSED_SINCE[form].update(since)


def build_cases(out: str) -> dict[str, dict]:
    """Export every model for every variant and dtype; directory name -> what it holds."""
    made = {}
    for case in cases.CASES:
        built = case.build()
        for label, (options, ops) in VARIANTS.items():
            for dtype in DTYPES:
                name = f"{case.name}.{_slug(label)}.{str(dtype)[6:]}"
                try:
                    with forced(ops):
                        prog = cases.export(case, built, dtype=dtype, **options)
                except InvalidInputError as e:  # a quantized form the variant's releases do not all run
                    log(f"{name}: left out: {str(e).splitlines()[0]}")
                    continue
                directory = cases.write_case(case, built, prog, os.path.join(out, name), dtype=dtype)
                model = onnx.load(os.path.join(directory, "model.onnx"))
                present = sorted({n.op_type for n in model.graph.node} & set(FUSED))
                made[name] = {"model": case.name, "variant": label, "dtype": str(dtype)[6:], "fused": present,
                              "opset": model.opset_import[0].version, "ir": model.ir_version}
                log(f"{name}: opset {made[name]['opset']} IR {made[name]['ir']} {'+'.join(present) or 'no fused op'}")
    return made


def build_probes(out: str) -> dict[str, tuple[str, int]]:
    """One-node Identity models: per opset at IR 8, per IR version at opset 18."""
    from onnx import TensorProto, helper

    made = {}
    for kind, values in (("opset", PROBE_OPSETS), ("ir", PROBE_IRS)):
        for value in values:
            x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
            y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
            graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "probe", [x], [y])
            opset = value if kind == "opset" else 18
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
            model.ir_version = 8 if kind == "opset" else value
            name = f"probe.{kind}{value}"
            directory = os.path.join(out, name)
            os.makedirs(directory)
            onnx.save(model, os.path.join(directory, "model.onnx"))
            _probe_set(directory)
            made[name] = (kind, value)
    return made


def _probe_set(directory: str) -> None:
    import json

    import numpy as np

    np.array([1.0, 2.0], dtype="<f4").tofile(os.path.join(directory, "x.bin"))
    spec = {"name": "x", "dtype": "float32", "shape": [2], "file": "x.bin"}
    case = {"sets": [{"name": "identity", "inputs": [spec], "outputs": [{**spec, "name": "y", "atol": 0, "rtol": 0}]}]}
    with open(os.path.join(directory, "case.json"), "w") as f:
        json.dump(case, f)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _slug(label: str) -> str:
    return label.replace(">=", "-").replace(" +", "+").replace(" ", "_")


SHORT = {"prefill_empty_cache": "prefill", "prefill_left_padded": "padded prefill",
         "decode_after_left_padded": "decode", "left_padded": "padded", "batch2": "", "true_branch": "true",
         "false_branch": "false"}


def cell(results: list[dict]) -> str:
    """One table cell: ``ok``, ``refused``, or each set that went wrong and how."""
    outcomes = [runtimes.outcome(r) for r in results]
    if all(o == "ok" for o in outcomes):
        return "ok"
    if all(o == "refused" for o in outcomes):
        return "refused"
    bad = collections.defaultdict(list)
    for r, o in zip(results, outcomes):
        if o != "ok":
            model = r["case"].split(".")[0]
            bad[o.upper() if o != "refused" else o].append(f"{model} {SHORT.get(r['set'], r['set'])}".strip())
    return "; ".join(f"{kind}: {', '.join(where)}" for kind, where in bad.items())


def render(made: dict, probes: dict, results: list[dict], seconds: dict[str, float]) -> str:
    by = collections.defaultdict(list)
    for r in results:
        by[(r["runtime"], r["case"])].append(r)
    names = list(dict.fromkeys(r["runtime"] for r in results))
    lines = [
        "# Runtimes: which file each runtime loads and computes right",
        "",
        "`make bench-runtimes` (`bench/runtimes.py`) regenerates this file; `make runtimes` installs the runtimes",
        "(tests/runtimes/setup.sh). Models: tests/runtimes/cases.py (a CNN; the README's `if x.sum():` model on",
        "both branches; GPT-2 on a left-padded batch; a tiny Llama with 4 query heads over 2 KV heads, without",
        "a cache on a plain and a left-padded batch (its fused Attention takes the 3-D (B, S, H*E) form), and",
        "with its DynamicCache (`llama_kv`, 4-D Attention with past inputs) as a prefill from an empty cache, a",
        "left-padded prefill and a decode step after it), compared with eager PyTorch (float16 files against",
        "eager float32 at atol = rtol = 1e-2; float32 at 1e-4, logits rtol 1e-3). Padding positions of the",
        "logits and of the present keys/values are not compared (no caller reads them; a fully masked query",
        "row has no defined attention result), but a NaN anywhere fails (a masked key still spreads it).",
        "Sessions use default options (onnxruntime's default graph optimisation); web is the wasm backend",
        "under Node, one thread.",
        "",
        "Cells: `ok` = every set of every model loads and matches; `refused` = refused at load (the rule allows",
        "it); otherwise the sets that `NAN` (NaN where eager has a number), are `WRONG` (beyond tolerance) or",
        "`ERROR` (loaded, failed to run), all of which break the rule; `refused: ...` lists the models refused",
        "where others load. Opset columns are `opset=N` as onnxport writes it today; `23 ...` columns force",
        "exactly those fused ops on at opset 23; target columns are `target=...`.",
        "",
    ]
    variants = list(VARIANTS)
    for dtype in ("float32", "float16"):
        lines += [f"## {dtype}", "", "| runtime | " + " | ".join(variants) + " |",
                  "| --- |" + " --- |" * len(variants)]
        for name in names:
            row = []
            for label in variants:
                dirs = [d for d, m in made.items() if m["variant"] == label and m["dtype"] == dtype]
                row.append(cell([r for d in dirs for r in by[(name, d)]]))
            lines.append(f"| {name} | " + " | ".join(row) + " |")
        lines.append("")
    lines += ["What each column's files hold (opset, IR version, fused ops):", "",
              "| column | opset | IR | fused ops (float32 Llama) | fused ops (float16 Llama) |", "| --- | --- | --- | --- | --- |"]
    for label in variants:
        held = {m["dtype"]: m for m in made.values() if m["variant"] == label and m["model"] == "llama_kv"}
        lines.append(f"| {label} | {held['float32']['opset']} | {held['float32']['ir']} | "
                     f"{', '.join(held['float32']['fused']) or '-'} | {', '.join(held['float16']['fused']) or '-'} |")
    lines += ["", "## Newest opset and IR version each runtime loads", "",
              "One-node Identity probes: opset N at IR 8, IR N at opset 18.", "",
              "| runtime | newest opset | newest IR |", "| --- | --- | --- |"]
    for name in names:
        loads = {probes[c]: all(r["ok"] for r in rs) for (rt, c), rs in by.items() if rt == name and c in probes}
        opset = max((v for (k, v), ok in loads.items() if k == "opset" and ok), default=None)
        ir = max((v for (k, v), ok in loads.items() if k == "ir" and ok), default=None)
        lines.append(f"| {name} | {opset} | {ir} |")
    lines += ["", "## Errors, one of each", ""]
    seen = set()
    for r in results:
        o = runtimes.outcome(r)
        text = (r["load_error"] or r["run_error"]) if o in ("refused", "crash") else r["run_error"] if o == "error" else None
        if o in ("ok", "nan", "wrong") or r["case"] in probes:
            continue
        text = re.sub(r"/\S*/model\.onnx", "model.onnx", (text or "").splitlines()[0] if text else "")
        key = (r["runtime"], o, re.sub(r"\d+", "N", text[-100:]))  # the message, not the file's path
        if key not in seen:
            seen.add(key)
            # onnxruntime's message ends its text, after the C++ signature of the function that raised it.
            lines.append(f"- {r['runtime']}, {o}, {r['case']} {r['set']}: `{'...' if len(text) > 160 else ''}{text[-160:]}`")
    lines += ["", "## Run", "", f"- {platform.platform()}, torch {torch.__version__}, "
              f"onnx {onnx.__version__}, node {_node_version()}",
              f"- exports {seconds['export']:.0f} s, runtimes {seconds['run']:.0f} s", ""]
    return "\n".join(lines)


def build_zoo(out: str) -> dict[str, dict]:
    """Export every zoo model at the default target (float32); directory name -> what it holds, or the export's
    error (a model onnxport cannot export is a row of its own, not a crash of the whole run)."""
    made = {}
    for case in cases.zoo_cases():
        name = f"zoo.{case.name}"
        try:
            built = case.build()
            prog = cases.export(case, built)
            directory = cases.write_case(case, built, prog, os.path.join(out, name))
        except Exception as e:  # noqa: BLE001 - reported in the table
            made[name] = {"model": case.name, "error": _gist(f"{type(e).__name__}: {e}")}
            log(f"{name}: export failed: {made[name]['error']}")
            continue
        model = onnx.load(os.path.join(directory, "model.onnx"))
        made[name] = {"model": case.name, "opset": model.opset_import[0].version, "ir": model.ir_version,
                      "fused": sorted({n.op_type for n in model.graph.node} & set(FUSED))}
        log(f"{name}: opset {made[name]['opset']} IR {made[name]['ir']}")
    return made


def _gist(text: str, words: int = 14) -> str:
    """The first words of an error's own message: onnxruntime's status prefix and the node's long name cut,
    the op type kept (the node names repeat the module path, which the table does not need). A runtime that
    died gives its exit status and the end of what it printed (an assertion's text follows a C++ signature)."""
    text = " ".join(text.split())
    died = re.match(r"the runtime died \(exit (-?\d+)\): (.*)", text)
    if died:
        tail = re.split(r"(?<=\]): ", died.group(2))[-1].split()
        return f"process died (exit {died.group(1)}): " + " ".join(tail[-words:])
    text = re.sub(r"^\w+: \[ONNXRuntimeError\] : \d+ : \w+ : ", "", text)
    text = re.sub(r"Non-zero status code returned while running (\w+) node\. Name:'[^']*' Status Message: ",
                  r"\1: ", text)
    text = re.sub(r"/\S*/(model\.onnx)", r"\1", text)
    cut = text.split()
    return " ".join(cut[:words]) + (" ..." if len(cut) > words else "")


def zoo_cell(results: list[dict]) -> str:
    """One zoo cell: ``ok``, or per outcome the sets (example / other size) it hit: WRONG with the max abs
    error, ERROR and refused with the first words of the runtime's message (at the default target a refusal
    breaks the promise too, so it says why), CRASH where loading killed the runtime's process."""
    outcomes = [runtimes.outcome(r) for r in results]
    if outcomes and all(o == "ok" for o in outcomes):
        return "ok"
    bad: dict[tuple[str, str], list[str]] = collections.defaultdict(list)
    for r, o in zip(results, outcomes):
        if o == "wrong":
            err = max((x["max_abs_err"] for x in r["outputs"].values() if not x["ok"] and x["max_abs_err"] is not None),
                      default=None)
            shape = next((x["error"] for x in r["outputs"].values() if x.get("error")), None)
            bad[("WRONG", "")].append(f"{r['set']} ({shape or f'max err {err:.1e}'})")
        elif o in ("error", "refused", "crash"):
            kind = {"error": "ERROR", "crash": "CRASH at load"}.get(o, o)
            bad[(kind, _gist(r["run_error"] or r["load_error"] or ""))].append(r["set"])
        elif o == "nan":
            bad[("NAN", "")].append(r["set"])
    return "; ".join(f"{kind} {', '.join(sets)}" + (f": {detail}" if detail else "")
                     for (kind, detail), sets in bad.items()) or "not run"


def render_zoo(made: dict, results: list[dict], names: list[str], seconds: dict[str, float], note: str = "") -> str:
    """The zoo section: one row per model, one column per runtime."""
    by = collections.defaultdict(list)
    for r in results:
        by[(r["runtime"], r["case"])].append(r)
    opsets = sorted({(m["opset"], m["ir"]) for m in made.values() if "opset" in m})
    fused = sorted({op for m in made.values() for op in m.get("fused", ())})
    lines = [
        ZOO_SECTION, "",
        "`python bench/runtimes.py --zoo --out bench/runtimes.md` regenerates this section. Every model of",
        "tests/zoo/cases.py, built and exported as tests/zoo/test_zoo.py does (seed 0, its example (batch, size),",
        "its `dynamic_shapes`) at the default target, float32, run at the example size and at its other size and",
        "compared with eager PyTorch at the zoo's tolerance (atol = rtol = 1e-4, diffusers 1e-3), every output",
        "and position (the zoo pads on the right). Files: "
        + ", ".join(f"opset {o} IR {i}" for o, i in opsets) + f"; fused ops: {', '.join(fused) or 'none'}.",
        "Cells as above, with the first words of each error; `example` / `other` name the size that failed, and",
        "since the default target claims every runtime here, `refused` and `CRASH at load` (the session's load",
        "killed the process) break its promise too." + (f" {note}" if note else ""), "",
        "| model | " + " | ".join(names) + " |", "| --- |" + " --- |" * len(names),
    ]
    failing = 0
    for directory, m in made.items():
        if "error" in m:
            row = [f"export failed: {m['error']}"] * len(names)
        else:
            row = [zoo_cell(by[(name, directory)]) for name in names]
        failing += any(c != "ok" for c in row)
        lines.append(f"| {m['model']} | " + " | ".join(c.replace("|", "\\|") for c in row) + " |")
    lines += ["", f"{failing} of {len(made)} models fail somewhere; exports {seconds['export']:.0f} s, runtimes "
              f"{seconds['run']:.0f} s ({platform.machine()}, torch {torch.__version__}).", ""]
    return "\n".join(lines)


def with_section(text: str, section: str) -> str:
    """``text`` with its zoo section replaced by ``section`` (appended where it has none)."""
    start = text.find(ZOO_SECTION)
    if start < 0:
        return text.rstrip("\n") + "\n\n" + section
    end = text.find("\n## ", start + len(ZOO_SECTION))
    return text[:start] + section + ("" if end < 0 else "\n" + text[end + 1:])


def zoo_section(text: str) -> str | None:
    """The zoo section of ``text``, if it has one (the full run keeps it)."""
    start = text.find(ZOO_SECTION)
    if start < 0:
        return None
    end = text.find("\n## ", start + len(ZOO_SECTION))
    return text[start:] if end < 0 else text[start:end + 1]


def pick(wanted: str | None) -> list[runtimes.Runtime]:
    """The installed runtimes named in ``wanted`` (comma-separated, e.g. "onnxruntime 1.18.1"), else all."""
    found = runtimes.installed()
    if not wanted:
        return found
    names = [n.strip() for n in wanted.split(",")]
    chosen = [r for r in found if r.name in names]
    absent = set(names) - {r.name for r in chosen}
    if absent:
        log(f"not installed, skipped: {', '.join(sorted(absent))}; {runtimes.SETUP_HINT}")
    return chosen


def default_precision(chosen: list[runtimes.Runtime]) -> list[runtimes.Runtime]:
    """OpenVINO at its default inference precision (bfloat16 on a CPU with AMX) next to each OpenVINO chosen,
    which runs at f32: what a user who sets nothing gets."""
    return [runtimes.Runtime("openvino-default", r.version, (*r.command, "--default-precision"))
            for r in chosen if r.family == "openvino"]


def precision_note(chosen: list[runtimes.Runtime]) -> str:
    """What OpenVINO's default precision is on this CPU, asked of the first OpenVINO run (bf16 where the CPU
    has bfloat16 units, e.g. AMX)."""
    for r in chosen:
        if r.family == "openvino-default":
            ask = "import openvino as ov; print(ov.Core().get_property('CPU', 'INFERENCE_PRECISION_HINT').to_string())"
            hint = subprocess.run([r.command[0], "-c", ask], capture_output=True, text=True).stdout.strip()
            return (f"`openvino` runs at f32 inference precision, `openvino-default` at OpenVINO's default, which is "
                    f"{hint or 'unknown'} on this CPU (bf16 on one with bfloat16 units, e.g. AMX); `onnx-reference` is "
                    "the ONNX reference evaluator, whose refusals name an onnxruntime op it lacks (not a promise of the "
                    "default target).")
    return ""


def run_zoo(args: argparse.Namespace) -> None:
    """--zoo: export, run and write the zoo section."""
    chosen = pick(args.runtimes)
    chosen += default_precision(chosen)
    with tempfile.TemporaryDirectory(prefix="onnxport-zoo-") as tmp:
        out = args.keep or tmp
        start = time.perf_counter()
        made = build_zoo(out)
        exported = time.perf_counter()
        dirs = [os.path.join(out, d) for d, m in made.items() if "error" not in m]
        results = runtimes.run_all(chosen, dirs, workers=args.workers)
        seconds = {"export": exported - start, "run": time.perf_counter() - exported}
    section = render_zoo(made, results, [r.name for r in chosen], seconds, precision_note(chosen))
    if args.out:
        old = open(args.out).read() if os.path.exists(args.out) else ""
        with open(args.out, "w") as f:
            f.write(with_section(old, section))
        log(f"wrote the zoo section of {args.out}")
    else:
        print(section)


def _node_version() -> str:
    try:
        return subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "absent"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="write the markdown here (default: print it)")
    parser.add_argument("--keep", default=None, help="write the case directories here instead of a temporary one")
    parser.add_argument("--zoo", action="store_true", help="the zoo's models at the default target instead")
    parser.add_argument("--runtimes", default=None,
                        help="--zoo: comma-separated runtime names (default: every installed one)")
    parser.add_argument("--workers", type=int, default=2, help="runtimes run at a time")
    args = parser.parse_args()
    if args.zoo:
        run_zoo(args)
        return
    missing = runtimes.missing()
    if missing:
        log(f"missing runtimes: {', '.join(missing)}; {runtimes.SETUP_HINT}")
    with tempfile.TemporaryDirectory(prefix="onnxport-runtimes-") as tmp:
        out = args.keep or tmp
        start = time.perf_counter()
        made = build_cases(out)
        probes = build_probes(out)
        exported = time.perf_counter()
        dirs = [os.path.join(out, d) for d in [*made, *probes]]
        results = runtimes.run_all(runtimes.installed(), dirs, workers=args.workers)
        seconds = {"export": exported - start, "run": time.perf_counter() - exported}
    text = render(made, probes, results, seconds)
    kept = zoo_section(open(args.out).read()) if args.out and os.path.exists(args.out) else None
    if kept:  # --zoo's section is measured by its own run
        text = with_section(text, kept)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
        log(f"wrote {args.out}")
    else:
        print(text)


if __name__ == "__main__":
    main()
