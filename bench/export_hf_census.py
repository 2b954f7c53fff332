"""Census of ``onnxport export-hf`` over transformers' model types, task by task, run as a new user runs it.

    python bench/export_hf_census.py                                  # every task, rows appended to the jsonl
    python bench/export_hf_census.py --tasks text-generation --resume # one task, skipping the rows already there
    python bench/export_hf_census.py --tasks fill-mask --types bert,roberta
    python bench/export_hf_census.py --report                         # only rewrite the markdown from the jsonl

The model types of a task are those of the mapping transformers' auto class for the task reads
(``modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` for text-generation, ``..._SEQUENCE_CLASSIFICATION_...`` for
text-classification, and so on; feature-extraction: ``MODEL_MAPPING_NAMES`` kept to the text models, those whose
config has a vocabulary of its own and no vision, audio or text sub-config, and that are not encoder-decoders).
For each (task, type), in a forked process with a time limit for everything of the row (``--timeout``, 240 s), one
row at a time:

1. build: the config class's defaults shrunk to a tiny config (``census_build.tiny_config``; a hybrid model left
   with no attention layer in its 2 layers gets its last one back, ``keep_attention_layer``); bos, eos and pad ids
   that are unset or past the vocabulary set to 1, 2 and 0 (the tokenizer's ``<s>``, ``</s>``, ``<pad>``); the class
   the task's mapping names, seeded with ``torch.manual_seed(0)``, then every weight drawn anew and spread
   (``census_build.redraw_weights``: transformers' tiny default init leaves next-token scores nearly tied, so that
   greedy tokens would turn on rounding), kept at the default init if the spread weights give non-finite outputs.
   A failure is "not built" (not counted against export-hf).
2. eager: text-generation runs ``generate`` greedily (``PROMPT``, ``NEW_TOKENS`` new tokens, batch 1) under a
   generation config of the model's token ids alone: onnxruntime-genai searches plainly, so processors such as
   BART's ``forced_eos_token_id`` are left out (and named in the row); the text encoder tasks run a forward on two
   sentences of the tokenizer, padded. A failure is "eager fails" (excluded).
3. ``save_pretrained`` (safetensors) into a directory, with a word-level ``tokenizer.json`` of the config's
   vocabulary made with the ``tokenizers`` package (``<pad>`` 0, ``<s>`` 1, ``</s>`` 2, then ``w3``...), giving
   the inputs the type's own tokenizer class gives (its ``model_input_names``: ``token_type_ids`` for BERT).
   For text-generation a config with ``is_decoder=False`` gets ``True``, as a checkpoint saved to generate has.
4. ``python -m onnxport export-hf DIR --task TASK -o OUT`` in a subprocess (``OMP_NUM_THREADS=1``, the CLI's
   defaults: a checkpoint this small is loaded and verified), with what is left of the row's time. Exit 0 is
   "exported"; otherwise the export is "refused" when onnxport's own error line (``onnxport: SomeError: ...``,
   which the CLI prints for the errors it raises on purpose) ends its stderr, "foreign" when a Python traceback
   does (an exception that is not onnxport's, or a crash), "timeout" when the time ran out. The first stdout line
   (the verification report, or that it was skipped) is kept.
5. the folder run by a client that is not onnxport: text-generation by onnxruntime-genai (greedy, same prompt, in a
   subprocess of its own) and by a plain onnxruntime greedy loop written here (input_ids, attention_mask,
   position_ids where the graph takes them, every ``past_key_values.*`` input zeros at the first step, of length 0
   along its symbolic dims, and the matching ``present.*`` output fed back after); tokens compared with eager's.
   The row's result is onnxruntime-genai's: "right" (same tokens), "wrong" (numbers: where the tokens part, the
   first step's logits difference), or "client fails" (genai cannot load or run the folder; the onnxruntime loop's
   outcome is kept beside it). Encoder tasks: an
   ``onnxruntime.InferenceSession`` on ``OUT/model.onnx`` fed the tokenizer's encoding (only the inputs the session
   declares), each output compared with eager's output of that name: "right" when the largest difference is within
   1e-4 + 1e-3 x the eager output's largest magnitude.

One JSON line per row goes to ``bench/export_hf_census.jsonl`` (a later line for a task and type replaces an earlier
one); ``bench/export_hf_census.md`` is rendered from it. Each row's CLI stderr is kept under
``$TMPDIR/export-hf-census-logs/TASK/TYPE.stderr``; each row names the onnxport commit it ran (``onnxport``,
"+changes" when src/ had uncommitted changes).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
JSONL = os.path.join(HERE, "export_hf_census.jsonl")
MD = os.path.join(HERE, "export_hf_census.md")
LOGS = os.path.join(tempfile.gettempdir(), "export-hf-census-logs")
MAX_PARAMS = 150_000_000

PROMPT = [1, 5, 17, 33, 8]
NEW_TOKENS = 8
SENTENCES = ["w5 w17 w33 w8 w42 w7 w12", "w9 w3 w11 w64"]  # words of the tokenizer below, batched with padding
TOLERANCE = (1e-4, 1e-3)  # absolute, and relative to the eager output's largest magnitude

# task -> the modeling_auto mapping its auto class reads, in the order the census runs them.
TASKS = {
    "text-generation": "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "text-classification": "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
    "fill-mask": "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
    "token-classification": "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES",
    "question-answering": "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES",
    "feature-extraction": "MODEL_MAPPING_NAMES",
}
ENCODER_TASKS = tuple(t for t in TASKS if t != "text-generation")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: " + (text.splitlines()[0] if text else "")[:300]


def _lines(exc: BaseException, n: int = 3) -> str:
    """The first ``n`` lines of an error, joined: onnxruntime says which index of a shape is wrong on line 2."""
    text = " / ".join(line.strip() for line in str(exc).strip().splitlines()[:n] if line.strip())
    return f"{type(exc).__name__}: {text[:400]}"


def onnxport_commit() -> str:
    """The onnxport checkout the CLI runs: its commit, and "+changes" when src/ differs from it."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "src"], cwd=ROOT, capture_output=True, text=True,
                               timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"
    return head + ("+changes" if dirty else "")


