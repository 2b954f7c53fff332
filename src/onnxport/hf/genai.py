"""``genai_config.json``: onnxruntime-genai's description of an exported decoder, read from the model's config
and from the exported graph (the cache's heads and head size, the vocabulary's size)."""

from __future__ import annotations

import inspect
from typing import Any

import torch

from onnxport import targets
from onnxport.errors import InvalidInputError
from onnxport.program import OnnxProgram

# The onnxruntime the oldest onnxruntime-genai onnxport writes folders for (0.18) requires: its wheel's
# Requires-Dist says onnxruntime>=1.31.0. No genai that reads such a folder runs an older onnxruntime, so its
# files are written for the newest named target within that by default (fused attention, normalisation and
# rotary embedding); target= still chooses another.
GENAI_REQUIRES_ONNXRUNTIME = (1, 31)


def genai_target() -> str:
    """The target a folder for onnxruntime-genai is written for when the caller names none."""
    fitting = [targets.parse(name) for name in targets.TARGETS]
    fitting = [t for t in fitting if t.runtime == "onnxruntime" and t.version <= GENAI_REQUIRES_ONNXRUNTIME]
    return str(max(fitting, key=lambda t: t.version))

__all__ = ["cached", "check_plain_generation", "genai_config", "genai_target", "note_cacheless", "takes_positions",
           "warn_states_genai_does_not_feed"]


def genai_config(config: Any, model: torch.nn.Module, program: OnnxProgram | None = None) -> dict[str, Any]:
    """onnxruntime-genai's description of the exported decoder: sizes, token ids, input/output names; the cache's
    heads and head size and the vocabulary's size as the exported ``program`` takes and gives them, where given (a config's ``head_dim`` is not always
    the cache's: multi-head latent attention caches keys of its nope and rope dims together)."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = text.num_attention_heads
    hidden = text.hidden_size
    kv_heads, head_size = _cache_dims(program) if program is not None else (None, None)
    vocab = _logits_width(program) if program is not None else None
    generation = getattr(model, "generation_config", None)

    def token(name: str) -> Any:
        value = getattr(generation, name, None) if generation is not None else None
        return value if value is not None else getattr(text, name, None)

    eos = token("eos_token_id")
    return {
        "model": {
            "bos_token_id": token("bos_token_id") if token("bos_token_id") is not None else 0,
            "context_length": getattr(text, "max_position_embeddings", 2048),
            "decoder": {
                "session_options": {"log_id": "onnxruntime-genai", "provider_options": []},
                "filename": "model.onnx",
                "head_size": head_size or getattr(text, "head_dim", None) or hidden // heads,
                "hidden_size": hidden,
                "inputs": {
                    "input_ids": "input_ids",
                    "attention_mask": "attention_mask",
                    **({"position_ids": "position_ids"} if takes_positions(model) else {}),
                    "past_key_names": "past_key_values.%d.key",
                    "past_value_names": "past_key_values.%d.value",
                },
                "outputs": {"logits": "logits", "present_key_names": "present.%d.key",
                            "present_value_names": "present.%d.value"},
                "num_attention_heads": heads,
                "num_hidden_layers": text.num_hidden_layers,
                "num_key_value_heads": kv_heads or getattr(text, "num_key_value_heads", None) or heads,
            },
            "eos_token_id": eos if eos is not None else 0,
            "pad_token_id": token("pad_token_id") if token("pad_token_id") is not None else (
                eos[0] if isinstance(eos, list) else eos or 0),
            "type": _genai_type(config.model_type),
            "vocab_size": vocab or text.vocab_size,  # a decoder vocabulary of its own: Marian's
        },
        "search": {
            "diversity_penalty": 0.0, "do_sample": False, "early_stopping": True, "length_penalty": 1.0,
            "max_length": getattr(text, "max_position_embeddings", 2048), "min_length": 0,
            "no_repeat_ngram_size": 0, "num_beams": 1, "num_return_sequences": 1,
            "past_present_share_buffer": False, "repetition_penalty": 1.0, "temperature": 1.0, "top_k": 1,
            "top_p": 1.0,
        },
    }


def warn_states_genai_does_not_feed(program: OnnxProgram) -> None:
    """Say so where the model's cache holds more than keys and values (a hybrid's convolution or recurrent states):
    onnxruntime-genai's generic decoder feeds only those, so it cannot run the folder; onnxruntime can."""
    others = sorted({v.name.split(".", 2)[-1] for v in program.model.graph.inputs
                     if v.name.startswith("past_key_values.") and not v.name.endswith((".key", ".value"))})
    if others:
        program.report.warn(f"the cache holds states besides keys and values ({', '.join(others)}), which "
                            "onnxruntime-genai's generic decoder does not feed: run the folder with onnxruntime "
                            "(onnxport.generate(folder + '/model.onnx', input_ids)), not onnxruntime-genai")


