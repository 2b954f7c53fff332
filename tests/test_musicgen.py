"""MusicGen exported for text-to-audio (``onnxport.hf.musicgen``): a tiny random checkpoint (a T5 text encoder, a
two-codebook decoder, an EnCodec codec) saved as ``save_pretrained`` saves it, with a word-level ``tokenizer.json``.

In Node, transformers.js's ``MusicgenForConditionalGeneration`` loads the folder ``export_hf(..., target=
"transformers.js")`` writes (fp32), its tokenizer pads two prompts into one batch, and ``generate`` runs greedily,
with the checkpoint's own guidance (its generation config names none) and with ``guidance_scale`` 3 (the decoder's
batch doubled): its waveform equals transformers' ``model.generate(...)`` on the same ids within 1e-4 + 1e-3 x its
largest magnitude. Also: the capture's EnCodec layers compute transformers' numbers; the default (onnxruntime) folder
holds the same three files; streaming and MusicGen Melody are refused."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
import torch

import onnxport.hf
from onnxport.errors import InvalidInputError
from onnxport.hf import export_hf
from tests.runtimes.runtimes import run_transformers_js
from tests.test_transformers_js import write_special_tokenizer

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.transformers

RUNNER = "run_transformers_js_musicgen.mjs"
TEXT_VOCAB = 99
PROMPTS = ["w5 w17 w33 w8 w40 w41 w42", "w9 w11 w13"]  # the second padded
NEW_TOKENS = 6  # max_length 7: at least 2 * codebooks - 1, where transformers lays out its delay pattern
GUIDANCE = {"default": None, "guided": 3.0}


def _config() -> Any:
    text = transformers.T5Config(vocab_size=TEXT_VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                                 decoder_start_token_id=0, pad_token_id=0, eos_token_id=2)
    # frame_rate 3200 / 16 = 200, codebooks of 64: 2.4 kbps is two of them
    codec = transformers.EncodecConfig(target_bandwidths=[2.4], sampling_rate=3200, audio_channels=1, hidden_size=16,
                                       num_filters=4, num_residual_layers=1, upsampling_ratios=[4, 4],
                                       codebook_size=64, codebook_dim=16, num_lstm_layers=1, normalize=False,
                                       chunk_length_s=None, overlap=None)
    decoder = transformers.MusicgenDecoderConfig(vocab_size=64, hidden_size=24, num_hidden_layers=2, ffn_dim=48,
                                                 num_attention_heads=4, num_codebooks=2, max_position_embeddings=64,
                                                 pad_token_id=64, bos_token_id=64, decoder_start_token_id=64)
    return transformers.MusicgenConfig(text_encoder=text.to_dict(), audio_encoder=codec.to_dict(),
                                       decoder=decoder.to_dict())


def _write(directory: str) -> Any:
    """The checkpoint, its text encoder's, projection's and decoder's weights drawn wide (with transformers' small
    initialisation the tiny decoder gives both texts the same codes, guided or not), and its codec's codebooks
    drawn (transformers leaves them zero, and the waveform then is the same whatever the codes)."""
    torch.manual_seed(0)
    model = transformers.MusicgenForConditionalGeneration(_config()).eval()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if not name.startswith("audio_encoder."):
                weight.normal_(0, 0.3 if weight.dim() > 1 else 0.1, generator=generator)
        for layer in model.audio_encoder.quantizer.layers:  # transformers leaves the codebooks zero
            layer.codebook.embed.normal_(0, 1, generator=generator)
    model.save_pretrained(directory)
    write_special_tokenizer(directory, TEXT_VOCAB)
    return model


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> tuple[str, Any]:
    directory = str(tmp_path_factory.mktemp("musicgen") / "tiny")
    return directory, _write(directory)


def test_capture_layers_compute_transformers_numbers() -> None:
    """The EnCodec layers swapped in for the capture give transformers' outputs, at lengths shorter than the
    reflection padding and longer."""
    from transformers.models.encodec import modeling_encodec as encodec

    from onnxport.hf._encodec_decoder import conv_forward, lstm_forward

    torch.manual_seed(0)
    model = transformers.EncodecModel(transformers.EncodecConfig(
        hidden_size=16, num_filters=4, num_residual_layers=1, upsampling_ratios=[4, 2], codebook_size=64,
        codebook_dim=16, num_lstm_layers=2)).eval()
    convs = [m for m in model.modules() if isinstance(m, encodec.EncodecConv1d)]
    lstms = [m for m in model.modules() if isinstance(m, encodec.EncodecLSTM)]
    assert convs and lstms
    with torch.no_grad():
        for length in (1, 3, 9):
            for conv in convs:
                x = torch.randn(2, conv.conv.in_channels, length)
                torch.testing.assert_close(conv_forward(conv, x), conv(x), rtol=0, atol=0)
        for length in (1, 9):  # (a scan run eagerly is slow)
            x = torch.randn(2, lstms[0].lstm.input_size, length)
            torch.testing.assert_close(lstm_forward(lstms[0], x), lstms[0](x), rtol=1e-5, atol=1e-6)


def _eager(model: Any, directory: str, guidance: float | None) -> tuple[dict[str, torch.Tensor], np.ndarray]:
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    inputs = tokenizer(PROMPTS, padding=True, return_tensors="pt")
    inputs = {"input_ids": inputs["input_ids"], "attention_mask": inputs["attention_mask"]}
    with torch.no_grad():
        audio = model.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False, guidance_scale=guidance)
    return inputs, audio.numpy()


@pytest.fixture(scope="module")
def js(checkpoint, tmp_path_factory) -> dict[str, dict[str, Any]]:
    """name -> what transformers.js's generate gave for the folder, one Node process for all."""
    directory, _ = checkpoint
    root = str(tmp_path_factory.mktemp("musicgen-js"))
    folder = os.path.join(root, "out")
    export_hf(directory, "text-to-audio", folder, target="transformers.js", dtypes="fp32")
    jobs = [{"folder": folder, "dtype": "fp32", "prompts": PROMPTS,
             "options": {"max_new_tokens": NEW_TOKENS, "do_sample": False, "guidance_scale": guidance}}
            for guidance in GUIDANCE.values()]
    return dict(zip(GUIDANCE, run_transformers_js(RUNNER, jobs, root, timeout=600), strict=True))


