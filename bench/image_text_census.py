"""Census of onnxport's ``image-text-to-text`` export over transformers' vision-language model types.

    python bench/image_text_census.py                       # every type, rows appended to the jsonl
    python bench/image_text_census.py --resume              # skip the types already there
    python bench/image_text_census.py --types llava,gemma3  # some types
    python bench/image_text_census.py --report              # only rewrite the markdown from the jsonl
    python bench/image_text_census.py --snapshot --resume   # onnxport as committed at HEAD, not the working tree

The types are the keys of ``modeling_auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES``. Per type, in a forked process
with a time limit for everything of the row (``--timeout``, 300 s; ``census.run_in_fork``), one row at a time:

1. build: a tiny config and the mapping's class, seeded (``image_text_census_inputs.build``); "not built" with its
   reason when it fails.
2. inputs, made without the type's transformers processor: a word-level tokenizer with the config's image token,
   the type's image processor (its PIL class, else its torchvision one: ``make bench-image-text-census`` runs in
   .venv-census, which has torchvision, timm and scipy) made to agree with the tiny config, both saved
   into the directory (export-hf reads ``preprocessor_config.json`` for its example images), and the prompts of two
   cases, "one" (one prompt, one image) and "batch" (two prompts left-padded, of one and two images of other sizes):
   as many image tokens per image as ``get_image_features`` gives rows for it (``image_text_census_inputs``).
   A failure here, or an eager ``generate`` that fails on these inputs, is "no inputs: <reason>": the generic recipe
   does not fit the type (it needs a family-specific expansion); the checkpoint is still saved and given to the CLI
   (step 4), whose verdict (refused with a reason, or exported unchecked) the row keeps.
3. eager: the weights drawn anew and spread (``census_build.redraw_weights``; transformers' init if they give
   non-finite scores), ``generate(do_sample=False, max_new_tokens=6)`` under a generation config of the model's
   token ids alone, on each case. (A failure after the prompt was accepted once is "eager fails", excluded.)
4. ``save_pretrained`` (safetensors) into the directory, then ``python -m onnxport export-hf DIR --task
   image-text-to-text -o OUT`` (``OMP_NUM_THREADS=1``; ``export_hf_census.export_cli``): "exported", "refused"
   (onnxport's own error line ends stderr), "foreign" (a traceback), "timeout". This is the ``cli`` column: what a
   user gets today.
5. bypass: where the CLI was refused by ``check_supported`` (a type outside ``SUPPORTED``), ``export_hf`` again in a
   child Python (not the CLI: a fork of the row's process, which has run torch, cannot always start torch's thread
   pools again), in-process there, with ``onnxport.hf.export.check_supported`` patched to accept every type: what would
   happen if the type were attempted. Classified the same way (an ``OnnxportError`` is refused, any other exception
   foreign, with where it was raised).
6. the consumer: ``generate_vlm(OUT, inputs=..., max_new_tokens=6)`` on each case against eager's tokens: "right",
   "wrong" (the prompt and new token where they part), "client fails" (the exception). Also where the CLI failed
   foreign after writing every file (the row's ``cli.files_written``): its ``would`` is then the runner's.
7. ``transformers.exporters`` (``image_text_census_exporters``): ``OnnxExporter().export_for_generation`` on the
   same model and the "one" case, ``OnnxConfig(dynamic=True)``, in a forked child with a time limit of its own.

One JSON line per row goes to ``bench/image_text_census.jsonl`` (a later line for a type replaces an earlier one);
``bench/image_text_census.md`` is rendered from it (``image_text_census_report``). Each row names the onnxport
commit it ran. The CLI's stderr is kept under ``$TMPDIR/export-hf-census-logs/image-text-to-text/``.
"""

from __future__ import annotations

import argparse
import atexit
import inspect
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from typing import Any

from census import run_in_fork
from export_hf_census import export_cli
from export_hf_census_common import FRAME, LOGS, error_lines, first_line, json_default, log, onnxport_commit, short_path, \
    with_detail
