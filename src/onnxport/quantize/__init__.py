"""Quantization of exported models.

- ``weights``: weight-only int4/int8 quantization of linear layers (``MatMulNBits`` or blocked
  ``DequantizeLinear``) and embedding tables, rounded to nearest or with GPTQ (``gptq``).
- ``activations``: int8 activations too, dynamic (ranges at run time) or static (ranges measured on a
  calibration set by ``calibrate``), in the patterns onnxruntime fuses into its integer kernels.
- ``layers``: the linear layers every quantizer finds, in each form onnxport writes.
- ``options``: ``QuantizeOptions``, the options every entry point reads.
- ``tools``: helpers for onnxruntime's own quantization tools (``static_exclusions`` for ``quantize_static``).
"""

from onnxport.quantize.activations import (
    ActivationQuantizeResult,
    quantize_dynamic_model,
    quantize_static_model,
)
from onnxport.quantize.tools import static_exclusions
from onnxport.quantize.kernels import FORMS, check_options, dequantized
from onnxport.quantize.options import METHODS, MODES, QuantizeOptions, check_kinds
from onnxport.quantize.weights import (
    QuantizedCheck,
    QuantizeResult,
    TOLERANCES,
    measure,
    quantize_model,
    tolerance_for,
)

__all__ = ["FORMS", "METHODS", "MODES", "ActivationQuantizeResult", "QuantizeOptions", "QuantizeResult",
           "QuantizedCheck", "check_kinds", "check_options", "dequantized", "measure", "quantize_dynamic_model",
           "quantize_model", "quantize_static_model", "static_exclusions", "TOLERANCES", "tolerance_for"]
