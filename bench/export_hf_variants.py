"""Census of ``onnxport export-hf --task text-generation`` over checkpoint variants as users save them, family by
family, run as a new user runs it.

    python bench/export_hf_variants.py                                   # every family and variant (rows appended)
    python bench/export_hf_variants.py --families llama,gpt2 --variants plain,bf16
    python bench/export_hf_variants.py --resume                          # skip the rows already in the jsonl
    python bench/export_hf_variants.py --report                          # only rewrite the markdown from the jsonl

Families: llama, gpt2, qwen2, mistral, phi3, gemma2, olmo2, granite, qwen3, smollm3 (one whose config class this
transformers lacks is skipped, with a row saying so). Each is a tiny config (``SIZES``: hidden 32, intermediate 64,
2 layers, 4 heads, 2 key-value heads where the family has them, head_dim 8, vocabulary 99, 128 positions), bos 1,
eos 2 and no pad id (the word-level tokenizer's ``<s>``, ``</s>``; the family's own ids are past the vocabulary).

For each (family, variant), in a process of its own (``--row``, a new session) with a time limit for everything of
the row (``--timeout``, 180 s), one row at a time:

1. build: the family's ``*ForCausalLM`` after ``torch.manual_seed(0)``, every weight then drawn anew from
   N(0, 0.2) as ``tests.hf_dirs.save_spread`` does (transformers' tiny init leaves next-token scores nearly tied,
   so that greedy tokens would turn on rounding), saved with ``save_pretrained`` (safetensors) and a word-level
   tokenizer (``tests.hf_dirs.write_tokenizer``), then edited as real Hub checkpoints differ (``VARIANTS``):
   ``plain``; ``no-cache`` (``"use_cache": false`` in config.json, as fine-tuned checkpoints are saved);
   ``pad-id`` (``pad_token_id`` 0); ``eos-list`` (``eos_token_id`` [2, 3]); ``eos-hit`` (``eos_token_id`` [2, T]
   in config.json and generation_config.json, T the third token greedy generation gives: the stop is met, where
   the other variants' 8 tokens meet no end id); ``tie-flip`` (``tie_word_embeddings`` true where the family's
   default is false, false where it is true: an ``lm_head.weight`` of its own in the file); ``bf16``
   (``model.to(torch.bfloat16).save_pretrained``: ``"dtype": "bfloat16"``); ``torch_dtype`` (the dtype under the
   old key) and ``no-dtype`` (no dtype key at all); ``sharded`` (``max_shard_size="20KB"``, with
   ``model.safetensors.index.json``); ``gen-config`` (a generation_config.json of its own: eos [2, 9], pad 0,
   ``do_sample`` true, temperature 0.7); ``gen-eos-hit`` (the same with eos [2, T], T as in ``eos-hit``, while
   config.json keeps eos 2: transformers stops at T, reading generation_config.json); ``streamed`` (the plain
   checkpoint exported with ``--streaming``), and ``tie-flip-streamed``, ``bf16-streamed``, ``sharded-streamed``
   (those checkpoints with ``--streaming``: the weights copied file to file, a tied head absent from the file).
2. eager: the model as it is loaded from the directory (``from_pretrained(DIR, dtype=torch.float32)``: export-hf's
   default precision is fp32, whatever the storage), ``generate`` greedily (``PROMPT`` [1, 5, 17, 33, 8], 8 new
   tokens, ``do_sample=False``, an all-ones attention mask; the directory's generation config otherwise, its eos
   ids included), and the logits of the first new token. A failure is "eager fails" (not counted).
3. ``python -m onnxport export-hf DIR --task text-generation -o OUT`` (``--streaming`` for ``*streamed``), in a
   subprocess (``OMP_NUM_THREADS=1``, the CLI's other defaults: a checkpoint this small is loaded and verified)
   with what is left of the row's time less 25 s. Exit 0 is "exported"; otherwise "refused" when onnxport's own
   error line (``onnxport: SomeError: ...``) ends its stderr, "foreign" when a Python traceback or a crash does,
   "timeout" when the time ran out. The report's first stdout line (VERIFIED / NOT VERIFIED ...) is kept, and
   model.onnx's input and output element types (read without its weights): every variant should give float32
   logits and cache, a bfloat16 checkpoint included.
4. the folder run by onnxruntime-genai (``tests.hf_dirs.genai_greedy``: greedy, same prompt, ``max_length`` prompt
   + 8, ``do_sample`` False) and its tokens compared with eager's: "right" (same tokens), "wrong" (where they part,
   and the first step's largest logits difference), "client fails" (genai cannot load or run the folder; a folder
   without ``genai_config.json`` too). A row whose process dies after the export (genai crashing) is "client
   fails" with the exit status. Where eager's last token is an end id, genai's sequence without it is "right":
   onnxruntime-genai does not append the end id it stops at (onnxruntime-genai#1814), transformers does.

The row's process writes what it has after each stage to a JSON file the driver reads, so that a timeout or a crash
keeps the stages done. One JSON line per row goes to ``bench/export_hf_variants.jsonl`` (a later line for a family
and variant replaces an earlier one); ``bench/export_hf_variants.md`` is rendered from it. Each row's CLI stderr is
kept under ``$TMPDIR/export-hf-variants-logs/FAMILY-VARIANT.stderr``; each row names the onnxport commit it ran.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JSONL = os.path.join(ROOT, "bench", "export_hf_variants.jsonl")
MD = os.path.join(ROOT, "bench", "export_hf_variants.md")
LOGS = os.path.join(tempfile.gettempdir(), "export-hf-variants-logs")

FAMILIES = ["llama", "gpt2", "qwen2", "mistral", "phi3", "gemma2", "olmo2", "granite", "qwen3", "smollm3"]
CLASSES = {"llama": "Llama", "gpt2": "GPT2", "qwen2": "Qwen2", "mistral": "Mistral", "phi3": "Phi3",
           "gemma2": "Gemma2", "olmo2": "Olmo2", "granite": "Granite", "qwen3": "Qwen3", "smollm3": "SmolLM3"}
VARIANTS = ["plain", "no-cache", "pad-id", "eos-list", "eos-hit", "tie-flip", "bf16", "torch_dtype", "no-dtype",
            "sharded", "gen-config", "gen-eos-hit", "streamed", "tie-flip-streamed", "bf16-streamed",
            "sharded-streamed"]
SIZES = dict(vocab_size=99, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=8, max_position_embeddings=128, bos_token_id=1, eos_token_id=2,
             pad_token_id=None)
GPT2_SIZES = dict(vocab_size=99, n_embd=32, n_inner=64, n_layer=2, n_head=4, n_positions=128, bos_token_id=1,
                  eos_token_id=2, pad_token_id=None)
VOCAB = 99
ERROR_LINE = re.compile(r"^onnxport: [A-Za-z_.]+: ")


# --------------------------------------------------------------------------------------------------- the row


def build(family: str, variant: str, directory: str) -> dict:
    """Save the (family, variant) checkpoint in ``directory``; returns what the row notes about it."""
    import torch
    import transformers

    from tests.hf_dirs import edit_config, write_tokenizer

    name = CLASSES[family]
    config_class = getattr(transformers, name + "Config")
    model_class = getattr(transformers, name + ("LMHeadModel" if family == "gpt2" else "ForCausalLM"))
    sizes = dict(GPT2_SIZES if family == "gpt2" else SIZES)
    if "num_key_value_heads" in sizes and "num_key_value_heads" not in config_class().to_dict():
        sizes.pop("num_key_value_heads")
    note = {}
    default_tie = bool(config_class().tie_word_embeddings)
    if variant == "tie-flip":
        sizes["tie_word_embeddings"] = not default_tie
        note["tie"] = "tied" if not default_tie else "untied"
    if variant == "pad-id":
        sizes["pad_token_id"] = 0
    if variant == "eos-list":
        sizes["eos_token_id"] = [2, 3]
    config = config_class(**sizes)
    torch.manual_seed(0)
    model = model_class(config).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0, 0.2)
    if variant in ("eos-hit", "gen-eos-hit"):  # an end id greedy generation meets: the stop is exercised
        from tests.hf_dirs import NEW_TOKENS, PROMPT

        ids = torch.tensor([PROMPT])
        with torch.no_grad():
            hit = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS,
                                 do_sample=False)[0].tolist()[len(PROMPT) + 2]
        note["eos_hit"] = hit
        if variant == "eos-hit":
            model.config.eos_token_id = model.generation_config.eos_token_id = [2, hit]
    if variant == "bf16":
        model = model.to(torch.bfloat16)
    model.save_pretrained(directory, max_shard_size="20KB" if variant == "sharded" else "5GB")
    write_tokenizer(directory, VOCAB)
    if variant == "no-cache":
        edit_config(directory, use_cache=False)
    if variant == "torch_dtype":
        with open(os.path.join(directory, "config.json"), encoding="utf-8") as f:
            stored = json.load(f).get("dtype", "float32")
        edit_config(directory, dtype=None, torch_dtype=stored)
    if variant == "no-dtype":
        edit_config(directory, dtype=None, torch_dtype=None)
    if variant in ("gen-config", "gen-eos-hit"):
        eos = [2, note["eos_hit"]] if variant == "gen-eos-hit" else [2, 9]
        transformers.GenerationConfig(bos_token_id=1, eos_token_id=eos, pad_token_id=0, do_sample=True,
                                      temperature=0.7).save_pretrained(directory)
    files = sorted(os.listdir(directory))
    note["files"] = len([f for f in files if f.endswith(".safetensors")])
    if variant == "sharded" and "model.safetensors.index.json" not in files:
        note["warning"] = "no index written"
    return note


def eager(directory: str) -> tuple[list[int], list[float], list[int]]:
    """Greedy tokens, the first new token's logits, and the end ids generate stops at."""
    import torch
    import transformers

    from tests.hf_dirs import NEW_TOKENS, PROMPT

    model = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, -1].double().tolist()
        tokens = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS,
                                do_sample=False)[0].tolist()
    eos = model.generation_config.eos_token_id
    return tokens, logits, [] if eos is None else [eos] if isinstance(eos, int) else list(eos)


