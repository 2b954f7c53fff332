"""Quantization of exported models.

- ``weights``: weight-only int4/int8 quantization of linear layers (``MatMulNBits`` or blocked
  ``DequantizeLinear``).
"""

from onnxport.quantize.weights import (
    FORMS,
    QuantizedCheck,
    QuantizeResult,
    check_options,
    dequantized,
    measure,
    quantize_model,
)

__all__ = ["FORMS", "QuantizeResult", "QuantizedCheck", "check_options", "dequantized", "measure", "quantize_model"]