# -- the model types of a task ------------------------------------------------------------------------


def task_types(task: str) -> dict[str, str]:
    """model type -> the class name the task's auto class builds for it."""
    from transformers.models.auto import modeling_auto

    out = {}
    for model_type, names in getattr(modeling_auto, TASKS[task]).items():
        out[model_type] = names[0] if isinstance(names, (list, tuple)) else names
    if task == "feature-extraction":
        out = {t: c for t, c in out.items() if _is_text_model(t)}
    return dict(sorted(out.items()))


def _is_text_model(model_type: str) -> bool:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            config = CONFIG_MAPPING[model_type]()
    except Exception:  # noqa: BLE001 - a config class that cannot be made with its defaults: not in the census
        return False
    subs = ("text_config", "vision_config", "audio_config", "encoder_config", "decoder_config", "backbone_config")
    return isinstance(getattr(config, "vocab_size", None), int) and not any(
        getattr(config, s, None) is not None for s in subs) and not getattr(config, "is_encoder_decoder", False)


# -- the model directory ---------------------------------------------------------------------------------


def tokenizer_inputs(model_type: str) -> list[str]:
    """What the type's own tokenizer class gives (``model_input_names``: BERT's gives ``token_type_ids``,
    RoBERTa's does not); input ids and mask where transformers names no tokenizer for the type."""
    import transformers
    from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING_NAMES

    names = TOKENIZER_MAPPING_NAMES.get(model_type)
    for name in (names if isinstance(names, (list, tuple)) else [names]):
        cls = getattr(transformers, name, None) if isinstance(name, str) else None
        if cls is not None and isinstance(getattr(cls, "model_input_names", None), list):
            return list(cls.model_input_names)
    return ["input_ids", "attention_mask"]


def write_tokenizer(directory: str, vocab_size: int, input_names: list[str] | None = None) -> None:
    """A whitespace word-level tokenizer over ``vocab_size`` ids, saved as transformers and onnxruntime-genai
    read it: ``<pad>`` 0, ``<s>`` 1, ``</s>`` 2, then the words ``w3``, ``w4``...; it gives ``input_names``."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = {"<pad>": 0, "<s>": 1, "</s>": 2}
    words.update({f"w{i}": i for i in range(3, vocab_size)})
    tok = Tokenizer(models.WordLevel(words, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(os.path.join(directory, "tokenizer.json"))
    settings = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
                "pad_token": "<pad>", "unk_token": "<pad>", "model_max_length": 512}
    if input_names:
        settings["model_input_names"] = input_names
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(settings, f)


def _text_config(config: Any) -> Any:
    try:
        return config.get_text_config()
    except Exception:  # noqa: BLE001
        return config


def set_token_ids(config: Any) -> dict[str, Any]:
    """bos/eos/pad ids that are unset or past the vocabulary become the tokenizer's <s>, </s>, <pad>; the changes."""
    changed: dict[str, Any] = {}
    holders = [config] + ([_text_config(config)] if _text_config(config) is not config else [])
    vocab = getattr(_text_config(config), "vocab_size", None) or getattr(config, "vocab_size", None)
    if not isinstance(vocab, int):
        return changed
    for holder in holders:
        for key, default in (("bos_token_id", 1), ("eos_token_id", 2), ("pad_token_id", 0)):
            value = getattr(holder, key, None)
            if isinstance(value, list):
                kept = [v for v in value if isinstance(v, int) and 0 <= v < vocab]
                new = kept or default
            elif isinstance(value, int) and 0 <= value < vocab:
                continue
            else:
                new = default
            if new != value:
                setattr(holder, key, new)
                changed[key] = [value, new]
    return changed


# -- one row, in the child -----------------------------------------------------------------------------------


def _prompt(vocab: int) -> list[int]:
    return [t if t < vocab else 3 + t % max(1, vocab - 3) for t in PROMPT]


