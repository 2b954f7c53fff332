"""The ``onnxport`` command: argument parsing and printing over the Python API."""

from __future__ import annotations

import argparse
import collections
import logging
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import torch

from onnxport import metadata
from onnxport._cli_inputs import Inputs, Target, example_inputs, load_target, load_weights
from onnxport.arguments import check_output_file
from onnxport.errors import InvalidInputError, OnnxportError
from onnxport.hf import TASKS, export_hf, pick_task
from onnxport.targets import DEFAULT_TARGET, TARGETS


def _load(ns: argparse.Namespace, progress: bool) -> tuple[Target, Inputs]:
    """The target, its weights (``--weights``) and its example inputs, with a progress line."""
    start = time.perf_counter()
    target = load_target(ns.model)
    if ns.weights:
        load_weights(target.model, ns.weights)
    inputs = example_inputs(ns.input, ns.seed, getattr(ns, "dynamic", None), target)
    if progress:
        print(f"[onnxport] {'load':<10} {time.perf_counter() - start:7.3f}s  {ns.model}", file=sys.stderr, flush=True)
    return target, inputs


def _export(ns: argparse.Namespace) -> int:
    from onnxport.api import export
    from onnxport.quantize.options import QuantizeOptions

    check_output_file(ns.output)  # before the export, not after it
    QuantizeOptions.of(ns.quantize)  # checked before the model is loaded
    progress = _progress(ns)
    target, inputs = _load(ns, progress)
    prog = export(
        target.model, inputs.args, inputs.kwargs, dynamic_shapes=inputs.dynamic_shapes, input_names=inputs.input_names,
        output_names=ns.output_names, opset=ns.opset, target=ns.target, optimize=not ns.no_optimize,
        verify=not ns.no_verify,
        progress=progress, dtype=ns.dtype, quantize=ns.quantize,
    )
    prog.save(ns.output, external_data=True if ns.external_data else None)
    if not ns.quiet:
        print(prog.report)
    print(f"saved {ns.output}")
    return 0


def _progress(ns: argparse.Namespace) -> bool:
    # One line per stage as it ends: on by default where someone watches (a terminal), off in logs and pipes.
    return ns.progress if ns.progress is not None else sys.stderr.isatty() and not ns.quiet


def _export_hf(ns: argparse.Namespace) -> int:
    from onnxport.hf import hub

    task, directory = ns.task, hub.resolve(ns.directory, ns.revision)  # a Hub id: fetched first
    if task == "auto":
        picked = pick_task(directory)  # said before the export, which may take long
        if not ns.quiet:
            print(picked, flush=True)
        task = picked.task
    result = export_hf(directory, task, ns.output, opset=ns.opset, target=ns.target, progress=_progress(ns),
                       streaming=False if ns.in_memory else True if ns.streaming else None, quantize=ns.quantize,
                       dtypes=ns.dtypes, dtype=ns.dtype, verify_generation=not ns.no_verify_generation)
    programs = tuple(result.values()) if isinstance(result, dict) else result if isinstance(result, tuple) \
        else (result,)
    programs = tuple(prog for prog in programs if prog is not None)  # a vision-language model's absent pieces
    if not ns.quiet:
        for prog in programs:
            print(f"NOT VERIFIED: {prog.report.unverified}" if prog.report.unverified else prog.report.verification)
            if prog.report.generation is not None:  # a text-generation decoder's loop (onnxport.hf.verify_loop)
                print(prog.report.generation)
            for warning in prog.report.warnings:
                print(f"warning: {warning}")
            if prog.report.quantization is not None:
                print(f"quantized: {prog.report.quantization}")
    for folder, dirs, names in sorted(os.walk(ns.output)):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in sorted(names):
            print(f"saved {os.path.join(folder, name)}")
    return 0


def _doctor(ns: argparse.Namespace) -> int:
    from onnxport.capture.diagnose import diagnose

    if ns.model is None:
        from onnxport.versions import environment

        print(environment())
        return 0
    target, inputs = _load(ns, progress=False)
    diagnosis = diagnose(target.model, inputs.args, inputs.kwargs)
    print(diagnosis)
    # Like a linter: a non-zero exit tells scripts and CI that something needs attention.
    return 1 if diagnosis.issues else 0


def _demo(ns: argparse.Namespace) -> int:
    from onnxport.api import export
    from onnxport.demo import DEMOS, generation_demo

    os.makedirs(ns.output_dir, exist_ok=True)
    torch.manual_seed(0)
    for name, factory in DEMOS.items():
        model, input_sets = factory()
        print(f"== {name}: {type(model).__name__}", flush=True)
        prog = export(model, input_sets[0], verify_inputs=input_sets[1:], progress=True)
        path = os.path.join(ns.output_dir, f"{name}.onnx")
        prog.save(path)
        for rewrite in prog.report.rewrites:
            print(f"rewrote the if at {rewrite}")
        print(prog.report.verification)
        if not ns.no_text:
            print(prog.text())
        print(f"saved {path}\n", flush=True)
    path = os.path.join(ns.output_dir, "tiny_llama.onnx")
    print("== tiny_llama: LlamaForCausalLM with its KV cache, one model for prefill and decode", flush=True)
    for line in generation_demo(path):
        print(line)
    if os.path.isfile(path):
        print(f"saved {path}", flush=True)
    return 0


