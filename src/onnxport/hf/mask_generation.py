"""``mask-generation``: SAM (Segment Anything) and SAM 2 as two models, the split transformers.js loads (its
``SamModel``, ``Sam2Model`` and ``Sam3TrackerModel``: sessions ``vision_encoder`` and ``prompt_encoder_mask_decoder``)
and onnxport's runner runs behind transformers' mask-generation pipeline:

- ``vision_encoder``: ``pixel_values`` (the image processor's, of the model's square size; dynamic batch) -> the
  image's embeddings (:func:`embedding_names`). SAM's: ``image_embeddings`` and ``image_positional_embeddings``
  (the positional embedding of the embeddings' grid, one a batch row, as SAM's forward repeats it). SAM 2's (and
  SAM 3 tracker's, the same forward): ``image_embeddings.0``, ``.1``, ``.2``, one a scale, the finest first, as its
  ``get_image_embeddings`` gives them (the two finer ones through the mask decoder's ``conv_s0`` and ``conv_s1``,
  the coarsest with the no-memory embedding added); its positional embedding is a constant of the decoder.
- ``prompt_encoder_mask_decoder``: the embeddings, ``input_points`` (``[batch, point_batch, points, 2]``, in the
  resized image's pixels) and ``input_labels`` (``[batch, point_batch, points]``: 1 a point on the object, 0 off it,
  -1 background, -10 padding) -> ``iou_scores`` ``[batch, point_batch, 3]`` and ``pred_masks`` ``[batch,
  point_batch, 3, 4 * grid, 4 * grid]`` (low-resolution masks, three per prompt: ``multimask_output``); SAM 2's
  also ``object_score_logits`` ``[batch, point_batch, 1]``. Batch, prompts and points per prompt are dynamic.

Boxes and masks as prompts are not taken (transformers.js feeds them where given, picking SAM 2's by the session's
input names; its pipeline-less users give points). The image embeddings of one image serve any number of prompts, as
SAM's users run it.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

from onnxport.errors import InvalidInputError
from onnxport.hf.examples import TASKS
from onnxport.hf.pipeline_model import PipelineModel

__all__ = ["PIECES", "SamOnnxModel", "check_mask_generation", "embedding_names", "export_mask_generation"]

PIECES = TASKS["mask-generation"].pieces  # the file stems, in the order they run
# The types whose forward this split computes -> transformers' class of them (what its pipeline checks a model by).
_TYPES = {"sam": "SamModel", "sam2": "Sam2Model", "sam3_tracker": "Sam3TrackerModel"}
_LATER = {"sam_hq": "its mask decoder also reads the vision encoder's intermediate embeddings",
          "sam2_video": "a video tracker", "sam3_video": "a video tracker", "edgetam_video": "a video tracker",
          "edgetam": "its image encoder (a timm RepViT) is not checked yet"}
BATCH = torch.export.Dim("batch_size")
PROMPTS = ("input_points", "input_labels")


def check_mask_generation(config: Any) -> None:
    """Refuse, before it is loaded, a mask-generation model this split does not compute."""
    if config.model_type not in _TYPES:
        why = _LATER.get(config.model_type, "it is not a SAM model")
        raise InvalidInputError(f"onnxport does not export {config.model_type} models for mask-generation yet: {why}",
                                fix="export a SAM or SAM 2 checkpoint (model_type sam, sam2 or sam3_tracker), or the "
                                "model with onnxport.export")


def scales(config: Any) -> int:
    """How many image embeddings at different scales the mask decoder reads: SAM 2's ``backbone_feature_sizes``
    (three), 0 for SAM's single one (with its positional embedding beside it)."""
    return len(getattr(config.vision_config, "backbone_feature_sizes", None) or ())