def _sentences(vocab: int) -> list[str]:
    def word(w: str) -> str:
        i = int(w[1:])
        return f"w{i if i < vocab else 3 + i % max(1, vocab - 3)}"

    return [" ".join(word(w) for w in s.split()) for s in SENTENCES]


def keep_attention_layer(config: Any) -> tuple[Any, dict[str, Any]]:
    """``_attention_layer_changes`` made: the config built again with them (its derived fields follow)."""
    changed = _attention_layer_changes(config)
    if changed:
        derived = {k for k in dir(type(config)) if isinstance(getattr(type(config), k, None), property)}
        settings = {k: v for k, v in config.to_dict().items() if k not in derived}
        try:
            config = type(config).from_dict({**settings, **{k: new for k, (_, new) in changed.items()}})
        except Exception as exc:  # noqa: BLE001 - the config as shrunk, which may still build
            return config, {"not_applied": f"{changed} ({_first_line(exc)[:120]})"}
    return config, changed


def _attention_layer_changes(config: Any) -> dict[str, Any]:
    """A hybrid model shrunk to 2 layers may have lost every attention layer (Jamba's period 8 from layer 4, Bamba's
    unset attention indices), which transformers' cache cannot generate with: its last layer made one again."""
    changed: dict[str, Any] = {}
    n = getattr(config, "num_hidden_layers", None)
    if not isinstance(n, int) or n < 2:
        return changed
    if hasattr(config, "attn_layer_indices") and not getattr(config, "attn_layer_indices", None):
        changed["attn_layer_indices"] = [None, [n - 1]]
    period, offset = getattr(config, "attn_layer_period", None), getattr(config, "attn_layer_offset", None)
    if isinstance(period, int) and isinstance(offset, int) and not any(i % period == offset for i in range(n)):
        changed["attn_layer_period"], changed["attn_layer_offset"] = [period, n], [offset, n - 1]
    blocks = getattr(config, "block_types", None)
    if isinstance(blocks, list) and "attention" in blocks and "attention" not in [blocks[i % len(blocks)]
                                                                                for i in range(n)]:
        changed["block_types"] = [blocks, [b for b in blocks if b != "attention"][: n - 1] + ["attention"]]
    types = getattr(config, "layer_types", None)
    if not isinstance(getattr(type(config), "layer_types", None), property) and not changed \
            and isinstance(types, list) and "linear_attention" in types and "hybrid" not in types \
            and not any(t != "linear_attention" and "attention" in str(t) for t in types):
        changed["layer_types"] = [types, types[:-1] + ["full_attention"]]
    return changed


def build(task: str, model_type: str, class_name: str, row: dict[str, Any]) -> tuple[Any, Any]:
    import torch
    import transformers

    import census_build as cb

    config = cb.tiny_config(model_type)
    config, hybrid = keep_attention_layer(config)
    if hybrid:
        row["attention_layer_kept"] = hybrid
    changed = set_token_ids(config)
    if task == "text-generation":  # a checkpoint saved for generation says so (BertLMHeadModel warns otherwise)
        for holder in {id(config): config, id(_text_config(config)): _text_config(config)}.values():
            if getattr(holder, "is_decoder", None) is False:
                holder.is_decoder = True
                changed["is_decoder"] = [False, True]
    if changed:
        row["token_ids_set"] = changed
    cls = getattr(transformers, class_name)
    with torch.device("meta"):
        meta = cls(config)
    n = sum(p.numel() for p in meta.parameters())
    del meta
    row["params"] = n
    if n > MAX_PARAMS:
        raise MemoryError(f"{n / 1e6:.0f}M parameters after shrinking (limit {MAX_PARAMS / 1e6:.0f}M)")
    torch.manual_seed(0)
    model = cls(config).eval()
    return config, model


def _finite(value: Any) -> bool:
    import numpy as np
    import torch

    if isinstance(value, torch.Tensor):
        return not value.is_floating_point() or bool(torch.isfinite(value).all())
    if isinstance(value, np.ndarray):
        return value.dtype.kind != "f" or bool(np.isfinite(value).all())
    if isinstance(value, (tuple, list)):
        return all(_finite(v) for v in value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    return True


# Settings of a generation config that do not change which token greedy search picks next.
_NOT_SEARCH = {"bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id", "transformers_version",
               "_from_model_config", "use_cache", "max_length", "max_new_tokens", "do_sample", "num_beams",
               "output_attentions", "output_hidden_states", "return_dict_in_generate", "output_scores"}


def eager_generate(model: Any, prompt: list[int]) -> dict[str, Any]:
    """Greedy ``generate`` under a generation config of the model's token ids alone: onnxruntime-genai runs plain
    greedy search, so the logits processors of the model's own config (BART's ``forced_eos_token_id`` at the
    last step) are left out of both; what they were is returned."""
    import torch
    from transformers import GenerationConfig

    own = model.generation_config
    plain = GenerationConfig(bos_token_id=own.bos_token_id, eos_token_id=own.eos_token_id,
                             pad_token_id=own.pad_token_id)
    left_out = {k: v for k, v in own.to_diff_dict().items() if k not in _NOT_SEARCH}
    ids = torch.tensor([prompt])
    mask = torch.ones_like(ids)
    model.generation_config = plain  # generate fills what a config passed to it leaves unset from the model's
    try:
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=mask).logits[0, -1].double()
            tokens = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False,
                                    num_beams=1)
    finally:
        model.generation_config = own
    if not isinstance(tokens, torch.Tensor):
        tokens = tokens.sequences
    return {"tokens": tokens[0].tolist(), "logits": logits.numpy(), "finite": bool(torch.isfinite(logits).all()),
            "left_out": left_out}


