"""onnxport's transformers.js folders against optimum-onnx's, both loaded and timed by transformers.js.

``make bench-transformers-js`` (or ``python bench/transformers_js.py --optimum-python .venv-optimum/bin/python``)
builds a few checkpoints with random weights (nothing is downloaded), exports each twice into the folder layout
transformers.js loads (``config.json``, tokenizer or processor files, ``onnx/<session><suffix>.onnx``):

(a) by onnxport: ``onnxport.export_hf(directory, task, out, target="transformers.js", dtypes=[...])``;
(b) by optimum-onnx, the exporter transformers.js's own conversion script calls: ``optimum-cli export onnx``, run
    in the side environment ``.venv-optimum`` (requirements-optimum.txt: optimum-onnx needs transformers < 4.58),
    its files then renamed into ``onnx/`` and quantized there with onnxruntime's quantizers (below),

then loads both with transformers.js 4.3.2 and times them side by side, in Node (onnxruntime-node, the CPU) and in
headless Chromium through examples/transformers-js/index.html (onnxruntime-web's wasm, and WebGPU on SwiftShader's
adapter). It writes ``--out`` (bench/transformers_js.md): ratios onnxport / optimum per row and dtype.

The checkpoints are built inside ``.venv-optimum`` (this file run as ``build ROW DIR``), with its older transformers,
so that both exporters read the same files: the main environment's transformers reads what 4.57 saved, the
reverse does not hold. optimum's side (``optimum ROW CHECKPOINT OUT DTYPES``) runs there too.

Timing. Node: one process per row; each (dtype, repeat) loads both folders (which loads first alternates by
repeat), makes one warm-up call of each, then alternates their calls, ``--calls`` timed calls of one input each
(latency; for the generators, the first token's and each later token's time, from a streamer) and, for the
encoders, ``--batch-calls`` calls of a batch of 8 each (throughput), so that the load other work puts on the
machine hits both alike. Each figure is the median over every timed call of every repeat (load: over repeats).
Chromium: the example page opened once per (exporter, dtype, repeat), the exporters in turn, each page one load
and one call (the page's own ``timings``); medians over repeats. WebGPU pages are opened with ``log=1``, and each
exporter's first page's session log gives the node placements.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

from transformers_js_checkpoints import (  # noqa: E402
    BATCH,
    DEFAULT_ROWS,
    GENERATING,
    HERE,
    NEW_TOKENS,
    PROMPT,
    ROOT,
    ROWS,
    SENTENCE,
    SUFFIX,
    build,
    optimum_folder,
    row_inputs,
    sessions,
    write_inputs,
)

RUNNER = os.path.join(HERE, "transformers_js_runner.mjs")  # the Node side of the timing


def modules_folder() -> str:
    return os.path.join(os.environ.get("ONNXPORT_RUNTIMES", os.path.join(ROOT, ".runtimes")), "transformers-js")


def run_node(work: str, jobs: list[dict], timeout: float) -> list[dict]:
    """``jobs`` run in one Node process by transformers_js_runner.mjs; one result per job (``{error}`` where it
    failed)."""
    paths = [os.path.join(work, n) for n in ("node-jobs.json", "node-results.json")]
    with open(paths[0], "w", encoding="utf-8") as f:
        json.dump(jobs, f)
    if os.path.exists(paths[1]):
        os.remove(paths[1])
    try:
        subprocess.run([shutil.which("node") or "node", RUNNER, modules_folder(), *paths], check=True,
                       timeout=timeout, cwd=work)
    except (subprocess.SubprocessError, OSError) as error:
        print(f"  node: {error}", file=sys.stderr)
    results = []
    if os.path.exists(paths[1]):
        with open(paths[1], encoding="utf-8") as f:
            results = json.load(f)
    missing = {"error": "the Node process ended before this job (timeout or crash)"}
    return results + [missing] * (len(jobs) - len(results))


# -- the bench --------------------------------------------------------------------------------------------------

EXPORTERS = ("onnxport", "optimum")


def folder_bytes(folder: str, task: str, dtype: str) -> int:
    """Bytes of the ``onnx/`` files transformers.js loads for ``dtype`` (external data included)."""
    total = 0
    for stem in sessions(task):
        for name in (f"{stem}{SUFFIX[dtype]}.onnx", f"{stem}{SUFFIX[dtype]}.onnx_data"):
            path = os.path.join(folder, "onnx", name)
            if os.path.exists(path):
                total += os.path.getsize(path)
    return total


def prepare(row: str, work: str, args: argparse.Namespace, state: dict) -> bool:
    """The checkpoint and both folders of ``row`` under ``work/row`` (kept: a rerun reuses what is there); export
    seconds and errors go to ``state``. Whether it built or exported anything."""
    did = False
    task = ROWS[row][0]
    base = os.path.join(work, row)
    checkpoint, ours, theirs = (os.path.join(base, n) for n in ("checkpoint", "onnxport", "optimum"))
    if not os.path.exists(os.path.join(checkpoint, "config.json")):
        print(f"[{row}] building the checkpoint", file=sys.stderr)
        did = True
        subprocess.run([args.optimum_python, __file__, "build", row, checkpoint], check=True)
    info = state.setdefault("export", {}).setdefault(row, {})
    if not os.path.exists(os.path.join(ours, ".done")):
        print(f"[{row}] onnxport export", file=sys.stderr)
        did = True
        import onnxport

        shutil.rmtree(ours, ignore_errors=True)
        source = checkpoint
        if row == "whisper":
            source = _without_extractor(checkpoint, state)
        start = time.perf_counter()
        try:
            onnxport.export_hf(source, task, ours, target="transformers.js", dtypes=list(args.dtypes))
            if source != checkpoint:
                shutil.copy(os.path.join(checkpoint, EXTRACTOR), os.path.join(ours, EXTRACTOR))
            info["onnxport_s"] = time.perf_counter() - start
            with open(os.path.join(ours, ".done"), "w") as f:
                f.write(str(info["onnxport_s"]))
        except Exception as error:  # noqa: BLE001 - reported in the table
            info["onnxport_error"] = f"{type(error).__name__}: {str(error)[:400]}"
    if not os.path.exists(os.path.join(theirs, ".done")):
        print(f"[{row}] optimum export", file=sys.stderr)
        did = True
        shutil.rmtree(theirs, ignore_errors=True)
        start = time.perf_counter()
        done = subprocess.run([args.optimum_python, __file__, "optimum", row, checkpoint, theirs, *args.dtypes],
                              capture_output=True, text=True, check=False)
        if done.returncode == 0:
            info["optimum_s"] = time.perf_counter() - start
            with open(os.path.join(theirs, ".done"), "w") as f:
                f.write(str(info["optimum_s"]))
        else:
            info["optimum_error"] = done.stderr[-1500:]
            print(done.stderr[-3000:], file=sys.stderr)
    for name, folder in (("onnxport", ours), ("optimum", theirs)):
        if os.path.exists(os.path.join(folder, ".done")):
            with open(os.path.join(folder, ".done")) as f:  # the export's seconds, kept for a later run
                seconds = f.read().strip()
            if seconds and f"{name}_s" not in info:
                info[f"{name}_s"] = float(seconds)
            info.setdefault("bytes", {})[name] = {d: folder_bytes(folder, task, d) for d in args.dtypes}
            if name not in info.get("float_bytes", {}):
                info.setdefault("float_bytes", {})[name] = {
                    d: sum(float_weight_bytes(os.path.join(folder, "onnx", f"{s}{SUFFIX[d]}.onnx"))
                           for s in sessions(task))
                    for d in args.dtypes}
            if "decoder_model_merged" in sessions(task) and name not in info.get("cross_cache", {}):
                info.setdefault("cross_cache", {})[name] = cross_cache_outputs(
                    os.path.join(folder, "onnx", "decoder_model_merged.onnx"))
            for d in args.dtypes:
                if d != "fp32" and d not in info.get("ops_by_dtype", {}).get(name, {}):
                    info.setdefault("ops_by_dtype", {}).setdefault(name, {})[d] = {
                        s: op_counts(os.path.join(folder, "onnx", f"{s}{SUFFIX[d]}.onnx")) for s in sessions(task)}
            if name not in info.get("ops", {}):
                info.setdefault("ops", {})[name] = {s: op_counts(os.path.join(folder, "onnx", f"{s}.onnx"))
                                                    for s in sessions(task)}
    return did


EXTRACTOR = "preprocessor_config.json"
WHISPER_NOTE = (
    "- **Whisper: onnxport fails on the checkpoint as saved** (`ValueError: Whisper expects the mel input features "
    "to be of length 3000, but found 100`): export_hf takes its example audio from the checkpoint's feature "
    "extractor (`onnxport.hf.examples._extractor_form`), which it calls with `padding=True` (the longest clip, "
    "1 s: 100 frames) where a real Whisper extractor (`chunk_length` 30) pads to 3000 frames and transformers' "
    "Whisper encoder refuses anything else. The tests' Whisper has a 1 s window, so they do not meet it. Here "
    "onnxport exports from a copy of the checkpoint without `preprocessor_config.json` (its fallback: a "
    "spectrogram of `num_mel_bins` x 2 `max_source_positions`, the right shape), and the extractor's file is then "
    "copied into onnxport's folder. A user exporting openai/whisper-tiny as it is would hit the error.")


def _without_extractor(checkpoint: str, state: dict) -> str:
    """A copy of ``checkpoint`` (links) without its feature extractor's file: see WHISPER_NOTE."""
    copy = checkpoint + "-no-extractor"
    shutil.rmtree(copy, ignore_errors=True)
    os.makedirs(copy)
    for name in os.listdir(checkpoint):
        if name != EXTRACTOR:
            os.symlink(os.path.join(checkpoint, name), os.path.join(copy, name))
    if WHISPER_NOTE not in state.setdefault("notes", []):
        state["notes"].append(WHISPER_NOTE)
    return copy


