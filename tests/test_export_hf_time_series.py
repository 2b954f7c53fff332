"""time-series-forecasting: PatchTST's and PatchTSMixer's prediction heads exported with a dynamic batch
(:mod:`onnxport.hf.forecasting`). Each case is a tiny random checkpoint (three channels, a context of 24 steps in
patches of 6, 5 steps forecast); its ``model.onnx`` equals transformers' ``prediction_outputs``, ``loc`` and
``scale`` (and PatchTSMixer's ``last_hidden_state``) on other series than the example's, at other batch sizes, in
onnxruntime within 1e-4 + 1e-3 x the largest magnitude, and (in the sweep) in transformers.js through its
PatchTSTForPrediction and PatchTSMixerForPrediction classes. ``--task auto`` picks the task from those two classes
alone (Informer's ``*ForPrediction`` is refused), and ``onnxport.hf.pipeline`` refuses the folder: transformers has
no pipeline for the task."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from onnxport.errors import InvalidInputError
from onnxport.hf import export_hf, pipeline
from onnxport.hf.tasks import pick_task
from tests.runtimes.runtimes import run_transformers_js

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.transformers

RUNNER = "run_transformers_js_classes.mjs"
SHAPE = dict(num_input_channels=3, context_length=24, patch_length=6, patch_stride=6, prediction_length=5)
BATCHES = (3, 1, 5)  # the example's is 2
OUTPUTS = {"patchtst": ("prediction_outputs", "loc", "scale"),
           "patchtsmixer": ("prediction_outputs", "last_hidden_state", "loc", "scale")}
CLASSES = {"patchtst": "PatchTSTForPrediction", "patchtsmixer": "PatchTSMixerForPrediction"}


def write_forecaster(directory: str, family: str) -> torch.nn.Module:
    """A seeded ``family`` (patchtst, patchtsmixer) prediction head with weights wider than the init's, saved."""
    torch.manual_seed(0)
    if family == "patchtst":
        config = transformers.PatchTSTConfig(**SHAPE, d_model=16, num_attention_heads=2, num_hidden_layers=2,
                                             ffn_dim=32)
    else:
        config = transformers.PatchTSMixerConfig(**SHAPE, d_model=16, num_layers=2)
    config.architectures = [CLASSES[family]]
    model = getattr(transformers, CLASSES[family])(config).eval()
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() > 1:
                param.normal_(0, 0.3)
    model.save_pretrained(directory)
    return model


def series(batch: int, seed: int) -> np.ndarray:
    """``batch`` random series, each channel off zero by its own offset and scale."""
    rng = np.random.default_rng(seed)
    shape = (batch, SHAPE["context_length"], SHAPE["num_input_channels"])
    offsets = rng.normal(0, 10, (batch, 1, shape[2]))
    widths = rng.uniform(0.5, 8, (batch, 1, shape[2]))
    return (rng.standard_normal(shape) * widths + offsets).astype(np.float32)


def eager(model: torch.nn.Module, family: str, values: np.ndarray) -> dict[str, np.ndarray]:
    with torch.no_grad():
        out = model(past_values=torch.from_numpy(values))
    return {name: getattr(out, name).numpy() for name in OUTPUTS[family]}


def assert_close(got: np.ndarray, expected: np.ndarray) -> None:
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4 + 1e-3 * np.abs(expected).max())


def check_onnxruntime(tmp_path, family: str) -> None:
    directory, out = str(tmp_path / family), tmp_path / "out"
    model = write_forecaster(directory, family)
    prog = export_hf(directory, "auto", out)
    assert "task auto: time-series-forecasting" in str(prog.report)
    assert [i.name for i in prog.model.graph.inputs] == ["past_values"]
    assert [o.name for o in prog.model.graph.outputs] == list(OUTPUTS[family])
    assert os.path.isfile(out / "model.onnx")
    for seed, batch in enumerate(BATCHES):
        values = series(batch, seed)
        got = prog(past_values=values)
        for name, expected in eager(model, family, values).items():
            assert_close(getattr(got, name).numpy(), expected)
    with pytest.raises(InvalidInputError, match="no pipeline") as caught:
        pipeline(str(out))
    assert "past_values" in caught.value.fix


def test_patchtst_forecast_equals_transformers_and_auto_picks_only_patch_models(tmp_path) -> None:
    check_onnxruntime(tmp_path, "patchtst")
    # Informer's head ends in ForPrediction too, but is not exported: auto does not pick it, a named task refuses it
    informer = tmp_path / "informer"
    transformers.InformerConfig(prediction_length=4, context_length=8, architectures=["InformerForPrediction"]) \
        .save_pretrained(informer)
    with pytest.raises(InvalidInputError, match="name no head"):
        pick_task(informer)
    with pytest.raises(InvalidInputError, match="patchtst, patchtsmixer models") as caught:
        export_hf(str(informer), "time-series-forecasting", tmp_path / "informer_out")
    assert "PatchTST" in caught.value.fix


@pytest.mark.sweep
def test_patchtsmixer_forecast_equals_transformers(tmp_path) -> None:
    check_onnxruntime(tmp_path, "patchtsmixer")


@pytest.mark.sweep
def test_patchtst_distribution_head_refused(tmp_path) -> None:
    directory = tmp_path / "nll"
    config = transformers.PatchTSTConfig(**SHAPE, d_model=16, num_attention_heads=2, loss="nll",
                                         architectures=["PatchTSTForPrediction"])
    config.save_pretrained(directory)
    with pytest.raises(InvalidInputError, match="student_t distribution"):
        export_hf(str(directory), "time-series-forecasting", tmp_path / "out")


@pytest.mark.sweep
def test_transformers_js_forecasters_equal_transformers(tmp_path) -> None:
    """Both folders, loaded by their transformers.js classes in one Node process and called on past_values."""
    models, jobs, cases = {}, [], []
    for family in CLASSES:
        directory, out = str(tmp_path / family), str(tmp_path / f"{family}_js")
        models[family] = write_forecaster(directory, family)
        export_hf(directory, "time-series-forecasting", out, target="transformers.js", dtypes="fp32")
        assert os.path.isfile(os.path.join(out, "onnx", "model.onnx"))
        for seed, batch in enumerate(BATCHES[:2]):
            values = series(batch, seed)
            cases.append((family, values))
            jobs.append({"folder": out, "class": CLASSES[family], "dtype": "fp32",
                         "inputs": {"past_values": {"type": "float32", "dims": list(values.shape),
                                                    "data": values.reshape(-1).tolist()}}})
    results = run_transformers_js(RUNNER, jobs, tmp_path, timeout=600)
    for (family, values), result in zip(cases, results, strict=True):
        assert "error" not in result, result.get("error")
        for name, expected in eager(models[family], family, values).items():
            got = result["outputs"][name]
            assert_close(np.array(got["data"], dtype=np.float32).reshape(got["dims"]), expected)
