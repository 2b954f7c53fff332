"""``text-to-audio`` for SpeechT5: the text-to-speech model (``SpeechT5ForTextToSpeech``) and its HiFi-GAN vocoder
(``SpeechT5HifiGan``, model type ``hifigan``), each its own folder, as transformers.js loads them (its
``SpeechT5ForTextToSpeech.generate_speech(input_ids, speaker_embeddings, {vocoder})`` and ``SpeechT5HifiGan``).

``export_hf(tts_directory, "text-to-audio", out, target="transformers.js")`` writes two sessions:

- ``encoder_model``: ``input_ids`` (dynamic batch and length) -> ``encoder_outputs`` (the text encoder's states)
  and ``encoder_attention_mask`` (int64: 0 at the config's ``pad_token_id``, the mask transformers'
  generate_speech makes when it is given none; transformers.js gives its encoder ``input_ids`` alone);
- ``decoder_model_merged``: one step of the speech decoder, batch 1 as generate_speech runs it:
  ``use_cache_branch``, ``output_sequence`` ``[1, frames, num_mel_bins]`` (the frames so far, an all-zero one
  first), ``encoder_attention_mask``, ``speaker_embeddings`` ``[1, speaker_embedding_dim]``,
  ``encoder_hidden_states`` and ``past_key_values.{i}.decoder.*``/``.encoder.*`` -> ``output_sequence_out`` (the
  frames with the step's last one appended), ``spectrum`` ``[reduction_factor, num_mel_bins]`` (the step's frames),
  ``prob`` ``[1, reduction_factor]`` (the stop probabilities) and ``present.*``. The step is the one transformers'
  ``generate_speech`` loop takes: the prenet over the whole ``output_sequence``, the decoder on its last row.

``export_hf(vocoder_directory, "text-to-audio", out, target="transformers.js")`` writes the vocoder's ``model``:
``spectrogram`` ``[frames, model_in_dim]`` (what generate_speech hands it: the steps' spectra one after the other)
-> ``waveform`` ``[1, samples]`` (a batch of one, which transformers.js's text-to-audio pipeline reads as
``[batch, samples]``). transformers.js loads it apart (``SpeechT5HifiGan.from_pretrained(folder)``, passed as
``vocoder``; its pipeline's ``vocoder`` property). Its ``config.json`` names the model type ``hifigan``, as
transformers.js's registry (and transformers 4) name it, where transformers 5 saves ``speecht5_hifigan`` (whose
AutoConfig in turn does not read a directory saved as ``hifigan``: such a checkpoint is saved anew first).

Two things of transformers.js's loop that differ from transformers' ``generate_speech``, which the folders cannot
change: transformers.js hands the vocoder the decoder's frames as they are, where transformers first refines the
whole spectrogram with SpeechT5's postnet (its convolutions read frames after the current one, so no step can
apply it); and it stops on any frame's stop probability reaching ``threshold``, where transformers sums them.

The prenet's dropout: transformers applies it even in eval mode (Tacotron 2's practice), drawing at each step a
mask that keeps each unit with probability ``speech_decoder_prenet_dropout`` and scales it by ``1 / (1 - p)``.
The decoder file draws the same mask at each call (``RandomUniformLike``, below ``p``); verification feeds it eager
PyTorch's draws (``onnxport.verify.draws``), so that each decoder is checked value for value; transformers.js's
speech then varies from call to call as transformers' does. A checkpoint saved with
``speech_decoder_prenet_dropout=0`` speaks the same at every call, in PyTorch and in transformers.js, but its prenet
passes nothing of the frames so far (transformers' mask keeps no unit then): fit for checking a folder, not for
speaking.

transformers.js 4.3's ``pipeline("text-to-audio", folder)`` loads no processor for a text task, and without one runs
SpeechT5 as a text-to-waveform model, which fails: its users call ``generate_speech``, or build the
``TextToAudioPipeline`` with the folder's model, tokenizer and processor (``AutoProcessor``) and the vocoder. Its
tokenizer is read from ``tokenizer.json``, which SpeechT5 checkpoints saved with their sentencepiece model alone
(``spm_char.model``) lack: the folder gets the directory's, where it has one (the report notes when it has none).

Without a target, both are refused: onnxport has no runner for a generating text-to-audio model.
"""

from __future__ import annotations

import contextlib
import os
import types
from collections.abc import Iterator
from typing import Any

import torch

from onnxport.errors import InvalidInputError
from onnxport.hf.loading import load_pretrained

__all__ = ["DECODER", "ENCODER", "TYPES", "VOCODER", "check_speech_synthesis", "export_folder",
           "export_speech_synthesis", "sessions", "sessions_of"]

TYPES = ("speecht5", "speecht5_hifigan")  # the model's, the vocoder's
VOCODER_TYPES = ("speecht5_hifigan",)
ENCODER, DECODER, VOCODER = "encoder_model", "decoder_model_merged", "model"
_PAST = torch.export.Dim("past_decoder_sequence_length")
_BATCH = torch.export.Dim("batch_size")


