"""The ``transformers.js`` target's folders on WebGPU: the example page in headless Chromium with
``device: 'webgpu'`` on SwiftShader's adapter (WebGPU on the CPU, no ``shader-f16``), against the same page on wasm.

Each file runs where onnxruntime-web's session log (``logSeverityLevel: 0``) places its nodes: the compute (attention,
matrix products, norms) on WebGPU, and on the CPU only the arithmetic of shapes, positions and masks, each kind
named in :data:`CPU_KINDS`."""

from __future__ import annotations

import json
import os

import pytest

from onnxport.hf import export_hf
from tests.runtimes.browser import need_chromium, open_pages, placements
from tests.test_transformers_js import CLOSE, MAKERS, assert_close_scores, write_wav

pytestmark = pytest.mark.sweep  # Chromium, twenty pages

# The common models of the tasks: BERT, a Llama-style decoder, T5, ViT and Whisper.
TASKS = ("text-classification", "text-generation", "text2text-generation", "image-classification",
         "automatic-speech-recognition")
DTYPES = ("fp32", "q4")
GENERATING = ("text-generation", "text2text-generation", "automatic-speech-recognition")
# What onnxruntime-web keeps on the CPU beside WebGPU, all of it on int64 positions, sizes and masks (WebGPU has
# no int64 arithmetic for most ops, and onnxruntime keeps a shape's arithmetic where the shape is read):
CPU_KINDS = {
    "shapes": {"Shape", "Squeeze", "Unsqueeze", "Concat", "Slice", "Expand", "Tile", "ConstantOfShape", "Gather",
               "Range", "Cast", "If"},  # If: the merged decoder's choice of branch, by the cache's length
    "positions and masks": {"Add", "Sub", "Mul", "Neg", "Abs", "Min", "Less", "LessOrEqual", "Greater",
                            "GreaterOrEqual", "Where", "GatherND", "GatherElements"},  # T5's buckets, causal masks,
    # the padded batch's last token
    "the rotary table": {"Cos", "Sin"},  # of the positions (a Llama's cos and sin per position and frequency)
}
# What must never leave WebGPU: the model's compute.
COMPUTE = {"Attention", "MultiHeadAttention", "GroupQueryAttention", "MatMul", "Gemm", "MatMulNBits", "Softmax",
           "LayerNormalization", "SkipLayerNormalization", "RMSNormalization", "SimplifiedLayerNormalization",
           "SkipSimplifiedLayerNormalization", "Conv", "BiasGelu", "Gelu", "FastGelu", "RotaryEmbedding"}


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """(task, dtype, device) -> what the example page left, the WebGPU pages with their session logs."""
    need_chromium()
    root = tmp_path_factory.mktemp("webgpu-site")
    queries = []
    for task in TASKS:
        case = MAKERS[task](str(root / "checkpoints"))
        export_hf(case.directory, task, str(root / task), target="transformers.js", dtypes=list(DTYPES))
        given = case.inputs[0]
        if isinstance(given, dict) and "audio" in given:
            given = write_wav(root / f"{task}.wav", given["audio"])
        elif isinstance(given, dict):
            name = os.path.basename(given["image"])
            if not (root / name).exists():
                os.symlink(given["image"], root / name)
            given = name
        queries += [{"model": task, "task": task, "dtype": dtype, "input": given,
                     "options": json.dumps(case.options)} for dtype in DTYPES]
    wasm = open_pages(root, queries)
    webgpu = open_pages(root, [{**query, "log": "1"} for query in queries], webgpu=True)
    found = {}
    for query, on_wasm, on_webgpu in zip(queries, wasm, webgpu, strict=True):
        found[query["task"], query["dtype"], "wasm"] = on_wasm
        found[query["task"], query["dtype"], "webgpu"] = on_webgpu
    return found


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_webgpu_computes_what_wasm_computes(pages, task, dtype) -> None:
    on_wasm, on_webgpu = pages[task, dtype, "wasm"], pages[task, dtype, "webgpu"]
    for result in (on_wasm, on_webgpu):
        assert "error" not in result, result.get("error")
    assert (on_wasm["device"], on_webgpu["device"]) == ("wasm", "webgpu")
    if task in GENERATING:
        assert on_webgpu["output"] == on_wasm["output"]
        assert on_webgpu["timings"]["tokens"] >= 1
    else:
        assert_close_scores(on_webgpu["output"], on_wasm["output"], 1e-4 if dtype == "fp32" else CLOSE[dtype])


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_only_shape_and_position_arithmetic_leaves_webgpu(pages, task, dtype) -> None:
    sessions = placements(pages[task, dtype, "webgpu"]["logs"])
    assert sessions, "onnxruntime's session log gave no node placements"
    named = set().union(*CPU_KINDS.values())
    for session in sessions:
        assert sum(session.get("WebGpu", {}).values()) > 0
        on_cpu = set(session.get("CPU", {}))
        assert not on_cpu & COMPUTE, session["CPU"]
        assert on_cpu <= named, on_cpu - named
