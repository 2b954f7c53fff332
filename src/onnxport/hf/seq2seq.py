"""transformers encoder-decoder models (T5, BART, Whisper...) exported for generation, as optimum splits them.

Three ONNX models, so that greedy generation runs entirely in onnxruntime (``onnxport.generate_seq2seq``):

- ``encoder``: ``input_ids``, ``attention_mask`` (or speech: ``input_features`` or ``input_values``, with the
  ``attention_mask`` its feature extractor gives) -> ``last_hidden_state`` (and ``encoder_attention_mask``, where
  the encoder gives the mask of its own states: Moonshine's and Cohere ASR's downsample the audio's);
- ``decoder`` (the first step, no past): ``input_ids``, ``encoder_attention_mask`` (where the model uses
  it), ``encoder_hidden_states`` -> ``logits``, ``present.{i}.decoder.key``/``.value`` and
  ``present.{i}.encoder.key``/``.value`` (the cross-attention keys and values of the encoder's states);
- ``decoder_with_past``: the same inputs plus ``past_key_values.{i}.decoder.*``/``.encoder.*`` -> the same
  outputs; the cross-attention part of the cache is read, never recomputed, and returned as it came.

The cache is the model's ``EncoderDecoderCache``; dims are named as optimum names them (``batch_size``,
``decoder_sequence_length``, ``encoder_sequence_length``, ``past_decoder_sequence_length``). A bare
encoder-decoder (``T5Model``, ``WhisperModel``: no head; the two sessions of transformers.js's feature-extraction
folder for one) is split so too, its decoders giving the decoder's ``last_hidden_state`` where the others give
``logits``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from onnxport.errors import InvalidInputError
from onnxport.hf.signature import cache_argument, cache_of
from onnxport.program import OnnxProgram
from onnxport.serial import serialized

__all__ = ["VISION_TEXT_DECODERS", "Seq2SeqPrograms", "check_speech", "decoder_of", "decoder_start_token",
           "encoder_of", "export_seq2seq"]

# The encoder inputs whose sizes past the batch are the example's: a spectrogram's, an image's.
FIXED_SIZE_INPUTS = ("input_features", "pixel_values")
# The types whose decoder reads another output of the encoder than its last_hidden_state (PP-FormulaNet's: the
# pooler_output, its vision tower's map projected to rows), which the encoder model gives as last_hidden_state.
POOLED_STATES = {"pp_formulanet": "pooler_output"}
# The types whose text decoder cross-attends the states of a vision model with no encoder-decoder config of their
# own (BLIP's captioner), as an encoder-decoder's decoder does: the attribute names of the two, and the text config's
# token its generate stops at (BLIP's: its [SEP], not its eos).
VISION_TEXT_DECODERS = {"blip": ("vision_model", "text_decoder", "sep_token_id")}
PAST, NEW = 3, 2  # the with-past decoder is captured from a step of NEW tokens after PAST
# The ONNX dims, named as optimum names them.
BATCH = torch.export.Dim("batch_size")
ENCODER = torch.export.Dim("encoder_sequence_length")
DECODER = torch.export.Dim("decoder_sequence_length")
PAST_DECODER = torch.export.Dim("past_decoder_sequence_length")
AUDIO = torch.export.Dim("audio_sequence_length")  # a clip's samples or frames, before the encoder downsamples them


class Seq2SeqPrograms(NamedTuple):
    """The three exported parts; ``generate_seq2seq(*programs, inputs, ...)`` generates with them."""

    encoder: OnnxProgram
    decoder: OnnxProgram
    decoder_with_past: OnnxProgram


class EncoderPart(torch.nn.Module):
    """The model's encoder alone: its inputs -> ``{"last_hidden_state": ...}``, and ``encoder_attention_mask``
    where ``states_mask`` is set (the encoder's output carries the mask of its states)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.encoder = encoder_of(model)
        self.states = POOLED_STATES.get(model.config.model_type, "last_hidden_state")
        self.states_mask = False

    def forward(self, input_ids: Any = None, attention_mask: Any = None, input_features: Any = None,
                inputs_embeds: Any = None, pixel_values: Any = None, flattened_patches: Any = None,
                input_values: Any = None) -> dict[str, Any]:
        """``input_ids``/``attention_mask`` for text, ``input_features`` or ``input_values`` (raw samples) for
        speech, ``inputs_embeds`` (with ``attention_mask``) for a vision-language model's prompt, its image rows
        merged in; ``pixel_values`` for an encoder of images (a VisionEncoderDecoder's), ``flattened_patches`` with
        their ``attention_mask`` for Pix2Struct's."""
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "input_features": input_features,
                  "inputs_embeds": inputs_embeds, "pixel_values": pixel_values,
                  "flattened_patches": flattened_patches, "input_values": input_values}
        out = self.encoder(**{k: v for k, v in inputs.items() if v is not None}, return_dict=True)
        states = {"last_hidden_state": getattr(out, self.states)}
        if self.states_mask:
            states["encoder_attention_mask"] = out.attention_mask.to(torch.int64)
        return states


