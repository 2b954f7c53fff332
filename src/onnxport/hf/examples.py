"""export-hf's tasks and the example inputs each is exported with: the auto class that loads a task's model,
its inputs (two texts, one padded; a decode step on a cache; images of the size its processor gives; audio),
its dynamic dims, and the checkpoint's config as transformers reads it. A leaf of ``onnxport.hf``: export-hf,
its vision-language and diffusion exports and the census build on it; it imports none of them."""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from onnxport.errors import InvalidInputError
from onnxport.hf import stream
from onnxport.hf.cache import unnamed_state
from onnxport.hf.forecasting import series_dynamic, series_inputs
from onnxport.hf.genai import check_plain_generation, takes_positions
from onnxport.hf.signature import cache_argument, cache_of, self_attention_cache

__all__ = ["ENCODED_TASKS", "ENCODER_DECODER_FEATURES", "EXAMPLE_BATCH", "NEW", "PAST", "TASKS", "Task", "cacheless",
           "caching", "feature_dynamic", "feature_inputs", "image_size", "read_config", "token_ids"]

EXAMPLE_BATCH = 2
PAST, NEW = 4, 3  # a decode step exports the one model that serves prefill (past 0) and decode


def caching(config: Any, on: bool = True) -> None:
    """Turn the KV cache on (or off) in ``config`` and the configs it holds (a text config, an encoder-decoder's):
    a generation export takes and returns the cache whatever the checkpoint was saved with."""
    configs = [config, *(getattr(config, name, None) for name in ("text_config", "decoder", "encoder"))]
    for each in configs:
        if each is not None and hasattr(each, "use_cache"):
            each.use_cache = on


def cacheless(model: torch.nn.Module) -> None:
    """A causal LM that returns no KV cache (GPT-1, XLNet, a state-space model's recurrent state, which is not a
    cache onnxruntime-genai feeds) is exported without one: its model.onnx takes the whole sequence at each step
    and returns logits alone, and the folder gets no genai_config.json. Its cache is turned off, so that forward
    returns no state to name either."""
    caching(model.config, on=False)


