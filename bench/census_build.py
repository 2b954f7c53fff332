"""Tiny random configs, model classes and example inputs for ``bench/census.py``.

``tiny_config(model_type)`` shrinks the config class's defaults (and its sub-configs, recursively);
``model_class(model_type)`` picks the base model (or the first task model); ``candidate_inputs(model, config)``
yields example input dicts, most likely first, that the census tries in eager PyTorch until one runs.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from typing import Any

import torch

HIDDEN = 64
HEADS = 4
KV_HEADS = 2
HEAD_DIM = HIDDEN // HEADS
LAYERS = 2
FFN = 128
VOCAB = 1024
IMAGE = 64
PATCH = 8
BATCH = 2
SEQ = 8
DEC_SEQ = 6

_HIDDEN_KEYS = {
    "hidden_size", "d_model", "n_embd", "embed_dim", "dim", "hidden_dim", "model_dim", "d_embed", "embedding_size",
    "word_embed_proj_dim", "text_embed_dim", "vision_embed_dim", "encoder_hidden_size", "decoder_hidden_size",
    "projection_dim", "proj_dim", "n_embed", "emb_dim", "out_hidden_size", "embedding_dim", "d_latents",
    "encoder_embed_dim", "decoder_embed_dim", "hidden_channels", "projection_hidden_size", "text_hidden_size",
    "vision_hidden_size", "audio_hidden_size", "cross_attention_hidden_size", "d_kv_model", "n_embd_per_head",
    "conv_dim_out", "vocab_embed_dim", "mm_hidden_size", "hidden_features", "fpn_hidden_size",
}
_LAYER_KEYS = {
    "num_hidden_layers", "num_layers", "n_layer", "n_layers", "encoder_layers", "decoder_layers", "depth",
    "num_encoder_layers", "num_decoder_layers", "text_layers", "vision_layers", "num_blocks", "encoder_depth",
    "decoder_depth", "decoder_num_hidden_layers", "encoder_num_hidden_layers", "num_stacks", "num_text_layers",
    "num_vision_layers", "num_cross_layers", "num_self_attends_per_block", "num_hidden_groups", "n_blocks",
    "num_single_layers", "num_mtp_layers", "num_x_layers", "num_qformer_layers", "cross_attention_layers",
}
_HEAD_KEYS = {
    "num_attention_heads", "n_head", "n_heads", "encoder_attention_heads", "decoder_attention_heads", "num_heads",
    "attention_heads", "encoder_num_attention_heads", "decoder_num_attention_heads", "num_attn_heads",
    "num_self_attention_heads", "num_cross_attention_heads",
}
_KV_KEYS = {"num_key_value_heads", "n_kv_heads", "num_kv_heads", "multi_query_group_num", "kv_heads"}
_FFN_KEYS = {
    "intermediate_size", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "n_inner", "d_ff", "ffn_hidden_size",
    "decoder_intermediate_size", "encoder_intermediate_size", "mlp_dim", "hidden_dim_ffn", "ff_dim",
    "feed_forward_size", "inner_dim", "decoder_ffn_size", "moe_intermediate_size", "shared_expert_intermediate_size",
    "expert_intermediate_size", "dense_intermediate_size",
}
_EXPERT_KEYS = {"num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts", "num_routed_experts"}
_TOPK_KEYS = {"num_experts_per_tok", "moe_topk", "top_k", "num_experts_per_token", "moe_k"}
_VOCAB_KEYS = {"vocab_size", "text_vocab_size", "n_vocab"}
_IMAGE_KEYS = {"image_size", "img_size", "input_size", "crop_size"}
_PATCH_KEYS = {"patch_size", "patch_sizes_x"}


_NONE_FILL = {
    **{k: HEAD_DIM for k in ("head_dim", "attention_head_dim", "kv_channels")},
    **{k: HEADS for k in _KV_KEYS | {"num_attention_heads"}},
    **{k: 4 for k in _EXPERT_KEYS}, **{k: 2 for k in _TOPK_KEYS}, "n_shared_experts": 1,
    "vocab_size": VOCAB, "hidden_size": HIDDEN, "intermediate_size": FFN, "moe_intermediate_size": FFN,
}


def _is_config_dict(value: Any) -> bool:
    return isinstance(value, dict) and "model_type" in value


_KEEP_LAYERS = False  # set by tiny_config(keep_layers=True): layer counts left as the config's own


def _shrink_int(key: str, value: int, orig: dict[str, Any]) -> int:
    if key in _HIDDEN_KEYS and value > HIDDEN:
        return HIDDEN
    if key in _LAYER_KEYS and value > LAYERS and not _KEEP_LAYERS:
        return LAYERS
    if key in _HEAD_KEYS and value > HEADS:
        return HEADS
    if key in _KV_KEYS and value == orig.get("num_attention_heads"):  # no grouped-query attention
        return HEADS
    if key in _KV_KEYS:
        return min(value, KV_HEADS) if value > 1 else value
    if key in ("head_dim", "attention_head_dim", "d_kv", "kv_channels", "d_head"):
        return HEAD_DIM
    if key in _FFN_KEYS and value > FFN:
        return FFN
    if key in _EXPERT_KEYS and value > 4:
        return 4
    if key in _TOPK_KEYS and value > 2:
        return 2
    if key in ("n_shared_experts", "num_shared_experts") and value > 1:
        return 1
    if key in ("n_group", "topk_group", "num_expert_group") and value > 1:
        return 1
    if key in ("first_k_dense_replace", "num_dense_layers", "first_dense_layers") and value > 1:
        return 1
    if key in ("qk_rope_head_dim", "qk_nope_head_dim"):
        return HEAD_DIM // 2
    if key in ("rotary_dim", "rotary_emb_dim", "rope_dim") and value > HEAD_DIM:
        return HEAD_DIM
    if key in ("v_head_dim",):
        return HEAD_DIM
    if key in ("kv_lora_rank", "q_lora_rank") and value:
        return 32
    if key in _VOCAB_KEYS and value > VOCAB:
        return VOCAB
    if key in _IMAGE_KEYS and value > IMAGE and not ("window_size" in orig and "depths" in orig):
        return IMAGE
    if key in _PATCH_KEYS and value > PATCH:
        return PATCH
    if key == "num_queries" and value > 32:  # a detector's top-k of queries must not outnumber a tiny image's anchors
        return 32
    if key == "num_frames" and value > 4:
        return 4
    if key == "max_source_positions" and value > 32:
        return 32
    if key in ("num_mel_bins", "feature_size", "n_mels") and value > 32:
        return value if value <= 80 else 80
    if key in ("max_window_layers", "num_global_layers", "sliding_window_pattern") and value > LAYERS:
        return LAYERS
    if key.endswith("_size") and key not in ("type_vocab_size", "max_position_embeddings", "chunk_size")\
            and value == orig.get("hidden_size") and value > HIDDEN:
        return HIDDEN
    return value


def _remap_token_ids(d: dict[str, Any], vocab: int | None) -> None:
    """Special token ids past the shrunk vocabulary become distinct ids at its top."""
    if not vocab:
        return
    taken: dict[int, int] = {}

    def remap(v: int) -> int:
        if v < vocab - 64:
            return v
        if v not in taken:
            taken[v] = vocab - 1 - len(taken)
        return taken[v]

    for key, value in d.items():
        if not (key.endswith("token_id") or key.endswith("token_index") or key.endswith("_token_ids")
                or key in ("image_token", "boi_token_index", "eoi_token_index")):
            continue
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            d[key] = remap(value)
        elif isinstance(value, list) and all(isinstance(v, int) for v in value):
            d[key] = [remap(v) for v in value]


def shrink(d: dict[str, Any]) -> dict[str, Any]:
    """The config dict ``d`` made tiny; nested config dicts are shrunk the same way."""
    orig = dict(d)
    out: dict[str, Any] = {}
    n_layers = next((orig[k] for k in ("num_hidden_layers", "num_layers", "n_layer", "n_layers", "decoder_layers")
                     if isinstance(orig.get(k), int)), None)
    by_length: set[str] = set()
    staged = isinstance(orig.get("depths"), list)  # hierarchical: keep widths (per-stage heads divide them)
    if staged:
        n_layers = None
    for key, value in d.items():
        if staged and key in _HIDDEN_KEYS | _HEAD_KEYS:
            out[key] = value
            continue
        if _is_config_dict(value) or (key.endswith("_config") and isinstance(value, dict) and value
                                      and not key.startswith("quantization") and key != "rope_scaling"):
            out[key] = shrink(value)
        elif value is None and "model_type" in d and key in _NONE_FILL:
            out[key] = _NONE_FILL[key]  # a default the modeling code cannot run with: the tiny size
        elif isinstance(value, bool) or value is None:
            out[key] = value
        elif isinstance(value, int):
            out[key] = _shrink_int(key, value, orig)
        elif isinstance(value, list) and key in _IMAGE_KEYS | _PATCH_KEYS and all(isinstance(v, int) for v in value):
            cap = IMAGE if key in _IMAGE_KEYS else PATCH
            out[key] = [min(v, cap) for v in value]
        elif isinstance(value, list) and key in ("depths", "num_layers_per_stage", "layers", "stage_depths",
                                                  "encoder_layers_per_stage") \
                and all(isinstance(v, int) for v in value):
            out[key] = [min(v, 1) if v else v for v in value]
        elif isinstance(value, list) and n_layers and len(value) == n_layers > LAYERS and not _KEEP_LAYERS \
                and key not in ("depths", "hidden_sizes"):
            new = value[:LAYERS]
            missing = [v for v in dict.fromkeys(value) if v not in new and isinstance(v, str)]
            if missing:  # keep a layer of each kind (an attention layer in a hybrid model)
                missing.sort(key=lambda v: "attention" not in v)
                new[-1] = missing[0]
            out[key] = new
            by_length.add(key)
        elif key == "per_layer_config" and isinstance(value, dict):
            out[key] = value  # filtered once the new layer count is known
        else:
            out[key] = value
    _remap_token_ids(out, out.get("vocab_size"))
    _fix_consistency(orig, out)
    _fit_pooled_tokens(out)
    _fix_rope(out)
    n_new0 = next((out[k] for k in ("num_hidden_layers", "num_layers") if isinstance(out.get(k), int)), None)
    if isinstance(out.get("per_layer_config"), dict) and n_new0:
        out["per_layer_config"] = {k: v for k, v in out["per_layer_config"].items()
                                   if str(k).isdigit() and int(k) < n_new0}
    # Layer index lists (full-attention layers, cross-attention layers...) must point at existing layers.
    n_new = out.get("num_hidden_layers") if isinstance(out.get("num_hidden_layers"), int) else None
    vision = out.get("vision_config") if isinstance(out.get("vision_config"), dict) else {}
    if isinstance(out.get("extract_layers"), (list, tuple)) and isinstance(vision.get("num_hidden_layers"), int) \
            and n_new is None and not _KEEP_LAYERS:  # CLIPSeg's decoder reads these layers of its vision tower
        n = vision["num_hidden_layers"]
        out["extract_layers"] = sorted({v for v in out["extract_layers"] if v < n}) or [n - 1]
    if _KEEP_LAYERS:  # no layer is gone
        n_new = None
    for key, value in list(out.items()):
        if n_new and key not in by_length and isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool)
                                                               for v in value) \
                and ("layers" in key or "indices" in key or "layer_ids" in key) and key.endswith(
                    ("layers", "indices", "layer_ids", "_layers_ids")) and "vision" not in key:
            kept = sorted({v for v in value if v < n_new})
            out[key] = kept or [n_new - 1]
    return out


def _fit_pooled_tokens(out: dict[str, Any]) -> None:
    """Rows per image pooled from the vision tower's patches (Gemma 3's ``mm_tokens_per_image``, 256) made a
    quarter of the tiny image's patches: 256 rows of a 64-pixel image in 8-pixel patches would pool by 0."""
    vision = out.get("vision_config")
    tokens = out.get("mm_tokens_per_image")
    if not isinstance(vision, dict) or not isinstance(tokens, int):
        return
    side, patch = vision.get("image_size"), vision.get("patch_size")
    if isinstance(side, int) and isinstance(patch, int) and patch and tokens > (side // patch) ** 2 // 4:
        out["mm_tokens_per_image"] = max(1, (side // patch // 2) ** 2)


def _fix_consistency(orig: dict[str, Any], out: dict[str, Any]) -> None:
    """Constraints between sizes that the generic rules would break."""
    if isinstance(orig.get("depths"), list):
        for key in ("num_layers", "num_stages"):  # the number of stages, not of layers
            if isinstance(orig.get(key), int):
                out[key] = orig[key]
    if "coordinate_size" in orig and "shape_size" in orig:  # hidden = 4 coordinate + 2 shape embeddings
        out["coordinate_size"] = out["shape_size"] = 16
        out["hidden_size"] = 96
    rope, nope = orig.get("qk_rope_head_dim"), orig.get("qk_nope_head_dim")
    for key in ("head_dim", "qk_head_dim"):  # the rope part (DeepSeek's head_dim) or both parts (Mistral 4's)
        both = isinstance(rope, int) and isinstance(nope, int) and orig.get(key) == rope + nope
        if isinstance(rope, int) and (key == "head_dim" and key in orig or both):
            out[key] = out["qk_rope_head_dim"] + (out["qk_nope_head_dim"] if both else 0)
    hidden = out.get("hidden_size") if isinstance(out.get("hidden_size"), int) else None
    if hidden and isinstance(orig.get("mamba_n_heads"), int):  # heads * head dim = expand * hidden
        out["mamba_n_heads"] = HEADS
        expand = orig.get("mamba_expand") if isinstance(orig.get("mamba_expand"), int) else 2
        if "mamba_d_head" in orig:
            out["mamba_d_head"] = expand * hidden // HEADS
        if isinstance(orig.get("mamba_n_groups"), int):
            out["mamba_n_groups"] = 1
    if hidden and isinstance(orig.get("mamba_d_ssm"), int) and isinstance(out.get("mamba_d_head"), int) \
            and isinstance(out.get("mamba_n_heads"), int):  # Falcon-H1: the Mamba width is heads * head dim
        out["mamba_d_ssm"] = out["mamba_d_head"] * out["mamba_n_heads"]
    stack, total = orig.get("num_layers_per_stack"), orig.get("num_hidden_layers")
    if isinstance(stack, int) and isinstance(total, int) and stack and total % stack == 0 and not _KEEP_LAYERS:
        out["num_layers_per_stack"] = min(stack, LAYERS)  # HRM: the cache counts each stack's layer once a cycle
        out["num_hidden_layers"] = out["num_layers_per_stack"] * (total // stack)
    layers = out.get("num_hidden_layers")
    if "layer_types" in orig and orig["layer_types"] is None and "conv_L_cache" in orig and isinstance(layers, int):
        out["layer_types"] = ["conv"] * (layers - 1) + ["full_attention"]  # LFM2-MoE leaves them unset: one of each
    if hidden and isinstance(orig.get("expand"), int) and isinstance(orig.get("head_dim"), int) \
            and isinstance(orig.get("num_heads"), int):
        out["num_heads"] = HEADS
        out["head_dim"] = orig["expand"] * hidden // HEADS
        if isinstance(orig.get("n_groups"), int):
            out["n_groups"] = 1
    for key, value in orig.items():  # depthwise convolutions: a group per channel (Mimi's upsample_groups)
        if key.endswith("_groups") and isinstance(value, int) and value == orig.get("hidden_size") and hidden:
            out[key] = hidden
    emb = orig.get("embedding_size")
    if isinstance(emb, int) and isinstance(orig.get("hidden_size"), int) and emb < orig["hidden_size"] and hidden \
            and out.get("embedding_size", 0) >= hidden:  # narrower stays narrower (MobileBERT's head: the difference)
        out["embedding_size"] = hidden // 2
    width = orig.get("width_coefficient")
    if isinstance(width, float) and isinstance(orig.get("depth_coefficient"), float):  # compound scaling: channel
        out["width_coefficient"], out["depth_coefficient"] = 0.25, 1.0  # lists scaled, the head's too (1280 in B0)
        if isinstance(orig.get("hidden_dim"), int):
            out["hidden_dim"] = round(orig["hidden_dim"] / width * 0.25)
    for key in ("out_features", "out_indices"):  # backbone outputs named after layers that are gone
        if orig.get(key) and not isinstance(orig.get("depths"), list) and out.get("num_hidden_layers") != orig.get(
                "num_hidden_layers"):
            out[key] = [out["num_hidden_layers"]] if key == "out_indices" else None
    if isinstance(orig.get("axial_pos_embds_dim"), list) and hidden:  # the axial factors sum to hidden
        out["axial_pos_embds_dim"] = [hidden // 2, hidden - hidden // 2]
    widths = orig.get("embed_dim_per_stage")  # (Hiera's stage widths are not shrunk: the first is the stem's)
    if isinstance(widths, list) and widths and orig.get("hidden_size") == widths[0]:
        out["hidden_size"] = widths[0]
    bb = out.get("backbone_config")
    _fix_feature_sizes(orig, out)
    if isinstance(bb, dict) and isinstance(orig.get("reassemble_hidden_size"), int) \
            and isinstance(bb.get("hidden_size"), int):  # Depth Anything's neck reads the backbone's width
        out["reassemble_hidden_size"] = bb["hidden_size"]
    if isinstance(bb, dict) and bb.get("model_type") == "timm_backbone":  # timm is not installed: a ResNet
        from transformers import ResNetConfig
        out["backbone_config"] = shrink(ResNetConfig(out_features=["stage1", "stage2", "stage3", "stage4"]).to_dict())
        out["backbone"] = None
    if "use_timm_backbone" in orig:
        out["use_timm_backbone"] = False
    if "use_pretrained_backbone" in orig:
        out["use_pretrained_backbone"] = False
    if orig.get("backbone") and not orig.get("backbone_config") and "use_timm_backbone" in orig:
        out["backbone"] = None


def _fix_feature_sizes(orig: dict[str, Any], out: dict[str, Any]) -> None:
    """SAM 2's and SAM 3's feature map sides follow the backbone's shrunk patch grid, and the prompt encoder's
    patch is the image over the last map's side (SAM 2's Hiera: 16, four times its patch stride)."""
    bb, bb_orig = out.get("backbone_config"), orig.get("backbone_config")
    sizes = orig.get("backbone_feature_sizes")
    if isinstance(bb, dict) and isinstance(bb_orig, dict) and isinstance(sizes, list):
        def grid(d: dict[str, Any]) -> float:
            side, patch = d.get("image_size"), d.get("patch_size") or 1
            side = side[0] if isinstance(side, list) else side
            return side / (patch[0] if isinstance(patch, list) else patch) if isinstance(side, int) else 1.0

        ratio = grid(bb) / grid(bb_orig)
        out["backbone_feature_sizes"] = [[max(1, round(v * ratio)) for v in pair] for pair in sizes]
        side = bb.get("image_size")
        if "image_size" not in orig and isinstance(side, (int, list)):  # the one side these maps fit, stated
            out["image_size"] = side[0] if isinstance(side, list) else side  # where the census reads it (SAM 2)
    vision, prompt = out.get("vision_config"), out.get("prompt_encoder_config")
    if isinstance(vision, dict) and isinstance(prompt, dict) and isinstance(prompt.get("image_size"), int) \
            and vision.get("backbone_feature_sizes") != orig["vision_config"].get("backbone_feature_sizes"):
        prompt["patch_size"] = prompt["image_size"] // vision["backbone_feature_sizes"][-1][0]


# The modeling code's mrope sections where the config names none (by a part of the model type), else [16, 24, 24].
_MROPE_DEFAULTS = {"glm_ocr": [8, 12, 12], "ernie4_5_vl": [22, 22, 20]}


def _fix_rope(d: dict[str, Any]) -> None:
    """mrope sections sum to half the head dim: scale them to the new head dim."""
    head = d.get("head_dim") or (d["hidden_size"] // d["num_attention_heads"]
                                 if isinstance(d.get("hidden_size"), int) and d.get("num_attention_heads") else None)
    mtype = str(d.get("model_type", ""))
    for holder in (d.get("rope_parameters"), d.get("rope_scaling")):
        if not isinstance(holder, dict) or not head:
            continue
        sec = holder.get("mrope_section")
        if sec is None and re.search(r"vl|v_text|omni|glm4v|glm46v|glm_image|glm_ocr|video", mtype):
            sec = next((v for k, v in _MROPE_DEFAULTS.items() if k in mtype), [16, 24, 24])
        if isinstance(sec, list) and sec:
            prf = holder.get("partial_rotary_factor", d.get("partial_rotary_factor"))
            half = int(head * (prf if isinstance(prf, float) else 1.0)) // 2
            total = sum(sec)
            new = [max(1, v * half // total) for v in sec]
            new[-1 if sec[0] == sec[1] else 0] += half - sum(new)  # ERNIE's [h, w, t] keeps h and w alike
            holder["mrope_section"] = new


def config_class(model_type: str) -> type:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    return CONFIG_MAPPING[model_type]


def tiny_config(model_type: str, keep_layers: bool = False, settings: dict[str, Any] | None = None) -> Any:
    """The config class's defaults shrunk; ``keep_layers``: widths only, the layer counts kept (for a model whose
    heads read fixed layers, such as DPT's neck reading 4 of 12, which 2 layers break); ``settings``: values set
    on the shrunk dict before the config is built (a dotted path to a sub-config's key: ``vision_config.depth``),
    for a config class that validates what shrinking breaks."""
    global _KEEP_LAYERS
    cls = config_class(model_type)
    base = cls()
    _KEEP_LAYERS = keep_layers
    try:
        d = shrink(base.to_dict())
    finally:
        _KEEP_LAYERS = False
    for path, value in (settings or {}).items():
        *parents, key = path.split(".")
        holder = d
        for name in parents:
            holder = holder[name]
        holder[key] = value
    return cls.from_dict(d)


def model_class(model_type: str) -> type:
    import transformers
    from transformers.models.auto import modeling_auto as ma

    name = ma.MODEL_MAPPING_NAMES.get(model_type)
    if name is None:
        for mapping in sorted(n for n in dir(ma) if n.startswith("MODEL_FOR_") and n.endswith("_MAPPING_NAMES")):
            name = getattr(ma, mapping).get(model_type)
            if name:
                break
    if name is None:
        return _class_for_config(model_type)
    if isinstance(name, (list, tuple)):
        name = name[0]
    return getattr(transformers, name)


def _class_for_config(model_type: str) -> type:
    """A type with no auto mapping (a sub-model such as ``align_text_model``): the model class of its module
    whose ``config_class`` is the type's config class, the plainest name first."""
    import importlib

    from transformers import PreTrainedModel

    cfg = config_class(model_type)
    module = importlib.import_module(cfg.__module__.replace(".configuration_", ".modeling_"))
    found = [c for c in vars(module).values() if isinstance(c, type) and issubclass(c, PreTrainedModel)
             and getattr(c, "config_class", None) is cfg and not c.__name__.endswith("PreTrainedModel")]
    if not found:
        raise LookupError("no model class in any auto mapping, nor one for its config in its modeling module")
    found.sort(key=lambda c: ("For" in c.__name__, len(c.__name__)))
    return found[0]


# -- inputs ----------------------------------------------------------------------------------------


def redraw_weights(model: torch.nn.Module, seed: int = 0) -> None:
    """Draw every floating-point parameter anew, spread so that activations keep their scale: matrices
    N(0, 1/fan_in), biases N(0, 0.1), norm scales N(1, 0.2). transformers' default init (std 0.02, zero
    biases, some heads zeroed) leaves a tiny model's scores nearly tied (every query of a detector finds
    the same box), where the order of a top-k turns on rounding; the census retries a mismatch with these."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not p.is_floating_point() or not p.numel():  # (DINOv3's zero register tokens)
                continue
            if p.dim() > 1:
                std, mean = p[0].numel() ** -0.5, 0.0
            else:
                std, mean = (0.1, 0.0) if name.endswith("bias") else (0.2, 1.0)
            p.copy_(torch.randn(p.shape, generator=generator) * std + mean)


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def _sub(config: Any, *names: str) -> Any:
    for n in names:
        sub = getattr(config, n, None)
        if sub is not None and hasattr(sub, "to_dict"):
            return sub
    return None


def _get(config: Any, *keys: str, default: Any = None) -> Any:
    """The first of ``keys`` set on ``config`` or one of its sub-configs."""
    for holder in (config, _sub(config, "vision_config", "audio_config", "encoder_config", "text_config",
                                "backbone_config")):
        if holder is None:
            continue
        for k in keys:
            v = getattr(holder, k, None)
            if v is not None:
                return v
    return default


def _ids(config: Any, batch: int, seq: int) -> torch.Tensor:
    text = _sub(config, "text_config", "decoder_config", "decoder") or config
    vocab = getattr(text, "vocab_size", None) or getattr(config, "vocab_size", None) or 100
    hi = max(4, min(int(vocab) - 64, 1000)) if vocab > 128 else max(3, int(vocab) - 2)
    return torch.randint(3, hi, (batch, seq), generator=_gen())


def _image_side(config: Any) -> int:
    side = _get(config, "image_size", "img_size", "input_size", default=IMAGE)
    if isinstance(side, (list, tuple)):
        side = side[-1]
    return int(side) if isinstance(side, int) and side > 0 else IMAGE


def _pixels(config: Any, side: int | None = None, channels: int | None = None) -> torch.Tensor:
    side = side or _image_side(config)
    channels = channels or _get(config, "num_channels", "in_channels", "in_chans", default=3)
    if not isinstance(channels, int):
        channels = 3
    return torch.randn(BATCH, channels, side, side, generator=_gen())


def _params(model: torch.nn.Module) -> dict[str, inspect.Parameter]:
    try:
        return dict(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        return {}


def _required(params: dict[str, inspect.Parameter]) -> list[str]:
    return [n for n, p in params.items() if p.default is inspect.Parameter.empty
            and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def _text(config: Any, params: dict[str, inspect.Parameter], seq: int = SEQ) -> dict[str, Any]:
    out: dict[str, Any] = {"input_ids": _ids(config, BATCH, seq)}
    if "attention_mask" in params:
        out["attention_mask"] = torch.ones(BATCH, seq, dtype=torch.long)
    return out


def _decoder(config: Any, params: dict[str, inspect.Parameter]) -> dict[str, Any]:
    if "decoder_input_ids" in params:
        out = {"decoder_input_ids": _ids(config, BATCH, DEC_SEQ)}
        if "decoder_attention_mask" in params and False:
            out["decoder_attention_mask"] = torch.ones(BATCH, DEC_SEQ, dtype=torch.long)
        return out
    return {}


def _extras(config: Any, params: dict[str, inspect.Parameter], got: dict[str, Any], seq: int) -> dict[str, Any]:
    """Inputs the forward requires that the main ones left out, guessed from their names."""
    out: dict[str, Any] = {}
    for name in _required(params):
        if name in got or name in ("self", "kwargs"):
            continue
        if name == "bbox":
            base = torch.randint(0, 500, (BATCH, seq, 2), generator=_gen())
            out[name] = torch.cat([base, base + 10], -1)
        elif name in ("input_ids", "decoder_input_ids", "labels"):
            out[name] = _ids(config, BATCH, seq if name != "decoder_input_ids" else DEC_SEQ)
        elif name.endswith("attention_mask") or name.endswith("_mask"):
            out[name] = torch.ones(BATCH, seq, dtype=torch.long)
        elif name == "pixel_values":
            out[name] = _pixels(config)
        elif name in ("token_type_ids", "position_ids"):
            out[name] = torch.zeros(BATCH, seq, dtype=torch.long)
    if "bbox" in params and "bbox" not in out and "bbox" not in got:
        base = torch.randint(0, 500, (BATCH, seq, 2), generator=_gen())
        out["bbox"] = torch.cat([base, base + 10], -1)
    return out


def candidate_inputs(model: torch.nn.Module, config: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """(kind, inputs) pairs to try in order; the first that runs in eager PyTorch is the example."""
    params = _params(model)
    main = getattr(model, "main_input_name", "input_ids")
    if main not in params:  # a forward(**kwargs) would swallow an input it never reads
        main = next((n for n in ("input_ids", "pixel_values", "input_values", "input_features", "inputs_embeds")
                     if n in params), main)
    enc_dec = bool(getattr(config, "is_encoder_decoder", False)) or "decoder_input_ids" in params
    dec = _decoder(config, params) if enc_dec else {}
    required = set(_required(params))
    grid_name = next((n for n in ("grid_thw", "image_grid_thw") if n in required), None)
    if grid_name:  # Qwen-VL style vision towers: flattened patches plus each image's (t, h, w) patch grid
        p = _get(config, "patch_size", default=PATCH)
        p = p[0] if isinstance(p, (list, tuple)) else p
        t = _get(config, "temporal_patch_size", default=1) or 1
        c = _get(config, "in_channels", "num_channels", "in_chans", default=3)
        merge = _get(config, "spatial_merge_size", default=2) or 1
        side = 2 * int(merge)
        pix = "hidden_states" if "hidden_states" in required else "pixel_values"
        yield "patches+grid", {pix: torch.randn(BATCH * side * side, int(c) * int(t) * int(p) * int(p), generator=_gen()),
                               grid_name: torch.tensor([[1, side, side]] * BATCH)}
    if main == "input_ids":
        base = {**_text(config, params), **dec}
        base.update(_extras(config, params, base, SEQ))
        yield "text", base
        if "use_cache" in params:
            yield "text-nocache", {**base, "use_cache": False}
        if "pixel_values" in params:
            yield "text+image", {**base, "pixel_values": _pixels(config)}
        for seq in (16, 64, 128):
            b = {**_text(config, params, seq), **dec}
            b.update(_extras(config, params, b, seq))
            yield f"text{seq}", b
    elif main == "pixel_values":
        sides = [_image_side(config), IMAGE, 32, 224]
        hw = _get(config, "image_size", "img_size", "input_size")
        frames = _get(config, "num_frames", "frames")
        video = isinstance(frames, int) and frames > 1
        if isinstance(hw, (list, tuple)) and len(hw) == 2 and hw[0] != hw[1] and not video:
            yield "image-hw", {"pixel_values": torch.randn(BATCH, 3, int(hw[0]), int(hw[1]), generator=_gen())}
        for side in dict.fromkeys(sides):
            inp = {"pixel_values": _pixels(config, side)}
            if video:  # video: (batch, frames, channels, height, width)
                inp = {"pixel_values": inp["pixel_values"][:, None].expand(-1, frames, -1, -1, -1).contiguous()}
            if "input_ids" in required or ("input_ids" in params and _sub(config, "text_config") is not None):
                inp.update(_text(config, params))
            inp.update(dec)
            inp.update(_extras(config, params, inp, SEQ))
            yield f"image{side}", inp
    elif main == "input_values":
        for n in (4000, 16000):
            inp = {"input_values": torch.randn(BATCH, n, generator=_gen())}
            inp.update(dec)
            yield f"audio{n}", inp
        chans = _get(config, "audio_channels", default=None)
        if isinstance(chans, int):
            yield "audio-channels", {"input_values": torch.randn(BATCH, chans, 4000, generator=_gen()), **dec}
        mel = _get(config, "num_mel_bins", "feature_size", default=80)
        length = _get(config, "max_length", default=64)
        yield "spectrogram", {"input_values": torch.randn(BATCH, min(int(length), 1024), int(mel), generator=_gen()),
                              **dec}
    elif main == "input_features":
        mel = _get(config, "num_mel_bins", "n_mels", "feature_size", "input_feat_per_channel", default=80)
        msp = _get(config, "max_source_positions", default=32)
        frames = 2 * int(msp) if isinstance(msp, int) else 64
        yield "features", {"input_features": torch.randn(BATCH, int(mel), frames, generator=_gen()), **dec}
        feat = _get(config, "input_feat_per_channel", "feature_size", "num_mel_bins", default=80)
        chans = _get(config, "input_channels", default=1)
        yield "features-mask", {"input_features": torch.randn(BATCH, int(mel), frames, generator=_gen()),
                                 "attention_mask": torch.ones(BATCH, frames, dtype=torch.long), **dec}
        yield "features-t", {"input_features": torch.randn(BATCH, 64, int(feat) * int(chans), generator=_gen()), **dec}
        yield "features-t-mask", {"input_features": torch.randn(BATCH, 64, int(feat) * int(chans), generator=_gen()),
                                  "attention_mask": torch.ones(BATCH, 64, dtype=torch.long), **dec}
    else:
        inp: dict[str, Any] = {}
        if main in ("inputs_embeds", "hidden_states"):
            inp[main] = torch.randn(BATCH, SEQ, getattr(config, "hidden_size", HIDDEN), generator=_gen())
        inp.update(_extras(config, params, inp, SEQ))
        yield main or "other", inp


DYNAMIC_SEQ = {"input_ids", "attention_mask", "token_type_ids", "position_ids", "bbox", "decoder_input_ids",
               "decoder_attention_mask", "input_values"}


def dynamic_shapes(inputs: dict[str, Any]) -> dict[str, Any]:
    """Batch dynamic everywhere; the sequence dim too for token-like inputs and raw audio."""
    dim = torch.export.Dim.DYNAMIC
    out: dict[str, Any] = {}
    for name, value in inputs.items():
        if not isinstance(value, torch.Tensor):
            out[name] = None
        elif name in DYNAMIC_SEQ and value.dim() >= 2:
            out[name] = {0: dim, 1: dim}
        else:
            out[name] = {0: dim}
    return out
