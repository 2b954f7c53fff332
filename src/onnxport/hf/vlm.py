"""Vision-language models (``image-text-to-text``), split as onnxruntime-genai runs them.

A transformers ``*ForConditionalGeneration`` that reads images and text becomes three models:

- ``vision.onnx``: ``pixel_values`` to ``image_features``, one row per image token of the prompt, every
  image's rows one after the other, projected into the text model's embedding space: a dynamic batch of
  images of the config's size (LLaVA, InternVL's tiles, Gemma 3), or one image of any height and width (Mistral 3, whose
  Pixtral tower reads an image's patches at its own size: onnxruntime-genai runs it once per image);
- ``embedding.onnx``: ``input_ids`` and ``image_features`` to ``inputs_embeds``: the text model's token
  embeddings, with the rows of ``image_features``, in order, in place of each image token;
- ``model.onnx``: the text decoder on ``inputs_embeds`` with its KV cache, named as ``text-generation``
  names it (``past_key_values.{i}.key`` in, ``present.{i}.key`` out); Gemma 3's also on ``token_type_ids``
  over the whole sequence (its image tokens attend to each other both ways).

A prompt runs the three once; each later token runs the embedding model (with no image features: a
``[0, hidden]`` tensor) and the decoder. :func:`generate_vlm` does so in onnxruntime, greedily, from a
folder ``export_hf`` wrote, with the folder's own transformers processor turning text and images into
``input_ids`` and ``pixel_values`` (or from what a processor gave, ``inputs=``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
import torch

from onnxport.arguments import as_path
from onnxport.errors import InvalidInputError

__all__ = ["VLM_FILES", "EmbeddingModel", "VisionModel", "VlmPrograms", "export_vlm", "generate_vlm", "image_token_id"]

VLM_FILES = ("vision.onnx", "embedding.onnx", "model.onnx")
_DECODER_INPUTS = ("inputs_embeds", "attention_mask", "position_ids")  # what get_image_features takes besides pixel_values


class VlmPrograms(NamedTuple):
    """The three programs of a vision-language model, in the order of ``VLM_FILES``."""

    vision: Any
    embedding: Any
    decoder: Any


def image_token_id(config: Any) -> int:
    """The id of the token standing for one row of image features in a prompt (``image_token_id``, or the
    older ``image_token_index``)."""
    for name in ("image_token_id", "image_token_index"):
        value = getattr(config, name, None)
        if isinstance(value, int):
            return value
    raise InvalidInputError(f"config.json of this {config.model_type} model names no image_token_id",
                            fix="add the id of its image placeholder token as image_token_id")


class VisionModel(torch.nn.Module):
    """Images to the rows of features their image tokens take, all images' rows in one ``[tokens, hidden]``."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        if _splits_batch(self.model) or per_image(self.model):
            return _selected_layer_features(self.model, pixel_values)
        out = self.model.get_image_features(pixel_values=pixel_values)
        features = getattr(out, "pooler_output", out)
        return features.reshape(-1, features.shape[-1])


def per_image(model: torch.nn.Module) -> bool:
    """Whether the vision model takes one image at a time, of any size (Mistral 3's Pixtral tower: the patches
    of an image of its own height and width; onnxruntime-genai runs it once per image)."""
    return model.config.model_type == "mistral3"


def images_attend_both_ways(model: torch.nn.Module) -> bool:
    """Whether the tokens of one image attend to each other both ways in the prompt (Gemma 3): the decoder then
    takes ``token_type_ids`` over the whole sequence (past and new tokens, like ``attention_mask``; 1 for an
    image token), which a runtime that feeds embeddings alone (onnxruntime-genai) does not give."""
    return model.config.model_type == "gemma3"


def _splits_batch(model: torch.nn.Module) -> bool:
    """Whether ``get_image_features`` returns a list of the images' features (LLaVA's), which capture cannot
    follow for a dynamic count of images: their features are then computed as the config describes them."""
    return model.config.model_type == "llava"


