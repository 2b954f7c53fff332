"""onnxport: export PyTorch models to ONNX through torch.export and a translator of its own."""

from torch.export import Dim

from onnxport import versions as _versions
from onnxport.versions import __version__ as __version__

_versions.check_torch()

from onnxport.api import export, export_each, unsupported_ops
from onnxport.capture.diagnose import Diagnosis, diagnose
from onnxport.capture.dynamic import infer_dynamic_shapes
from onnxport.errors import (
    CaptureError,
    InvalidInputError,
    OnnxportError,
    TranslationError,
    UnsupportedOpError,
    VerificationError,
)
from onnxport.hf import Seq2SeqPrograms, export_hf, export_seq2seq, generate, generate_seq2seq
from onnxport.program import OnnxProgram
from onnxport.quantize.options import QuantizeOptions
from onnxport.report import Report
from onnxport.translate.registry import register_translation

__all__ = [
    "CaptureError",
    "Diagnosis",
    "Dim",
    "InvalidInputError",
    "OnnxProgram",
    "OnnxportError",
    "QuantizeOptions",
    "Report",
    "Seq2SeqPrograms",
    "TranslationError",
    "UnsupportedOpError",
    "VerificationError",
    "diagnose",
    "export",
    "export_each",
    "export_hf",
    "export_seq2seq",
    "generate",
    "generate_seq2seq",
    "infer_dynamic_shapes",
    "register_translation",
    "unsupported_ops",
]