def encode(directory: str, vocab: int) -> dict[str, Any]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(directory)
    return dict(tok(_sentences(vocab), padding=True, return_tensors="np"))


def eager_encoder(model: Any, enc: dict[str, Any]) -> dict[str, Any]:
    import inspect

    import torch

    params = inspect.signature(model.forward).parameters
    feed = {k: torch.from_numpy(v) for k, v in enc.items() if k in params}
    with torch.no_grad():
        out = model(**feed)
    return {k: v.detach().double().numpy() for k, v in out.items() if isinstance(v, torch.Tensor)}


def run_row(task: str, model_type: str, class_name: str, row: dict[str, Any], save, work: str,
            deadline: float) -> None:
    import torch

    import census_build as cb

    torch.set_num_threads(1)
    row["status"], row["model_class"] = "not built", class_name
    save()
    try:
        config, model = build(task, model_type, class_name, row)
    except Exception as exc:  # noqa: BLE001
        row["reason"] = _first_line(exc)
        return
    text = _text_config(config)
    vocab = getattr(text, "vocab_size", None) or getattr(config, "vocab_size", None) or 100
    row["vocab"] = vocab
    directory, out = os.path.join(work, "model"), os.path.join(work, "onnx")
    os.makedirs(directory)
    row["status"] = "eager fails"
    save()
    # The eager run, with weights drawn anew first (kept at transformers' init if those give non-finite outputs).
    try:
        if task == "text-generation":
            prompt = _prompt(vocab)
            row["prompt"] = prompt
            eager_of = lambda m: eager_generate(m, prompt)  # noqa: E731
        else:
            row["tokenizer_gives"] = tokenizer_inputs(model_type)
            write_tokenizer(directory, vocab, row["tokenizer_gives"])
            enc = encode(directory, vocab)
            row["encoding"] = sorted(enc)
            eager_of = lambda m: eager_encoder(m, enc)  # noqa: E731
        cb.redraw_weights(model)
        row["weights"] = "redrawn"
        eager = eager_of(model)
        if not _finite(eager.get("logits", eager)) or not eager.get("finite", True):
            torch.manual_seed(0)
            model = type(model)(config).eval()
            row["weights"] = "default init (redrawn ones gave non-finite outputs)"
            eager = eager_of(model)
    except Exception as exc:  # noqa: BLE001
        row["reason"] = _first_line(exc)
        row["trace"] = _short_trace(traceback.format_exc())
        return
    if task == "text-generation":
        row["eager_tokens"] = eager["tokens"]
        if eager["left_out"]:
            row["generation_config_left_out"] = eager["left_out"]
        eos = getattr(model.generation_config, "eos_token_id", None)
        row["eos"] = eos if isinstance(eos, list) else [eos] if eos is not None else []
    row["status"] = "not saved"
    save()
    try:
        model.save_pretrained(directory)
        write_tokenizer(directory, vocab, row.get("tokenizer_gives"))
    except Exception as exc:  # noqa: BLE001
        row["reason"] = _first_line(exc)
        return
    del model
    row["status"] = "timeout"
    save()
    export_cli(task, directory, out, row, deadline)
    save()
    if row["status"] != "exported":
        return
    row["status"] = "client fails"
    save()
    if task == "text-generation":
        check_generation(out, row, eager, deadline)
    else:
        check_encoder(out, row, eager, enc)


def export_cli(task: str, directory: str, out: str, row: dict[str, Any], deadline: float) -> None:
    cmd = [sys.executable, "-m", "onnxport", "export-hf", directory, "--task", task, "-o", out]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    budget = max(5.0, deadline - time.time() - 15)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=budget, cwd=ROOT)
    except subprocess.TimeoutExpired as exc:
        row["export_s"] = round(time.perf_counter() - start, 1)
        row["status"] = "timeout"
        row["reason"] = f"export-hf ran past {budget:.0f} s"
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
        row["stderr_tail"] = _tail(stderr)
        return
    row["export_s"] = round(time.perf_counter() - start, 1)
    row["rc"] = proc.returncode
    os.makedirs(os.path.join(LOGS, task), exist_ok=True)
    with open(os.path.join(LOGS, task, row["type"] + ".stderr"), "w") as f:
        f.write(proc.stderr)
    report = [line for line in proc.stdout.splitlines() if line.strip() and not line.startswith("saved ")]
    if report:
        row["report"] = report[0][:300]
    if proc.returncode == 0:
        row["status"] = "exported"
        row["files"] = sorted(os.listdir(out)) if os.path.isdir(out) else []
        return
    row["stderr_tail"] = _tail(proc.stderr)
    row.update(classify(proc.stderr, proc.returncode))