def io_dtypes(path: str) -> dict:
    import onnx

    graph = onnx.load(path, load_external_data=False).graph
    name = onnx.TensorProto.DataType.Name
    return {"inputs": {v.name: name(v.type.tensor_type.elem_type) for v in graph.input},
            "outputs": {v.name: name(v.type.tensor_type.elem_type) for v in graph.output}}


def classify_export(rc: int | None, stderr: str) -> str:
    if rc is None:
        return "timeout"
    if rc == 0:
        return "exported"
    lines = [line for line in stderr.splitlines() if line.strip()]
    if lines and ERROR_LINE.match(lines[-1]):
        return "refused"
    return "foreign"


def cause_of(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    if not lines:
        return ""
    if ERROR_LINE.match(lines[-1]) or "Traceback" not in stderr:
        return lines[-1][:400]
    exc = [line for line in lines if re.match(r"^[A-Za-z_.]+(Error|Exception|Exit|Interrupt)\b", line)]
    return (exc[-1] if exc else lines[-1])[:400]


def run_row(family: str, variant: str, state_path: str, deadline: float) -> None:
    """One row, its stages written to ``state_path`` as they finish."""
    state = {"family": family, "variant": variant}

    def save(**changes: object) -> None:
        state.update(changes)
        with open(state_path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(state, f)
        os.replace(state_path + ".tmp", state_path)

    work = tempfile.mkdtemp(prefix=f"variants-{family}-{variant}-")
    directory, out = os.path.join(work, "model"), os.path.join(work, "out")
    try:
        save(stage="build")
        try:
            save(**build(family, variant.removesuffix("-streamed"), directory))
        except Exception as e:  # noqa: BLE001
            save(stage="done", result="not built", cause=f"{type(e).__name__}: {e}"[:400])
            return
        save(stage="eager")
        try:
            tokens, logits, eos = eager(directory)
        except Exception as e:  # noqa: BLE001
            save(stage="done", result="eager fails", cause=f"{type(e).__name__}: {e}"[:400])
            return
        save(stage="export", eager_tokens=tokens, eager_eos=eos)
        command = [sys.executable, "-m", "onnxport", "export-hf", directory, "--task", "text-generation", "-o", out]
        if variant.endswith("streamed"):
            command.append("--streaming")
        env = dict(os.environ, OMP_NUM_THREADS="1")
        started = time.time()
        try:
            proc = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, check=False,
                                  timeout=max(5.0, deadline - time.time() - 25))
            rc, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as e:
            rc = None
            stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            stderr = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        os.makedirs(LOGS, exist_ok=True)
        with open(os.path.join(LOGS, f"{family}-{variant}.stderr"), "w", encoding="utf-8") as f:
            f.write(stderr)
        status = classify_export(rc, stderr)
        report = next((line for line in stdout.splitlines() if line.strip()), "")
        save(export=status, export_s=round(time.time() - started, 1), report=report[:200],
             stderr_tail=stderr.strip()[-600:])
        if status != "exported":
            cause = "export ran past the row's time" if status == "timeout" else cause_of(stderr)
            save(stage="done", result=status, cause=cause)
            return
        model_path = os.path.join(out, "model.onnx")
        if os.path.isfile(model_path):
            save(io=io_dtypes(model_path))
        if not os.path.isfile(os.path.join(out, "genai_config.json")):
            save(stage="done", result="client fails", cause="no genai_config.json in the folder: "
                 + ", ".join(sorted(os.listdir(out))))
            return
        save(stage="genai")
        try:
            from tests.hf_dirs import genai_greedy
            genai_tokens, first = genai_greedy(out)
        except Exception as e:  # noqa: BLE001
            save(stage="done", result="client fails", cause=f"onnxruntime-genai: {type(e).__name__}: {e}"[:400])
            return
        diff = max(abs(a - float(b)) for a, b in zip(logits, first)) if len(first) == len(logits) else None
        save(genai_tokens=genai_tokens, logits_diff=diff)
        # onnxruntime-genai leaves the end id it stops at out of the sequence (onnxruntime-genai#1814);
        # transformers keeps it.
        if genai_tokens == tokens or (tokens[-1] in eos and genai_tokens == tokens[:-1]):
            save(stage="done", result="right", cause="", stopped=tokens[-1] in eos)
            return
        part = next((i for i, (a, b) in enumerate(zip(tokens, genai_tokens)) if a != b),
                    min(len(tokens), len(genai_tokens)))
        save(stage="done", result="wrong", cause=f"tokens part at position {part} (eager {tokens[part:part + 3]}, "
             f"genai {genai_tokens[part:part + 3]}; lengths {len(tokens)} / {len(genai_tokens)}); "
             f"first step's largest logits difference {diff if diff is None else f'{diff:.2e}'}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


# --------------------------------------------------------------------------------------------------- the driver


def commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT, check=False).stdout.strip()
    return git("rev-parse", "--short", "HEAD") + ("+changes" if git("status", "--porcelain", "src") else "")


def drive(family: str, variant: str, timeout: float) -> dict:
    """Run one row in a process of its own (a new session, killed as a group when the time runs out)."""
    started = time.time()
    fd, state_path = tempfile.mkstemp(prefix="variants-state-", suffix=".json")
    os.close(fd)
    os.unlink(state_path)
    command = [sys.executable, os.path.abspath(__file__), "--row", f"{family}:{variant}", "--state", state_path,
               "--deadline", str(started + timeout)]
    proc = subprocess.Popen(command, cwd=ROOT, env=dict(os.environ, OMP_NUM_THREADS="1"), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=timeout + 10)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        rc = None
    try:
        with open(state_path, encoding="utf-8") as f:
            row = json.load(f)
        os.unlink(state_path)
    except (OSError, ValueError):
        row = {"family": family, "variant": variant, "stage": "start"}
    if row.get("stage") != "done":
        stage = row.get("stage")
        if rc is None:
            row["result"] = "timeout"
            row["cause"] = f"the row ran past {timeout:.0f} s in stage {stage}"
        elif stage == "genai":
            row["result"] = "client fails"
            row["cause"] = f"onnxruntime-genai crashed the process (exit {rc}): {cause_of(err or '')}"[:400]
        else:
            row["result"] = "foreign" if stage == "export" else "eager fails" if stage == "eager" else "not built"
            row["cause"] = f"the row's process died in stage {stage} (exit {rc}): {cause_of(err or '')}"[:400]
    row.pop("stage", None)
    row["seconds"] = round(time.time() - started, 1)
    row["onnxport"] = commit()
    return row


def all_lines() -> list[dict]:
    if not os.path.exists(JSONL):
        return []
    with open(JSONL, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def read_rows() -> dict:
    """The last line of each (family, variant)."""
    rows = {}
    for row in all_lines():
        rows[(row["family"], row["variant"])] = row
    return rows


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    found = {"onnxport": commit()}
    for package in ("torch", "transformers", "onnxruntime", "onnxruntime-genai", "onnx"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = "not installed"
    return found


SHORT = {bad: f"**{bad}**" for bad in ("wrong", "foreign", "timeout", "client fails")}


def dtype_note(row: dict) -> str:
    """'' when the logits and every float input and output are float32, else what they are."""
    io = row.get("io")
    if not io:
        return ""
    odd = {name: t for name, t in {**io["inputs"], **io["outputs"]}.items() if t not in ("FLOAT", "INT64", "INT32")}
    if io["outputs"].get("logits") != "FLOAT":
        odd["logits"] = io["outputs"].get("logits", "missing")
    return ", ".join(f"{k} {v}" for k, v in sorted(odd.items()))


def render(rows: dict) -> str:
    families = [f for f in FAMILIES if any(k[0] == f for k in rows)]
    variants = [v for v in VARIANTS if any(k[1] == v for k in rows)]
    counts: dict[str, int] = {}
    for row in rows.values():
        counts[row["result"]] = counts.get(row["result"], 0) + 1
    found = versions()
    ran = [r["onnxport"] for r in all_lines() if r.get("onnxport")]
    found["onnxport"] = (ran[0] if ran[0] == ran[-1] else f"{ran[0]} to {ran[-1]}") if ran else found["onnxport"]
    replaced = [r for r in all_lines() if r["result"] != "right" and rows.get((r["family"], r["variant"])) is not r
                and rows[(r["family"], r["variant"])]["result"] == "right"]
    lines = [
        "# export-hf text-generation over checkpoint variants",
        "",
        ("Generated by `python bench/export_hf_variants.py` (method: its docstring); `--report` re-renders this "
         "file from `bench/export_hf_variants.jsonl`."),
        "",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in found.items()) + ".",
        ("(onnxport: the commits the rows ran, first to last; others committed while they ran; +changes: src/ had "
         "uncommitted changes.)"),
        "",
        ("Each cell: onnxruntime-genai's greedy tokens against transformers' (right / wrong / client fails), or the "
        "export's failure (refused: onnxport's own error; foreign: a traceback or crash; timeout). `tie-flip` "
        "ties the embeddings where the family's default unties them and unties them where it ties them. "
        "`streamed` is the plain checkpoint with `--streaming`. `eos-hit` / `gen-eos-hit`: an end id greedy "
        "generation meets, in config.json / only in generation_config.json; onnxruntime-genai leaves the end id "
        "it stops at out of its sequence (onnxruntime-genai#1814), so its tokens count as right when they are "
        "transformers' without that last end id. \"(dtypes!)\" marks a model.onnx whose logits or cache are not "
        "float32."),
        "",
        "Totals: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])) +
        f" ({len(rows)} rows).",
        "",
        "| variant \\ family | " + " | ".join(families) + " |",
        "|---|" + "---|" * len(families),
    ]
    for variant in variants:  # variants down, families across: the wider of the two across would not fit
        cells = []
        for family in families:
            row = rows.get((family, variant))
            cell = SHORT.get(row["result"], row["result"]) if row else ""
            if row and dtype_note(row):
                cell += " (dtypes!)"
            cells.append(cell)
        lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    reports = {}
    for row in rows.values():
        if row.get("report"):
            key = re.sub(r"\d+(\.\d+)?(e-?\d+)?", "N", row["report"].strip())[:100]
            reports.setdefault(key, []).append(f"{row['family']}/{row['variant']}")
    if reports:
        lines += ["", "Report first lines (exported rows):", ""]
        lines += [f"- `{k}`: {len(v)} rows" + (f" ({', '.join(v)})" if len(v) <= 12 else "")
                  for k, v in sorted(reports.items())]
    odd = [(f"{r['family']}/{r['variant']}", dtype_note(r)) for r in rows.values() if dtype_note(r)]
    lines += ["", "Model input/output dtypes: " + ("every exported model.onnx has float32 logits and cache."
                                                    if not odd else "not all float32:"), ""]
    lines += [f"- {name}: {note}" for name, note in odd]
    if replaced:
        lines += ["", "Earlier lines a rerun replaced (right on the rerun): " + "; ".join(
            f"{r['family']}/{r['variant']} {r['result']} on {r.get('onnxport')}: {r.get('cause', '')[:160]}"
            for r in replaced), ""]
    bad = [r for r in rows.values() if r["result"] != "right"]
    lines += ["", "## Cases that are not right", ""]
    if not bad:
        lines.append("None.")
    for row in sorted(bad, key=lambda r: (FAMILIES.index(r["family"]) if r["family"] in FAMILIES else 99,
                                          VARIANTS.index(r["variant"]) if r["variant"] in VARIANTS else 99)):
        extra = f" [{row['tie']}]" if row.get("tie") else ""
        cause = (row.get("cause") or "").replace("|", "/").replace("\n", " ")
        lines.append(f"- {row['family']} / {row['variant']}{extra}: **{row['result']}** — {cause}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--timeout", type=float, default=180.0)
    parser.add_argument("--resume", action="store_true", help="skip the rows already in the jsonl")
    parser.add_argument("--report", action="store_true", help="only rewrite the markdown from the jsonl")
    parser.add_argument("--row", help=argparse.SUPPRESS)
    parser.add_argument("--state", help=argparse.SUPPRESS)
    parser.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    if args.row:
        family, variant = args.row.split(":")
        run_row(family, variant, args.state, args.deadline)
        return 0
    if not args.report:
        import transformers

        done = read_rows() if args.resume else {}
        for family in args.families.split(","):
            for variant in args.variants.split(","):
                if (family, variant) in done:
                    continue
                if not hasattr(transformers, CLASSES[family] + "Config"):
                    row = {"family": family, "variant": variant, "result": "skipped",
                           "cause": f"transformers {transformers.__version__} has no {CLASSES[family]}Config"}
                else:
                    row = drive(family, variant, args.timeout)
                with open(JSONL, "a", encoding="utf-8") as f:
                    f.write(json.dumps(row) + "\n")
                print(f"{family:8} {variant:12} {row['result']:13} {row.get('seconds', '')}s "
                      f"{row.get('cause', '')[:150]}", flush=True)
    with open(MD, "w", encoding="utf-8") as f:
        f.write(render(read_rows()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
