"""Latency of full-size models in onnxruntime: onnxport's ONNX against torch.onnx's, measured in turn.

    python bench/speed.py                                # llama_prefill, bert_base, vit_b16
    python bench/speed.py --models bert_base --out bench/speed.md

Each model (random weights, nothing downloaded) is exported by ``onnxport.export`` (``verify=False``) and
by ``torch.onnx.export(dynamo=True, optimize=True)`` with the same dynamic dims; both sessions run on the
CPU provider with one thread at onnxruntime's default optimisation level, A B A B ... (``latency_ms`` of
bench/run.py), so the machine's drift hits both alike. Node counts are the file's and what onnxruntime
leaves after its own graph optimisation (the model it writes at the extended level).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import vit_b16  # noqa: E402
from run import latency_ms, log, make_session, max_abs_err, publish, quiet  # noqa: E402

import onnxport  # noqa: E402

Case = tuple[torch.nn.Module, tuple[Any, ...], dict[str, Any]]


class _Tokens(torch.nn.Module):
    """A transformers text model on ``input_ids, attention_mask``, its tensors as a tuple (no cache)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, return_dict=True)
        return tuple(v for v in out.values() if isinstance(v, torch.Tensor))


def _text_case(model: torch.nn.Module, vocab: int, batch: int = 2, seq: int = 128) -> Case:
    ids = torch.randint(3, vocab, (batch, seq), generator=torch.Generator().manual_seed(0))
    dims = {0: torch.export.Dim.DYNAMIC, 1: torch.export.Dim.DYNAMIC}
    return _Tokens(model), (ids, torch.ones_like(ids)), {"input_ids": dims, "attention_mask": dims}


def llama_prefill() -> Case:
    """bench/llm.py's Llama-style decoder (hidden 512, 8 layers, 8 heads, 2 KV heads), a 2 x 128 prompt."""
    from llm import build

    model = build(512, 8, 8, 2, 32000)
    model.config.use_cache = False
    return _text_case(model, 32000)


def bert_base() -> Case:
    """``BertModel(BertConfig())``: 12 layers, hidden 768, 2 x 128 tokens."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    return _text_case(BertModel(BertConfig()).eval(), 30522)


def vit_base() -> Case:
    """``ViTModel(ViTConfig())``: ViT-B/16 at 224 x 224, 2 images."""
    model, args = vit_b16(batch=2)
    return model, args, {"pixel_values": {0: torch.export.Dim.DYNAMIC}}


CASES: dict[str, Callable[[], Case]] = {"llama_prefill": llama_prefill, "bert_base": bert_base, "vit_b16": vit_base}


def ort_nodes(proto: Any) -> int:
    """Nodes onnxruntime leaves after its own optimisation (extended level, as it can write it back)."""
    import onnx
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as tmp:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        options.optimized_model_filepath = os.path.join(tmp, "opt.onnx")
        options.log_severity_level = 3
        ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
        return len(onnx.load(options.optimized_model_filepath, load_external_data=False).graph.node)


def measure(name: str, target: str | None = None) -> tuple[str, ...]:
    model, args, dynamic = CASES[name]()
    names = list(dynamic)
    log(f"{name}: export with onnxport")
    with quiet():
        ours = onnxport.export(model, args, dynamic_shapes=dynamic, input_names=names, verify=False,
                               target=target).model_proto
    log(f"{name}: export with torch.onnx")
    with quiet():
        theirs = torch.onnx.export(model, args, dynamic_shapes=dynamic, input_names=names, dynamo=True,
                                   verbose=False, optimize=True).model_proto
    with torch.no_grad():
        expected = [t for t in model(*args) if isinstance(t, torch.Tensor)]
    feeds = {n: a.numpy() for n, a in zip(names, args)}
    sessions = [make_session(ours), make_session(theirs)]
    errs = [max_abs_err(s.run(None, {i.name: feeds[i.name] for i in s.get_inputs()}), expected) for s in sessions]
    log(f"{name}: latency")
    runs = [(s, {i.name: feeds[i.name] for i in s.get_inputs()}) for s in sessions]
    ms = latency_ms(runs)
    counts = [len(ours.graph.node), len(theirs.graph.node), ort_nodes(ours), ort_nodes(theirs)]
    return (name, f"{ms[0]:.2f}", f"{ms[1]:.2f}", f"{ms[0] / ms[1]:.2f}x", *map(str, counts),
            f"{errs[0]:.2e}", f"{errs[1]:.2e}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(CASES), help=f"comma-separated, from {', '.join(CASES)}")
    parser.add_argument("--target", default="onnxruntime>=1.26",
                        help="onnxport's target (default: onnxruntime>=1.26, every fused op; bench/targets.py "
                        "gives what the portable default costs)")
    parser.add_argument("--out", help="also write the markdown table to this file")
    opts = parser.parse_args(argv)
    torch.set_num_threads(1)
    rows = [measure(name, opts.target) for name in opts.models.split(",")]
    import onnxruntime

    lines = [
        f"torch {torch.__version__}, onnxruntime {onnxruntime.__version__}, {platform.machine()}, one thread, "
        f"numpy {np.__version__}; onnxport target {opts.target}.",
        "",
        "| model | ORT ms onnxport | ORT ms torch.onnx | onnxport / torch.onnx | nodes onnxport | nodes torch.onnx "
        "| nodes after ORT onnxport | nodes after ORT torch.onnx | max abs err onnxport | max abs err torch.onnx |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *("| " + " | ".join(row) + " |" for row in rows),
    ]
    table = "\n".join(lines) + "\n"
    publish(table, opts.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