def sessions_of(config: Any) -> tuple[str, ...]:
    """The transformers.js sessions (file stems) of a :data:`TYPES` checkpoint."""
    return (VOCODER,) if config.model_type in VOCODER_TYPES else (ENCODER, DECODER)


def check_speech_synthesis(config: Any, engine: Any, streaming: Any) -> None:
    """Refuse, before it is loaded, what onnxport does not write of a :data:`TYPES` checkpoint."""
    kind = "its HiFi-GAN vocoder" if config.model_type in VOCODER_TYPES else "SpeechT5's text-to-speech model"
    if engine is None:
        raise InvalidInputError(
            f"onnxport writes {kind} for transformers.js alone: it has no runner for SpeechT5's speech generation",
            fix="pass target='transformers.js', and export the vocoder's directory (SpeechT5HifiGan) so too")
    if streaming:
        raise InvalidInputError(f"{kind} is exported with its weights loaded (each file is verified against it)",
                                fix="leave streaming unset")
    architectures = getattr(config, "architectures", None) or ["SpeechT5ForTextToSpeech"]
    if config.model_type == "speecht5" and "SpeechT5ForTextToSpeech" not in architectures:
        raise InvalidInputError(f"a SpeechT5 checkpoint of {', '.join(architectures)} does not make speech from text",
                                fix="export a SpeechT5ForTextToSpeech checkpoint (its vocoder apart)")


class Encoder(torch.nn.Module):
    """SpeechT5's text encoder: ``input_ids`` -> ``encoder_outputs`` and ``encoder_attention_mask``."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        mask = (input_ids != self.model.config.pad_token_id).to(torch.int64)
        out = self.model.speecht5.encoder(input_values=input_ids, attention_mask=mask, return_dict=True)
        return {"encoder_outputs": out.last_hidden_state, "encoder_attention_mask": mask}


class DecoderStep(torch.nn.Module):
    """One step of transformers' generate_speech loop (see the module), batch 1."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, output_sequence: torch.Tensor, encoder_attention_mask: torch.Tensor,
                speaker_embeddings: torch.Tensor, encoder_hidden_states: torch.Tensor,
                past_key_values: Any = None) -> dict[str, Any]:
        from onnxport.hf.signature import cache_argument, cache_of

        model, config = self.model, self.model.config
        decoder = model.speecht5.decoder
        states = decoder.prenet(output_sequence, speaker_embeddings)
        out = decoder.wrapped_decoder(hidden_states=states[:, -1:], attention_mask=None,
                                      encoder_hidden_states=encoder_hidden_states,
                                      encoder_attention_mask=encoder_attention_mask, use_cache=True, return_dict=True,
                                      **{cache_argument(decoder.wrapped_decoder): past_key_values})
        last = out.last_hidden_state.squeeze(1)
        spectrum = model.speech_decoder_postnet.feat_out(last).view(config.reduction_factor, config.num_mel_bins)
        sequence = torch.cat((output_sequence, spectrum[-1:].unsqueeze(0)), dim=1)
        prob = torch.sigmoid(model.speech_decoder_postnet.prob_out(last))
        return {"output_sequence_out": sequence, "spectrum": spectrum, "prob": prob, "present": cache_of(out)}


class Vocoder(torch.nn.Module):
    """The HiFi-GAN vocoder on one spectrogram ``[frames, model_in_dim]`` -> ``waveform`` ``[1, samples]``."""

    def __init__(self, vocoder: torch.nn.Module) -> None:
        super().__init__()
        self.vocoder = vocoder

    def forward(self, spectrogram: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"waveform": self.vocoder(spectrogram.unsqueeze(0))}


def _drawn_dropout(prenet: torch.nn.Module, inputs_embeds: torch.Tensor, p: float) -> torch.Tensor:
    """transformers' ``_consistent_dropout`` (a mask of the first row's shape, kept with probability ``p``, the same
    for every row of the batch, scaled by ``1 / (1 - p)``), its mask drawn uniformly (``rand_like``, which the
    export writes as ``RandomUniformLike`` and verification feeds) where transformers draws ``bernoulli``."""
    keep = torch.rand_like(inputs_embeds[0]) < p
    return torch.where(keep.unsqueeze(0), inputs_embeds, 0) * (1 / (1 - p))


@contextlib.contextmanager
def _uniform_draws(model: torch.nn.Module) -> Iterator[None]:
    prenet = model.speecht5.decoder.prenet
    prenet._consistent_dropout = types.MethodType(_drawn_dropout, prenet)
    try:
        yield
    finally:
        del prenet._consistent_dropout


