"""``export_hf(..., "audio-text-to-text", target="transformers.js")``: the folder transformers.js loads with
``AutoProcessor`` and ``AutoModelForAudioTextToText`` (sessions ``audio_encoder``, ``embed_tokens`` and
``decoder_model_merged``: ``MODEL_TYPES.AudioTextToText``), run in Node by the pinned ``@huggingface/transformers``
(tests/runtimes/transformers-js, ``make runtimes``) as its users run it: its own processor on a prompt and a clip of
sound, the model's forward, then ``generate``.

For tiny random Voxtral and Granite Speech checkpoints, on what transformers.js's processor gave (transformers'
Voxtral processor needs mistral_common's tokenizer, Granite Speech's feature extractor torchaudio), the first step's
logits and the greedy tokens equal transformers' in fp32 and fp16, for two clips each (Granite Speech's conformer
blocks of frames full in one, padded in the other); the q4 files run and continue the prompt. The Node runs are a
``sweep``; ``make test`` keeps the layout's check against the installed transformers.js's source and ``--task
auto``. Nothing downloaded."""

from __future__ import annotations

import math
import os
import re
from typing import Any

import pytest
import torch

from onnxport.hf import export_hf
from onnxport.hf.multimodal import TRANSFORMERS_JS
from onnxport.hf.multimodal.consumers import TRANSFORMERS_JS_AUDIO_TYPES
from tests.runtimes.runtimes import HERE as RUNTIMES_HERE
from tests.runtimes.runtimes import ROOT as RUNTIMES_ROOT
from tests.runtimes.runtimes import run_transformers_js

transformers = pytest.importorskip("transformers")

from tests import audio_text_dirs  # noqa: E402

pytestmark = pytest.mark.transformers

MODULES = os.path.join(RUNTIMES_ROOT, "transformers-js")
SOURCE = os.path.join(MODULES, "node_modules", "@huggingface", "transformers", "src")
RUNNER = os.path.join(RUNTIMES_HERE, "run_transformers_js_audio_text.mjs")
NEW_TOKENS = 6
RATE = 16000
# 0.6 s and 1.28 s of two tones: Granite Speech's 30 and 64 stacked frames, its conformer's last block of 8 frames
# padded in the first and full in the second; one 30 s window each for Voxtral.
CLIPS = [[round(0.5 * math.sin(2 * math.pi * 440 * i / RATE) + 0.2 * math.sin(2 * math.pi * 1250 * i / RATE), 5)
          for i in range(n)] for n in (9600, 20480)]
CASES = {"voxtral": (audio_text_dirs.write_voxtral, "user: [AUDIO] what is in it ?"),
         "granite_speech": (audio_text_dirs.write_granite_speech, "user: <|audio|> what is in it ?")}
DTYPES = ("fp32", "fp16", "q4")
# The largest difference of the first step's logits from transformers', relative to their largest (measured: 2.7e-6
# in fp32, 3.6e-3 in fp16, of logits up to 3.4); the greedy tokens are transformers' in both.
BOUNDS = {"fp32": 1e-4, "fp16": 1e-2}


def _run_js(jobs: list[dict], scratch: str) -> list[dict]:
    return run_transformers_js(RUNNER, jobs, scratch, timeout=1200)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[tuple[str, str], tuple[Any, dict]]:
    """(type, dtype) -> (the PyTorch model, transformers.js's result), every folder run in one Node process."""
    root = str(tmp_path_factory.mktemp("audio-text-js"))
    models, jobs = {}, []
    for kind, (write, prompt) in CASES.items():
        directory, out = os.path.join(root, kind), os.path.join(root, f"{kind}-js")
        models[kind] = write(directory)
        export_hf(directory, "audio-text-to-text", out, target="transformers.js", dtypes=list(DTYPES))
        cases = [{"text": prompt, "audio": clip, "max_new_tokens": NEW_TOKENS} for clip in CLIPS]
        jobs += [{"folder": out, "dtype": dtype, "cases": cases} for dtype in DTYPES]
    results = _run_js(jobs, root)
    wanted = [(kind, dtype) for kind in CASES for dtype in DTYPES]
    return {key: (models[key[0]], result) for key, result in zip(wanted, results, strict=True)}


