"""``text-to-audio`` by MusicGen (``MusicgenForConditionalGeneration``): text in, music out, generated code by code.

A MusicGen checkpoint holds three models: a T5 text encoder, a decoder that predicts ``num_codebooks`` audio codes
at each step (one embedding table and one head per codebook, the codebooks summed into one hidden state), and an
EnCodec codec whose decoder makes the waveform of the codes. It is exported as the three files transformers.js's
``MusicgenForConditionalGeneration`` loads (its ``Musicgen`` sessions), its generation loop left to the consumer:

- ``text_encoder``: ``input_ids``, ``attention_mask`` ``[batch, length]`` -> ``last_hidden_state`` (the text
  encoder's own states, not yet projected);
- ``decoder_model_merged``: ``input_ids`` ``[batch * num_codebooks, length]`` (the codebooks of a row one after the
  other, as transformers lays them out), ``encoder_attention_mask`` and ``encoder_hidden_states`` (the text
  encoder's; the decoder projects them to its width with the checkpoint's ``enc_to_dec_proj`` and zeroes the padded
  rows, as transformers' forward does, so that the zero states and zero mask transformers.js feeds for the
  unconditional half of classifier-free guidance are computed as transformers computes them), the cache
  (``past_key_values.{i}.decoder.*`` and ``.encoder.*``, batch rows ``batch``) and ``use_cache_branch`` ->
  ``logits`` ``[batch * num_codebooks, length, vocab]`` and ``present.*``. The batch is dynamic: transformers.js
  doubles it for guidance (``guidance_scale > 1``);
- ``encodec_decode``: ``audio_codes`` ``[1, batch, num_codebooks, frames]`` -> ``audio_values`` ``[batch,
  channels, samples]``. A stereo checkpoint (``audio_channels`` 2: its codebooks interleave the left channel's and
  the right's) decodes each channel's codebooks apart and stacks them, as transformers' ``generate`` does.

Each file is exported and verified against eager PyTorch (the merged decoder as its two steps, first and with
past); EnCodec's decoder is captured with the layers of :mod:`onnxport.hf._encodec_decoder`, so that it takes any
number of frames.

The delay pattern (codebook ``k`` lags ``k`` steps, pad tokens fill the gaps) and guidance are the consumer's loop,
as in transformers' ``generate``. transformers.js 4.3 feeds back pad tokens where the pattern starts, but not where
it ends (transformers does both: codebook ``k``'s last ``num_codebooks - 1 - k`` tokens before ``max_length``), so
with more than two codebooks (MusicGen's have four) the last frames it makes may differ from transformers'; with two
its music is transformers'. It lays out a stereo checkpoint's codes as a mono one's, and is refused one (see
:func:`check_musicgen`). Without a target the same three files are written, for a loop of one's own.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from typing import Any

import torch

from onnxport import metadata
from onnxport.arguments import check_output_folder
from onnxport.errors import InvalidInputError
from onnxport.hf import transformers_js
from onnxport.hf._encodec_decoder import decoder_symbolic
from onnxport.hf.loading import load_pretrained
from onnxport.hf.seq2seq import DecoderPart, Seq2SeqPrograms
from onnxport.program import OnnxProgram

__all__ = ["PIECES", "TYPES", "EncodecDecode", "TextEncoder", "check_musicgen", "export_decoders", "export_musicgen",
           "export_pieces", "file_names"]

TYPES = ("musicgen",)  # musicgen_melody prepends its conditioning to the decoder's input: another loop
PIECES = ("text_encoder", "decoder_model_merged", "encodec_decode")  # transformers.js's session files
TASK = "text-to-audio"
BATCH = torch.export.Dim("batch_size")
ENCODER = torch.export.Dim("encoder_sequence_length")
DECODER = torch.export.Dim("decoder_sequence_length")
PAST = torch.export.Dim("past_decoder_sequence_length")
FRAMES = torch.export.Dim("frames")


class TextEncoder(torch.nn.Module):
    """MusicGen's text encoder: ``last_hidden_state`` of the tokens, as transformers.js's ``encoder_forward``
    reads it."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.text_encoder = model.text_encoder

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> dict[str, torch.Tensor]:
        out = self.text_encoder(input_ids=input_ids, attention_mask=attention_mask, return_dict=True)
        return {"last_hidden_state": out.last_hidden_state}