def cross_cache_outputs(path: str) -> str | None:
    """How the cache branch of the merged decoder ``path`` returns the cross-attention cache
    (``present.*.encoder.*``): the producing op types and, for constants, their shapes; None without an If."""
    import collections

    import onnx
    from onnx import numpy_helper

    model = onnx.load(path, load_external_data=False)
    ifs = [n for n in model.graph.node if n.op_type == "If"]
    if not ifs:
        return None
    kinds: collections.Counter = collections.Counter()
    for attribute in ifs[0].attribute:  # the branch without encoder_hidden_states is the one with the cache
        graph = attribute.g
        if any(i == "encoder_hidden_states" for n in graph.node for i in n.input):
            continue
        made = {o: n for n in graph.node for o in n.output}
        for out in graph.output:
            if ".encoder." not in out.name:
                continue
            node = made.get(out.name)
            if node is None:
                kinds["the input itself"] += 1
            elif node.op_type == "Constant":
                shape = next((numpy_helper.to_array(a.t).shape for a in node.attribute
                              if a.type == onnx.AttributeProto.TENSOR), None)
                kinds[f"Constant of shape {shape}"] += 1
            else:
                kinds[node.op_type] += 1
    return ", ".join(f"{v} x {k}" for k, v in kinds.items())


def float_weight_bytes(path: str) -> int:
    """Bytes of the float32 and float16 initializers (and Constant tensors) of ``path``: what its quantization left
    in float."""
    import onnx

    model = onnx.load(path, load_external_data=False)
    floats = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)
    tensors = list(model.graph.initializer) + [a.t for n in model.graph.node if n.op_type == "Constant"
                                               for a in n.attribute if a.type == onnx.AttributeProto.TENSOR]
    total = 0
    for t in tensors:
        if t.data_type in floats:
            count = 1
            for d in t.dims:
                count *= d
            total += count * (4 if t.data_type == onnx.TensorProto.FLOAT else 2)
    return total


