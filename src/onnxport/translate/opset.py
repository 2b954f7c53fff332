"""Which ONNX opsets this machine can check.

The opset of a file comes from its target (``onnxport.targets``), the same on every machine whatever
onnxruntime is installed; ``newest_opset`` bounds what ``opset=`` may ask for here, since verification runs
the file in the installed onnxruntime.
"""

from __future__ import annotations

import functools

import onnx

from onnxport.targets import DEFAULT_TARGET, MIN_OPSET, parse

__all__ = ["DEFAULT_OPSET", "MIN_OPSET", "default_opset", "newest_opset"]

DEFAULT_OPSET = parse(DEFAULT_TARGET).opset


def default_opset() -> int:
    """The opset used when neither opset nor target is given: the default target's, or the newest here."""
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
            ir_version=onnx.helper.find_min_ir_version_for([onnx.helper.make_opsetid("", opset)], True),
        )
        try:
            ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        except Exception:  # noqa: BLE001 - any refusal means "not this opset"
            continue
        return opset
    return MIN_OPSET
