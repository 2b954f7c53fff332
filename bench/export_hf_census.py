"""Census of ``onnxport export-hf`` over transformers' model types, task by task, run as a new user runs it.

    python bench/export_hf_census.py                                  # every task, rows appended to the jsonl
    python bench/export_hf_census.py --tasks text-generation --resume # one task, skipping the rows already there
    python bench/export_hf_census.py --tasks fill-mask --types bert,roberta
    python bench/export_hf_census.py --report                         # only rewrite the markdown from the jsonl

The model types of a task are those of the mapping transformers' auto class for the task reads
(``modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` for text-generation, ``..._SEQUENCE_CLASSIFICATION_...`` for
text-classification, and so on; feature-extraction: ``MODEL_MAPPING_NAMES`` kept to the text models, those whose
config has a vocabulary of its own and no vision, audio or text sub-config, and that are not encoder-decoders;
the image tasks: ``MODEL_FOR_IMAGE_CLASSIFICATION_...``, ``..._OBJECT_DETECTION_...``, ``..._SEMANTIC_SEGMENTATION_...``
for image-segmentation, ``..._DEPTH_ESTIMATION_...``).
For each (task, type), in a forked process with a time limit for everything of the row (``--timeout``, 240 s), one
row at a time:

1. build: the config class's defaults shrunk to a tiny config (``census_build.tiny_config``; a hybrid model left
   with no attention layer in its 2 layers gets its last one back, ``keep_attention_layer``); bos, eos and pad ids
   that are unset or past the vocabulary set to 1, 2 and 0 (the tokenizer's ``<s>``, ``</s>``, ``<pad>``); the class
   the task's mapping names, seeded with ``torch.manual_seed(0)``, then every weight drawn anew and spread
   (``census_build.redraw_weights``: transformers' tiny default init leaves next-token scores nearly tied, so that
   greedy tokens would turn on rounding), kept at the default init if the spread weights give non-finite outputs.
   A failure is "not built" (not counted against export-hf). An image model whose 2-layer config does not build
   or run (DPT's neck reads 4 of 12 layers) is tried again with the config's layer counts kept (``layers_kept``).
2. eager: text-generation runs ``generate`` greedily (``PROMPT``, ``NEW_TOKENS`` new tokens, batch 1) under a
   generation config of the model's token ids alone: onnxruntime-genai searches plainly, so processors such as
   BART's ``forced_eos_token_id`` are left out (and named in the row); the text encoder tasks run a forward on two
   sentences of the tokenizer, padded; the image tasks a forward on a random batch of 2 images
   (``export_hf_census_images.pixel_inputs``: of the config's ``image_size``, else the size the saved image
   processor gives, with an all-ones ``pixel_mask`` where the forward takes one). A failure is "eager fails"
   (excluded).
3. ``save_pretrained`` (safetensors) into a directory, with a word-level ``tokenizer.json`` of the config's
   vocabulary made with the ``tokenizers`` package (``<pad>`` 0, ``<s>`` 1, ``</s>`` 2, then ``w3``...), giving
   the inputs the type's own tokenizer class gives (its ``model_input_names``: ``token_type_ids`` for BERT).
   For text-generation a config with ``is_decoder=False`` gets ``True``, as a checkpoint saved to generate has.
   The image tasks get no tokenizer but the type's image processor (``preprocessor_config.json``, which export-hf
   reads for the image size), its sizes shrunk to the config's (``export_hf_census_images.write_processor``).
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
   outcome is kept beside it). A folder with no ``genai_config.json`` (a model that returns no cache, which
   onnxruntime-genai cannot run) is judged by the onnxruntime loop alone, fed the whole sequence at each step; its
   row says so (``client``: "no cache: onnxruntime loop (no genai_config.json)"). Encoder and image tasks: an
   ``onnxruntime.InferenceSession`` on ``OUT/model.onnx`` fed the tokenizer's encoding (only the inputs the session
   declares; the image tasks: the batch of images), each output compared with eager's output of that name: "right"
   when the largest difference is within 1e-4 + 1e-3 x the eager output's largest magnitude. The reference is the
   model reloaded from the saved directory (what a user's transformers loads). A model that draws noise in its
   forward (VITS) is compared seeded: the reloaded model's draws recorded on the same inputs and fed to a copy of
   the file that takes them as inputs (the row's ``draws`` says so; the shipped file keeps its own noise).

One JSON line per row goes to ``bench/export_hf_census.jsonl`` (a later line for a task and type replaces an earlier
one); ``bench/export_hf_census.md`` is rendered from it. Each row's CLI stderr is kept under
``$TMPDIR/export-hf-census-logs/TASK/TYPE.stderr``; each row names the onnxport commit it ran (``onnxport``,
"+changes" when src/ had uncommitted changes).

The forked run with its time limit is ``census.run_in_fork`` (shared with ``bench/census.py``); the clients are in
``export_hf_census_clients.py``, the image inputs in ``export_hf_census_images.py``, the markdown in
``export_hf_census_report.py``, and what they share in ``export_hf_census_common.py``.
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
import traceback
from collections.abc import Sequence
from typing import Any

from census import run_in_fork
from export_hf_census_clients import check_encoder, check_generation
from export_hf_census_common import (
    FRAME,
    IMAGE_TASKS,
    JSONL,
    LOGS,
    MAX_PARAMS,
    MD,
    NEW_TOKENS,
    PROMPT,
    ROOT,
    SENTENCES,
    TASKS,
    first_line,
    json_default,
    load_rows,
    log,
    onnxport_commit,
    short_path,
    short_trace,
    tail,
    task_types,
    with_detail,
)
from export_hf_census_images import pixel_inputs, write_processor
from export_hf_census_report import write_md

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


# The types whose sequence-classification head reads each text's end token (BART's, T5's: "Each example must contain
# at least one <eos> token"), as their own tokenizers end every text with it: their text-classification rows' word
# tokenizer does too.
END_TOKEN_TYPES = ("bart", "mbart", "mvp", "plbart", "bigbird_pegasus", "t5", "mt5", "umt5")


def write_tokenizer(directory: str, vocab_size: int, input_names: list[str] | None = None,
                    ends: int | None = None) -> None:
    """A whitespace word-level tokenizer over ``vocab_size`` ids, saved as transformers and onnxruntime-genai
    read it: ``<pad>`` 0, ``<s>`` 1, ``</s>`` 2, then the words ``w3``, ``w4``...; it gives ``input_names``, and
    ends each text with the token of id ``ends`` where given (the model's end token)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    words = {"<pad>": 0, "<s>": 1, "</s>": 2}
    words.update({f"w{i}": i for i in range(3, vocab_size)})
    tok = Tokenizer(models.WordLevel(words, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    if ends is not None:
        end = {i: word for word, i in words.items()}[ends]
        tok.post_processor = processors.TemplateProcessing(single=f"$A {end}", special_tokens=[(end, ends)])
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
            return config, {"not_applied": f"{changed} ({first_line(exc)[:120]})"}
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


def build(task: str, model_type: str, class_name: str, row: dict[str, Any],
          keep_layers: bool = False) -> tuple[Any, Any]:
    import torch
    import transformers

    import census_build as cb

    config = cb.tiny_config(model_type, keep_layers=keep_layers)
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
    wanted = getattr(cls, "config_class", None)
    if isinstance(wanted, type) and not isinstance(config, wanted):  # a part's class (a CLIP's vision tower)
        config = next((sub for sub in vars(config).values() if isinstance(sub, wanted)), config)
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


def eager_encoder(model: Any, enc: dict[str, Any], mode: Any = None) -> dict[str, Any]:
    """The model's outputs on ``enc``, run with ``mode`` active where given (a recording of its random draws)."""
    import contextlib
    import inspect

    import torch

    params = inspect.signature(model.forward).parameters
    feed = {k: torch.from_numpy(v) for k, v in enc.items() if k in params}
    with torch.no_grad(), mode or contextlib.nullcontext():
        out = model(**feed)
    return {k: v.detach().double().numpy() for k, v in out.items() if isinstance(v, torch.Tensor)}


def build_and_run(task: str, model_type: str, class_name: str, row: dict[str, Any], save, directory: str,
                  keep_layers: bool) -> tuple[Any, Any, dict[str, Any], dict[str, Any], int] | None:
    """Build the row's model and run it eagerly, weights drawn anew first (kept at transformers' init if those
    give non-finite outputs): (config, model, eager outputs, inputs, vocab), or None with the row's status set."""
    import torch

    import census_build as cb

    row["status"] = "not built"
    try:
        config, model = build(task, model_type, class_name, row, keep_layers)
    except Exception as exc:  # noqa: BLE001
        row["reason"] = first_line(exc)
        return None
    text = _text_config(config)
    vocab = getattr(text, "vocab_size", None) or getattr(config, "vocab_size", None) or 100
    row["vocab"] = vocab
    row["status"] = "eager fails"
    save()
    enc: dict[str, Any] = {}
    try:
        if task == "text-generation":
            prompt = _prompt(vocab)
            row["prompt"] = prompt
            eager_of = lambda m: eager_generate(m, prompt)  # noqa: E731
        elif task in IMAGE_TASKS:
            row["preprocessor"] = write_processor(directory, model_type, config)
            enc = pixel_inputs(model, config, directory)
            row["pixels"] = {k: list(v.shape) for k, v in enc.items()}
            eager_of = lambda m: eager_encoder(m, enc)  # noqa: E731
        else:
            row["tokenizer_gives"] = tokenizer_inputs(model_type)
            eos = getattr(text, "eos_token_id", None)
            ends = eos if task == "text-classification" and model_type in END_TOKEN_TYPES and isinstance(
                eos, int) and 0 <= eos < vocab else None
            write_tokenizer(directory, vocab, row["tokenizer_gives"], ends=ends)
            row["tokenizer_ends"] = ends
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
        row["reason"] = first_line(exc)
        row["trace"] = short_trace(traceback.format_exc())
        return None
    return config, model, eager, enc, vocab


def run_row(task: str, model_type: str, class_name: str, row: dict[str, Any], save, work: str,
            deadline: float) -> None:
    import torch

    torch.set_num_threads(1)
    row["status"], row["model_class"] = "not built", class_name
    save()
    directory, out = os.path.join(work, "model"), os.path.join(work, "onnx")
    os.makedirs(directory)
    # An image model whose 2-layer config does not build or run (DPT's neck reads 4 of its 12 layers) is tried
    # again with its layer counts kept.
    attempts = (False, True) if task in IMAGE_TASKS else (False,)
    for keep_layers in attempts:
        got = build_and_run(task, model_type, class_name, row, save, directory, keep_layers)
        if got is not None or keep_layers == attempts[-1]:
            break
        row["layers_kept"] = f"the 2-layer config: {row['status']}: {row.get('reason', '')}"[:300]
        row.pop("trace", None)
    if got is None:
        return
    config, model, eager, enc, vocab = got
    if task == "text-generation":
        row["eager_tokens"] = eager["tokens"]
        if eager["left_out"]:
            row["generation_config_left_out"] = eager["left_out"]
        eos = getattr(model.generation_config, "eos_token_id", None)
        row["eos"] = eos if isinstance(eos, list) else [eos] if eos is not None else []
    if not save_checkpoint(task, model, directory, vocab, row, save):
        return
    del model
    eager = {**eager, **reloaded(task, directory, eager, enc, row.get("prompt"), row)}
    if task == "text-generation":
        row["eager_tokens"] = eager["tokens"]
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
        check_encoder(out, row, eager, enc, "the image inputs" if task in IMAGE_TASKS else "the tokenizer",
                      rerun=lambda mode: reloaded(task, directory, eager, enc, None, row,
                                                  run=lambda model: eager_encoder(model, enc, mode)))


def reloaded(task: str, directory: str, eager: dict[str, Any], enc: dict[str, Any], prompt: Any,
             row: dict[str, Any], run: Any = None) -> dict[str, Any]:
    """The reference: the model as a user's transformers loads it from ``directory``, run on the same inputs (by
    ``run`` where given). Not the model in memory: a load can change weights (YouTu's ``_init_weights`` zeroes the
    pad embedding row at every load), and the file is what was saved; ``eager`` where reloading fails, said so."""
    import transformers

    try:
        model = getattr(transformers, row["model_class"]).from_pretrained(directory).eval()
        if run is not None:
            return run(model)
        return eager_generate(model, prompt) if task == "text-generation" else eager_encoder(model, enc)
    except Exception as exc:  # noqa: BLE001 - the in-memory run stands, said so
        row["reference"] = f"the model in memory (reloading failed: {first_line(exc)[:160]})"
        return eager


def save_checkpoint(task: str, model: Any, directory: str, vocab: int, row: dict[str, Any], save: Any) -> bool:
    """``save_pretrained`` (safetensors) and the word-level tokenizer (but for the image tasks) in ``directory``;
    False, with the row "not saved" and why, where that fails."""
    row["status"] = "not saved"
    save()
    try:
        model.save_pretrained(directory)
        if task not in IMAGE_TASKS:
            write_tokenizer(directory, vocab, row.get("tokenizer_gives"), ends=row.get("tokenizer_ends"))
    except Exception as exc:  # noqa: BLE001
        row["reason"] = first_line(exc)
        return False
    return True


def export_cli(task: str, directory: str, out: str, row: dict[str, Any], deadline: float,
               options: Sequence[str] = (), logs: str = LOGS) -> None:
    """``onnxport export-hf`` on the row's directory, with ``options`` (the transformers.js census's target), its
    stderr kept under ``logs``; the row's status and reason from how it ended."""
    cmd = [sys.executable, "-m", "onnxport", "export-hf", directory, "--task", task, "-o", out, *options]
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
        row["stderr_tail"] = tail(stderr)
        return
    row["export_s"] = round(time.perf_counter() - start, 1)
    row["rc"] = proc.returncode
    os.makedirs(os.path.join(logs, task), exist_ok=True)
    with open(os.path.join(logs, task, row["type"] + ".stderr"), "w") as f:
        f.write(proc.stderr)
    report = [line for line in proc.stdout.splitlines() if line.strip() and not line.startswith("saved ")]
    if report:
        row["report"] = report[0][:300]
    if proc.returncode == 0:
        row["status"] = "exported"
        row["files"] = sorted(os.listdir(out)) if os.path.isdir(out) else []
        return
    row["stderr_tail"] = tail(proc.stderr)
    row.update(classify(proc.stderr, proc.returncode))


def classify(stderr: str, rc: int) -> dict[str, Any]:
    """A failed export-hf run: refused (onnxport's error line) or foreign (a traceback, a signal)."""
    lines = stderr.splitlines()
    for i in range(len(lines) - 1, -1, -1):
        m = re.match(r"^onnxport: (\w+): (.*)$", lines[i])
        if m:
            rest = [line.strip() for line in lines[i + 1:i + 8] if line.startswith("  ")]
            reason = f"{m.group(1)}: {m.group(2)}"
            reason = with_detail(reason, rest)
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
            out["raised_at"] = f"{short_path(f)}:{n} in {fn}"
            ours = [fr for fr in frames if "/onnxport/" in fr[0] and "/bench/" not in fr[0]]
            if ours:
                f, n, fn = ours[-1]
                out["onnxport_at"] = f"{short_path(f)}:{n} in {fn}"
    elif rc < 0:
        out["reason"] = f"killed by signal {-rc} ({signal.Signals(-rc).name})"
        out["error"] = signal.Signals(-rc).name
    else:
        last = tail(stderr, 1)
        out["reason"] = f"exit {rc}: " + (last[0] if last else "no stderr")
        out["error"] = f"exit {rc}"
    return out



# -- the fork ----------------------------------------------------------------------------------------------


def run_forked(task: str, model_type: str, class_name: str, timeout: float) -> dict[str, Any]:
    """One row in a forked child (``census.run_in_fork``, shared with ``bench/census.py``), killed at ``timeout``."""
    work = tempfile.mkdtemp(prefix="export-hf-census-")
    deadline = time.time() + timeout

    def job(row: dict[str, Any], save: Any) -> None:
        run_row(task, model_type, class_name, row, save, work, deadline)

    saved, code, seconds = run_in_fork(job, {"task": task, "type": model_type},
                                       os.path.join(LOGS, task, model_type + ".log"), timeout,
                                       prefix="export-hf-census-", default=json_default)
    row = saved or {"task": task, "type": model_type, "status": "not built", "reason": "the child wrote nothing"}
    shutil.rmtree(work, ignore_errors=True)
    row["total_s"] = round(seconds, 1)
    if code is None:
        row["killed"] = f"the row's {timeout:.0f} s ran out (status then: {row.get('status')})"
        if row.get("status") == "client fails":
            row["reason"] = row.get("reason") or f"the client ran past the row's {timeout:.0f} s"
        elif row.get("status") in ("timeout", "exported"):
            row["status"], row["reason"] = "timeout", f"export-hf ran past the row's {timeout:.0f} s"
    elif code != 0:
        row["crash"] = f"child died (exit {code})"
    return row


# -- the census ---------------------------------------------------------------------------------------------

def summary(row: dict[str, Any]) -> str:
    s = row.get("status", "?")
    if s == "right":
        return f"right (export {row.get('export_s')}s)"
    if s == "wrong":
        return "wrong " + json.dumps(row.get("genai") or row.get("outputs"))[:200]
    return f"{s}: {row.get('reason', '')}"[:240] + (f" [{row['onnxport_at']}]" if row.get("onnxport_at") else "")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
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
                f.write(json.dumps(row, default=json_default) + "\n")
            log(f"[{i}/{len(todo)} {time.perf_counter() - start:.0f}s] {task} {model_type}: {summary(row)}")
            if i % 10 == 0:
                write_md(load_rows(opts.jsonl), opts.md)
    write_md(load_rows(opts.jsonl), opts.md)
    return 0




if __name__ == "__main__":
    sys.exit(main())