def _selected_layer_features(model: torch.nn.Module, pixel_values: torch.Tensor) -> torch.Tensor:
    """The image features of LLaVA and Mistral 3: the vision tower's hidden states at ``vision_feature_layer``
    (several layers concatenated), without the class token for LLaVA's ``default`` strategy, through the
    projector. Mistral 3's image is one of any size, given to its tower and projector as that size (symbolic:
    the size of a tensor, where ``get_image_features`` would read it from a tensor of sizes)."""
    config, inner = model.config, model.model
    layers = config.vision_feature_layer
    sizes = [(pixel_values.shape[-2], pixel_values.shape[-1])] if per_image(model) else None
    kwargs = {"image_sizes": sizes} if sizes is not None else {}
    states = inner.vision_tower(pixel_values, output_hidden_states=True, return_dict=True, **kwargs).hidden_states
    chosen = [states[i] for i in ([layers] if isinstance(layers, int) else layers)]
    if getattr(config, "vision_feature_select_strategy", None) == "default":
        chosen = [s[:, 1:] for s in chosen]
    selected = torch.cat(chosen, dim=-1)
    features = inner.multi_modal_projector(selected.squeeze(0), sizes) if sizes is not None else \
        inner.multi_modal_projector(selected)
    return features.reshape(-1, config.text_config.hidden_size)


class EmbeddingModel(torch.nn.Module):
    """Token embeddings with the image features in place of the image tokens, in order."""

    def __init__(self, model: torch.nn.Module, image_token: int) -> None:
        super().__init__()
        self.embed = model.get_input_embeddings()
        self.image_token = image_token

    def forward(self, input_ids: torch.Tensor, image_features: torch.Tensor) -> torch.Tensor:
        is_image = input_ids == self.image_token
        # an image token's id may lie past the vocabulary: it is looked up as 0, then replaced
        embeds = self.embed(torch.where(is_image, torch.zeros_like(input_ids), input_ids))
        flat = is_image.reshape(-1)
        rows = torch.cumsum(flat.to(torch.int64), 0) - 1  # the k-th image token takes the k-th row
        # one row of zeros after the features: what text tokens gather, so that no features (decode) is fine
        padded = torch.cat([image_features.to(embeds.dtype), embeds.new_zeros(1, embeds.shape[-1])])
        rows = torch.where(flat, rows, image_features.shape[0])
        picked = padded[rows].reshape(embeds.shape)
        return torch.where(is_image.unsqueeze(-1), picked, embeds)


def _example_inputs(model: torch.nn.Module, config: Any) -> dict[str, dict[str, Any]]:
    """Example inputs of the three models: two images, a batch of two prompts holding their image tokens,
    and a decode step of three tokens on a four-token past."""
    from onnxport.hf import stream
    from onnxport.hf.examples import EXAMPLE_BATCH, NEW, PAST, image_size, token_ids
    from onnxport.hf.signature import cache_argument, cache_of

    text = config.get_text_config()
    hidden = text.hidden_size
    vision = VisionModel(model)
    seen = config.vision_config
    height, width = image_size(seen) or (224, 224)  # the vision config's image_size, checked
    shape = (EXAMPLE_BATCH, getattr(seen, "num_channels", 3), height, width)
    if per_image(model):  # one image of a size of its own: a multiple of the patches merged, not square
        side = seen.patch_size * getattr(config, "spatial_merge_size", 1)
        shape = (1, shape[1], 2 * side, 3 * side)
    pixels = {"pixel_values": torch.randn(shape, generator=torch.Generator().manual_seed(0))}
    meta = any(p.is_meta for p in model.parameters())
    with torch.no_grad():
        if meta:
            rows = stream.meta_call(vision, **pixels).shape[0]
        else:
            rows = vision(**pixels).shape[0]
    per_prompt = rows // EXAMPLE_BATCH if not per_image(model) else rows
    ids = token_ids(text, EXAMPLE_BATCH, per_prompt + 4)
    ids[:, 2:2 + per_prompt] = image_token_id(config)
    generator = torch.Generator().manual_seed(1)
    features = torch.randn(EXAMPLE_BATCH * per_prompt, hidden, generator=generator)  # one row per image token
    prompt = token_ids(text, EXAMPLE_BATCH, PAST)
    if meta:
        cache = stream.meta_cache(model, input_ids=prompt)
    else:
        with torch.no_grad():
            cache = cache_of(model(input_ids=prompt, attention_mask=torch.ones_like(prompt), use_cache=True))
    decoder = {"inputs_embeds": torch.randn(EXAMPLE_BATCH, NEW, hidden, generator=generator),
               "attention_mask": torch.ones(EXAMPLE_BATCH, PAST + NEW, dtype=torch.int64),
               "position_ids": torch.arange(PAST, PAST + NEW).expand(EXAMPLE_BATCH, NEW).clone(),
               cache_argument(model): cache}
    if images_attend_both_ways(model):  # two image tokens among the new ones, seeing each other
        types = torch.zeros(EXAMPLE_BATCH, PAST + NEW, dtype=torch.int64)
        types[:, PAST:PAST + 2] = 1
        decoder["token_type_ids"] = types
    return {"vision.onnx": pixels, "embedding.onnx": {"input_ids": ids, "image_features": features},
            "model.onnx": decoder}


