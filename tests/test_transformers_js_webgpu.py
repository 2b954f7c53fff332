"""The ``transformers.js`` target's folders on WebGPU: the example page in headless Chromium with
``device: 'webgpu'`` on SwiftShader's adapter (WebGPU on the CPU, no ``shader-f16``), against the same page on wasm.

Each file runs where onnxruntime-web's session log (``logSeverityLevel: 0``) places its nodes: the compute (attention,
matrix products, norms) on WebGPU, and on the CPU only the arithmetic of shapes, positions and masks, each kind
named in :data:`CPU_KINDS`."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from onnxport.hf import export_hf
from tests.runtimes.browser import need_chromium, open_pages, placements
from tests.test_transformers_js import CLOSE, MAKERS, assert_close_scores, write_wav

pytestmark = pytest.mark.sweep  # Chromium, a page per task, dtype and device (see MATRIX)

# Every task of the transformers.js matrix; the common models among them: BERT, a Llama-style decoder, T5, ViT and
# Whisper (their compute must never leave WebGPU).
TASKS = tuple(MAKERS)
COMMON = ("text-classification", "text-generation", "text2text-generation", "image-classification",
          "automatic-speech-recognition")
DTYPES = ("fp32", "q4")
SCORED = ("text-classification", "fill-mask", "token-classification", "question-answering", "image-classification",
          "audio-classification", "zero-shot-image-classification")
GENERATING = ("text-generation", "text2text-generation", "automatic-speech-recognition")
# What onnxruntime-web keeps on the CPU beside WebGPU, all of it on int64 positions, sizes and masks (WebGPU has
# no int64 arithmetic for most ops, and onnxruntime keeps a shape's arithmetic where the shape is read):
CPU_KINDS = {
    "shapes": {"Shape", "Squeeze", "Unsqueeze", "Concat", "Slice", "Expand", "Tile", "ConstantOfShape", "Gather",
               "Range", "Cast", "If"},  # If: the merged decoder's choice of branch, by the cache's length
    "positions, lengths and masks": {"Add", "Sub", "Mul", "Div", "Neg", "Abs", "Min", "Equal", "Less", "LessOrEqual",
                                     "Greater", "GreaterOrEqual", "Where", "GatherND", "GatherElements"},
    # T5's buckets, causal masks, the padded batch's last token, a clip's frames through Wav2Vec2's convolutions
    "the rotary table": {"Cos", "Sin"},  # of the positions (a Llama's cos and sin per position and frequency)
    # Not arithmetic, and not on WebGPU: onnxruntime-web 1.31's WebGPU provider finds no kernel for DPT's upsampling
    # ConvTranspose (opset 22's); left named until it does, or until the file writes the upsampling otherwise
    "upsampling (a known gap)": {"ConvTranspose"},
}
# What must never leave WebGPU: the model's compute.
COMPUTE = {"Attention", "MultiHeadAttention", "GroupQueryAttention", "MatMul", "Gemm", "MatMulNBits", "Softmax",
           "LayerNormalization", "SkipLayerNormalization", "RMSNormalization", "SimplifiedLayerNormalization",
           "SkipSimplifiedLayerNormalization", "Conv", "BiasGelu", "Gelu", "FastGelu", "RotaryEmbedding"}


def _page_input(given: object, root, task: str) -> str:
    """A case's input as the example page's ``input`` field: the text; "question|context"; a WAV file's name; an
    image's name (served beside the folders), "image|label,label" for zero-shot classification."""
    if not isinstance(given, dict):
        return given
    if "question" in given:
        return f"{given['question']}|{given['context']}"
    if "audio" in given:
        return write_wav(root / f"{task}.wav", given["audio"])
    name = os.path.basename(given["image"])
    if not (root / name).exists():
        os.symlink(given["image"], root / name)
    return f"{name}|{','.join(given['labels'])}" if "labels" in given else name