def read_config(directory: str) -> Any:
    """The transformers config of ``directory``; a ``config.json`` that is not a JSON object naming its
    ``model_type``, or one transformers cannot read, is an ``InvalidInputError`` naming the file."""
    path = os.path.join(directory, "config.json")
    fix = ("restore the file: save it again with model.config.save_pretrained(directory), or copy it from where "
           "the model came from")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except json.JSONDecodeError as exc:
        raise InvalidInputError(f"{path} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
                                fix=fix) from None
    except UnicodeDecodeError as exc:
        raise InvalidInputError(f"{path} is not UTF-8 text: {exc.reason} at byte {exc.start}", fix=fix) from None
    except OSError as exc:
        raise InvalidInputError(f"cannot read {path}: {exc.strerror or exc}",
                                fix="check the file's permissions, or give another model directory") from None
    if not isinstance(data, dict):
        raise InvalidInputError(f"{path} holds a JSON {type(data).__name__}, not an object of settings", fix=fix)
    if not isinstance(data.get("model_type"), str) or not data["model_type"]:
        raise InvalidInputError(f"{path} has no model_type: transformers cannot tell which architecture it is",
                                fix='add the architecture\'s "model_type" (e.g. "llama", "bert"), or ' + fix)
    import transformers

    try:
        return transformers.AutoConfig.from_pretrained(directory, local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - transformers' and huggingface_hub's validation errors vary
        text = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
        if len(text) > 1 and text[0].endswith(":"):  # huggingface_hub's: "Validation error for field 'x':", cause
            text = [f"{text[0]} {text[1]}"]
        raise InvalidInputError(
            f"transformers cannot read {path} (model_type {data['model_type']!r}): "
            f"{type(exc).__name__}: {text[0] if text else ''}"[:400],
            fix=f"check model_type and the settings in {path}; a model_type that transformers "
            f"{transformers.__version__} does not know needs a newer transformers",
        ) from None


def token_ids(config: Any, batch: int, length: int, seed: int = 0, model: torch.nn.Module | None = None) -> torch.Tensor:
    """Random token ids below the vocabulary's size: the config's, or the rows of ``model``'s input embeddings
    where they are fewer (a decoder of a vocabulary of its own: Marian's)."""
    vocab = getattr(config, "vocab_size", None) or 100
    embeddings = _input_embeddings(model) if model is not None else None
    if isinstance(getattr(embeddings, "num_embeddings", None), int):
        vocab = min(vocab, embeddings.num_embeddings)
    low = min(3, vocab - 1)  # clear of the usual special ids
    return torch.randint(low, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


def _input_embeddings(model: torch.nn.Module) -> Any:
    try:
        return model.get_input_embeddings()
    except (AttributeError, NotImplementedError):
        return None


def text_inputs(model: torch.nn.Module, config: Any) -> dict[str, Any]:
    """Two texts' ``input_ids``, and their ``attention_mask`` where the model's forward takes one (FNet's mixes
    tokens by a Fourier transform and takes none: its tokenizer gives none either). Where the config names an
    end-of-sequence token, each text ends with it, once, as a tokenizer ends it (BART's and mBART's
    classification heads read the features at that token), and the padding after it is the pad token."""
    ids = token_ids(config, EXAMPLE_BATCH, 8)
    mask = torch.ones_like(ids)
    mask[-1, -3:] = 0  # a padded row, as a tokenizer pads a batch
    eos, pad = _special_id(config, "eos_token_id"), _special_id(config, "pad_token_id")
    if eos is not None and eos < (getattr(config, "vocab_size", None) or 100):
        ids = torch.where(ids == eos, eos + 1 if eos + 1 < int(ids.max()) else eos - 1, ids)  # none inside a text
        ids[torch.arange(len(ids)), mask.sum(-1) - 1] = eos
        if pad is not None:
            ids = torch.where(mask.bool(), ids, pad)
    return {"input_ids": ids, "attention_mask": mask} if takes(model, "attention_mask") else {"input_ids": ids}


def _special_id(config: Any, name: str) -> int | None:
    value = getattr(config, name, None)
    value = value[0] if isinstance(value, (list, tuple)) and value else value
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def tokenizer_gives(directory: str, name: str) -> bool | None:
    """Whether the tokenizer saved in ``directory`` gives the input ``name`` (its ``model_input_names``, from
    tokenizer_config.json or its class); None where the directory says nothing of a tokenizer. A RoBERTa-style
    checkpoint may keep BERT's two token types in its config while its tokenizer gives none: its model is then
    exported without them, as the tokenizer feeds it."""
    try:
        with open(os.path.join(directory, "tokenizer_config.json"), encoding="utf-8") as f:
            settings = json.load(f)
    except (OSError, ValueError):
        return None
    names = settings.get("model_input_names") if isinstance(settings, dict) else None
    if not isinstance(names, list) and isinstance(settings, dict) and isinstance(settings.get("tokenizer_class"), str):
        import transformers

        cls = settings["tokenizer_class"]
        tokenizer = getattr(transformers, cls, None) or getattr(transformers, cls.removesuffix("Fast"), None)
        names = getattr(tokenizer, "model_input_names", None)
    return name in names if isinstance(names, list) else None


def takes(model: torch.nn.Module, name: str) -> bool:
    """Whether the forward of ``model`` (a SentenceEmbedding's transformer's) names the argument ``name``."""
    return name in inspect.signature(getattr(model, "transformer", model).forward).parameters


def encoder_inputs(model: torch.nn.Module, config: Any) -> dict[str, Any]:
    """``text_inputs``, and ``token_type_ids`` (a second segment, as a tokenizer marks a pair of texts) where
    the model adds segment embeddings: its forward takes them, its config has more than one type, and the
    directory's tokenizer (where it says) gives them."""
    inputs = text_inputs(model, config)
    types = getattr(config, "type_vocab_size", 0) or 0
    directory = getattr(config, "name_or_path", "") or ""
    if takes(model, "token_type_ids") and types > 1 and tokenizer_gives(directory, "token_type_ids") is not False:
        segments = torch.zeros_like(inputs["input_ids"])
        segments[:, 5:] = 1
        inputs["token_type_ids"] = segments
    return inputs


def generation_inputs(model: torch.nn.Module, config: Any) -> dict[str, Any]:
    """A decode step: the cache of a ``PAST``-token prefill, then ``NEW`` tokens."""
    prompt = token_ids(config, EXAMPLE_BATCH, PAST, model=model)
    if any(p.is_meta for p in model.parameters()):  # streamed: no weights to run the prefill on
        cache = stream.meta_cache(model, input_ids=prompt)
    else:
        try:
            with torch.no_grad():
                cache = cache_of(model(input_ids=prompt, attention_mask=torch.ones_like(prompt), use_cache=True))
        except Exception as exc:  # noqa: BLE001 - the model's own failure, named with its cause
            raise InvalidInputError(f"{type(model).__name__} fails on a prompt of {PAST} tokens with its cache on, "
                                    f"in eager PyTorch: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                                    fix="check that transformers generates with this checkpoint "
                                    "(model.generate(input_ids)); export-hf needs its KV cache") from None
    cache = self_attention_cache(cache)
    layers = getattr(cache, "layers", None)
    if layers and not any(isinstance(getattr(layer, "keys", None), torch.Tensor) for layer in layers):
        cache = None  # recurrent states alone (Mamba's, in newer transformers): no keys and values genai feeds
    unnamed = next((why for i, layer in enumerate(layers or ()) if (why := unnamed_state(layer, i))), None)
    if unnamed is not None:  # DeepSeek V4's compressor state: its buffers' lengths and counts follow the position
        raise InvalidInputError(
            f"{type(model).__name__}'s cache cannot be a text-generation model's inputs and outputs: its {unnamed}. "
            "Without the cache, the model's code would fix to the example's length what it computes from it",
            fix="generate with transformers; export the bare model for feature-extraction (its features need no cache)")
    if cache is None:  # no cache to take or return: each step runs the whole sequence (see cacheless)
        check_plain_generation(model, prompt)
        cacheless(model)
        length = PAST + NEW
        inputs = {"input_ids": token_ids(config, EXAMPLE_BATCH, length, seed=1, model=model),
                  "attention_mask": torch.ones(EXAMPLE_BATCH, length, dtype=torch.int64)}
        if takes_positions(model):
            inputs["position_ids"] = torch.arange(length).expand(EXAMPLE_BATCH, length).clone()
        return inputs
    inputs = {"input_ids": token_ids(config, EXAMPLE_BATCH, NEW, seed=1, model=model),
              "attention_mask": torch.ones(EXAMPLE_BATCH, PAST + NEW, dtype=torch.int64)}
    if takes_positions(model):
        inputs["position_ids"] = torch.arange(PAST, PAST + NEW).expand(EXAMPLE_BATCH, NEW).clone()
    inputs[cache_argument(model)] = cache  # the name forward takes: no deprecation warning on any version
    return inputs


def image_size(config: Any) -> tuple[int, int] | None:
    """The (height, width) the config says the model's images have (its ``image_size``), or None."""
    side = getattr(config, "image_size", None)
    if side is None:
        return None
    height, width = (side[0], side[-1]) if isinstance(side, (list, tuple)) and side else (side, side)
    if not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in (height, width)):
        raise InvalidInputError(f"config.json's image_size {side!r} is not a size in pixels",
                                fix="set image_size to the side (or [height, width]) the model's images have")
    return height, width


class ImageSizes(NamedTuple):
    """The images an image task's model is exported for: an example's ``height`` and ``width``, whether the
    sizes vary (the image processor resizes each image to a size of its own, keeping its aspect ratio: height
    and width are then dynamic) and whether a ``pixel_mask`` comes with them (the processor pads a batch to
    its largest image and the model's forward takes the mask)."""

    height: int
    width: int
    varying: bool = False
    mask: bool = False


# Two images of other aspect ratios, for the image processor to size: if it gives them different sizes, it
# gives images of varying size.
_PROBES = ((48, 64), (64, 40))
_STRIDE = 32  # an example of varying size is rounded up to this: the deepest stride of convolutional backbones
_PROBED: dict[Any, tuple[list[tuple[int, int]], tuple[int, int] | None, bool] | None] = {}


def _probed(directory: str, made: dict[Any, Any], probe: Callable[[], Any], *extra: Any) -> Any:
    """What ``probe`` makes of the directory's preprocessor_config.json, made once per version of that file (its
    path and time of change, and ``extra``); None where the directory has none."""
    path = os.path.join(directory, "preprocessor_config.json")
    if not directory or not os.path.isfile(path):
        return None
    key = (os.path.abspath(path), os.stat(path).st_mtime_ns, *extra)
    if key not in made:
        made[key] = probe()
    return made[key]


def _probe_processor(directory: str) -> tuple[list[tuple[int, int]], tuple[int, int] | None, bool] | None:
    """What the image processor in ``directory`` makes of ``_PROBES``: the (height, width) of each image alone,
    that of the two batched (None when it cannot batch them: it does not pad) and whether the batch comes with
    a ``pixel_mask``; None where the directory has no image processor transformers loads."""
    return _probed(directory, _PROBED, lambda: _processor_sizes(directory))


def _processor_sizes(directory: str) -> tuple[list[tuple[int, int]], tuple[int, int] | None, bool] | None:
    import numpy as np
    import transformers

    try:
        processor = transformers.AutoImageProcessor.from_pretrained(directory, local_files_only=True)
        pictures = [np.full((h, w, 3), 128, dtype=np.uint8) for h, w in _PROBES]
        alone = [tuple(processor(p, return_tensors="np")["pixel_values"].shape[-2:]) for p in pictures]
    except Exception:  # noqa: BLE001 - not an image processor (a feature extractor), or one that needs more
        return None
    try:
        batch = processor(pictures, return_tensors="np")
        batched, mask = tuple(batch["pixel_values"].shape[-2:]), "pixel_mask" in batch
    except Exception:  # noqa: BLE001 - images of different sizes it does not pad
        batched, mask = None, False
    return alone, batched, mask


def image_sizes(model: torch.nn.Module, config: Any) -> ImageSizes:
    """The images the model is exported for, as its image processor gives them (its directory's
    preprocessor_config.json): of varying size (height and width dynamic, an example rounded up to a multiple of
    ``_STRIDE``, and a padded ``pixel_mask`` where the processor gives one and the model takes it), or of one
    size: the config's ``image_size`` (a vision config's, for a text-and-image model), else the processor's,
    else 224."""
    vision = getattr(config, "vision_config", None) or config
    probed = _probe_processor(getattr(config, "name_or_path", "") or "")
    fixed = image_size(vision)
    if probed is not None and len(set(probed[0])) > 1:
        height, width = (max(size[i] for size in probed[0]) for i in (0, 1))
        height, width = (-(-n // _STRIDE) * _STRIDE for n in (height, width))
        if width == height:  # not equal: export would take them for one dim
            width += _STRIDE
        forward = inspect.signature(model.forward).parameters
        return ImageSizes(height, width, varying=True, mask=probed[2] and "pixel_mask" in forward)
    if fixed is None and probed is not None:
        fixed = probed[0][0]
    return ImageSizes(*(fixed or (224, 224)))


def image_inputs(model: torch.nn.Module, config: Any, batch: int = EXAMPLE_BATCH) -> dict[str, Any]:
    """A batch of images of the size ``image_sizes`` gives, and their ``pixel_mask`` where the model is
    exported with one (the last image padded on the right and bottom, as the processor pads a smaller one)."""
    vision = getattr(config, "vision_config", None) or config
    sizes = image_sizes(model, config)
    channels = getattr(vision, "num_channels", 3)
    generator = torch.Generator().manual_seed(0)
    inputs = {"pixel_values": torch.randn(batch, channels, sizes.height, sizes.width, generator=generator)}
    if sizes.mask:
        mask = torch.ones(batch, sizes.height, sizes.width, dtype=torch.int64)
        mask[-1, sizes.height * 3 // 4:] = 0
        mask[-1, :, sizes.width * 3 // 4:] = 0
        inputs["pixel_values"][-1] *= mask[-1]  # padding is zeros
        inputs["pixel_mask"] = mask
    return inputs


def _processor_settings(directory: str) -> dict[str, Any]:
    """The image processor's settings in ``directory`` (its preprocessor_config.json); empty where it has none."""
    try:
        with open(os.path.join(directory, "preprocessor_config.json"), encoding="utf-8") as f:
            settings = json.load(f)
    except (OSError, ValueError):
        return {}
    return settings if isinstance(settings, dict) else {}


def _longest_edge(directory: str) -> int | None:
    """The longest side of the images the processor in ``directory`` makes, where its settings cap it."""
    settings = _processor_settings(directory)
    size = settings.get("size")
    longest = size.get("longest_edge") if isinstance(size, dict) else None
    if not isinstance(longest, int) or isinstance(longest, bool) or longest < 2:
        return None
    step = settings.get("size_divisor") or settings.get("pad_size_divisor") or 1
    return -(-longest // step) * step if isinstance(step, int) and step > 0 else longest


_STEP_SETTINGS = ("ensure_multiple_of", "size_divisor", "size_divisibility", "pad_size_divisor")


def image_steps(model: torch.nn.Module, config: Any) -> dict[str, int]:
    """Per dynamic image dim (by its name, ``pixel_values_dim2``), the multiple the image processor makes every side
    of, where its settings name one (ZoeDepth's and DPT's ``ensure_multiple_of``, DETR's ``size_divisor``) and the
    sizes it makes of probe images keep it; empty otherwise (verification then tries sides of every remainder)."""
    directory = getattr(config, "name_or_path", "") or ""
    probed = _probe_processor(directory)
    if not image_sizes(model, config).varying or probed is None:
        return {}
    settings = _processor_settings(directory)
    steps = [v for key in _STEP_SETTINGS if isinstance(v := settings.get(key), int) and not isinstance(v, bool)
             and v > 1]
    step = max(steps, default=1)
    if step == 1 or any(side % step for size in probed[0] for side in size):
        return {}
    return {name: step for name in ("pixel_values_dim2", "pixel_values_dim3", "pixel_mask_dim1", "pixel_mask_dim2")}


def image_dynamic(model: torch.nn.Module, config: Any) -> dict[str, Any]:
    """Dynamic batch; height and width too (``pixel_mask``'s with ``pixel_values``') for images of varying size,
    from 2 pixels (an image one pixel high or wide is none a processor makes: verification does not feed one) up to
    the processor's longest edge where it caps one (DETR's, MaskFormer's ``size["longest_edge"]``, padded up to its
    ``size_divisor``)."""
    dynamic = torch.export.Dim.DYNAMIC
    if not image_sizes(model, config).varying:
        return {"pixel_values": {0: dynamic}}
    side = dynamic(min=2, max=_longest_edge(getattr(config, "name_or_path", "") or ""))
    shapes = {"pixel_values": {0: dynamic, 2: side, 3: side}}
    if "pixel_mask" in image_inputs(model, config):
        shapes["pixel_mask"] = {0: dynamic, 1: side, 2: side}
    return shapes


def segmentation_inputs(model: torch.nn.Module, config: Any) -> dict[str, Any]:
    """image-segmentation's example: ``image_inputs``; for a segmenter prompted by text (CLIPSeg: its forward takes
    ``input_ids``), the images with one prompt each, token ids of its text config's vocabulary (the last padded)."""
    images = image_inputs(model, config)
    if not takes(model, "input_ids"):
        return images
    ids = token_ids(getattr(config, "text_config", None) or config, len(images["pixel_values"]), 7)
    inputs = {"input_ids": ids}
    if takes(model, "attention_mask"):
        inputs["attention_mask"] = torch.ones_like(ids)
        inputs["attention_mask"][-1, -2:] = 0
    return {**inputs, **images}


def segmentation_dynamic(model: torch.nn.Module, config: Any) -> dict[str, Any]:
    """``image_dynamic``; for a segmenter prompted by text, one batch for prompts and images, and the prompts'
    length."""
    images = image_dynamic(model, config)
    if not takes(model, "input_ids"):
        return images
    batch = torch.export.Dim("batch")
    return {name: {**images[name], 0: batch} if name in images else {0: batch, 1: torch.export.Dim.DYNAMIC}
            for name in segmentation_inputs(model, config)}


def matting_inputs(model: torch.nn.Module, config: Any) -> dict[str, Any]:
    """image-matting's example (VitMatte): two images with their trimaps, as the image processor gives them: the
    normalised colours, then the trimap as a last channel (0 background, 0.5 unknown, 1 foreground), padded to a
    multiple of ``_STRIDE`` (its ``size_divisor``), of unequal height and width (both dynamic) and more than one of
    the backbone's attention windows a side: torch.export would fix a count of one window at one."""
    backbone = getattr(config, "backbone_config", None) or config
    patch = getattr(backbone, "patch_size", 16)
    patch = max(patch) if isinstance(patch, (list, tuple)) else patch
    side = max(2 * _STRIDE, ((getattr(backbone, "window_size", 0) or 0) + 1) * patch)
    height = -(-side // _STRIDE) * _STRIDE
    generator = torch.Generator().manual_seed(0)
    pixels = torch.randn(EXAMPLE_BATCH, getattr(backbone, "num_channels", 4), height, height + _STRIDE,
                         generator=generator)
    pixels[:, -1] = torch.randint(0, 3, pixels[:, -1].shape, generator=generator) / 2
    return {"pixel_values": pixels}


def matting_dynamic(model: torch.nn.Module, config: Any) -> dict[str, Any]:
    """Dynamic batch, height and width: the processor pads each image to its own multiple of ``_STRIDE``."""
    dynamic = torch.export.Dim.DYNAMIC
    return {"pixel_values": {0: dynamic, 2: dynamic, 3: dynamic}}


def pose_inputs(model: torch.nn.Module, config: Any) -> dict[str, Any]:
    """pose-estimation's example (VitPose): two person crops of the size the backbone's config says (its
    ``image_size``, the processor's crop), and, for a backbone of several experts (ViTPose+: ``num_experts``), each
    crop's ``dataset_index``, which picks its experts."""
    backbone = getattr(config, "backbone_config", None) or config
    height, width = image_size(backbone) or (256, 192)
    generator = torch.Generator().manual_seed(0)
    inputs = {"pixel_values": torch.randn(EXAMPLE_BATCH, getattr(backbone, "num_channels", 3), height, width,
                                          generator=generator)}
    experts = getattr(backbone, "num_experts", 1) or 1
    if experts > 1:
        inputs["dataset_index"] = torch.arange(EXAMPLE_BATCH) % experts
    return inputs


def pose_dynamic(model: torch.nn.Module, config: Any) -> dict[str, Any]:
    """One dynamic batch (the crops') for the crops and their ``dataset_index``."""
    batch = torch.export.Dim("batch")
    return {name: {0: batch} for name in pose_inputs(model, config)}


def zero_shot_inputs(model: torch.nn.Module, config: Any) -> dict[str, Any]:
    """Three candidate texts (one padded) and two images: texts and images are batched apart."""
    text = getattr(config, "text_config", None) or config
    inputs: dict[str, Any] = {"input_ids": token_ids(text, EXAMPLE_BATCH + 1, 7)}
    if "attention_mask" in inspect.signature(model.forward).parameters:
        mask = torch.ones_like(inputs["input_ids"])
        mask[-1, -2:] = 0
        inputs["attention_mask"] = mask
    return {**inputs, **image_inputs(model, config)}


def detection_queries_inputs(model: torch.nn.Module, config: Any) -> dict[str, Any]:
    """One image and three text queries of it (one padded): OWL-ViT's forward reads the queries as
    ``len(input_ids) // len(pixel_values)`` per image, so the images stay one per call, as transformers' and
    transformers.js's pipelines pass them. A detector of one text per image (:data:`ONE_TEXT_PER_IMAGE`) gets one."""
    inputs = {**zero_shot_inputs(model, config), **image_inputs(model, config, batch=1)}
    if getattr(config, "model_type", None) in ONE_TEXT_PER_IMAGE:
        inputs.update({k: inputs[k][:1] for k in ("input_ids", "attention_mask") if k in inputs})
    return inputs


# Zero-shot detectors whose forward reads one text per image, its labels as phrases ("a cat. a remote control."),
# where OWL-ViT reads one text per label
ONE_TEXT_PER_IMAGE = ("grounding-dino", "mm-grounding-dino")


def detection_queries_dynamic(model: torch.nn.Module, config: Any) -> dict[str, Any]:
    """The queries' number and length; one image (of dynamic height and width where the processor varies them). A
    detector of one text per image: that one text, its length dynamic."""
    shapes = zero_shot_dynamic(model, config)
    if getattr(config, "model_type", None) in ONE_TEXT_PER_IMAGE:
        shapes = {name: {k: v for k, v in dims.items() if k != 0} for name, dims in shapes.items()}
    return {**shapes, **{name: {k: v for k, v in dims.items() if k != 0} for name, dims in image_dynamic(
        model, config).items()}}


def zero_shot_dynamic(model: torch.nn.Module, config: Any) -> dict[str, Any]:
    texts, length = (torch.export.Dim.DYNAMIC,) * 2
    images = image_dynamic(model, config)
    return {name: images[name] if name in images else {0: texts, 1: length}
            for name in zero_shot_inputs(model, config)}


def waveform_inputs(model: torch.nn.Module, config: Any) -> dict[str, Any]:
    """An audio encoder's input (CTC, audio classification) as its feature extractor (the directory's
    preprocessor_config.json) gives two clips of other lengths, the shorter padded: raw samples or log-mel
    features, with the ``attention_mask`` where the extractor gives one (its ``return_attention_mask``: transformers'
    pipelines then feed it). Without a feature extractor: raw audio (``input_values``) of two lengths, with a mask
    where the config's convolutions are layer-normalised (otherwise padding is zeros)."""
    form = _probe_extractor(getattr(config, "name_or_path", "") or "", set(inspect.signature(model.forward).parameters))
    if form is not None:
        return form.inputs
    samples = 4000
    generator = torch.Generator().manual_seed(0)
    inputs = {"input_values": torch.randn(EXAMPLE_BATCH, samples, generator=generator)}
    if getattr(config, "feat_extract_norm", "group") == "layer":
        mask = torch.ones(EXAMPLE_BATCH, samples, dtype=torch.int64)
        mask[-1, samples // 2:] = 0
        inputs["attention_mask"] = mask
    return inputs


def waveform_dynamic(model: torch.nn.Module, config: Any) -> dict[str, Any]:
    """Dynamic batch, and the axes of the audio input that follow a clip's length, its mask's too (where the
    feature extractor pads every clip to one length, AST's 1024 frames, only the batch); every axis past the batch
    of raw audio where there is no feature extractor."""
    form = _probe_extractor(getattr(config, "name_or_path", "") or "", set(inspect.signature(model.forward).parameters))
    return _clip_shapes(waveform_inputs(model, config), form.axes if form is not None else {1: 2},
                        torch.export.Dim.DYNAMIC)


def _clip_shapes(inputs: dict[str, Any], axes: dict[int, int], batch: Any) -> dict[str, Any]:
    """``dynamic_shapes`` of an audio input (``input_features`` or ``input_values``) and its mask: ``batch`` for
    the batch, the ``axes`` that follow a clip's length dynamic from the smallest size they take, or from the
    model's own shortest where it needs more (a hint, not a named ``Dim``: an x-vector's time-delay layers need a
    third of a second of WavLM's frames, which torch.export then records as the range)."""
    clip = torch.export.Dim.DYNAMIC(min=min(axes.values())) if axes else None
    shapes: dict[str, Any] = {name: {0: batch, **dict.fromkeys(axes, clip)} for name in inputs
                              if name in ("input_features", "input_values")}
    if "attention_mask" in inputs:
        shapes["attention_mask"] = {0: batch, **({1: clip} if axes else {})}
    return shapes


class AudioForm(NamedTuple):
    """What a speech model's feature extractor makes of audio: its example (a batch of two clips of other lengths,
    the shorter padded, as the extractor pads them: the encoder's input and its ``attention_mask`` where the
    extractor gives one and the encoder takes it) and the axes of the encoder's input past the batch that follow a
    clip's length, each with its size for the shortest clip exported (a quarter of a second; none where the
    extractor pads every clip to one length: Whisper's 30 seconds)."""

    inputs: dict[str, torch.Tensor]
    axes: dict[int, int]


_CLIP_SECONDS = (1.0, 0.6, 0.25)  # the example's two clips, and the shortest, in seconds
_HEARD: dict[Any, AudioForm | None] = {}


def _probe_extractor(directory: str, takes: set[str]) -> AudioForm | None:
    """What the feature extractor in ``directory`` makes of ``_CLIP_SECONDS`` (None where the directory has none
    that transformers loads): the batch keeps the inputs of ``takes``."""
    return _probed(directory, _HEARD, lambda: _extractor_form(directory, takes), frozenset(takes))


def _extractor_form(directory: str, takes: set[str]) -> AudioForm | None:
    import numpy as np
    import transformers

    try:
        extractor = transformers.AutoFeatureExtractor.from_pretrained(directory, local_files_only=True)
        rate = int(extractor.sampling_rate)
        rng = np.random.default_rng(0)
        clips = [(rng.standard_normal(int(rate * s)) * 0.1).astype(np.float32) for s in _CLIP_SECONDS]
        alone = [extractor(c, sampling_rate=rate, return_tensors="pt") for c in clips]
        batch = extractor(clips[:2], sampling_rate=rate, padding=True, return_tensors="pt")
    except Exception:  # noqa: BLE001 - not a feature extractor of audio (an image processor), or one that needs more
        return None
    inputs = {k: torch.as_tensor(v) for k, v in batch.items() if k in takes}
    main = next((k for k in ("input_features", "input_values") if k in inputs), None)
    if main is None:
        return None
    if "attention_mask" in inputs:
        inputs["attention_mask"] = inputs["attention_mask"].long()
    shapes = [tuple(a[main].shape[1:]) for a in alone]
    return AudioForm(inputs, {i + 1: shortest for i, (one, other, shortest) in enumerate(zip(*shapes)) if one != other})


def audio_form(model: torch.nn.Module, config: Any) -> AudioForm:
    """A speech-to-text model's audio, as its feature extractor (the directory's preprocessor_config.json) gives
    it to the encoder: log-mel features (``input_features``) or raw samples (``input_values``), whatever their
    layout; without a feature extractor, a Whisper-style spectrogram the config sizes (``num_mel_bins`` by twice
    ``max_source_positions``)."""
    takes = set(inspect.signature(model.get_encoder().forward).parameters)
    form = _probe_extractor(getattr(config, "name_or_path", "") or "", takes)
    if form is not None:
        return form
    bins, positions = getattr(config, "num_mel_bins", None), getattr(config, "max_source_positions", None)
    if bins is None or positions is None:
        raise InvalidInputError(
            f"onnxport does not know the audio input of {config.model_type} models: the model directory has no "
            "feature extractor (preprocessor_config.json) that transformers loads",
            fix="save the model's feature extractor beside it (extractor.save_pretrained(directory)), or export it "
                "from Python with onnxport.export_seq2seq(model, {'input_features': ...})",
        )
    generator = torch.Generator().manual_seed(0)
    return AudioForm({"input_features": torch.randn(EXAMPLE_BATCH, bins, 2 * positions, generator=generator)}, {})


def audio_inputs(model: torch.nn.Module, config: Any) -> dict[str, Any]:
    """``audio_form``'s example."""
    return audio_form(model, config).inputs


def audio_axes(model: torch.nn.Module, config: Any) -> dict[int, int]:
    """``audio_form``'s axes that follow a clip's length, and their sizes for the shortest clip."""
    return audio_form(model, config).axes


# The encoder-decoders whose bare model's forward makes its decoder's ids of ``input_ids`` shifted right (BART's
# family): their feature-extraction example is the tokenizer's inputs alone, as transformers' pipeline feeds them.
SHIFTED_DECODER_IDS = ("bart", "mbart", "plbart", "led", "fsmt")
DECODER_LENGTH = 5  # the decoder's tokens in a bare encoder-decoder's example


def encoder_decoder_inputs(model: torch.nn.Module, config: Any) -> dict[str, Any]:
    """An encoder-decoder's example encoder inputs: its audio (``audio_form``'s) where its encoder reads audio
    (``input_features`` or ``input_values``: Whisper's), else two texts (``text_inputs``)."""
    if _reads_audio(model):
        return audio_inputs(model, config)
    return text_inputs(model, config)


def encoder_decoder_axes(model: torch.nn.Module, config: Any) -> dict[int, int] | None:
    """The axes of an encoder-decoder's audio input that follow a clip's length (``audio_axes``); None for text."""
    return audio_axes(model, config) if _reads_audio(model) else None


def _reads_audio(model: torch.nn.Module) -> bool:
    return bool({"input_features", "input_values"} & set(inspect.signature(model.get_encoder().forward).parameters))


def _features_of(model: torch.nn.Module, config: Any) -> tuple[Callable[..., Any], Callable[..., Any]] | None:
    """The inputs and dynamic shapes of a bare model that reads no text (images or clips), or that reads texts and
    images apart (CLIPModel: those of zero-shot image classification); None for a text model."""
    if takes(model, "input_ids"):
        images = takes(model, "pixel_values") and not getattr(config, "is_encoder_decoder", False) and any(
            getattr(config, name, None) is not None for name in ("vision_config", "image_size"))
        return (zero_shot_inputs, zero_shot_dynamic) if images else None  # (EmbeddingGemma 2 without a tower: text)
    if takes(model, "pixel_values"):  # (DETR's decoder reads its own queries: no ids, encoder-decoder as it is)
        return image_inputs, image_dynamic
    if getattr(config, "is_encoder_decoder", False):  # a speech encoder-decoder's decoder reads ids
        return None
    if takes(model, "input_values") or takes(model, "input_features"):
        return waveform_inputs, waveform_dynamic
    return None


def feature_inputs(model: torch.nn.Module, config: Any) -> dict[str, Any]:
    """feature-extraction's example: ``text_inputs``; for a bare encoder-decoder (``T5Model``, ``WhisperModel``),
    its encoder's inputs (``encoder_decoder_inputs``) and ``decoder_input_ids``, ``DECODER_LENGTH`` tokens of its
    decoder's vocabulary, which its forward needs (but a text model's of :data:`SHIFTED_DECODER_IDS`); for the bare
    model of an image or audio encoder (``ViTModel``, ``Wav2Vec2Model``: no ``input_ids``), a batch of images
    (``image_inputs``) or of clips (``waveform_inputs``); for one of texts and images apart (``CLIPModel``), texts and
    images (``zero_shot_inputs``)."""
    modality = _features_of(model, config)
    if modality is not None:
        return modality[0](model, config)
    if not getattr(config, "is_encoder_decoder", False):
        return text_inputs(model, config)
    inputs = encoder_decoder_inputs(model, config)
    if config.model_type in SHIFTED_DECODER_IDS and "input_ids" in inputs:
        return inputs
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else model
    ids = token_ids(config.get_text_config(decoder=True), EXAMPLE_BATCH, DECODER_LENGTH, seed=1, model=decoder)
    return {**inputs, "decoder_input_ids": ids}


def feature_dynamic(model: torch.nn.Module, config: Any) -> Any:
    """feature-extraction's ``dynamic_shapes``: ``"auto"``; for a bare encoder-decoder reading audio, the audio's axes
    that follow a clip's length (``audio_axes``, its mask's too) from the shortest clip's size, the rest of them the
    example's (a spectrogram's bins; Whisper's 30 s of frames), batch and decoder length as ``"auto"`` makes them;
    an image or audio encoder's, those of its images or clips."""
    modality = _features_of(model, config)
    if modality is not None:
        return modality[1](model, config)
    if not getattr(config, "is_encoder_decoder", False) or not _reads_audio(model):
        return "auto"
    auto = torch.export.Dim.AUTO
    shapes = _clip_shapes(feature_inputs(model, config), audio_axes(model, config), auto)
    return {**shapes, "decoder_input_ids": {0: auto, 1: auto}}


class Task(NamedTuple):
    """How a task is exported: the auto class that loads it, example inputs from the model and config, the
    ``dynamic_shapes`` (or a function of the model and config giving them; seq2seq tasks choose their own) and
    whether it is an encoder-decoder for generation, or a vision-language model (``onnxport.hf.vlm``: its
    three models make their own inputs); ``pieces``: the file stems of a task exported as several models that
    make their own inputs (mask-generation's, ``onnxport.hf.mask_generation``)."""

    auto: str
    inputs: Callable[[torch.nn.Module, Any], dict[str, Any]]
    dynamic: Any = "auto"
    seq2seq: bool = False
    vlm: bool = False
    pieces: tuple[str, ...] = ()


TASKS: dict[str, Task] = {
    "text-generation": Task("AutoModelForCausalLM", generation_inputs),
    "feature-extraction": Task("AutoModel", feature_inputs, feature_dynamic),
    "text-classification": Task("AutoModelForSequenceClassification", text_inputs),
    "image-classification": Task("AutoModelForImageClassification", image_inputs, image_dynamic),
    "image-feature-extraction": Task("AutoModel", image_inputs, image_dynamic),  # a vision model's bare features
    "zero-shot-image-classification": Task("AutoModelForZeroShotImageClassification", zero_shot_inputs,
                                           zero_shot_dynamic),
    "object-detection": Task("AutoModelForObjectDetection", image_inputs, image_dynamic),
    "image-segmentation": Task("AutoModelForSemanticSegmentation", segmentation_inputs, segmentation_dynamic),
    "depth-estimation": Task("AutoModelForDepthEstimation", image_inputs, image_dynamic),
    "image-to-image": Task("AutoModelForImageToImage", image_inputs, image_dynamic),  # Swin2SR's super-resolution
    "image-matting": Task("AutoModelForImageMatting", matting_inputs, matting_dynamic),  # VitMatte: alphas
    "pose-estimation": Task("AutoModelForPoseEstimation", pose_inputs, pose_dynamic),  # VitPose: heatmaps
    "zero-shot-object-detection": Task("AutoModelForZeroShotObjectDetection", detection_queries_inputs,
                                       detection_queries_dynamic),  # OWL-ViT, OWLv2: an image's text queries
    "audio-classification": Task("AutoModelForAudioClassification", waveform_inputs, waveform_dynamic),
    "audio-frame-classification": Task("AutoModelForAudioFrameClassification", waveform_inputs, waveform_dynamic),
    "audio-xvector": Task("AutoModelForAudioXVector", waveform_inputs, waveform_dynamic),  # speaker embeddings
    "text2text-generation": Task("AutoModelForSeq2SeqLM", text_inputs, seq2seq=True),
    "automatic-speech-recognition": Task("AutoModelForSpeechSeq2Seq", audio_inputs, audio_axes, seq2seq=True),
    "fill-mask": Task("AutoModelForMaskedLM", encoder_inputs),
    "token-classification": Task("AutoModelForTokenClassification", encoder_inputs),
    "question-answering": Task("AutoModelForQuestionAnswering", encoder_inputs),
    "sentence-similarity": Task("AutoModel", encoder_inputs),  # the transformer of a sentence-transformers directory
    "image-text-to-text": Task("AutoModelForImageTextToText", text_inputs, vlm=True),
    # a language model that hears (Voxtral, Granite Speech), split as a vision-language model is, its audio encoder in
    # place of the image encoder (onnxport.hf.multimodal)
    "audio-text-to-text": Task("AutoModelForMultimodalLM", text_inputs, vlm=True),
    # an encoder-decoder whose encoder reads the image (a VisionEncoderDecoder: TrOCR, Donut, ViT-GPT2), exported as
    # for image-text-to-text; its decoder starts from its start token, or from Donut's question prompt
    "image-to-text": Task("AutoModelForImageTextToText", text_inputs, vlm=True),
    "document-question-answering": Task("AutoModelForImageTextToText", text_inputs, vlm=True),
    "text-to-audio": Task("AutoModelForTextToWaveform", text_inputs),  # VITS: onnxport.hf.text_to_audio
    "mask-generation": Task("AutoModelForMaskGeneration", text_inputs,  # SAM: onnxport.hf.mask_generation
                            pieces=("vision_encoder", "prompt_encoder_mask_decoder")),
    "text-to-image": Task("DiffusionPipeline", text_inputs),  # a diffusers directory: onnxport.hf.diffusion
    # PatchTST, PatchTSMixer: loaded by their own class (transformers' auto class loads TimesFM alone), which
    # onnxport.hf.forecasting names
    "time-series-forecasting": Task("AutoModelForTimeSeriesPrediction", series_inputs, series_dynamic),
}
# The tasks of an encoder-decoder whose encoder reads the image (``multimodal.components.images_encoded``), and the
# model types each takes (None: any such model): document-question-answering's prompt is Donut's, a question between
# its task tokens, which a VisionEncoderDecoder's decoder reads.
ENCODED_TASKS = {"image-to-text": None, "document-question-answering": ("vision-encoder-decoder",)}
# feature-extraction by a bare encoder-decoder for transformers.js (its EncoderDecoder models: T5Model, WhisperModel):
# the model split as for generation (encoder_model, decoder_model_merged), its decoder giving its last_hidden_state
ENCODER_DECODER_FEATURES = Task("AutoModel", encoder_decoder_inputs, encoder_decoder_axes, seq2seq=True)
# automatic-speech-recognition by a CTC head (Wav2Vec2ForCTC, HuBERT's, WavLM's: onnxport.hf.tasks.is_ctc): one
# model, raw audio to a character's logits per frame
CTC_SPEECH = Task("AutoModelForCTC", waveform_inputs, waveform_dynamic)