def export_vlm(model: torch.nn.Module, config: Any, **options: Any) -> dict[str, Any]:
    """The three programs of a vision-language model (file name -> ``OnnxProgram``), each exported with
    ``onnxport.export`` and ``options`` (``weights``: the model's streamed weights, named as the model names
    them; ``quantize`` applies to the decoder alone; the rest passed as they are)."""
    from torch.export import Dim

    from onnxport.api import export
    from onnxport.hf.cache import auto_spec

    inputs = _example_inputs(model, config)
    weights = options.pop("weights", None)
    quantize = options.pop("quantize", None)  # the decoder's layers only, as a runtime for these models expects
    embed_name = next(name for name, module in model.named_modules() if module is model.get_input_embeddings())
    cache_name = next(name for name in inputs["model.onnx"] if name not in (*_DECODER_INPUTS, "token_type_ids"))
    tokens = {0: Dim.AUTO, 1: Dim.AUTO}
    decoder = {**{name: tokens for name in _DECODER_INPUTS if name in inputs["model.onnx"]},
               cache_name: auto_spec(inputs["model.onnx"][cache_name])}
    if "token_type_ids" in inputs["model.onnx"]:
        decoder["token_type_ids"] = tokens
    images = {"pixel_values": {2: Dim.DYNAMIC, 3: Dim.DYNAMIC} if per_image(model) else {0: Dim.DYNAMIC}}
    parts = {"vision.onnx": (VisionModel(model), images, "model.", ["image_features"]),
             "embedding.onnx": (EmbeddingModel(model, image_token_id(config)),
                                {"input_ids": {0: Dim.DYNAMIC, 1: Dim.DYNAMIC}, "image_features": {0: Dim.DYNAMIC}},
                                None, ["inputs_embeds"]),
             "model.onnx": (model, decoder, "", None)}
    programs = {}
    for name, (module, dynamic, prefix, outputs) in parts.items():
        given = weights
        if weights is not None:
            names = {f"embed.{key[len(embed_name) + 1:]}": key for key in weights
                     if key.startswith(embed_name + ".")} if prefix is None else {prefix + key: key for key in weights}
            given = weights.renamed(names)
        programs[name] = export(module, (), inputs[name], dynamic_shapes=dynamic, weights=given,
                                output_names=outputs, quantize=quantize if name == "model.onnx" else None, **options)
    return programs