def _noise(line: str) -> bool:
    return bool(re.match(r"^[WI]\d{4} .*(_pytree|warnings)", line)) or "Writing model shards" in line \
        or "it/s]" in line or not line.strip()


def _tail(stderr: str, n: int = 15) -> list[str]:
    return [line[:400] for line in stderr.splitlines() if not _noise(line)][-n:]


def _with_detail(reason: str, detail: list[str]) -> str:
    """A refusal's first line with what names its cause: torch.export's words for a capture failure ("tried:"),
    the fix line for a message that ends with a colon (a verification mismatch lists outputs, then says why)."""
    tried = next((line for line in detail if line.startswith("tried:")), None)
    if tried:
        return f"{reason} {tried}"
    if reason.rstrip().endswith(":"):
        fix = next((line for line in detail if line.startswith("fix:")), None)
        if fix:
            return f"{reason} {fix}"
    return reason


FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (.+)$')


def _short_path(path: str) -> str:
    for marker in ("/site-packages/", "/src/", "/bench/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def classify(stderr: str, rc: int) -> dict[str, Any]:
    """A failed export-hf run: refused (onnxport's error line) or foreign (a traceback, a signal)."""
    lines = stderr.splitlines()
    for i in range(len(lines) - 1, -1, -1):
        m = re.match(r"^onnxport: (\w+): (.*)$", lines[i])
        if m:
            rest = [line.strip() for line in lines[i + 1:i + 8] if line.startswith("  ")]
            reason = f"{m.group(1)}: {m.group(2)}"
            reason = _with_detail(reason, rest)
            return {"status": "refused", "error": m.group(1), "reason": reason[:600], "detail": rest}
    out: dict[str, Any] = {"status": "foreign"}
    if "Traceback (most recent call last):" in stderr:
        block = stderr[stderr.rindex("Traceback (most recent call last):"):].splitlines()[1:]
        frames = [(m.group(1), int(m.group(2)), m.group(3)) for m in (FRAME.match(line) for line in block) if m]
        exc_line = next((line for line in block if line and not line.startswith(" ")), "")
        out["reason"] = exc_line[:400]
        out["error"] = exc_line.split(":", 1)[0].strip()
        if frames:
            f, n, fn = frames[-1]
            out["raised_at"] = f"{_short_path(f)}:{n} in {fn}"
            ours = [fr for fr in frames if "/onnxport/" in fr[0] and "/bench/" not in fr[0]]
            if ours:
                f, n, fn = ours[-1]
                out["onnxport_at"] = f"{_short_path(f)}:{n} in {fn}"
    elif rc < 0:
        out["reason"] = f"killed by signal {-rc} ({signal.Signals(-rc).name})"
        out["error"] = signal.Signals(-rc).name
    else:
        tail = _tail(stderr, 1)
        out["reason"] = f"exit {rc}: " + (tail[0] if tail else "no stderr")
        out["error"] = f"exit {rc}"
    return out


def _short_trace(text: str) -> list[str]:
    frames = [line.strip() for line in text.splitlines() if FRAME.match(line)]
    return [_short_path(f) for f in frames[-3:]] + [text.strip().splitlines()[-1][:300]]


# -- the clients -------------------------------------------------------------------------------------------------


def _genai_child(folder: str, prompt: list[int], new_tokens: int) -> None:
    """Run in a subprocess (``--genai-child``): onnxruntime-genai's greedy tokens; one JSON line on stdout."""
    import numpy as np
    import onnxruntime_genai as og

    result: dict[str, Any] = {}
    try:
        model = og.Model(folder)
    except Exception as exc:  # noqa: BLE001
        print(json.dumps({"stage": "load", "error": _lines(exc)}))
        return
    try:
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=len(prompt) + new_tokens, do_sample=False)
        gen = og.Generator(model, params)
        gen.append_tokens(np.array([prompt], dtype=np.int32))
        result["logits"] = np.asarray(gen.get_logits(), dtype=np.float64).reshape(-1).tolist()
        while not gen.is_done():
            gen.generate_next_token()
        result["tokens"] = [int(t) for t in gen.get_sequence(0)]
    except Exception as exc:  # noqa: BLE001
        result.update(stage="run", error=_lines(exc))
    print(json.dumps(result))


def genai_greedy(folder: str, prompt: list[int], timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, os.path.abspath(__file__), "--genai-child", folder, ",".join(map(str, prompt))]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"stage": "run", "error": f"timeout after {timeout:.0f} s"}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = _tail(proc.stderr, 3)
        why = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}"
        return {"stage": "crash", "error": f"{why}: {' / '.join(tail)[:300]}"}
    return json.loads(lines[-1])


_NP_TYPES = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
             "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(bool)": "bool", "tensor(bfloat16)": "float32"}


def _session(path: str) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


