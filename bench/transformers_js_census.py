"""Census of ``export-hf --target transformers.js`` over transformers.js's model registry, run as its users run it.

    python bench/transformers_js_census.py                              # every covered row, appended to the jsonl
    python bench/transformers_js_census.py --tasks fill-mask --resume   # one task, skipping rows already there
    python bench/transformers_js_census.py --report                     # only rewrite the markdown

The rows are the (model type, class) pairs of the registry of the transformers.js that ``make runtimes`` installs
(its ``models/registry.js``, read as it is), by the registry's map, each map standing for an export-hf task
(:data:`MAPS`; the maps of other tasks are counted in the report as not covered yet). A row whose type transformers
has no class for in that task is "not in transformers" and not counted. Each row, in a forked process with a time
limit (``--timeout``), builds and runs the tiny random checkpoint as ``export_hf_census.py`` does (its config
shrunk, its weights spread, its word-level tokenizer or image processor; the same sentences, prompt or images;
the tasks beyond those, sequence-to-sequence text, speech, the audio encoders, image features and the bare models
of encoder-decoders, as ``transformers_js_census_tasks.py`` says), saves it, then:

1. reloads it from its folder with transformers, as a user's transformers loads it, and runs it again: that run is
   the reference (a model whose ``_init_weights`` changes weights at load is compared with what users get);
2. runs ``python -m onnxport export-hf DIR --task TASK --target transformers.js --dtypes fp32`` ("refused" with
   onnxport's error line, "foreign" with another traceback, "timeout");
3. loads the folder in Node with the class transformers.js's registry names (``transformers_js_census.mjs``), and
   calls it on the same inputs, or for the generating tasks ``generate``s greedily from the same prompt or audio;
4. compares: every output the class returns under a name the reference has, within 1e-4 + 1e-3 x the reference's
   largest magnitude, or the same tokens: "right"; else "wrong" (with the numbers); a class that cannot load or
   run the folder: "client fails".

One JSON line per row goes to ``bench/transformers_js_census.jsonl`` (a later line for a task and type replaces an
earlier one); ``bench/transformers_js_census.md`` is rendered from it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Sequence
from typing import Any

import transformers_js_census_tasks as more
from census import run_in_fork
from export_hf_census import build_and_run, export_cli, reloaded, save_checkpoint
from export_hf_census_common import (
    HERE,
    IMAGE_TASKS,
    NEW_TOKENS,
    ROOT,
    TOLERANCE,
    first_line,
    json_default,
    load_rows,
    log,
    onnxport_commit,
    short_trace,
    task_types,
)
from export_hf_census_report import reason_of

JSONL = os.path.join(HERE, "transformers_js_census.jsonl")
MD = os.path.join(HERE, "transformers_js_census.md")
LOGS = os.path.join(tempfile.gettempdir(), "transformers-js-census-logs")
MODULES = os.path.join(ROOT, ".runtimes", "transformers-js")
REGISTRY = os.path.join(MODULES, "node_modules", "@huggingface", "transformers", "src", "models", "registry.js")
RUNNER = os.path.join(HERE, "transformers_js_census.mjs")
# The registry's maps this census covers -> the export-hf task of their rows.
MAPS = {
    "MODEL_MAPPING_NAMES_ENCODER_ONLY": "feature-extraction",
    "MODEL_MAPPING_NAMES_DECODER_ONLY": "feature-extraction",
    "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES": "text-generation",
    "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES": "text-classification",
    "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES": "token-classification",
    "MODEL_FOR_MASKED_LM_MAPPING_NAMES": "fill-mask",
    "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES": "question-answering",
    "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES": "image-classification",
    "MODEL_FOR_SEMANTIC_SEGMENTATION_MAPPING_NAMES": "image-segmentation",
    "MODEL_FOR_DEPTH_ESTIMATION_MAPPING_NAMES": "depth-estimation",
    "MODEL_FOR_OBJECT_DETECTION_MAPPING_NAMES": "object-detection",
    "MODEL_FOR_IMAGE_FEATURE_EXTRACTION_MAPPING_NAMES": "image-feature-extraction",
    "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES": "text2text-generation",
    "MODEL_MAPPING_NAMES_ENCODER_DECODER": "seq2seq-features",
    "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES": "automatic-speech-recognition",
    "MODEL_FOR_CTC_MAPPING_NAMES": "ctc",
    "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES": "audio-classification",
    "MODEL_FOR_AUDIO_FRAME_CLASSIFICATION_MAPPING_NAMES": "audio-frame-classification",
    "MODEL_FOR_AUDIO_XVECTOR_MAPPING_NAMES": "audio-xvector",
    "MODEL_FOR_IMAGE_TO_IMAGE_MAPPING_NAMES": "image-to-image",
    "MODEL_FOR_ZERO_SHOT_OBJECT_DETECTION_MAPPING_NAMES": "zero-shot-object-detection",
    "MODEL_FOR_MASK_GENERATION_MAPPING_NAMES": "mask-generation",
    "MODEL_FOR_TEXT_TO_WAVEFORM_MAPPING_NAMES": "text-to-audio",
    "MODEL_MAPPING_NAMES_AUTO_ENCODER": "audio-codec",
    "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES": "image-text-to-text",
    "MODEL_FOR_AUDIO_TEXT_TO_TEXT_MAPPING_NAMES": "audio-text-to-text",
    "MODEL_FOR_VISION_2_SEQ_MAPPING_NAMES": "vision2seq",
    "MODEL_FOR_NORMAL_ESTIMATION_MAPPING_NAMES": "normal-estimation",
    "MODEL_FOR_TEXT_TO_SPECTROGRAM_MAPPING_NAMES": "text-to-spectrogram",
    "MODEL_FOR_IMAGE_MATTING_MAPPING_NAMES": "image-matting",
    "MODEL_FOR_POSE_ESTIMATION_MAPPING_NAMES": "pose-estimation",
    "MODEL_FOR_TIME_SERIES_PREDICTION_MAPPING_NAMES": "time-series",
    "MODEL_FOR_MULTIMODALITY_MAPPING_NAMES": "multimodality",
    "MODEL_FOR_DOCUMENT_QUESTION_ANSWERING_MAPPING_NAMES": "document-question-answering",
    "MODEL_FOR_IMAGE_SEGMENTATION_MAPPING_NAMES": "panoptic-segmentation",
    "MODEL_FOR_UNIVERSAL_SEGMENTATION_MAPPING_NAMES": "universal-segmentation",
}
COUNTED = ("right", "wrong", "client fails", "refused", "foreign", "timeout")


def registry() -> dict[str, list[tuple[str, str]]]:
    """Each map of the installed transformers.js's registry -> its (model type, class name) pairs."""
    with open(REGISTRY, encoding="utf-8") as f:
        text = f.read()
    return {name: re.findall(r"\['([\w.-]+)',\s*'(\w+)'\]", body)
            for name, body in re.findall(r"(?:export )?const (\w+) = new Map\(\[(.*?)\]\);", text, re.S)}