def _open(root, tasks: tuple[str, ...]) -> dict[tuple[str, str, str], dict]:
    """(task, dtype, device) -> what the example page left for ``tasks``' folders, the WebGPU pages with their
    session logs."""
    need_chromium()
    queries = []
    for task in tasks:
        case = MAKERS[task](str(root / "checkpoints"))
        export_hf(case.directory, task, str(root / task), target="transformers.js", dtypes=list(DTYPES))
        given = _page_input(case.inputs[0], root, task)
        queries += [{"model": task, "task": task, "dtype": dtype, "input": given,
                     "options": json.dumps(case.options)} for dtype in DTYPES]
    wasm = open_pages(root, queries)
    webgpu = open_pages(root, [{**query, "log": "1"} for query in queries], webgpu=True)
    found = {}
    for query, on_wasm, on_webgpu in zip(queries, wasm, webgpu, strict=True):
        found[query["task"], query["dtype"], "wasm"] = on_wasm
        found[query["task"], query["dtype"], "webgpu"] = on_webgpu
    return found


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """(task, dtype, device) -> the page's result; the common models' pages opened together the first time one is
    asked for, the other tasks' (marked slow) likewise."""
    found: dict[tuple[str, str, str], dict] = {}

    def page(task: str, dtype: str, device: str) -> dict:
        if (task, dtype, device) not in found:
            group = COMMON if task in COMMON else tuple(t for t in TASKS if t not in COMMON)
            found.update(_open(tmp_path_factory.mktemp("webgpu-site"), group))
        return found[task, dtype, device]

    return page


# The common models' pages in the sweep (two minutes); every other task's with the slow tests (four more).
MATRIX = [task if task in COMMON else pytest.param(task, marks=pytest.mark.slow) for task in TASKS]


@pytest.mark.parametrize("task", MATRIX)
@pytest.mark.parametrize("dtype", DTYPES)
def test_webgpu_computes_what_wasm_computes(pages, task, dtype) -> None:
    on_wasm, on_webgpu = pages(task, dtype, "wasm"), pages(task, dtype, "webgpu")
    for result in (on_wasm, on_webgpu):
        assert "error" not in result, result.get("error")
    assert (on_wasm["device"], on_webgpu["device"]) == ("wasm", "webgpu")
    if task in GENERATING:
        assert on_webgpu["output"] == on_wasm["output"]
        assert on_webgpu["timings"]["tokens"] >= 1
    elif task in SCORED:
        assert_close_scores(on_webgpu["output"], on_wasm["output"], 1e-4 if dtype == "fp32" else CLOSE[dtype])
    else:  # features, boxes, masks, depth: the same structure, numbers within the dtype's bound
        assert_close_tree(on_webgpu["output"], on_wasm["output"], 1e-3 if dtype == "fp32" else CLOSE[dtype])
    assert on_webgpu["timings"]["load_ms"] > 0 and on_webgpu["timings"]["run_ms"] > 0


def assert_close_tree(got: object, expected: object, bound: float, where: str = "") -> None:
    """Equal structure and labels; each number within ``bound`` of the other relative to its size (at least 1);
    a long run of numbers (a mask's or a depth map's pixels, features) by its mean difference over its range."""
    if isinstance(expected, dict):
        assert isinstance(got, dict) and set(got) == set(expected), (where, got, expected)
        for key in expected:
            assert_close_tree(got[key], expected[key], bound, f"{where}.{key}")
    elif isinstance(expected, list) and len(expected) > 16 and all(isinstance(v, (int, float)) for v in expected):
        a, b = np.asarray(got, dtype=np.float64), np.asarray(expected, dtype=np.float64)
        assert a.shape == b.shape, where
        assert np.abs(a - b).mean() <= bound * max(1.0, float(np.ptp(b))), (where, np.abs(a - b).mean())
    elif isinstance(expected, list):
        assert isinstance(got, list) and len(got) == len(expected), (where, got, expected)
        for i, (a, b) in enumerate(zip(got, expected, strict=True)):
            assert_close_tree(a, b, bound, f"{where}[{i}]")
    elif isinstance(expected, (int, float)) and not isinstance(expected, bool):
        assert abs(got - expected) <= bound * max(1.0, abs(expected)), (where, got, expected)
    else:
        assert got == expected, (where, got, expected)


@pytest.mark.parametrize("task", MATRIX)
@pytest.mark.parametrize("dtype", DTYPES)
def test_only_shape_and_position_arithmetic_leaves_webgpu(pages, task, dtype) -> None:
    sessions = placements(pages(task, dtype, "webgpu")["logs"])
    assert sessions, "onnxruntime's session log gave no node placements"
    named = set().union(*CPU_KINDS.values())
    for session in sessions:
        assert sum(session.get("WebGpu", {}).values()) > 0
        on_cpu = set(session.get("CPU", {}))
        if task in COMMON:
            assert not on_cpu & COMPUTE, session["CPU"]
        assert on_cpu <= named, on_cpu - named
