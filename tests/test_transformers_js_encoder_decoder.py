"""Bare encoder-decoders exported for feature-extraction with ``--target transformers.js``: transformers.js's
registry loads their classes (T5Model, BartModel, WhisperModel, ... its MODEL_MAPPING_NAMES_ENCODER_DECODER) as
encoder-decoders, from ``onnx/encoder_model.onnx`` and ``onnx/decoder_model_merged.onnx``, and calls one as its
users do, ``model({input_ids, attention_mask, decoder_input_ids})`` (speech: ``input_features``): the encoder, then
the decoder's first step. Each case is a tiny random checkpoint saved with a word-level tokenizer (a feature extractor
for Cohere ASR), exported through ``export_hf``, loaded in Node by its transformers.js class at fp32 and called on a
padded batch of two: its ``last_hidden_state`` (the decoder's) equals transformers' ``model(...).last_hidden_state``
within 1e-4 + 1e-3 x its largest magnitude. All folders are run in one Node process (the ``js`` fixture; the
types past :data:`QUICK` in the sweep's). Also: the
registry's types are those onnxport splits; the default (onnxruntime) folder of a bare T5, Whisper or Cohere ASR takes
``decoder_input_ids`` and equals transformers, a BART's keeps the tokenizer's inputs alone; a streamed export is
refused before loading."""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import pytest
import torch

import onnxport
from onnxport.hf import export_hf
from onnxport.hf.transformers_js import ENCODER_DECODER_TYPES
from tests import speech_dirs
from tests.runtimes.runtimes import HERE as RUNTIMES_HERE
from tests.runtimes.runtimes import ROOT as RUNTIMES_ROOT
from tests.runtimes.runtimes import run_transformers_js
from tests.test_transformers_js import write_special_tokenizer

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.transformers

MODULES = os.path.join(RUNTIMES_ROOT, "transformers-js")
REGISTRY = os.path.join(MODULES, "node_modules", "@huggingface", "transformers", "src", "models", "registry.js")
RUNNER = os.path.join(RUNTIMES_HERE, "run_transformers_js_classes.mjs")
VOCAB = 99
TOKENS = dict(vocab_size=VOCAB, pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=2)
LAYERS = dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
              encoder_ffn_dim=64, decoder_ffn_dim=64)
TEXTS = ["w5 w17 w33 w8 w40 w41 w42", "w9 w11 w13"]  # the second padded
DECODER_IDS = [[2, 7, 19, 33, 4], [2, 50, 6, 8, 90]]


@dataclasses.dataclass(frozen=True)
class BareCase:
    """A bare encoder-decoder: the transformers.js class that loads it, the model (seeded), and whether it reads
    audio (``input_features``: random frames, or a feature extractor's where ``extractor`` is given, then saved)."""

    js_class: str
    build: Callable[[], Any]
    speech: bool = False
    extractor: Callable[[], Any] | None = None


def _t5(cls: str, **extra: Any) -> Callable[[], Any]:
    config = getattr(transformers, cls.replace("Model", "Config"))
    return lambda: getattr(transformers, cls)(config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                                                     num_heads=4, decoder_start_token_id=0, pad_token_id=0,
                                                     eos_token_id=2, **extra))


def _bart_like(cls: str, **extra: Any) -> Callable[[], Any]:
    config = getattr(transformers, cls.replace("Model", "Config"))
    return lambda: getattr(transformers, cls)(config(**{**TOKENS, **LAYERS, "max_position_embeddings": 64, **extra}))


def _whisper() -> Any:
    return transformers.WhisperModel(transformers.WhisperConfig(
        **TOKENS, **LAYERS, num_mel_bins=8, max_source_positions=16, max_target_positions=32))


def _cohere_asr() -> Any:
    encoder = dict(model_type="parakeet_encoder", hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=4, intermediate_size=64, num_mel_bins=16, subsampling_conv_channels=8,
                   max_position_embeddings=512)
    return transformers.CohereAsrModel(transformers.CohereAsrConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, intermediate_size=64,
        head_dim=8, max_position_embeddings=64, encoder_config=encoder, **TOKENS))


