"""The base of the models onnxport runs in onnxruntime behind transformers' pipelines (``onnxport.hf.runner``)."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["PipelineModel"]


class PipelineModel:
    """What transformers' pipelines read of a model besides calling it, for the models onnxport runs in onnxruntime
    (``runner.OnnxRuntimeModel``, ``image_to_text.EncodedGenerator``, ``mask_generation.SamOnnxModel``): its tensors on
    the CPU (onnxruntime's providers place the model), nothing to move or switch to eval, no ``generate``."""

    device = torch.device("cpu")
    dtype = torch.float32

    def to(self, *args: Any, **kwargs: Any) -> PipelineModel:
        return self

    def eval(self) -> PipelineModel:
        return self

    def can_generate(self) -> bool:
        return False

    @classmethod
    def named(cls, name: str) -> type:
        """A subclass called ``name``: pipelines check a model by its class's name (``BertForMaskedLM``)."""
        return type(name, (cls,), {"__module__": cls.__module__, "__qualname__": f"{cls.__name__}.{name}"})