def rows_to_run(tasks: Sequence[str]) -> list[dict[str, Any]]:
    """The registry's covered rows of ``tasks``: task, type, the transformers.js class and transformers' class
    (None where transformers has none for the type in the task)."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    rows = []
    for name, pairs in registry().items():
        task = MAPS.get(name)
        if task not in tasks:
            continue
        theirs = None if task in more.EXPORT_TASKS else task_types(task)
        for model_type, js_class in pairs:
            if theirs is None:  # the class transformers.js names, where transformers has it
                python_type = model_type if model_type in CONFIG_MAPPING else model_type.replace("-", "_")
                model_class = js_class if hasattr(transformers, js_class) and python_type in CONFIG_MAPPING else None
            else:
                python_type = model_type.replace("-", "_") if model_type not in theirs else model_type
                model_class = theirs.get(python_type)
            row = {"task": task, "type": model_type, "js_class": js_class, "map": name,
                   "model_class": model_class, "python_type": python_type}
            if task == "feature-extraction" and python_type in MODEL_MAPPING_NAMES:
                _features_row(row, MODEL_MAPPING_NAMES[python_type])
            if task in more.MULTIMODAL and model_class is not None and more.multimodal_case(task, python_type) is None:
                row["not_covered"] = ("the census has no checkpoint with a processor transformers.js loads, nor a "
                                      "prompt of images or sound, for it (the transformers.js test matrices' writers)")
            rows.append(row)
    return rows


# The inputs of a bare model that reads no text -> the census task whose inputs it is given (its folder is
# exported for feature-extraction all the same).
FEATURES_OF = {"pixel_values": "image-feature-extraction", "input_values": "audio-classification",
               "input_features": "audio-classification"}


def _features_row(row: dict[str, Any], names: Any) -> None:
    """A feature-extraction row of the bare model of an image or audio encoder (ViTModel, Wav2Vec2Model), given the
    inputs of image features or of an audio encoder, or of one that reads texts and images apart (CLIPModel), given
    those of zero-shot image classification (``features_of``)."""
    import inspect

    import transformers

    cls = getattr(transformers, names[0] if isinstance(names, (list, tuple)) else names, None)
    params = set(inspect.signature(cls.forward).parameters) if cls is not None else set()
    if "input_ids" in params and row["model_class"] is not None:
        return
    of = next((task for name, task in FEATURES_OF.items() if name in params), None)
    if "input_ids" in params and of == "image-feature-extraction":
        of = "zero-shot-image-classification"
    elif "input_ids" in params:
        row["not_covered"] = ("its features are of text and audio together, which this census does not feed"
                              if of is not None else "a model of token ids whose config holds no vocabulary size by "
                              "default, which the census's text rows need")
        return
    if of is None:
        row["not_covered"] = "its forward reads neither text, images nor audio"
        return
    row["model_class"], row["features_of"] = cls.__name__, of


# -- one row, in the child -----------------------------------------------------------------------------------


def _tensor(value: Any) -> dict[str, Any]:
    import numpy as np

    array = np.asarray(value)
    kind = "float32" if array.dtype.kind == "f" else "int64"
    return {"type": kind, "dims": list(array.shape), "data": array.astype(kind).ravel().tolist()}


def run_js(job: dict[str, Any], work: str, deadline: float) -> dict[str, Any]:
    paths = [os.path.join(work, name) for name in ("job.json", "result.json")]
    with open(paths[0], "w") as f:
        json.dump(job, f)
    subprocess.run(["node", RUNNER, "--modules", MODULES, *paths], capture_output=True, text=True,
                   timeout=max(5.0, deadline - time.time() - 5), check=False)
    if not os.path.isfile(paths[1]):
        return {"error": "the Node run wrote no result"}
    with open(paths[1]) as f:
        return json.load(f)


def _draws(out: str) -> bool:
    """Whether the folder's model draws noise (``onnxport.random_draws`` in its metadata: VITS)."""
    import onnx

    from onnxport import metadata

    path = os.path.join(out, "onnx", "model.onnx")
    if not os.path.isfile(path):
        return False
    return any(p.key == metadata.RANDOM_DRAWS for p in onnx.load(path, load_external_data=False).metadata_props)