def embedding_names(config: Any) -> tuple[str, ...]:
    """The vision encoder's outputs, the mask decoder's first inputs, as transformers.js names them (see the
    module): its SamModel's two, its Sam2Model's ``image_embeddings.{i}`` for ``i`` below its
    ``vision_config.num_feature_levels``."""
    if not scales(config):
        return ("image_embeddings", "image_positional_embeddings")
    return tuple(f"image_embeddings.{i}" for i in range(scales(config)))


class VisionEncoder(torch.nn.Module):
    """SAM's vision encoder and the positional embedding of its grid, or SAM 2's embeddings (see the module)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model
        self.names = embedding_names(model.config)

    def forward(self, pixel_values: torch.Tensor) -> dict[str, torch.Tensor]:
        if scales(self.model.config):
            return dict(zip(self.names, self.model.get_image_embeddings(pixel_values), strict=True))
        embeddings = self.model.vision_encoder(pixel_values).last_hidden_state
        positions = self.model.get_image_wide_positional_embeddings().repeat(pixel_values.shape[0], 1, 1, 1)
        return dict(zip(self.names, (embeddings, positions), strict=True))


class PromptEncoderMaskDecoder(torch.nn.Module):
    """The prompt encoder on points and their labels, and the mask decoder on the image's embeddings (the vision
    encoder's outputs, in order)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, embeddings: tuple[torch.Tensor, ...], input_points: torch.Tensor,
                input_labels: torch.Tensor) -> dict[str, torch.Tensor]:
        sparse, dense = self.model.prompt_encoder(input_points=input_points, input_labels=input_labels,
                                                  input_boxes=None, input_masks=None)
        if not scales(self.model.config):
            masks, scores = self.model.mask_decoder(image_embeddings=embeddings[0],
                                                    image_positional_embeddings=embeddings[1],
                                                    sparse_prompt_embeddings=sparse, dense_prompt_embeddings=dense,
                                                    multimask_output=True)[:2]
            return {"iou_scores": scores, "pred_masks": masks}
        positions = self.model.get_image_wide_positional_embeddings().repeat(input_points.shape[0], 1, 1, 1)
        masks, scores, _, objects = self.model.mask_decoder(
            image_embeddings=embeddings[-1], image_positional_embeddings=positions, sparse_prompt_embeddings=sparse,
            dense_prompt_embeddings=dense, multimask_output=True, high_resolution_features=list(embeddings[:-1]))
        return {"iou_scores": scores, "pred_masks": masks, "object_score_logits": objects}


def _image(config: Any) -> tuple[int, int]:
    """The channels and the square side of the images ``config``'s model takes."""
    vision = config.vision_config
    if not scales(config):  # SAM's
        return vision.num_channels, vision.image_size
    return getattr(vision.backbone_config, "num_channels", 3), config.prompt_encoder_config.image_size


