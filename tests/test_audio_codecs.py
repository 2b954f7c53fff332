"""Neural audio codecs (Mimi, DAC) exported for feature-extraction: their ``encode`` and ``decode`` as
``encoder_model`` (``input_values`` -> ``audio_codes``) and ``decoder_model`` (``audio_codes`` -> ``audio_values``),
the sessions transformers.js's auto-encoders (MimiModel, DacModel) load. Each case is a tiny random checkpoint; the
files equal transformers' ``model.encode(...).audio_codes`` (exactly) and ``model.decode(...).audio_values`` at batch
sizes and clip lengths other than the example's (lengths that are no multiple of the hop too), in onnxruntime and, in
Node, through transformers.js's classes. Also: the types and sessions are those transformers.js's registry names (SNAC,
which it loads too, has no transformers model), and a streamed export is refused before loading."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

import onnxport
from onnxport.hf import export_hf, pipeline
from onnxport.hf.audio_codec import PIECES, TYPES
from tests.runtimes.runtimes import TRANSFORMERS_JS, run_transformers_js

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.transformers

MODULES = TRANSFORMERS_JS
SOURCE = os.path.join(MODULES, "node_modules", "@huggingface", "transformers", "src", "models")
RUNNER = "run_transformers_js_classes.mjs"
# (batch, samples): clips shorter than Mimi's attention window and longer, each with a partial frame but the second
CLIPS = ((2, 100), (3, 1024), (1, 4099))


def _mimi() -> Any:
    config = transformers.MimiConfig(
        hidden_size=32, num_filters=4, upsampling_ratios=[4, 2], codebook_size=64, codebook_dim=16, num_quantizers=4,
        vector_quantization_hidden_dimension=16, upsample_groups=32, num_hidden_layers=2, intermediate_size=64,
        num_attention_heads=4, num_key_value_heads=4, head_dim=8, sliding_window=16, sampling_rate=800)
    return transformers.MimiModel(config)


def _dac() -> Any:
    config = transformers.DacConfig(encoder_hidden_size=8, downsampling_ratios=[2, 4], decoder_hidden_size=32,
                                    n_codebooks=3, codebook_size=32, codebook_dim=4, upsampling_ratios=[4, 2],
                                    hidden_size=32, hop_length=8)
    return transformers.DacModel(config)


# name -> (the transformers.js class that loads it, the model)
CASES: dict[str, tuple[str, Callable[[], Any]]] = {"mimi": ("MimiModel", _mimi), "dac": ("DacModel", _dac)}


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("codecs")
    directories = {}
    for name, (_, build) in CASES.items():
        torch.manual_seed(0)
        directories[name] = str(root / name)
        build().eval().save_pretrained(directories[name])
    return directories


def eager(directory: str, audio: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """transformers' codes of ``audio`` and the audio decoded from them."""
    model = transformers.AutoModel.from_pretrained(directory).eval()
    with torch.no_grad():
        codes = model.encode(torch.from_numpy(audio)).audio_codes
        return codes.numpy(), model.decode(audio_codes=codes).audio_values.numpy()


def clips() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.standard_normal((batch, 1, samples)).astype(np.float32) for batch, samples in CLIPS]


def assert_close(got: np.ndarray, expected: np.ndarray) -> None:
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4 + 1e-3 * np.abs(expected).max())


