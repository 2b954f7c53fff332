"""export-hf's text-to-audio: a VITS checkpoint (MMS-TTS's architecture) picked by task auto, verified value for
value with eager PyTorch's noise fed to its draws, and spoken through onnxport's pipeline as transformers' pipeline
speaks it; the tokenizer.json a transformers.js folder gets gives the Python tokenizer's ids; the models that
generate their audio, and tokenizers transformers.js cannot follow, are refused before anything is written."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from onnxport import InvalidInputError
from onnxport.hf import export_hf, pipeline
from onnxport.hf.char_tokenizers import tokenizer_json
from tests.speech_synthesis_dirs import TEXTS, write_vits

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.transformers

HOP = 16  # samples per spectrogram frame: the product of the tiny config's upsample_rates


def test_a_vits_without_noise_speaks_as_transformers(tmp_path) -> None:
    directory, _ = write_vits(str(tmp_path / "vits"), noise=False)
    program = export_hf(directory, "auto", tmp_path / "out")
    assert "task auto: text-to-audio" in str(program.report)
    eager = transformers.pipeline("text-to-audio", model=directory)
    onnx = pipeline(tmp_path / "out")
    for text in TEXTS:  # of other lengths than the example's
        got, expected = onnx(text), eager(text)
        assert got["sampling_rate"] == expected["sampling_rate"] == 16000
        assert got["audio"].shape == expected["audio"].shape, text
        np.testing.assert_allclose(got["audio"], expected["audio"], atol=1e-4)


def test_a_noisy_vits_is_verified_with_eager_pytorchs_draws(tmp_path) -> None:
    directory, model = write_vits(str(tmp_path / "vits"))
    program = export_hf(directory, "text-to-audio", tmp_path / "out")
    verification = program.report.verification
    assert verification.ok and verification.draws_fed == 2  # the durations' noise and the latents'
    assert not any(check.random for check in verification.outputs)
    assert verification.outputs[0].name == "waveform" and verification.outputs[0].max_abs < 1e-3
    assert len(verification.runs) >= 3  # the example, and the batch and length made up
    onnx = pipeline(tmp_path / "out")
    first, second = onnx(TEXTS[1])["audio"], onnx(TEXTS[1])["audio"]
    assert first.shape[-1] % HOP == 0 and second.shape[-1] % HOP == 0
    assert first.shape != second.shape or not np.array_equal(first, second), "the file draws its own noise"


def test_the_tokenizer_json_gives_the_python_tokenizers_ids(tmp_path) -> None:
    from tokenizers import Tokenizer

    directory, _ = write_vits(str(tmp_path / "vits"), noise=False)
    written = Tokenizer.from_str(json.dumps(tokenizer_json(directory)))
    python = transformers.AutoTokenizer.from_pretrained(directory)
    for text in [*TEXTS, "  Spaces   AROUND  ", "digits 123 and ümlauts", "x", ""]:
        assert written.encode(text).ids == python(text).input_ids, text


def test_models_that_generate_their_audio_are_refused_before_loading(tmp_path) -> None:
    directory = tmp_path / "musicgen_melody"  # (MusicGen's own files: tests/test_musicgen.py)
    config = transformers.MusicgenMelodyConfig(
        text_encoder=transformers.T5Config(d_model=8, num_layers=1, num_heads=1, d_ff=8).to_dict(),
        audio_encoder=transformers.EncodecConfig(codebook_size=8).to_dict(),
        decoder=transformers.MusicgenMelodyDecoderConfig(hidden_size=8, num_hidden_layers=1,
                                                         num_attention_heads=1).to_dict())
    config.architectures = ["MusicgenMelodyForConditionalGeneration"]
    config.save_pretrained(directory)  # no weights: the refusal comes first
    with pytest.raises(InvalidInputError, match="generating it step by step"):
        export_hf(directory, "auto", tmp_path / "out")
    assert not os.path.exists(tmp_path / "out")


def test_a_phonemizing_tokenizer_is_refused_for_transformers_js(tmp_path) -> None:
    directory, _ = write_vits(str(tmp_path / "vits"), noise=False)
    path = os.path.join(directory, "tokenizer_config.json")
    with open(path, encoding="utf-8") as f:
        settings = json.load(f)
    with open(path, "w", encoding="utf-8") as f:
        json.dump({**settings, "phonemize": True}, f)
    with pytest.raises(InvalidInputError, match="espeak"):
        export_hf(directory, "text-to-audio", tmp_path / "out", target="transformers.js")
    assert not os.path.exists(tmp_path / "out")
