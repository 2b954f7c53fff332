"""DPT-style fusion layers' residuals, resized in the graph for images of any size during a capture.

DPT's feature fusion (and the depth models that copy it: Depth Anything, Prompt Depth Anything, ZoeDepth, CHMv2,
TIPSv2's DPT head) adds a residual from the level above, resized first only where the sizes differ: ``if
hidden_state.shape != residual.shape: residual = interpolate(residual, size=hidden_state's)``. Under torch.export
that test is a guard on the image's sides (``(W // 8)`` even, where a level's stride-2 convolution rounds up): the
file keeps the example's branch, and an image whose side makes the levels differ (a ZoeDepth processor's 93 pixels)
fails in onnxruntime.

During the capture (:func:`fusion_residuals_resized`) each such layer gets its residual already resized to the
hidden state's size, by the same bilinear interpolation: at equal sizes it is the identity (each output pixel
samples its own place, weight 1), so the graph equals eager PyTorch at every size, and the layer's own test sees
equal sizes and makes no guard.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

__all__ = ["fusion_residuals_resized"]

_MODULES = tuple(f"transformers.models.{name}" for name in (
    "dpt.modeling_dpt", "depth_anything.modeling_depth_anything",
    "prompt_depth_anything.modeling_prompt_depth_anything", "zoedepth.modeling_zoedepth", "chmv2.modeling_chmv2",
    "tipsv2_dpt.modeling_tipsv2_dpt"))


def _resized(module: torch.nn.Module, args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
    """The layer's ``(hidden_state, residual)`` with the residual at the hidden state's height and width."""
    hidden = args[0] if args else kwargs.get("hidden_state")
    residual = args[1] if len(args) > 1 else kwargs.get("residual")
    if hidden is None or residual is None:
        return args, kwargs
    residual = torch.nn.functional.interpolate(residual, size=(hidden.shape[2], hidden.shape[3]), mode="bilinear",
                                               align_corners=False)
    if len(args) > 1:
        return (args[0], residual, *args[2:]), kwargs
    return args, {**kwargs, "residual": residual}


@contextlib.contextmanager
def fusion_residuals_resized(model: torch.nn.Module) -> Iterator[None]:
    """Inside the context, the DPT-style fusion layers ``model`` runs take their residuals resized in the graph
    (see the module's docstring); nothing changes for another model."""
    handles = [module.register_forward_pre_hook(_resized, with_kwargs=True) for module in model.modules()
               if type(module).__module__ in _MODULES and type(module).__name__.endswith("FeatureFusionLayer")]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
