"""What onnxport changes in transformers' models while torch.export captures them, and only then.

Written for transformers 5.x. Mixture-of-experts layers dispatch on ``config._experts_implementation``;
the default ``"grouped_mm"`` runs, on CPU, an opaque custom op (``transformers::grouped_mm_fallback``)
fed by ``torch.histc``, which no ONNX runtime has. ``"batched_mm"`` computes the same with gathers and
batched matmuls, which translate to plain ONNX. The switch is made on the model's configs for the
duration of the capture and undone on every path; the user's model is left as it was.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

import torch

from onnxport.capture import _transformers_cache

__all__ = ["patched"]

_EXPORTABLE_EXPERTS = "batched_mm"
_OPAQUE_EXPERTS = ("grouped_mm",)


@contextlib.contextmanager
def patched(model: torch.nn.Module) -> Iterator[None]:
    """Capture-friendly settings on ``model``'s transformers configs, restored on exit."""
    saved = []
    if "transformers" in sys.modules and _supported(sys.modules["transformers"].__version__):
        seen = set()
        for module in model.modules():
            config = getattr(module, "config", None)
            if config is None or id(config) in seen:
                continue
            seen.add(id(config))
            if getattr(config, "_experts_implementation", None) in _OPAQUE_EXPERTS:
                saved.append((config, config._experts_implementation))
                config._experts_implementation = _EXPORTABLE_EXPERTS
    try:
        with _transformers_cache.mask_spans_cache(model):
            yield
    finally:
        for config, value in saved:
            config._experts_implementation = value


def _supported(version: str) -> bool:
    major = version.split(".", 1)[0]
    return major.isdigit() and int(major) >= 5
