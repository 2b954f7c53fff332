"""The example inputs a vision-language model's pieces are exported and verified with.

The image encoder's are what the model's own image processor (the directory's ``preprocessor_config.json``)
gives for made-up pictures of prompts (a processor that batches by prompt, Idefics3's, gives a batch of prompts'
images, padded): three pictures of different sizes in two prompts for the capture, then one, and three prompts of
one, for verification (the processor's sizes, tiles and grids, whatever they are, are inputs the model is meant
to take; an any-resolution model's tiles padded with an empty one in a set, as a batch pads them). A dim whose
size differs between those is dynamic. A model whose encoder takes one image at a time of its own size
(``Family.per_image``) gets one picture per set. A directory without an image processor gets pixels of the
vision config's ``image_size`` instead (NaFlex patches of made-up grids, for a model that takes
``spatial_shapes``; videos of 4, 2 and 3 frames for a video model). An encoder that reads a text prompt beside
each image (InstructBLIP's Q-Former) gets made-up prompts of its vocabulary, of another length in each set.

The audio encoder's (a model that also hears: Gemma 4's) are what the model's feature extractor (the directory's
``processor_config.json``'s ``feature_extractor``, or its ``preprocessor_config.json``) gives for made-up clips:
two of different lengths in a batch, padded, for the capture, then a short one and a long one for verification
(:data:`CLIPS`); a directory without one gets random features of the mel bins the tower takes, masked as a batch
pads them.

The token embedding's are a batch of two prompts holding image tokens; the merge's those and their rows of image
features; the decoder's a step of three tokens on a four-token past, three positions per token for a
``rope-index`` family, the flag column set on two of the new tokens for a family that marks image tokens.
"""

from __future__ import annotations

import contextlib
import inspect
from typing import Any

import numpy as np
import torch

from onnxport.hf import stream
from onnxport.hf.examples import EXAMPLE_BATCH, NEW, PAST, image_size, token_ids
from onnxport.hf.multimodal.components import IMAGE_INPUTS, as_image_inputs, image_features
from onnxport.hf.multimodal.families import VIDEOS_AS_IMAGES, Family
from onnxport.hf.signature import cache_argument, cache_of

__all__ = ["CLIPS", "PICTURES", "ImageSets", "audio_sets", "decoder_inputs", "dynamic_dims", "encoder_image_sets",
           "heard_sets", "image_sets", "naflex_pixels", "pictures", "prompt_ids", "required_image_inputs",
           "with_query_prompts"]

# Made-up pictures (height, width), by prompt: the capture's two prompts (the first of two pictures), then one
# picture, and three prompts of one, for verification.
PICTURES = ((((40, 48), (32, 64)), ((56, 40),)), (((24, 64),),), (((32, 64),), ((56, 40),), ((40, 48),)))


def pictures(sizes: tuple[tuple[int, int], ...], seed: int = 0) -> list[Any]:
    """Random RGB pictures of ``sizes``, as PIL images."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)) for h, w in sizes]


class ImageSets(list):
    """The image encoder's input sets, the capture's first; ``dynamic``: the dims whose size differs among them."""

    @property
    def dynamic(self) -> dict[str, dict[int, Any]]:
        return dynamic_dims(self)


def dynamic_dims(sets: list[dict[str, torch.Tensor]]) -> dict[str, dict[int, Any]]:
    """``{input: {dim: Dim.DYNAMIC}}`` for each dim whose size differs among ``sets``."""
    from torch.export import Dim

    return {name: {d: Dim.DYNAMIC for d in range(value.dim()) if len({s[name].shape[d] for s in sets}) > 1}
            for name, value in sets[0].items()}


def image_sets(model: torch.nn.Module, config: Any, directory: str | None, per_image: bool) -> ImageSets:
    """The image encoder's inputs (see the module), with the prompt text it reads where it reads one
    (:func:`with_query_prompts`)."""
    sets = _pixel_sets(model, config, directory, per_image)
    return with_query_prompts(model, config, sets) if "qformer_input_ids" in required_image_inputs(model) else sets


def required_image_inputs(model: torch.nn.Module) -> set[str]:
    """The parameters of the model's ``get_image_features`` that have no default."""
    parameters = inspect.signature(image_features(model)).parameters
    return {name for name, p in parameters.items() if p.default is inspect.Parameter.empty
            and p.kind not in (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)}


