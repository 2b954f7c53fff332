"""Census of ``onnxport export-hf --task automatic-speech-recognition`` over transformers' speech-to-text types.

    python bench/speech_census.py                           # every type, one row each into the jsonl
    python bench/speech_census.py --types whisper,moonshine # some types (their rows replaced)
    python bench/speech_census.py --report                  # only rewrite the markdown from the jsonl
    python bench/speech_census.py --timeout 600             # seconds per type (300)

The types are the keys of ``modeling_auto.MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES``. Each runs in a child process
(``--one TYPE``) with a time limit for all of its steps, one type at a time:

1. build: ``census_build.tiny_config(type)``; bos 1, eos 2, pad 0, decoder start 1 where the config (or its text or
   decoder sub-config) has them; key/value heads that do not divide the attention heads set to them; the class
   the mapping names, ``torch.manual_seed(0)``, matrices redrawn at 0.3 and the decoder's token embeddings at 1.0
   (``tests.speech_dirs._spread``). A failure is "not built".
2. feature extractor: the type's class in ``FEATURE_EXTRACTOR_MAPPING_NAMES`` (else that of its encoder
   sub-config's type), built with its defaults but for: feature_size / num_mel_bins set to the config's mel bins,
   ``dither=0.0``, ``return_attention_mask=True`` (as Moonshine's and SpeechT5's checkpoints have it, so that a
   padded batch carries its mask), and for Whisper's (Voxtral's too) ``chunk_length=1`` with a hop giving
   2 x max_source_positions frames. None found is "no inputs".
3. eager: ``model.generate`` (greedy, 8 new tokens, eos and forced eos unset) on the extractor's padded batch of
   two noise clips (0.9 s, 0.55 s) and on one of three (1.6, 0.3, 1.1 s) (``tests.speech_dirs.clips``; the
   extractor's tensors kept as ``speech_dirs.encoded`` keeps them; Whisper's padded to its fixed frames). A
   failure is "eager fails" (not counted).
4. ``save_pretrained``, the feature extractor and a word-level tokenizer (``write_special_tokenizer``) into a
   temporary directory, then ``python -m onnxport export-hf DIR --task automatic-speech-recognition -o OUT``
   (``OMP_NUM_THREADS=1``). Exit 0 is exported; otherwise "refused" when the stderr ends with the CLI's own
   ``onnxport: ...`` message (after any traceback), "foreign" when a traceback ends it, "timeout" when the type's
   time ran out.
5. ``onnxport.generate_seq2seq`` on both batches: "right" when its tokens equal eager's on both (less the start
   token where eager's ``generate`` leaves it out, as Whisper's does), else "wrong" (both token lists kept), or
   "client fails".

One JSON line per type goes to ``bench/speech_census.jsonl`` (a later row of a type replaces its earlier one);
``bench/speech_census.md`` is rendered from it. Each CLI stderr is kept under ``$TMPDIR/speech-census-logs/``; each
row names the onnxport commit it ran ("+changes" when src/ had uncommitted changes).
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
JSONL = os.path.join(HERE, "speech_census.jsonl")
MARKDOWN = os.path.join(HERE, "speech_census.md")
LOGS = os.path.join(tempfile.gettempdir(), "speech-census-logs")
TASK = "automatic-speech-recognition"
NEW_TOKENS = 8
BATCHES = ((0.9, 0.55), (1.6, 0.3, 1.1))
FILES = ("encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx")
TOKEN_IDS = dict(bos_token_id=1, eos_token_id=2, pad_token_id=0, decoder_start_token_id=1)
SUB_CONFIGS = ("encoder_config", "encoder", "audio_config")


def first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]  # some messages open with a newline
    return f"{type(error).__name__}: {lines[0] if lines else ''}"[:300]


def speech_types() -> list[str]:
    from transformers.models.auto import modeling_auto

    return list(modeling_auto.MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES)


def encoder_config(config):
    return next((getattr(config, n) for n in SUB_CONFIGS if hasattr(getattr(config, n, None), "model_type")), None)


# the child: one type

def build(model_type: str):
    import torch
    import transformers
    from census_build import tiny_config
    from transformers.models.auto import modeling_auto

    from tests.speech_dirs import _spread

    config = tiny_config(model_type)
    for holder in (config, getattr(config, "text_config", None), getattr(config, "decoder_config", None),
                   getattr(config, "decoder", None)):
        for key, value in TOKEN_IDS.items():
            if holder is not None and hasattr(holder, key):
                setattr(holder, key, value)
    for holder in [config] + [getattr(config, name, None) for name in config.to_dict() if name.endswith("config")]:
        for key in [k for k in getattr(holder, "__dict__", {}) if k.endswith("num_key_value_heads")]:
            heads = getattr(holder, key.replace("key_value", "attention"), None)  # tiny_config may leave more
            if isinstance(heads, int) and isinstance(getattr(holder, key), int) and heads % getattr(holder, key):
                setattr(holder, key, heads)
    cls = getattr(transformers, modeling_auto.MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES[model_type])
    torch.manual_seed(0)
    model = cls(config).eval()
    try:
        _spread(model, 0.3, 1.0)
    except Exception:  # no get_decoder() or no input embeddings on it: the matrices alone
        _spread(model, 0.3, None)
    return config, model


def vocab_size(config) -> int:
    holders = (config, getattr(config, "text_config", None), getattr(config, "decoder_config", None),
               getattr(config, "decoder", None))
    return next((h.vocab_size for h in holders if isinstance(getattr(h, "vocab_size", None), int)), 99)


def feature_extractor(model_type: str, config, name: str | None = None):
    """The type's feature extractor (``name``'s class where given) agreeing with the tiny config, or (None,
    reason)."""
    import inspect

    import transformers
    from transformers.models.auto.feature_extraction_auto import FEATURE_EXTRACTOR_MAPPING_NAMES as names

    encoder = encoder_config(config)
    name = name or names.get(model_type) or (names.get(encoder.model_type) if encoder is not None else None)
    if name is None:
        kinds = model_type + (f" (encoder {encoder.model_type})" if encoder is not None else "")
        return None, f"no feature extractor class for {kinds}"
    cls = getattr(transformers, name, None)
    if cls is None:
        return None, f"{name} is not in transformers"
    mels = next((v for v in (getattr(config, "num_mel_bins", None), getattr(config, "input_feat_per_channel", None),
                             getattr(encoder, "num_mel_bins", None)) if isinstance(v, int)), None)
    wanted = {"dither": 0.0, "return_attention_mask": True}
    params = inspect.signature(cls.__init__).parameters
    defaults = cls()
    if mels is not None:  # a feature size of 1 is raw samples (SpeechT5's mel bins are its speech decoder's)
        wanted.update(num_mel_bins=mels, **({"feature_size": mels} if getattr(defaults, "feature_size", 2) > 1 else {}))
    positions = getattr(config, "max_source_positions", None) or getattr(encoder, "max_source_positions", None)
    if name == "WhisperFeatureExtractor" and positions:
        frames = 2 * positions
        wanted.update(chunk_length=1, hop_length=16000 // frames, n_fft=min(400, 2 * (16000 // frames)))
    kwargs = {k: v for k, v in wanted.items() if k in params or hasattr(defaults, k)}
    if "feature_size" in kwargs and "feature_size" not in params and "num_mel_bins" in params:
        kwargs.pop("feature_size")  # a class that derives its feature size from its mel bins
    try:
        extractor = cls(**kwargs)
    except Exception:
        extractor = cls(**{k: v for k, v in kwargs.items() if k in params})
    for key, value in kwargs.items():
        if hasattr(extractor, key) and key not in ("hop_length", "chunk_length", "n_fft"):
            setattr(extractor, key, value)
    return extractor, name


def encode(extractor, seconds):
    from tests import speech_dirs

    audio = speech_dirs.clips(seconds, seed=len(seconds))
    rate = getattr(extractor, "sampling_rate", speech_dirs.RATE) or speech_dirs.RATE
    whisper = type(extractor).__name__ == "WhisperFeatureExtractor"  # its encoder takes a fixed number of frames
    batch = extractor(audio, sampling_rate=rate, padding="max_length" if whisper else True, truncation=whisper,
                      return_tensors="pt")
    kept = {k: v for k, v in batch.items() if k in ("input_features", "input_values", "attention_mask")}
    return kept, sorted(set(batch) - set(kept))


def export(directory: str, out: str, model_type: str, seconds_left: float) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "src"), env.get("PYTHONPATH", "")])
    command = [sys.executable, "-m", "onnxport", "export-hf", directory, "--task", TASK, "-o", out]
    os.makedirs(LOGS, exist_ok=True)
    log = os.path.join(LOGS, f"{model_type}.stderr")
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=max(seconds_left, 1))
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "reason": f"export-hf ran past {seconds_left:.0f} s"}
    with open(log, "w", encoding="utf-8") as f:
        f.write(done.stderr)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    last = lines[-1][:300] if lines else ""
    if done.returncode == 0:
        return {"status": "exported", "reason": ""}
    own = [i for i, line in enumerate(lines) if line.startswith("onnxport:")]
    tracebacks = [i for i, line in enumerate(lines) if line.startswith("Traceback")]
    if own and own[-1] > max(tracebacks, default=-1):
        return {"status": "refused", "reason": lines[own[-1]][:300]}
    files = [line.strip() for line in lines if line.strip().startswith('File "')]
    ours = [f for f in files if "/onnxport/" in f]
    return {"status": "foreign", "reason": last or f"exit {done.returncode}",
            "where": "; ".join(dict.fromkeys(f[:200] for f in ours[-1:] + files[-1:]))}


def run_one(model_type: str, row_path: str, deadline: float) -> None:
    import torch

    row = {"type": model_type, "status": "not built", "reason": "", "stage": "build"}

    def save():
        with open(row_path, "w", encoding="utf-8") as f:
            json.dump(row, f)

    save()
    try:
        config, model = build(model_type)
    except Exception as e:
        row["reason"] = first_line(e)
        return save()
    row.update(stage="feature extractor", model_class=type(model).__name__)
    try:
        extractor, name = feature_extractor(model_type, config)
    except Exception as e:
        extractor, name = None, f"feature extractor: {first_line(e)}"
    if extractor is None:
        row.update(status="no inputs", reason=name)
        return save()
    row.update(stage="eager", feature_extractor=name)
    model.generation_config.eos_token_id = None
    model.generation_config.forced_eos_token_id = None
    start = model.generation_config.decoder_start_token_id
    start = start if start is not None else getattr(config, "decoder_start_token_id", None) or 1
    batches, expected = [], []
    try:
        for seconds in BATCHES:
            inputs, dropped = encode(extractor, seconds)
            if dropped:
                row["dropped_inputs"] = dropped
            with torch.no_grad():
                expected.append(model.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False, num_beams=1))
            batches.append(inputs)
    except Exception as e:
        row.update(status="eager fails", reason=first_line(e))
        return save()
    row.update(stage="export", inputs=sorted(batches[0]))
    save()
    with tempfile.TemporaryDirectory(prefix=f"speech-census-{model_type}-") as scratch:
        directory, out = os.path.join(scratch, "model"), os.path.join(scratch, "out")
        try:
            from tests.test_transformers_js import write_special_tokenizer

            model.generation_config.eos_token_id = TOKEN_IDS["eos_token_id"]
            model.save_pretrained(directory)
            extractor.save_pretrained(directory)
            write_special_tokenizer(directory, vocab_size(config))
            model.generation_config.eos_token_id = None
        except Exception as e:
            row.update(status="not built", reason=f"save: {first_line(e)}")
            return save()
        row.update(export(directory, out, model_type, deadline - time.time()))
        save()
        if row["status"] != "exported":
            return save()
        row["stage"] = "client"
        try:
            import onnxport

            got = []
            for inputs in batches:
                main = next(k for k in inputs if k != "attention_mask")
                got.append(onnxport.generate_seq2seq(*(os.path.join(out, f) for f in FILES), inputs[main],
                                                     inputs.get("attention_mask"), decoder_start_token_id=start,
                                                     max_new_tokens=NEW_TOKENS))
        except Exception as e:
            row.update(status="client fails", reason=first_line(e))
            return save()
    if all(x.shape[1] == g.shape[1] - 1 for g, x in zip(got, expected)):  # Whisper's generate drops the start
        got, row["eager_without_start"] = [g[:, 1:] for g in got], True
    same = [g.shape == x.shape and torch.equal(g, x) for g, x in zip(got, expected)]
    if all(same):
        row.update(status="right", reason="")
    else:
        row.update(status="wrong", reason=f"tokens differ on batch(es) {[i for i, s in enumerate(same) if not s]}",
                   onnx_tokens=[g.tolist() for g in got], eager_tokens=[x.tolist() for x in expected])
    row["stage"] = "done"
    save()


# the parent: every type, the report

def run_type(model_type: str, timeout: float) -> dict:
    row_path = os.path.join(tempfile.gettempdir(), f"speech-census-row-{model_type}.json")
    command = [sys.executable, os.path.abspath(__file__), "--one", model_type, "--row", row_path,
               "--deadline", str(time.time() + timeout - 10)]
    began = time.time()
    child = subprocess.Popen(command, cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    try:
        _, err = child.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        _, err = child.communicate()
        timed_out = True
    row = {"type": model_type, "status": "foreign", "reason": "", "stage": "start"}
    if os.path.exists(row_path):
        with open(row_path, encoding="utf-8") as f:
            row = json.load(f)
        os.remove(row_path)
    if timed_out:
        row.update(status="timeout", reason=f"the type's {timeout:.0f} s ran out during {row.get('stage')}")
    elif child.returncode != 0:
        tail = [line for line in (err or "").splitlines() if line.strip()]
        row.update(status="foreign", reason=f"census child exited {child.returncode} during {row.get('stage')}: "
                   + (tail[-1][:200] if tail else ""))
    row["seconds"] = round(time.time() - began, 1)
    row["onnxport"] = commit()
    return row


def commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "src"], cwd=ROOT, capture_output=True, text=True)
    return (done.stdout.strip() or "?") + ("+changes" if dirty.stdout.strip() else "")


def read_rows() -> dict[str, dict]:
    rows: dict[str, dict] = {}
    if os.path.exists(JSONL):
        with open(JSONL, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    row = json.loads(line)
                    rows[row["type"]] = row
    return rows


def write_rows(rows: dict[str, dict]) -> None:
    with open(JSONL, "w", encoding="utf-8") as f:
        for row in rows.values():
            f.write(json.dumps(row) + "\n")


def versions() -> str:
    import onnxruntime
    import torch
    import transformers

    return f"torch {torch.__version__}, transformers {transformers.__version__}, onnxruntime {onnxruntime.__version__}"


def refusal_reason(reason: str) -> str:
    """The refusal's error class and its first clause, to group refusals by."""
    text = re.sub(r"^onnxport:\s*", "", reason)
    return re.split(r"[:;(]", text.split(": ", 1)[-1] if ": " in text else text)[0].strip()[:100] or "?"


