"""Greedy generation over an exported language model with a KV cache, in onnxruntime.

The model is one that ``onnxport.export`` made from a transformers causal LM called with a
``DynamicCache``: inputs ``input_ids``, ``attention_mask``, ``position_ids`` (where forward takes it)
and ``past_key_values.{i}.key``/``.value``; outputs ``logits`` and ``present.{i}.key``/``.value``.
A model exported without a cache (a causal LM that returns none) runs the whole sequence at each step.
A hybrid model's other states (``past_key_values.{i}.conv_state``, ...) start as zeros and are fed back the same
way. The first step (prefill) runs the prompt on an empty past; each later step (decode) runs the token
just chosen and feeds ``present.*`` back as ``past_key_values.*``. Positions come from the attention
mask (``cumsum - 1``), as transformers computes them, so left-padded prompts generate as in PyTorch.

:func:`generate_seq2seq` does the same for an encoder-decoder model exported by ``onnxport.hf.seq2seq``:
the encoder runs once, the first decoder model runs ``decoder_start_token_id`` on no past, and the
decoder with past runs each later token, fed the ``present.*`` of the step before.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from onnxport.errors import InvalidInputError

__all__ = ["BRANCH", "cache_layout", "decoder_step", "first_past", "generate", "generate_seq2seq", "open_session"]

_PAST = re.compile(r"past_key_values\.(\d+)\.(key|value)")
_STATIC_LENGTH = "past_key_values.length"  # the tokens a StaticCache holds, fed back from present.length
BRANCH = "use_cache_branch"  # a merged decoder's choice: false for the first step (no cache), true after


def generate(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    *,
    max_new_tokens: int = 8,
    eos_token_id: int | None = None,
    pad_token_id: int | None = None,
    output_logits: bool = False,
    embed: Callable[[np.ndarray, bool], np.ndarray] | None = None,
    positions: Callable[[np.ndarray, int], np.ndarray] | None = None,
) -> torch.Tensor | tuple[torch.Tensor, list[torch.Tensor]]:
    """Greedy decoding: the prompt and up to ``max_new_tokens`` new tokens, ``(batch, prompt + new)``.

    ``model`` is an ``OnnxProgram`` or the path of a saved ONNX model. ``attention_mask`` (1 for tokens,
    0 for padding; left padding for a batch of prompts of different lengths) defaults to all ones.
    With ``eos_token_id``, a row that produced it continues with ``pad_token_id`` (default: the eos id),
    and generation stops early once every row has. With ``output_logits`` it returns ``(tokens, logits)``,
    ``logits[i]`` the ``(batch, vocab)`` scores of step i (as transformers' ``output_logits``).

    A decoder that takes ``inputs_embeds`` instead of ``input_ids`` (a vision-language model's) needs
    ``embed(ids, prompt)``: the embeddings of the tokens ``ids`` (the prompt when ``prompt`` is true). A decoder
    whose positions are not counted over the mask (a vision-language model's three per token) needs
    ``positions(mask, new)``: those of the last ``new`` tokens, given the mask so far.
    """
    session = open_session(model)
    inputs = {i.name: i for i in session.get_inputs()}
    layers = cache_layout(inputs)
    if "input_ids" not in inputs and embed is None:
        raise InvalidInputError("the model takes inputs_embeds, not input_ids: generate needs embed=",
                                fix="pass embed=, a function of the token ids giving their embeddings")
    ids = input_ids.detach().cpu().numpy().astype(np.int64)
    mask = (torch.ones_like(input_ids) if attention_mask is None else attention_mask).cpu().numpy().astype(np.int64)
    if ids.ndim != 2 or mask.shape != ids.shape:
        raise InvalidInputError(f"input_ids {list(ids.shape)} and attention_mask {list(mask.shape)} must be "
                                "(batch, length)",
                                fix="pass 2-d tensors of the same shape")
    batch = ids.shape[0]
    past = first_past(inputs, layers, batch, ids.shape[1] + max_new_tokens)
    tokens, step_ids = ids, ids
    finished = np.zeros(batch, dtype=bool)
    scores = []
    pad = eos_token_id if pad_token_id is None else pad_token_id
    for step in range(max_new_tokens):
        logits, next_past = decoder_step(session, inputs, step_ids, mask, past, first=step == 0, positions=positions,
                                         embed=embed)
        chosen = _pick(logits, scores, finished, eos_token_id, pad)
        tokens = np.concatenate([tokens, chosen[:, None]], axis=1)
        mask = np.concatenate([mask, np.ones((batch, 1), dtype=np.int64)], axis=1)
        past = next_past
        step_ids = chosen[:, None] if layers else tokens
        if eos_token_id is not None and finished.all():
            break
    return (torch.from_numpy(tokens), scores) if output_logits else torch.from_numpy(tokens)


def generate_seq2seq(
    encoder: Any,
    decoder: Any,
    decoder_with_past: Any,
    inputs: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    *,
    decoder_start_token_id: int,
    max_new_tokens: int = 8,
    eos_token_id: int | None = None,
    pad_token_id: int | None = None,
    output_logits: bool = False,
    decoder_input_ids: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, list[torch.Tensor]]:
    """Greedy decoding with an exported encoder-decoder: ``(batch, 1 + new)`` decoder tokens, the start token
    first (as transformers returns them); or, given ``decoder_input_ids`` (a decoder prompt, the start token first,
    as long in every row: Donut's task prompt), ``(batch, prompt + new)``.

    The three models are ``OnnxProgram`` objects or paths (``export_seq2seq``'s result unpacks into them).
    ``inputs`` is what the encoder takes first: ``input_ids`` or ``inputs_embeds`` (with ``attention_mask``, default
    all ones), or audio (``input_features`` or ``input_values``, with the ``attention_mask`` of padded clips).
    ``eos_token_id``, ``pad_token_id`` and ``output_logits`` work as in :func:`generate`.
    """
    sessions = [open_session(m) for m in (encoder, decoder, decoder_with_past)]
    main = sessions[0].get_inputs()[0].name
    source = inputs.detach().cpu().numpy()
    feed = {main: source.astype(np.int64) if main == "input_ids" else source.astype(np.float32)}
    mask = None
    if "attention_mask" in {i.name for i in sessions[0].get_inputs()}:
        mask = np.ones(feed[main].shape[:2], dtype=np.int64) if attention_mask is None else \
            attention_mask.cpu().numpy().astype(np.int64)
        feed["attention_mask"] = mask
    encoded = _run(sessions[0], feed)
    states = encoded.get("last_hidden_state", next(iter(encoded.values())))
    batch = states.shape[0]
    # the mask of the encoder's own states where it gives one (an audio encoder that downsamples), else the input's
    step = {"encoder_hidden_states": states, "encoder_attention_mask": encoded.get("encoder_attention_mask", mask)}
    tokens = np.full((batch, 1), decoder_start_token_id, dtype=np.int64) if decoder_input_ids is None else \
        decoder_input_ids.cpu().numpy().astype(np.int64)
    past: dict[str, np.ndarray] = {}
    finished = np.zeros(batch, dtype=bool)
    scores = []
    pad = eos_token_id if pad_token_id is None else pad_token_id
    for i in range(max_new_tokens):
        session = sessions[1] if i == 0 else sessions[2]
        outputs = _run(session, {"input_ids": tokens if i == 0 else tokens[:, -1:], **step, **past})
        chosen = _pick(outputs["logits"][:, -1, :], scores, finished, eos_token_id, pad)
        tokens = np.concatenate([tokens, chosen[:, None]], axis=1)
        past = {name.replace("present.", "past_key_values.", 1): value for name, value in outputs.items()
                if name.startswith("present.")}
        if eos_token_id is not None and finished.all():
            break
    return (torch.from_numpy(tokens), scores) if output_logits else torch.from_numpy(tokens)


def first_past(inputs: dict[str, Any], layers: dict[str, tuple[int, int, Any]], batch: int,
               total: int) -> dict[str, np.ndarray]:
    """The cache fed with the first step (``inputs``: the session's inputs by name, ``layers``: their
    :func:`cache_layout`): empty keys and values, zero states; a StaticCache model's buffers of their fixed length,
    refused where ``total`` tokens (the prompt and those to generate) do not fit."""
    # A StaticCache model has fixed-length buffers and counts the tokens written; a DynamicCache one grows.
    length = inputs[next(iter(layers))].shape[2] if _STATIC_LENGTH in inputs else 0
    past = {name: np.zeros((batch, heads, length, size), dtype=dtype) for name, (heads, size, dtype) in layers.items()}
    past.update(_fresh_states(inputs, batch))
    if _STATIC_LENGTH in inputs:
        if not isinstance(length, int) or total > length:
            raise InvalidInputError(f"the model's static cache holds {length} tokens; {total} (the prompt and the "
                                    "new tokens) need more", fix="export with a larger StaticCache(max_cache_len=...)")
        past[_STATIC_LENGTH] = np.array(0, dtype=np.int64)
    return past


def decoder_step(session: Any, inputs: dict[str, Any], step_ids: np.ndarray, mask: np.ndarray,
                 past: dict[str, np.ndarray], *, first: bool,
                 positions: Callable[[np.ndarray, int], np.ndarray] | None = None,
                 embed: Callable[[np.ndarray, bool], np.ndarray] | None = None,
                 ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """One call of a decoder on the tokens ``step_ids`` (``mask``: the whole sequence's so far, these included;
    ``past``: the cache, :func:`first_past`'s on the ``first`` step): the logits of the last position
    ``(batch, vocab)`` and the cache for the next step (each ``present.*`` fed back as its ``past_key_values.*``;
    transformers.js's ``present_conv.{i}`` as ``past_conv.{i}``). A merged decoder is fed its ``use_cache_branch``:
    false on the first step, true after. ``positions`` and ``embed`` are :func:`generate`'s."""
    new = step_ids.shape[1]
    feed = {"input_ids": step_ids, "attention_mask": mask, **past,
            "position_ids": _counted_positions(mask, new) if positions is None else positions(mask, new)}
    if "input_ids" not in inputs:
        feed["inputs_embeds"] = embed(step_ids, first)
    if BRANCH in inputs:
        feed[BRANCH] = np.array([not first])
    outputs = _run(session, feed)
    return outputs["logits"][:, -1, :], {name: outputs[_present(name)] for name in past}


def _present(past: str) -> str:
    """The output fed back as the cache input ``past``."""
    if past.startswith("past_key_values."):
        return "present." + past[len("past_key_values."):]
    return "present_" + past[len("past_"):]


def _counted_positions(mask: np.ndarray, new: int) -> np.ndarray:
    """Each of the last ``new`` tokens' position, counted over ``mask`` as transformers counts it; 1 for padding."""
    positions = np.cumsum(mask, axis=-1) - 1
    return np.where(mask == 0, 1, positions)[:, -new:]


def _run(session: Any, feed: dict[str, Any]) -> dict[str, np.ndarray]:
    """One step: the model's outputs by name, fed those of ``feed`` it takes."""
    taken = {i.name for i in session.get_inputs()}
    results = session.run(None, {k: v for k, v in feed.items() if k in taken})
    return dict(zip([o.name for o in session.get_outputs()], results))


def _pick(logits: np.ndarray, scores: list[torch.Tensor], finished: np.ndarray, eos: int | None,
          pad: int | None) -> np.ndarray:
    """The greedy tokens of ``logits``, the last position's (their scores appended to ``scores``); a row that
    produced ``eos`` continues with ``pad`` (``finished`` is updated in place)."""
    scores.append(torch.from_numpy(logits.copy()))
    chosen = scores[-1].numpy().argmax(-1).astype(np.int64)
    if eos is not None:
        chosen = np.where(finished, pad, chosen)
        finished |= chosen == eos
    return chosen


def open_session(model: Any) -> Any:
    """An onnxruntime CPU session of ``model``: an ``OnnxProgram`` or the path of a saved ONNX model."""
    import onnxruntime as ort

    if isinstance(model, (str, os.PathLike)):
        return ort.InferenceSession(os.fspath(model), providers=["CPUExecutionProvider"])
    proto = getattr(model, "model_proto", None)
    if proto is None:
        raise InvalidInputError(f"generate takes an OnnxProgram or a path to an .onnx file, not {type(model).__name__}",
                                fix="pass the result of onnxport.export(...) or the path it was saved to")
    return ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])


def _fresh_states(inputs: dict[str, Any], batch: int) -> dict[str, np.ndarray]:
    """The states a hybrid model's cache holds besides keys and values (``past_key_values.{i}.conv_state``, a
    recurrent layer's state), as they are before the first token: zeros of their fixed sizes, batch first (a
    dim that grows with the tokens, 0)."""
    states = {}
    for name, info in inputs.items():
        if name.startswith("past_") and not _PAST.fullmatch(name) and name != _STATIC_LENGTH:
            shape = [d if isinstance(d, int) else batch if i == 0 else 0 for i, d in enumerate(info.shape)]
            states[name] = np.zeros(shape, dtype=_DTYPES.get(info.type, np.float32))
    return states


def cache_layout(inputs: dict[str, Any]) -> dict[str, tuple[int, int, Any]]:
    """``{past input name: (kv heads, head size, numpy dtype)}``, checked against the naming scheme (empty for a
    model without a cache)."""
    first = "input_ids" if "inputs_embeds" not in inputs else "inputs_embeds"
    missing = [name for name in (first, "attention_mask") if name not in inputs]
    layers = {}
    for name, info in inputs.items():
        if _PAST.fullmatch(name):
            shape = info.shape
            if len(shape) != 4 or not isinstance(shape[1], int) or not isinstance(shape[3], int):
                raise InvalidInputError(f"{name} has shape {shape}; generate needs [batch, kv_heads, past, head_size] "
                                        "with static heads and head size", fix="export with dynamic_shapes='auto'")
            layers[name] = (shape[1], shape[3], _DTYPES.get(info.type, np.float32))
    if missing or (not layers and any(name.startswith("past_key_values.") for name in inputs)):
        raise InvalidInputError(
            f"the model's inputs ({', '.join(inputs)}) are not those of a language model"
            + (f": {', '.join(missing)} missing" if missing else ": past_key_values inputs with no .{i}.key"),
            fix="export the causal LM called with input_ids, attention_mask and past_key_values=DynamicCache(...), "
            "or with no cache at all",
        )
    return layers


_DTYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64}