def examples(model: torch.nn.Module) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Example inputs of the two models: two images, and for each two prompts of three points (one a padding point,
    one off the object, as the processor pads and users label them)."""
    channels, size = _image(model.config)
    generator = torch.Generator().manual_seed(0)
    pixels = {"pixel_values": torch.randn(2, channels, size, size, generator=generator)}
    with torch.no_grad():
        embedded = VisionEncoder(model)(**pixels)
    points = torch.rand(2, 2, 3, 2, generator=generator) * size
    labels = torch.tensor([[1, 0, -10], [1, 1, 1]]).expand(2, 2, 3).contiguous()
    return pixels, {"embeddings": tuple(embedded.values()), "input_points": points, "input_labels": labels}


def export_mask_generation(model: torch.nn.Module, **options: Any) -> dict[str, Any]:
    """The two models of SAM or SAM 2 ``model`` (:data:`PIECES` -> ``OnnxProgram``), each exported and verified
    with ``onnxport.export`` and ``options``."""
    from onnxport.api import export

    model = model.eval()
    pixels, prompts = examples(model)
    names = embedding_names(model.config)
    grid = {0: BATCH}
    prompted = {0: BATCH, 1: torch.export.Dim("point_batch_size"), 2: torch.export.Dim("num_points")}
    prompt_shapes = {"embeddings": tuple(grid for _ in names), "input_points": prompted, "input_labels": prompted}
    return {PIECES[0]: export(VisionEncoder(model), (), pixels, dynamic_shapes={"pixel_values": grid},
                              output_names=list(names), **options),
            PIECES[1]: export(PromptEncoderMaskDecoder(model), (), prompts, dynamic_shapes=prompt_shapes,
                              input_names=[*names, *PROMPTS], **options)}


class SamOnnxModel(PipelineModel):
    """The two models in ``folder``, called as transformers' mask-generation pipeline calls a ``SamModel`` (or a
    ``Sam2Model``): ``get_image_embeddings(pixel_values)`` (SAM 2's: a list, one a scale), then the model on
    ``image_embeddings``, ``input_points`` and ``input_labels`` -> ``iou_scores`` and ``pred_masks`` (torch tensors;
    SAM 2's ``object_score_logits`` too). ``SamOnnxModel.of`` names its class as transformers names the type's
    (``SamModel``, ``Sam2Model``...), which is what the pipeline checks a model by."""

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
        return cls.named(_TYPES.get(config.model_type, "SamModel"))(folder, config, **options)

    def __repr__(self) -> str:
        return f"SamOnnxModel({self.folder!r})"

    def get_image_embeddings(self, pixel_values: torch.Tensor, **kwargs: Any) -> torch.Tensor | list[torch.Tensor]:
        """The vision encoder's ``image_embeddings`` of ``pixel_values`` (SAM 2's: one a scale, the finest first)."""
        pixels = pixel_values.detach().cpu().numpy().astype(np.float32)
        outputs = self.sessions[PIECES[0]].run(None, {"pixel_values": pixels})
        if scales(self.config):
            return [torch.from_numpy(embeddings) for embeddings in outputs]
        embeddings, positions = outputs
        self._positions = positions[:1]  # one grid's, the same for every image
        return torch.from_numpy(embeddings)

    def __call__(self, image_embeddings: torch.Tensor | list[torch.Tensor] | None = None,
                 input_points: torch.Tensor | None = None, input_labels: torch.Tensor | None = None,
                 pixel_values: torch.Tensor | None = None, multimask_output: bool = True, **kwargs: Any) -> Any:
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
        feeds = dict(zip(embedding_names(self.config), self._embeddings(image_embeddings), strict=True))
        feeds.update(input_points=input_points.detach().cpu().numpy().astype(np.float32),
                     input_labels=input_labels.detach().cpu().numpy().astype(np.int64))
        session = self.sessions[PIECES[1]]
        got = dict(zip((o.name for o in session.get_outputs()), session.run(None, feeds), strict=True))
        return self._output(**{name: torch.from_numpy(value) for name, value in got.items()})

    def _embeddings(self, image_embeddings: torch.Tensor | list[torch.Tensor]) -> list[np.ndarray]:
        """The decoder's embedding inputs from the pipeline's ``image_embeddings`` (SAM's, with its positions)."""
        if scales(self.config):
            return [e.detach().cpu().numpy().astype(np.float32) for e in image_embeddings]
        if self._positions is None:  # the positional embedding is the encoder's whatever the image
            channels, size = _image(self.config)
            self.get_image_embeddings(torch.zeros(1, channels, size, size))
        return [image_embeddings.detach().cpu().numpy().astype(np.float32),
                np.repeat(self._positions, image_embeddings.shape[0], axis=0)]

    def _output(self, **outputs: torch.Tensor) -> Any:
        """transformers' output class of the type, holding ``outputs``."""
        if scales(self.config):
            from transformers.models.sam2.modeling_sam2 import Sam2ImageSegmentationOutput

            return Sam2ImageSegmentationOutput(**outputs)
        from transformers.models.sam.modeling_sam import SamImageSegmentationOutput

        return SamImageSegmentationOutput(**outputs)
