"""Stage 3: ExportedProgram -> onnx_ir.Model, through the registry of per-op translators."""

from onnxport.translate.builder import Ctx
from onnxport.translate.driver import Translated, translate, untranslated_ops
from onnxport.translate.registry import aten, lookup, register_translation, target_name

__all__ = ["Ctx", "Translated", "aten", "lookup", "register_translation", "target_name", "translate", "untranslated_ops"]
