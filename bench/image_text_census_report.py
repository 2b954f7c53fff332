"""The markdown report of ``image_text_census.py``, rendered from its jsonl rows (``--report``)."""

from __future__ import annotations

import datetime
import platform
import re
from collections import Counter, defaultdict
from typing import Any

from export_hf_census_report import _esc, _norm

EXCLUDED = ("not built", "eager fails", "not saved")


def stage_of(row: dict[str, Any]) -> tuple[str, str]:
    """(the stage where the row stopped, its first line of reason), for the onnxport column had the type been
    attempted (the bypass where the CLI refused it for support)."""
    stage, reason = _stage_of(row)
    return stage, _short(reason)


def _stage_of(row: dict[str, Any]) -> tuple[str, str]:
    s = row.get("status")
    if s in EXCLUDED:
        return s, row.get("reason") or row.get("crash") or row.get("killed", "")
    if s == "no inputs":
        cli = row.get("cli") or {}
        said = f"; the CLI: {cli['status']}" + (f" ({cli['reason']})" if cli.get("reason") else "") if cli else ""
        return s, (row.get("reason") or row.get("crash") or row.get("killed", "")) + said
    export = row.get("bypass") or row.get("cli") or {}
    where = "bypass" if row.get("bypass") else "cli"
    if export.get("status") != "exported":
        reason = export.get("reason", "") or row.get("killed", "")
        at = export.get("onnxport_at") or export.get("at") or export.get("raised_at")
        return f"{where} {export.get('status')}", reason + (f" [{at}]" if at else "")
    runner = row.get("runner") or {}
    for case, r in runner.items():
        if r["status"] == "client fails":
            return "runner client fails", f"{case}: {r.get('reason', '')}"
    for case, r in runner.items():
        if r["status"] == "wrong":
            return "runner wrong", f"{case}: parts at {r.get('parts_at')}; eager {r.get('eager')} onnx {r.get('onnx')}"
    if not runner:
        return "runner not run", row.get("killed", "")
    return "right", ""


def _short(text: str) -> str:
    return re.sub(r"\S*/site-packages/", "", text)


def cause(row: dict[str, Any]) -> str:
    """The group of a failure: its stage and its reason with the row's own names and numbers blanked (a capture
    error's, up to where torch's words begin)."""
    stage, reason = stage_of(row)
    if stage == "runner wrong":
        return "wrong tokens"
    if stage == "runner client fails":
        return f"{stage}: {_norm(reason.split(': ', 1)[-1], row)[:100]}"
    return f"{stage}: {_norm(reason.split(' tried:')[0].split(', and onnxport')[0], row)[:160]}"


def exporters_cell(row: dict[str, Any]) -> str:
    ex = row.get("exporters") or {}
    if not ex:
        return ""
    if ex.get("status") == "exported":
        return f"exported ({', '.join(ex.get('components', []))}); {ex.get('run', '')}"
    return f"{ex.get('status')}: {ex.get('cause') or ex.get('reason', '')}"


def _counts(rows: list[dict[str, Any]]) -> list[str]:
    n = len(rows)
    status = Counter(r.get("status") for r in rows)
    would = Counter(r.get("would") for r in rows if r.get("would"))
    cli_right = sum(r.get("would") == "right" and not r.get("bypass") for r in rows)
    refused = Counter(_norm((r.get("cli") or {}).get("reason", ""), r) for r in rows
                      if (r.get("cli") or {}).get("status") == "refused")
    ex = Counter((r.get("exporters") or {}).get("status", "not run") for r in rows
                 if r.get("status") not in EXCLUDED + ("no inputs",))
    ex_run = Counter(str((r.get("exporters") or {}).get("run", "")).split(":")[0] for r in rows
                     if (r.get("exporters") or {}).get("status") == "exported")
    attempted = [r for r in rows if r.get("would")]
    bare = [r for r in rows if r.get("status") == "no inputs"]
    bare_cli = Counter((r.get("cli") or {}).get("status", "not run") for r in bare)
    cli_refused = sum((r.get("cli") or {}).get("status") == "refused" for r in rows)
    lines = [
        f"- types: {n}; not built: {status['not built']}; no inputs (the generic prompt recipe does not fit): "
        f"{status['no inputs']}; eager fails: {status['eager fails']}; not saved: {status['not saved']}",
        f"- today (`export-hf` CLI): right in onnxport's runner on both cases: {cli_right}; "
        f"refused: {cli_refused} (of them without the census's inputs: {bare_cli['refused']}); "
        f"foreign: {status['foreign'] + bare_cli['foreign']}; timeout: {status['timeout'] + bare_cli['timeout']}; "
        f"exported, but no inputs to check the folder with: {bare_cli['exported']}",
        "- refused, by reason: " + "; ".join(f"{c} x {k}" for k, c in refused.most_common()),
        f"- had every type been attempted (check_supported bypassed), of {len(attempted)} with inputs: "
        + ", ".join(f"{k} {v}" for k, v in would.most_common()),
        "- transformers.exporters (`OnnxExporter().export_for_generation`, of the types with inputs): "
        + ", ".join(f"{k} {v}" for k, v in ex.most_common())
        + ("; of those exported: " + ", ".join(f"{k} {v}" for k, v in ex_run.most_common()) if ex_run else ""),
    ]
    return lines


