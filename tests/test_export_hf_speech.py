"""export-hf's automatic-speech-recognition beyond Whisper: the encoder takes what the checkpoint's feature extractor
gives (raw samples or filter-bank frames, of any length, with the mask of a padded batch), and onnxport's runner
generates transformers' tokens on padded batches of clips of other lengths than the example's, one longer; a CTC
model (Wav2Vec2ForCTC) is one model.onnx that onnxport's pipeline runs as transformers' does, and the tokenizer.json
a transformers.js folder gets decodes its frames' ids as transformers' pipeline does."""

from __future__ import annotations

import json
import os

import pytest
import torch

import onnxport
from onnxport.hf import export_hf, pipeline
from onnxport.hf.char_tokenizers import tokenizer_json
from tests import speech_dirs

transformers = pytest.importorskip("transformers")

FILES = ("encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx")
NEW_TOKENS = 8


@pytest.mark.parametrize("kind", [
    "moonshine",  # raw samples, three strided convolutions, the mask of its states from the encoder
    pytest.param("speech_to_text", marks=pytest.mark.sweep),  # frames; the decoder downsamples the frames' mask
    pytest.param("cohere_asr", marks=pytest.mark.sweep),  # frames into a conformer; the mask of its states
    pytest.param("speecht5", marks=pytest.mark.sweep),  # raw samples into a wav2vec2-style front end
])
def test_speech_recognition_generates_as_transformers_on_padded_batches(tmp_path, kind) -> None:
    directory, model, extractor = speech_dirs.write(kind, str(tmp_path))
    out = tmp_path / "out"
    export_hf(directory, "automatic-speech-recognition", out)
    start = model.generation_config.decoder_start_token_id
    for seconds in ((0.9, 0.55), (1.6, 0.3, 1.1)):  # the second batch: three clips, one longer than the example's
        inputs = speech_dirs.encoded(extractor, speech_dirs.clips(seconds, seed=len(seconds)))
        main = next(k for k in inputs if k != "attention_mask")
        tokens = onnxport.generate_seq2seq(*(str(out / f) for f in FILES), inputs[main], inputs.get("attention_mask"),
                                           decoder_start_token_id=start, max_new_tokens=NEW_TOKENS)
        expected = model.generate(**inputs, do_sample=False, num_beams=1, max_new_tokens=NEW_TOKENS)
        assert torch.equal(tokens, expected), (seconds, tokens.tolist(), expected.tolist())
    assert os.path.isfile(out / "preprocessor_config.json")


def test_a_speech_language_model_is_refused_before_it_is_loaded(tmp_path) -> None:
    """Voxtral reads its audio encoder's rows among its prompt's tokens: no encoder-decoder split to write."""
    from onnxport.errors import InvalidInputError

    directory = tmp_path / "voxtral"
    directory.mkdir()
    (directory / "config.json").write_text('{"model_type": "voxtral"}', encoding="utf-8")  # no weights: not read
    with pytest.raises(InvalidInputError, match="VoxtralForConditionalGeneration\\) is a language model"):
        export_hf(str(directory), "automatic-speech-recognition", tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("norm", ["layer", "group"])  # group: the model takes no mask, the pipeline's is dropped
def test_a_ctc_model_transcribes_as_transformers_pipeline(tmp_path, norm) -> None:
    directory, _, _ = speech_dirs.write_wav2vec2_ctc(str(tmp_path / "wav2vec2"), norm=norm)
    program = export_hf(directory, "auto", tmp_path / "out")
    assert "task auto: automatic-speech-recognition" in str(program.report)
    assert sorted(f for f in os.listdir(tmp_path / "out") if f.endswith(".onnx")) == ["model.onnx"]
    onnx = pipeline(tmp_path / "out")
    eager = transformers.pipeline("automatic-speech-recognition", model=directory)
    for clip in speech_dirs.clips((0.9, 1.7, 0.3)):  # one longer than the example's quarter second of samples
        assert onnx(clip)["text"] == eager(clip)["text"]


def test_the_ctc_tokenizer_json_decodes_as_transformers_pipeline(tmp_path) -> None:
    from tokenizers import Tokenizer

    directory, _, _ = speech_dirs.write_wav2vec2_ctc(str(tmp_path / "wav2vec2"))
    written = Tokenizer.from_str(json.dumps(tokenizer_json(directory)))
    python = transformers.AutoTokenizer.from_pretrained(directory)
    generator = torch.Generator().manual_seed(0)
    spaced = 0
    for _ in range(20):  # frames' ids: blanks, repeats, word delimiters, special tokens
        ids = torch.randint(0, len(speech_dirs.CTC_CHARACTERS), (60,), generator=generator).tolist()
        expected = python.decode(ids, skip_special_tokens=False)  # as the pipeline decodes a CTC model's ids
        assert written.decode(ids, skip_special_tokens=True).strip() == expected, ids  # (transformers.js trims)
        spaced += " " in expected
    assert spaced