def ort_greedy(folder: str, prompt: list[int], eos: list[int]) -> dict[str, Any]:
    """A greedy loop over OUT/model.onnx in onnxruntime: the cache inputs empty first, then the outputs fed back."""
    import numpy as np

    sess = _session(os.path.join(folder, "model.onnx"))
    inputs = {i.name: i for i in sess.get_inputs()}
    outputs = [o.name for o in sess.get_outputs()]
    plain = {"input_ids", "attention_mask", "position_ids", "token_type_ids", "cache_position"}
    state: dict[str, Any] = {}
    back: dict[str, str] = {}
    for name, info in inputs.items():
        if name in plain:
            continue
        candidates = [name.replace("past_key_values", "present"), name.replace("past_", "present_"),
                      name.replace("past", "present")]
        source = next((c for c in candidates if c in outputs and c != name), None)
        if source is None:
            raise LookupError(f"input {name} has no matching present output ({', '.join(outputs[:6])}...)")
        back[name] = source
        dims = [1 if i == 0 else d if isinstance(d, int) else 0 for i, d in enumerate(info.shape)]
        state[name] = np.zeros(dims, dtype=_NP_TYPES.get(info.type, "float32"))
    tokens, step, past, first = list(prompt), list(prompt), 0, None
    for _ in range(NEW_TOKENS):
        n = len(step)
        feed = {"input_ids": np.array([step], dtype=_NP_TYPES[inputs["input_ids"].type])}
        if "attention_mask" in inputs:
            feed["attention_mask"] = np.ones((1, past + n), dtype=_NP_TYPES[inputs["attention_mask"].type])
        if "position_ids" in inputs:
            feed["position_ids"] = np.arange(past, past + n, dtype=_NP_TYPES[inputs["position_ids"].type])[None]
        if "token_type_ids" in inputs:
            feed["token_type_ids"] = np.zeros((1, n), dtype=_NP_TYPES[inputs["token_type_ids"].type])
        if "cache_position" in inputs:
            feed["cache_position"] = np.arange(past, past + n, dtype=_NP_TYPES[inputs["cache_position"].type])
        feed.update(state)
        result = dict(zip(outputs, sess.run(None, feed)))
        logits = result["logits"][0, -1].astype(np.float64)
        if first is None:
            first = logits
        nxt = int(np.argmax(logits))
        tokens.append(nxt)
        state = {name: result[src] for name, src in back.items()}
        past, step = past + n, [nxt]
        if nxt in eos:
            break
    return {"tokens": tokens, "logits": first}


def _compare_tokens(eager: dict[str, Any], got: dict[str, Any], prompt_len: int) -> dict[str, Any]:
    import numpy as np

    out: dict[str, Any] = {"tokens": got["tokens"][prompt_len:]}
    if got["tokens"] == eager["tokens"]:
        out["ok"] = True
        return out
    out["ok"] = False
    a, b = eager["tokens"], got["tokens"]
    at = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
    out["differs_at"] = at - prompt_len  # index of the first new token that differs (or where one stopped)
    if got.get("logits") is not None and len(got["logits"]):
        ref, val = np.asarray(eager["logits"]), np.asarray(got["logits"], dtype=np.float64)
        if ref.shape == val.shape:
            out["first_logits_max_abs"] = float(np.nanmax(np.abs(ref - val)))
            out["first_logits_scale"] = float(np.nanmax(np.abs(ref)))
            top = np.sort(ref)[-2:]
            out["eager_top2_margin"] = float(top[1] - top[0])
        else:
            out["first_logits_shape"] = [list(ref.shape), list(val.shape)]
    return out


def check_generation(out: str, row: dict[str, Any], eager: dict[str, Any], deadline: float) -> None:
    prompt = row["prompt"]
    row["ort"] = {}
    try:
        row["ort"] = _compare_tokens(eager, ort_greedy(out, prompt, row["eos"]), len(prompt))
    except Exception as exc:  # noqa: BLE001
        row["ort"] = {"error": _lines(exc), "trace": _short_trace(traceback.format_exc())}
    genai = genai_greedy(out, prompt, max(10.0, deadline - time.time() - 5))
    if "tokens" not in genai:
        row["status"] = "client fails"
        row["genai"] = {"stage": genai.get("stage"), "error": genai.get("error")}
        row["reason"] = f"onnxruntime-genai ({genai.get('stage')}): {genai.get('error')}"
        return
    row["genai"] = _compare_tokens(eager, genai, len(prompt))
    row["status"] = "right" if row["genai"]["ok"] else "wrong"


