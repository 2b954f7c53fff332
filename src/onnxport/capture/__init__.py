"""Stage 1: model + example inputs -> torch.export.ExportedProgram."""

from onnxport.capture.export import Captured, capture, check_inputs, is_data_dependent

__all__ = ["Captured", "capture", "check_inputs", "is_data_dependent"]
