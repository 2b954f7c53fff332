"""The model, directory and prompts of ``image_text_census.py``: a tiny vision-language model of a type, saved with
a word-level tokenizer and its image processor, and the processor-like inputs of its two cases, made without the
type's transformers processor (most need torchvision, which is not installed here).

- ``build``: ``census_build.tiny_config`` (image size at most 64, patches of 8), bos/eos/pad set as
  ``export_hf_census.set_token_ids`` sets them, and the config's other special ids (``image_token_id``,
  ``video_token_id``, ``boi_token_index``, ...) that lie past the text vocabulary or on bos/eos/pad moved to distinct
  ids at its top; the vision layers a projector reads clamped to the tiny tower's, LLaVA-NeXT's grid pinpoints to the
  tiny side, a vision config added where the config's defaults hold none (Gemma 4); the mapping's class, seeded.
- ``write_tokenizer``: a whitespace word-level tokenizer over the text vocabulary (``<pad>`` 0, ``<s>`` 1, ``</s>``
  2, each special id named after its key, ``<image>`` for the image token, then ``w3``...), padding on the left.
- ``write_image_processor``: the type's image processor as ``export_hf_census_images.write_processor`` saves it
  (the PIL class, sizes shrunk to the config's), then what a vision-language processor holds besides made to agree
  with the tiny config: ``patch_size``, ``merge_size``, ``temporal_patch_size`` from the vision config, pixel
  budgets (``min_pixels``/``max_pixels``) of a few merged patches to a 64-pixel square, tiles of the config's side
  and at most 2 of them, 70 rows per image where the processor counts them (Gemma 4's least). A type whose
  ``get_image_features`` takes ``image_grid_thw`` and that has no PIL processor of its own borrows Qwen2-VL's; one
  that takes ``image_position_ids``, Gemma 4's, cutting patches of its model patch (Gemma 4 Unified's).
- ``case_inputs``: each case's pictures through that processor (one call over all the case's images, in prompt
  order; a list per prompt where the processor wants one), each image's count of feature rows from the model's
  own ``get_image_features`` on that image alone, and ``input_ids`` of a few words, that many image tokens per
  image, a few words, left-padded; ``attention_mask``; ``mm_token_type_ids``/``token_type_ids`` = image tokens
  where the forward takes them (a prompt that is a prefix attending both ways, PaliGemma's: 0 throughout, as its
  processor marks it). A type with no usable processor gets random ``pixel_values`` of the config's size (NaFlex
  patches of grids of 16-pixel units for one whose ``get_image_features`` takes ``spatial_shapes``; videos of 4
  frames for a video model, its video token set past the vocabulary as an image token is). A type
  whose encoder reads the images (a VisionEncoderDecoder, Pix2Struct: ``images_encoded``) takes no prompt: each
  case's first image of each prompt, through its processor, and generation from the decoder's start token.
"""

from __future__ import annotations

import inspect
import json
import math
import os
from typing import Any

import numpy as np

from export_hf_census import set_token_ids
from export_hf_census_common import MAX_PARAMS
from export_hf_census_images import SIDE, config_size, write_processor
from onnxport.hf.multimodal.components import image_features, images_encoded
from onnxport.hf.multimodal.families import PREFIX_BOTH_WAYS, VIDEOS_AS_IMAGES

WORDS = [5, 17, 33, 8, 42, 7, 12, 9, 21, 30]
# The census's two cases: pictures (height, width) per prompt.
CASES = {"one": [[(40, 48)]], "batch": [[(56, 40)], [(32, 64), (48, 40)]]}
_NOT_SPECIAL = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id", "sep_token_id")


def text_config(config: Any) -> Any:
    try:
        return config.get_text_config()
    except Exception:  # noqa: BLE001
        return config


def vocab_of(config: Any) -> int:
    vocab = getattr(text_config(config), "vocab_size", None) or getattr(config, "vocab_size", None)
    return vocab if isinstance(vocab, int) and vocab > 16 else 1024


def _special_keys(config: Any) -> list[str]:
    return [k for k, v in config.to_dict().items() if isinstance(v, int) and not isinstance(v, bool)
            and k.endswith(("token_id", "token_index", "patch_id")) and k not in _NOT_SPECIAL and not k.startswith("_")]