def check_encoder(out: str, row: dict[str, Any], eager: dict[str, Any], enc: dict[str, Any]) -> None:
    import numpy as np

    try:
        sess = _session(os.path.join(out, "model.onnx"))
        feed = {}
        for info in sess.get_inputs():
            if info.name not in enc:
                raise LookupError(f"the model takes {info.name}, which the tokenizer does not give")
            feed[info.name] = enc[info.name].astype(_NP_TYPES.get(info.type, "int64"))
        names = [o.name for o in sess.get_outputs()]
        result = dict(zip(names, sess.run(None, feed)))
    except Exception as exc:  # noqa: BLE001
        row["reason"] = f"onnxruntime: {_lines(exc)}"
        return
    row["onnx_inputs"], row["onnx_outputs"] = sorted(feed), names
    compared = {}
    for name in names:
        ref = eager.get(name)
        if ref is None and name == names[0]:
            ref = next(iter(eager.values()))
        if ref is None:
            continue
        val = np.asarray(result[name], dtype=np.float64)
        if ref.shape != val.shape:
            compared[name] = {"shape": [list(ref.shape), list(val.shape)], "ok": False}
            continue
        diff = float(np.nanmax(np.abs(ref - val))) if ref.size else 0.0
        if np.isnan(ref).any() != np.isnan(val).any():
            diff = float("inf")
        scale = float(np.nanmax(np.abs(ref))) if ref.size else 0.0
        cell = {"max_abs": diff, "scale": scale, "ok": diff <= TOLERANCE[0] + TOLERANCE[1] * scale}
        if ref.ndim >= 2:
            cell["argmax_same"] = bool((ref.argmax(-1) == val.argmax(-1)).all())
        compared[name] = cell
    row["outputs"] = compared
    if not compared:
        row["reason"] = f"no output named as eager's ({', '.join(names)} vs {', '.join(eager)})"
        return
    row["status"] = "right" if all(c["ok"] for c in compared.values()) else "wrong"


# -- the fork ----------------------------------------------------------------------------------------------


