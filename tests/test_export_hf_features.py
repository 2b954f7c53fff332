"""export-hf's ``feature-extraction`` of models that read no text, and ``image-segmentation`` by heads that give a
mask per query (DETR's panoptic head).

- The bare model of an image encoder (``ViTModel``) or an audio encoder (``Wav2Vec2Model``) is exported on the
  inputs its processor gives (a batch of images, a padded batch of clips with its mask), not on token ids: its
  ``last_hidden_state`` equals transformers' on the processor's own encoding of other images and clips.
- The bare model of texts and images apart (``CLIPModel``) is exported on both, as zero-shot image classification
  is: its embeddings and logits equal transformers' on other counts and lengths of texts and another image.
- ``DetrForSegmentation`` (transformers' ``AutoModelForUniversalSegmentation`` loads it, not
  ``AutoModelForSemanticSegmentation``) exports for image-segmentation with dynamic height and width, bounded by its
  processor's longest edge: its ``pred_masks`` and ``logits`` equal transformers' on a padded batch of two images
  of other sizes, and so do the segments transformers' image-segmentation pipeline makes of them
  (``onnxport.hf.pipeline``).
- ``CLIPSegForImageSegmentation``, which no auto class maps, loads by its head for image-segmentation: prompted by
  text, it exports on images with one prompt each (batch and prompt length dynamic), and its ``logits`` equal
  transformers' on more images and prompts of another length; a class of none of the task's heads is refused with
  a fix that says so.

Tiny random models, their processors written here; nothing downloaded."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch

from onnxport.errors import InvalidInputError
from onnxport.hf import export_hf, pipeline
from tests.test_export_hf_vision_tasks import images, write_detector

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.transformers


def _run(path: str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    feeds = {k: v.astype(np.int64) if v.dtype.kind == "i" else v for k, v in feeds.items() if k in names}
    values = session.run(None, feeds)
    return {o.name: v for o, v in zip(session.get_outputs(), values)}


def _close(got: np.ndarray, want: torch.Tensor) -> None:
    want = want.detach().numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=1e-4 + 1e-3 * float(np.abs(want).max()), rtol=0)


def test_image_and_audio_encoders_export_their_features(tmp_path) -> None:
    torch.manual_seed(0)
    vit = transformers.ViTModel(transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                                       intermediate_size=64, image_size=32, patch_size=8)).eval()
    vit.save_pretrained(tmp_path / "vit")
    processor = transformers.ViTImageProcessor(size={"height": 32, "width": 32})
    processor.save_pretrained(tmp_path / "vit")
    prog = export_hf(tmp_path / "vit", "feature-extraction", tmp_path / "vit-out")
    assert [i.name for i in prog.model.graph.inputs] == ["pixel_values"]
    pixels = processor(images((40, 50), (70, 30), (32, 32), seed=3), return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        want = vit(pixel_values=pixels).last_hidden_state
    _close(_run(str(tmp_path / "vit-out" / "model.onnx"), {"pixel_values": pixels.numpy()})["last_hidden_state"], want)

    audio = transformers.Wav2Vec2Model(transformers.Wav2Vec2Config(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, conv_dim=(16, 16),
        conv_stride=(5, 4), conv_kernel=(10, 8), num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=2,
        feat_extract_norm="layer", do_stable_layer_norm=True)).eval()
    audio.save_pretrained(tmp_path / "w2v")
    extractor = transformers.Wav2Vec2FeatureExtractor(return_attention_mask=True)
    extractor.save_pretrained(tmp_path / "w2v")
    prog = export_hf(tmp_path / "w2v", "feature-extraction", tmp_path / "w2v-out")
    assert [i.name for i in prog.model.graph.inputs] == ["input_values", "attention_mask"]
    rng = np.random.default_rng(1)
    clips = extractor([rng.standard_normal(n).astype(np.float32) for n in (2400, 1500, 900)], sampling_rate=16000,
                      padding=True, return_tensors="pt")
    with torch.no_grad():
        want = audio(**clips).last_hidden_state
    got = _run(str(tmp_path / "w2v-out" / "model.onnx"), {k: v.numpy() for k, v in clips.items()})
    _close(got["last_hidden_state"], want)


def test_a_model_of_texts_and_images_exports_its_features_of_both(tmp_path) -> None:
    torch.manual_seed(0)
    config = transformers.CLIPConfig(
        text_config={"vocab_size": 99, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                     "num_attention_heads": 2, "max_position_embeddings": 16},
        vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
                       "image_size": 32, "patch_size": 8},
        projection_dim=16)
    clip = transformers.CLIPModel(config).eval()
    clip.save_pretrained(tmp_path / "clip")
    transformers.CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(
        tmp_path / "clip")
    prog = export_hf(tmp_path / "clip", "feature-extraction", tmp_path / "clip-out")
    assert {i.name for i in prog.model.graph.inputs} == {"input_ids", "attention_mask", "pixel_values"}
    ids = torch.randint(3, 99, (3, 9), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids)
    mask[0, -4:] = 0
    pixels = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want = clip(input_ids=ids, attention_mask=mask, pixel_values=pixels)
    got = _run(str(tmp_path / "clip-out" / "model.onnx"),
               {"input_ids": ids.numpy(), "attention_mask": mask.numpy(), "pixel_values": pixels.numpy()})
    for name in ("text_embeds", "image_embeds", "logits_per_image"):
        _close(got[name], getattr(want, name))


@pytest.mark.sweep
def test_detr_panoptic_segmentation_exports_for_image_segmentation(tmp_path) -> None:
    _, processor = write_detector(str(tmp_path / "unused"), "detr")  # shortest edge 64, longest 96, padded
    backbone = transformers.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16, 16, 32], depths=[1, 1, 1, 1],
                                         layer_type="basic", out_features=["stage1", "stage2", "stage3", "stage4"])
    config = transformers.DetrConfig(  # its mask head reads three of the backbone's stages, in groups of 8 channels
        use_timm_backbone=False, backbone_config=backbone, use_pretrained_backbone=False, d_model=32,
        encoder_layers=1, decoder_layers=1, encoder_attention_heads=8, decoder_attention_heads=8,
        encoder_ffn_dim=32, decoder_ffn_dim=32, num_queries=5, num_labels=3)
    torch.manual_seed(0)
    model = transformers.DetrForSegmentation(config).eval()
    with torch.no_grad():
        for name, value in model.named_parameters():  # drawn anew: as initialised, every query finds one box
            value.normal_(0, 0.3) if value.dim() > 1 or name.endswith("bias") else value.normal_(1, 0.5)
    model.save_pretrained(tmp_path / "detr")
    processor.save_pretrained(tmp_path / "detr")
    prog = export_hf(tmp_path / "detr", "image-segmentation", tmp_path / "out")
    shape = {i.name: i.shape for i in prog.model.graph.inputs}["pixel_values"]
    assert [isinstance(n, int) for n in shape] == [False, True, False, False]
    batch = processor(images((40, 50), (70, 32), seed=5), return_tensors="pt")
    with torch.no_grad():
        want = model(**batch)
    got = _run(str(tmp_path / "out" / "model.onnx"), {k: v.numpy() for k, v in batch.items()})
    for name in ("logits", "pred_boxes", "pred_masks"):
        _close(got[name], getattr(want, name))
    # behind transformers' pipeline, whose panoptic post-processing reads the per-query outputs by name
    (pictures,) = images((40, 50), seed=5)
    onnx = pipeline(tmp_path / "out")(pictures, threshold=0.0)
    eager = transformers.pipeline("image-segmentation", model=model, image_processor=str(tmp_path / "detr"))(
        pictures, threshold=0.0)
    assert eager, "the eager pipeline found no segment: the comparison would hold nothing"
    for a, b in zip(onnx, eager, strict=True):
        assert (a["label"], a["score"]) == (b["label"], pytest.approx(b["score"], abs=1e-4))
        assert np.array_equal(np.asarray(a["mask"]), np.asarray(b["mask"]))


def test_a_text_prompted_segmenter_exports_for_image_segmentation(tmp_path) -> None:
    torch.manual_seed(0)
    config = transformers.CLIPSegConfig(
        text_config={"vocab_size": 99, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                     "num_attention_heads": 2, "max_position_embeddings": 16},
        vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 3, "num_attention_heads": 2,
                       "image_size": 32, "patch_size": 8},
        projection_dim=16, extract_layers=[1, 2], reduce_dim=16, decoder_num_attention_heads=2,
        decoder_intermediate_size=32, conditional_layer=0)
    model = transformers.CLIPSegForImageSegmentation(config).eval()
    model.save_pretrained(tmp_path / "clipseg")
    processor = transformers.ViTImageProcessor(size={"height": 32, "width": 32})
    processor.save_pretrained(tmp_path / "clipseg")
    prog = export_hf(tmp_path / "clipseg", "image-segmentation", tmp_path / "out")
    assert {i.name for i in prog.model.graph.inputs} == {"input_ids", "attention_mask", "pixel_values"}
    ids = torch.randint(3, 99, (3, 5), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids)
    mask[1, -2:] = 0
    pixels = processor(images((40, 50), (70, 30), (32, 32), seed=3), return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=mask, pixel_values=pixels).logits
    got = _run(str(tmp_path / "out" / "model.onnx"),
               {"input_ids": ids.numpy(), "attention_mask": mask.numpy(), "pixel_values": pixels.numpy()})
    assert got["logits"].shape == (3, 32, 32)
    _close(got["logits"], want)
    # a class of no head of the task: refused before loading, the fix naming the heads, not truncated weights
    config.architectures = ["CLIPSegModel"]
    config.save_pretrained(tmp_path / "clipseg")
    with pytest.raises(InvalidInputError, match="names no class of transformers whose name ends in a head of "
                       r"image-segmentation \(ForSemanticSegmentation, ForUniversalSegmentation, ForImageSegmentation"
                       r"\)") as refused:
        export_hf(tmp_path / "clipseg", "image-segmentation", tmp_path / "out2")
    assert "--task auto" in refused.value.fix