def _cache_dims(program: OnnxProgram) -> tuple[int | None, int | None]:
    """The heads and head size of the first layer's cached keys, as the exported model takes them (None where
    they are not fixed sizes)."""
    for value in program.model.graph.inputs:
        if value.name == "past_key_values.0.key" and value.shape is not None and len(value.shape) == 4:
            heads, size = value.shape[1], value.shape[3]
            return (heads if isinstance(heads, int) else None), (size if isinstance(size, int) else None)
    return None, None


def _logits_width(program: OnnxProgram) -> int | None:
    """The size of the exported model's vocabulary: the last dim of its logits, where it is fixed."""
    for value in program.model.graph.outputs:
        if value.name == "logits" and value.shape is not None and isinstance(value.shape[-1], int):
            return value.shape[-1]
    return None


# The model types onnxruntime-genai runs as a plain decoder under their own name; it refuses a type it does not
# know, and runs "gpt2" by an older path (one past input per layer), so every other type is its generic "decoder",
# whose inputs and outputs are those genai_config.json names.
_GENAI_DECODERS = frozenset({"llama", "mistral", "qwen2", "qwen3", "phi", "phi3", "gemma", "gemma2", "granite", "olmo",
                             "smollm3"})


def _genai_type(model_type: str) -> str:
    return model_type if model_type in _GENAI_DECODERS else "decoder"


def takes_positions(model: torch.nn.Module) -> bool:
    """Whether the model's forward takes ``position_ids``."""
    return "position_ids" in inspect.signature(model.forward).parameters


def cached(program: OnnxProgram) -> bool:
    """Whether a text-generation ``program`` takes a KV cache (``past_key_values.*`` inputs)."""
    return any(v.name.startswith("past_key_values.") for v in program.model.graph.inputs)


def note_cacheless(model: torch.nn.Module, program: OnnxProgram, engine: Any) -> None:
    """Refuse a cache-less causal LM for transformers.js, and say in ``program``'s report what its folder is."""
    name = type(model).__name__
    if engine is not None:
        raise InvalidInputError(f"{name} returns no KV cache, and onnxport writes transformers.js decoders with one",
                                fix="export it for onnxruntime (no target): onnxport.generate runs that folder")
    program.report.warnings.append(
        f"{name} returns no KV cache: model.onnx takes the whole sequence at each step and returns logits alone "
        "(each new token recomputes the prompt). onnxruntime-genai cannot run it, so the folder has no "
        "genai_config.json; generate with onnxport.generate(folder + '/model.onnx', input_ids) or your own "
        "onnxruntime loop")


# What transformers may prepare for a generation step besides the token ids, which a folder's loop feeds too.
_LOOP_FEEDS = frozenset({"input_ids", "attention_mask", "position_ids", "cache_position", "past_key_values",
                         "use_cache", "inputs_embeds", "logits_to_keep", "return_dict"})


def check_plain_generation(model: torch.nn.Module, prompt: torch.Tensor) -> None:
    """Refuse a causal LM that transformers generates with by inputs it prepares itself (XLNet appends a token and
    builds ``perm_mask`` and ``target_mapping``; XLM appends a mask token and ``langs``): a text-generation folder's
    loop feeds the tokens so far, and would generate other tokens than transformers does."""
    prepare = getattr(model, "prepare_inputs_for_generation", None)
    if prepare is None:
        return
    try:
        prepared = prepare(prompt, attention_mask=torch.ones_like(prompt))
    except Exception:  # noqa: BLE001 - a model transformers cannot prepare for generation says so when generating
        return
    extra = sorted(k for k, v in prepared.items() if isinstance(v, torch.Tensor) and k not in _LOOP_FEEDS)
    ids = prepared.get("input_ids")
    changed = isinstance(ids, torch.Tensor) and (ids.shape != prompt.shape or not torch.equal(ids, prompt))
    if extra or changed:
        what = ", ".join([*(["input_ids with tokens of its own"] if changed else []), *extra])
        raise InvalidInputError(
            f"transformers generates with {type(model).__name__} by inputs it prepares itself ({what}), which a "
            "text-generation folder's loop does not feed: the folder would generate other tokens",
            fix="export its forward with onnxport.export, passing the inputs prepare_inputs_for_generation makes, "
            "and run your own loop")
