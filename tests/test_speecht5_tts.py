"""SpeechT5 text-to-speech for transformers.js (``onnxport.hf.speecht5_speech``): a tiny random
``SpeechT5ForTextToSpeech`` and ``SpeechT5HifiGan``, each saved as people save them, exported with
``export_hf(..., "text-to-audio", target="transformers.js")``, then made to speak.

transformers.js's ``generate_speech`` hands its vocoder the decoder's frames without SpeechT5's postnet and stops on
any of a step's stop probabilities reaching the threshold (transformers: their sum), so transformers' side is its
``generate_speech`` with the postnet left out, and the threshold is one at which both rules stop at the same step
(read from transformers' own stop probabilities). The checkpoint spoken is saved with
``speech_decoder_prenet_dropout=0`` (transformers' prenet dropout draws at every call, even in eval mode; at 0 its
mask keeps nothing), so that both sides speak the same at every call (the frames fed back then reach no further
than the prenet, which gives zeros of them). With the default dropout, the export's verification checks each decoder
step, prenet included, with eager PyTorch's draws fed (``test_export_and_refusals``).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

import onnxport
from onnxport.hf import export_hf
from tests.runtimes.runtimes import run_transformers_js

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.transformers

RUNNER = "run_transformers_js_speech.mjs"
TEXT = "hello world"
CHARS = "abcdefghijklmnopqrstuvwxyz'"
MELS, SPEAKER = 8, 16
TOKENS = ("<s>", "<pad>", "</s>", "<unk>")  # SpeechT5's ids 0 to 3, then "▁" and the characters


def write_tokenizer(directory: str) -> None:
    """A character tokenizer as SpeechT5's sentencepiece model splits text (``▁`` before each word, one token a
    character, ``</s>`` at the end), saved as ``tokenizer.json``, which both transformers and transformers.js read."""
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers, processors

    vocab = {**{t: i for i, t in enumerate(TOKENS)}, **{c: i + len(TOKENS) for i, c in enumerate("▁" + CHARS)}}
    tokenizer = Tokenizer(models.BPE(vocab, [], unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tokenizer.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 2)])
    tokenizer.add_special_tokens([AddedToken(t, special=True) for t in TOKENS])
    tokenizer.save(os.path.join(directory, "tokenizer.json"))
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
                   "pad_token": "<pad>", "unk_token": "<unk>"}, f)


def write_tts(directory: str, dropout: float = 0.0, layers: int = 2) -> Any:
    """A tiny SpeechT5ForTextToSpeech (two frames a step), its tokenizer and feature extractor, saved; its stop
    probabilities kept low (prob_out's bias: none crosses 0.5) and apart from step to step (its weight scaled)."""
    torch.manual_seed(0)
    config = transformers.SpeechT5Config(
        vocab_size=len(TOKENS) + 1 + len(CHARS), hidden_size=32, encoder_layers=layers, decoder_layers=layers,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
        num_mel_bins=MELS, reduction_factor=2, speech_decoder_prenet_units=16, speech_decoder_postnet_units=16,
        speech_decoder_postnet_layers=2, speaker_embedding_dim=SPEAKER, max_speech_positions=400,
        max_text_positions=64, speech_decoder_prenet_dropout=dropout, bos_token_id=0, pad_token_id=1,
        eos_token_id=2, decoder_start_token_id=2)
    model = transformers.SpeechT5ForTextToSpeech(config).eval()
    with torch.no_grad():
        model.speech_decoder_postnet.prob_out.weight.mul_(30.0)
        model.speech_decoder_postnet.prob_out.bias.fill_(-6.0)
    model.save_pretrained(directory)
    write_tokenizer(directory)
    transformers.SpeechT5FeatureExtractor(num_mel_bins=MELS).save_pretrained(directory)
    return model


def write_vocoder(directory: str) -> Any:
    """A tiny SpeechT5HifiGan (four samples a frame), saved; its weights drawn wide enough that its waveform is not
    near zero (its default initializer_range gives samples of 1e-6)."""
    torch.manual_seed(1)
    config = transformers.SpeechT5HifiGanConfig(model_in_dim=MELS, upsample_initial_channel=16, upsample_rates=[2, 2],
                                                upsample_kernel_sizes=[4, 4], resblock_kernel_sizes=[3],
                                                resblock_dilation_sizes=[[1, 3]], initializer_range=0.2)
    vocoder = transformers.SpeechT5HifiGan(config).eval()
    vocoder.save_pretrained(directory)
    return vocoder


@contextlib.contextmanager
def without_postnet(model: Any) -> Iterator[None]:
    """transformers' generate_speech as transformers.js runs it: the frames not refined by the postnet."""
    model.speech_decoder_postnet.postnet = lambda frames: frames
    try:
        yield
    finally:
        del model.speech_decoder_postnet.postnet


def stop_probabilities(model: Any, ids: torch.Tensor, speaker: torch.Tensor, steps: int) -> np.ndarray:
    """``[steps, reduction_factor]``: the stop probabilities of transformers' loop (run ``steps`` steps)."""
    seen = []
    hook = model.speech_decoder_postnet.prob_out.register_forward_hook(
        lambda module, args, out: seen.append(torch.sigmoid(out).detach()))
    try:
        model.generate_speech(ids, speaker, threshold=1e9, maxlenratio=steps * 2 / ids.shape[1])
    finally:
        hook.remove()
    return torch.cat(seen).numpy()


def shared_threshold(probs: np.ndarray, first: int) -> tuple[float, int]:
    """A threshold at which transformers (the sum of a step's probabilities) and transformers.js (any of them) stop
    at the same step, from step ``first`` on, and that step (1-based)."""
    ratio, best = 0.0, None
    for step in range(first, len(probs)):  # the step whose largest probability passes every sum before it most
        before = max(probs[j].sum() for j in range(first - 1, step))
        if probs[step].max() / before > max(ratio, 1.2):
            ratio, best = probs[step].max() / before, (float((probs[step].max() + before) / 2), step + 1)
    if best is not None:
        return best
    pytest.fail("no step at which both stopping rules agree")


# The names transformers.js's generate_speech feeds and reads (models/speecht5/modeling_speecht5.js).
ENCODER_IO = (["input_ids"], ["encoder_outputs", "encoder_attention_mask"])
DECODER_IO = (["output_sequence", "encoder_attention_mask", "speaker_embeddings", "encoder_hidden_states"],
              ["output_sequence_out", "spectrum", "prob"])


def test_export_and_refusals(tmp_path) -> None:
    """The two sessions of a checkpoint with its prenet's dropout (0.5, transformers' default): named as
    generate_speech feeds them, each decoder verified value for value with eager PyTorch's draws fed; without a
    target, the checkpoint and its vocoder are refused, saying what to do."""
    tts, vocoder = str(tmp_path / "tts"), str(tmp_path / "vocoder")
    write_tts(tts, dropout=0.5, layers=1)
    transformers.SpeechT5HifiGanConfig(model_in_dim=MELS).save_pretrained(vocoder)  # refused before it is loaded
    for directory in (tts, vocoder):
        with pytest.raises(onnxport.InvalidInputError, match="for transformers.js alone") as caught:
            export_hf(directory, "text-to-audio", str(tmp_path / "default"))
        assert "target='transformers.js'" in str(caught.value)
    programs = export_hf(tts, "text-to-audio", str(tmp_path / "js"), target="transformers.js", dtypes="fp32")
    assert sorted(programs) == ["decoder_model", "decoder_with_past_model", "encoder_model"]
    for name, prog in programs.items():
        assert prog.report.verification.ok, (name, str(prog.report))
        if name != "encoder_model":
            assert prog.report.verification.draws_fed == 2, str(prog.report)  # one mask a prenet layer
    import onnx

    model = onnx.load(str(tmp_path / "js" / "onnx" / "encoder_model.onnx"))
    assert ([i.name for i in model.graph.input], [o.name for o in model.graph.output]) == ENCODER_IO
    merged = onnx.load(str(tmp_path / "js" / "onnx" / "decoder_model_merged.onnx"))
    inputs, outputs = [i.name for i in merged.graph.input], [o.name for o in merged.graph.output]
    assert inputs[:4] == DECODER_IO[0] and outputs[:3] == DECODER_IO[1] and inputs[-1] == "use_cache_branch"
    assert sorted(inputs[4:-1]) == sorted(f"past_key_values.0.{side}.{kv}" for side in ("decoder", "encoder")
                                          for kv in ("key", "value"))  # one layer
    assert sorted(outputs[3:]) == sorted(n.replace("past_key_values", "present") for n in inputs[4:-1])


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("speecht5")
    tts, vocoder = str(root / "tts"), str(root / "vocoder")
    model, hifigan = write_tts(tts), write_vocoder(vocoder)
    out = {"tts": str(root / "tts-js"), "vocoder": str(root / "vocoder-js")}
    export_hf(tts, "text-to-audio", out["tts"], target="transformers.js", dtypes="fp32")
    export_hf(vocoder, "text-to-audio", out["vocoder"], target="transformers.js", dtypes="fp32")
    return {**out, "model": model, "hifigan": hifigan, "directory": tts}


@pytest.mark.sweep
def test_transformers_js_speaks_as_transformers(folders, tmp_path) -> None:
    """transformers.js's generate_speech and text-to-audio pipeline on the two folders give transformers'
    spectrogram and waveform (before the postnet), stopping at the same step: once on the threshold, once at
    maxlenratio; the pipeline with its defaults (threshold 0.5, maxlenratio 20)."""
    model, hifigan = folders["model"], folders["hifigan"]
    tokenizer = transformers.PreTrainedTokenizerFast.from_pretrained(folders["directory"])
    ids = tokenizer(TEXT, return_tensors="pt").input_ids
    speaker = torch.randn(1, SPEAKER, generator=torch.Generator().manual_seed(3))
    with torch.no_grad(), without_postnet(model):
        minlen = 3
        minlenratio = minlen * 2 / ids.shape[1] + 1e-6
        threshold, stop = shared_threshold(stop_probabilities(model, ids, speaker, 40), minlen)
        runs = [dict(threshold=threshold, minlenratio=minlenratio, maxlenratio=20.0),
                dict(threshold=0.9, minlenratio=0.0, maxlenratio=1.0)]  # never crossed: maxlen steps
        expected = [model.generate_speech(ids, speaker, **run) for run in runs]
        waves = [hifigan(frames) for frames in expected]
        spoken = model.generate_speech(ids, speaker, vocoder=hifigan)  # the pipeline's defaults
    job = {"model": folders["tts"], "vocoder": folders["vocoder"], "speaker": speaker[0].tolist(), "text": TEXT,
           "runs": runs}
    got = run_transformers_js(RUNNER, job, tmp_path, timeout=600)
    assert "error" not in got, got.get("error")
    assert got["input_ids"]["data"] == ids[0].tolist()
    assert expected[0].shape[0] == 2 * stop and expected[1].shape[0] == 2 * int(ids.shape[1] / 2)
    for run, frames, wave in zip(got["runs"], expected, waves, strict=True):
        spectrogram = np.array(run["spectrogram"]["data"], np.float32).reshape(run["spectrogram"]["dims"])
        assert spectrogram.shape == tuple(frames.shape)  # the same step stopped at
        np.testing.assert_allclose(spectrogram, frames.numpy(), atol=1e-5, rtol=1e-4)
        waveform = np.array(run["waveform"]["data"], np.float32).reshape(run["waveform"]["dims"])
        np.testing.assert_allclose(waveform, wave.numpy()[None], atol=1e-5, rtol=1e-4)
    assert got["pipeline"]["sampling_rate"] == 16000
    with open(os.path.join(folders["vocoder"], "config.json"), encoding="utf-8") as f:
        assert json.load(f)["model_type"] == "hifigan"  # as transformers.js's registry names it
    np.testing.assert_allclose(np.array(got["pipeline"]["audio"], np.float32), spoken.numpy(), atol=1e-5, rtol=1e-4)


def test_a_truncated_checkpoint_is_refused_with_onnxports_error(tmp_path) -> None:
    """A weight file cut short (a download interrupted) is an onnxport error naming the file transformers could not
    read, and nothing is written."""
    directory = str(tmp_path / "tts")
    write_tts(directory)
    weights = os.path.join(directory, "model.safetensors")
    with open(weights, "rb+") as f:
        f.truncate(os.path.getsize(weights) // 2)
    refused = "transformers cannot load .* as SpeechT5ForTextToSpeech"
    with pytest.raises(onnxport.InvalidInputError, match=refused) as err:
        export_hf(directory, "text-to-audio", tmp_path / "out", target="transformers.js", dtypes="fp32")
    assert "weight files are whole" in err.value.fix
    assert not (tmp_path / "out" / "onnx").exists()
