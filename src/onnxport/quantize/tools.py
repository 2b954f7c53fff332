"""Helpers for onnxruntime's own quantization tools on exported files.

``quantize_static`` calibrates a range for every activation of the ops it quantizes, ``Add`` and ``Softmax``
among them. Attention written as MatMul and Softmax (the targets before ``onnxruntime>=1.24``, and other
exporters' files too) adds the mask to the scores: the sum spans the mask's lowest value as well as the scores,
and one int8 step of that range is wider than every real score, which then round to one value. Left in float,
the masked scores and the Softmax cost little; :func:`static_exclusions` names those nodes for
``quantize_static(..., nodes_to_exclude=...)``. The fused ``Attention`` of ``onnxruntime>=1.24`` keeps the mask
inside the op, and needs none.
"""

from __future__ import annotations

import os
from typing import Any

import onnx

from onnxport.errors import InvalidInputError

__all__ = ["static_exclusions"]

# Ops that apply a mask to attention scores before their Softmax (the mask added, or selected in).
_MASKING = ("Add", "Where", "Sub")


def static_exclusions(model: Any) -> list[str]:
    """The names of the nodes ``quantize_static`` should leave in float: every ``Softmax`` and the node that
    masks its input (an ``Add``, ``Where`` or ``Sub`` producing it). ``model`` is a path, an ``onnx.ModelProto``
    or an ``OnnxProgram``. Nodes without a name cannot be excluded by name and are skipped."""
    proto = _proto(model)
    producers = {out: node for node in proto.graph.node for out in node.output}
    names = []
    for node in proto.graph.node:
        if node.op_type != "Softmax":
            continue
        names.append(node.name)
        source = producers.get(node.input[0]) if node.input else None
        if source is not None and source.op_type in _MASKING:
            names.append(source.name)
    return [name for name in names if name]


def _proto(model: Any) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (str, os.PathLike)):
        try:
            return onnx.load(os.fspath(model), load_external_data=False)
        except Exception as exc:  # noqa: BLE001 - a missing file, or one that is not a model
            raise InvalidInputError(f"cannot read {os.fspath(model)} as an ONNX model: {type(exc).__name__}: {exc}",
                                    fix="pass the path of a saved .onnx file") from None
    proto = getattr(model, "model_proto", None)
    if proto is None:
        raise InvalidInputError(f"static_exclusions takes a path, an onnx.ModelProto or an OnnxProgram, not "
                                f"{type(model).__name__}", fix="pass the path the model was saved to")
    return proto