from image_text_census_inputs import CASES, build, case_inputs, eager_generate, generation_inputs, load_processor, \
    write_image_processor, write_tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
JSONL = os.path.join(HERE, "image_text_census.jsonl")
MD = os.path.join(HERE, "image_text_census.md")
TASK = "image-text-to-text"
NEW_TOKENS = 6
EXPORTERS_S = 120.0  # the transformers.exporters column's own limit
SUPPORT_REFUSAL = "image-text-to-text yet"  # check_supported's words


def types() -> dict[str, str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES as names

    return {t: (c[0] if isinstance(c, (list, tuple)) else c) for t, c in sorted(names.items())}


# -- one row, in the child -------------------------------------------------------------------------------------


def prepare(model_type: str, class_name: str, row: dict[str, Any], save, directory: str) -> tuple | None:
    """Build, inputs, eager: (model, cases, eager tokens per case); (model, None, None) where the generic recipe
    makes no inputs for it; None where it is not built or eager fails. The row's status is set."""
    import torch

    import census_build as cb

    row["status"] = "not built"
    try:
        config, model = build(model_type, class_name, row)
    except Exception as exc:  # noqa: BLE001
        row["reason"] = first_line(exc)
        return None
    row["status"] = "no inputs"
    save()
    try:
        write_tokenizer(directory, config)
        from onnxport.hf.multimodal.components import image_features, images_encoded

        takes = () if images_encoded(model, config) else tuple(inspect.signature(image_features(model)).parameters)
        row["processor"] = write_image_processor(directory, model_type, config, takes)
        processor = load_processor(directory)
        cases = {}
        for case in CASES:
            cases[case] = case_inputs(model, config, processor, case)
            row.setdefault("cases", {})[case] = {
                "rows_per_image": cases[case]["rows_per_image"],
                "inputs": {k: list(v.shape) for k, v in cases[case]["inputs"].items()}}
        cb.redraw_weights(model)
        row["weights"] = "redrawn"
        eager = {}
        for case in CASES:
            eager[case] = eager_generate(model, cases[case]["inputs"], NEW_TOKENS)
            if not eager[case]["finite"]:
                torch.manual_seed(0)
                model = type(model)(config).eval()
                row["weights"] = "default init (redrawn ones gave non-finite scores)"
                eager = {c: eager_generate(model, cases[c]["inputs"], NEW_TOKENS) for c in CASES}
                break
    except Exception as exc:  # noqa: BLE001
        row["reason"] = first_line(exc)
        row["trace"] = trace_of(traceback.format_exc())
        text_only = text_generate(model)
        if text_only is not None:
            row["text_alone"] = text_only
        if text_only is not None and text_only.endswith(row["reason"]):
            row["status"] = "eager fails"  # the same error without images: the model's generate, not the recipe
            return None
        return model, None, None
    return model, cases, eager


def text_generate(model: Any) -> str | None:
    """Why greedy ``generate`` fails on a prompt of text alone, or None when it runs."""
    import torch

    ids = torch.tensor([[1, 5, 17, 33]])
    try:
        eager_generate(model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, 2)
    except Exception as exc:  # noqa: BLE001
        return "text alone: " + first_line(exc)
    return None


def trace_of(text: str) -> list[str]:
    """The last frames of a traceback (transformers' and onnxport's files shortened), then its last line."""
    frames = [(m.group(1), m.group(2), m.group(3)) for m in map(FRAME.match, text.splitlines()) if m]
    lines = [f"{short_path(f)}:{n} in {fn}" for f, n, fn in frames[-3:]]
    return lines + [text.strip().splitlines()[-1][:300]]


def run_row(model_type: str, class_name: str, row: dict[str, Any], save, work: str, deadline: float) -> None:
    import torch

    torch.set_num_threads(1)
    row["model_class"] = class_name
    directory, out = os.path.join(work, "model"), os.path.join(work, "onnx")
    os.makedirs(directory)
    got = prepare(model_type, class_name, row, save, directory)
    if got is None:
        return
    model, cases, eager = got
    if cases is None:  # no inputs to check a folder with: what the CLI does with the checkpoint all the same
        try:
            model.save_pretrained(directory)
        except Exception as exc:  # noqa: BLE001
            row["cli"] = {"status": "not saved", "reason": first_line(exc)}
            return
        row["cli"] = cli_row(model_type, directory, out, deadline)
        return
    row["eager_tokens"] = {c: e["tokens"] for c, e in eager.items()}
    row["status"] = "not saved"
    save()
    try:
        model.save_pretrained(directory)
    except Exception as exc:  # noqa: BLE001
        row["reason"] = first_line(exc)
        return
    cli = row["cli"] = cli_row(model_type, directory, out, deadline)
    row["status"] = cli["status"]
    save()
    if cli["status"] == "refused" and SUPPORT_REFUSAL in cli.get("reason", ""):
        row["bypass"] = bypass(directory, out + "-bypass", model_type, deadline - EXPORTERS_S)
        out = out + "-bypass"
        save()
    would = row.get("bypass", cli)
    if would["status"] == "foreign" and written(out):  # a crash after the files were written (in printing, say)
        would = {**would, "status": "exported"}
        row["cli"]["files_written"] = "every file was written before the crash: the runner runs them"
    if would["status"] == "exported":
        row["runner"] = {case: check_runner(out, cases[case]["inputs"], eager[case]) for case in CASES}
        save()
    row["would"] = outcome(would, row.get("runner"))
    save()
    from image_text_census_exporters import check_exporters

    row["exporters"] = check_exporters(model, generation_inputs(model, cases["one"]["inputs"]), eager["one"],
                                       model_type, work,
                                       min(EXPORTERS_S, deadline - time.time() - 5))
    save()


def cli_row(model_type: str, directory: str, out: str, deadline: float) -> dict[str, Any]:
    """``export-hf`` as a user runs it on the saved checkpoint (``export_hf_census.export_cli``)."""
    cli: dict[str, Any] = {"type": model_type, "status": "timeout"}
    export_cli(TASK, directory, out, cli, deadline - EXPORTERS_S)
    cli.pop("type")
    return cli


def written(out: str) -> bool:
    from onnxport.hf.multimodal import FILES

    return all(os.path.isfile(os.path.join(out, name)) for name in FILES)


def outcome(export: dict[str, Any], runner: dict[str, Any] | None) -> str:
    """The row's result had the type been attempted: the runner's on both cases, else the export's status."""
    if runner is None:
        return export["status"]
    statuses = [r["status"] for r in runner.values()]
    for s in ("client fails", "wrong"):
        if s in statuses:
            return s
    return "right"


def bypass(directory: str, out: str, model_type: str, deadline: float) -> dict[str, Any]:
    """``export_hf`` with ``check_supported`` accepting every type (see the module), in a child Python of its own
    (``--bypass-job``): a fork of this process, which has run torch, may not start torch's thread pools again."""
    import subprocess

    limit = max(5.0, deadline - time.time() - 10)
    result_path = out + ".json"
    cmd = [sys.executable, os.path.abspath(__file__), "--bypass-job", directory, out, result_path]
    start = time.perf_counter()
    log_path = os.path.join(LOGS, TASK, model_type + ".bypass.log")
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    with open(log_path, "w") as log_file:
        try:
            proc = subprocess.run(cmd, stdout=log_file, stderr=subprocess.STDOUT, timeout=limit,
                                  env={**os.environ, "OMP_NUM_THREADS": "1"})
            code = proc.returncode
        except subprocess.TimeoutExpired:
            code = None
    try:
        with open(result_path) as f:
            result = json.load(f)
    except (OSError, ValueError):
        result = {"status": "foreign", "reason": f"the bypass child wrote nothing (exit {code}; its log: {log_path})"}
    if code is None:
        result.update(status="timeout", reason=f"export_hf ran past {limit:.0f} s")
    result["total_s"] = round(time.perf_counter() - start, 1)
    return result


def bypass_job(directory: str, out: str) -> dict[str, Any]:
    """``export_hf(directory, image-text-to-text, out)`` with ``check_supported`` patched to accept every type:
    exported, refused (an ``OnnxportError``: its first line, torch's words, its fix) or foreign (where it was raised,
    and the last line of onnxport's on the way)."""
    from unittest import mock

    import torch

    from onnxport.errors import OnnxportError
    from onnxport.hf import export_hf

    torch.set_num_threads(1)
    result: dict[str, Any] = {}
    start = time.perf_counter()
    try:
        with mock.patch("onnxport.hf.export.check_supported", lambda config: None):
            export_hf(directory, TASK, out)
        result["status"] = "exported"
    except OnnxportError as exc:
        lines = exc.message.strip().splitlines()
        detail = [line.strip() for line in lines[1:]] + ([f"fix: {exc.fix}"] if exc.fix else [])
        result.update(status="refused", error=type(exc).__name__, detail=detail[:8],
                      reason=with_detail(f"{type(exc).__name__}: {lines[0]}", detail)[:700])
        if exc.location is not None:
            result["at"] = f"{short_path(exc.location.file)}:{exc.location.line} in {exc.location.function}"
        result["trace"] = trace_of(traceback.format_exc())
    except Exception as exc:  # noqa: BLE001
        frames = traceback.extract_tb(exc.__traceback__)
        result.update(status="foreign", error=type(exc).__name__, reason=first_line(exc)[:500],
                      trace=trace_of(traceback.format_exc()),
                      raised_at=f"{short_path(frames[-1].filename)}:{frames[-1].lineno} in {frames[-1].name}")
        ours = [f for f in frames if "/onnxport/" in f.filename and "/bench/" not in f.filename]
        if ours:  # the last line of onnxport's on the way: where it called what raised
            result["onnxport_at"] = f"{short_path(ours[-1].filename)}:{ours[-1].lineno} in {ours[-1].name}"
    result["export_s"] = round(time.perf_counter() - start, 1)
    return result


def check_runner(out: str, inputs: dict[str, Any], eager: dict[str, Any]) -> dict[str, Any]:
    """``generate_vlm`` on a case against eager's tokens."""
    import numpy as np

    from onnxport.hf.multimodal import generate_vlm

    feed = {k: v.numpy() for k, v in inputs.items()}
    try:
        got = generate_vlm(out, inputs=feed, max_new_tokens=NEW_TOKENS, eos_token_id=eager["eos"],
                           pad_token_id=eager["pad"]).tolist()
    except Exception as exc:  # noqa: BLE001
        return {"status": "client fails", "reason": error_lines(exc), "trace": trace_of(traceback.format_exc())}
    want = eager["tokens"]
    if got == want:
        return {"status": "right"}
    prompt = inputs["input_ids"].shape[1] if "input_ids" in inputs else 1  # a decoder's tokens: its start first
    result: dict[str, Any] = {"status": "wrong", "eager": [w[prompt:] for w in want], "onnx": [g[prompt:] for g in got]}
    for i, (w, g) in enumerate(zip(want, got)):
        part = next((j for j, (a, b) in enumerate(zip(w, g)) if a != b), None)
        if part is None and len(w) != len(g):
            part = min(len(w), len(g))
        if part is not None:
            result["parts_at"] = {"prompt": i, "new_token": int(part - prompt)}
            break
    result["lengths"] = [np.shape(want), np.shape(got)]
    return result


# -- the fork and the census -------------------------------------------------------------------------------------


def run_forked(model_type: str, class_name: str, timeout: float) -> dict[str, Any]:
    work = tempfile.mkdtemp(prefix="image-text-census-")
    deadline = time.time() + timeout

    def job(row: dict[str, Any], save: Any) -> None:
        run_row(model_type, class_name, row, save, work, deadline)

    saved, code, seconds = run_in_fork(job, {"type": model_type}, os.path.join(LOGS, TASK, model_type + ".log"),
                                       timeout, prefix="image-text-census-", default=json_default)
    row = saved or {"type": model_type, "status": "not built", "reason": "the child wrote nothing"}
    shutil.rmtree(work, ignore_errors=True)
    row["total_s"] = round(seconds, 1)
    if code is None:
        row["killed"] = f"the row's {timeout:.0f} s ran out (status then: {row.get('status')})"
    elif code != 0:
        row["crash"] = f"child died (exit {code})"
    return row


def snapshot() -> str:
    """src/ as committed at HEAD archived to a temporary folder, put first on this process's path and on the CLI's
    (``PYTHONPATH``); the commit."""
    import subprocess

    root = os.path.dirname(HERE)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                          check=True).stdout.strip()
    folder = tempfile.mkdtemp(prefix="image-text-census-src-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    archive = subprocess.run(["git", "archive", "HEAD", "src"], cwd=root, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True)
    src = os.path.join(folder, "src")
    sys.path.insert(0, src)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)
    return f"{head} (snapshot)"


