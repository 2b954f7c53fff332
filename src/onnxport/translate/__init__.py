"""Stage 3: ExportedProgram -> onnx_ir.Model, through the registry of per-op translators."""

from onnxport.translate.builder import Ctx
from onnxport.translate.driver import Translated, name_output_dims, translate, untranslated_ops
from onnxport.translate.registry import aten, lookup, register_translation, target_name

__all__ = ["Ctx", "Translated", "aten", "name_output_dims", "lookup", "register_translation", "target_name", "translate", "untranslated_ops"]
