"""The image tasks of ``export_hf_census.py``: the image processor saved beside a tiny checkpoint, and the batch of
images its eager run and the exported model are both fed.

A user's image checkpoint has a ``preprocessor_config.json``; export-hf reads it (``hf/examples.py``: an image
processor that sizes images each to a size of its own makes height and width dynamic, else the config's
``image_size`` wins, then the processor's size). The census saves the type's image processor
(``IMAGE_PROCESSOR_MAPPING_NAMES``, the PIL one: torchvision is not installed here) with its defaults, its sizes
shrunk to the tiny config's ``image_size`` (or ``SIDE``): ``height``/``width`` and ``crop_size`` to it,
``shortest_edge`` to it and ``longest_edge`` to twice it (a DETR processor keeps sizing images each its own way).
A type with no such processor gets none (the row says why), and export-hf falls back to the config's size.
"""

from __future__ import annotations

import inspect
import os
from typing import Any

from export_hf_census_common import first_line

SIDE = 64  # the side of the images of a config that names no image_size
BATCH = 2


def _vision(config: Any) -> Any:
    return getattr(config, "vision_config", None) or config


def config_size(config: Any) -> tuple[int, int] | None:
    """(height, width) of the config's ``image_size`` (a vision config's), as export-hf reads it; None if unset."""
    side = getattr(_vision(config), "image_size", None)
    if isinstance(side, (list, tuple)) and side:
        side = (side[0], side[-1])
    elif isinstance(side, int):
        side = (side, side)
    else:
        return None
    return side if all(isinstance(n, int) and n > 0 for n in side) else None


def _shrunk(size: Any, height: int, width: int) -> Any:
    if not isinstance(size, dict):
        return size
    size = {k: v for k, v in size.items() if v is not None}
    if "height" in size or "width" in size:
        size["height"], size["width"] = height, width
    if "shortest_edge" in size:
        size["shortest_edge"] = min(height, width)
        if "longest_edge" in size:
            size["longest_edge"] = 2 * max(height, width)
    elif "longest_edge" in size:
        size["longest_edge"] = max(height, width)
    for key in ("max_height", "max_width"):
        if key in size:
            size[key] = 2 * (height if key == "max_height" else width)
    return size


def write_processor(directory: str, model_type: str, config: Any) -> dict[str, Any]:
    """Save the type's image processor, its sizes shrunk, into ``directory``; what was saved (or why none)."""
    import transformers
    from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING_NAMES
    from transformers.utils import is_torchvision_available

    names = IMAGE_PROCESSOR_MAPPING_NAMES.get(model_type) or {}
    if isinstance(names, dict):  # a PIL processor first; a torchvision one where torchvision is installed (the
        # image-text census's environment, make bench-image-text-census, has it) and the type has no other
        vision = names.get("torchvision") if is_torchvision_available() else None
        name = names.get("pil") or names.get("slow") or vision
        if name is None and names:
            return {"saved": None, "why": f"{', '.join(map(str, names.values()))} needs torchvision (not installed)"}
    else:
        name = next((n for n in (names if isinstance(names, (list, tuple)) else [names]) if n), None)
    if name is None:
        return {"saved": None, "why": "transformers names no image processor for the type"}
    height, width = config_size(config) or (SIDE, SIDE)
    try:
        cls = getattr(transformers, name)
        processor, changes = cls(), {}
        settings = processor.to_dict()
        for key in ("size", "crop_size"):
            value = settings.get(key)
            new = _shrunk(value, height, width)
            if new != value:
                changes[key] = new
        if changes:
            processor = cls(**changes)
        processor.save_pretrained(directory)
    except Exception as exc:  # noqa: BLE001 - the export then runs without one, as for a type that has none
        with_file = os.path.join(directory, "preprocessor_config.json")
        if os.path.exists(with_file):
            os.unlink(with_file)
        return {"saved": None, "why": f"{name}: {first_line(exc)[:200]}"}
    return {"saved": name, **changes}


def pixel_inputs(model: Any, config: Any, directory: str) -> dict[str, Any]:
    """A random batch of ``BATCH`` images (numpy) of the size export-hf exports for: the config's ``image_size``,
    else what the saved processor makes of a square image of ``SIDE`` (``SIDE`` when it has none), else 224 as
    export-hf; named as the forward takes them (``pixel_values``, Perceiver's ``inputs``), with an all-ones
    ``pixel_mask`` where the forward takes one."""
    import numpy as np

    size = config_size(config)
    if size is None and os.path.isfile(os.path.join(directory, "preprocessor_config.json")):
        try:
            import transformers

            processor = transformers.AutoImageProcessor.from_pretrained(directory, local_files_only=True)
            image = np.full((SIDE, SIDE, 3), 128, dtype=np.uint8)
            size = tuple(int(n) for n in processor(image, return_tensors="np")["pixel_values"].shape[-2:])
        except Exception:  # noqa: BLE001 - as export-hf: a processor that does not load is no processor
            size = None
    height, width = size or (224, 224)
    channels = getattr(_vision(config), "num_channels", None)
    channels = channels if isinstance(channels, int) and channels > 0 else 3
    params = inspect.signature(model.forward).parameters
    name = "pixel_values" if "pixel_values" in params or "inputs" not in params else "inputs"
    rng = np.random.default_rng(0)
    feed = {name: rng.standard_normal((BATCH, channels, height, width)).astype(np.float32)}
    if "pixel_mask" in params:
        feed["pixel_mask"] = np.ones((BATCH, height, width), dtype=np.int64)
    return feed