def child(task: str, model_type: str, class_name: str, path: str, work: str, deadline: float) -> None:
    os.setpgid(0, 0)
    os.makedirs(os.path.join(LOGS, task), exist_ok=True)
    fd = os.open(os.path.join(LOGS, task, model_type + ".log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    row: dict[str, Any] = {"task": task, "type": model_type}

    def save() -> None:
        with open(path + ".tmp", "w") as f:
            json.dump(row, f, default=_json_default)
        os.replace(path + ".tmp", path)

    warnings.simplefilter("ignore")
    try:
        run_row(task, model_type, class_name, row, save, work, deadline)
    except BaseException as exc:  # noqa: BLE001
        row["crash"] = _first_line(exc)
        traceback.print_exc()
    save()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _json_default(value: Any) -> Any:
    import numpy as np

    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return str(value)


def run_forked(task: str, model_type: str, class_name: str, timeout: float) -> dict[str, Any]:
    fd, path = tempfile.mkstemp(prefix="export-hf-census-", suffix=".json")
    os.close(fd)
    work = tempfile.mkdtemp(prefix="export-hf-census-")
    start = time.perf_counter()
    deadline = time.time() + timeout
    pid = os.fork()
    if pid == 0:
        try:
            child(task, model_type, class_name, path, work, deadline)
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
    try:
        with open(path) as f:
            row = json.load(f)
    except (OSError, ValueError):
        row = {"task": task, "type": model_type, "status": "not built", "reason": "the child wrote nothing"}
    os.unlink(path)
    shutil.rmtree(work, ignore_errors=True)
    row["total_s"] = round(time.perf_counter() - start, 1)
    if status is None:
        row["killed"] = f"the row's {timeout:.0f} s ran out (status then: {row.get('status')})"
        if row.get("status") == "client fails":
            row["reason"] = row.get("reason") or f"the client ran past the row's {timeout:.0f} s"
        elif row.get("status") in ("timeout", "exported"):
            row["status"], row["reason"] = "timeout", f"export-hf ran past the row's {timeout:.0f} s"
    elif os.waitstatus_to_exitcode(status) != 0:
        row["crash"] = f"child died (exit {os.waitstatus_to_exitcode(status)})"
    return row


# -- the census ---------------------------------------------------------------------------------------------


def load_rows(path: str = JSONL) -> dict[tuple[str, str], dict[str, Any]]:
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                if line.strip():
                    row = json.loads(line)
                    rows[(row["task"], row["type"])] = row
    return rows


def summary(row: dict[str, Any]) -> str:
    s = row.get("status", "?")
    if s == "right":
        return f"right (export {row.get('export_s')}s)"
    if s == "wrong":
        return "wrong " + json.dumps(row.get("genai") or row.get("outputs"))[:200]
    return f"{s}: {row.get('reason', '')}"[:240] + (f" [{row['onnxport_at']}]" if row.get("onnxport_at") else "")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--genai-child"]:
        _genai_child(argv[1], [int(t) for t in argv[2].split(",")], NEW_TOKENS)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", help=f"comma-separated tasks (default: all: {', '.join(TASKS)})")
    parser.add_argument("--types", help="comma-separated model types (default: every type of each task)")
    parser.add_argument("--resume", action="store_true", help="skip the (task, type) rows already in the jsonl file")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds for everything of one row")
    parser.add_argument("--max-minutes", type=float, default=None, help="start no row after this many minutes")
    parser.add_argument("--report", action="store_true", help="only render the markdown from the jsonl file")
    parser.add_argument("--jsonl", default=JSONL)
    parser.add_argument("--md", default=MD)
    opts = parser.parse_args(argv)
    if not opts.report:
        import torch  # noqa: F401 - imported once here, so each forked child starts with them loaded
        import transformers  # noqa: F401

        import census_build  # noqa: F401

        tasks = [t.strip() for t in opts.tasks.split(",")] if opts.tasks else list(TASKS)
        unknown = [t for t in tasks if t not in TASKS]
        if unknown:
            parser.error(f"unknown task(s): {', '.join(unknown)}")
        wanted = {t.strip() for t in opts.types.split(",") if t.strip()} if opts.types else None
        done = load_rows(opts.jsonl) if opts.resume else {}
        todo = [(task, t, c) for task in tasks for t, c in task_types(task).items()
                if (wanted is None or t in wanted) and (task, t) not in done]
        start = time.perf_counter()
        for i, (task, model_type, class_name) in enumerate(todo, 1):
            if opts.max_minutes is not None and time.perf_counter() - start > 60 * opts.max_minutes:
                log(f"stopped after {opts.max_minutes:.0f} min; {len(todo) - i + 1} rows left (--resume goes on)")
                break
            commit = onnxport_commit()
            row = run_forked(task, model_type, class_name, opts.timeout)
            row["onnxport"] = commit
            with open(opts.jsonl, "a") as f:
                f.write(json.dumps(row, default=_json_default) + "\n")
            log(f"[{i}/{len(todo)} {time.perf_counter() - start:.0f}s] {task} {model_type}: {summary(row)}")
            if i % 10 == 0:
                write_md(load_rows(opts.jsonl), opts.md)
    write_md(load_rows(opts.jsonl), opts.md)
    return 0


# -- the report ---------------------------------------------------------------------------------------------

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
        reason = _with_detail(reason, [line.strip() for line in row.get("stderr_tail", [])])
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
        return "wrong"
    if s == "timeout":
        return "timeout"
    return f"{s}: {_norm(row.get('reason', '') or row.get('crash', ''), row)[:120]}"


def _numbers(row: dict[str, Any]) -> str:
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
        "`MODEL_MAPPING_NAMES` kept to text models). Per task and type, in a process of its own with a 240 s limit: "
        "a tiny random config (`bench/census_build.py`: hidden 64, 2 layers, 4 heads, vocab <= 1024; a hybrid's last "
        "layer kept an attention layer; bos/eos/pad set to 1/2/0 where unset or past the vocabulary), the task's "
        "class with weights drawn anew and spread (`redraw_weights`, so that greedy tokens do not turn on near "
        f"ties), an eager run (text-generation: greedy `generate`, prompt {PROMPT}, {NEW_TOKENS} new tokens, the "
        "model's generation config reduced to its token ids; encoder tasks: two padded sentences of the "
        "tokenizer), `save_pretrained` plus a word-level `tokenizer.json`, then "
        "`python -m onnxport export-hf DIR --task TASK -o OUT` as a new user runs it (its defaults: a checkpoint "
        "this small is loaded and the export verified). *refused*: onnxport's own error line; *foreign*: a "
        "traceback of an exception that is not onnxport's. The folder is then run by clients that are not onnxport: "
        "text-generation by onnxruntime-genai (the row's result) and a plain onnxruntime greedy loop (cache inputs "
        "empty at first, `present.*` fed back), tokens compared with eager's; encoder tasks by an "
        "`onnxruntime.InferenceSession` on the tokenizer's encoding, each output within 1e-4 + 1e-3 x its scale of "
        "eager's. Raw rows: `bench/export_hf_census.jsonl`.",
        "",
        "Rows by the onnxport commit they ran (+changes: src/ had uncommitted changes; -: not recorded): "
        + ", ".join(f"{c} {n}" for c, n in Counter(r.get("onnxport", "-") for r in rows.values()).most_common())
        + ".",
        "",
        "## Counts",
        "",
        "| task | types | run | built | eager ok | exported | right | wrong | client fails | refused | foreign | "
        "timeout |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
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
        try:
            total = len(task_types(task))
        except Exception:  # noqa: BLE001
            total = "?"
        lines.append(f"| {task} | {total} | {len(rs)} | {built} | {eager} | {exported} | {n['right']} | "
                     f"{n['wrong']} | {n['client fails']} | {n['refused']} | {n['foreign']} | {n['timeout']} |")
        run_s += sum(r.get("total_s", 0) for r in rs)
    lines += ["", f"*exported* = right + wrong + client fails (export-hf exited 0). Time for the rows here: "
              f"{run_s / 60:.0f} min.", ""]
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
    for c in sorted(groups, key=lambda c: (order.get(c.split(":")[0], 9), -len(groups[c]), c)):
        members = groups[c]
        out += [f"#### {_esc(c, 260)}: {len(members)}", ""]
        if c == "wrong":
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
        out.append(f"| {r['type']} | {r.get('model_class', '')} | {params} | {r.get('status')} | "
                   f"{r.get('export_s', '')} | {_esc(detail, 260)} |")
    out.append("")
    return out


if __name__ == "__main__":
    sys.exit(main())
