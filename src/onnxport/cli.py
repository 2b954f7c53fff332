"""The ``onnxport`` command: argument parsing and printing over the Python API."""

from __future__ import annotations

import argparse
import collections
import importlib.util
import os
import re
import sys
from collections.abc import Sequence
from typing import Any

import torch

from onnxport.errors import InvalidInputError, OnnxportError

_DTYPES = {
    "float32": torch.float32, "float": torch.float32, "float16": torch.float16, "half": torch.float16,
    "bfloat16": torch.bfloat16, "float64": torch.float64, "int64": torch.int64, "long": torch.int64,
    "int32": torch.int32, "int": torch.int32, "bool": torch.bool,
}
_INPUT_RE = re.compile(r"^(?:(?P<name>[A-Za-z_]\w*)=)?(?P<dtype>\w+)\[(?P<dims>[\d,\s]*)\](?:~(?P<lo>-?\d+):(?P<hi>-?\d+))?$")


def parse_input(text: str, generator: torch.Generator) -> tuple[str | None, torch.Tensor]:
    """``x=float32[2,3]`` -> ("x", random tensor); ``ids=int64[1,8]~0:1000`` draws ints in [0, 1000)."""
    m = _INPUT_RE.match(text.strip())
    if m is None or m["dtype"] not in _DTYPES:
        raise InvalidInputError(
            f"cannot read --input {text!r}",
            fix="write NAME=DTYPE[D0,D1,...], e.g. x=float32[1,3,224,224] or ids=int64[1,16]~0:30522; "
            f"dtypes: {', '.join(sorted(_DTYPES))}",
        )
    shape = [int(d) for d in m["dims"].replace(" ", "").split(",") if d]
    dtype = _DTYPES[m["dtype"]]
    if dtype.is_floating_point:
        tensor = torch.randn(shape, generator=generator).to(dtype)
    elif dtype == torch.bool:
        tensor = torch.randint(0, 2, shape, generator=generator).bool()
    else:
        lo, hi = int(m["lo"] or 0), int(m["hi"] or 10)
        tensor = torch.randint(lo, hi, shape, generator=generator, dtype=dtype)
    return m["name"], tensor


def load_target(spec: str) -> tuple[torch.nn.Module, Any]:
    """``FILE.py:NAME``: a module class (built with no arguments), an instance, or a function
    returning a model or ``(model, example_args)``. Returns the model and its example args (or None)."""
    path, sep, name = spec.rpartition(":")
    if not sep or not path.endswith(".py") or not name:
        raise InvalidInputError(f"cannot read {spec!r}", fix="write FILE.py:NAME, e.g. models/net.py:Net")
    if not os.path.isfile(path):
        raise InvalidInputError(f"{path} does not exist", fix="check the path (relative to the current folder)")
    module_name = f"_onnxport_user_{os.path.splitext(os.path.basename(path))[0]}"
    loader_spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(loader_spec)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    sys.modules[module_name] = module
    loader_spec.loader.exec_module(module)
    if not hasattr(module, name):
        raise InvalidInputError(f"{path} has no {name!r}", fix=f"pick one of: {', '.join(n for n in dir(module) if not n.startswith('_'))}")
    obj = getattr(module, name)
    if isinstance(obj, type) and issubclass(obj, torch.nn.Module):
        obj = obj()
    elif not isinstance(obj, torch.nn.Module) and callable(obj):
        obj = obj()
    example = None
    if isinstance(obj, tuple) and len(obj) == 2 and isinstance(obj[0], torch.nn.Module):
        obj, example = obj
    if not isinstance(obj, torch.nn.Module):
        raise InvalidInputError(f"{spec} gave a {type(obj).__name__}, not a torch.nn.Module", fix="point NAME at a module class, instance, or a function returning one")
    return obj.eval(), example


def example_inputs(ns: argparse.Namespace, example: Any) -> tuple[tuple, list[str] | None]:
    """The example args from ``--input`` (with their names when all are named), else the target's own."""
    generator = torch.Generator().manual_seed(ns.seed)
    parsed = [parse_input(text, generator) for text in ns.input]
    if parsed:
        names = [n for n, _ in parsed]
        return tuple(t for _, t in parsed), names if all(names) else None
    if example is not None:
        return (example if isinstance(example, tuple) else (example,)), None
    raise InvalidInputError("no example inputs", fix="give --input NAME=DTYPE[DIMS] for each input of forward")


def _export(ns: argparse.Namespace) -> int:
    from onnxport.api import export

    model, example = load_target(ns.target)
    args, input_names = example_inputs(ns, example)
    prog = export(
        model, args, input_names=input_names, output_names=ns.output_names, opset=ns.opset,
        optimize=not ns.no_optimize, verify=not ns.no_verify, progress=not ns.quiet,
    )
    prog.save(ns.output, external_data=True if ns.external_data else None)
    if not ns.quiet:
        print(prog.report)
    print(f"saved {ns.output}")
    return 0


