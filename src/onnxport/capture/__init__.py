"""Stage 1: model + example inputs -> torch.export.ExportedProgram."""

from onnxport.capture.dynamic import infer_dynamic_shapes, output_dynamic_axes
from onnxport.capture.strategies import Captured, capture, check_inputs, is_data_dependent, resolve_dynamic_shapes
from onnxport.capture.integrations import argument_aliases
from onnxport.capture.integrations import registered_types as integration_types

__all__ = [
    "Captured",
    "argument_aliases",
    "capture",
    "check_inputs",
    "infer_dynamic_shapes",
    "integration_types",
    "is_data_dependent",
    "output_dynamic_axes",
    "resolve_dynamic_shapes",
]