def torch_inputs(model: torch.nn.Module, given: dict[str, dict]) -> dict[str, torch.Tensor]:
    """What transformers.js's processor gave, as the PyTorch model's forward takes it (Voxtral's ``audio_values``
    are its ``input_features``)."""
    types = {"float32": torch.float32, "bool": torch.bool}  # int64 else
    inputs = {name: torch.tensor(v["data"], dtype=types.get(v["type"], torch.int64)).reshape(v["dims"])
              for name, v in given.items()}
    if "audio_values" in inputs:
        inputs["input_features"] = inputs.pop("audio_values")
    return inputs


@pytest.mark.sweep
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", list(CASES))
def test_a_folder_generates_in_transformers_js_as_transformers(runs, kind, dtype) -> None:
    model, result = runs[kind, dtype]
    assert "error" not in result, result.get("error")
    assert len(result["cases"]) == len(CLIPS)
    token = model.config.audio_token_id
    for case in result["cases"]:
        inputs = torch_inputs(model, case["inputs"])
        assert (inputs["input_ids"] == token).sum() > 1  # the clip's audio tokens, expanded by the processor
        (tokens,) = case["tokens"]
        prompt = inputs["input_ids"][0].tolist()
        assert tokens[:len(prompt)] == prompt and len(prompt) < len(tokens) <= len(prompt) + NEW_TOKENS
        if dtype not in BOUNDS:  # 4-bit weights: it runs and continues the prompt
            continue
        with torch.no_grad():
            logits = model(**inputs).logits[0, -1]
            expected = model.generate(**inputs, do_sample=False, max_new_tokens=NEW_TOKENS)
        error = (torch.tensor(case["logits"]) - logits).abs().max().item()
        assert error < BOUNDS[dtype] * max(1.0, logits.abs().max().item()), error
        assert tokens == expected[0].tolist()
    first, second = (case["logits"] for case in result["cases"])  # the clips' rows reach the decoder
    assert max(abs(a - b) for a, b in zip(first, second, strict=True)) > 1e-2