def summary(row: dict[str, Any]) -> str:
    parts = [f"cli {(row.get('cli') or {}).get('status') or row.get('status')}"]
    if row.get("bypass"):
        parts.append(f"bypass {row['bypass']['status']}")
    parts.append(f"would {row.get('would', row.get('status'))}")
    ex = row.get("exporters") or {}
    if ex:
        parts.append(f"exporters {ex.get('status')}")
    reason = row.get("reason") or (row.get("bypass") or {}).get("reason") or ""
    return ", ".join(parts) + (f": {reason[:160]}" if row.get("would") not in ("right",) and reason else "")


def load_rows(path: str = JSONL) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                if line.strip():
                    row = json.loads(line)
                    rows[row["type"]] = row
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    from image_text_census_report import write_md

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--types", help="comma-separated model types (default: every type of the mapping)")
    parser.add_argument("--resume", action="store_true", help="skip the types already in the jsonl file")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds for everything of one row")
    parser.add_argument("--report", action="store_true", help="only render the markdown from the jsonl file")
    parser.add_argument("--snapshot", action="store_true",
                        help="run onnxport as committed at HEAD (src/ archived to a temporary folder, first on the "
                             "path of this process and of the CLI), not the working tree, which may be mid-edit")
    parser.add_argument("--jsonl", default=JSONL)
    parser.add_argument("--md", default=MD)
    parser.add_argument("--bypass-job", nargs=3, metavar=("DIR", "OUT", "JSON"), help=argparse.SUPPRESS)
    opts = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if opts.bypass_job:  # the bypass's child (see bypass)
        directory, out, result_path = opts.bypass_job
        result = bypass_job(directory, out)
        with open(result_path, "w") as f:
            json.dump(result, f, default=json_default)
        return 0
    commit = snapshot() if opts.snapshot and not opts.report else None
    if not opts.report:
        import torch  # noqa: F401 - imported once here, so each forked child starts with them loaded
        import transformers  # noqa: F401

        import census_build  # noqa: F401
        import onnxport.hf  # noqa: F401

        wanted = {t.strip() for t in opts.types.split(",") if t.strip()} if opts.types else None
        every = types()
        unknown = sorted((wanted or set()) - set(every))
        if unknown:
            parser.error(f"not image-text-to-text types: {', '.join(unknown)}")
        done = load_rows(opts.jsonl) if opts.resume else {}
        todo = [(t, c) for t, c in every.items() if (wanted is None or t in wanted) and t not in done]
        start = time.perf_counter()
        for i, (model_type, class_name) in enumerate(todo, 1):
            row = run_forked(model_type, class_name, opts.timeout)
            row["onnxport"] = commit or onnxport_commit()
            row["transformers"] = transformers.__version__
            with open(opts.jsonl, "a") as f:
                f.write(json.dumps(row, default=json_default) + "\n")
            log(f"[{i}/{len(todo)} {time.perf_counter() - start:.0f}s] {model_type}: {summary(row)}")
            if i % 10 == 0:
                write_md(load_rows(opts.jsonl), opts.md)
    write_md(load_rows(opts.jsonl), opts.md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
