"""``feature-extraction`` by a neural audio codec (Mimi, DAC): its ``encode`` and ``decode`` as two models, the
split transformers.js loads (its auto-encoders, ``MimiModel``/``DacModel``: sessions ``encoder_model`` and
``decoder_model``, run by ``encode`` then ``decode``), and the files a default export writes too:

- ``encoder_model``: ``input_values`` (``[batch, channels, samples]``, the raw audio its feature extractor gives) ->
  ``audio_codes`` (``[batch, codebooks, frames]``, int64: transformers' ``model.encode(input_values).audio_codes``);
- ``decoder_model``: ``audio_codes`` -> ``audio_values`` (transformers' ``model.decode(audio_codes).audio_values``:
  ``[batch, channels, samples]`` for Mimi, ``[batch, samples]`` for DAC).

Batch, the clip's samples and the code frames are dynamic; the number of codebooks is the config's. Mimi's
``padding_mask`` is not an input: transformers' encoder does not read it (its batches are of one length), and its
decoder cuts the audio to it, which a caller does by slicing. A clip's samples need not be a multiple of the hop:
the encoder pads them as transformers does (``onnxport.hf._mimi_codec`` keeps Mimi's padding symbolic). SNAC,
which transformers.js also loads so, has no transformers model to export.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from onnxport.errors import InvalidInputError
from onnxport.hf.examples import Task

__all__ = ["FEATURES", "PIECES", "TYPES", "CodecDecoder", "CodecEncoder", "check_audio_codec", "examples",
           "export_audio_codec", "hop_length", "is_audio_codec"]

PIECES = ("encoder_model", "decoder_model")  # the file stems, in the order they run
TYPES = ("mimi", "dac")  # the model types whose encode and decode this split computes
BATCH = torch.export.Dim("batch_size")
_HOPS = 8.5  # the example clip's length, in hops: a partial frame that the encoder pads


def _encoder_inputs(model: torch.nn.Module, config: Any) -> dict[str, torch.Tensor]:
    return examples(model)[0]


# feature-extraction by a codec: its two models, made from the one loaded (export_audio_codec)
FEATURES = Task("AutoModel", _encoder_inputs, pieces=PIECES)


def is_audio_codec(config: Any) -> bool:
    """Whether ``config``'s bare model is an audio codec this split exports (:data:`TYPES`)."""
    return getattr(config, "model_type", None) in TYPES


def check_audio_codec(config: Any, streaming: bool | None) -> None:
    """Refuse, before it is loaded, a codec export this split does not make: streamed weights (the decoder's example
    codes come from running the encoder)."""
    if streaming:
        raise InvalidInputError(f"a {config.model_type} codec is exported with its weights loaded (the decoder's "
                                "example codes come from running the encoder)",
                                fix="leave streaming unset, or pass streaming=False")


class CodecEncoder(torch.nn.Module):
    """The codec's ``encode``: raw audio to its codes."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_values: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"audio_codes": self.model.encode(input_values).audio_codes}


class CodecDecoder(torch.nn.Module):
    """The codec's ``decode``: codes to audio."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, audio_codes: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"audio_values": self.model.decode(audio_codes=audio_codes).audio_values}


def hop_length(model: torch.nn.Module) -> int:
    """Samples per code frame: the product of the strides of the encoder's convolutions."""
    return math.prod(m.stride[0] for m in model.encoder.modules() if isinstance(m, torch.nn.Conv1d))


def examples(model: torch.nn.Module) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Example inputs of the two models: two clips of eight and a half hops (random audio), and their codes."""
    channels = getattr(model.config, "audio_channels", 1)
    samples = int(_HOPS * hop_length(model))
    audio = {"input_values": torch.randn(2, channels, samples, generator=torch.Generator().manual_seed(0))}
    with torch.no_grad():
        codes = CodecEncoder(model)(**audio)
    return audio, codes


def export_audio_codec(model: torch.nn.Module, **options: Any) -> dict[str, Any]:
    """The two models of codec ``model`` (:data:`PIECES` -> ``OnnxProgram``), each exported and verified with
    ``onnxport.export`` and ``options``."""
    from onnxport.api import export

    model = model.eval()
    audio, codes = examples(model)
    hop = hop_length(model)
    samples = torch.export.Dim("audio_sequence_length", min=2 * hop)
    frames = torch.export.Dim("audio_frames", min=2)
    return {PIECES[0]: export(CodecEncoder(model), (), audio,
                              dynamic_shapes={"input_values": {0: BATCH, 2: samples}}, **options),
            PIECES[1]: export(CodecDecoder(model), (), codes,
                              dynamic_shapes={"audio_codes": {0: BATCH, 2: frames}}, **options)}
