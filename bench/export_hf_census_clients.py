"""The clients of ``export_hf_census.py`` that run an exported folder without onnxport: onnxruntime-genai's
greedy search (in a subprocess: ``python bench/export_hf_census_clients.py --genai-child FOLDER IDS``), a plain
onnxruntime greedy loop (with a cache, or, for a model that takes none, the whole sequence each step), and an
``onnxruntime.InferenceSession`` whose outputs are compared with eager's (the encoder and image tasks)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
from typing import Any

from export_hf_census_common import NEW_TOKENS, NO_CACHE, TOLERANCE, error_lines, short_trace, tail


def _genai_child(folder: str, prompt: list[int], new_tokens: int) -> None:
    """Run in a subprocess (``--genai-child``): onnxruntime-genai's greedy tokens; one JSON line on stdout."""
    import numpy as np
    import onnxruntime_genai as og

    result: dict[str, Any] = {}
    try:
        model = og.Model(folder)
    except Exception as exc:  # noqa: BLE001
        print(json.dumps({"stage": "load", "error": error_lines(exc)}))
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
        result.update(stage="run", error=error_lines(exc))
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
        last = tail(proc.stderr, 3)
        why = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}"
        return {"stage": "crash", "error": f"{why}: {' / '.join(last)[:300]}"}
    return json.loads(lines[-1])


_NP_TYPES = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
             "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(bool)": "bool", "tensor(bfloat16)": "float32"}


def _session(path: str) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


def ort_greedy(folder: str, prompt: list[int], eos: list[int]) -> dict[str, Any]:
    """A greedy loop over OUT/model.onnx in onnxruntime: the cache inputs empty first, then the outputs fed back;
    a model that takes no cache (no ``past*`` input) is fed the whole sequence so far at each step (mask all ones,
    positions from 0), its last position's logits read."""
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
        if back:
            state = {name: result[src] for name, src in back.items()}
            past, step = past + n, [nxt]
        else:  # no cache: the whole sequence again
            step = list(tokens)
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
    """The row's result: onnxruntime-genai's tokens against eager's; for a folder with no genai_config.json (a
    model that returns no cache, which onnxruntime-genai cannot run), the onnxruntime loop's, noted in ``client``."""
    prompt = row["prompt"]
    row["ort"] = {}
    try:
        row["ort"] = _compare_tokens(eager, ort_greedy(out, prompt, row["eos"]), len(prompt))
    except Exception as exc:  # noqa: BLE001
        row["ort"] = {"error": error_lines(exc), "trace": short_trace(traceback.format_exc())}
    if not os.path.isfile(os.path.join(out, "genai_config.json")):
        row["client"] = NO_CACHE
        if "ok" not in row["ort"]:
            row["status"] = "client fails"
            row["reason"] = f"onnxruntime loop: {row['ort'].get('error')}"
            return
        row["status"] = "right" if row["ort"]["ok"] else "wrong"
        return
    genai = genai_greedy(out, prompt, max(10.0, deadline - time.time() - 5))
    if "tokens" not in genai:
        row["status"] = "client fails"
        row["genai"] = {"stage": genai.get("stage"), "error": genai.get("error")}
        row["reason"] = f"onnxruntime-genai ({genai.get('stage')}): {genai.get('error')}"
        return
    row["genai"] = _compare_tokens(eager, genai, len(prompt))
    row["status"] = "right" if row["genai"]["ok"] else "wrong"


def _fed_draws(path: str, rerun: Any, row: dict[str, Any]) -> tuple[str, Any, dict[str, Any]] | None:
    """For a file that draws noise (VITS's durations and latents: ``onnxport.random_draws``), the same comparison
    seeded: a copy of the file taking its draws as inputs, the draws eager PyTorch makes on the same inputs, and
    its outputs then (``rerun(mode)`` runs the reloaded model on them with ``mode`` active); None for a file that
    draws none, or whose draws cannot be fed (kept compared as it is, said in the row)."""
    import onnx_ir as ir

    from onnxport.verify import draws

    model = ir.load(path)
    values = draws.plan(model)
    if values is None:
        return None
    names = [v.name for v in values]
    recording = draws.Recording()
    reference = rerun(recording)
    why = draws.mismatch(values, recording.draws)
    if why is not None:
        row["draws"] = f"not fed: {why}"
        return None
    draws.feed_draws(names)(model)
    seeded = os.path.join(os.path.dirname(path), "model.draws_fed.onnx")
    ir.save(model, seeded)
    row["draws"] = f"{len(names)} draws of eager PyTorch fed to the file (its noise as inputs)"
    fed = {f"{name}__fed": t.numpy() for name, t in zip(names, recording.draws)}
    return seeded, fed, reference


def check_encoder(out: str, row: dict[str, Any], eager: dict[str, Any], enc: dict[str, Any],
                  source: str = "the tokenizer", rerun: Any = None) -> None:
    """An ``onnxruntime.InferenceSession`` on OUT/model.onnx fed ``enc`` (what ``source`` gives: the tokenizer's
    encoding, or the batch of images), each output compared with eager's output of that name. A file that draws
    noise is compared seeded where ``rerun`` is given (see ``_fed_draws``)."""
    import numpy as np

    try:
        path, fed = os.path.join(out, "model.onnx"), {}
        seeded = _fed_draws(path, rerun, row) if rerun is not None else None
        if seeded is not None:
            path, fed, eager = seeded
        sess = _session(path)
        feed = {}
        for info in sess.get_inputs():
            if info.name in fed:
                feed[info.name] = fed[info.name]
                continue
            if info.name not in enc:
                raise LookupError(f"the model takes {info.name}, which {source} does not give")
            feed[info.name] = enc[info.name].astype(_NP_TYPES.get(info.type, "int64"))
        names = [o.name for o in sess.get_outputs()]
        result = dict(zip(names, sess.run(None, feed)))
    except Exception as exc:  # noqa: BLE001
        row["reason"] = f"onnxruntime: {error_lines(exc)}"
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




if __name__ == "__main__":
    if sys.argv[1:2] != ["--genai-child"] or len(sys.argv) != 4:
        sys.exit("usage: export_hf_census_clients.py --genai-child FOLDER IDS")
    _genai_child(sys.argv[2], [int(t) for t in sys.argv[3].split(",")], NEW_TOKENS)
