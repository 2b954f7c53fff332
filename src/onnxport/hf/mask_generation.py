"""``mask-generation``: SAM (Segment Anything) as two models, the split transformers.js loads (its ``SamModel``:
sessions ``vision_encoder`` and ``prompt_encoder_mask_decoder``) and onnxport's runner runs behind transformers'
mask-generation pipeline:

- ``vision_encoder``: ``pixel_values`` (the image processor's, padded to the model's square size; dynamic batch) ->
  ``image_embeddings`` and ``image_positional_embeddings`` (the positional embedding of the embeddings' grid, one a
  batch row, as SAM's forward repeats it);
- ``prompt_encoder_mask_decoder``: the two embeddings, ``input_points`` (``[batch, point_batch, points, 2]``, in the
  resized image's pixels) and ``input_labels`` (``[batch, point_batch, points]``: 1 a point on the object, 0 off it,
  -1 background, -10 padding) -> ``iou_scores`` ``[batch, point_batch, 3]`` and ``pred_masks`` ``[batch,
  point_batch, 3, 4 * grid, 4 * grid]`` (low-resolution masks, three per prompt: ``multimask_output``). Batch, prompts
  and points per prompt are dynamic.

Boxes and masks as prompts are not taken (transformers.js feeds them where given; its pipeline-less users give
points). The image embeddings of one image serve any number of prompts, as SAM's users run it.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

from onnxport.errors import InvalidInputError
from onnxport.hf.examples import TASKS
from onnxport.hf.pipeline_model import PipelineModel

__all__ = ["PIECES", "SamOnnxModel", "check_mask_generation", "export_mask_generation"]

PIECES = TASKS["mask-generation"].pieces  # the file stems, in the order they run
_TYPES = ("sam",)  # the types whose forward this split computes
_LATER = {"sam_hq": "its mask decoder also reads the vision encoder's intermediate embeddings",
          "sam2": "its image encoder gives embeddings at three scales", "sam2_video": "a video tracker",
          "sam3_tracker": "its image encoder gives embeddings at three scales", "sam3_video": "a video tracker",
          "edgetam": "its image encoder gives embeddings at three scales", "edgetam_video": "a video tracker"}
BATCH = torch.export.Dim("batch_size")


def check_mask_generation(config: Any) -> None:
    """Refuse, before it is loaded, a mask-generation model this split does not compute."""
    if config.model_type not in _TYPES:
        why = _LATER.get(config.model_type, "it is not a SAM model")
        raise InvalidInputError(f"onnxport does not export {config.model_type} models for mask-generation yet: {why}",
                                fix="export a SAM checkpoint (model_type sam), or the model with onnxport.export")


class VisionEncoder(torch.nn.Module):
    """SAM's vision encoder and the positional embedding of its grid (see the module)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor) -> dict[str, torch.Tensor]:
        embeddings = self.model.vision_encoder(pixel_values).last_hidden_state
        positions = self.model.get_image_wide_positional_embeddings().repeat(pixel_values.shape[0], 1, 1, 1)
        return {"image_embeddings": embeddings, "image_positional_embeddings": positions}


class PromptEncoderMaskDecoder(torch.nn.Module):
    """SAM's prompt encoder on points and their labels, and its mask decoder on the image's embeddings."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, image_embeddings: torch.Tensor, image_positional_embeddings: torch.Tensor,
                input_points: torch.Tensor, input_labels: torch.Tensor) -> dict[str, torch.Tensor]:
        sparse, dense = self.model.prompt_encoder(input_points=input_points, input_labels=input_labels,
                                                  input_boxes=None, input_masks=None)
        masks, scores = self.model.mask_decoder(image_embeddings=image_embeddings,
                                                image_positional_embeddings=image_positional_embeddings,
                                                sparse_prompt_embeddings=sparse, dense_prompt_embeddings=dense,
                                                multimask_output=True)[:2]
        return {"iou_scores": scores, "pred_masks": masks}


def examples(model: torch.nn.Module) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Example inputs of the two models: two images, and for each two prompts of three points (one a padding point,
    one off the object, as the processor pads and users label them)."""
    vision = model.config.vision_config
    size = vision.image_size
    generator = torch.Generator().manual_seed(0)
    pixels = {"pixel_values": torch.randn(2, vision.num_channels, size, size, generator=generator)}
    with torch.no_grad():
        embedded = VisionEncoder(model)(**pixels)
    points = torch.rand(2, 2, 3, 2, generator=generator) * size
    labels = torch.tensor([[1, 0, -10], [1, 1, 1]]).expand(2, 2, 3).contiguous()
    return pixels, {**embedded, "input_points": points, "input_labels": labels}