def export_speech_synthesis(model: torch.nn.Module, **options: Any) -> dict[str, Any]:
    """``{stem: OnnxProgram}`` of a loaded SpeechT5ForTextToSpeech (``encoder_model``, and the decoder's step as
    ``decoder_model``, the first, and ``decoder_with_past_model``, which :func:`sessions` merges) or SpeechT5HifiGan
    (the vocoder's ``model``), each exported and verified with ``onnxport.export`` and ``options``."""
    from onnxport.api import export

    model = model.eval()
    config = model.config
    if config.model_type in VOCODER_TYPES:
        spectrogram = torch.randn(7, config.model_in_dim, generator=torch.Generator().manual_seed(0))
        return {VOCODER: export(Vocoder(model), (), {"spectrogram": spectrogram},
                                dynamic_shapes={"spectrogram": {0: torch.export.Dim("frames")}}, **options)}
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(config.pad_token_id + 1, config.vocab_size, (2, 6), generator=generator)
    ids[1, -2:] = config.pad_token_id  # a padded row
    text = torch.export.Dim("encoder_sequence_length", max=config.max_text_positions)
    encoder = export(Encoder(model), (), {"input_ids": ids}, dynamic_shapes={"input_ids": {0: _BATCH, 1: text}},
                     **options)
    with torch.no_grad():
        encoded = Encoder(model)(ids[:1])
    step = {"output_sequence": torch.randn(1, 3, config.num_mel_bins, generator=generator),
            "encoder_attention_mask": encoded["encoder_attention_mask"],
            "speaker_embeddings": torch.randn(1, config.speaker_embedding_dim, generator=generator),
            "encoder_hidden_states": encoded["encoder_outputs"]}
    frames = torch.export.Dim("decoder_sequence_length", max=config.max_speech_positions)
    shapes = {"output_sequence": {1: frames}, "encoder_attention_mask": {1: text},
              "speaker_embeddings": None, "encoder_hidden_states": {1: text}}
    decoder = DecoderStep(model)
    with _uniform_draws(model):
        first = export(decoder, (), step, dynamic_shapes=shapes, **options)
        with torch.no_grad():
            cache = decoder(**step)["present"]
        layers = [({2: _PAST}, {2: _PAST}, {2: text}, {2: text})] * len(cache.self_attention_cache.layers)
        with_past = {**step, "output_sequence": torch.randn(1, 4, config.num_mel_bins, generator=generator),
                     "past_key_values": cache}
        past = export(decoder, (), with_past, dynamic_shapes={**shapes, "past_key_values": layers}, **options)
    return {ENCODER: encoder, "decoder_model": first, "decoder_with_past_model": past}


def sessions(programs: dict[str, Any]) -> dict[str, Any]:
    """transformers.js's sessions of :func:`export_speech_synthesis`'s programs: the decoder's first step and its
    step with past merged into ``decoder_model_merged``."""
    from onnxport.hf.transformers_js import merge_decoders

    if VOCODER in programs:
        return dict(programs)
    return {ENCODER: programs[ENCODER],
            DECODER: merge_decoders(programs["decoder_model"], programs["decoder_with_past_model"])}


def export_folder(directory: str, out: str, config: Any, *, engine: Any, streaming: Any, dtypes: Any,
                  copied: list[str], picked: Any = None, **options: Any) -> dict[str, Any]:
    """The transformers.js folder ``out`` of the :data:`TYPES` checkpoint in ``directory`` (``export_hf``'s part
    for them): the verified programs, ``{stem: OnnxProgram}``."""
    import shutil

    import transformers

    from onnxport import metadata
    from onnxport.arguments import check_output_folder
    from onnxport.hf import transformers_js

    check_speech_synthesis(config, engine, streaming)
    check_output_folder(out, transformers_js.file_names(sessions_of(config), dtypes))
    vocoder = config.model_type in VOCODER_TYPES
    cls = transformers.SpeechT5HifiGan if vocoder else transformers.SpeechT5ForTextToSpeech
    model = load_pretrained(cls, directory, config, "a SpeechT5ForTextToSpeech or SpeechT5HifiGan checkpoint",
                            dtype=torch.float32)
    programs = export_speech_synthesis(model, target=engine, **options)
    files = sessions(programs)
    for prog in files.values():
        prog.model.metadata_props[metadata.TASK] = "text-to-audio"
    for prog in programs.values() if picked is not None else ():
        prog.report.notes.append(str(picked))
    if not vocoder and not os.path.isfile(os.path.join(directory, "tokenizer.json")):
        programs[ENCODER].report.notes.append(
            f"{directory} has no tokenizer.json, which transformers.js reads the tokenizer from (a sentencepiece model "
            "is not converted): tokenize with transformers and pass the ids to generate_speech, or add one")
    made = transformers_js.variants(files, dtypes)
    os.makedirs(out, exist_ok=True)
    for name in copied:
        shutil.copyfile(os.path.join(directory, name), os.path.join(out, name))
    # transformers.js's registry knows the vocoder as model type hifigan (transformers 4's name of it)
    settings = {"config.json": {"model_type": "hifigan"}} if vocoder else {}
    transformers_js.write_folder(out, made, settings)
    return programs