CASES = {
    "t5": BareCase("T5Model", _t5("T5Model")),
    "mt5": BareCase("MT5Model", _t5("MT5Model")),
    "longt5": BareCase("LongT5Model", _t5("LongT5Model", local_radius=4, global_block_size=4)),  # blocks of 5
    "longt5-tglobal": BareCase("LongT5Model", _t5("LongT5Model", local_radius=4, global_block_size=4,
                                                  encoder_attention_type="transient-global")),
    "bart": BareCase("BartModel", _bart_like("BartModel")),
    "mbart": BareCase("MBartModel", _bart_like("MBartModel")),
    "marian": BareCase("MarianModel", _bart_like("MarianModel")),
    "m2m_100": BareCase("M2M100Model", _bart_like("M2M100Model", max_position_embeddings=8)),  # outgrown: sinusoids
    "blenderbot": BareCase("BlenderbotModel", _bart_like("BlenderbotModel")),
    "blenderbot-small": BareCase("BlenderbotSmallModel", _bart_like("BlenderbotSmallModel")),
    "whisper": BareCase("WhisperModel", _whisper, speech=True),
    "cohere_asr": BareCase("CohereAsrModel", _cohere_asr, speech=True,
                           extractor=lambda: transformers.CohereAsrFeatureExtractor(feature_size=16, dither=0.0)),
}
# The cases make test runs (a T5, a BART, the two speech types and LongT5's transient-global blocks); the others
# run in the sweep.
QUICK = ("t5", "bart", "whisper", "cohere_asr", "longt5-tglobal")
REST = [name for name in CASES if name not in QUICK]


def _write(root: str, name: str) -> tuple[str, dict[str, torch.Tensor]]:
    """The case's checkpoint saved in ``root/name``, and the inputs both runtimes are given."""
    case = CASES[name]
    directory = os.path.join(root, name)
    torch.manual_seed(0)
    model = case.build().eval()
    with torch.no_grad():  # weights wider than the init's, for states far from zero
        for param in model.parameters():
            if param.dim() > 1:
                param.normal_(0, 0.3)
    model.save_pretrained(directory)
    write_special_tokenizer(directory, VOCAB)
    inputs = {"decoder_input_ids": torch.tensor(DECODER_IDS)}
    if case.extractor is not None:
        extractor = case.extractor()
        extractor.save_pretrained(directory)
        features = speech_dirs.encoded(extractor, speech_dirs.clips((0.9, 0.55)))["input_features"]
        return directory, {"input_features": features, **inputs}
    if case.speech:
        bins, frames = model.config.num_mel_bins, 2 * model.config.max_source_positions
        return directory, {"input_features": torch.randn(2, bins, frames, generator=torch.Generator().manual_seed(1)),
                           **inputs}
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    text = tokenizer(TEXTS, padding=True, return_tensors="pt")
    assert text["attention_mask"][1].sum() < text["attention_mask"].shape[1]  # a padded row
    return directory, {"input_ids": text["input_ids"], "attention_mask": text["attention_mask"], **inputs}


def _tensor(value: torch.Tensor) -> dict[str, Any]:
    kind = "float32" if value.is_floating_point() else "int64"
    return {"type": kind, "dims": list(value.shape), "data": value.reshape(-1).tolist()}


def _assert_close(got: np.ndarray, expected: np.ndarray) -> None:
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4 + 1e-3 * np.abs(expected).max())


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict[str, tuple[str, dict[str, torch.Tensor]]]:
    root = str(tmp_path_factory.mktemp("bare-encoder-decoders"))
    return {name: _write(root, name) for name in CASES}


def _run_js(written: dict[str, Any], names: list[str], root: str) -> dict[str, tuple[str, dict[str, Any]]]:
    """name -> (the folder export_hf wrote, what transformers.js's class returned), for the cases ``names``."""
    folders, jobs = {}, []
    for name in names:
        directory, inputs = written[name]
        folders[name] = os.path.join(root, f"{name}-out")
        export_hf(directory, "feature-extraction", folders[name], target="transformers.js", dtypes="fp32")
        jobs.append({"folder": folders[name], "class": CASES[name].js_class, "dtype": "fp32",
                     "inputs": {k: _tensor(v) for k, v in inputs.items()}})
    results = run_transformers_js(RUNNER, jobs, root, timeout=600)
    return dict(zip(folders, zip(folders.values(), results, strict=True), strict=True))


@pytest.fixture(scope="module")
def js(written, tmp_path_factory) -> dict[str, tuple[str, dict[str, Any]]]:
    return _run_js(written, list(QUICK), str(tmp_path_factory.mktemp("bare-encoder-decoders-js")))


@pytest.fixture(scope="module")
def js_rest(written, tmp_path_factory) -> dict[str, tuple[str, dict[str, Any]]]:
    return _run_js(written, REST, str(tmp_path_factory.mktemp("bare-encoder-decoders-js-rest")))


@pytest.mark.parametrize("name", QUICK)
def test_last_hidden_state_is_transformers(written, js, name) -> None:
    _check(written, js, name)


@pytest.mark.sweep
@pytest.mark.parametrize("name", REST)
def test_last_hidden_state_is_transformers_in_the_other_types(written, js_rest, name) -> None:
    _check(written, js_rest, name)


