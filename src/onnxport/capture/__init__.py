"""Stage 1: model + example inputs -> torch.export.ExportedProgram."""

from onnxport.capture._transformers_cache import registered as transformers_caches
from onnxport.capture.dynamic import infer_dynamic_shapes, output_dynamic_axes
from onnxport.capture.export import Captured, capture, check_inputs, is_data_dependent, resolve_dynamic_shapes

__all__ = [
    "Captured",
    "capture",
    "check_inputs",
    "infer_dynamic_shapes",
    "is_data_dependent",
    "output_dynamic_axes",
    "resolve_dynamic_shapes",
    "transformers_caches",
]
