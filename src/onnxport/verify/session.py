"""An onnxruntime session that takes and returns torch tensors (bfloat16 included)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence

import numpy as np
import onnx_ir as ir
import torch

__all__ = ["OrtRunner", "initializer_bytes"]

_PROTOBUF_LIMIT = 2**31 - 1


class OrtRunner:
    """Owns one ``onnxruntime.InferenceSession`` for an ``ir.Model``."""

    def __init__(self, model: ir.Model, *, threads: int | None = None, model_bytes: bytes | None = None):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 3
        if threads is not None:
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
        providers = ["CPUExecutionProvider"]
        if model_bytes is None and initializer_bytes(model) < _PROTOBUF_LIMIT // 2:
            model_bytes = ir.serde.serialize_model(model).SerializeToString()
        if model_bytes is not None:
            self.session = ort.InferenceSession(model_bytes, options, providers=providers)
        else:
            with tempfile.TemporaryDirectory(prefix="onnxport-") as tmp:
                path = os.path.join(tmp, "model.onnx")
                ir.save(ir.Model(model.graph, ir_version=model.ir_version), path, external_data="model.onnx.data")
                self.session = ort.InferenceSession(path, options, providers=providers)
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]
        # numpy has no bfloat16: such outputs come back as OrtValues, read through DLPack.
        self._bfloat16_outputs = any(o.type == "tensor(bfloat16)" for o in self.session.get_outputs())

    def run(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Run on torch tensors (one per ONNX input, in order); return torch tensors."""
        import onnxruntime as ort

        if len(inputs) != len(self.input_names):
            raise ValueError(f"the ONNX model takes {len(self.input_names)} inputs, got {len(inputs)}")
        if not self._bfloat16_outputs and not any(t.dtype == torch.bfloat16 for t in inputs):
            feeds = {name: _to_numpy(t) for name, t in zip(self.input_names, inputs)}
            outputs = self.session.run(None, feeds)
            return [torch.from_numpy(np.asarray(o)) if isinstance(o, np.ndarray) else torch.tensor(o) for o in outputs]
        feeds_ov = {name: _to_ortvalue(ort, t) for name, t in zip(self.input_names, inputs)}
        return [_from_ortvalue(o) for o in self.session.run_with_ort_values(None, feeds_ov)]


def initializer_bytes(model: ir.Model) -> int:
    """Bytes held by the model's initializers (what decides between one file and external data)."""
    return sum(v.const_value.nbytes for v in model.graph.initializers.values() if v.const_value is not None)


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    if not isinstance(t, torch.Tensor):
        return np.asarray(t)
    return t.detach().cpu().contiguous().numpy()


def _to_ortvalue(ort: object, t: torch.Tensor) -> object:
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(t.view(torch.uint16).numpy(), int(ir.DataType.BFLOAT16))
    return ort.OrtValue.ortvalue_from_numpy(t.numpy())


def _from_ortvalue(value: object) -> torch.Tensor:
    if value.data_type() == "tensor(bfloat16)":
        return torch.from_dlpack(value)
    return torch.from_numpy(value.numpy())