def test_the_types_and_sessions_are_those_transformers_js_loads(written, tmp_path) -> None:
    if not os.path.isfile(os.path.join(SOURCE, "registry.js")):
        pytest.fail(f"transformers.js is not installed in {MODULES}: run `make runtimes`")
    with open(os.path.join(SOURCE, "registry.js"), encoding="utf-8") as f:
        registry = f.read()
    body = re.search(r"const MODEL_MAPPING_NAMES_AUTO_ENCODER = new Map\(\[(.*?)\]\);", registry, re.S).group(1)
    pairs = dict(re.findall(r"\['([\w.-]+)',\s*'(\w+)'\]", body))
    assert set(pairs) == {*TYPES, "snac"}
    assert not hasattr(transformers, "SnacModel")  # nothing to export SNAC from
    assert {name: cls for name, (cls, _) in CASES.items()} == {t: pairs[t] for t in TYPES}
    with open(os.path.join(SOURCE, "session_config.js"), encoding="utf-8") as f:
        sessions = re.search(r"\[MODEL_TYPES\.AutoEncoder\]: \{\s*sessions: \(\) => \(\{(.*?)\}\)", f.read(), re.S)
    assert tuple(file for _, file in re.findall(r"(\w+):\s*'(\w+)'", sessions.group(1))) == PIECES
    with pytest.raises(onnxport.InvalidInputError, match="codec is exported with its weights loaded"):
        export_hf(written["dac"], "feature-extraction", tmp_path / "out", streaming=True)
    assert not os.path.exists(tmp_path / "out")


@pytest.mark.sweep  # a minute: Mimi's encoder captures slowly
@pytest.mark.parametrize("name", list(CASES))
def test_default_folder_equals_transformers(written, tmp_path, name) -> None:
    import onnxruntime as ort

    out = tmp_path / "out"
    programs = export_hf(written[name], "feature-extraction", out)
    assert sorted(programs) == sorted(PIECES)
    assert sorted(os.listdir(out)) == ["config.json", "decoder_model.onnx", "encoder_model.onnx"]
    with pytest.raises(onnxport.InvalidInputError, match="an audio codec's encoder_model and decoder_model"):
        pipeline(out)
    encoder = ort.InferenceSession(str(out / "encoder_model.onnx"), providers=["CPUExecutionProvider"])
    decoder = ort.InferenceSession(str(out / "decoder_model.onnx"), providers=["CPUExecutionProvider"])
    assert [[v.name for v in s.get_inputs()] for s in (encoder, decoder)] == [["input_values"], ["audio_codes"]]
    assert [[v.name for v in s.get_outputs()] for s in (encoder, decoder)] == [["audio_codes"], ["audio_values"]]
    for audio in clips():
        codes, values = eager(written[name], audio)
        (got_codes,) = encoder.run(None, {"input_values": audio})
        np.testing.assert_array_equal(got_codes, codes)
        (got_values,) = decoder.run(None, {"audio_codes": codes})
        assert_close(got_values, values)


def _tensor(value: np.ndarray) -> dict[str, Any]:
    kind = "float32" if value.dtype == np.float32 else "int64"
    return {"type": kind, "dims": list(value.shape), "data": value.reshape(-1).tolist()}


@pytest.mark.sweep
def test_transformers_js_encode_and_decode_equal_transformers(written, tmp_path) -> None:
    """Each folder loaded by its transformers.js class in Node: ``encode`` on clips, ``decode`` on transformers'
    codes of them."""
    jobs, expected = [], []
    for name, (cls, _) in CASES.items():
        folder = str(tmp_path / f"{name}-out")
        export_hf(written[name], "feature-extraction", folder, target="transformers.js", dtypes="fp32")
        assert sorted(os.listdir(os.path.join(folder, "onnx"))) == ["decoder_model.onnx", "encoder_model.onnx"]
        for audio in clips():
            codes, values = eager(written[name], audio)
            job = {"folder": folder, "class": cls, "dtype": "fp32"}
            jobs += [{**job, "method": "encode", "inputs": {"input_values": _tensor(audio)}},
                     {**job, "method": "decode", "inputs": {"audio_codes": _tensor(codes)}}]
            expected += [("audio_codes", codes), ("audio_values", values)]
    results = run_transformers_js(RUNNER, jobs, tmp_path, timeout=600)
    for (key, value), result in zip(expected, results, strict=True):
        assert "error" not in result, result.get("error")
        got = np.array(result["outputs"][key]["data"]).reshape(result["outputs"][key]["dims"])
        if key == "audio_codes":
            np.testing.assert_array_equal(got, value)
        else:
            assert_close(got.astype(np.float32), value)
