"""Stage 5: run the ONNX model in onnxruntime and compare with eager PyTorch."""

from onnxport.verify.ahead import EagerAhead, eager_outputs
from onnxport.verify.branches import BranchCoverage, explore_branches
from onnxport.verify.budget import DEFAULT_BUDGET, Budget, check_budget
from onnxport.verify.child import Crashed, SessionProcess
from onnxport.verify.compare import OutputCheck, Verification, compare, tolerance
from onnxport.verify.checker import Checker, session_level
from onnxport.verify.session import OrtRunner
from onnxport.verify.stage import verify_export

__all__ = [
    "DEFAULT_BUDGET", "BranchCoverage", "EagerAhead", "Budget", "Checker", "Crashed", "OrtRunner", "OutputCheck",
    "SessionProcess", "Verification", "check_budget", "compare", "eager_outputs", "explore_branches",
    "session_level", "tolerance", "verify_export",
]