def with_query_prompts(model: torch.nn.Module, config: Any, sets: ImageSets) -> ImageSets:
    """``sets`` with the text prompt an image encoder reads beside the pixels (InstructBLIP's Q-Former:
    ``qformer_input_ids`` and their mask, one prompt per image, as its processor gives them): ids of its Q-Former's
    vocabulary, of other lengths in each set (any prompt's length is one the model takes)."""
    vocab = config.qformer_config.vocab_size
    generator = torch.Generator().manual_seed(2)
    out = ImageSets()
    for i, given in enumerate(sets):
        images = next(iter(given.values())).shape[0]
        ids = torch.randint(3, vocab, (images, 5 + i), generator=generator)
        out.append({**given, "qformer_input_ids": ids, "qformer_attention_mask": torch.ones_like(ids)})
    return out


def encoder_image_sets(model: torch.nn.Module, config: Any, directory: str | None) -> ImageSets:
    """The encoder's image inputs of a model that reads its images as its encoder's input
    (``components.images_encoded``), as its image processor gives them (a patch mask as int64, as a text mask is),
    three pictures, then one, then three, as :func:`image_sets` makes them."""
    import inspect

    from onnxport.hf.seq2seq import encoder_of

    taken = {name for name in inspect.signature(encoder_of(model).forward).parameters
             if name in (model.main_input_name, "attention_mask")}
    sets = _pixel_sets(model, config, directory, False, taken)
    return ImageSets({name: value.long() if name == "attention_mask" else value for name, value in given.items()}
                     for given in sets)


def _padded_tiles(sets: ImageSets) -> ImageSets:
    """``sets`` with one more empty tile in the second's ``pixel_values`` (``[images, tiles, ...]``), as a processor
    pads an image's tiles to the most of its batch: the tiles' count is then dynamic, as the images' sizes make it."""
    out = ImageSets(sets)
    pixels = out[1]["pixel_values"]
    out[1] = {**out[1], "pixel_values": torch.cat([pixels, torch.zeros_like(pixels[:, :1])], dim=1)}
    return out


def _pixel_sets(model: torch.nn.Module, config: Any, directory: str | None, per_image: bool,
                taken: set[str] | None = None) -> ImageSets:
    processor = _image_processor(directory)
    called = _call_settings(directory)
    if taken is None:
        taken = {"pixel_values"} if per_image else _taken(model)  # one image's size is its tensor's
    groups = [((prompts[0][0],),) for prompts in PICTURES] if per_image else list(PICTURES)
    if processor is not None:
        with contextlib.suppress(Exception):  # a processor that cannot run here (it needs torchvision, ...)
            sets = ImageSets()
            for seed, prompts in enumerate(groups):  # by prompt: a processor may batch a prompt's pictures
                given = processor([pictures(sizes, seed + i) for i, sizes in enumerate(prompts)], return_tensors="pt",
                                  **called)
                sets.append({k: _in_dtype(v, model) for k, v in as_image_inputs(given).items()
                             if k in taken and isinstance(v, torch.Tensor)})
            tiled = getattr(config, "image_grid_pinpoints", None) and sets[0]["pixel_values"].dim() == 5
            return _padded_tiles(sets) if tiled else sets
    vision = getattr(config, "vision_config", None) or config.encoder  # a VisionEncoderDecoder's is its encoder
    if "spatial_shapes" in taken:  # NaFlex patches (LFM2-VL's), whose processor could not run here
        counts = [sum(map(len, prompts)) for prompts in groups]
        return ImageSets(naflex_pixels(config, [_GRIDS[(seed + k) % len(_GRIDS)] for k in range(count)], seed)
                         for seed, count in enumerate(counts))
    height, width = image_size(vision) or (224, 224)
    channels = getattr(vision, "num_channels", 3)
    generator = torch.Generator().manual_seed(0)
    frames = (4, 2, 3) if config.model_type in VIDEOS_AS_IMAGES else ()  # a video's frames, another count a set
    return ImageSets({"pixel_values": torch.randn(sum(map(len, prompts)), *frames[i:i + 1], channels, height, width,
                                                  generator=generator)} for i, prompts in enumerate(groups))


def _in_dtype(value: torch.Tensor, model: torch.nn.Module) -> torch.Tensor:
    """A processor's floating output in the model's floating dtype (Llama 4's torchvision processor gives its
    pixels in bfloat16, whatever the model's)."""
    if not value.is_floating_point():
        return value
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), value.dtype)
    return value.to(dtype)


# NaFlex grids (rows, columns of patches) in units of the model's downsampling factor, for made-up images.
_GRIDS = ((3, 4), (1, 8), (4, 2), (2, 2), (2, 5))