def render(rows: dict[str, dict]) -> None:
    counts = collections.Counter(row["status"] for row in rows.values())
    refused = collections.Counter(refusal_reason(r["reason"]) for r in rows.values() if r["status"] == "refused")
    lines = ["# Speech recognition census", "",
             f"Run {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC with {versions()}; onnxport "
             f"{commit()}. Method and command lines: the docstring of `bench/speech_census.py`.", "",
             f"- types: {len(rows)}"]
    for status in ("not built", "no inputs", "eager fails", "right", "wrong", "client fails", "refused", "foreign",
                   "timeout"):
        lines.append(f"- {status}: {counts.get(status, 0)}")
        if status == "refused":
            lines += [f"  - {n} x {reason}" for reason, n in refused.most_common()]
    lines += ["", "| type | class | feature extractor | status | reason / detail |", "|---|---|---|---|---|"]
    for row in sorted(rows.values(), key=lambda r: r["type"]):
        detail = row.get("reason", "")
        if row.get("where"):
            detail += f" (at {row['where']})"
        if row["status"] == "wrong":
            detail += f"; onnx {row['onnx_tokens']} vs eager {row['eager_tokens']}"
        if row.get("dropped_inputs"):
            detail += f"; extractor outputs not fed: {row['dropped_inputs']}"
        lines.append(f"| {row['type']} | {row.get('model_class', '')} | {row.get('feature_extractor', '')} | "
                     f"{row['status']} | {detail.lstrip('; ').replace('|', '/')} |")
    with open(MARKDOWN, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--types", help="comma-separated model types (default: all)")
    parser.add_argument("--report", action="store_true", help="only rewrite the markdown from the jsonl")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per type")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--row", help=argparse.SUPPRESS)
    parser.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path[:0] = [ROOT, HERE, os.path.join(ROOT, "src")]
    if args.one:
        return run_one(args.one, args.row, args.deadline)
    if not args.report:
        types = args.types.split(",") if args.types else speech_types()
        for model_type in types:
            row = run_type(model_type, args.timeout)
            rows = read_rows()
            rows[model_type] = row
            write_rows(rows)
            print(f"{model_type}: {row['status']} {row.get('reason', '')[:160]} ({row['seconds']} s)", flush=True)
    render(read_rows())


if __name__ == "__main__":
    main()