def _prompt(model: torch.nn.Module, rows: list[int], width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of prompts, one per clip, each holding its clip's ``rows`` audio tokens, padded on the left."""
    token = model.config.audio_token_id
    ids, mask = torch.zeros(len(rows), width, dtype=torch.int64), torch.zeros(len(rows), width, dtype=torch.int64)
    for i, count in enumerate(rows):
        prompt = torch.tensor([1, 5, *[token] * count, 7, 8])
        ids[i, width - len(prompt):], mask[i, width - len(prompt):] = prompt, 1
    return ids, mask


@pytest.mark.sweep
@pytest.mark.parametrize("streaming", [False, True])
def test_the_default_folder_generates_as_transformers(tmp_path, streaming) -> None:
    """The folder without a target (``audio.onnx``, ``embedding.onnx``, ``model.onnx``), its weights loaded or
    streamed, run by ``generate_vlm`` on a processor's inputs: Voxtral's two 30 s windows in one prompt; Granite
    Speech's two clips of 64 and 30 stacked frames, padded, in a batch of two prompts (its ``input_features_mask``
    keeping the short clip's rows)."""
    from onnxport.hf.multimodal import generate_vlm

    generator = torch.Generator().manual_seed(0)
    for kind, (write, _) in CASES.items():
        model = write(str(tmp_path / kind))
        export_hf(str(tmp_path / kind), "audio-text-to-text", tmp_path / f"{kind}-out", streaming=streaming)
        assert {"audio.onnx", "embedding.onnx", "model.onnx"} <= set(os.listdir(tmp_path / f"{kind}-out"))
        if kind == "voxtral":
            ids, mask = _prompt(model, [750], 754)
            inputs = {"input_features": torch.randn(2, 128, 3000, generator=generator)}
        else:
            ids, mask = _prompt(model, [32, 16], 40)
            features = torch.randn(2, 64, 2 * audio_text_dirs.GRANITE_MELS, generator=generator)
            features[1, 30:] = 0
            kept = torch.arange(32)[None] < torch.tensor([[32], [16]])
            inputs = {"input_features": features, "input_features_mask": kept}
        inputs.update(input_ids=ids, attention_mask=mask)
        with torch.no_grad():
            expected = model.generate(**inputs, do_sample=False, max_new_tokens=NEW_TOKENS)
        assert torch.equal(generate_vlm(tmp_path / f"{kind}-out", inputs=inputs, max_new_tokens=NEW_TOKENS), expected)


def _read(path: str) -> str:
    with open(os.path.join(SOURCE, path), encoding="utf-8") as f:
        return f.read()


def test_the_layout_is_what_the_installed_transformers_js_reads_and_auto_picks_the_task(tmp_path) -> None:
    """The sessions, types and input names of the layout, read from transformers.js's source; ``--task auto`` picks
    audio-text-to-text for both types, and image-text-to-text is refused for them with the task to use; Granite
    Speech's audio encoder gives its model's own rows whether its conformer's last block of frames is full or
    padded, and leaves the model's modules as they were."""
    from onnxport.errors import InvalidInputError
    from onnxport.hf.multimodal.components import HeardAudioEncoder
    from onnxport.hf.tasks import pick_task

    if not os.path.isdir(SOURCE):
        pytest.fail(f"transformers.js is not installed in {MODULES}: run `make runtimes`")
    sessions = _read("models/session_config.js")
    block = sessions[sessions.index("[MODEL_TYPES.AudioTextToText]"):]
    block = block[:block.index("cache_sessions")]
    stems = {stem for kind in TRANSFORMERS_JS_AUDIO_TYPES
             for stem in TRANSFORMERS_JS.files_for(transformers.AutoConfig.for_model(kind), False).values()}
    assert set(re.findall(r"'(\w+)'", block)) == stems == {"audio_encoder", "embed_tokens", "decoder_model_merged"}
    registry = _read("models/registry.js")
    mapping = registry[registry.index("MODEL_FOR_AUDIO_TEXT_TO_TEXT_MAPPING_NAMES = new Map(["):]
    types = re.findall(r"\['([\w-]+)', '\w+'\]", mapping[:mapping.index("]);")])
    assert tuple(sorted(t for t in types if t in TRANSFORMERS_JS_AUDIO_TYPES)) == TRANSFORMERS_JS_AUDIO_TYPES
    assert "audio_values" in _read("models/voxtral/processing_voxtral.js")  # Voxtral's features, so named
    assert TRANSFORMERS_JS.inputs["voxtral"] == {"input_features": "audio_values"}
    assert "forward_params = ['input_ids', 'attention_mask', 'input_features', 'past_key_values']" in \
        _read("models/granite_speech/modeling_granite_speech.js")  # its mask dropped: the encoder takes features
    for kind, (write, _) in CASES.items():
        directory = str(tmp_path / kind)
        model = write(directory)
        assert pick_task(directory).task == "audio-text-to-text"
        if kind == "granite_speech":
            for frames in (64, 30, 3):  # blocks of 8 frames: full, padded, one padded block
                features = torch.randn(1, frames, 2 * audio_text_dirs.GRANITE_MELS)
                with torch.no_grad():
                    own = model.get_audio_features(features).pooler_output.flatten(0, 1)
                    torch.testing.assert_close(HeardAudioEncoder(model)(features), own)
            assert not any("forward" in vars(m) for m in model.modules())
        with pytest.raises(InvalidInputError, match="hears and does not see"):
            export_hf(directory, "image-text-to-text", tmp_path / "out", target="transformers.js")
        assert not (tmp_path / "out").exists()