def _doctor(ns: argparse.Namespace) -> int:
    from onnxport.capture.diagnose import diagnose

    model, example = load_target(ns.target)
    args, _ = example_inputs(ns, example)
    diagnosis = diagnose(model, args)
    print(diagnosis)
    # Like a linter: a non-zero exit tells scripts and CI that something needs attention.
    return 1 if diagnosis.issues else 0


def _demo(ns: argparse.Namespace) -> int:
    from onnxport.api import export
    from onnxport.demo import DEMOS

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
    return 0


def _inspect(ns: argparse.Namespace) -> int:
    import onnx

    if not os.path.isfile(ns.file):
        raise InvalidInputError(f"{ns.file} does not exist")
    try:
        model = onnx.load(ns.file, load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - protobuf raises its own types
        raise InvalidInputError(f"{ns.file} is not an ONNX model: {exc}") from None
    print(inspect_text(model, os.path.getsize(ns.file)))
    return 0


def inspect_text(model: Any, file_bytes: int) -> str:
    """Inputs, outputs, opsets, node counts by op type (subgraphs included) and sizes of a ModelProto."""
    import onnx

    def describe(vi: Any) -> str:
        t = vi.type.tensor_type
        dims = ",".join(d.dim_param or str(d.dim_value) for d in t.shape.dim)
        return f"{vi.name}: {onnx.helper.tensor_dtype_to_string(t.elem_type).replace('TensorProto.', '').lower()}[{dims}]"

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
    lines.append("inputs:")
    lines += [f"  {describe(i)}" for i in model.graph.input]
    lines.append("outputs:")
    lines += [f"  {describe(o)}" for o in model.graph.output]
    lines.append(f"nodes: {sum(counts.values())} ({len(model.graph.node)} in the main graph)")
    lines += [f"  {op:<24} {n}" for op, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    lines.append(f"initializers: {len(model.graph.initializer)} ({weights / 1e6:.2f} MB)   file: {file_bytes / 1e6:.2f} MB")
    return "\n".join(lines)


def _tensor_bytes(t: Any) -> int:
    import numpy as np
    import onnx

    if t.data_location == onnx.TensorProto.EXTERNAL:
        return next((int(e.value) for e in t.external_data if e.key == "length"), 0)
    itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
    return int(np.prod(t.dims, dtype=np.int64)) * itemsize


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="onnxport", description="Export PyTorch models to ONNX.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("export", help="export FILE.py:NAME to ONNX")
    p.add_argument("target", help="FILE.py:NAME, a module class, instance, or function returning a model [and inputs]")
    p.add_argument("--input", action="append", default=[], metavar="NAME=DTYPE[DIMS]", help="example input, once per input, e.g. x=float32[2,3,224,224]; ints: ids=int64[1,8]~0:1000")
    p.add_argument("-o", "--output", required=True, help="the .onnx file to write")
    p.add_argument("--output-names", nargs="+", default=None, help="names of the flattened outputs")
    p.add_argument("--opset", type=int, default=None, help="ONNX opset (default 23, up to the newest onnxruntime runs)")
    p.add_argument("--no-verify", action="store_true", help="skip the onnxruntime vs eager check")
    p.add_argument("--no-optimize", action="store_true", help="skip the ONNX graph optimizations")
    p.add_argument("--external-data", action="store_true", help="write weights to FILE.onnx.data")
    p.add_argument("--seed", type=int, default=0, help="seed of the random example inputs")
    p.add_argument("-q", "--quiet", action="store_true", help="print only the saved path")
    p.set_defaults(run=_export)
    p = sub.add_parser("doctor", help="list every graph break of FILE.py:NAME at once, each with its line and fix")
    p.add_argument("target", help="FILE.py:NAME, a module class, instance, or function returning a model [and inputs]")
    p.add_argument("--input", action="append", default=[], metavar="NAME=DTYPE[DIMS]", help="example input, once per input, e.g. x=float32[2,3,224,224]; ints: ids=int64[1,8]~0:1000")
    p.add_argument("--seed", type=int, default=0, help="seed of the random example inputs")
    p.set_defaults(run=_doctor)
    p = sub.add_parser("demo", help="export, verify and print the bundled default models")
    p.add_argument("-o", "--output-dir", default="onnxport-demo", help="where to save the .onnx files")
    p.add_argument("--no-text", action="store_true", help="do not print the ONNX text")
    p.set_defaults(run=_demo)
    p = sub.add_parser("inspect", help="summarise an .onnx file")
    p.add_argument("file")
    p.set_defaults(run=_inspect)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    try:
        return ns.run(ns)
    except OnnxportError as exc:
        print(f"onnxport: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
