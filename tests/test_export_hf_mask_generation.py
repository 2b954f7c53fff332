"""export-hf's ``mask-generation``: SAM as ``vision_encoder`` and ``prompt_encoder_mask_decoder``
(``onnxport.hf.mask_generation``), run by ``onnxport.hf.pipeline`` behind transformers' mask-generation pipeline with
the scores, masks and boxes the PyTorch model gives there. The pipeline's last step (merging the crops' masks) needs
torchvision, which cannot be installed here: its steps up to it run. SAM 2's folder for transformers.js, its sessions
run in onnxruntime as the runner's model runs them (SAM 2's image processor needs torchvision: no pipeline). Tiny
random models, nothing downloaded."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from onnxport.errors import InvalidInputError
from onnxport.hf import export_hf, pick_task, pipeline
from onnxport.hf.mask_generation import PIECES, SamOnnxModel, embedding_names

transformers = pytest.importorskip("transformers")

from tests.document_dirs import write_sam, write_sam2  # noqa: E402
from tests.vlm_dirs import images  # noqa: E402

pytestmark = pytest.mark.transformers


@pytest.fixture(scope="module")
def sam(tmp_path_factory):
    root = tmp_path_factory.mktemp("sam")
    directory, out = str(root / "model"), str(root / "onnx")
    model = write_sam(directory)
    assert pick_task(directory).task == "mask-generation"
    export_hf(directory, "auto", out)
    return directory, model, out


def _masks(pipe: object, picture: object) -> list[dict]:
    """The pipeline's crops and point batches through the model, its masks filtered by nothing (a random model's
    scores are low)."""
    return [pipe._forward(inputs, pred_iou_thresh=-100.0, stability_score_thresh=0.0)
            for inputs in pipe.preprocess(picture, points_per_batch=16, points_per_crop=6)]


def test_sam_folder_gives_transformers_mask_generation_pipelines_masks(sam):
    directory, model, out = sam
    assert sorted(n for n in os.listdir(out) if n.endswith(".onnx")) == sorted(f"{p}.onnx" for p in PIECES)
    eager = transformers.pipeline("mask-generation", model=model,
                                  image_processor=transformers.AutoImageProcessor.from_pretrained(directory))
    exported = pipeline(out)
    assert isinstance(exported, transformers.MaskGenerationPipeline)
    for picture in images((48, 64), (64, 40)):
        expected, got = _masks(eager, picture), _masks(exported, picture)
        assert len(got) == len(expected) == 3  # 36 points in batches of 16
        for e, g in zip(expected, got, strict=True):
            np.testing.assert_allclose(g["iou_scores"].numpy(), e["iou_scores"].detach().numpy(), atol=1e-4)
            assert torch.equal(g["boxes"], e["boxes"]) and g["masks"] == e["masks"] and len(g["masks"]) > 0


def test_one_images_embeddings_serve_prompts_of_any_size(sam):
    directory, model, out = sam
    onnx_model = SamOnnxModel.of(out)
    pixels = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        embeddings = model.get_image_embeddings(pixels)
    np.testing.assert_allclose(onnx_model.get_image_embeddings(pixels).numpy(), embeddings.numpy(), atol=1e-4)
    for prompts, points in ((1, 1), (3, 4)):
        where = torch.rand(2, prompts, points, 2, generator=torch.Generator().manual_seed(prompts)) * 64
        labels = torch.randint(0, 2, (2, prompts, points), generator=torch.Generator().manual_seed(points))
        with torch.no_grad():
            expected = model(image_embeddings=embeddings, input_points=where, input_labels=labels)
        got = onnx_model(image_embeddings=embeddings, input_points=where, input_labels=labels)
        assert got.pred_masks.shape == (2, prompts, 3, 32, 32)
        np.testing.assert_allclose(got.pred_masks.numpy(), expected.pred_masks.numpy(), atol=1e-4)
        np.testing.assert_allclose(got.iou_scores.numpy(), expected.iou_scores.numpy(), atol=1e-4)
    with pytest.raises(InvalidInputError, match="input_boxes"):
        onnx_model(image_embeddings=embeddings, input_points=where, input_boxes=torch.zeros(2, 3, 4))


@pytest.fixture(scope="module")
def sam2(tmp_path_factory):
    root = tmp_path_factory.mktemp("sam2")
    directory, out = str(root / "model"), str(root / "onnx")
    model = write_sam2(directory)
    assert pick_task(directory).task == "mask-generation"
    export_hf(directory, "mask-generation", out, target="transformers.js", dtypes=["fp32"])
    return model, out


@pytest.mark.sweep  # (the SAM 2 export: 25 s)
def test_sam2_folder_holds_the_sessions_transformers_js_runs(sam2):
    import onnx

    model, out = sam2
    names = ("image_embeddings.0", "image_embeddings.1", "image_embeddings.2")
    assert embedding_names(model.config) == names
    encoder, decoder = (onnx.load(os.path.join(out, "onnx", f"{p}.onnx"), load_external_data=False) for p in PIECES)
    assert [v.name for v in encoder.graph.input] == ["pixel_values"]
    assert [v.name for v in encoder.graph.output] == list(names)
    assert [v.name for v in decoder.graph.input] == [*names, "input_points", "input_labels"]
    assert [v.name for v in decoder.graph.output] == ["iou_scores", "pred_masks", "object_score_logits"]
    config = transformers.AutoConfig.from_pretrained(out)
    assert config.vision_config.num_feature_levels == len(names)  # what transformers.js counts them by


@pytest.mark.sweep  # (the SAM 2 export: 25 s)
def test_sam2_sessions_give_eager_masks_for_other_images_and_prompts(sam2):
    model, out = sam2
    config = transformers.AutoConfig.from_pretrained(out)
    onnx_model = SamOnnxModel.named("Sam2Model")(os.path.join(out, "onnx"), config)
    pixels = torch.randn(3, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        embeddings = model.get_image_embeddings(pixels)
    got = onnx_model.get_image_embeddings(pixels)
    assert len(got) == len(embeddings) == 3
    for g, e in zip(got, embeddings, strict=True):
        np.testing.assert_allclose(g.numpy(), e.numpy(), atol=1e-4)
    for prompts, points in ((1, 1), (4, 3)):
        where = torch.rand(3, prompts, points, 2, generator=torch.Generator().manual_seed(prompts)) * 64
        labels = torch.randint(-1, 2, (3, prompts, points), generator=torch.Generator().manual_seed(points))
        with torch.no_grad():
            expected = model(image_embeddings=embeddings, input_points=where, input_labels=labels)
        got = onnx_model(image_embeddings=embeddings, input_points=where, input_labels=labels)
        assert got.pred_masks.shape == (3, prompts, 3, 16, 16)
        for key in ("pred_masks", "iou_scores", "object_score_logits"):
            np.testing.assert_allclose(got[key].numpy(), expected[key].numpy(), atol=1e-4, rtol=1e-4)
    with torch.no_grad():
        expected = model(pixel_values=pixels[:1], input_points=where[:1])  # labels default to 1
    got = onnx_model(pixel_values=pixels[:1], input_points=where[:1])
    np.testing.assert_allclose(got.pred_masks.numpy(), expected.pred_masks.numpy(), atol=1e-4, rtol=1e-4)


def test_other_mask_generation_types_are_refused_before_loading(tmp_path):
    directory, out = str(tmp_path / "sam_hq"), str(tmp_path / "out")
    transformers.SamHQConfig().save_pretrained(directory)
    with pytest.raises(InvalidInputError, match="sam_hq models for mask-generation yet: its mask decoder"):
        export_hf(directory, "mask-generation", out)
    assert not os.path.exists(out)


def test_sam_is_exported_with_its_weights_loaded(sam, tmp_path):
    directory, _, _ = sam
    with pytest.raises(InvalidInputError, match="weights loaded"):
        export_hf(directory, "mask-generation", str(tmp_path / "out"), streaming=True)
