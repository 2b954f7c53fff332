"""Dtypes the runtime has kernels for: the last step of translation.

A translator emits the op torch's dtype asks for, but onnxruntime's CPU provider has no kernel for many
(op, dtype) pairs, and ONNX itself allows some pairs nowhere (``Less`` on bool, ``Conv`` on int64). A node
whose inputs of one type constraint have such a dtype computes in the nearest wider dtype that has a kernel
(bool -> uint8 -> int32 -> int64; small ints -> int32; bfloat16 -> float; float64 -> float, the one
narrowing, where onnxruntime has no float64 kernel: trigonometry, ``Conv``, ``Resize``), and its outputs
of that constraint are cast back. Integer ops whose meaning changes in floating point (division, bit ops)
never move to a float type. float16 is left alone: onnxruntime computes float16 nodes without a kernel in
float32 by itself, and other runtimes run float16 natively.

The kernels come from ``_ort_kernels.py``, a table generated from the pinned onnxruntime release
(``python -m onnxport.translate.legalize`` rewrites it), so the same model gives the same file on every
machine, whatever onnxruntime is installed.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator

import onnx
import onnx_ir as ir

from onnxport.translate._ort_kernels import KERNELS

__all__ = ["legalize_dtypes"]

D = ir.DataType
_WIDER = {
    D.BOOL: (D.UINT8, D.INT32, D.INT64, D.FLOAT),
    D.INT8: (D.INT32, D.INT64, D.FLOAT), D.UINT8: (D.INT32, D.INT64, D.FLOAT),
    D.INT16: (D.INT32, D.INT64, D.FLOAT), D.UINT16: (D.INT32, D.INT64, D.FLOAT),
    D.INT32: (D.INT64, D.DOUBLE, D.FLOAT), D.UINT32: (D.INT64, D.DOUBLE, D.FLOAT),
    D.INT64: (D.DOUBLE, D.FLOAT), D.UINT64: (D.DOUBLE, D.FLOAT),
    D.BFLOAT16: (D.FLOAT,), D.DOUBLE: (D.FLOAT,),
}
_FLOATS = frozenset({D.FLOAT16, D.BFLOAT16, D.FLOAT, D.DOUBLE})
# Integer ops that mean something else on floats: they only ever move to a wider integer type.
_INTEGER_MEANING = frozenset({"Div", "Mod", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot",
                              "Pow", "ReduceMean", "Cast", "CastLike"})


def legalize_dtypes(graph: ir.Graph, opset: int, narrowed: set[str] | None = None) -> int:
    """Make every node of ``graph`` (and of its subgraphs) use dtypes onnxruntime has kernels for; returns
    how many nodes now compute in another dtype. The op types of float64 nodes that now compute in
    float32 (onnxruntime has no float64 kernel for them) are added to ``narrowed``."""
    casts = _Casts()
    changed = 0
    for node in list(_nodes(graph)):
        source = _legalize(node, opset, casts)
        changed += source is not None
        if source == D.DOUBLE and narrowed is not None:
            narrowed.add(node.op_type)
    return changed


def _nodes(graph: ir.Graph) -> Iterator[ir.Node]:
    for node in list(graph):
        yield node
        for attr in node.attributes.values():
            if attr.type == ir.AttributeType.GRAPH:
                yield from _nodes(attr.as_graph())
            elif attr.type == ir.AttributeType.GRAPHS:
                for sub in attr.as_graphs():
                    yield from _nodes(sub)


def _legalize(node: ir.Node, opset: int, casts: _Casts) -> ir.DataType | None:
    """The dtype the node computed in when it now computes in another, else None."""
    if node.domain not in ("", "ai.onnx"):
        return None
    kernels = _kernels(node.op_type, opset)
    if not kernels:
        return None
    inputs, outputs = _constraints(node, opset)
    changed = None
    for constraint, allowed in kernels.items():
        slots = [i for i, c in enumerate(inputs) if c == constraint and node.inputs[i] is not None]
        dtypes = {node.inputs[i].dtype for i in slots}
        if len(dtypes) != 1 or None in dtypes or next(iter(dtypes)).name in allowed:
            continue
        source = next(iter(dtypes))
        target = next((t for t in _WIDER.get(source, ()) if t.name in allowed and _keeps_meaning(node, source, t)),
                      None)
        if target is None:
            continue
        for i in slots:
            node.replace_input_with(i, casts.cast(node, node.inputs[i], target))
        for out, c in zip(node.outputs, outputs):
            if c == constraint and out.dtype == source:
                casts.cast_back(node, out, target)
        changed = source
    return changed


class _Casts:
    """Cast nodes made by one pass: one per (graph, value, dtype), with names no other value has."""

    def __init__(self) -> None:
        self.made: dict[tuple[int, int, ir.DataType], ir.Value] = {}
        self.count = 0

    def _node(self, value: ir.Value, dtype: ir.DataType) -> ir.Node:
        self.count += 1
        tag = f"{dtype.name.lower()}_{self.count}"
        cast = ir.Node("", "Cast", [value], [ir.AttrInt64("to", dtype)], name=f"legalize_cast_{tag}")
        cast.outputs[0].name = f"{value.name}__{tag}"
        cast.outputs[0].dtype, cast.outputs[0].shape = dtype, value.shape
        return cast

    def cast(self, node: ir.Node, value: ir.Value, dtype: ir.DataType) -> ir.Value:
        """``value`` as ``dtype``, cast once in ``node``'s graph, before every use there."""
        graph = node.graph
        key = (id(graph), id(value), dtype)
        if key not in self.made:
            cast = self._node(value, dtype)
            producer = value.producer()
            if producer is not None and producer.graph is graph:
                graph.insert_after(producer, cast)
            else:
                graph.insert_before(node, cast)
            self.made[key] = cast.outputs[0]
        return self.made[key]

    def cast_back(self, node: ir.Node, out: ir.Value, wide: ir.DataType) -> None:
        """``out`` keeps its name, dtype and uses, now made by a Cast from the node's new, wider output."""
        source, name = out.dtype, out.name
        users = list(out.uses())
        graph = node.graph
        is_output = out in graph.outputs
        out.name, out.dtype = f"{name}__{wide.name.lower()}", wide
        back = self._node(out, source)
        graph.insert_after(node, back)
        back.outputs[0].name = name
        for user, i in users:
            user.replace_input_with(i, back.outputs[0])
        if is_output:
            graph.outputs[graph.outputs.index(out)] = back.outputs[0]