def naflex_pixels(config: Any, grids: list[tuple[int, int]], seed: int = 0) -> dict[str, torch.Tensor]:
    """Random NaFlex patches of images whose grids are ``grids`` in units of the config's ``downsample_factor``
    (LFM2-VL's blocks, which each grid must hold whole): ``pixel_values`` ``[images, most patches, 3 * p * p]``,
    ``pixel_attention_mask`` and ``spatial_shapes``, as a NaFlex processor pads and gives them."""
    unit = getattr(config, "downsample_factor", 1) or 1
    patch = config.vision_config.patch_size
    shapes = torch.tensor([[h * unit, w * unit] for h, w in grids])
    counts = shapes.prod(-1)
    longest = int(counts.max())
    generator = torch.Generator().manual_seed(seed)
    mask = (torch.arange(longest)[None] < counts[:, None]).to(torch.int64)
    pixels = torch.randn(len(grids), longest, 3 * patch * patch, generator=generator) * mask[..., None]
    return {"pixel_values": pixels, "pixel_attention_mask": mask, "spatial_shapes": shapes}


# Made-up clips (seconds), by set: the capture's batch of two, then a short clip and a long one, for verification.
# All but the short one hold more rows than one block of Gemma 4's chunked attention (12 rows, 0.48 s), so that the
# count of blocks is dynamic, as the clips' lengths make it.
CLIPS = ((1.3, 0.7), (0.15,), (2.0,))
_FRAMES_PER_SECOND = 100  # a mel frame every 10 ms, as Gemma's feature extractors make them


def audio_sets(model: torch.nn.Module, config: Any, directory: str | None) -> ImageSets:
    """The audio encoder's input sets, the capture's first (see the module): ``input_features`` ``[batch, frames,
    mel]`` and ``input_features_mask`` ``[batch, frames]``, the frames dynamic. Without a feature extractor, the mel
    bins are the audio config's ``input_feat_size`` (Gemma 3n's), or else its first convolution's channels (Gemma
    4's tower reads as many bins as those: its input projection's width is made of them)."""
    extractor = _feature_extractor(directory)
    rng = np.random.default_rng(0)
    sets = ImageSets()
    for clips in CLIPS:
        if extractor is not None:
            rate = extractor.sampling_rate
            waves = [(0.1 * rng.standard_normal(int(seconds * rate))).astype(np.float32) for seconds in clips]
            given = extractor(waves, sampling_rate=rate, return_tensors="pt", padding="longest")
            sets.append({name: given[name] for name in ("input_features", "input_features_mask")})
            continue
        audio = config.audio_config
        mel = getattr(audio, "input_feat_size", None) or audio.subsampling_conv_channels[0]
        frames = [int(seconds * _FRAMES_PER_SECOND) for seconds in clips]
        mask = torch.arange(max(frames))[None] < torch.tensor(frames)[:, None]
        features = torch.from_numpy(rng.standard_normal((len(frames), max(frames), mel)).astype(np.float32))
        sets.append({"input_features": features * mask[..., None], "input_features_mask": mask})
    return sets


