"""Stage 5: run the ONNX model in onnxruntime and compare with eager PyTorch."""

from onnxport.verify.branches import BranchCoverage, explore_branches
from onnxport.verify.compare import OutputCheck, Verification, compare, tolerance
from onnxport.verify.run import eager_outputs, verify_program
from onnxport.verify.session import OrtRunner
from onnxport.verify.stage import verify_export

__all__ = ["BranchCoverage", "OrtRunner", "explore_branches", "OutputCheck", "Verification", "compare", "eager_outputs", "tolerance", "verify_export", "verify_program"]
