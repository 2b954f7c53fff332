"""Weights exported without being loaded: the model is built on the meta device, capture sees the
safetensors files memory-mapped (never read), and ``OnnxProgram.save`` copies each tensor's bytes from
them into the model's data file (``model.onnx.<digest>.data``)."""

from onnxport.weights.bind import Binding, bind
from onnxport.weights.source import Derived, Weights

__all__ = ["Binding", "Derived", "Weights", "bind"]