def _inspect(ns: argparse.Namespace) -> int:
    import onnx

    if not os.path.isfile(ns.file):
        what = "is a folder" if os.path.isdir(ns.file) else "does not exist"
        raise InvalidInputError(f"{ns.file} {what}", fix="give the path of an .onnx file")
    try:
        model = onnx.load(ns.file, load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - protobuf raises its own types
        raise InvalidInputError(f"{ns.file} is not an ONNX model: {exc}",
                                fix="give an .onnx file (a ModelProto, as onnx.save or onnxport writes it)") from None
    print(inspect_text(model, os.path.getsize(ns.file)))
    return 0


def inspect_text(model: Any, file_bytes: int) -> str:
    """Inputs, outputs, opsets, node counts by op type (subgraphs included) and sizes of a ModelProto."""
    import onnx

    def describe(vi: Any) -> str:
        t = vi.type.tensor_type
        dims = ",".join(d.dim_param or str(d.dim_value) for d in t.shape.dim)
        dtype = onnx.helper.tensor_dtype_to_string(t.elem_type).replace('TensorProto.', '').lower()
        return f"{vi.name}: {dtype}[{dims}]"

    counts: collections.Counter[str] = collections.Counter()
    stack = [model.graph]
    while stack:
        graph = stack.pop()
        for node in graph.node:
            counts[f"{node.domain + '.' if node.domain else ''}{node.op_type}"] += 1
            stack.extend(a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH)
            stack.extend(g for a in node.attribute if a.type == onnx.AttributeProto.GRAPHS for g in a.graphs)
    weights = sum(_tensor_bytes(t) for t in model.graph.initializer)
    lines = [f"producer: {model.producer_name} {model.producer_version}   ir_version: {model.ir_version}"]
    lines.append("opsets: " + ", ".join(f"{o.domain or 'ai.onnx'}={o.version}" for o in model.opset_import))
    target = metadata.text(model, metadata.TARGET)
    if target:
        lines.append(f"target: {target}")
    lines.append("inputs:")
    lines += [f"  {describe(i)}" for i in model.graph.input]
    lines.append("outputs:")
    lines += [f"  {describe(o)}" for o in model.graph.output]
    lines.append(f"nodes: {sum(counts.values())} ({len(model.graph.node)} in the main graph)")
    lines += [f"  {op:<24} {n}" for op, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    lines.append(f"initializers: {len(model.graph.initializer)} ({weights / 1e6:.2f} MB)   "
                 f"file: {file_bytes / 1e6:.2f} MB")
    return "\n".join(lines)


def _tensor_bytes(t: Any) -> int:
    import numpy as np
    import onnx

    if t.data_location == onnx.TensorProto.EXTERNAL:
        return next((int(e.value) for e in t.external_data if e.key == "length"), 0)
    itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
    return int(np.prod(t.dims, dtype=np.int64)) * itemsize


_TARGET_HELP = (
    "FILE.py:NAME (a module class, instance, or function returning a model [and inputs]) or a torch.export FILE.pt2"
)
_INPUT_HELP = ("example input, once per input, e.g. x=float32[2,3,224,224]; a name makes a dim dynamic: "
               "x=float32[batch,3,224,224] (example size 2, or batch=1); ints: ids=int64[1,8]~0:1000")


def _add_target_args(p: argparse.ArgumentParser, optional_model: bool = False) -> None:
    if optional_model:
        p.add_argument("model", nargs="?", default=None, help=_TARGET_HELP)
    else:
        p.add_argument("model", help=_TARGET_HELP)
    p.add_argument("--input", action="append", default=[], metavar="NAME=DTYPE[DIMS]", help=_INPUT_HELP)
    p.add_argument("--weights", metavar="FILE",
                   help="state dict (torch.save, read with weights_only=True) or .safetensors to load first")
    p.add_argument("--seed", type=int, default=0, help="seed of the random example inputs")


def _add_runtime_args(p: argparse.ArgumentParser, folders: bool = False) -> None:
    p.add_argument("--target", default=None, metavar="RUNTIME>=VERSION",
                   help=f"the runtime the file is for and its oldest release (default {DEFAULT_TARGET}); e.g. "
                   + ", ".join(t for t in TARGETS if t != DEFAULT_TARGET) + ": picks the opset and the fused ops"
                   + ("; transformers.js writes the folder transformers.js loads (onnx/, one file per dtype)"
                      if folders else ""))
    p.add_argument("--opset", type=int, default=None,
                   help="ONNX opset (default: the target's; at most what the target's oldest release loads)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="onnxport", description="Export PyTorch models to ONNX.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("export", help="export FILE.py:NAME or FILE.pt2 to ONNX")
    _add_target_args(p)
    p.add_argument("-o", "--output", required=True, help="the .onnx file to write")
    p.add_argument("--dynamic", choices=["auto", "static"], default=None,
                   help="auto: every dim may vary (named dims stay shared); static: none does (also for a .pt2)")
    p.add_argument("--output-names", nargs="+", default=None, help="names of the flattened outputs")
    _add_runtime_args(p)
    p.add_argument("--no-verify", action="store_true", help="skip the onnxruntime vs eager check")
    p.add_argument("--no-optimize", action="store_true", help="skip the ONNX graph optimizations")
    p.add_argument("--dtype", choices=["float16"], default=None,
                   help="export as float16 (weights, floating inputs and outputs) with float32 islands")
    p.add_argument("--quantize", default=None, metavar="int4|int8",
                   help="int4 or int8 weights for the linear layers (blocks of 32, symmetric; MatMulNBits for "
                   "onnxruntime targets, DequantizeLinear otherwise), measured against eager PyTorch")
    p.add_argument("--external-data", action="store_true", help="write weights to FILE.onnx.data")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="one line per stage on stderr (default: on when stderr is a terminal)")
    p.add_argument("-q", "--quiet", action="store_true", help="print only the saved path")
    p.set_defaults(run=_export)
    p = sub.add_parser("export-hf", help="export a local transformers model directory for a task")
    p.add_argument("directory", help="a transformers model directory (config.json and safetensors weights), a "
                   "diffusers pipeline directory (model_index.json), or a Hugging Face Hub id (owner/name: fetched "
                   "into the Hub's cache, HF_TOKEN and HF_HUB_OFFLINE as the Hub's tools read them)")
    p.add_argument("--revision", default=None, help="with a Hub id: the branch, tag or commit (default main)")
    p.add_argument("--task", default="text-generation", choices=[*TASKS, "auto"],
                   help="what the model is exported for (default: text-generation, with its KV cache); auto: "
                   "read from config.json's architectures (a sentence-transformers directory: sentence-similarity; a "
                   "diffusers pipeline directory: text-to-image)")
    p.add_argument("-o", "--output", required=True, help="the folder to write the model(s) and their files into")
    _add_runtime_args(p, folders=True)
    loading = p.add_mutually_exclusive_group()
    loading.add_argument("--in-memory", action="store_true",
                         help="load the weights and verify against eager PyTorch whatever their size (default: "
                         "loaded and verified where they fit in memory with room to spare, else streamed)")
    loading.add_argument("--streaming", action="store_true",
                         help="stream the weights from the safetensors files into the ONNX data file without "
                         "loading them, whatever their size: not verified (seq2seq tasks always load)")
    p.add_argument("--quantize", default=None, metavar="int4|int8",
                   help="int4 or int8 weights for the linear layers of the model(s) written (blocks of 32, "
                   "symmetric; MatMulNBits for onnxruntime targets, which onnxruntime-genai runs)")
    p.add_argument("--dtype", choices=["fp32", "fp16", "bf16", "auto"], default=None,
                   help="the precision of the models written, whatever the checkpoint's (default fp32; fp16: float16 "
                   "with float32 islands; auto: the checkpoint's own)")
    p.add_argument("--dtypes", default=None, metavar="fp32,fp16,q8,q4,q4f16",
                   help="with --target transformers.js: the precisions the onnx/ folder holds, one file each "
                   "(default: all five)")
    p.add_argument("--no-verify-generation", action="store_true",
                   help="text-generation: skip the generation loop (a left-padded batch of prompts, then decode steps "
                   "fed back through the cache, logits compared with eager PyTorch's at every step) run by default")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="one line per stage on stderr (default: on when stderr is a terminal)")
    p.add_argument("-q", "--quiet", action="store_true", help="print only the saved paths")
    p.set_defaults(run=_export_hf)
    p = sub.add_parser("doctor", help="list every graph break of FILE.py:NAME at once, each with its line and fix; "
                       "with no model, print the environment (torch, onnx, onnxruntime, transformers) and whether "
                       "each release is a tested one")
    _add_target_args(p, optional_model=True)
    p.set_defaults(run=_doctor)
    p = sub.add_parser("demo", help="export, verify and print the bundled default models")
    p.add_argument("-o", "--output-dir", default="onnxport-demo", help="where to save the .onnx files")
    p.add_argument("--no-text", action="store_true", help="do not print the ONNX text")
    p.set_defaults(run=_demo)
    p = sub.add_parser("inspect", help="summarise an .onnx file")
    p.add_argument("file")
    p.set_defaults(run=_inspect)
    return parser


# Other packages' notices that reach the command's output through their loggers while onnxport imports them
# (torchao, which transformers imports when it is installed: its native kernels for other builds of torch, and
# torch's deprecation of how it registers its enums). Errors still show.
_QUIET_LOGGERS = ("torchao", "torch.utils._pytree")


def main(argv: Sequence[str] | None = None) -> int:
    for name in _QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    ns = build_parser().parse_args(argv)
    try:
        return ns.run(ns)
    except OnnxportError as exc:
        print(f"onnxport: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