def place_special_ids(config: Any) -> dict[str, list[int]]:
    """The config's special ids past the text vocabulary, or on bos/eos/pad, moved to distinct ids at its top (the
    same old id to the same new one); the changes."""
    vocab = vocab_of(config)
    text = text_config(config)
    reserved = {getattr(text, k, None) for k in ("bos_token_id", "eos_token_id", "pad_token_id")}
    moved: dict[int, int] = {}
    changed: dict[str, list[int]] = {}
    top = vocab - 1
    for key in _special_keys(config):
        value = getattr(config, key)
        if 0 <= value < vocab - 16 and value not in reserved:
            continue
        if value not in moved:
            while top in reserved or top in moved.values():
                top -= 1
            moved[value] = top
        if moved[value] != value:
            setattr(config, key, moved[value])
            changed[key] = [value, moved[value]]
    return changed


def fit_feature_layers(config: Any) -> dict[str, list[Any]]:
    """Vision layers the projector reads (VipLLaVA's ``[-2, -5, -8, -11, 6]``) that a 2-layer tower lacks, clamped to
    the layers it has (as many of them, so the projector's width holds)."""
    layers = _config_int(config, "num_hidden_layers", "depth", "num_layers")
    changed = {}
    for key in ("vision_feature_layers", "vision_feature_layer"):
        value = getattr(config, key, None)
        if layers is None or not isinstance(value, (list, int)) or isinstance(value, bool):
            continue
        clamp = [max(-(layers + 1), min(layers, v)) for v in (value if isinstance(value, list) else [value])]
        new = clamp if isinstance(value, list) else clamp[0]
        if new != value:
            setattr(config, key, new)
            changed[key] = [value, new]
    return changed


# Widths that shrinking leaves at their defaults while the widths they must agree with shrink, by type: a config
# key path (``vision_config.x``) and the value it takes, or the key path whose value it copies.
WIDTHS = {
    "florence2": {"vision_config.projection_dim": "text_config.d_model"},  # the projector's output: the text width
    # the pixel shuffle (ratio 0.5) gives 4x the tower's 64 channels to the adapter, whose output the projector reads
    "llama4": {"vision_config.intermediate_size": 256, "vision_config.projector_input_dim": 64,
               "vision_config.projector_output_dim": 64, "vision_config.vision_output_dim": 64},
    "muse_glimmer": {"out_hidden_size": 256, "projector_hidden_size": 64},  # 64 channels x merge 2 x 2, in
    # its processor takes images of 490 or 980 pixels, and its projector 35 x 35 or 70 x 70 patches: 490 in 14s
    "aria": {"vision_config.image_size": 490, "vision_config.patch_size": 14},
    # the SAM neck's last channels feed the vision encoder, whose width shrank to 64
    "deepseek_ocr2": {"vision_config.sam_config.downsample_channels": [64, 64]},
    "unlimited_ocr": {"vision_config.sam_config.downsample_channels": [64, 64]},
    "molmo2": {"vision_config.num_position_embeddings": 64},  # one per patch of its 64-pixel crop: 8 x 8 of 8 pixels
}


# The types whose image processor's size is a patch's side (Inkling's: its processor cuts each image into patches of
# that side, each one row of its vision tower's), by the config's sizes it is the product of: its patch_size, times
# its spatial_merge_size for Inkling 2 (whose adapter merges 2 x 2 patches into a row).
PATCH_SIDED = {"inkling_mm_model": ("patch_size",), **dict.fromkeys(("inkling2", "inkling2_loop"),
                                                                    ("patch_size", "spatial_merge_size"))}