class EncodecDecode(torch.nn.Module):
    """The codec's decoder on one chunk of codes (``audio_codes`` ``[1, batch, num_codebooks, frames]``), for a
    stereo checkpoint each channel's codebooks apart (see the module)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.audio_encoder = model.audio_encoder
        self.stereo = model.decoder.config.audio_channels == 2

    def forward(self, audio_codes: torch.Tensor) -> dict[str, torch.Tensor]:
        if not self.stereo:
            return {"audio_values": self.audio_encoder.decode(audio_codes, audio_scales=[None]).audio_values}
        left = self.audio_encoder.decode(audio_codes[:, :, ::2, :], audio_scales=[None]).audio_values
        right = self.audio_encoder.decode(audio_codes[:, :, 1::2, :], audio_scales=[None]).audio_values
        return {"audio_values": torch.cat([left, right], dim=1)}


def check_musicgen(config: Any, engine: str | None) -> None:
    """Refuse, before it is loaded, a MusicGen checkpoint whose codec this split does not decode as transformers
    does, or (``engine`` set: a transformers.js folder) whose codes transformers.js's class would not lay out as
    transformers does: a stereo one, whose two channels' codebooks share each delay (transformers.js delays every
    codebook by its index)."""
    chunked = getattr(config.audio_encoder, "chunk_length_s", None)
    if chunked:
        raise InvalidInputError(
            f"the checkpoint's EnCodec decodes its codes in chunks of {chunked} s (chunk_length_s), and MusicGen "
            "gives it one chunk", fix="save the checkpoint with audio_encoder.chunk_length_s null, as MusicGen's are")
    if engine is not None and getattr(config.decoder, "audio_channels", 1) == 2:
        raise InvalidInputError(
            "transformers.js 4.3 generates a stereo MusicGen's codes with the mono delay pattern (each codebook one "
            "step behind the one before), where the checkpoint delays each left and right pair together, so its "
            "music would not be the checkpoint's", fix="export it for onnxruntime (no target): the same three files")


def examples(model: torch.nn.Module) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Example inputs of the text encoder (a batch of two texts, the second padded) and of the codec (two rows of
    five frames' codes)."""
    config = model.config
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(3, config.text_encoder.vocab_size, (2, 7), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, 4:] = 0
    codes = torch.randint(0, config.decoder.vocab_size, (1, 2, config.decoder.num_codebooks, 5), generator=generator)
    return {"input_ids": ids, "attention_mask": mask}, {"audio_codes": codes}


def export_pieces(model: torch.nn.Module, **options: Any) -> dict[str, OnnxProgram]:
    """The three files of MusicGen ``model`` (:data:`PIECES` -> program), each exported and verified with
    ``onnxport.export`` and ``options`` (the merged decoder as its two steps, then merged)."""
    from onnxport.api import export

    model = model.eval()
    text, codes = examples(model)
    text_shapes = {"input_ids": {0: BATCH, 1: ENCODER}, "attention_mask": {0: BATCH, 1: ENCODER}}
    encoder = export(TextEncoder(model), (), text, dynamic_shapes=text_shapes, **options)
    decoders = export_decoders(model, text, **options)
    merged = transformers_js.merge_decoders(decoders.decoder, decoders.decoder_with_past)
    with decoder_symbolic():  # its paddings and its LSTM over any number of frames
        codec = export(EncodecDecode(model), (), codes, dynamic_shapes={"audio_codes": {1: BATCH, 3: FRAMES}},
                       **options)
    return dict(zip(PIECES, (encoder, merged, codec)))


