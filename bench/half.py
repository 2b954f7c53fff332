"""Half precision: onnxruntime latency, error against eager float32 and file size of the float16 export.

    python bench/half.py [--repeat 20] [--threads 2] [--out bench/half.md]

For a Llama-style decoder (hidden 512 x 8 layers, the prefill of 2 x 128 tokens) and a BERT-base-sized
encoder (2 x 128 tokens): ``onnxport.export`` as float32 and with ``dtype=torch.float16`` (verified against
eager float32), both saved; then onnxruntime (CPU, ``--threads`` intra-op threads, default graph
optimisations) runs them interleaved, one float32 run then one float16 run, after a warm-up of each. The
table gives the median latencies, the largest absolute error of each against eager float32, the islands
and the file sizes. onnxruntime's CPU provider has few float16 kernels and computes the others in float32
between casts it inserts itself, so float16 may well be slower on CPU: it is measured, not assumed.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import log, model_bytes, quiet, session_options  # noqa: E402

import onnxport  # noqa: E402


def llama() -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    """The decoder of issue 11: hidden 512, 8 layers, 8 heads, 2 KV heads, MLP 1376, vocab 32000; 2 x 128."""
    import transformers

    config = transformers.LlamaConfig(
        hidden_size=512, num_attention_heads=8, num_key_value_heads=2, intermediate_size=1376, vocab_size=32000,
        num_hidden_layers=8, max_position_embeddings=2048, use_cache=False,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    mask = torch.ones(2, 128, dtype=torch.int64)
    mask[1, :16] = 0
    return model, {"input_ids": torch.randint(0, 32000, (2, 128)), "attention_mask": mask}


def bert_base() -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    """BERT-base's sizes (hidden 768, 12 layers, 12 heads, MLP 3072, vocab 30522), random weights; 2 x 128."""
    import transformers

    torch.manual_seed(0)
    model = transformers.BertModel(transformers.BertConfig()).eval()
    mask = torch.ones(2, 128, dtype=torch.int64)
    mask[1, 100:] = 0
    return model, {"input_ids": torch.randint(0, 30522, (2, 128)), "attention_mask": mask}


MODELS: dict[str, tuple[str, Callable[[], tuple[torch.nn.Module, dict[str, torch.Tensor]]]]] = {
    "llama": ("Llama h512 x 8, prefill 2 x 128", llama),
    "bert": ("BERT-base, 2 x 128", bert_base),
}


def _session(path: str, threads: int) -> Any:
    import onnxruntime as ort

    return ort.InferenceSession(path, session_options(threads), providers=["CPUExecutionProvider"])


def measure(name: str, build: Callable[[], Any], repeat: int, threads: int, folder: str) -> dict[str, Any]:
    model, inputs = build()
    dim = torch.export.Dim.DYNAMIC
    dynamic = {k: {0: dim, 1: dim} for k in inputs}
    with torch.no_grad():
        expected = [t.detach().float().numpy() for t in torch.utils._pytree.tree_leaves(model(**inputs))]
    row: dict[str, Any] = {"model": name}
    runs = {}
    for label, dtype in (("float32", None), ("float16", torch.float16)):
        log(f"{name}: exporting {label}")
        with quiet():
            prog = onnxport.export(model, (), inputs, dynamic_shapes=dynamic, dtype=dtype, verify=dtype is not None,
                                   verify_mode="warn")
        path = os.path.join(folder, f"{label}.onnx")
        prog.save(path, external_data=True)
        row[f"{label} MB"] = model_bytes(path) / 1e6
        if dtype is not None:
            row["verification"] = prog.report.verification.status
            row["half"] = next(s.detail for s in prog.report.stages if s.name == "half")
        feeds = {v.name: inputs[v.name].numpy() for v in prog.model.graph.inputs}
        runs[label] = (_session(path, threads), feeds)
        del prog
    times: dict[str, list[float]] = {label: [] for label in runs}
    outputs = {label: session.run(None, feeds) for label, (session, feeds) in runs.items()}  # warm-up
    for _ in range(repeat):  # interleaved, so that drift in the machine's speed hits both alike
        for label, (session, feeds) in runs.items():
            start = time.perf_counter()
            session.run(None, feeds)
            times[label].append(time.perf_counter() - start)
    for label in runs:
        row[f"{label} ms"] = 1000 * statistics.median(times[label])
        errors = [np.abs(o.astype(np.float64) - e).max() for o, e in zip(outputs[label], expected)]
        row[f"{label} max err"] = max(errors)
    row["ref max"] = max(np.abs(e).max() for e in expected)
    return row


def table(rows: list[dict[str, Any]], repeat: int, threads: int) -> str:
    lines = [
        "# Half precision: float16 export against float32 (onnxruntime CPU)",
        "",
        f"torch {torch.__version__}, onnxruntime {__import__('onnxruntime').__version__}, "
        f"{platform.machine()}, {threads} intra-op threads; median of {repeat} runs, interleaved; "
        "errors: largest |onnx - eager float32| over all outputs.",
        "",
        "| model | float32 ms | float16 ms | f16/f32 | max err f32 | max err f16 | max abs output | "
        "float32 MB | float16 MB | verification (f16 vs eager f32) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['float32 ms']:.1f} | {r['float16 ms']:.1f} | {r['float16 ms'] / r['float32 ms']:.2f}x "
            f"| {r['float32 max err']:.2g} | {r['float16 max err']:.2g} | {r['ref max']:.3g} | {r['float32 MB']:.0f} "
            f"| {r['float16 MB']:.0f} | {r['verification']} |"
        )
    lines += ["", "Islands (the `half` stage of each float16 export):", ""]
    lines += [f"- {r['model']}: {r['half']}" for r in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, from: {', '.join(MODELS)}")
    parser.add_argument("--repeat", type=int, default=20, help="timed runs of each model (median)")
    parser.add_argument("--threads", type=int, default=2, help="onnxruntime intra-op threads")
    parser.add_argument("--out", help="also write the markdown table to this file")
    ns = parser.parse_args(argv)
    rows = []
    for name in ns.models.split(","):
        with tempfile.TemporaryDirectory() as folder:
            rows.append(measure(*MODELS[name], ns.repeat, ns.threads, folder))
    text = table(rows, ns.repeat, ns.threads)
    print(text)
    if ns.out:
        with open(ns.out, "w", encoding="utf-8") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