# Settings a config class validates that shrinking breaks, set before the config is built, by type.
VALID = {
    "molmo2": {"adapter_config.vision_feature_layer": [-1, -2]},  # its adapter reads 2 layers of a 2-layer tower
    "muse_spark": {"audio_config.num_hidden_layers": 4},  # one per entry of its audio tower's stage lists
    "deepseek_ocr2": {"text_config.mlp_layer_types": ["dense", "sparse"]},  # a checkpoint's: one per layer
    "pix2struct": {"vision_config.patch_embed_hidden_size": 768},  # a 16x16 RGB patch, as its processor cuts it
    # a thinker's config.json holds its vision start token, which its config class does not declare (its rope index
    # reads it): Qwen2.5-Omni's and Qwen3-Omni's checkpoints save 151652
    **dict.fromkeys(("qwen2_5_omni_thinker", "qwen3_omni_moe_thinker"), {"vision_start_token_id": 151652}),
    "fast_vlm": {"vision_config.hidden_size": 3072},  # the width its timm tower (fastvit_mci3) gives, unshrunk
    # its head's rows: the vocabulary before padding, which cannot pass the shrunk vocabulary (1024)
    **dict.fromkeys(("inkling2", "inkling2_loop"), {"text_config.unpadded_vocab_size": 1024}),
    "gemma3n": {"text_config.num_hidden_layers": 4, "text_config.num_kv_shared_layers": 2,  # a checkpoint's pattern:
                "text_config.layer_types": ["sliding_attention", "full_attention"] * 2,  # shared layers of each
                "text_config.intermediate_size": 64, "text_config.activation_sparsity_pattern": [0.0] * 4,  # type
                # its timm MobileNetV5 a quarter as wide (38M parameters, not 300M), its 2048 features kept, and
                # per-layer embeddings of the shrunk vocabulary
                "vision_config.model_args": {"channel_multiplier": 0.25}, "vision_config.hidden_size": 2048,
                "text_config.vocab_size_per_layer_input": 1024},
}


def fit_widths(config: Any) -> dict[str, list[Any]]:
    """The type's ``WIDTHS`` set on ``config``; the changes."""
    def holder_and_key(path: str) -> tuple[Any, str]:
        *parents, key = path.split(".")
        holder = config
        for name in parents:
            holder = getattr(holder, name)
        return holder, key

    changed = {}
    for path, value in WIDTHS.get(config.model_type, {}).items():
        holder, key = holder_and_key(path)
        new = getattr(*holder_and_key(value)) if isinstance(value, str) else value
        if getattr(holder, key, None) != new:
            changed[path] = [getattr(holder, key, None), new]
            setattr(holder, key, new)
    return changed


def fit_global_layers(config: Any) -> dict[str, list[Any]]:
    """A SAM-style tower's global-attention layers (``global_attn_indexes``, [2, 5, 8, 11]) that a 2-layer tower
    lacks, moved onto the layers it has (DeepSeek-VL hybrid reads the hidden states after the first)."""
    changed = {}
    for name in ("vision_config", "high_res_vision_config"):
        sub = getattr(config, name, None)
        indexes, layers = getattr(sub, "global_attn_indexes", None), getattr(sub, "num_hidden_layers", None)
        if isinstance(indexes, list) and isinstance(layers, int) and any(i >= layers for i in indexes):
            sub.global_attn_indexes = sorted({min(i, layers - 1) for i in indexes[:layers]})
            changed[name] = [indexes, sub.global_attn_indexes]
    return changed


def add_vision_config(config: Any) -> Any:
    """A config whose defaults hold no vision config (Gemma 4's): built again with its vision sub-config's class's
    defaults, shrunk as the rest."""
    import census_build as cb

    sub = (getattr(config, "sub_configs", None) or {}).get("vision_config")
    if getattr(config, "vision_config", "absent") is not None or sub is None:
        return config
    settings = config.to_dict()
    settings["vision_config"] = cb.shrink(sub().to_dict())
    return type(config).from_dict(settings)


