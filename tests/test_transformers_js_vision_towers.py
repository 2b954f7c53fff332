"""Vision towers exported for image-feature-extraction with ``--target transformers.js``: transformers.js loads
CLIPVisionModelWithProjection and SiglipVisionModel (its registry's image-feature-extraction classes) from
``onnx/vision_model.onnx``, not ``model.onnx``. Each tower is a tiny random checkpoint saved with its image
processor, exported through ``export_hf``, loaded in Node by its class at fp32 (``run_transformers_js_classes.mjs``)
and called on a batch of two images: every output it returns equals transformers' within 1e-4 + 1e-3 x the
largest magnitude."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from onnxport.hf import export_hf
from tests.runtimes.runtimes import run_transformers_js
from tests.test_transformers_js_encoder_decoder import RUNNER, _assert_close, _tensor

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.transformers

VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, image_size=32,
              patch_size=8)
TOWERS = {
    "CLIPVisionModelWithProjection": lambda: (transformers.CLIPVisionConfig(**VISION, projection_dim=16),
                                              transformers.CLIPImageProcessor(size={"shortest_edge": 32},
                                                                              crop_size={"height": 32, "width": 32})),
    "SiglipVisionModel": lambda: (transformers.SiglipVisionConfig(**VISION),
                                  transformers.SiglipImageProcessor(size={"height": 32, "width": 32})),
}


def test_vision_towers_run_in_transformers_js_from_vision_model(tmp_path) -> None:
    pixels = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    jobs, expected = [], []
    for name, make in TOWERS.items():
        config, processor = make()
        torch.manual_seed(0)
        model = getattr(transformers, name)(config).eval()
        directory, out = str(tmp_path / name), str(tmp_path / f"{name}-out")
        model.save_pretrained(directory)
        processor.save_pretrained(directory)
        export_hf(directory, "image-feature-extraction", out, target="transformers.js", dtypes="fp32")
        assert os.listdir(os.path.join(out, "onnx")) == ["vision_model.onnx"]
        with torch.no_grad():
            expected.append({k: v.numpy() for k, v in model(pixel_values=pixels).items()
                             if isinstance(v, torch.Tensor)})
        jobs.append({"folder": out, "class": name, "dtype": "fp32", "inputs": {"pixel_values": _tensor(pixels)}})
    results = run_transformers_js(RUNNER, jobs, tmp_path, timeout=300)
    for name, result, want in zip(TOWERS, results, expected, strict=True):
        assert "error" not in result, (name, result.get("error"))
        compared = set(result["outputs"]) & set(want)
        assert compared >= {"last_hidden_state"} and (name != "CLIPVisionModelWithProjection" or
                                                      "image_embeds" in compared), (name, compared)
        for key in compared:
            got = result["outputs"][key]
            _assert_close(np.array(got["data"], dtype=np.float32).reshape(got["dims"]), want[key])