def compare(row: dict[str, Any], reference: dict[str, Any], got: dict[str, Any], random: bool = False) -> None:
    """The row's status from transformers.js's result against the reference; for a model that draws noise (the
    file draws its own), ranks alone (its values were verified at export, eager's draws fed to the file)."""
    import numpy as np

    if "error" in got:
        row["status"], row["reason"] = "client fails", got["error"].splitlines()[0][:300]
        row["client_trace"] = got["error"][:1500]
        return
    if "tokens" in got:
        want = reference["tokens"]
        row["js_tokens"] = got["tokens"]
        row["status"] = "right" if more.same_tokens(got["tokens"], want) else "wrong"
        row.pop("reason", None)
        if row["status"] == "wrong":
            part = next((i for i, (a, b) in enumerate(zip(got["tokens"], want)) if a != b), min(len(want),
                                                                                               len(got["tokens"])))
            row["reason"] = f"tokens part at {part}: {got['tokens'][part:part + 4]} vs {want[part:part + 4]}"
        return
    compared = {}
    for name, value in got["outputs"].items():
        ref = reference.get(name)
        if ref is None:
            continue
        val = np.asarray(value["data"], dtype=np.float64).reshape(value["dims"])
        if random:  # (lengths follow the durations drawn)
            compared[name] = {"shape": [list(ref.shape), list(val.shape)], "ok": val.ndim == ref.ndim}
            continue
        if val.shape != ref.shape:
            compared[name] = {"shape": [list(ref.shape), list(val.shape)], "ok": False}
            continue
        # a logit masked to -inf (Grounding DINO's past its text) must be masked on both sides: Node's JSON has no
        # infinity, so transformers.js's arrives as null (nan here); the rest is compared as values
        finite = np.isfinite(ref)
        masked = bool((np.isnan(val[~finite]) | (val[~finite] == ref[~finite])).all())
        diff = float(np.max(np.abs(ref[finite] - val[finite]))) if finite.any() else 0.0
        scale = float(np.max(np.abs(ref[finite]))) if finite.any() else 0.0
        compared[name] = {"max_abs": diff, "scale": scale,
                          "ok": masked and diff <= TOLERANCE[0] + TOLERANCE[1] * scale}
        if not finite.all():
            compared[name]["masked"] = {"count": int((~finite).sum()), "same": masked}
    row["outputs"] = compared
    if not compared:
        row["status"] = "client fails"
        row["reason"] = f"no output named as transformers' ({', '.join(got['outputs'])} vs {', '.join(reference)})"
        return
    row["status"] = "right" if all(c["ok"] for c in compared.values()) else "wrong"
    row.pop("reason", None)  # (a first build's, kept in layers_kept)
    if random:
        row["reason"] = "draws noise: ranks compared (values verified at export with eager's draws fed)"
    if row["status"] == "wrong":
        row["reason"] = "; ".join(f"{k}: {c.get('max_abs', c.get('shape'))}" for k, c in compared.items()
                                  if not c["ok"])[:300]