def _check(written: dict[str, Any], js: dict[str, Any], name: str) -> None:
    directory, inputs = written[name]
    folder, result = js[name]
    assert "error" not in result, result.get("error")
    assert sorted(os.listdir(os.path.join(folder, "onnx"))) == ["decoder_model_merged.onnx", "encoder_model.onnx"]
    model = transformers.AutoModel.from_pretrained(directory).eval()  # as a user's transformers loads it
    with torch.no_grad():
        expected = model(**inputs).last_hidden_state.numpy()
    got = result["outputs"]["last_hidden_state"]
    _assert_close(np.array(got["data"], dtype=np.float32).reshape(got["dims"]), expected)
    assert any(key.startswith("present.") for key in result["outputs"])  # the cache it would feed back


def test_the_decoder_gives_its_states_and_the_cache_transformers_js_feeds(js) -> None:
    decoder = onnx.load(os.path.join(js["t5"][0], "onnx", "decoder_model_merged.onnx"), load_external_data=False)
    inputs = [i.name for i in decoder.graph.input]
    outputs = [o.name for o in decoder.graph.output]
    assert outputs[0] == "last_hidden_state" and "logits" not in outputs
    assert {"input_ids", "encoder_attention_mask", "encoder_hidden_states", "use_cache_branch"} <= set(inputs)
    for i in range(2):
        for part in ("decoder", "encoder"):
            assert {f"past_key_values.{i}.{part}.key", f"past_key_values.{i}.{part}.value"} <= set(inputs)
            assert {f"present.{i}.{part}.key", f"present.{i}.{part}.value"} <= set(outputs)
    encoder = onnx.load(os.path.join(js["t5"][0], "onnx", "encoder_model.onnx"), load_external_data=False)
    assert [o.name for o in encoder.graph.output] == ["last_hidden_state"]


def test_the_types_split_are_those_transformers_js_loads_as_encoder_decoders() -> None:
    if not os.path.isfile(REGISTRY):
        pytest.fail(f"transformers.js is not installed in {MODULES}: run `make runtimes`")
    with open(REGISTRY, encoding="utf-8") as f:
        text = f.read()
    body = re.search(r"const MODEL_MAPPING_NAMES_ENCODER_DECODER = new Map\(\[(.*?)\]\);", text, re.S).group(1)
    pairs = dict(re.findall(r"\['([\w.-]+)',\s*'(\w+)'\]", body))
    assert set(pairs) == set(ENCODER_DECODER_TYPES)
    assert {case.js_class for case in CASES.values()} == set(pairs.values())


@pytest.mark.parametrize("name", ["t5", "whisper", "cohere_asr"])
def test_default_folders_take_the_decoder_ids_the_forward_needs(written, tmp_path, name) -> None:
    """onnxport's own folder (no target): one model.onnx, taking decoder_input_ids where the bare model cannot make
    them (T5's, Whisper's), and its audio's length where that varies (Cohere ASR's frames, with their mask), as
    transformers does."""
    import onnxruntime as ort

    directory, inputs = written[name]
    export_hf(directory, "feature-extraction", tmp_path / name)
    session = ort.InferenceSession(str(tmp_path / name / "model.onnx"))
    names = {i.name for i in session.get_inputs()}
    assert set(inputs) <= names and "decoder_input_ids" in names
    if "attention_mask" in names - set(inputs):  # the extractor's (Cohere ASR's), which transformers.js feeds none
        inputs = {**inputs, "attention_mask": torch.ones(inputs["input_features"].shape[:2], dtype=torch.int64)}
    got = session.run(["last_hidden_state"], {k: v.numpy() for k, v in inputs.items()})[0]
    with torch.no_grad():
        expected = transformers.AutoModel.from_pretrained(directory).eval()(**inputs).last_hidden_state.numpy()
    _assert_close(got, expected)


def test_a_bart_default_folder_keeps_the_tokenizer_inputs(written, tmp_path) -> None:
    """BART's bare model makes its decoder's ids of input_ids: its default folder takes the tokenizer's inputs
    alone, as transformers' feature-extraction pipeline feeds them."""
    export_hf(written["bart"][0], "feature-extraction", tmp_path / "bart")
    bart = onnx.load(str(tmp_path / "bart" / "model.onnx"), load_external_data=False)
    assert [i.name for i in bart.graph.input] == ["input_ids", "attention_mask"]


def test_a_streamed_export_is_refused_before_anything_is_written(written, tmp_path) -> None:
    with pytest.raises(onnxport.InvalidInputError, match="exported with its weights loaded"):
        export_hf(written["t5"][0], "feature-extraction", tmp_path / "out", target="transformers.js", streaming=True)
    assert not os.path.exists(tmp_path / "out")
