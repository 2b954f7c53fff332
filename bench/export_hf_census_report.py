"""The markdown report of ``export_hf_census.py``, rendered from its jsonl rows (``--report``)."""

from __future__ import annotations

import datetime
import platform
import re
from collections import Counter, defaultdict
from typing import Any

from export_hf_census_common import NEW_TOKENS, NO_CACHE, PROMPT, TASKS, task_types, with_detail

STATUSES = ("right", "wrong", "client fails", "refused", "foreign", "timeout", "eager fails", "not built", "not saved")


def _esc(text: Any, width: int = 200) -> str:
    s = str(text).replace("|", "\\|").replace("\n", " ").replace("`", "'")
    return s if len(s) <= width else s[: width - 1] + "…"


def _norm(text: str, row: dict[str, Any]) -> str:
    """A reason with what is the row's own (its type, class, numbers, temp paths) blanked, to group rows by."""
    text = re.sub(r"/tmp/[\w./-]+", "<path>", text)
    for name in sorted({row.get("model_class", ""), row["type"]}, key=len, reverse=True):
        if name:
            text = text.replace(name, "<model>")
    text = re.sub(r"\b([su]?)\d+(\.\d+)?(e-?\d+)?\b", r"\1N", text)
    return text[:220]


def reason_of(row: dict[str, Any]) -> str:
    reason = row.get("reason", "") or ""
    if row.get("status") == "refused" and reason.rstrip().endswith(":"):
        reason = with_detail(reason, [line.strip() for line in row.get("stderr_tail", [])])
    return reason


def cause(row: dict[str, Any]) -> str:
    s = row.get("status")
    if s == "refused":
        return f"refused: {_norm(reason_of(row), row)}"
    if s == "foreign":
        where = row.get("onnxport_at") or "no onnxport frame"
        return f"foreign: {row.get('error', '?')} at {where}"
    if s == "client fails":
        g = row.get("genai") or {}
        ort = row.get("ort") or {}
        ort_said = "onnxruntime loop: " + ("right" if ort.get("ok") else "wrong" if "ok" in ort else
                                           f"fails ({_norm(ort.get('error', '?'), row)[:90]})")
        if g:
            err = g.get("error", "") or ""
            missing = re.search(r"Missing Input: (\S+)", err)
            if missing:  # onnxruntime's long kernel message: the node and the input it lacked say it
                node = re.search(r"running (\w+) node", err)
                err = f"{node.group(1) if node else 'a'} node: Missing Input: {missing.group(1)}"
            return f"client fails: onnxruntime-genai {g.get('stage')}: {_norm(err, row)[:150]}; " + ort_said
        return f"client fails: {_norm(row.get('reason', ''), row)}"
    if s == "wrong":
        return "wrong (no cache, ORT loop)" if _no_cache(row) else "wrong"
    if s == "timeout":
        return "timeout"
    return f"{s}: {_norm(row.get('reason', '') or row.get('crash', ''), row)[:120]}"


def _no_cache(row: dict[str, Any]) -> bool:
    return row.get("client") == NO_CACHE


def _numbers(row: dict[str, Any]) -> str:
    if row.get("task") == "text-generation" and _no_cache(row):
        ort = row.get("ort") or {}
        parts = [f"eager {row.get('eager_tokens', [])[len(row.get('prompt', [])):]}",
                 f"onnxruntime loop (no cache, no genai_config.json) {ort.get('tokens')}"]
        if "differs_at" in ort:
            parts.append(f"from new token {ort['differs_at']}")
        if "first_logits_max_abs" in ort:
            parts.append(f"first-step logits max|diff| {ort['first_logits_max_abs']:.3g} (scale "
                         f"{ort['first_logits_scale']:.3g}, eager top-2 margin {ort['eager_top2_margin']:.3g})")
        return "; ".join(parts)
    if row.get("task") == "text-generation":
        g = row.get("genai") or {}
        parts = [f"eager {row.get('eager_tokens', [])[len(row.get('prompt', [])):]}", f"genai {g.get('tokens')}"]
        if "differs_at" in g:
            parts.append(f"from new token {g['differs_at']}")
        if "first_logits_max_abs" in g:
            parts.append(f"first-step logits max|diff| {g['first_logits_max_abs']:.3g} (scale "
                         f"{g['first_logits_scale']:.3g}, eager top-2 margin {g['eager_top2_margin']:.3g})")
        ort = row.get("ort") or {}
        parts.append("onnxruntime loop " + ("right" if ort.get("ok") else f"wrong {ort.get('tokens')}" if "ok" in ort
                                           else f"fails: {ort.get('error')}"))
        return "; ".join(parts)
    cells = []
    for name, c in (row.get("outputs") or {}).items():
        if "shape" in c:
            cells.append(f"{name}: shape eager {c['shape'][0]} vs onnx {c['shape'][1]}")
        else:
            cells.append(f"{name}: max|diff| {c['max_abs']:.3g} (scale {c['scale']:.3g})"
                         + ("" if c.get("argmax_same", True) else ", argmax differs"))
    return "; ".join(cells)