def run_row(spec: dict[str, Any], row: dict[str, Any], save: Any, work: str, deadline: float) -> None:
    import torch

    torch.set_num_threads(1)
    task = spec["task"]
    if task == "text-to-spectrogram":  # SpeechT5 with its vocoder, two folders
        more.run_spectrogram(spec, row, save, work, deadline, lambda *a: export_cli(*a, LOGS))
        return
    if task in more.MULTIMODAL or (task == "vision2seq" and spec["python_type"] != "vision-encoder-decoder"):
        # the test matrix's checkpoint, run by transformers.js's own processor
        more.run_multimodal(task if task in more.MULTIMODAL else "image-text-to-text", spec, row, save, work,
                            deadline, lambda *a: export_cli(*a, LOGS))
        return
    directory, out = os.path.join(work, "model"), os.path.join(work, "onnx")
    os.makedirs(directory)
    run = None
    if task in more.EXPORT_TASKS or spec.get("features_of"):
        got = more.prepare(spec.get("features_of", task), spec, row, save, directory)
        if got is None:
            return
        model, run, enc, eager = got
        row["status"] = "not saved"
        try:
            model.save_pretrained(directory)
        except Exception as exc:  # noqa: BLE001
            row["reason"] = first_line(exc)
            return
    else:
        got = build_and_run(task, spec["python_type"], spec["model_class"], row, save, directory, False)
        if got is None and task in IMAGE_TASKS:  # (a neck that reads more layers than 2)
            shutil.rmtree(directory)
            os.makedirs(directory)
            row["layers_kept"] = f"the 2-layer config: {row['status']}: {row.get('reason', '')}"[:300]
            got = build_and_run(task, spec["python_type"], spec["model_class"], row, save, directory, True)
        if got is None:
            return
        _, model, eager, enc, vocab = got
        if not save_checkpoint(task, model, directory, vocab, row, save):
            return
    del model
    reference = reloaded(task, directory, eager, enc, row.get("prompt"), row, run)
    if reference.get("left_out"):  # settings of the model's generation config the greedy reference leaves out
        row["generation_config_left_out"] = reference["left_out"]
    row["status"] = "timeout"
    save()
    export_cli(more.EXPORT_TASKS.get(task, task), directory, out, row, deadline,
               ("--target", "transformers.js", "--dtypes", "fp32"), LOGS)
    save()
    if row["status"] != "exported":
        return
    row["status"] = "client fails"
    save()
    job: dict[str, Any] = {"folder": out, "class": spec["js_class"]}
    if task == "text-generation":
        prompt = row["prompt"]
        job.update(inputs={"input_ids": _tensor([prompt]), "attention_mask": _tensor([[1] * len(prompt)])},
                   new_tokens=NEW_TOKENS)
    elif task in more.GENERATING or spec["python_type"] in more.GENERATED_AUDIO:
        job.update(inputs={k: _tensor(v) for k, v in enc.items()}, new_tokens=NEW_TOKENS, settings=more.PLAIN)
    else:
        job.update(inputs={k: _tensor(v) for k, v in enc.items()}, new_tokens=0)
    try:
        compare(row, reference, run_js(job, work, deadline), random=_draws(out))
    except Exception as exc:  # noqa: BLE001
        row["reason"] = f"the comparison: {first_line(exc)}"
        row["trace"] = short_trace(traceback.format_exc())


