"""The model metadata entries onnxport writes into a file and reads back: their keys and typed readers, in one
place. The translation writes the lists that tell verification and ``OnnxProgram`` how to read the model's
inputs and outputs; the export writes its target; ``export_hf`` the task of each model it writes. A leaf:
it imports nothing of onnxport's."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["COMPLEX_INPUTS", "COMPLEX_OUTPUTS", "DIM_RANGES", "FLOAT64_AS_FLOAT32", "RANDOM_DRAWS", "RANDOM_OUTPUTS",
           "TARGET", "TASK", "names", "text", "write_names"]

TARGET = "onnxport.target"  # the target the file was written for ("onnxruntime>=1.18"), see onnxport.targets
TASK = "onnxport.hf.task"  # the task of each model export_hf writes ("text-generation"), see onnxport.hf.tasks
RANDOM_OUTPUTS = "onnxport.random_outputs"  # JSON list: the outputs random ops feed (compared by shape and dtype)
# JSON list: the values of the graph that are torch's standard draws (randn, rand and their _like forms), in the
# order the program draws them; verification feeds eager PyTorch's own draws there (see onnxport.verify.draws)
RANDOM_DRAWS = "onnxport.random_draws"
# JSON list: the op types whose float64 nodes compute in float32 (no onnxruntime kernel); verification then
# holds float64 outputs to float32's tolerances
FLOAT64_AS_FLOAT32 = "onnxport.float64_as_float32"
# JSON lists: the inputs and outputs that are complex tensors in PyTorch, each a real tensor in the graph with a
# trailing dim of 2 (real, imaginary part)
COMPLEX_INPUTS = "onnxport.complex_inputs"
COMPLEX_OUTPUTS = "onnxport.complex_outputs"
DIM_RANGES = "onnxport.dim_ranges"  # the range torch.export gave each symbolic dim, as text


def text(model: Any, key: str) -> str | None:
    """The entry ``key`` of an ``onnx_ir.Model`` (its ``metadata_props`` dict) or an ``onnx.ModelProto`` (its list
    of entries); None where there is none."""
    props = model.metadata_props
    if isinstance(props, dict):
        return props.get(key)
    return next((p.value for p in props if p.key == key), None)


def names(model: Any, key: str) -> list[str]:
    """The JSON list of names the entry ``key`` holds; empty where there is none."""
    found = text(model, key)
    return json.loads(found) if found else []


def write_names(model: Any, key: str, values: list[str]) -> None:
    """Write ``values`` as the JSON list of the entry ``key`` of an ``onnx_ir.Model``."""
    model.metadata_props[key] = json.dumps(values)