def export_mask_generation(model: torch.nn.Module, **options: Any) -> dict[str, Any]:
    """The two models of SAM ``model`` (:data:`PIECES` -> ``OnnxProgram``), each exported and verified with
    ``onnxport.export`` and ``options``."""
    from onnxport.api import export

    model = model.eval()
    pixels, prompts = examples(model)
    grid = {0: BATCH}
    prompt_shapes = {"image_embeddings": grid, "image_positional_embeddings": grid,
                     "input_points": {0: BATCH, 1: torch.export.Dim("point_batch_size"),
                                      2: torch.export.Dim("num_points")},
                     "input_labels": {0: BATCH, 1: torch.export.Dim("point_batch_size"),
                                      2: torch.export.Dim("num_points")}}
    return {PIECES[0]: export(VisionEncoder(model), (), pixels, dynamic_shapes={"pixel_values": grid}, **options),
            PIECES[1]: export(PromptEncoderMaskDecoder(model), (), prompts, dynamic_shapes=prompt_shapes, **options)}


class SamOnnxModel(PipelineModel):
    """The two models in ``folder``, called as transformers' mask-generation pipeline calls a ``SamModel``:
    ``get_image_embeddings(pixel_values)``, then the model on ``image_embeddings``, ``input_points`` and
    ``input_labels`` -> ``iou_scores`` and ``pred_masks`` (torch tensors). ``SamOnnxModel.of`` names its class
    ``SamModel``, which is what the pipeline checks a model by."""

    main_input_name = "pixel_values"
    input_modalities = ("image",)

    def __init__(self, folder: str, config: Any, providers: Any = None, session_options: Any = None) -> None:
        import onnxruntime as ort

        self.folder = folder
        self.name_or_path = folder
        self.config = config
        self.sessions = {}
        for stem in PIECES:
            path = os.path.join(folder, f"{stem}.onnx")
            if not os.path.isfile(path):
                raise InvalidInputError(f"{folder} has no {stem}.onnx", fix="export the model again with "
                                        "export_hf(directory, 'mask-generation', folder)")
            self.sessions[stem] = ort.InferenceSession(path, sess_options=session_options,
                                                       providers=list(providers or ["CPUExecutionProvider"]))
        self._positions: np.ndarray | None = None

    @classmethod
    def of(cls, folder: str, **options: Any) -> SamOnnxModel:
        import transformers

        config = transformers.AutoConfig.from_pretrained(folder, local_files_only=True)
        return cls.named("SamModel")(folder, config, **options)

    def __repr__(self) -> str:
        return f"SamOnnxModel({self.folder!r})"

    def get_image_embeddings(self, pixel_values: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        """The vision encoder's ``image_embeddings`` of ``pixel_values``."""
        pixels = pixel_values.detach().cpu().numpy().astype(np.float32)
        embeddings, positions = self.sessions[PIECES[0]].run(None, {"pixel_values": pixels})
        self._positions = positions[:1]  # one grid's, the same for every image
        return torch.from_numpy(embeddings)

    def __call__(self, image_embeddings: torch.Tensor | None = None, input_points: torch.Tensor | None = None,
                 input_labels: torch.Tensor | None = None, pixel_values: torch.Tensor | None = None,
                 multimask_output: bool = True, **kwargs: Any) -> dict[str, torch.Tensor]:
        from transformers.models.sam.modeling_sam import SamImageSegmentationOutput

        asked = sorted(k for k, v in kwargs.items() if v is not None)
        if asked or not multimask_output:
            what = ", ".join(asked) or "multimask_output=False"
            raise InvalidInputError(f"the exported SAM takes points and their labels, not {what}",
                                    fix="prompt it with input_points and input_labels (three masks a prompt)")
        if image_embeddings is None:
            if pixel_values is None:
                raise InvalidInputError("SAM needs pixel_values or image_embeddings", fix="pass the image's")
            image_embeddings = self.get_image_embeddings(pixel_values)
        if input_points is None:
            raise InvalidInputError("the exported SAM needs input_points", fix="pass the points of the prompt")
        if input_labels is None:
            input_labels = torch.ones(input_points.shape[:-1], dtype=torch.int64)
        if self._positions is None:  # the positional embedding is the encoder's whatever the image
            size = self.config.vision_config.image_size
            self.get_image_embeddings(torch.zeros(1, self.config.vision_config.num_channels, size, size))
        batch = image_embeddings.shape[0]
        scores, masks = self.sessions[PIECES[1]].run(None, {
            "image_embeddings": image_embeddings.detach().cpu().numpy().astype(np.float32),
            "image_positional_embeddings": np.repeat(self._positions, batch, axis=0),
            "input_points": input_points.detach().cpu().numpy().astype(np.float32),
            "input_labels": input_labels.detach().cpu().numpy().astype(np.int64)})
        return SamImageSegmentationOutput(iou_scores=torch.from_numpy(scores), pred_masks=torch.from_numpy(masks))