def run_forked(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    work = tempfile.mkdtemp(prefix="transformers-js-census-")
    deadline = time.time() + timeout
    head = {k: spec[k] for k in ("task", "type", "js_class", "map", "model_class")}

    def job(row: dict[str, Any], save: Any) -> None:
        run_row(spec, row, save, work, deadline)

    saved, code, seconds = run_in_fork(job, dict(head), os.path.join(LOGS, spec["task"], spec["type"] + ".log"),
                                       timeout, prefix="transformers-js-census-", default=json_default)
    row = saved or {**head, "status": "not built", "reason": "the child wrote nothing"}
    shutil.rmtree(work, ignore_errors=True)
    row["total_s"] = round(seconds, 1)
    if code is None:
        row["killed"] = f"the row's {timeout:.0f} s ran out (status then: {row.get('status')})"
        if row.get("status") in ("timeout", "exported", "client fails"):
            row["status"], row["reason"] = "timeout", f"the row ran past its {timeout:.0f} s"
    elif code != 0:
        row["crash"] = f"child died (exit {code})"
    return row


# -- the report ---------------------------------------------------------------------------------------------


def _esc(text: Any, width: int = 160) -> str:
    s = str(text).replace("|", "\\|").replace("\n", " ").replace("`", "'")
    return s if len(s) <= width else s[: width - 1] + "…"


def write_md(rows: dict[tuple[str, str], dict[str, Any]], path: str = MD) -> None:
    import transformers

    maps = registry()
    covered = sum(len(pairs) for name, pairs in maps.items() if name in MAPS)
    lines = ["# transformers.js registry census", "",
             "Generated by `python bench/transformers_js_census.py` (see its docstring for the method): each row a "
             "(model type, class) pair of the registry of the transformers.js `make runtimes` installs, a tiny "
             "random checkpoint exported with `export-hf --target transformers.js --dtypes fp32`, loaded in Node "
             "by the class the registry names, its outputs (or greedy tokens) compared with transformers' on the "
             "same inputs, transformers reloading the checkpoint from its folder.", "",
             f"transformers {transformers.__version__}; the registry's {sum(map(len, maps.values()))} pairs, "
             f"{covered} of them in the maps this census covers ({len(MAPS)} maps); "
             f"{len(rows)} rows run.", "",
             "| task | rows | not in transformers / not covered | not built / eager fails | counted | right | wrong "
             "| client fails | refused | foreign | timeout |", "| --- | " + "--- | " * 10]
    by_task: dict[str, Counter] = {}
    for row in rows.values():
        by_task.setdefault(row["task"], Counter())[row.get("status", "?")] += 1
    total: Counter = Counter()
    for task in dict.fromkeys(MAPS.values()):
        c = by_task.get(task, Counter())
        total += c
        counted = sum(c[s] for s in COUNTED)
        lines.append(f"| {task} | {sum(c.values())} | {c['not in transformers'] + c['not covered']} | "
                     f"{c['not built'] + c['eager fails'] + c['not saved']} | {counted} | "
                     + " | ".join(str(c[s]) for s in COUNTED) + " |")
    counted = sum(total[s] for s in COUNTED)
    lines.append(f"| all | {sum(total.values())} | {total['not in transformers'] + total['not covered']} | "
                 f"{total['not built'] + total['eager fails'] + total['not saved']} | {counted} | "
                 + " | ".join(str(total[s]) for s in COUNTED) + " |")
    if counted:
        lines += ["", f"Right: {total['right']} of {counted} counted rows ({100 * total['right'] / counted:.0f}%)."]
    uncovered = [f"{name} ({len(pairs)})" for name, pairs in maps.items() if name not in MAPS and pairs]
    lines += ["", "Maps not covered yet (their rows are not run): " + ", ".join(uncovered) + "." if uncovered
              else "Every map of the registry is covered.", "",
              "## Rows", "", "| task | type | transformers.js class | status | reason |", "| --- | --- | --- | --- | --- |"]
    for (task, model_type), row in sorted(rows.items()):
        lines.append(f"| {task} | {model_type} | {row.get('js_class', '')} | {row.get('status')} | "
                     f"{_esc(reason_of(row))} |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


# -- the census ---------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    tasks = list(dict.fromkeys(MAPS.values()))
    parser.add_argument("--tasks", help=f"comma-separated tasks (default: all: {', '.join(tasks)})")
    parser.add_argument("--types", help="comma-separated model types (default: every type of each task)")
    parser.add_argument("--resume", action="store_true", help="skip the (task, type) rows already in the jsonl file")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds for everything of one row")
    parser.add_argument("--report", action="store_true", help="only render the markdown from the jsonl file")
    parser.add_argument("--jsonl", default=JSONL)
    parser.add_argument("--md", default=MD)
    opts = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if not os.path.isfile(REGISTRY):
        parser.error(f"transformers.js is not installed in {MODULES}: run `make runtimes`")
    if not opts.report:
        import census_build  # noqa: F401
        import torch  # noqa: F401 - imported once here, so each forked child starts with them loaded
        import transformers  # noqa: F401

        chosen = [t.strip() for t in opts.tasks.split(",")] if opts.tasks else tasks
        wanted = {t.strip() for t in opts.types.split(",") if t.strip()} if opts.types else None
        done = load_rows(opts.jsonl) if opts.resume else {}
        todo = [s for s in rows_to_run(chosen) if (wanted is None or s["type"] in wanted)
                and (s["task"], s["type"]) not in done]
        start = time.perf_counter()
        for i, spec in enumerate(todo, 1):
            if spec.get("not_covered"):
                row = {k: spec[k] for k in ("task", "type", "js_class", "map")}
                row.update(status="not covered", reason=spec["not_covered"])
            elif spec["model_class"] is None:
                row = {k: spec[k] for k in ("task", "type", "js_class", "map")}
                row.update(status="not in transformers", reason=f"transformers has no {spec['task']} class for "
                           f"{spec['python_type']}")
            else:
                commit = onnxport_commit()
                row = run_forked(spec, opts.timeout)
                row["onnxport"] = commit
            with open(opts.jsonl, "a") as f:
                f.write(json.dumps(row, default=json_default) + "\n")
            log(f"[{i}/{len(todo)} {time.perf_counter() - start:.0f}s] {spec['task']} {spec['type']}: "
                f"{row.get('status')} {row.get('reason', '')}"[:300])
    write_md(load_rows(opts.jsonl), opts.md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
