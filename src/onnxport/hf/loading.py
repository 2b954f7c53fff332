"""A transformers model loaded from a checkpoint's directory, as ``export_hf`` and its exporters of several models
(MusicGen, SpeechT5) load one: only its own files (``local_files_only``), with the config already read, and refused
with an onnxport error where transformers cannot read the files (a truncated download) or where the checkpoint lacks
weights of the class (transformers would initialise them at random, and the export would hold them)."""

from __future__ import annotations

from typing import Any

import torch

from onnxport.errors import InvalidInputError, OnnxportError

__all__ = ["load_pretrained"]


def load_pretrained(cls: Any, directory: str, config: Any, what: str, **built: Any) -> torch.nn.Module:
    """``cls.from_pretrained(directory, config=config, **built)`` in eval mode; ``what`` says in a refusal's fix what
    the directory should hold ("a model for text-classification (its head included)")."""
    try:
        model, info = cls.from_pretrained(directory, config=config, local_files_only=True, output_loading_info=True,
                                          **built)
    except OnnxportError:
        raise
    except Exception as exc:  # noqa: BLE001 - a file transformers or safetensors cannot read (truncated, ...)
        raise InvalidInputError(f"transformers cannot load {directory} as {cls.__name__}: {type(exc).__name__}: "
                                f"{exc}"[:600], fix=f"check that the directory holds {what}, and that its weight files "
                                "are whole (a download or copy cut short leaves them truncated)") from None
    missing = sorted(info.get("missing_keys") or ())
    if missing:
        raise InvalidInputError(
            f"the checkpoint lacks {len(missing)} weights of {type(model).__name__} "
            f"({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}): transformers would initialise them "
            f"at random", fix=f"check that the directory holds {what}")
    return model.eval()