def build(model_type: str, class_name: str, row: dict[str, Any]) -> tuple[Any, Any]:
    import torch
    import transformers

    import census_build as cb

    config = cb.tiny_config(model_type, settings=VALID.get(model_type))
    if model_type in VALID:
        row["valid_set"] = VALID[model_type]
    if getattr(config, "vision_config", "absent") is None:
        config = add_vision_config(config)
        row["vision_config_added"] = getattr(config, "vision_config", None) is not None
    widths = {**fit_widths(config), **fit_global_layers(config)}
    if widths:
        row["widths_set"] = widths
    layers = fit_feature_layers(config)
    if layers:
        row["feature_layers_set"] = layers
    changed = set_token_ids(config)
    if changed:
        row["token_ids_set"] = changed
    if isinstance(getattr(config, "image_grid_pinpoints", None), list):  # LLaVA-NeXT's any-resolution grids
        side = _config_int(config, "image_size") or SIDE
        row["grid_pinpoints_set"] = [[side, side], [side, 2 * side], [2 * side, side]]
        config.image_grid_pinpoints = row["grid_pinpoints_set"]
    videos = ("video_token_index",) if model_type in VIDEOS_AS_IMAGES else ()  # its video token stands for rows
    unset = [name for name in ("image_token_index", "image_token_id", *videos) if hasattr(config, name)
             and getattr(config, name) is None]
    if unset:  # as a checkpoint its processor saved has it (BLIP-2's image tokens for its query outputs)
        setattr(config, unset[0], vocab_of(config) + 1)
        row["image_token_set"] = unset[0]
    moved = place_special_ids(config)
    if moved:
        row["special_ids_moved"] = moved
    cls = getattr(transformers, class_name)
    with torch.device("meta"):
        meta = cls(config)
    row["params"] = n = sum(p.numel() for p in meta.parameters())
    del meta
    if n > MAX_PARAMS:
        raise MemoryError(f"{n / 1e6:.0f}M parameters after shrinking (limit {MAX_PARAMS / 1e6:.0f}M)")
    torch.manual_seed(0)
    return config, cls(config).eval()


def special_names(config: Any) -> dict[int, str]:
    """id -> token name of the config's special ids (``<image>`` for the image token)."""
    from onnxport.hf.multimodal.families import image_token_id

    names = {getattr(config, k): f"<{k.removesuffix('_id').removesuffix('_index')}>" for k in _special_keys(config)}
    try:
        names[image_token_id(config)] = "<image>"
    except Exception:  # noqa: BLE001 - a config without one: no inputs, said later
        pass
    return names