def _keeps_meaning(node: ir.Node, source: ir.DataType, target: ir.DataType) -> bool:
    return source in _FLOATS or target not in _FLOATS or node.op_type not in _INTEGER_MEANING


def _kernels(op_type: str, opset: int) -> dict[str, frozenset[str]]:
    for since, until, constraints in KERNELS.get(op_type, ()):
        if since <= opset and (until is None or opset <= until):
            return {c: frozenset(names.split()) for c, names in constraints.items()}
    return {}


def _constraints(node: ir.Node, opset: int) -> tuple[list[str | None], list[str | None]]:
    """The type constraint (``"T"``) of each input and output of ``node``, from its ONNX schema."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opset)
    except onnx.defs.SchemaError:
        return [None] * len(node.inputs), [None] * len(node.outputs)

    def spread(formals: list, count: int) -> list[str | None]:
        kinds = [f.type_str for f in formals]
        if formals and formals[-1].option == onnx.defs.OpSchema.FormalParameterOption.Variadic:
            kinds += [kinds[-1]] * max(count - len(kinds), 0)
        return (kinds + [None] * count)[:count]

    return spread(schema.inputs, len(node.inputs)), spread(schema.outputs, len(node.outputs))


def _installed_kernels() -> dict[str, dict[tuple[int, int], dict[str, set[str]]]]:
    """The installed onnxruntime's CPU kernels of the default domain from opset 18 on:
    op -> {(first opset, last opset): {type constraint: dtype names}}."""
    from onnxruntime.capi import _pybind_state

    table: dict[str, dict[tuple, dict[str, set[str]]]] = collections.defaultdict(dict)
    for kernel in _pybind_state.get_all_opkernel_def():
        since, until = kernel.version_range
        if kernel.provider != "CPUExecutionProvider" or kernel.domain not in ("", "ai.onnx") or until < 18:
            continue
        merged = table[kernel.op_name].setdefault((since, until), collections.defaultdict(set))
        for constraint, types in kernel.type_constraints.items():
            merged[constraint].update(_TYPE_NAMES[t] for t in types if t in _TYPE_NAMES)
    return table


def _write_table(path: str, oldest: str | None = None) -> None:
    """``_ort_kernels.py`` from the installed onnxruntime's CPU kernels (the ranges from opset 18 on); with
    ``oldest`` (``tests/runtimes/dump_kernels.py``'s JSON of the oldest onnxruntime supported), each dtype list cut to the dtypes that
    release has too, for the ops it has: a file legal for the pinned release must load in the oldest."""
    import json

    import onnxruntime

    table = _installed_kernels()
    old: dict[str, dict[str, list[str]]] = {}
    source = f"onnxruntime {onnxruntime.__version__}'s CPU kernels"
    if oldest:
        with open(oldest, encoding="utf-8") as f:
            dumped = json.load(f)
        old = dumped["kernels"]
        source += f" that onnxruntime {dumped['onnxruntime']} has too"
    lines = [f'"""{source} (default domain, opset 18 and later):',
             "op -> [(first opset, last opset or None, {type constraint: dtypes})]. Generated by",
             '``python -m onnxport.translate.legalize``; do not edit."""', "", "KERNELS = {"]
    for op in sorted(table):
        ranges = sorted(table[op].items(), key=lambda kv: -kv[0][0])
        entries = []
        for (since, until), constraints in ranges:
            last = None if until >= 2**31 - 1 else until
            # float64 stays where the pinned release has it: narrowing it to float32 would lose precision
            # everywhere, where widening a bool or a small int only costs a cast
            kept = {c: (t & (set(old[op].get(c, t)) | {"DOUBLE"}) if op in old else t) for c, t in constraints.items()}
            body = ", ".join(f'"{c}": "{" ".join(sorted(t))}"' for c, t in sorted(kept.items()))
            entries.append(f"({since}, {last}, {{{body}}})")
        lines.append(f'    "{op}": [{", ".join(entries)}],')
    lines.append("}")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


_TYPE_NAMES = {f"tensor({k})": v for k, v in {
    "bool": "BOOL", "int8": "INT8", "int16": "INT16", "int32": "INT32", "int64": "INT64", "uint8": "UINT8",
    "uint16": "UINT16", "uint32": "UINT32", "uint64": "UINT64", "float16": "FLOAT16", "bfloat16": "BFLOAT16",
    "float": "FLOAT", "double": "DOUBLE", "string": "STRING",
}.items()}


if __name__ == "__main__":
    import argparse
    import os

    parser = argparse.ArgumentParser(description="write _ort_kernels.py from the installed onnxruntime")
    parser.add_argument("path", nargs="?", default=os.path.join(os.path.dirname(__file__), "_ort_kernels.py"))
    parser.add_argument("--oldest", help="tests/runtimes/dump_kernels.py's JSON of the oldest onnxruntime supported: "
                        "keep only the dtypes it has too")
    options = parser.parse_args()
    _write_table(options.path, options.oldest)
