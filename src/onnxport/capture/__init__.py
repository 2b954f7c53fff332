"""Stage 1: model + example inputs -> torch.export.ExportedProgram."""

from onnxport.capture.export import capture, check_inputs

__all__ = ["capture", "check_inputs"]