def write_tokenizer(directory: str, config: Any) -> None:
    """A whitespace word-level tokenizer over the text vocabulary, special ids named (see the module)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = vocab_of(config)
    specials = special_names(config)
    words = {"<pad>": 0, "<s>": 1, "</s>": 2}
    for i in range(3, vocab):
        words[specials.get(i, f"w{i}")] = i
    tok = Tokenizer(models.WordLevel(words, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(os.path.join(directory, "tokenizer.json"))
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
                   "pad_token": "<pad>", "unk_token": "<pad>", "padding_side": "left", "model_max_length": 4096}, f)


def _vision(config: Any) -> Any:
    """The vision config: ``vision_config``, or that of a sub-config (T5Gemma 2's encoder's)."""
    for holder in (config, getattr(config, "encoder", None)):
        vision = getattr(holder, "vision_config", None)
        if vision is not None and not isinstance(vision, str):
            return vision
    return config


def _config_int(config: Any, *names: str) -> int | None:
    for holder in (_vision(config), config):
        for name in names:
            value = getattr(holder, name, None)
            if isinstance(value, (list, tuple)) and value:
                value = value[0]
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


# The processors a type with no PIL processor of its own borrows, by an input its get_image_features takes: Qwen2-VL's
# makes image_grid_thw; Gemma 4's makes patches with their image_position_ids (Gemma 4 Unified's, of its model patch).
BORROWED = {"image_grid_thw": ("qwen2_vl", "Qwen2-VL's"), "image_position_ids": ("gemma4", "Gemma 4's")}
# ... and by type: transformers' FastVLM checkpoints hold a LlavaProcessor with LLaVA's CLIP image processor.
BORROWED_BY_TYPE = {"fast_vlm": ("llava", "LLaVA's")}


def write_image_processor(directory: str, model_type: str, config: Any, takes: tuple[str, ...] = ()
                          ) -> dict[str, Any]:
    """The type's image processor saved into ``directory``, made to agree with the tiny config (see the module);
    what was saved (or why none). ``takes``: the inputs the model's ``get_image_features`` takes, by which a type
    with no PIL processor of its own borrows another's (``BORROWED``)."""
    import transformers

    saved = write_processor(directory, model_type, config)
    borrow = next((BORROWED[name] for name in takes if name in BORROWED), BORROWED_BY_TYPE.get(model_type))
    if saved.get("saved") is None and borrow is not None:
        why = saved.get("why")
        saved = write_processor(directory, borrow[0], config)
        saved["borrowed"] = f"{borrow[1]} ({why})"
    if saved.get("saved") is None:
        return saved
    path = os.path.join(directory, "preprocessor_config.json")
    cls = getattr(transformers, saved["saved"])
    with open(path, encoding="utf-8") as f:
        settings = json.load(f)
    defaults = cls().to_dict()
    side = max(config_size(config) or (SIDE, SIDE))
    changes: dict[str, Any] = {}
    for key, names in (("patch_size", ("patch_size",)), ("encoder_patch_size", ("patch_size",)),
                       ("downsample_factor", ("downsample_factor",)),
                       ("merge_size", ("spatial_merge_size", "merge_size")),
                       ("temporal_patch_size", ("temporal_patch_size",))):
        value = _config_int(config, *names)
        if key in settings and value is not None and settings[key] != value:
            changes[key] = value
    size = defaults.get("size") if isinstance(defaults.get("size"), dict) else {}
    if "max_pixels" in defaults or "min_pixels" in defaults or (size.get("longest_edge") or 0) > 50_000:
        # a pixel budget (Qwen VL's size holds pixel counts), not a side
        unit = (changes.get("patch_size") or settings.get("patch_size") or 8) * \
            (changes.get("merge_size") or settings.get("merge_size") or 1)
        low, high = (2 * unit) ** 2, max(side, 4 * unit) ** 2
        changes.update({k: v for k, v in (("min_pixels", low), ("max_pixels", high)) if k in defaults})
        if "longest_edge" in size:
            changes["size"] = {"shortest_edge": low, "longest_edge": high}
    if isinstance(settings.get("max_image_size"), dict) and "longest_edge" in settings["max_image_size"]:
        changes["max_image_size"] = {"longest_edge": side}  # the side of a tile (Idefics 3)
    elif isinstance(settings.get("max_image_size"), int) and settings["max_image_size"] > side:  # Aria's: 490
        changes["max_image_size"] = side
    high = getattr(getattr(config, "high_res_vision_config", None), "image_size", None)
    if isinstance(settings.get("high_res_size"), dict) and isinstance(high, int):  # DeepSeek-VL hybrid's second tower
        changes["high_res_size"] = {"height": high, "width": high}
    if "image_grid_pinpoints" in settings and isinstance(getattr(config, "image_grid_pinpoints", None), list):
        changes["image_grid_pinpoints"] = config.image_grid_pinpoints  # as fit_grid_pinpoints set them
    if model_type in PATCH_SIDED:  # its size is a patch's side (PATCH_SIDED), not the image's
        factors = [_config_int(config, name) for name in PATCH_SIDED[model_type]]
        if None not in factors:
            changes["size"] = {"height": math.prod(factors), "width": math.prod(factors)}
    margins = settings.get("overlap_margins")
    crop = _config_int(config, "image_size") or side
    patch = changes.get("patch_size") or settings.get("patch_size")
    if isinstance(margins, list) and isinstance(patch, int) and sum(margins) >= crop // patch:
        changes["overlap_margins"] = [1, 1]  # Molmo 2's crops overlap by margins a crop of few patches cannot hold
    for key in ("max_patches", "max_image_tiles", "max_num_tiles", "max_crops"):
        if isinstance(settings.get(key), int) and settings[key] > 2:
            changes[key] = 2
    if isinstance(settings.get("max_soft_tokens"), int) and settings["max_soft_tokens"] > 70:
        changes["max_soft_tokens"] = 70  # Gemma 4's budget of rows per image, the least it takes
    merged = getattr(_vision(config), "model_patch_size", None)
    if saved.get("borrowed", "").startswith("Gemma 4's") and isinstance(merged, int):  # patches of its model patch
        changes.update(patch_size=merged, pooling_kernel_size=1)
    if changes:
        try:
            cls.from_dict({**settings, **changes}).save_pretrained(directory)
        except Exception as exc:  # noqa: BLE001 - the processor as write_processor saved it
            saved["not_applied"] = f"{changes}: {type(exc).__name__}: {str(exc)[:120]}"
            return saved
        saved.update(changes)
    return saved


def pictures(sizes: list[tuple[int, int]], seed: int) -> list[Any]:
    from PIL import Image

    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)) for h, w in sizes]