def generate_vlm(folder: str | os.PathLike[str], text: str | list[str] | None = None, images: Any = None, *,
                 inputs: Mapping[str, Any] | None = None, max_new_tokens: int = 8, eos_token_id: int | None = None,
                 pad_token_id: int | None = None) -> torch.Tensor:
    """Greedy generation in onnxruntime from a folder ``export_hf`` wrote for ``image-text-to-text``: the
    prompt's tokens and up to ``max_new_tokens`` new ones, ``(batch, prompt + new)``, as transformers'
    ``generate(do_sample=False)`` returns them.

    ``text`` and ``images`` go through the folder's transformers processor as they would for the PyTorch
    model (a prompt holds the processor's image placeholder once per image; a batch of prompts is padded as
    the processor pads it). Or ``inputs``: what a processor gives (``input_ids``, ``attention_mask``,
    ``pixel_values``, and ``image_sizes`` for a model that takes one image at a time), for a processor that
    cannot be loaded where this runs (Pixtral's needs torchvision). ``eos_token_id`` and ``pad_token_id``
    default to the folder's generation config.
    """
    import onnxruntime as ort
    import transformers

    folder = as_path(folder, "folder", "pass the folder export-hf wrote")
    missing = [name for name in VLM_FILES if not os.path.isfile(os.path.join(folder, name))]
    if missing:
        raise InvalidInputError(f"{folder} has no {', '.join(missing)}",
                                fix="export the model with export_hf(directory, 'image-text-to-text', folder)")
    if (inputs is None) == (text is None):
        raise InvalidInputError("generate_vlm takes a prompt (text, and images) or the inputs a processor made, "
                                "not both or neither", fix="pass text= (and images=), or inputs=")
    if inputs is None:
        processor = transformers.AutoProcessor.from_pretrained(folder)
        batch = processor(text=text, images=images, return_tensors="np", padding=True)
    else:
        batch = {k: v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else np.asarray(v)
                 for k, v in inputs.items()}
        batch.setdefault("attention_mask", np.ones_like(batch["input_ids"]))
    sessions = {name: ort.InferenceSession(os.path.join(folder, name), providers=["CPUExecutionProvider"])
                for name in VLM_FILES}
    embedding = sessions["embedding.onnx"]
    hidden = embedding.get_outputs()[0].shape[-1]
    dtype = np.float16 if "float16" in embedding.get_outputs()[0].type else np.float32
    features = np.zeros((0, hidden), dtype=dtype)
    if batch.get("pixel_values") is not None:
        vision = sessions["vision.onnx"]
        pixel_type = np.float16 if "float16" in vision.get_inputs()[0].type else np.float32
        if "image_sizes" in batch:  # one image at a time, cut to its own size from the padded batch
            pixels = [batch["pixel_values"][i:i + 1, :, :h, :w].astype(pixel_type)
                      for i, (h, w) in enumerate(batch["image_sizes"])]
            features = np.concatenate([vision.run(None, {"pixel_values": p})[0] for p in pixels])
        else:
            features = vision.run(None, {"pixel_values": batch["pixel_values"].astype(pixel_type)})[0]

    def embed(ids: np.ndarray, prompt: bool) -> np.ndarray:
        rows = features if prompt else features[:0]
        return embedding.run(None, {"input_ids": ids, "image_features": rows})[0]

    if os.path.isfile(os.path.join(folder, "generation_config.json")):
        generation = transformers.GenerationConfig.from_pretrained(folder)
        eos_token_id = generation.eos_token_id if eos_token_id is None else eos_token_id
        pad_token_id = generation.pad_token_id if pad_token_id is None else pad_token_id
    if isinstance(eos_token_id, list):
        eos_token_id = eos_token_id[0]
    from onnxport.hf.generate import generate

    ids = torch.from_numpy(batch["input_ids"].astype(np.int64))
    types = None
    if "token_type_ids" in {i.name for i in sessions["model.onnx"].get_inputs()}:  # 1 for the image tokens
        config = transformers.AutoConfig.from_pretrained(folder)
        types = (ids == image_token_id(config)).to(torch.int64)
    return generate(os.path.join(folder, "model.onnx"), ids, torch.from_numpy(batch["attention_mask"].astype(np.int64)),
                    max_new_tokens=max_new_tokens, eos_token_id=eos_token_id, pad_token_id=pad_token_id, embed=embed,
                    token_type_ids=types)


GENAI_TYPES = ("mistral3",)  # the models onnxruntime-genai runs that these files are written for
GENAI_PROCESSOR = "genai_image_processor.json"  # its image processor (onnxruntime-extensions' transforms)