def export_decoders(model: torch.nn.Module, text: dict[str, torch.Tensor], **options: Any) -> Seq2SeqPrograms:
    """The decoder's first step (no past) and its step with past on the text encoder's states of ``text``, each
    verified; the encoder program is None. Its rows are ``num_codebooks`` times the texts' (derived dims)."""
    from onnxport.api import export

    codebooks, vocab = model.config.decoder.num_codebooks, model.config.decoder.vocab_size
    with torch.no_grad():
        states = TextEncoder(model)(**text)["last_hidden_state"]
    rows = states.shape[0] * codebooks
    generator = torch.Generator().manual_seed(1)
    # codes and the pad token (vocab), which the delay pattern feeds
    first = {"input_ids": torch.randint(0, vocab + 1, (rows, 3), generator=generator),
             "encoder_attention_mask": text["attention_mask"], "encoder_hidden_states": states}
    shapes = {"input_ids": {0: codebooks * BATCH, 1: DECODER}, "encoder_attention_mask": {0: BATCH, 1: ENCODER},
              "encoder_hidden_states": {0: BATCH, 1: ENCODER}}
    decoder = DecoderPart(model)
    first_prog = export(decoder, (), first, dynamic_shapes=shapes, **options)
    with torch.no_grad():
        cache = decoder(**first)["present"]
    with_past = dict(first, input_ids=torch.randint(0, vocab + 1, (rows, 2), generator=generator),
                     past_key_values=cache)
    layer = ({0: BATCH, 2: PAST},) * 2 + ({0: BATCH, 2: ENCODER},) * 2
    past_shapes = dict(shapes, past_key_values=[layer] * len(cache.self_attention_cache.layers))
    past_prog = export(decoder, (), with_past, dynamic_shapes=past_shapes, **options)
    return Seq2SeqPrograms(None, first_prog, past_prog)


def file_names(engine: str | None, dtypes: Sequence[str] | None) -> list[str]:
    """The model files a folder gets: transformers.js's ``onnx/<piece><suffix>.onnx``, or ``<piece>.onnx``."""
    if engine is not None:
        return transformers_js.file_names(PIECES, dtypes)
    return [f"{piece}.onnx" for piece in PIECES]


def export_musicgen(directory: str, out: str, config: Any, *, engine: str | None, dtypes: Sequence[str] | None,
                    copied: Sequence[str], picked: Any = None, precision: torch.dtype | None = torch.float32,
                    streaming: bool | None = None, quantize: Any = None, **options: Any) -> dict[str, OnnxProgram]:
    """Export the MusicGen checkpoint in ``directory`` (``config`` read from it) into ``out``: the three
    :data:`PIECES` (``{piece: program}``, float32 for transformers.js), under ``onnx/`` in each of ``dtypes`` for
    transformers.js (``engine``: the onnxruntime its files are written for), else at the top of ``out``; then the
    ``copied`` files of ``directory`` (config, tokenizer, generation config). ``precision`` is export_hf's
    ``dtype`` (None: the checkpoint's); ``quantize`` rounds every file's linear layers (no target);
    ``options`` (``opset``, ``progress``, ``target``) go to each export; ``picked``, the task ``auto`` chose, is
    noted in each report."""
    check_musicgen(config, engine)
    if streaming:
        raise InvalidInputError("a MusicGen checkpoint is exported with its weights loaded (its decoder's example "
                                "inputs come from running its text encoder)", fix="leave streaming unset")
    check_output_folder(out, file_names(engine, dtypes))
    model = _load(directory, config, precision)
    half = precision == torch.float16
    pieces = export_pieces(model, dtype=torch.float16 if half else None, **options)
    if quantize is not None:
        pieces = {name: prog.quantize(quantize) for name, prog in pieces.items()}
    for prog in pieces.values():
        prog.model.metadata_props[metadata.TASK] = TASK
        if picked is not None:
            prog.report.notes.append(str(picked))
    os.makedirs(out, exist_ok=True)
    if engine is not None:
        made = transformers_js.variants(pieces, dtypes)  # every file made before any is written
        _copy(directory, out, copied)
        transformers_js.write_folder(out, made, {**transformers_js.processor_settings(directory),
                                                 **transformers_js.config_settings(config)})
        return pieces
    for name, prog in pieces.items():
        prog.save(os.path.join(out, f"{name}.onnx"))
    _copy(directory, out, copied)
    return pieces


def _load(directory: str, config: Any, precision: torch.dtype | None) -> torch.nn.Module:
    """``MusicgenForConditionalGeneration`` from ``directory``, built in float32 for fp32 and fp16 (float16 comes
    from the export's conversion), in ``precision`` otherwise (None: the checkpoint's); refused where the checkpoint
    lacks weights transformers would initialise at random."""
    import transformers

    built = {"dtype": torch.float32 if precision == torch.float16 else precision} if precision is not None else {}
    return load_pretrained(transformers.MusicgenForConditionalGeneration, directory, config,
                           "a whole MusicGen checkpoint", **built)


def _copy(directory: str, out: str, names: Sequence[str]) -> None:
    for name in names:
        shutil.copyfile(os.path.join(directory, name), os.path.join(out, name))