def _processed(processor: Any, per_prompt: list[list[Any]]) -> dict[str, Any]:
    """The processor's outputs for the images (flat, then one list per prompt if it wants that), torch tensors."""
    import torch

    flat = [p for prompt in per_prompt for p in prompt]
    try:
        given = processor(flat, return_tensors="pt")
    except Exception:  # noqa: BLE001 - a processor that takes a list of images per prompt
        given = processor(per_prompt, return_tensors="pt")
    pixels = given.get("pixel_values")
    if isinstance(pixels, torch.Tensor) and pixels.dim() == 5 and len(per_prompt) > 1 and pixels.shape[0] == 1:
        given = processor(per_prompt, return_tensors="pt")  # images grouped per prompt (Idefics 3, SmolVLM)
    # a torchvision processor may give its pixels in bfloat16 (Llama 4's): the census's models are float32
    return {k: v.float() if v.is_floating_point() else v for k, v in given.items() if isinstance(v, torch.Tensor)}


def _feature_kwargs(model: Any, given: dict[str, Any]) -> dict[str, Any]:
    params = inspect.signature(image_features(model)).parameters
    forward = inspect.signature(model.forward).parameters
    takes_any = any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params.values())
    keep = {k: v for k, v in given.items() if k in params or (takes_any and k in forward and k != "input_ids")}
    if "return_dict" in params or takes_any:
        keep["return_dict"] = True
    return keep


def feature_rows(model: Any, given: dict[str, Any]) -> int:
    """The rows of image features ``get_image_features`` gives for ``given`` (every image's, joined)."""
    import torch

    from onnxport.hf.multimodal.components import image_rows

    with torch.no_grad():
        out = image_features(model)(**_feature_kwargs(model, given))
    if not isinstance(out, (torch.Tensor, list, tuple)):  # the projected rows, or (projected after) the tower's
        pooled = getattr(out, "pooler_output", None)
        out = pooled if pooled is not None else getattr(out, "last_hidden_state", None)
    if out is None:
        raise TypeError("get_image_features returned no pooler_output")
    return int(image_rows(out).shape[0])


