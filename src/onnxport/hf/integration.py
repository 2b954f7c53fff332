"""transformers' hooks into capture (``onnxport.capture.integrations``), registered by ``onnxport.hf``.

Each hook does nothing until transformers is imported (it is looked up in ``sys.modules``, never imported
here) and nothing for a transformers major version these were not written for (:func:`cache.supported`).
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

from onnxport.capture.integrations import Integration
from onnxport.hf import cache, patches, signature
from onnxport.hf.blocks import DynamicCacheSlots

__all__ = ["TransformersIntegration"]


class TransformersIntegration(Integration):
    """KV caches as pytree nodes, capture-time settings, the cache argument's two names, a one-token decode
    step widened, ``"auto"`` specs and onnxruntime-genai's dim names for caches, block reuse's cache slots."""

    name = "transformers"

    def registered_types(self) -> contextlib.AbstractContextManager:
        return cache.registered()

    def patched(self, model: Any) -> contextlib.AbstractContextManager:
        return patches.patched(model)

    def argument_aliases(self, model: Any) -> dict[str, str]:
        return signature.argument_aliases(model) if cache.supported() else {}

    def widened_example(self, model: Any, args: tuple, kwargs: dict[str, Any], small: list[str]) -> Any:
        return patches.widened_decode_step(model, args, kwargs, small)

    def auto_spec(self, value: Any) -> Any:
        return cache.auto_spec(value)

    def conventional_dim_names(self, input_names: list[str]) -> list[dict[int, str]] | None:
        return cache.conventional_dim_names(input_names)

    def input_fix(self, kind: type) -> str | None:
        if not (kind.__module__.startswith("transformers.") and kind.__name__.endswith("Cache")):
            return None
        fix = (f"onnxport exports these transformers caches: {', '.join(cache.SUPPORTED)}; "
               "build one of them (a forward pass with use_cache=True returns a DynamicCache)")
        if not cache.supported():
            version = getattr(sys.modules.get("transformers"), "__version__", "?")
            fix = f"onnxport's cache support is written for transformers 5.x, and this is {version}: {fix}"
        return fix

    def cache_slots(self, value: Any) -> Any:
        return DynamicCacheSlots.of(value) if cache.supported() else None
