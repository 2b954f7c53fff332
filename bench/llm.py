"""Decode and prefill of a Llama-style model: onnxport's ONNX in onnxruntime against eager PyTorch and
onnxruntime-genai's builder, in one run.

    python bench/llm.py                           # hidden 512, 8 layers, 8 heads, 2 KV heads
    python bench/llm.py --layers 2 --out bench/llm.md

The model has random weights (nothing is downloaded). onnxport exports it once, from a decode step,
with dynamic batch, sequence and past lengths; the same ONNX file serves prefill and decode.
onnxruntime-genai's builder (``python -m onnxruntime_genai.models.builder``) builds its float32 CPU
model from the same weights saved as a local model directory. Each figure is the median latency of
one forward call, batch 1, one thread everywhere: a decode step (1 new token) at past lengths 128 and
1024, and a prefill of 128 tokens. The two onnxruntime sessions run in turn (A B A B ..., bench/run.py's
``latency_ms``), so the machine's drift hits both alike; the logits of the two are compared.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from run import latency_ms, log, make_session, publish, quiet  # noqa: E402

from tests.hf_dirs import write_tokenizer  # noqa: E402

import onnxport  # noqa: E402

RUNS = 20


def build(hidden: int, layers: int, heads: int, kv_heads: int, vocab: int) -> torch.nn.Module:
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=hidden, intermediate_size=hidden * 11 // 4,
                                      num_hidden_layers=layers, num_attention_heads=heads,
                                      num_key_value_heads=kv_heads, vocab_size=vocab, max_position_embeddings=4096,
                                      bos_token_id=1, eos_token_id=2, pad_token_id=0)
    return transformers.LlamaForCausalLM(config).eval()


def median_ms(fn: Callable[[], object], runs: int = RUNS) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def step_inputs(model: torch.nn.Module, past: int, new: int) -> dict:
    """Inputs of a forward call with a ``past``-token cache (random keys and values) and ``new`` tokens."""
    from transformers import DynamicCache

    config = model.config
    head = config.hidden_size // config.num_attention_heads
    cache = DynamicCache(config=config)
    for layer in range(config.num_hidden_layers):
        kv = [torch.randn(1, config.num_key_value_heads, past, head) for _ in range(2)]
        cache.update(*kv, layer)
    return {"input_ids": torch.randint(3, config.vocab_size, (1, new)),
            "attention_mask": torch.ones(1, past + new, dtype=torch.int64),
            "position_ids": torch.arange(past, past + new)[None], "past_key_values": cache}


def ort_feeds(session, inputs: dict, names: dict[str, str]) -> dict[str, np.ndarray]:
    """Feeds by the session's input names: ``names`` maps its cache names (``%d`` for the layer)."""
    cache = inputs["past_key_values"]
    flat = {"input_ids": inputs["input_ids"], "attention_mask": inputs["attention_mask"],
            "position_ids": inputs["position_ids"]}
    for i, layer in enumerate(cache.layers):
        flat[names["key"] % i] = layer.keys
        flat[names["value"] % i] = layer.values
    feeds = {}
    for spec in session.get_inputs():
        array = flat[spec.name].numpy()
        feeds[spec.name] = array.astype(np.int32) if spec.type == "tensor(int32)" else array
    return feeds


def save_hf(model: torch.nn.Module, workdir: str) -> str:
    """``model`` saved as a local model directory the builder reads (weights, config, a tokenizer)."""
    src = os.path.join(workdir, "hf")
    if not os.path.isdir(src):
        model.save_pretrained(src)
        write_tokenizer(src, model.config.vocab_size)  # the builder copies a tokenizer next to its model
    return src


def genai_build(src: str, out: str, precision: str = "fp32", cache: str | None = None,
                extra_options: Sequence[str] = ()) -> str:
    """Path of the model.onnx that onnxruntime-genai's builder writes for the local model directory ``src``
    (CPU, ``precision``); a RuntimeError with the last line of its message when it fails."""
    command = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", src, "-o", out, "-p", precision,
               "-e", "cpu", "-c", cache or os.path.join(os.path.dirname(out), "cache")]
    if extra_options:
        command += ["--extra_options", *extra_options]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1200)
    if done.returncode != 0:
        message = (done.stderr or done.stdout).strip().splitlines() or [f"exit status {done.returncode}"]
        raise RuntimeError(message[-1][:200])
    return os.path.join(out, "model.onnx")


