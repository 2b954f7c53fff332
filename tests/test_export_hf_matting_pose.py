"""image-matting (VitMatte) and pose-estimation (VitPose) exported from a directory: each case is a tiny random
checkpoint (a VitDet or ViTPose backbone of two or three layers) saved with its image processor; its ``model.onnx``
equals transformers' ``alphas`` or ``heatmaps``, in onnxruntime, on what the processor gives for images other than
the example (VitMatte's padded to other multiples of 32 than the example's, in batches of other sizes; VitPose's
crops, cut beforehand, in batches of other sizes, with ``dataset_index`` for a backbone of two experts), within
1e-4 + 1e-3 x the largest magnitude; ``--task auto`` reads the task from the head's name; onnxport's pipeline refuses
the folders, saying how to run them. In the sweep, the transformers.js folders, loaded in Node by
VitMatteForImageMatting and VitPoseForPoseEstimation, give the same on the same tensors."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import onnxruntime as ort
import pytest
import torch

import onnxport
from onnxport.hf import export_hf
from onnxport.hf.tasks import pick_task
from tests.runtimes.runtimes import run_transformers_js

transformers = pytest.importorskip("transformers")
PIL = pytest.importorskip("PIL.Image")

pytestmark = pytest.mark.transformers

RUNNER = "run_transformers_js_classes.mjs"


def _matte() -> tuple[Any, Any]:
    backbone = transformers.VitDetConfig(
        hidden_size=32, num_hidden_layers=3, num_attention_heads=2, mlp_ratio=2, num_channels=4, image_size=64,
        pretrain_image_size=64, patch_size=16, window_block_indices=[0, 2], residual_block_indices=[1],
        use_relative_position_embeddings=True, window_size=4, out_features=["stage3"])
    config = transformers.VitMatteConfig(backbone_config=backbone, hidden_size=32, convstream_hidden_sizes=[8, 8, 16],
                                         fusion_hidden_sizes=[16, 16, 8, 8])
    return transformers.VitMatteForImageMatting(config), transformers.VitMatteImageProcessor()


def _pose(experts: int) -> Callable[[], tuple[Any, Any]]:
    def build() -> tuple[Any, Any]:
        backbone = transformers.VitPoseBackboneConfig(
            image_size=[64, 48], patch_size=[16, 16], hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
            mlp_ratio=2, num_experts=experts, part_features=8, out_indices=[2])
        config = transformers.VitPoseConfig(backbone_config=backbone, num_labels=5, use_simple_decoder=experts == 1)
        return (transformers.VitPoseForPoseEstimation(config),
                transformers.VitPoseImageProcessor(size={"height": 64, "width": 48}))
    return build


def _pictures(sizes: tuple[tuple[int, int], ...], seed: int, mode: str = "RGB") -> list[Any]:
    rng = np.random.default_rng(seed)
    if mode == "L":  # a trimap: background, unknown, foreground
        return [PIL.fromarray((rng.integers(0, 3, (h, w)) * 127.5).astype(np.uint8), "L") for h, w in sizes]
    return [PIL.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), "RGB") for h, w in sizes]


def _mattes(processor: Any, experts: int) -> list[dict[str, torch.Tensor]]:
    """Images and trimaps of other sizes than the example's 96 x 128 (two windows of 4 x 4 patches a side), padded to
    128 x 64, 96 x 160 and 64 x 64 (one window)."""
    batches = (((100, 45),), ((70, 150),) * 3, ((50, 60),) * 2)
    return [dict(processor(images=_pictures(sizes, seed), trimaps=_pictures(sizes, seed + 10, "L"),
                           return_tensors="pt")) for seed, sizes in enumerate(batches)]


def _crops(processor: Any, experts: int) -> list[dict[str, torch.Tensor]]:
    """Batches of one crop and of three, rescaled and normalised by the processor, each crop's dataset_index where the
    backbone has experts. The crops come cut to the processor's size (``do_affine_transform=False``): its affine crop
    of a box needs scipy, and gives the model the same kind of tensor."""
    size = (processor.size["height"], processor.size["width"])
    batches = []
    for seed, count in enumerate((1, 3)):
        pictures = _pictures((size,) * count, seed)
        inputs = dict(processor(pictures, boxes=[[[0.0, 0.0, size[1], size[0]]]] * count, do_affine_transform=False,
                                return_tensors="pt"))
        if experts > 1:
            inputs["dataset_index"] = torch.arange(count) % experts
        batches.append(inputs)
    return batches


class Case(NamedTuple):
    """A checkpoint: its model and processor, the task, the processor's batches, the output and the transformers.js
    class that loads it."""

    build: Callable[[], tuple[Any, Any]]
    task: str
    batches: Callable[[Any, int], list[dict[str, torch.Tensor]]]
    output: str
    js_class: str
    experts: int = 1


CASES = {
    "vitmatte": Case(_matte, "image-matting", _mattes, "alphas", "VitMatteForImageMatting"),
    "vitpose": Case(_pose(1), "pose-estimation", _crops, "heatmaps", "VitPoseForPoseEstimation"),
    "vitpose-experts": Case(_pose(2), "pose-estimation", _crops, "heatmaps", "VitPoseForPoseEstimation", experts=2),
}


def _write(directory: str, case: Case) -> tuple[Any, list[dict[str, torch.Tensor]]]:
    """The case's seeded checkpoint (weights and norms wider than the init's, for outputs far from constant) and
    processor saved in ``directory``; the model and the processor's batches."""
    torch.manual_seed(0)
    model, processor = case.build()
    model.eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() > 1 and "pos" not in name:  # a layer's weights, by its fan-in
                param.normal_(0, 1.5 / param[0].numel() ** 0.5)
            else:  # a norm's scales about 1; biases, position embeddings about 0
                param.normal_(1.0 if param.dim() == 1 and name.endswith("weight") else 0.0, 0.3)
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.normal_(0, 0.1)
                module.running_var.uniform_(0.5, 1.5)
    model.save_pretrained(directory)
    processor.save_pretrained(directory)
    return model, case.batches(processor, case.experts)