def heard_sets(config: Any, directory: str | None) -> ImageSets:
    """The input sets of the audio encoder of a model that hears alone (``components.HeardAudioEncoder``): the
    feature extractor's ``input_features`` of each clip of :data:`CLIPS`, run alone as transformers.js's
    processors run it, the clips of a set joined where their features are of one size (Voxtral's Whisper extractor
    pads each to a 30 s window, and a prompt's windows go in one batch), else the first clip alone (Granite Speech's
    stacked frames, of the clip's length). Without a feature extractor this transformers can build (Granite
    Speech's needs torchaudio), random features of the audio config's ``num_mel_bins`` (Granite Speech's stacked
    pairs of mel frames), ``2 * max_source_positions`` frames for a tower that takes a fixed count (Voxtral's), else
    one per 20 ms."""
    extractor = _feature_extractor(directory)
    rng = np.random.default_rng(0)
    audio = getattr(config, "audio_config", None) or config.encoder_config
    fixed = getattr(audio, "max_source_positions", None)
    sets = ImageSets()
    for clips in CLIPS:
        if extractor is not None:
            rate = extractor.sampling_rate
            each = [extractor((0.1 * rng.standard_normal(int(seconds * rate))).astype(np.float32), sampling_rate=rate,
                              return_tensors="pt")["input_features"] for seconds in clips]
        else:
            frames = [2 * fixed if fixed else int(seconds * _FRAMES_PER_SECOND) // 2 for seconds in clips]
            shape = (lambda n: (1, audio.num_mel_bins, n)) if fixed else (lambda n: (1, n, audio.num_mel_bins))
            each = [torch.from_numpy(rng.standard_normal(shape(n)).astype(np.float32)) for n in frames]
        joined = len({t.shape[1:] for t in each}) == 1
        sets.append({"input_features": torch.cat(each) if joined else each[0]})
    return sets


def _feature_extractor(directory: str | None) -> Any:
    """The directory's audio feature extractor: ``processor_config.json``'s ``feature_extractor`` (as transformers 5
    saves a processor's), or ``preprocessor_config.json``'s; None where it has none this transformers can build."""
    if directory is None:
        return None
    import json
    import os

    import transformers

    with contextlib.suppress(Exception):  # no such file, or settings this transformers cannot build
        with open(os.path.join(directory, "processor_config.json"), encoding="utf-8") as f:
            settings = json.load(f).get("feature_extractor")
        extractor = getattr(transformers, settings["feature_extractor_type"]).from_dict(settings)
        return extractor
    with contextlib.suppress(Exception):
        extractor = transformers.AutoFeatureExtractor.from_pretrained(directory, local_files_only=True)
        return extractor if "input_features" in getattr(extractor, "model_input_names", ()) else None
    return None


def _image_processor(directory: str | None) -> Any:
    if directory is None:
        return None
    import transformers

    try:
        return transformers.AutoImageProcessor.from_pretrained(directory, local_files_only=True)
    except Exception:  # noqa: BLE001 - no preprocessor_config.json, or one this transformers cannot build
        return None


def _call_settings(directory: str | None) -> dict[str, Any]:
    """What the model's processor hands its image processor at each call: a Pixtral processor's patch size, its
    ``patch_size`` times its ``spatial_merge_size`` (``processor_config.json``)."""
    import json
    import os

    try:
        with open(os.path.join(directory or "", "processor_config.json"), encoding="utf-8") as f:
            settings = json.load(f)
    except (OSError, ValueError):
        return {}
    if not isinstance(settings, dict) or not {"patch_size", "spatial_merge_size"} <= set(settings):
        return {}
    side = settings["patch_size"] * settings["spatial_merge_size"]
    return {"patch_size": {"height": side, "width": side}}


def _taken(model: torch.nn.Module) -> set[str]:
    """The processor outputs the model's ``get_image_features`` takes (of those an image encoder can)."""
    parameters = inspect.signature(image_features(model)).parameters
    inner = getattr(getattr(model, "model", None), "get_image_features", None)
    if inner is not None:
        parameters = {**parameters, **inspect.signature(inner).parameters}
    return {name for name in IMAGE_INPUTS if name in parameters}


def prompt_ids(config: Any, family: Family, rows: int) -> torch.Tensor:
    """A batch of two prompts, each holding ``rows // 2`` image tokens."""
    per_prompt = rows // EXAMPLE_BATCH
    ids = token_ids(config.get_text_config(), EXAMPLE_BATCH, per_prompt + 4)
    ids[:, 2:2 + per_prompt] = family.image_token
    return ids


def decoder_inputs(model: torch.nn.Module, config: Any, family: Family, per_layer_apart: bool = False
                   ) -> dict[str, Any]:
    """A decode step of three tokens on a four-token past (see the module); with ``per_layer_apart``, the
    per-layer embeddings an input of their own (``per_layer_inputs``) rather than columns."""
    text = config.get_text_config()
    generator = torch.Generator().manual_seed(1)
    prompt = token_ids(text, EXAMPLE_BATCH, PAST)
    if any(p.is_meta for p in model.parameters()):
        cache = stream.meta_cache(model, input_ids=prompt)
    else:
        with torch.no_grad():
            cache = cache_of(model(input_ids=prompt, attention_mask=torch.ones_like(prompt), use_cache=True))
    apart = family.per_layer if per_layer_apart else 0
    embeds = torch.randn(EXAMPLE_BATCH, NEW, family.width - apart, generator=generator)
    if family.image_flag:  # two image tokens among the new ones, seeing each other
        embeds[..., -1] = 0
        embeds[:, :2, -1] = 1
    positions = torch.arange(PAST, PAST + NEW).expand(EXAMPLE_BATCH, NEW).clone()
    if family.positions == "rope-index":
        positions = positions.expand(3, EXAMPLE_BATCH, NEW).clone()
    step = {"inputs_embeds": embeds, "attention_mask": torch.ones(EXAMPLE_BATCH, PAST + NEW, dtype=torch.int64),
            "position_ids": positions, cache_argument(model): cache}
    if apart:
        layers = config.get_text_config().num_hidden_layers
        step["per_layer_inputs"] = torch.randn(EXAMPLE_BATCH, NEW, layers, apart // layers, generator=generator)
    return step