def write_md(rows: dict[str, dict[str, Any]], path: str) -> None:
    import onnxruntime
    import torch

    ordered = [rows[t] for t in sorted(rows)]
    versions = Counter(r.get("transformers", "5.23.0") for r in ordered)  # rows before the field ran at 5.23
    lines = [
        "# Census of onnxport's image-text-to-text export over transformers' vision-language types",
        "",
        f"Generated {datetime.date.today().isoformat()} by `python bench/image_text_census.py` (see its docstring): "
        f"torch {torch.__version__}, transformers "
        + ", ".join(f"{v} ({n} rows)" for v, n in sorted(versions.items()))
        + f", onnxruntime {onnxruntime.__version__}, "
        f"Python {platform.python_version()}, {platform.machine()}, one thread. Rows by the onnxport commit they ran: "
        + ", ".join(f"{c} {n}" for c, n in Counter(r.get("onnxport", "-") for r in ordered).most_common()) + ".",
        "",
        "Method: every key of `MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES`, a tiny random config (images of at most 64 "
        "pixels in 8-pixel patches), weights drawn anew and spread; inputs made without the type's processor: a "
        "word-level tokenizer holding the image token, the type's image processor (its PIL one, else its torchvision "
        "one: the census's environment has torchvision, timm and scipy) made to agree with the config, "
        "and prompts holding as many image tokens per image as `get_image_features` gives rows; two cases, *one* "
        "(one prompt, one image) and *batch* (two prompts, left-padded, of one and two images of other sizes; for a "
        "model whose encoder reads the images, no prompt, one image and two of other sizes); eager "
        "`generate` (greedy, 6 new tokens); `save_pretrained`; `python -m onnxport export-hf DIR --task "
        "image-text-to-text` (*cli*: what a user gets today); where the CLI refuses the type as unsupported, "
        "`export_hf` again with `check_supported` patched away (*bypass*: what would happen); then "
        "`generate_vlm(OUT, inputs=...)` on both cases against eager's tokens (*would*: right, wrong, client fails, or "
        "the export's failure); where the recipe makes no inputs, the CLI's verdict on the saved checkpoint all the "
        "same. Last column: transformers' own `transformers.exporters` "
        "(`OnnxExporter().export_for_generation`, `OnnxConfig(dynamic=True)`) on the same model and the *one* case.",
        "",
        "## Counts",
        "",
        *_counts(ordered),
        "",
        "## Had every type been attempted: failures by cause",
        "",
    ]
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in ordered:
        if r.get("status") not in EXCLUDED and stage_of(r)[0] != "right":
            groups[cause(r)].append(r)
    for c in sorted(groups, key=lambda c: (-len(groups[c]), c)):
        lines.append(f"- **{_esc(c, 220)}** ({len(groups[c])}): " + ", ".join(r["type"] for r in groups[c]))
        for r in groups[c]:
            stage, reason = stage_of(r)
            lines.append(f"  - {r['type']}: {stage}: `{_esc(reason, 300)}`")
    lines += ["", "## Excluded (not built, eager fails)", ""]
    for r in ordered:
        if r.get("status") in EXCLUDED:
            lines.append(f"- {r['type']}: {r.get('status')}: {_esc(stage_of(r)[1], 200)}")
    lines += ["", "## All rows", "",
              "| type | class | params | cli (today) | bypass | would | where / why | transformers.exporters |",
              "|---|---|---:|---|---|---|---|---|"]
    for r in ordered:
        params = f"{r['params'] / 1e6:.2f}M" if r.get("params") else ""
        cli = (r.get("cli") or {}).get("status", "")
        by = (r.get("bypass") or {}).get("status", "")
        stage, reason = stage_of(r)
        lines.append(f"| {r['type']} | {r.get('model_class', '')} | {params} | {cli} | {by} | "
                     f"{r.get('would') or r.get('status')} | {_esc(stage + (': ' + reason if reason else ''), 260)} | "
                     f"{_esc(exporters_cell(r), 200)} |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