def op_counts(path: str) -> dict[str, int]:
    """Op type -> how many nodes of the float32 file ``path`` have it, If/Loop bodies included (domain-qualified
    for the contrib ops)."""
    import collections

    import onnx

    counts: collections.Counter = collections.Counter()

    def walk(graph: object) -> None:
        for node in graph.node:
            counts[f"{node.domain}.{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type] += 1
            for attribute in node.attribute:
                if attribute.type == onnx.AttributeProto.GRAPH:
                    walk(attribute.g)
                for sub in attribute.graphs:
                    walk(sub)

    walk(onnx.load(path, load_external_data=False).graph)
    return dict(counts)


def node_row(row: str, work: str, args: argparse.Namespace, inputs: dict) -> dict:
    """``row``'s Node timings: {dtype: {exporter: [a result per repeat]}}. Each (dtype, repeat) loads both folders
    in one job (which loads first alternates by repeat) and alternates their calls, so that the machine's load
    (2 shared cores) hits both alike."""
    task = ROWS[row][0]
    single, batch, options = row_inputs(task, inputs)
    ready = [e for e in EXPORTERS if os.path.exists(os.path.join(work, row, e, ".done"))]
    jobs, orders = [], []
    for dtype in args.node_dtypes:
        for repeat in range(args.repeat):
            order = ready if repeat % 2 == 0 else ready[::-1]
            jobs.append({"folders": [os.path.join(work, row, e) for e in order], "task": task, "dtype": dtype,
                         "single": single, "batch": batch, "options": options, "base": work,
                         "generating": task in GENERATING, "calls": args.calls,
                         "batch_calls": args.batch_calls if batch else 0})
            orders.append((dtype, order))
    print(f"[{row}] Node: {len(jobs)} jobs", file=sys.stderr)
    found: dict = {}
    results = run_node(work, jobs, args.timeout)
    for (dtype, order), result in zip(orders, results, strict=True):
        if isinstance(result, dict):  # the process ended before the job
            result = [result] * len(order)
        for exporter, one in zip(order, result, strict=True):
            found.setdefault(dtype, {}).setdefault(exporter, []).append(one)
    return found


def browser_row(row: str, work: str, args: argparse.Namespace, inputs: dict, webgpu: bool) -> dict:
    """``row``'s page results in Chromium: {dtype: {exporter: [a page result per repeat]}}, plus one page per
    exporter with ``log=1`` on WebGPU (its session log, for the node placements)."""
    import pathlib

    sys.path.insert(0, ROOT)
    from tests.runtimes.browser import open_pages

    task = ROWS[row][0]
    text = {"text-classification": SENTENCE, "image-classification": inputs["images"][0],
            "automatic-speech-recognition": inputs["wav"], "text-generation": PROMPT}[task]
    _, _, options = row_inputs(task, inputs)
    queries, keys = [], []
    for dtype in args.browser_dtypes:
        for repeat in range(args.webgpu_repeat if webgpu else args.browser_repeat):
            for exporter in (EXPORTERS if repeat % 2 == 0 else EXPORTERS[::-1]):
                if os.path.exists(os.path.join(work, row, exporter, ".done")):
                    queries.append({"model": f"{row}/{exporter}", "task": task, "dtype": dtype, "input": text,
                                    "options": json.dumps(options), **({"log": "1"} if webgpu else {})})
                    keys.append((dtype, exporter))
    print(f"[{row}] Chromium {'WebGPU' if webgpu else 'wasm'}: {len(queries)} pages", file=sys.stderr)
    found: dict = {}
    try:
        results = open_pages(pathlib.Path(work), queries, webgpu=webgpu)
    except Exception as error:  # noqa: BLE001 - reported in the table
        results = [{"error": f"{type(error).__name__}: {str(error)[:300]}"}] * len(queries)
    from tests.runtimes.browser import placements

    for (dtype, exporter), result in zip(keys, results, strict=False):
        logs = result.pop("logs", None)
        if logs is not None and exporter not in found.get("log", {}):  # WebGPU: each exporter's first page's log
            found.setdefault("log", {})[exporter] = [{
                "dtype": dtype, "error": result.get("error"),
                "placements": [{p: dict(c) for p, c in s.items()} for s in placements(logs)]}]
        found.setdefault(dtype, {}).setdefault(exporter, []).append(result)
    return found


# -- the report -------------------------------------------------------------------------------------------------


def _median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _node_figures(results: list[dict]) -> dict:
    """Medians over every timed call of every repeat (load: over repeats), and the first error."""
    ok = [r for r in results if "error" not in r]
    if not ok:
        return {"error": results[0].get("error", "no result") if results else "no result"}
    figures = {"load_ms": _median([r["load_ms"] for r in ok]),
               "run_ms": _median([v for r in ok for v in r["run_ms"]]),
               "first_token_ms": _median([v for r in ok for v in r["first_token_ms"]]),
               "per_token_ms": _median([v for r in ok for v in r["per_token_ms"]]),
               "tokens": ok[0].get("tokens"), "output": ok[0].get("output")}
    batch = _median([v for r in ok for v in r["batch_ms"]])
    figures["items_per_s"] = BATCH / batch * 1000 if batch else None
    return figures


def _page_figures(results: list[dict]) -> dict:
    ok = [r for r in results if "error" not in r and r.get("timings")]
    if not ok:
        return {"error": (results[0].get("error") if results else None) or "no result"}
    t = [r["timings"] for r in ok]
    return {"load_ms": _median([x.get("load_ms") for x in t]), "run_ms": _median([x.get("run_ms") for x in t]),
            "first_token_ms": _median([x.get("first_token_ms") for x in t]),
            "per_token_ms": _median([x.get("per_token_ms") for x in t]), "tokens": t[0].get("tokens"),
            "device": ok[0].get("device"), "output": json.dumps(ok[0].get("output"))[:200]}


def _cell(a: float | None, b: float | None, digits: int = 0) -> str:
    if a is None or b is None:
        return "n/a"
    ratio = f"{a / b:.2f}x" if b else "n/a"
    return f"{a:.{digits}f} / {b:.{digits}f} = **{ratio}**"


def _error(value: str | None) -> str:
    text = (value or "").replace("|", "\\|").replace("\n", " ")[:300]
    if "Waiting failed" in text:  # run_browser.mjs's waitForFunction
        text = "the page did not finish within run_browser.mjs's 300 s: " + text
    return text


def timing_table(state: dict, key: str, figures_of) -> list[str]:
    """A markdown table of ``state[key]`` ({row: {dtype: {exporter: results}}}), cells onnxport / optimum."""
    lines = [("| row | dtype | load ms | latency ms (1 input) | throughput items/s (batch of 8) | first token ms "
             "| per token ms | tokens | same output |"), "|---|---|---|---|---|---|---|---|---|"]
    errors = []
    for row, by_dtype in state.get(key, {}).items():
        for dtype, by_exporter in by_dtype.items():
            if dtype == "log":
                continue
            f = {e: figures_of(by_exporter.get(e, [])) for e in EXPORTERS}
            if any("error" in v for v in f.values()):
                for e, v in f.items():
                    if "error" in v:
                        errors.append(f"- {row} {dtype} {e}: `{_error(v['error'])}`")
                lines.append(f"| {row} | {dtype} | " + " | ".join(["failed (below)"] * 7) + " |")
                continue
            a, b = f["onnxport"], f["optimum"]
            generating = ROWS[row][0] in GENERATING
            same = "yes" if a.get("output") == b.get("output") else "no"
            lines.append("| " + " | ".join([
                row, dtype, _cell(a["load_ms"], b["load_ms"]),
                "" if generating else _cell(a["run_ms"], b["run_ms"], 1),
                _cell(a.get("items_per_s"), b.get("items_per_s"), 1) if a.get("items_per_s") else "",
                _cell(a["first_token_ms"], b["first_token_ms"], 1) if generating else "",
                _cell(a["per_token_ms"], b["per_token_ms"], 2) if generating else "",
                f"{a.get('tokens')} / {b.get('tokens')}" if generating else "", same]) + " |")
    return lines + ([""] + errors if errors else [])


def placement_lines(state: dict) -> list[str]:
    lines = [("| row | exporter, dtype | per session (#: transformers.js's creation order): nodes on CPU / on WebGPU "
             "(the CPU nodes' op types) |"), "|---|---|---|"]
    for row, by_dtype in state.get("webgpu", {}).items():
        for exporter, results in by_dtype.get("log", {}).items():
            result = results[0]
            if result.get("error"):
                lines.append(f"| {row} | {exporter} | failed: `{_error(result['error'])}` |")
                continue
            cells = []
            for i, session in enumerate(result["placements"]):
                cpu: dict = {}  # every provider but WebGPU's (onnxruntime names the CPU's "CPU")
                for provider, kinds in session.items():
                    if provider.lower() != "webgpu":
                        for kind, count in kinds.items():
                            cpu[kind] = cpu.get(kind, 0) + count
                gpu = sum(n for p, k in session.items() if p.lower() == "webgpu" for n in k.values())
                kinds = ", ".join(f"{k} {v}" for k, v in sorted(cpu.items(), key=lambda kv: -kv[1])[:6])
                cells.append(f"#{i}: {sum(cpu.values())} / {gpu}" + (f" ({kinds})" if kinds else ""))
            lines.append(f"| {row} | {exporter} {result.get('dtype', '')} | {'; '.join(cells) or 'no session log'} |")
    return lines


def _op_difference(state: dict, row: str, dtype: str) -> str:
    """The op types whose counts differ most between the two ``dtype`` files of ``row`` (the first session)."""
    ops = state.get("export", {}).get(row, {}).get("ops_by_dtype" if dtype != "fp32" else "ops", {})
    if dtype != "fp32":
        ops = {e: v.get(dtype, {}) for e, v in ops.items()}
    if len(ops) < 2:
        return ""
    session = next(iter(ops["onnxport"]), None)
    a, b = ops["onnxport"].get(session, {}), ops["optimum"].get(session, {})
    if not a or not b:
        return ""
    compute = ("MatMul", "Attention", "Softmax", "Transpose", "Split", "Gelu", "Norm", "Conv", "Rotary")
    kinds = sorted(set(a) | set(b), key=lambda k: (not any(c in k for c in compute), -abs(a.get(k, 0) - b.get(k, 0))))
    diff = ", ".join(f"{k} {a.get(k, 0)} vs {b.get(k, 0)}" for k in kinds[:6] if a.get(k, 0) != b.get(k, 0))
    return (f" (the {dtype} {session} files, compute ops first: {sum(a.values())} nodes against {sum(b.values())}; "
            f"{diff})")


def findings(state: dict, args: argparse.Namespace) -> list[str]:
    """Every cell where onnxport's folder is more than 10% larger or slower than optimum's (the higher-is-better
    throughput: 10% lower), measured, not judged; then the weights each quantized file keeps in float."""
    lines = []
    for row, info in state.get("export", {}).items():
        sizes = info.get("bytes", {})
        for d in args.dtypes:
            a, b = sizes.get("onnxport", {}).get(d), sizes.get("optimum", {}).get(d)
            if a and b and a / b > 1.1:
                fa, fb = (info.get("float_bytes", {}).get(e, {}).get(d) for e in EXPORTERS)
                why = (f" (float weights left: {fa / 2**20:.1f} MB against {fb / 2**20:.1f} MB)"
                       if fa is not None and fb is not None else "")
                lines.append(f"- {row} {d} file: {a / 2**20:.1f} MB against {b / 2**20:.1f} MB, "
                             f"**{a / b:.2f}x**{why}.")
    if lines:
        lines.append("- The float weights the quantized files keep: onnxport's q8 leaves the token embedding tables "
                     "(Gather's weights: Llama's `embed_tokens`, checked by hand) in float32 where onnxruntime's "
                     "`quantize_dynamic` makes them int8 as well; 4-bit MatMulNBits leaves Gather's tables float on "
                     "both sides.")
    metrics = (("load_ms", "load", 1), ("run_ms", "latency", 1), ("first_token_ms", "first token", 1),
               ("per_token_ms", "per token", 1), ("items_per_s", "throughput", -1))
    for key, title, figures_of in (("node", "Node", _node_figures), ("wasm", "Chromium wasm", _page_figures),
                                   ("webgpu", "Chromium WebGPU (SwiftShader)", _page_figures)):
        for row, by_dtype in state.get(key, {}).items():
            generating = ROWS[row][0] in GENERATING
            for dtype, by_exporter in by_dtype.items():
                if dtype == "log":
                    continue
                a, b = (figures_of(by_exporter.get(e, [])) for e in EXPORTERS)
                for metric, name, sign in metrics:
                    if generating and metric == "run_ms":
                        continue
                    x, y = a.get(metric), b.get(metric)
                    if x and y and (x / y if sign > 0 else y / x) > 1.1:
                        lines.append(f"- {title}, {row} {dtype}, {name}: {x:.1f} against {y:.1f}, **{x / y:.2f}x**"
                                     + (_op_difference(state, row, dtype) if key != "node" else "") + ".")
    for row, info in state.get("export", {}).items():
        cross = info.get("cross_cache", {})
        if cross.get("onnxport") and cross.get("optimum") and cross["onnxport"] != cross["optimum"]:
            lines.append(
                f"- {row}: the merged decoder's cache branch (every step after the first) returns the cross-attention "
                f"cache (`present.*.encoder.*`) as {cross['onnxport']} in onnxport's file, as {cross['optimum']} in "
                "optimum's. transformers.js keeps the first step's cross-attention cache and ignores these outputs "
                "on later steps, but onnxruntime still produces them and onnxruntime-node / -web hand every output "
                "to JavaScript: onnxport's file copies the whole cross-attention cache (layers x 2 tensors of "
                "heads x encoder length x head size) out at each new token, optimum's empty placeholders cost "
                "nothing. The two cache branches otherwise hold the same 49 MatMuls, and neither projects the "
                "encoder's states again. Checked once by hand (not part of this script's run): onnxport's fp32 "
                "Whisper decoder with those outputs replaced by empty constants ran at 13.9 ms per token in Node "
                "against 29.0 ms as exported (optimum's: 13.2 ms), with the same text; so this copy is the cause of "
                "the per-token gap on this row.")
    return lines or ["- nowhere by more than 10%."]


def render(state: dict, args: argparse.Namespace) -> str:
    """The markdown report."""
    v = state.get("versions", {})
    out = ["# transformers.js: onnxport's folders vs optimum-onnx's", "",
           "Generated by `make bench-transformers-js` (`bench/transformers_js.py`); do not edit by hand.", "",
           ("The same random-weight checkpoint of each row is exported (a) by onnxport, `export_hf(directory, task, "
           "out, target=\"transformers.js\", dtypes=[...])`, and (b) by optimum-onnx (`optimum-cli export onnx "
           "--model DIR --task TASK`, the exporter transformers.js's own conversion script calls), whose files are "
           "renamed into transformers.js's layout (`onnx/model.onnx`; Whisper: `onnx/encoder_model.onnx` and "
           "`onnx/decoder_model_merged.onnx`) beside the checkpoint's config, generation config and tokenizer or "
           "processor files. optimum's q8 is `onnxruntime.quantization.quantize_dynamic` (int8 weights per tensor, "
           "activations quantized at run time: the kind onnxport's q8 is) and its q4 is onnxruntime's "
           "`MatMulNBitsQuantizer` (4 bits, symmetric, blocks of 32, as transformers.js's scripts/quantize.py), both "
           "run on optimum's float32 file in .venv-optimum. Both folders are then loaded by transformers.js "
           f"{v.get('transformers.js', '?')} with `pipeline(task, folder, {{dtype}})`."), "",
           ("Every cell is **onnxport / optimum = ratio**: below 1x onnxport's folder is smaller or faster (for "
           "throughput, items per second, above 1x onnxport is faster)."), "",
           "## Method", "",
           (f"- Node {v.get('node', '?')}: transformers.js on onnxruntime-node {v.get('onnxruntime-node', '?')} "
           f"(`device: 'cpu'`, its default threads). One Node process per row; each (dtype, repeat) loads onnxport's "
           f"folder and optimum's (which loads first alternates by repeat), makes one warm-up call of each, then "
           f"alternates their calls: {args.calls} timed calls of one input each and, for the encoders, "
           f"{args.batch_calls} timed calls of a batch of {BATCH} each (throughput = {BATCH} / median batch time), "
           "so that the load other work puts on the machine hits both alike. "
           f"{args.repeat} repeats; every figure is the median over all timed calls (load: over the repeats)."),
           (f"- Generators: greedy, a fixed 16-word prompt (Llama), 5 s of noise (Whisper, padded to its 30 s window "
           f"by transformers.js's feature extractor), {NEW_TOKENS} new tokens (the generation configs have no end "
           "token). "
           "First token: from the call to the streamer's first new token (for Whisper this includes the encoder and "
           "the feature extraction); per token: the mean gap between the later tokens."),
           f"- Chromium (headless, {v.get('chromium', '?')}): examples/transformers-js/index.html driven by "
           "`tests.runtimes.browser.open_pages`, onnxruntime-web's wasm backend (1 thread: the page is not "
           "cross-origin isolated) and WebGPU on SwiftShader's adapter. Each page loads the folder and makes one call "
           "(no warm-up: the run includes first-call costs); "
           f"{args.browser_repeat} pages per exporter and dtype on wasm and {args.webgpu_repeat} on WebGPU "
           "(SwiftShader is slow), interleaved; medians of the page's own `timings`. Chromium's rows and dtypes: "
           + ", ".join(f"{k} {', '.join(sorted(d for d in v[r] if d != 'log'))}" for k in ("wasm", "webgpu")
                       for v in [state.get(k, {})] for r in v) + ".",
           ("- WebGPU placements: the WebGPU pages are opened with `log=1` (so their times include onnxruntime's "
           "verbose logging), each exporter's first page's session log parsed by "
           "`tests.runtimes.browser.placements`: per session (in the order transformers.js creates them), the nodes "
           "onnxruntime placed on the CPU provider against WebGPU (copies between devices counted among the CPU "
           "ones)."),
           "- Same output: the last call's result (rounded to 4 digits) equal between the two folders.", "",
           "## Machine", "",
           (f"{v.get('machine', '?')}. **2 CPU cores, shared with other work**: absolute times are noisy, ratios "
           "(measured interleaved) are the figures to read. **SwiftShader's WebGPU is a CPU implementation of "
           "the GPU API**: its times say nothing of a real GPU's; they show what each folder asks of the WebGPU "
           "provider (and what falls back to the CPU)."), "",
           ("Wall-clock minutes of each stage, all rows, as last measured (exports: building the checkpoints and both "
            "exports, near 0 where a run reused them): "
            + ", ".join(f"{k} {sum(v.values()) / 60:.1f}" for k, v in state.get("stage_s", {}).items()) + "."), "",
           "Versions: " + ", ".join(f"{k} {val}" for k, val in v.items() if k != "machine") + ".", "",
           "## Rows", ""]
    for row in state.get("rows", []):
        out.append(f"- **{row}** ({ROWS[row][0]}; optimum task `{ROWS[row][1]}`): {ROWS[row][2]}.")
    out += ["", "## Export and file sizes", "",
            ("Export seconds include onnxport's verification against eager PyTorch and writing every dtype; optimum's "
            "include its own validation, the renaming and the quantization (a separate process)."), "",
            "| row | export s | " + " | ".join(f"{d} MB" for d in args.dtypes) + " |",
            "|---|---|" + "---|" * len(args.dtypes)]
    errors = []
    for row, info in state.get("export", {}).items():
        sizes = info.get("bytes", {})
        cells = [_cell(info.get("onnxport_s"), info.get("optimum_s"))]
        for d in args.dtypes:
            a, b = sizes.get("onnxport", {}).get(d), sizes.get("optimum", {}).get(d)
            cells.append(_cell(a / 2**20 if a else None, b / 2**20 if b else None, 1))
        out.append(f"| {row} | " + " | ".join(cells) + " |")
        for e in EXPORTERS:
            if info.get(f"{e}_error"):
                errors.append(f"- {row} {e}: `{_error(info[f'{e}_error'])}`")
    out += ([""] + errors if errors else [])
    out += ["", "## The float32 graphs", "",
            ("Node counts of each session's float32 file (If branches included), and the op types whose counts "
            "differ most between the two."), "",
            "| row | session | nodes onnxport / optimum | op types: onnxport vs optimum (largest differences) |",
            "|---|---|---|---|"]
    for row, info in state.get("export", {}).items():
        ops = info.get("ops", {})
        if len(ops) < 2:
            continue
        for session in ops["onnxport"]:
            a, b = ops["onnxport"].get(session, {}), ops["optimum"].get(session, {})
            kinds = sorted(set(a) | set(b), key=lambda k: -abs(a.get(k, 0) - b.get(k, 0)))
            diff = ", ".join(f"{k} {a.get(k, 0)} vs {b.get(k, 0)}" for k in kinds[:8] if a.get(k, 0) != b.get(k, 0))
            out.append(f"| {row} | {session} | {_cell(sum(a.values()), sum(b.values()))} | {diff} |")
    for key, title in (("node", "Node (onnxruntime-node, CPU)"), ("wasm", "Chromium, wasm"),
                       ("webgpu", "Chromium, WebGPU on SwiftShader (a CPU adapter: not GPU times)")):
        if state.get(key):
            out += ["", f"## {title}", "", *timing_table(state, key, _node_figures if key == "node" else _page_figures)]
    if state.get("webgpu"):
        out += ["", "## WebGPU node placements", "", *placement_lines(state)]
    if state.get("notes"):
        out += ["", "## Workarounds", "", *state["notes"]]
    out += ["", "## Where onnxport is behind", "", *findings(state, args)]
    return "\n".join(out) + "\n"


def _npm_version(name: str) -> str:
    try:
        with open(os.path.join(modules_folder(), "node_modules", name, "package.json"), encoding="utf-8") as f:
            return json.load(f)["version"]
    except (OSError, ValueError, KeyError):
        return "?"


def versions() -> dict:
    import platform

    import onnxruntime
    import torch
    import transformers

    import onnxport

    def side(code: str) -> str:
        try:
            return subprocess.run([ARGS.optimum_python, "-c", code], capture_output=True, text=True,
                                  check=True).stdout.strip()
        except (subprocess.SubprocessError, OSError):
            return "?"

    package = os.path.join(modules_folder(), "node_modules", "@huggingface", "transformers", "package.json")
    with open(package, encoding="utf-8") as f:
        tjs = json.load(f)["version"]
    chromium = subprocess.run(["chromium", "--version"], capture_output=True, text=True, check=False).stdout.strip()
    node = subprocess.run(["node", "--version"], capture_output=True, text=True, check=False).stdout.strip()
    meta = "import importlib.metadata as m; print(*(m.version(p) for p in ('optimum-onnx', 'optimum', 'transformers')))"
    opt = side(meta).split()
    return {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Linux",
            "onnxport": getattr(onnxport, "__version__", "?"), "torch": torch.__version__,
            "transformers (onnxport's side)": transformers.__version__, "onnxruntime (Python)": onnxruntime.__version__,
            "optimum-onnx": opt[0] if opt else "?", "optimum": opt[1] if len(opt) > 1 else "?",
            "transformers (optimum's side)": opt[2] if len(opt) > 2 else "?", "transformers.js": tjs, "node": node,
            "onnxruntime-node": _npm_version("onnxruntime-node"), "onnxruntime-web": _npm_version("onnxruntime-web"),
            "chromium": chromium}


ARGS: argparse.Namespace


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "build":
        return build(argv[1], argv[2])
    if argv and argv[0] == "optimum":
        return optimum_folder(argv[1], argv[2], argv[3], argv[4:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--optimum-python", default=os.path.join(ROOT, ".venv-optimum", "bin", "python"))
    parser.add_argument("--rows", default=",".join(DEFAULT_ROWS), help=f"comma-separated, of {', '.join(ROWS)}")
    parser.add_argument("--dtypes", nargs="+", default=["fp32", "q8", "q4"], help="the dtypes exported")
    parser.add_argument("--node-dtypes", nargs="+", default=None, help="the dtypes timed in Node (default: all)")
    parser.add_argument("--browser-dtypes", nargs="+", default=["q4"], help="the dtypes timed in Chromium")
    parser.add_argument("--browser-rows", default=None, help="rows opened in Chromium (default: --rows)")
    parser.add_argument("--webgpu-rows", default=None, help="rows opened on WebGPU (default: --rows)")
    parser.add_argument("--webgpu-repeat", type=int, default=1,
                        help="timed pages per exporter and dtype on WebGPU (SwiftShader: slow), besides the log page")
    parser.add_argument("--no-browser", action="store_true")
    parser.add_argument("--no-node", action="store_true")
    parser.add_argument("--resume", action="store_true",
                        help="keep the rows' results in WORK/state.json and measure only what is missing there")
    parser.add_argument("--no-webgpu", action="store_true")
    parser.add_argument("--repeat", type=int, default=3, help="loads per exporter and dtype in Node")
    parser.add_argument("--calls", type=int, default=5, help="timed calls per load in Node")
    parser.add_argument("--batch-calls", type=int, default=2, help="timed batch calls per load in Node (encoders)")
    parser.add_argument("--browser-repeat", type=int, default=2, help="pages per exporter and dtype in Chromium")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per Node process")
    parser.add_argument("--work", default=os.path.join("/tmp", "onnxport-bench-transformers-js"),
                        help="checkpoints and folders (kept between runs: delete it to export again)")
    parser.add_argument("--out", default=os.path.join(HERE, "transformers_js.md"))
    global ARGS
    args = ARGS = parser.parse_args(argv)
    args.node_dtypes = args.node_dtypes or args.dtypes
    rows = [r for r in args.rows.split(",") if r]
    browser_rows = [r for r in (args.browser_rows or args.rows).split(",") if r]
    webgpu_rows = [r for r in (args.webgpu_rows or args.rows).split(",") if r]
    os.makedirs(args.work, exist_ok=True)
    work = os.path.abspath(args.work)
    state: dict = {}
    if args.resume and os.path.exists(os.path.join(work, "state.json")):
        with open(os.path.join(work, "state.json"), encoding="utf-8") as f:
            state = json.load(f)
    state.update({"rows": list(dict.fromkeys([*state.get("rows", []), *rows])), "versions": versions()})
    inputs = write_inputs(work)
    started = time.perf_counter()

    def save() -> None:
        with open(os.path.join(work, "state.json"), "w", encoding="utf-8") as f:
            json.dump(state, f, indent=1, default=str)
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(render(state, args))

    def have(key: str, row: str) -> bool:  # kept from the run resumed
        return args.resume and row in state.get(key, {})

    def stage(name: str, row: str, measure: object) -> None:
        began = time.perf_counter()
        result = measure()
        if isinstance(result, dict):
            state.setdefault(name, {})[row] = result
        if result:  # prepare: True where it built or exported something (a rerun reusing them keeps the old time)
            state.setdefault("stage_s", {}).setdefault(name, {})[row] = time.perf_counter() - began
        save()

    for row in rows:
        stage("exports", row, lambda row=row: prepare(row, work, args, state))
        if not args.no_node and not have("node", row):
            stage("node", row, lambda row=row: node_row(row, work, args, inputs))
        if not args.no_browser and row in browser_rows and not have("wasm", row):
            stage("wasm", row, lambda row=row: browser_row(row, work, args, inputs, webgpu=False))
        if not args.no_browser and not args.no_webgpu and row in webgpu_rows and not have("webgpu", row):
            stage("webgpu", row, lambda row=row: browser_row(row, work, args, inputs, webgpu=True))
    save()
    print(f"wrote {args.out} in {time.perf_counter() - started:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
