"""``text-to-audio``: text in, a waveform out, from a model whose forward makes the whole waveform (VITS and MMS-TTS).

Such a model is exported as one ``model.onnx`` (transformers.js: ``onnx/model.onnx``) taking ``input_ids`` and
``attention_mask`` and giving ``waveform`` (batch, samples), ``sequence_lengths`` (the samples of each row that
are its own: a padded batch's shorter texts end in silence) and ``spectrogram``. VITS draws noise in its forward
(its durations and its latents, each scaled by the config's ``noise_scale_duration`` and ``noise_scale``): the
file draws its own, as transformers does at each call; verification feeds it eager PyTorch's draws instead
(``onnxport.verify.draws``), so that the waveform is checked value for value. A checkpoint saved with both noise
scales at 0 speaks the same waveform at every call, in PyTorch and in every runtime.

A text-to-audio model that makes its audio by generating (Bark, CSM, MusicGen Melody, ...) is refused before it is
loaded: its loop is not one onnxport writes yet. MusicGen's text encoder, decoder and codec are written as the three
files transformers.js generates with: ``onnxport.hf.musicgen``. SpeechT5's text-to-speech model and its HiFi-GAN
vocoder are written for transformers.js, each its own folder: ``onnxport.hf.speecht5_speech``.

transformers.js reads a tokenizer from ``tokenizer.json``; a VITS checkpoint has its Python tokenizer's vocabulary
(``vocab.json``): ``onnxport.hf.char_tokenizers`` writes the ``tokenizer.json`` that gives the same ids.
"""

from __future__ import annotations

from typing import Any

from onnxport.errors import InvalidInputError

__all__ = ["check_text_to_audio"]


def check_text_to_audio(config: Any, auto: str) -> None:
    """Refuse, before it is loaded, a text-to-audio model whose class generates its audio step by step."""
    import transformers
    from transformers.models.auto import modeling_auto

    name = modeling_auto.MODEL_FOR_TEXT_TO_WAVEFORM_MAPPING_NAMES.get(config.model_type)
    spectrogram = modeling_auto.MODEL_FOR_TEXT_TO_SPECTROGRAM_MAPPING_NAMES.get(config.model_type)
    cls = getattr(transformers, name or "", None)
    if name is None:
        what = (f"its class for speech ({spectrogram}) gives spectrogram frames, which a vocoder makes a waveform of"
                if spectrogram else "transformers has no text-to-waveform class for it")
        raise InvalidInputError(f"onnxport does not export {config.model_type} models for text-to-audio: {what}",
                                fix="export a model whose forward gives the waveform (VITS, MMS-TTS), or the model "
                                "with onnxport.export")
    if cls is not None and getattr(cls, "can_generate", lambda: False)():
        raise InvalidInputError(
            f"onnxport does not export {config.model_type} models for text-to-audio yet: {name} makes its audio by "
            "generating it step by step (transformers' generate), a loop onnxport does not write for audio",
            fix="export a model whose forward gives the waveform (VITS, MMS-TTS), or the model's parts with "
                "onnxport.export")
