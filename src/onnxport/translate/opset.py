"""Which ONNX opset to emit.

The default is fixed, so the same call gives the same file on every machine, whatever onnxruntime is
installed: opset 23 is the newest that current onnxruntime (1.23 and later, and onnxruntime-web of the
same releases) and TensorRT (11.x parses up to 25) all load, and it is the first with
RMSNormalization, Attention and RotaryEmbedding. ``opset=`` goes from 18 up to the newest that both
the installed onnx and onnxruntime support.
"""

from __future__ import annotations

import functools

import onnx

__all__ = ["DEFAULT_OPSET", "MIN_OPSET", "default_opset", "newest_opset"]

MIN_OPSET = 18
DEFAULT_OPSET = 23


def default_opset() -> int:
    """The opset used when none is given: ``DEFAULT_OPSET``, or the newest here if that is older."""
    return min(DEFAULT_OPSET, newest_opset())


@functools.lru_cache(maxsize=1)
def newest_opset() -> int:
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