def _random_pixels(config: Any, sizes: list[tuple[int, int]], model: Any = None) -> dict[str, Any]:
    import torch

    if model is not None and "spatial_shapes" in inspect.signature(image_features(model)).parameters:
        from onnxport.hf.multimodal.examples import naflex_pixels  # NaFlex patches, a grid of 16-pixel units

        return naflex_pixels(config, [(max(1, h // 16), max(1, w // 16)) for h, w in sizes], len(sizes))

    height, width = config_size(config) or (SIDE, SIDE)
    channels = _config_int(config, "num_channels", "in_channels") or 3
    generator = torch.Generator().manual_seed(len(sizes))
    frames = (4,) if config.model_type in VIDEOS_AS_IMAGES else ()  # a video of 4 frames, as its processor samples
    return {"pixel_values": torch.randn(len(sizes), *frames, channels, height, width, generator=generator)}


def _words(vocab: int, specials: set[int]) -> list[int]:
    out = []
    for w in WORDS + list(range(50, 200)):
        t = w if w < vocab else 3 + w % max(1, vocab - 3)
        if t not in specials and t > 2 and t not in out:
            out.append(t)
    return out


def _with_query(model: Any, config: Any, given: dict[str, Any]) -> dict[str, Any]:
    """``given`` with the Q-Former prompt an image encoder reads beside the pixels (InstructBLIP's), one per image,
    as export-hf makes its examples (``multimodal.examples.with_query_prompts``)."""
    from onnxport.hf.multimodal.examples import required_image_inputs, with_query_prompts

    if "qformer_input_ids" not in required_image_inputs(model):
        return given
    return with_query_prompts(model, config, [given])[0]


def case_inputs(model: Any, config: Any, processor: Any, case: str) -> dict[str, Any]:
    """A case's processor-like inputs (see the module): torch tensors."""
    import torch

    from onnxport.hf.multimodal.families import image_token_id

    if images_encoded(model, config):
        return _encoded_case(model, config, processor, case)
    image = image_token_id(config)
    text = text_config(config)
    specials = set(special_names(config)) | {0, 1, 2}
    words = iter(_words(vocab_of(config), specials))
    per_prompt_sizes = CASES[case]
    per_prompt = [pictures(sizes, seed=i) for i, sizes in enumerate(per_prompt_sizes)]
    if processor is not None:
        given = _with_query(model, config, _processed(processor, per_prompt))
        counts = [feature_rows(model, _with_query(model, config, _processed(processor, [[p]])))
                  for prompt in per_prompt for p in prompt]
    else:
        flat = [s for sizes in per_prompt_sizes for s in sizes]
        given = _with_query(model, config, _random_pixels(config, flat, model))
        counts = [feature_rows(model, {k: v[i:i + 1] for k, v in given.items()}) for i in range(len(flat))]
    bos = getattr(text, "bos_token_id", None)
    prompts, k = [], 0
    for i, sizes in enumerate(per_prompt_sizes):
        ids = [bos] if isinstance(bos, int) else []
        ids += [next(words) for _ in range(2 + i)]
        for _ in sizes:
            ids += [image] * counts[k] + [next(words)]
            k += 1
        ids += [next(words), next(words)]
        prompts.append(ids)
    pad = getattr(text, "pad_token_id", None)
    pad = pad if isinstance(pad, int) else 0
    length = max(len(p) for p in prompts)
    input_ids = torch.tensor([[pad] * (length - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (length - len(p)) + [1] * len(p) for p in prompts])
    forward = inspect.signature(model.forward).parameters
    inputs = {"input_ids": input_ids, "attention_mask": mask}
    for name in ("mm_token_type_ids", "token_type_ids"):
        if name in forward:
            inputs[name] = (input_ids == image).long()
    if model.config.model_type in PREFIX_BOTH_WAYS:  # PaliGemma's processor marks the whole prompt its prefix: 0
        inputs["token_type_ids"] = torch.zeros_like(input_ids)
    inputs.update(given)
    return {"inputs": inputs, "rows_per_image": counts}


def _encoded_case(model: Any, config: Any, processor: Any, case: str) -> dict[str, Any]:
    """A case of a model whose encoder reads the images (``images_encoded``): its processor's image inputs (a patch
    mask as int64) or random pixels, one image a prompt (each prompt's first), no text."""
    sizes = [prompt[0] for prompt in CASES[case]]
    if processor is None:
        return {"inputs": _random_pixels(config, sizes), "rows_per_image": None}
    given = processor(pictures(sizes, seed=0), return_tensors="pt")
    taken = (model.main_input_name, "attention_mask")
    return {"inputs": {k: v.long() if k == "attention_mask" else v for k, v in given.items() if k in taken},
            "rows_per_image": None}


def generation_inputs(model: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    """The inputs ``generate`` is given: those the forward names (a processor's ``num_patches`` is not)."""
    forward = inspect.signature(model.forward).parameters
    return {k: v for k, v in inputs.items() if k in forward}


def load_processor(directory: str) -> Any:
    import transformers

    if not os.path.isfile(os.path.join(directory, "preprocessor_config.json")):
        return None
    return transformers.AutoImageProcessor.from_pretrained(directory, local_files_only=True)


def eager_generate(model: Any, inputs: dict[str, Any], new: int) -> dict[str, Any]:
    """Greedy ``generate`` under a generation config of the model's token ids alone: tokens and whether the first
    step's scores are finite."""
    import torch
    from transformers import GenerationConfig

    own = model.generation_config
    model.generation_config = GenerationConfig(bos_token_id=own.bos_token_id, eos_token_id=own.eos_token_id,
                                               pad_token_id=own.pad_token_id,
                                               decoder_start_token_id=own.decoder_start_token_id)
    try:
        with torch.no_grad():
            out = model.generate(**generation_inputs(model, inputs), do_sample=False, num_beams=1,
                                 max_new_tokens=new, return_dict_in_generate=True, output_scores=True)
    finally:
        model.generation_config = own
    scores = out.scores[0] if getattr(out, "scores", None) else None
    return {"tokens": out.sequences.tolist(),
            "finite": scores is None or bool(torch.isfinite(scores).all()),
            "eos": own.eos_token_id, "pad": own.pad_token_id}