class DecoderPart(torch.nn.Module):
    """One decoder step of the whole model on given encoder states: ``{"logits", "present"}``; for a bare
    encoder-decoder (``T5Model``, ``WhisperModel``: no head), ``{"last_hidden_state", "present"}``, its decoder's
    states where the others give logits."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model
        self.states_type: Any = None  # the encoder's output class, where it carries the mask of its states
        self.self_only = False  # the cache holds self-attention alone: cross-attention recomputed at each step

    def forward(self, input_ids: Any = None, encoder_attention_mask: Any = None, encoder_hidden_states: Any = None,
                past_key_values: Any = None, inputs_embeds: Any = None) -> dict[str, Any]:
        """``present`` is the ``EncoderDecoderCache`` after the step. The model is handed the cache under the
        name its forward takes (``cache`` from transformers 5.24 on); the new tokens as ids, or as their
        embeddings (``inputs_embeds``: a consumer that embeds them itself, transformers.js's Florence-2), which go
        to the model's decoder and its output embeddings (the head): Florence-2's forward makes a start token of
        its own when it is given no ids. A :data:`VISION_TEXT_DECODERS` type's text decoder (BLIP's) takes the ids
        itself, and gives the logits. Where the encoder's output carries the mask of its states (``states_type``:
        Moonshine's forward reads ``encoder_outputs.attention_mask``), ``encoder_attention_mask`` is that mask, or
        None."""
        from transformers.modeling_outputs import BaseModelOutput, BaseModelOutputWithPooling

        if self.self_only:  # an empty cross-attention cache, which the step fills from encoder_hidden_states
            from transformers.cache_utils import DynamicCache, EncoderDecoderCache

            past_key_values = EncoderDecoderCache(past_key_values or DynamicCache(), DynamicCache())
        if inputs_embeds is not None or self.model.config.model_type in VISION_TEXT_DECODERS:  # the decoder alone
            decoder = decoder_of(self.model)
            tokens = {"input_ids": input_ids} if inputs_embeds is None else {"inputs_embeds": inputs_embeds}
            out = decoder(**tokens, encoder_hidden_states=encoder_hidden_states,
                          encoder_attention_mask=encoder_attention_mask, use_cache=True, return_dict=True,
                          **{cache_argument(decoder): past_key_values})
            logits = out.logits if inputs_embeds is None else self.model.get_output_embeddings()(out.last_hidden_state)
            return {"logits": logits, "present": cache_of(out)}
        states = BaseModelOutput(last_hidden_state=encoder_hidden_states)
        if self.states_type is not None:
            states = self.states_type(last_hidden_state=encoder_hidden_states, attention_mask=encoder_attention_mask)
            encoder_attention_mask = None
        elif self.model.config.model_type in POOLED_STATES:
            states = BaseModelOutputWithPooling(last_hidden_state=encoder_hidden_states,
                                                pooler_output=encoder_hidden_states)
        out = self.model(decoder_input_ids=input_ids, attention_mask=encoder_attention_mask, encoder_outputs=states,
                         use_cache=True,
                         return_dict=True,
                         **{cache_argument(self.model): past_key_values})
        present = cache_of(out)
        head = "logits" if "logits" in out else "last_hidden_state"  # a bare model's: its decoder's states
        return {head: out[head], "present": present.self_attention_cache if self.self_only else present}


@serialized
def export_seq2seq(model: torch.nn.Module, inputs: dict[str, torch.Tensor], *, opset: int | None = None,
                   verify: bool = True, progress: bool = False, target: Any = None,
                   dtype: torch.dtype | None = None, decoder_embeds: bool = False,
                   audio_axes: dict[int, int] | None = None, states_mask: bool = True,
                   cross_cache: bool = True) -> Seq2SeqPrograms:
    """Export ``model`` (a transformers encoder-decoder for generation) as encoder, decoder and decoder with past;
    a bare one (``T5Model``: no head) too, its decoders giving its decoder's ``last_hidden_state`` for ``logits``.

    ``inputs`` are example encoder inputs, ``{"input_ids", "attention_mask"}``, ``{"input_features"}`` or
    ``{"input_values"}`` (with their ``attention_mask`` where the feature extractor gives one),
    ``{"inputs_embeds", "attention_mask"}``, ``{"pixel_values"}`` or ``{"flattened_patches", "attention_mask"}``,
    batch 2 or more (an image's sizes are the example's; a patch count is dynamic; the axes of the audio input
    in ``audio_axes`` follow the clip's length, ``audio_sequence_length``, its mask's too, from the smallest
    size the dict gives for each: the rest are the example's, as a Whisper spectrogram's). Batch,
    lengths and past lengths are dynamic in all three models, up to the decoder's table of learned positions where it
    reads one (a BERT decoder's). ``opset``, ``verify``, ``progress``, ``target`` and ``dtype`` are
    ``onnxport.export``'s, passed to the three exports. ``decoder_embeds``: the decoders take the new tokens'
    embeddings (``inputs_embeds``) instead of their ids. ``states_mask``: where the encoder gives the mask of its
    own states (its output's ``attention_mask``: Moonshine's, Cohere ASR's), the encoder returns it as
    ``encoder_attention_mask`` and the decoders take that mask; False: the decoders take none (transformers.js feeds
    such a type's decoder none, one unpadded clip at a time). ``cross_cache=False``: the cache holds the
    self-attention's keys and values alone (``past_key_values.{i}.key``/``.value``, as a decoder-only model's), and
    each step computes the cross-attention's from ``encoder_hidden_states`` (transformers.js caches a
    VisionEncoderDecoder's GPT-2 decoder so).
    """
    from onnxport.api import export

    model = model.eval()
    start = _start_token(model)
    encoder, decoder = EncoderPart(model), DecoderPart(model)
    decoder.self_only = not cross_cache
    kw = dict(opset=opset, verify=verify, progress=progress, target=target, dtype=dtype)
    text = {0: BATCH, 1: ENCODER}
    shapes = {name: {0: BATCH} if name in FIXED_SIZE_INPUTS else text for name in inputs}
    audio = next((name for name in ("input_values", "input_features") if name in inputs), None)
    clip = AUDIO  # the clip's length: the encoder's states are shorter (downsampled)
    if audio_axes:
        clip = torch.export.Dim(AUDIO.__name__, min=min(audio_axes.values()))
    if audio is not None:
        shapes[audio] = {0: BATCH, **dict.fromkeys(audio_axes or (), clip)}
        if "attention_mask" in inputs:
            shapes["attention_mask"] = {0: BATCH, 1: clip}
    with torch.no_grad():
        out = encoder.encoder(**inputs, return_dict=True)
    if "attention_mask" in getattr(type(out), "__dataclass_fields__", {}):  # read by the model's forward
        decoder.states_type = type(out)
    own = getattr(out, "attention_mask", None)  # the encoder's mask of its own states
    encoder.states_mask = states_mask and own is not None
    encoder_prog = export(encoder, (), inputs, dynamic_shapes=shapes, **kw)
    states = getattr(out, encoder.states)  # what the encoder model gives, from the run above
    batch = states.shape[0]
    step = {"input_ids": torch.full((batch, 1), start, dtype=torch.long)}
    mask = own.to(torch.int64) if encoder.states_mask else inputs.get("attention_mask")
    if mask is not None and _uses_encoder_mask(model) and (states_mask or decoder.states_type is None):
        step["encoder_attention_mask"] = mask
    step["encoder_hidden_states"] = states  # inputs in optimum's order
    # The first step has one token: torch.export would fix a length of 1, so it is captured with PAST.
    first = dict(step, input_ids=_ids(model, batch, PAST))
    longest = _longest_decoder(model)
    decoder_dim = DECODER if longest is None else torch.export.Dim(DECODER.__name__, max=longest)
    masked = text if audio is None or encoder.states_mask else {0: BATCH, 1: clip}  # the states' or the audio's
    shapes = {"input_ids": {0: BATCH, 1: decoder_dim}, "encoder_hidden_states": text, "encoder_attention_mask": masked,
              "inputs_embeds": {0: BATCH, 1: decoder_dim}}
    embed = decoder_of(model).get_input_embeddings() if decoder_embeds else None
    if decoder_embeds:
        first = {"inputs_embeds": _embedded(embed, first.pop("input_ids")), **first}
    decoder_prog = export(decoder, (), first, dynamic_shapes={k: shapes[k] for k in first}, **kw)
    with torch.no_grad():
        cache = decoder(**first)["present"]
    with_past = dict(step, input_ids=_ids(model, batch, NEW, seed=1), past_key_values=cache)
    if decoder_embeds:
        with_past = {"inputs_embeds": _embedded(embed, with_past.pop("input_ids")), **with_past}
    if longest is not None:  # the past and the new tokens each at most all positions but NEW (their sum, all)
        past_dim = torch.export.Dim(PAST_DECODER.__name__, max=longest - NEW)
        decoder_dim = torch.export.Dim(DECODER.__name__, max=longest - NEW)
        shapes.update(input_ids={0: BATCH, 1: decoder_dim}, inputs_embeds={0: BATCH, 1: decoder_dim})
    layer = ({0: BATCH, 2: PAST_DECODER if longest is None else past_dim},) * 2
    if cross_cache:
        layer += ({0: BATCH, 2: ENCODER},) * 2
    # (a layer the step left empty has no tensors: a decoder whose cache is sized by another count of layers, an
    # MBart decoder's by its config's encoder_layers, as Donut's is)
    layers = cache.self_attention_cache.layers if cross_cache else cache.layers
    shapes = dict(shapes, past_key_values=[layer if each.keys is not None else () for each in layers])
    past_prog = export(decoder, (), with_past, dynamic_shapes={k: shapes[k] for k in with_past}, **kw)
    return Seq2SeqPrograms(encoder_prog, decoder_prog, past_prog)


def check_speech(config: Any, auto: str) -> None:
    """Refuse, before it is loaded, a speech-recognition model that is not an encoder-decoder: a language model
    that reads its audio encoder's rows among its prompt's tokens (Voxtral, Granite Speech, Qwen3-ASR, ...), as a
    vision-language model reads an image's."""
    if not getattr(config, "is_encoder_decoder", False):
        from transformers.models.auto import modeling_auto

        from onnxport.hf.multimodal.support import AUDIO_SUPPORTED

        name = modeling_auto.MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES.get(config.model_type, f"{auto}'s class")
        raise InvalidInputError(
            f"onnxport does not export {config.model_type} models for automatic-speech-recognition yet: its class "
            f"for it ({name}) is a language model that reads its audio encoder's rows among its prompt's tokens "
            "(audio-text-to-text), not an encoder of the audio and a decoder that cross-attends it, the split "
            "onnxport writes (encoder_model, decoder_model, decoder_with_past_model)",
            fix="export it for audio-text-to-text" if config.model_type in AUDIO_SUPPORTED else
                "export its language model for text-generation, or the whole model with onnxport.export")


def encoder_of(model: torch.nn.Module) -> torch.nn.Module:
    """The encoder of ``model``: ``get_encoder``'s, or the vision model of a :data:`VISION_TEXT_DECODERS` type."""
    names = VISION_TEXT_DECODERS.get(model.config.model_type)
    return getattr(model, names[0]) if names else model.get_encoder()


def decoder_of(model: torch.nn.Module) -> torch.nn.Module:
    """The decoder stack of ``model`` (``get_decoder``, followed down: Florence-2's gives its language model, an
    encoder-decoder of its own), or the text decoder of a :data:`VISION_TEXT_DECODERS` type."""
    names = VISION_TEXT_DECODERS.get(model.config.model_type)
    if names:
        return getattr(model, names[1])
    decoder = model.get_decoder()
    while hasattr(decoder, "get_decoder") and decoder.get_decoder() is not decoder:
        decoder = decoder.get_decoder()
    return decoder


def _longest_decoder(model: torch.nn.Module) -> int | None:
    """The most tokens the decoder takes where it reads learned positions from a table of that length (a BERT
    decoder's ``max_position_embeddings``: a VisionEncoderDecoder's, whose capture must bound its lengths by it),
    else None (any length)."""
    longest = getattr(model.config.get_text_config(decoder=True), "max_position_embeddings", None)
    tables = (m for m in decoder_of(model).modules() if isinstance(m, torch.nn.Embedding))
    return longest if any(table.num_embeddings == longest for table in tables) else None


def _embedded(embed: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return embed(ids)


def _start_token(model: torch.nn.Module) -> int:
    start = decoder_start_token(getattr(model, "generation_config", None), model.config)  # a bare model has none
    if start is None:
        raise InvalidInputError(f"{type(model).__name__} has no decoder_start_token_id",
                                fix="set model.generation_config.decoder_start_token_id")
    return start


def decoder_start_token(generation: Any, config: Any) -> int | None:
    """The token an encoder-decoder's decoder starts from, as transformers' ``generate`` picks it: the generation
    config's ``decoder_start_token_id``, else the model config's (or its decoder's), else the beginning-of-sequence
    token of the same (T5Gemma 2 names no start token: its decoder starts from its ``bos_token_id``); for a
    :data:`VISION_TEXT_DECODERS` type, its text config's ``bos_token_id``, as BLIP's ``generate`` takes it."""
    decoder = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    if getattr(config, "model_type", None) in VISION_TEXT_DECODERS:  # BLIP's generate: its text config's bos
        return getattr(decoder, "bos_token_id", None)
    for name in ("decoder_start_token_id", "bos_token_id"):
        for holder in (generation, config, decoder):
            value = getattr(holder, name, None)
            if value is not None:
                return int(value[0] if isinstance(value, (list, tuple)) else value)
    return None


def _ids(model: torch.nn.Module, batch: int, length: int, seed: int = 0) -> torch.Tensor:
    vocab = model.config.get_text_config().vocab_size
    return torch.randint(min(3, vocab - 1), vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


def _uses_encoder_mask(model: torch.nn.Module) -> bool:
    # Whisper's encoder takes no padding mask and its forward ignores ``attention_mask``.
    return model.config.model_type != "whisper"
