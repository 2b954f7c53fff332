"""Export time against depth: a Llama-style decoder at 2, 8 and 32 layers, every exporter in one run.

    python bench/depth.py [--layers 2 8 32] [--repeat 1] [--out bench/depth.md]

For each depth: ``torch.export.export`` alone (the capture floor every exporter built on it pays),
``onnxport.export(verify=False)`` with repeated blocks captured once (the default), the same with
``reuse_blocks=False``, and ``torch.onnx.export(dynamo=True)``; dynamic batch and sequence. The exporters
run in turn, after one warm-up export of each at the smallest depth. Also: onnxruntime's largest error
against eager PyTorch for both onnxport models, and their node counts.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import log, quiet, short  # noqa: E402

import onnxport  # noqa: E402

EXPORTERS = ("torch.export", "onnxport", "onnxport reuse_blocks=False", "torch.onnx")


def llama(layers: int) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    """The decoder of the issue: hidden 512, 8 heads, 2 KV heads, MLP 1376, vocab 32000, random weights."""
    import transformers

    config = transformers.LlamaConfig(
        hidden_size=512, num_attention_heads=8, num_key_value_heads=2, intermediate_size=1376, vocab_size=32000,
        num_hidden_layers=layers, max_position_embeddings=2048, use_cache=False,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    mask = torch.ones(2, 16, dtype=torch.int64)
    mask[1, :3] = 0
    return model, {"input_ids": torch.randint(0, 32000, (2, 16)), "attention_mask": mask}


def exporters(model: torch.nn.Module, inputs: dict[str, Any]) -> dict[str, Callable[[], Any]]:
    dim = torch.export.Dim.DYNAMIC
    dynamic = {name: {0: dim, 1: dim} for name in inputs}
    return {
        "torch.export": lambda: torch.export.export(model, (), inputs, dynamic_shapes=dynamic),
        "onnxport": lambda: onnxport.export(model, (), inputs, dynamic_shapes=dynamic, verify=False),
        "onnxport reuse_blocks=False": lambda: onnxport.export(
            model, (), inputs, dynamic_shapes=dynamic, verify=False, reuse_blocks=False),
        "torch.onnx": lambda: torch.onnx.export(model, (), kwargs=inputs, dynamic_shapes=dynamic, dynamo=True,
                                                verbose=False, optimize=True),
    }


def max_error(program: Any, model: torch.nn.Module, inputs: dict[str, Any]) -> float:
    with torch.no_grad():
        expected = model(**inputs).logits
    return float(np.abs(program(**inputs)["logits"].numpy() - expected.numpy()).max())


def measure(layers: int, repeat: int) -> dict[str, Any]:
    model, inputs = llama(layers)
    fns = exporters(model, inputs)
    times: dict[str, list[float]] = {name: [] for name in fns}
    results: dict[str, Any] = {}
    for _ in range(repeat):
        for name, fn in fns.items():
            if isinstance(results.get(name), BaseException):
                continue
            log(f"  {layers} layers: {name}")
            gc.collect()
            try:
                with quiet():
                    start = time.perf_counter()
                    results[name] = fn()
                    times[name].append(time.perf_counter() - start)
            except Exception as exc:  # noqa: BLE001 - a failure is a result to report
                results[name] = exc
    row: dict[str, Any] = {"layers": layers}
    for name in fns:
        row[name] = results[name] if isinstance(results[name], BaseException) else statistics.median(times[name])
    for name in ("onnxport", "onnxport reuse_blocks=False"):
        program = results[name]
        if not isinstance(program, BaseException):
            row[f"{name} nodes"] = len(program.model_proto.graph.node)
            row[f"{name} err"] = max_error(program, model, inputs)
    row["blocks"] = "; ".join(results["onnxport"].report.blocks) if "onnxport" in results and not isinstance(
        results["onnxport"], BaseException) else ""
    return row


def seconds(value: Any) -> str:
    return f"{value:.2f}" if isinstance(value, float) else f"fail: {short(value)}"


def ratio(a: Any, b: Any) -> str:
    return f"{a / b:.2f}x" if isinstance(a, float) and isinstance(b, float) else "n/a"


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| layers | torch.export s | onnxport s | onnxport reuse_blocks=False s | torch.onnx s | onnxport / torch.export "
        "| onnxport / torch.onnx | reuse speed-up | nodes (reuse / not) | max abs err (reuse / not) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        floor, ours, plain, theirs = (r[name] for name in EXPORTERS)
        lines.append(
            f"| {r['layers']} | {seconds(floor)} | {seconds(ours)} | {seconds(plain)} | {seconds(theirs)} "
            f"| {ratio(ours, floor)} | {ratio(ours, theirs)} | {ratio(plain, ours)} "
            f"| {r.get('onnxport nodes', 'n/a')} / {r.get('onnxport reuse_blocks=False nodes', 'n/a')} "
            f"| {r.get('onnxport err', float('nan')):.1e} / {r.get('onnxport reuse_blocks=False err', float('nan')):.1e} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[2, 8, 32])
    parser.add_argument("--repeat", type=int, default=1, help="timed exports per exporter and depth (median)")
    parser.add_argument("--out", help="also write the table to this markdown file")
    args = parser.parse_args()
    torch.set_num_threads(1)
    log("warm-up")
    model, inputs = llama(min(args.layers))
    for fn in exporters(model, inputs).values():
        with quiet():
            fn()
    rows = [measure(layers, args.repeat) for layers in args.layers]
    header = (f"Export time against depth: Llama-style decoder (hidden 512, 8 heads, 2 KV heads, MLP 1376, vocab "
              f"32000), inputs (2, 16) with dynamic batch and sequence, median of {args.repeat}; torch "
              f"{torch.__version__}, {platform.machine()}, {os.cpu_count()} CPUs.")
    text = header + "\n\n" + table(rows) + "\n\n" + "\n".join(f"- {r['layers']} layers: {r['blocks']}" for r in rows)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