def genai_files(config: Any, model: torch.nn.Module, preprocessor: Mapping[str, Any]) -> dict[str, Any]:
    """``genai_config.json`` and the image processor onnxruntime-genai reads for a model of ``GENAI_TYPES``
    (file name -> JSON), from the model's config and its transformers image processor's settings."""
    from onnxport.hf.genai import genai_config

    described = genai_config(config, model)
    described["model"]["type"] = config.model_type  # a vision-language type genai runs by its name (GENAI_TYPES)
    decoder = described["model"]["decoder"]
    decoder["inputs"] = {"inputs_embeds": "inputs_embeds", "attention_mask": "attention_mask",
                         "position_ids": "position_ids", "past_key_names": "past_key_values.%d.key",
                         "past_value_names": "past_key_values.%d.value"}
    patch, merge = config.vision_config.patch_size, getattr(config, "spatial_merge_size", 1)
    described["model"]["vision"] = {"filename": "vision.onnx", "config_filename": GENAI_PROCESSOR,
                                    "patch_size": patch, "spatial_merge_size": merge,
                                    "inputs": {"pixel_values": "pixel_values"},
                                    "outputs": {"image_features": "image_features"}}
    described["model"]["embedding"] = {"filename": "embedding.onnx",
                                       "inputs": {"input_ids": "input_ids", "image_features": "image_features"},
                                       "outputs": {"inputs_embeds": "inputs_embeds"}}
    longest = (preprocessor.get("size") or {}).get("longest_edge", config.vision_config.image_size)

    def operation(name: str, kind: str, **attrs: Any) -> dict[str, Any]:
        return {"operation": {"name": name, "type": kind, **({"attrs": attrs} if attrs else {})}}

    # Pixtral's processor: an image larger than longest_edge scaled down, every side a multiple of the
    # patches merged; onnxruntime-extensions' smart resize rounds to that multiple within the pixel bounds.
    # DecodeImage gives RGB already (its ConvertRGB swaps the channels of an RGB image: not used).
    transforms = [operation("decode_image", "DecodeImage", color_space="RGB"),
                  operation("resize", "Resize", height=longest, width=longest, smart_resize=1,
                            min_pixels=(patch * merge) ** 2, max_pixels=longest * longest, patch_size=patch,
                            merge_size=merge),
                  operation("rescale", "Rescale", rescale_factor=preprocessor.get("rescale_factor", 1 / 255)),
                  operation("normalize", "Normalize", mean=preprocessor.get("image_mean", [0.5] * 3),
                            std=preprocessor.get("image_std", [0.5] * 3)),
                  operation("to_channel_first", "Permute3D", dims=[2, 0, 1]),
                  operation("pixtral_image_sizes", "PixtralImageSizes")]
    processor = {"processor": {"name": "pixtral_image_processor", "transforms": transforms}}
    return {"genai_config.json": described, GENAI_PROCESSOR: processor}


def genai_names(config: Any) -> tuple[str, ...]:
    """The files :func:`write_genai` writes for a model of this config (none for a type genai does not run)."""
    return ("genai_config.json", GENAI_PROCESSOR) if config.model_type in GENAI_TYPES else ()


def write_genai(out: str, config: Any, model: torch.nn.Module, directory: str) -> None:
    """Write :func:`genai_files` into ``out`` for a model of ``GENAI_TYPES`` (nothing for another type), from
    the image processor settings in ``directory``'s ``preprocessor_config.json``."""
    import json

    if not genai_names(config):
        return
    path = os.path.join(directory, "preprocessor_config.json")
    try:
        with open(path, encoding="utf-8") as f:
            preprocessor = json.load(f)
    except (OSError, ValueError):
        preprocessor = {}  # the defaults of the model's config
    for name, data in genai_files(config, model, preprocessor if isinstance(preprocessor, dict) else {}).items():
        with open(os.path.join(out, name), "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2)


# The vision-language models whose split is tested to generate as transformers does; another is refused,
# with what stands in the way where it is known.
SUPPORTED = ("llava", "mistral3", "internvl", "gemma3")
_WHY_NOT = {
    "paligemma": "its prompt prefix attends both ways (token_type_ids), which a decoder fed embeddings alone cannot "
                 "tell",
    "qwen2_vl": "its decoder takes 3-d positions (a rope index over the images' grids), which the runner does not "
                "compute yet (its vision tower, model.visual, exports on its own with onnxport.export)",
    "qwen2_5_vl": "its decoder takes 3-d positions (a rope index over the images' grids), which the runner does not "
                  "compute yet (its vision tower, model.visual, exports on its own with onnxport.export)",
}


def check_supported(config: Any) -> None:
    """Refuse, before anything is loaded or written, a vision-language model whose split is not known to
    generate as transformers does."""
    kind = config.model_type
    if kind in SUPPORTED:
        return
    why = _WHY_NOT.get(kind, "its split into vision, embedding and decoder models is not tested to generate as "
                             "transformers does")
    raise InvalidInputError(f"onnxport does not export {kind} models for image-text-to-text yet: {why}",
                            fix=f"export one of {', '.join(SUPPORTED)}; or export its text model for "
                            "text-generation, or the whole model with onnxport.export")
