"""Image-to-image (super-resolution) as a pipeline: transformers 5 has none, so ``onnxport.hf.pipeline`` gives this
one for an ``image-to-image`` folder (Swin2SR's), as transformers 4's pipeline and transformers.js's compute it.

``ImageToImagePipeline(model, image_processor)`` takes a transformers ``*ForImageSuperResolution`` model or
``onnxport.hf.pipeline``'s onnxruntime one, and is called on an image (PIL, a path) or a list of them: each goes
through the image processor alone (Swin2SR's pads it to a multiple of the window), then the model, and its
``reconstruction`` comes back as a PIL image, clamped to [0, 1] and rounded to 8 bits (the padding, upscaled,
kept: transformers 4 and transformers.js keep it too).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from onnxport.errors import InvalidInputError

__all__ = ["ImageToImagePipeline"]


class ImageToImagePipeline:
    """``pipeline(image)`` -> a PIL image; ``pipeline([image, ...])`` -> a list of them."""

    def __init__(self, model: Any, image_processor: Any) -> None:
        self.model = model
        self.image_processor = image_processor

    def __call__(self, images: Any, **kwargs: Any) -> Any:
        if kwargs:
            raise InvalidInputError(f"image-to-image takes no {', '.join(sorted(kwargs))}", fix="pass images alone")
        single = not isinstance(images, (list, tuple))
        results = [self._one(image) for image in ([images] if single else images)]
        return results[0] if single else results

    def _one(self, image: Any) -> Any:
        from PIL import Image
        from transformers.image_utils import load_image

        inputs = self.image_processor(load_image(image), return_tensors="pt")
        with torch.no_grad():
            reconstruction = self.model(pixel_values=inputs["pixel_values"]).reconstruction
        output = reconstruction[0].float().clamp(0, 1).numpy()
        return Image.fromarray((np.moveaxis(output, 0, -1) * 255.0).round().astype(np.uint8))
