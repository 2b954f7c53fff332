"""What the portable default target costs: each model exported for each target, run in this onnxruntime.

    python bench/targets.py                                   # llama decode/prefill, bert_base, vit_b16
    python bench/targets.py --models llama --out bench/targets.md

Every model (random weights, nothing downloaded) is exported once per target (``verify=False``): the
default ``onnxruntime>=1.18`` (opset 21, plain ops), ``onnxruntime>=1.24`` and ``onnxruntime>=1.26`` (opset
23 at IR 12: Attention, RMSNormalization, RotaryEmbedding; the same files today). The sessions of one call run in turn (A B C A B C ...,
bench/run.py's ``latency_ms``) on the CPU provider with one thread at onnxruntime's default optimisation
level, so the machine's drift hits all alike; the table gives each target's latency over the fastest
target's. The Llama is bench/llm.py's (hidden 512, 8 layers, 2 KV heads), exported from a decode step with
dynamic batch, sequence and past: decode at past 128 and 1024, prefill of 128 tokens, batch 1. BERT-base and
ViT-B/16 are bench/speed.py's (2 x 128 tokens, 2 images).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llm import build, ort_feeds, step_inputs  # noqa: E402
from run import latency_ms, log, make_session, publish, quiet  # noqa: E402
from speed import bert_base, vit_base  # noqa: E402

import onnxport  # noqa: E402
from onnxport.targets import DEFAULT_TARGET  # noqa: E402

TARGETS = (DEFAULT_TARGET, "onnxruntime>=1.24", "onnxruntime>=1.26")
FASTEST = TARGETS[-1]
Row = tuple[str, dict[str, float], float]  # call, target -> ms, largest difference between targets' outputs


def _spread(outputs: list[list[np.ndarray]]) -> float:
    return max(float(np.abs(a - b).max()) for other in outputs[1:] for a, b in zip(outputs[0], other))


def llama() -> list[Row]:
    model = build(512, 8, 8, 2, 32000)
    sessions = {}
    for target in TARGETS:
        log(f"llama: export for {target}")
        with quiet():
            prog = onnxport.export(model, (), step_inputs(model, 4, 3), dynamic_shapes="auto", verify=False,
                                   target=target)
        sessions[target] = make_session(prog.model_proto)
    names = {"key": "past_key_values.%d.key", "value": "past_key_values.%d.value"}
    rows = []
    for label, past, new in (("Llama decode, past 128", 128, 1), ("Llama decode, past 1024", 1024, 1),
                             ("Llama prefill 128", 0, 128)):
        log(label)
        inputs = step_inputs(model, past, new)
        runs = [(s, ort_feeds(s, inputs, names)) for s in sessions.values()]
        ms = latency_ms(runs)
        spread = _spread([s.run(None, f)[:1] for s, f in runs])
        rows.append((label, dict(zip(TARGETS, ms)), spread))
    return rows


def _encoder(label: str, case: Callable[[], Any]) -> list[Row]:
    model, args, dynamic = case()
    names = list(dynamic)
    runs = []
    for target in TARGETS:
        log(f"{label}: export for {target}")
        with quiet():
            proto = onnxport.export(model, args, dynamic_shapes=dynamic, input_names=names, verify=False,
                                    target=target).model_proto
        session = make_session(proto)
        runs.append((session, {i.name: a.numpy() for i, a in zip(session.get_inputs(), args)}))
    log(f"{label}: latency")
    ms = latency_ms(runs)
    return [(label, dict(zip(TARGETS, ms)), _spread([s.run(None, f) for s, f in runs]))]


MODELS: dict[str, Callable[[], list[Row]]] = {
    "llama": llama,
    "bert_base": lambda: _encoder("BERT-base, 2 x 128", bert_base),
    "vit_b16": lambda: _encoder("ViT-B/16, 2 images", vit_base),
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated: " + ", ".join(MODELS))
    parser.add_argument("--out", help="also write the markdown table to this file")
    opts = parser.parse_args(argv)
    torch.set_num_threads(1)
    rows = [row for name in opts.models.split(",") for row in MODELS[name]()]
    import onnxruntime

    lines = [
        f"onnxruntime {onnxruntime.__version__} CPU provider, one thread; torch {torch.__version__}, "
        f"{platform.machine()}. Latency in ms (median, the targets' sessions run in turn) and each target over "
        f"the fastest ({FASTEST}). `python bench/targets.py` (`make bench-targets`).",
        "",
        "| call | " + " | ".join(f"{t} ms" for t in TARGETS) + " | "
        + " | ".join(f"{t} / {FASTEST}" for t in TARGETS[:-1]) + " | largest difference |",
        "|---|" + "---:|" * (2 * len(TARGETS)) ,
    ]
    for label, ms, spread in rows:
        ratios = " | ".join(f"{ms[t] / ms[FASTEST]:.2f}x" for t in TARGETS[:-1])
        lines.append(f"| {label} | " + " | ".join(f"{ms[t]:.2f}" for t in TARGETS) + f" | {ratios} | {spread:.1e} |")
    table = "\n".join(lines) + "\n"
    publish(table, opts.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