@pytest.mark.sweep
@pytest.mark.parametrize("name", GUIDANCE)
def test_transformers_js_generates_transformers_audio(checkpoint, js, name) -> None:
    directory, model = checkpoint
    result = js[name]
    assert "error" not in result, result.get("error")
    inputs, expected = _eager(model, directory, GUIDANCE[name])
    for key in ("input_ids", "attention_mask"):  # the same tokenizer on both sides
        assert result[key]["data"] == inputs[key].flatten().tolist()
    got = np.asarray(result["audio_values"]["data"], dtype=np.float32).reshape(result["audio_values"]["dims"])
    assert got.shape == expected.shape
    assert np.abs(expected[0] - expected[1]).max() > 1e-2  # the texts' codes, and so their waveforms, differ
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4 + 1e-3 * np.abs(expected).max())


@pytest.mark.sweep
def test_default_folder_holds_the_three_models(checkpoint, tmp_path) -> None:
    """Without a target: the same three files, for onnxruntime, each naming its task; the decoder's batch rows are
    the codebooks of each text's row."""
    import onnx

    directory, _ = checkpoint
    out = str(tmp_path / "out")
    programs = export_hf(directory, "text-to-audio", out)
    assert sorted(programs) == sorted(("text_encoder", "decoder_model_merged", "encodec_decode"))
    for name in programs:
        model = onnx.load(os.path.join(out, f"{name}.onnx"))
        assert {p.key: p.value for p in model.metadata_props}["onnxport.hf.task"] == "text-to-audio"
    decoder = onnx.load(os.path.join(out, "decoder_model_merged.onnx"))
    dims = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in decoder.graph.input}
    assert dims["input_ids"][0] == "2*batch_size" and dims["encoder_hidden_states"][0] == "batch_size"
    assert "use_cache_branch" in dims
    for name in ("config.json", "generation_config.json", "tokenizer.json"):
        assert os.path.isfile(os.path.join(out, name))
    with pytest.raises(InvalidInputError, match="MusicGen"):  # onnxport's pipeline says what runs them
        onnxport.hf.pipeline(out)


@pytest.mark.sweep
def test_refusals(checkpoint, tmp_path) -> None:
    directory, _ = checkpoint
    with pytest.raises(InvalidInputError, match="weights loaded"):
        export_hf(directory, "text-to-audio", str(tmp_path / "streamed"), streaming=True)
    melody = tmp_path / "melody"
    melody.mkdir()
    config = transformers.MusicgenMelodyConfig(text_encoder=_config().text_encoder.to_dict(),
                                               audio_encoder=_config().audio_encoder.to_dict(),
                                               decoder=transformers.MusicgenMelodyDecoderConfig(
                                                   vocab_size=64, hidden_size=24, num_hidden_layers=1, ffn_dim=48,
                                                   num_attention_heads=4, num_codebooks=2).to_dict())
    config.save_pretrained(str(melody))
    with pytest.raises(InvalidInputError, match="musicgen_melody"):
        export_hf(str(melody), "text-to-audio", str(tmp_path / "melody-out"), target="transformers.js")
    stereo = _config()
    stereo.decoder.audio_channels, stereo.decoder.num_codebooks = 2, 4
    stereo.save_pretrained(str(tmp_path / "stereo"))
    with pytest.raises(InvalidInputError, match="stereo"):
        export_hf(str(tmp_path / "stereo"), "text-to-audio", str(tmp_path / "stereo-out"), target="transformers.js")