def genai_builder_session(model: torch.nn.Module, workdir: str):
    """onnxruntime-genai's own export of the same weights (float32, CPU), or the error it gave."""
    try:
        path = genai_build(save_hf(model, workdir), os.path.join(workdir, "genai"), "fp32", os.path.join(workdir, "cache"))
    except RuntimeError as exc:
        return exc
    return make_session(_load(path))


def _load(path: str):
    import onnx

    return onnx.load(path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--target", default="onnxruntime>=1.26",
                        help="onnxport's target (default: onnxruntime>=1.26, every fused op; the builder writes "
                        "for the newest onnxruntime too)")
    parser.add_argument("--out", help="also write the markdown table to this file")
    opts = parser.parse_args(argv)
    torch.set_num_threads(1)
    model = build(opts.hidden, opts.layers, opts.heads, opts.kv_heads, opts.vocab)
    log("export with onnxport")
    start = time.perf_counter()
    with quiet():
        prog = onnxport.export(model, (), step_inputs(model, 4, 3), dynamic_shapes="auto", target=opts.target)
    export_s = time.perf_counter() - start
    ours = make_session(prog.model_proto)
    with tempfile.TemporaryDirectory() as workdir:
        log("build with onnxruntime-genai's builder")
        theirs = genai_builder_session(model, workdir)
    ours_names = {"key": "past_key_values.%d.key", "value": "past_key_values.%d.value"}
    rows, logit_diff = [], 0.0
    for label, past, new in (("decode, past 128", 128, 1), ("decode, past 1024", 1024, 1), ("prefill 128", 0, 128)):
        log(label)
        inputs = step_inputs(model, past, new)
        feeds = ort_feeds(ours, inputs, ours_names)

        def eager_call(inputs: dict = inputs, new: int = new) -> None:
            model(**inputs)
            inputs["past_key_values"].crop(-new)  # eager appends to the cache: back to the same past

        with torch.no_grad():
            eager = median_ms(eager_call)
        if isinstance(theirs, Exception):
            onnxport_ms, genai_ms = median_ms(lambda: ours.run(None, feeds)), f"fail: {theirs}"
        else:
            their_feeds = ort_feeds(theirs, inputs, ours_names)
            onnxport_ms, builder_ms = latency_ms([(ours, feeds), (theirs, their_feeds)])
            genai_ms = f"{builder_ms:.2f}"
            logit_diff = max(logit_diff, float(np.abs(ours.run(None, feeds)[0] - theirs.run(None, their_feeds)[0]).max()))
        rows.append((label, eager, onnxport_ms, genai_ms))
    import onnxruntime

    lines = [
        f"Llama-style decoder: hidden {opts.hidden}, {opts.layers} layers, {opts.heads} heads, {opts.kv_heads} KV "
        f"heads, vocab {opts.vocab}, float32, batch 1, one thread; onnxport target {opts.target}; torch "
        f"{torch.__version__}, onnxruntime "
        f"{onnxruntime.__version__}, {platform.machine()}. onnxport export: {export_s:.1f} s. Largest difference "
        f"between the two models' logits: {logit_diff:.1e}.",
        "",
        "| call | eager ms | onnxport ms | onnxruntime-genai builder ms | onnxport / eager | onnxport / builder |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, eager, ours_ms, genai_ms in rows:
        vs_builder = f"{ours_ms / float(genai_ms):.2f}x" if not genai_ms.startswith("fail") else "n/a"
        lines.append(f"| {label} | {eager:.2f} | {ours_ms:.2f} | {genai_ms} | {ours_ms / eager:.2f}x | {vs_builder} |")
    table = "\n".join(lines) + "\n"
    publish(table, opts.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
