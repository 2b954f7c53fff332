"""Stage 4: clean the ONNX graph before it is saved or run."""

from onnxport.optimize.pipeline import default_passes, optimize

__all__ = ["default_passes", "optimize"]
