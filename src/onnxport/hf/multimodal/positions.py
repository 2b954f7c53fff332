"""The ``position_ids`` a vision-language decoder takes, step by step, as transformers makes them.

Most decoders take one position per token, counted over the attention mask (``cumsum - 1``): the generation loop
makes those itself. The Qwen VL line and the families built like it (GLM-4V, PaddleOCR-VL, ERNIE-VL, ...) rotate
by three positions per token, ``[3, batch, length]`` (time, row, column: multimodal RoPE): an image token's come
from its place in its image's grid of merged patches, and the text after an image continues past the image's
largest. Their model computes them in ``get_rope_index`` from the prompt's ids, its tokens' modality
(``mm_token_type_ids``: 1 for an image token) and the images' grids (``image_grid_thw``), and keeps, per prompt,
the difference between the last position and the prompt's length (``rope_deltas``): each later token's three
positions are its count over the mask plus that difference.

:class:`RopeIndex` calls the model's own ``get_rope_index``, on an instance built on the meta device from the
folder's ``config.json`` (no weights: the method reads only the config and its arguments), so the positions are
the family's own, whatever its rule.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import torch

__all__ = ["RopeIndex", "rope_index_of"]

def rope_index_of(model: torch.nn.Module) -> Any:
    """The ``get_rope_index`` method of ``model`` or of a module in it; None for a model with one position per
    token."""
    for module in model.modules():
        method = getattr(module, "get_rope_index", None)
        if callable(method):
            return method
    return None


class RopeIndex:
    """Multimodal RoPE positions for a generation loop: :meth:`prompt` for the prompt's tokens, then the instance
    called with the mask so far and the count of new tokens for each later step."""

    def __init__(self, method: Any, image_token: int) -> None:
        self.method = method
        self.image_token = image_token
        self.deltas: np.ndarray | None = None

    @classmethod
    def of_config(cls, config: Any, model_class: Any, image_token: int) -> RopeIndex | None:
        """The positions of a model of ``config`` (a ``model_class`` built on the meta device); None when it has
        one position per token."""
        with torch.device("meta"):
            model = model_class._from_config(config)
        method = rope_index_of(model)
        return cls(method, image_token) if method is not None else None

    def prompt(self, input_ids: np.ndarray, attention_mask: np.ndarray, inputs: dict[str, Any]) -> np.ndarray:
        """The prompt's ``[3, batch, length]`` positions (``inputs``: what the processor gave besides)."""
        types = inputs.get("mm_token_type_ids")
        if types is None:
            types = (input_ids == self.image_token).astype(np.int64)
        given = {"input_ids": input_ids, "attention_mask": attention_mask, "mm_token_type_ids": types,
                 "image_grid_thw": inputs.get("image_grid_thw")}
        taken = inspect.signature(self.method).parameters
        arguments = {name: torch.as_tensor(np.asarray(value)) for name, value in given.items()
                     if value is not None and name in taken}
        with torch.no_grad():
            positions, deltas = self.method(**arguments)
        self.deltas = deltas.reshape(-1, 1).numpy().astype(np.int64)
        return positions.numpy().astype(np.int64)

    def __call__(self, mask: np.ndarray, new: int) -> np.ndarray:
        if self.deltas is None:
            raise RuntimeError("RopeIndex.prompt runs before the steps after the prompt")
        counted = np.where(mask == 0, 0, np.cumsum(mask, axis=-1) - 1)[:, -new:] + self.deltas
        return np.broadcast_to(counted, (3, *counted.shape)).copy()