def _expected(model: Any, inputs: dict[str, torch.Tensor], output: str) -> np.ndarray:
    with torch.no_grad():
        return getattr(model(**inputs), output).numpy()


def _assert_close(got: np.ndarray, expected: np.ndarray) -> float:
    assert got.shape == expected.shape
    error = float(np.abs(got - expected).max())
    assert error <= 1e-4 + 1e-3 * float(np.abs(expected).max()), error
    return error


def _check_onnxruntime(path: str, model: Any, batches: list[dict[str, torch.Tensor]], output: str) -> None:
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    assert [o.name for o in session.get_outputs()] == [output]
    names = [i.name for i in session.get_inputs()]
    for inputs in batches:
        assert sorted(names) == sorted(inputs)
        got = session.run(None, {name: inputs[name].numpy() for name in names})[0]
        _assert_close(got, _expected(model, inputs, output))


def test_pose_estimation_auto_equals_transformers_and_the_pipeline_refuses(tmp_path) -> None:
    """A VitPose folder exported with --task auto: the processor's batches of crops, of other sizes than the example's,
    give transformers' heatmaps; auto reads image-matting off a VitMatte's head too; the pipeline refuses them."""
    directory, out = str(tmp_path / "vitpose"), str(tmp_path / "out")
    model, batches = _write(directory, CASES["vitpose"])
    prog = export_hf(directory, "auto", out)
    assert "task auto: pose-estimation" in str(prog.report)
    _check_onnxruntime(os.path.join(out, "model.onnx"), model, batches, "heatmaps")
    with pytest.raises(onnxport.InvalidInputError, match="no pipeline") as refused:
        onnxport.hf.pipeline(out)
    assert "post_process_pose_estimation" in refused.value.fix
    matte = str(tmp_path / "vitmatte")
    _matte()[0].save_pretrained(matte)
    assert pick_task(matte).task == "image-matting"


@pytest.mark.sweep
@pytest.mark.parametrize("name", ["vitmatte", "vitpose-experts"])
def test_model_onnx_equals_transformers(tmp_path, name) -> None:
    """VitMatte's images of other sizes and batches (height, width and batch dynamic); VitPose+'s crops with each
    one's dataset_index (batch dynamic)."""
    case = CASES[name]
    directory, out = str(tmp_path / name), str(tmp_path / "out")
    model, batches = _write(directory, case)
    export_hf(directory, case.task, out)
    _check_onnxruntime(os.path.join(out, "model.onnx"), model, batches, case.output)


@pytest.mark.sweep
def test_the_matting_example_has_more_than_one_window_a_side() -> None:
    """VitMatte's example (for a backbone of windows of 14 patches of 16 pixels, as vitmatte-small's) is padded to 32
    and holds two windows a side, of which the graph keeps the count symbolic (a count of one torch.export fixes)."""
    from onnxport.hf.examples import TASKS

    backbone = transformers.VitDetConfig(num_channels=4, patch_size=16, window_size=14)
    config = transformers.VitMatteConfig(backbone_config=backbone)
    pixels = TASKS["image-matting"].inputs(None, config)["pixel_values"]
    assert tuple(pixels.shape) == (2, 4, 256, 288)
    assert set(pixels[:, -1].unique().tolist()) <= {0.0, 0.5, 1.0}


def _tensor(value: torch.Tensor) -> dict[str, Any]:
    kind = "float32" if value.is_floating_point() else "int64"
    return {"type": kind, "dims": list(value.shape), "data": value.reshape(-1).tolist()}


@pytest.mark.sweep
def test_transformers_js_classes_equal_transformers(tmp_path) -> None:
    """Each case's transformers.js folder, loaded by its class in Node (one process) and called on the processor's
    batches."""
    jobs, expected = [], []
    for name, case in CASES.items():
        directory, out = str(tmp_path / name), str(tmp_path / f"{name}-js")
        model, batches = _write(directory, case)
        export_hf(directory, case.task, out, target="transformers.js", dtypes="fp32")
        assert os.listdir(os.path.join(out, "onnx")) == ["model.onnx"]
        for inputs in batches:
            jobs.append({"folder": out, "class": case.js_class, "dtype": "fp32",
                         "inputs": {k: _tensor(v) for k, v in inputs.items()}})
            expected.append((case.output, _expected(model, inputs, case.output)))
    results = run_transformers_js(RUNNER, jobs, tmp_path, timeout=600)
    for result, (output, want) in zip(results, expected, strict=True):
        assert "error" not in result, result.get("error")
        got = result["outputs"][output]
        _assert_close(np.array(got["data"], dtype=np.float32).reshape(got["dims"]), want)
