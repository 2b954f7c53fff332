"""x-vector heads (speaker embeddings, ``audio-xvector``) exported with a dynamic batch and clip length: given an
``attention_mask``, transformers pools each row's frames in a Python loop over the batch, which the capture patch
(:mod:`onnxport.hf._xvector_pooling`) replaces with masked sums. Each case is a tiny random checkpoint saved with a
feature extractor that gives a mask; its file equals transformers' ``logits`` and ``embeddings`` on the extractor's
padded batches of other sizes and lengths than the example's, in onnxruntime, and (in the sweep) in transformers.js
through its WavLMForXVector class."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from onnxport.hf import export_hf
from onnxport.hf._xvector_pooling import masked_statistics
from tests.runtimes.runtimes import run_transformers_js

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.transformers

RUNNER = "run_transformers_js_classes.mjs"
# batches of clips (samples at 16 kHz), each padded by the extractor to its longest
BATCHES = ((3000, 5210, 1600), (7000,), (4000, 4000), (2000, 9000, 6000, 5000))
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, conv_dim=(16, 16, 16),
            conv_stride=(5, 4, 2), conv_kernel=(10, 8, 4), num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
            feat_extract_norm="layer", do_stable_layer_norm=True, num_labels=3, tdnn_dim=(16, 16, 16),
            tdnn_kernel=(5, 3, 1), tdnn_dilation=(1, 2, 1), xvector_output_dim=8)


def write_xvector(directory: str, family: str = "wavlm", **extra) -> torch.nn.Module:
    """A seeded x-vector checkpoint (``family``: wavlm or wav2vec2) with weights wider than the init's, and a
    feature extractor that gives an attention mask, saved in ``directory``."""
    torch.manual_seed(0)
    if family == "wavlm":
        config = transformers.WavLMConfig(**TINY, num_buckets=32, max_bucket_distance=64, **extra)
        config.architectures = ["WavLMForXVector"]
        model = transformers.WavLMForXVector(config).eval()
    else:
        config = transformers.Wav2Vec2Config(**TINY, **extra)
        config.architectures = ["Wav2Vec2ForXVector"]
        model = transformers.Wav2Vec2ForXVector(config).eval()
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() > 1:
                param.normal_(0, 0.3)
    model.save_pretrained(directory)
    transformers.Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=16000, padding_value=0.0, do_normalize=True,
                                          return_attention_mask=True).save_pretrained(directory)
    return model


def padded(lengths: tuple[int, ...], directory: str, seed: int) -> dict[str, np.ndarray]:
    """The extractor's padded batch of random clips of ``lengths``, and its mask (int64)."""
    rng = np.random.default_rng(seed)
    extractor = transformers.Wav2Vec2FeatureExtractor.from_pretrained(directory)
    batch = dict(extractor([rng.standard_normal(n).astype(np.float32) for n in lengths], sampling_rate=16000,
                           padding=True, return_tensors="np"))
    assert "attention_mask" in batch
    return {k: v.astype(np.int64) if k == "attention_mask" else v for k, v in batch.items()}


def eager(model: torch.nn.Module, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    with torch.no_grad():
        out = model(**{k: torch.from_numpy(v) for k, v in batch.items()})
    return {"logits": out.logits.numpy(), "embeddings": out.embeddings.numpy()}


def assert_close(got: np.ndarray, expected: np.ndarray) -> None:
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4 + 1e-3 * np.abs(expected).max())


def test_wavlm_xvector_equals_transformers_on_padded_batches(tmp_path) -> None:
    directory, out = str(tmp_path / "wavlm"), tmp_path / "out"
    model = write_xvector(directory)
    prog = export_hf(directory, "auto", out)
    assert "task auto: audio-xvector" in str(prog.report)
    assert "forward" not in vars(model)  # the pooled forward lived only through the capture
    assert [i.name for i in prog.model.graph.inputs] == ["input_values", "attention_mask"]
    for seed, lengths in enumerate(BATCHES[:2]):  # the others in the sweep's tests
        batch = padded(lengths, directory, seed)
        got = prog(**batch)
        for name, expected in eager(model, batch).items():
            assert_close(getattr(got, name).numpy(), expected)
    # the pooling reads a length as Python's slice [:length] does: one frame, all, past the end, from the end
    states = torch.randn(5, 6, 3)
    lengths = torch.tensor([1, 6, 9, -2, 3])
    mean, std = masked_statistics(states, lengths)
    for row, length in enumerate(lengths.tolist()):
        torch.testing.assert_close(mean[row], states[row, :length].mean(dim=0), equal_nan=True)
        torch.testing.assert_close(std[row], states[row, :length].std(dim=0), equal_nan=True)


@pytest.mark.sweep
def test_wav2vec2_xvector_of_weighted_layers_equals_transformers(tmp_path) -> None:
    """Wav2Vec2's head, its pooled states a learned sum of every layer's (use_weighted_layer_sum)."""
    directory, out = str(tmp_path / "wav2vec2"), tmp_path / "out"
    model = write_xvector(directory, "wav2vec2", use_weighted_layer_sum=True)
    prog = export_hf(directory, "audio-xvector", out)
    for seed, lengths in enumerate(BATCHES[::-1]):
        batch = padded(lengths, directory, seed)
        got = prog(**batch)
        for name, expected in eager(model, batch).items():
            assert_close(getattr(got, name).numpy(), expected)


@pytest.mark.sweep
def test_transformers_js_wavlm_xvector_equals_transformers(tmp_path) -> None:
    """The transformers.js folder, loaded by its WavLMForXVector class in Node and called on padded batches."""
    directory, out = str(tmp_path / "wavlm"), str(tmp_path / "out")
    model = write_xvector(directory)
    export_hf(directory, "audio-xvector", out, target="transformers.js", dtypes="fp32")
    batches = [padded(lengths, directory, seed) for seed, lengths in enumerate(BATCHES)]
    jobs = [{"folder": out, "class": "WavLMForXVector", "dtype": "fp32",
             "inputs": {"input_values": {"type": "float32", "dims": list(b["input_values"].shape),
                                         "data": b["input_values"].reshape(-1).tolist()},
                        "attention_mask": {"type": "int64", "dims": list(b["attention_mask"].shape),
                                           "data": b["attention_mask"].reshape(-1).tolist()}}}
            for b in batches]
    results = run_transformers_js(RUNNER, jobs, tmp_path, timeout=600)
    for batch, result in zip(batches, results, strict=True):
        assert "error" not in result, result.get("error")
        for name, expected in eager(model, batch).items():
            got = result["outputs"][name]
            assert_close(np.array(got["data"], dtype=np.float32).reshape(got["dims"]), expected)
