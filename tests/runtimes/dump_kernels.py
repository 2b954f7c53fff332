"""Write the installed onnxruntime's CPU kernels of the default domain (opset 18 on) as JSON: op ->
type constraint -> dtypes, every version range merged. Run it with the oldest onnxruntime onnxport
supports (``.runtimes/ort-1.18.1/bin/python tests/runtimes/dump_kernels.py out.json``), then
``python -m onnxport.translate.legalize --oldest out.json`` keeps in ``_ort_kernels.py`` only the dtypes
that release has too. Needs onnxruntime alone (the old runtimes' environments hold nothing else)."""

from __future__ import annotations

import collections
import json
import sys

import onnxruntime
from onnxruntime.capi import _pybind_state

NAMES = {"bool": "BOOL", "int8": "INT8", "int16": "INT16", "int32": "INT32", "int64": "INT64", "uint8": "UINT8",
         "uint16": "UINT16", "uint32": "UINT32", "uint64": "UINT64", "float16": "FLOAT16", "bfloat16": "BFLOAT16",
         "float": "FLOAT", "double": "DOUBLE", "string": "STRING"}


def main(path: str) -> None:
    kernels: dict[str, dict[str, set[str]]] = collections.defaultdict(lambda: collections.defaultdict(set))
    for kernel in _pybind_state.get_all_opkernel_def():
        _, until = kernel.version_range
        if kernel.provider != "CPUExecutionProvider" or kernel.domain not in ("", "ai.onnx") or until < 18:
            continue
        for constraint, types in kernel.type_constraints.items():
            kernels[kernel.op_name][constraint] |= {NAMES[t[7:-1]] for t in types if t[7:-1] in NAMES}
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"onnxruntime": onnxruntime.__version__,
                   "kernels": {op: {c: sorted(t) for c, t in cs.items()} for op, cs in sorted(kernels.items())}},
                  f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main(sys.argv[1])