def write_md(rows: dict[tuple[str, str], dict[str, Any]], path: str) -> None:
    import onnxruntime
    import torch
    import transformers

    import onnxport

    try:
        import onnxruntime_genai as og
        genai_version = og.__version__
    except ImportError:
        genai_version = "not installed"
    by_task: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for (task, _), row in sorted(rows.items()):
        by_task[task].append(row)
    lines = [
        "# Census of `onnxport export-hf` over transformers model types",
        "",
        f"Generated {datetime.date.today().isoformat()} by `python bench/export_hf_census.py` (see its docstring): "
        f"onnxport {getattr(onnxport, '__version__', '?')}, torch {torch.__version__}, transformers "
        f"{transformers.__version__}, onnxruntime {onnxruntime.__version__}, onnxruntime-genai {genai_version}, "
        f"Python {platform.python_version()}, {platform.machine()}, one thread.",
        "",
        "Method: each task's model types are those of the mapping its transformers auto class reads "
        "(`MODEL_FOR_CAUSAL_LM_MAPPING_NAMES` for text-generation, and so on; feature-extraction: "
        "`MODEL_MAPPING_NAMES` kept to text models; the image tasks: image-segmentation is "
        "`MODEL_FOR_SEMANTIC_SEGMENTATION_MAPPING_NAMES`). Per task and type, in a process of its own with a 240 s "
        "limit: a tiny random config (`bench/census_build.py`: hidden 64, 2 layers, 4 heads, vocab <= 1024; a "
        "hybrid's last layer kept an attention layer; bos/eos/pad set to 1/2/0 where unset or past the "
        "vocabulary), the task's class with weights drawn anew and spread (`redraw_weights`, so that greedy "
        f"tokens do not turn on near ties), an eager run (text-generation: greedy `generate`, prompt "
        f"{PROMPT}, {NEW_TOKENS} new tokens, the "
        "model's generation config reduced to its token ids; encoder tasks: two padded sentences of the "
        "tokenizer; image tasks: a random batch of 2 images of the config's `image_size`, else the image processor's "
        "size, 64 where the processor allows), `save_pretrained` plus a word-level `tokenizer.json` (image tasks: "
        "the type's image processor, `preprocessor_config.json`, its sizes shrunk; a model whose 2-layer config "
        "does not build or run is tried with its layer counts kept), then "
        "`python -m onnxport export-hf DIR --task TASK -o OUT` as a new user runs it (its defaults: a checkpoint "
        "this small is loaded and the export verified). *refused*: onnxport's own error line; *foreign*: a "
        "traceback of an exception that is not onnxport's. The folder is then run by clients that are not onnxport: "
        "text-generation by onnxruntime-genai (the row's result) and a plain onnxruntime greedy loop (cache inputs "
        "empty at first, `present.*` fed back), tokens compared with eager's (a folder with no genai_config.json, "
        "of a model that returns no cache, is judged by the onnxruntime loop alone, fed the whole sequence each "
        "step: *right (no cache, ORT loop)*); encoder tasks by an `onnxruntime.InferenceSession` on the "
        "tokenizer's encoding (image tasks: on the images), each output within 1e-4 + 1e-3 x its scale of "
        "eager's. Eager's: the model transformers loads from the saved folder, as a user's would (rows since "
        "this rule; before it, the model in memory). Raw rows: `bench/export_hf_census.jsonl`.",
        "",
        "Rows by the onnxport commit they ran (+changes: src/ had uncommitted changes; -: not recorded): "
        + ", ".join(f"{c} {n}" for c, n in Counter(r.get("onnxport", "-") for r in rows.values()).most_common())
        + ".",
        "",
        "## Counts",
        "",
        "| task | types | run | built | eager ok | exported | right | right (no cache, ORT loop) | wrong | "
        "client fails | refused | foreign | timeout |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    run_s = 0.0
    for task in TASKS:
        rs = by_task.get(task, [])
        if not rs:
            continue
        n = {s: sum(r.get("status") == s for r in rs) for s in STATUSES}
        built = len(rs) - n["not built"]
        eager = built - n["eager fails"] - n["not saved"]
        exported = n["right"] + n["wrong"] + n["client fails"]
        no_cache = sum(r.get("status") == "right" and _no_cache(r) for r in rs)
        try:
            total = len(task_types(task))
        except Exception:  # noqa: BLE001
            total = "?"
        lines.append(f"| {task} | {total} | {len(rs)} | {built} | {eager} | {exported} | {n['right'] - no_cache} | "
                     f"{no_cache} | {n['wrong']} | {n['client fails']} | {n['refused']} | {n['foreign']} | "
                     f"{n['timeout']} |")
        run_s += sum(r.get("total_s", 0) for r in rs)
    lines += ["", f"*exported* = right + right (no cache) + wrong + client fails (export-hf exited 0). Time for the "
              f"rows here: {run_s / 60:.0f} min.", ""]
    for task in TASKS:
        rs = by_task.get(task, [])
        if rs:
            lines += _task_sections(task, rs)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def _task_sections(task: str, rs: list[dict[str, Any]]) -> list[str]:
    out = [f"## {task}", "", "### Failures by cause", ""]
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    excluded: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rs:
        if r.get("status") in ("not built", "eager fails", "not saved"):
            excluded[r["status"]].append(r)
        elif r.get("status") != "right":
            groups[cause(r)].append(r)
    order = {s: i for i, s in enumerate(("foreign", "refused", "wrong", "client fails", "timeout"))}
    for c in sorted(groups, key=lambda c: (order.get(c.split(":")[0].split(" (")[0], 9), -len(groups[c]), c)):
        members = groups[c]
        out += [f"#### {_esc(c, 260)}: {len(members)}", ""]
        if c.startswith("wrong"):
            out += [f"- {r['type']}: {_esc(_numbers(r), 400)}" for r in members]
        elif c.startswith("foreign"):
            for r in members:
                out.append(f"- {r['type']}: `{_esc(r.get('reason', ''), 240)}` (raised at {r.get('raised_at')})")
        elif c.startswith("refused"):
            out.append("- " + ", ".join(r["type"] for r in members))
            example = members[0]
            out.append(f"- e.g. {example['type']}: `{_esc(reason_of(example), 500)}`")
        else:
            out.append("- " + ", ".join(r["type"] for r in members))
        out.append("")
    for status, members in excluded.items():
        out += [f"#### {status} (not counted against export-hf): {len(members)}", ""]
        out += [f"- {r['type']}: {_esc(r.get('reason') or r.get('crash') or r.get('killed', ''), 200)}"
                for r in members]
        out.append("")
    out += ["### All rows", "", "| type | class | params | status | export s | detail |", "|---|---|---:|---|---:|---|"]
    for r in rs:
        params = f"{r['params'] / 1e6:.2f}M" if r.get("params") else ""
        detail = _numbers(r) if r.get("status") in ("right", "wrong") else reason_of(r) or r.get("crash", "")
        if r.get("status") == "foreign" and r.get("onnxport_at"):
            detail += f" (onnxport: {r['onnxport_at']})"
        if r.get("layers_kept"):
            detail = "[layer counts kept] " + detail
        if str(r.get("draws", "")).endswith("(its noise as inputs)"):
            detail = "[eager's random draws fed] " + detail
        status = f"{r.get('status')}" + (" (no cache, ORT loop)" if _no_cache(r) else "")
        out.append(f"| {r['type']} | {r.get('model_class', '')} | {params} | {status} | "
                   f"{r.get('export_s', '')} | {_esc(detail, 260)} |")
    out.append("")
    return out
