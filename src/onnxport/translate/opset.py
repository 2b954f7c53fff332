"""Which ONNX opset to emit: the newest that both onnx and the installed onnxruntime support."""

from __future__ import annotations

import functools

import onnx

__all__ = ["MIN_OPSET", "default_opset"]

MIN_OPSET = 18


@functools.lru_cache(maxsize=1)
def default_opset() -> int:
    """Probe onnxruntime with a one-node model per opset, newest first (a few ms, once per process)."""
    import onnxruntime as ort

    newest = onnx.defs.onnx_opset_version()
    options = ort.SessionOptions()
    options.log_severity_level = 4
    for opset in range(newest, MIN_OPSET - 1, -1):
        model = onnx.helper.make_model(
            onnx.helper.make_graph(
                [onnx.helper.make_node("Identity", ["x"], ["y"])],
                "probe",
                [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
                [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])],
            ),
            opset_imports=[onnx.helper.make_opsetid("", opset)],
            ir_version=10,
        )
        try:
            ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        except Exception:  # noqa: BLE001 - any refusal means "not this opset"
            continue
        return opset
    return MIN_OPSET
