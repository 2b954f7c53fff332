"""export-hf's image and audio tasks (zero-shot-image-classification, object-detection, image-segmentation,
depth-estimation, audio-classification): tiny random models with their processors written here, exported, and
the folder run in onnxruntime by ``onnxport.hf.pipeline`` against transformers' own pipeline on the PyTorch
model; and ``--task auto`` for their architectures. Images of one size (YOLOS, SegFormer, DPT) and of varying
size (DETR and RT-DETR with a padded batch and its pixel_mask, GLPN, Depth Anything: dynamic height and width).
Nothing downloaded."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

import onnxport
from onnxport.cli import main
from onnxport.hf import export_hf, pick_task, pipeline
from tests.test_export_hf_tasks import assert_same

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.transformers  # run on the second pinned transformers too (make test-transformers)

WORDS = "this is a photo of cat dog car tree house bird the".split()


def write_word_tokenizer(directory: str) -> None:
    """A lower-casing word-level tokenizer over WORDS (``<pad>``=0, ``<s>``=1, ``</s>``=2, ``<unk>``=3) that
    wraps each text in ``<s>`` ... ``</s>``, saved as transformers reads a fast tokenizer."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    vocab = {name: i for i, name in enumerate(["<pad>", "<s>", "</s>", "<unk>", ".", *WORDS])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 1),
                                                                                                  ("</s>", 2)])
    os.makedirs(directory, exist_ok=True)
    tokenizer.save(os.path.join(directory, "tokenizer.json"))
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
                   "pad_token": "<pad>", "unk_token": "<unk>", "model_max_length": 16}, f)


def images(*sizes: tuple[int, int], seed: int = 0) -> list[object]:
    from PIL import Image

    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)) for h, w in sizes]


def write_zero_shot(directory: str, family: str) -> torch.nn.Module:
    """A random CLIP or SigLIP model with the word-level tokenizer and its image processor (32x32 images)."""
    torch.manual_seed(0)
    text = dict(vocab_size=len(WORDS) + 5, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, image_size=32,
                  patch_size=8)
    if family == "clip":
        config = transformers.CLIPConfig(text_config={**text, "max_position_embeddings": 16}, vision_config=vision,
                                         projection_dim=16, initializer_factor=3.0)
        model = transformers.CLIPModel(config).eval()
        processor = transformers.CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    else:  # the pipeline pads SigLIP's texts to 64 tokens
        config = transformers.SiglipConfig(text_config={**text, "max_position_embeddings": 64}, vision_config=vision,
                                           initializer_factor=3.0)
        model = transformers.SiglipModel(config).eval()
        processor = transformers.SiglipImageProcessor(size={"height": 32, "width": 32})
    model.save_pretrained(directory)
    write_word_tokenizer(directory)
    processor.save_pretrained(directory)
    return model


def task_of(folder: os.PathLike[str]) -> str:
    import onnx

    props = onnx.load(os.path.join(folder, "model.onnx"), load_external_data=False).metadata_props
    return {p.key: p.value for p in props}["onnxport.hf.task"]


def assert_same_segments(onnx: object, eager: object) -> None:
    """Two pictures through both segmentation pipelines (the ONNX one in a batch of two): the same labels, more
    than one each, and identical masks of the picture's size, with no scores (semantic segmentation)."""
    pictures = images((40, 50), (32, 70))
    got, expected = onnx(pictures, batch_size=2), eager(pictures)
    assert [[s["label"] for s in r] for r in got] == [[s["label"] for s in r] for r in expected]
    assert all(len(r) > 1 for r in got)
    for row, want in zip(got, expected):
        for segment, wanted in zip(row, want):
            assert segment["score"] is None and wanted["score"] is None
            assert segment["mask"].size == wanted["mask"].size == row[0]["mask"].size
            np.testing.assert_array_equal(np.array(segment["mask"]), np.array(wanted["mask"]))


def exported_image_model(model: torch.nn.Module, processor: object, directory: str, out: os.PathLike[str],
                          task: str) -> tuple[object, object, object]:
    """``model`` and its image ``processor`` saved in ``directory`` and exported with ``--task auto`` (which must
    pick ``task``) into ``out``, streamed (the loaded default is tested elsewhere): the program, onnxport's pipeline of the folder and transformers' pipeline of the
    PyTorch model."""
    model.save_pretrained(directory)
    processor.save_pretrained(directory)
    assert pick_task(directory).task == task
    prog = export_hf(directory, "auto", out, streaming=True)  # compared with transformers' pipeline by the caller
    assert task_of(out) == task
    return prog, pipeline(out), transformers.pipeline(task, model=model, image_processor=directory)


@pytest.mark.parametrize("family", ["clip", "siglip"])
def test_zero_shot_image_classification_equals_transformers_pipeline(family, tmp_path) -> None:
    directory, out = str(tmp_path / family), tmp_path / "out"
    model = write_zero_shot(directory, family)
    assert pick_task(directory).task == "zero-shot-image-classification"
    prog = export_hf(directory, "auto", out)
    assert [i.name for i in prog.model.graph.inputs] == ["input_ids", "attention_mask", "pixel_values"]
    assert [o.name for o in prog.model.graph.outputs][:4] == ["logits_per_image", "logits_per_text", "text_embeds",
                                                              "image_embeds"]
    assert {"tokenizer.json", "preprocessor_config.json", "config.json"} <= set(os.listdir(out))
    assert task_of(out) == "zero-shot-image-classification"
    onnx = pipeline(out)
    eager = transformers.pipeline("zero-shot-image-classification", model=model, tokenizer=directory,
                                  image_processor=directory)
    pictures = images((40, 50), (32, 70))
    labels = ["cat", "dog", "a big house", "car"]
    got = onnx(pictures, candidate_labels=labels)
    assert_same(got, eager(pictures, candidate_labels=labels))
    assert len({r[0]["label"] for r in got}) > 1 or got[0][0]["score"] != got[1][0]["score"]
    assert_same(onnx(pictures[0], candidate_labels=labels[:2], hypothesis_template="the {}"),
                eager(pictures[0], candidate_labels=labels[:2], hypothesis_template="the {}"))
    # Texts and images batched apart, each of another count than the example's, texts of another length.
    tokens = onnx.tokenizer(["a photo of a cat", "dog", "the big tree", "car", "bird ."], padding=True,
                            return_tensors="pt")
    pixels = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model(**tokens, pixel_values=pixels)
    outputs = onnx.model(**tokens, pixel_values=pixels)
    for name in ("logits_per_image", "logits_per_text", "text_embeds", "image_embeds"):
        np.testing.assert_allclose(outputs[name].numpy(), expected[name].numpy(), atol=1e-4, rtol=1e-4)
    assert outputs.logits_per_image.shape == (3, 5)
    single = onnx.tokenizer(["a photo of a dog"], return_tensors="pt")["input_ids"]  # no mask: as the model takes it
    with torch.no_grad():
        expected = model(input_ids=single, pixel_values=pixels).logits_per_image
    np.testing.assert_allclose(onnx.model(input_ids=single, pixel_values=pixels).logits_per_image.numpy(),
                               expected.numpy(), atol=1e-4, rtol=1e-4)


def test_zero_shot_image_classification_loaded_is_verified_and_needs_its_tokenizer(tmp_path) -> None:
    directory, out = str(tmp_path / "clip"), tmp_path / "out"
    write_zero_shot(directory, "clip")
    prog = export_hf(directory, "zero-shot-image-classification", out, streaming=False)
    assert prog.report.verification.ok
    os.remove(out / "tokenizer.json")
    os.remove(out / "tokenizer_config.json")
    with pytest.raises(onnxport.InvalidInputError, match="has no tokenizer") as info:
        pipeline(out)
    assert "export_hf copies" in info.value.fix


def test_object_detection_equals_transformers_pipeline(tmp_path) -> None:
    directory, out = str(tmp_path / "yolos"), tmp_path / "out"
    torch.manual_seed(0)
    labels = {0: "cat", 1: "dog", 2: "car"}
    config = transformers.YolosConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                      intermediate_size=64, image_size=[32, 48], patch_size=8, num_detection_tokens=6,
                                      num_labels=3, id2label=labels, label2id={v: k for k, v in labels.items()},
                                      initializer_range=0.3)
    model = transformers.YolosForObjectDetection(config).eval()
    with torch.no_grad():  # its tokens and positions start at zero: each detection token would find the same box
        for name, value in model.named_parameters():
            if name.endswith(("cls_token", "detection_tokens", "position_embeddings")):
                value.normal_()
    processor = transformers.YolosImageProcessor(size={"height": 32, "width": 48})
    prog, onnx, eager = exported_image_model(model, processor, directory, out, "object-detection")
    assert [i.name for i in prog.model.graph.inputs] == ["pixel_values"]
    assert [o.name for o in prog.model.graph.outputs][:2] == ["logits", "pred_boxes"]
    pictures = images((40, 50), (32, 70), (64, 48))
    got = onnx(pictures, threshold=0.9)
    assert_same(got, eager(pictures, threshold=0.9))
    assert 0 < sum(map(len, got)) < 6 * len(pictures)  # some boxes kept, some not
    assert_same(onnx(pictures, threshold=0.5, batch_size=3), eager(pictures, threshold=0.5))
    # The processor gives a pixel_mask the model does not take: ones are dropped, padding is refused.
    pixels = torch.zeros(1, 3, 32, 48)
    mask = torch.ones(1, 32, 48, dtype=torch.int64)
    mask[:, :, 40:] = 0
    with pytest.raises(onnxport.InvalidInputError, match="padded the images") as info:
        onnx.model(pixel_values=pixels, pixel_mask=mask)
    assert "one size" in info.value.fix
    assert onnx.model(pixel_values=pixels, pixel_mask=torch.ones_like(mask)).pred_boxes.shape == (1, 6, 4)
    with pytest.raises(onnxport.InvalidInputError, match=r"takes pixel_values of shape \[\*, 3, 32, 48\], not") as info:
        onnx.model(pixel_values=torch.zeros(2, 3, 48, 48))
    assert "image_size" in info.value.fix


DETECTION_LABELS = {0: "cat", 1: "dog", 2: "car"}


def write_detector(directory: str, family: str) -> tuple[torch.nn.Module, object]:
    """A random DETR (a transformers ResNet backbone, not timm's) or RT-DETR, one layer each, 5 queries, and its
    image processor: shortest edge 64, longest 96, a padded batch with its pixel_mask. Their weights are drawn
    anew: as initialised, every query finds the same box."""
    torch.manual_seed(0)
    labels = dict(num_labels=3, id2label=DETECTION_LABELS, label2id={v: k for k, v in DETECTION_LABELS.items()})
    layers = dict(d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                  decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, num_queries=5, **labels)
    resnet = dict(embedding_size=8, hidden_sizes=[8, 16, 16, 32], depths=[1, 1, 1, 1], layer_type="basic")
    size = {"shortest_edge": 64, "longest_edge": 96}
    if family == "detr":
        backbone = transformers.ResNetConfig(**resnet, out_features=["stage4"])
        config = transformers.DetrConfig(use_timm_backbone=False, backbone_config=backbone,
                                         use_pretrained_backbone=False, **layers)
        model = transformers.DetrForObjectDetection(config)
        processor = transformers.DetrImageProcessor(size=size)
    else:  # its feature pyramid takes sides that are multiples of 32
        backbone = transformers.RTDetrResNetConfig(**resnet, out_features=["stage2", "stage3", "stage4"])
        config = transformers.RTDetrConfig(backbone_config=backbone, encoder_in_channels=[16, 16, 32],
                                           decoder_in_channels=[32, 32, 32], encoder_hidden_dim=32, **layers)
        model = transformers.RTDetrForObjectDetection(config)
        processor = transformers.RTDetrImageProcessor(size=size, do_pad=True)
    torch.manual_seed(0)
    with torch.no_grad():
        for name, value in model.named_parameters():
            if value.dim() > 1 or name.endswith("bias"):
                value.normal_(0, 0.3)
            else:  # the norms' scales
                value.normal_(1, 0.5)
    return model.eval(), processor


# RT-DETR reads its sizes as Python numbers (len(), int()): only strict export keeps them dynamic, at ~1 min.
@pytest.mark.parametrize("family", ["detr", pytest.param("rt_detr", marks=pytest.mark.slow)])
def test_object_detection_of_varying_image_sizes_equals_transformers_pipeline(family, tmp_path) -> None:
    directory, out = str(tmp_path / family), tmp_path / "out"
    model, processor = write_detector(directory, family)
    prog, onnx, eager = exported_image_model(model, processor, directory, out, "object-detection")
    # The processor sizes each image by its aspect ratio: height and width are dynamic, the padding masked.
    inputs = {i.name: i.shape for i in prog.model.graph.inputs}
    assert list(inputs) == ["pixel_values", "pixel_mask"]
    assert [isinstance(n, int) for n in inputs["pixel_values"]] == [False, True, False, False]
    assert not any(isinstance(n, int) for n in inputs["pixel_mask"])
    sides = [(40, 50), (70, 32), (64, 48)] if family == "detr" else [(32, 48), (48, 32), (48, 48)]
    pictures = images(*sides)
    thresholds = (0.2, 0.28) if family == "detr" else (0.7, 0.8)  # DETR's softmax has a no-object class
    kept = []
    for threshold in thresholds:
        got = onnx(pictures, threshold=threshold)
        assert_same(got, eager(pictures, threshold=threshold))
        assert_same(onnx(pictures[1], threshold=threshold), eager(pictures[1], threshold=threshold))
        kept.append(sum(map(len, got)))
        if threshold == thresholds[0]:
            assert len({box["label"] for r in got for box in r}) > 1
    assert 5 * len(pictures) > kept[0] > kept[1] > 0, kept
    # A batch of two images of different sizes, padded (transformers' pipeline batches one size only).
    batch = processor(pictures[:2], return_tensors="pt")
    assert batch["pixel_values"].shape[-2:] != processor(pictures[0], return_tensors="pt")["pixel_values"].shape[-2:]
    assert not bool(batch["pixel_mask"].all())
    with torch.no_grad():
        expected = model(**batch)
    outputs = onnx.model(**batch)
    for name in ("logits", "pred_boxes"):
        np.testing.assert_allclose(outputs[name].numpy(), expected[name].numpy(), atol=1e-4, rtol=0)
    sizes = [(picture.height, picture.width) for picture in pictures[:2]]
    for threshold in thresholds:
        got, wanted = ([{k: v.tolist() for k, v in r.items()} for r in processor.post_process_object_detection(
            o, threshold=threshold, target_sizes=sizes)] for o in (outputs, expected))
        assert_same(got, wanted)
        assert threshold != thresholds[0] or sum(len(r["scores"]) for r in got) > 0
    single = processor(pictures[0], return_tensors="pt")["pixel_values"]  # no pixel_mask: every pixel counts
    with torch.no_grad():
        expected = model(pixel_values=single)
    np.testing.assert_allclose(onnx.model(pixel_values=single).pred_boxes.numpy(), expected.pred_boxes.numpy(),
                               atol=1e-4, rtol=0)


def test_image_segmentation_equals_transformers_pipeline(tmp_path) -> None:
    directory, out = str(tmp_path / "segformer"), tmp_path / "out"
    torch.manual_seed(0)
    labels = {0: "sky", 1: "road", 2: "tree"}
    config = transformers.SegformerConfig(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32],
                                          patch_sizes=[7, 3], strides=[4, 2], num_attention_heads=[1, 2],
                                          mlp_ratios=[2, 2], decoder_hidden_size=32, image_size=32, num_labels=3,
                                          id2label=labels, label2id={v: k for k, v in labels.items()},
                                          initializer_range=0.3)
    model = transformers.SegformerForSemanticSegmentation(config).eval()
    processor = transformers.SegformerImageProcessor(size={"height": 32, "width": 32})
    prog, onnx, eager = exported_image_model(model, processor, directory, out, "image-segmentation")
    assert [o.name for o in prog.model.graph.outputs] == ["logits"]
    assert_same_segments(onnx, eager)


def test_depth_estimation_equals_transformers_pipeline(tmp_path) -> None:
    directory, out = str(tmp_path / "dpt"), tmp_path / "out"
    torch.manual_seed(0)
    config = transformers.DPTConfig(hidden_size=32, num_hidden_layers=4, num_attention_heads=4, intermediate_size=64,
                                    image_size=32, patch_size=8, backbone_out_indices=[0, 1, 2, 3],
                                    neck_hidden_sizes=[8, 16, 16, 32], fusion_hidden_size=16, head_in_index=-1)
    model = transformers.DPTForDepthEstimation(config).eval()
    processor = transformers.DPTImageProcessor(size={"height": 32, "width": 32})
    prog, onnx, eager = exported_image_model(model, processor, directory, out, "depth-estimation")
    assert [o.name for o in prog.model.graph.outputs] == ["predicted_depth"]
    pictures = images((40, 50), (32, 70))
    got, expected = onnx(pictures, batch_size=2), eager(pictures)
    for result, wanted, picture in zip(got, expected, pictures):
        depth = wanted["predicted_depth"].numpy()
        assert depth.shape == (picture.height, picture.width) and np.ptp(depth) > 0
        np.testing.assert_allclose(result["predicted_depth"].numpy(), depth, atol=1e-4 * np.abs(depth).max(), rtol=0)
        assert result["depth"].size == wanted["depth"].size
        gray = np.asarray(result["depth"], np.int16) - np.asarray(wanted["depth"], np.int16)
        assert np.abs(gray).max() <= 1  # the 8-bit picture of the depth: rounding apart at most


def write_depth_model(directory: str, family: str) -> tuple[torch.nn.Module, object]:
    """A random GLPN (its processor rounds each side down to a multiple of 32) or Depth Anything (a Dinov2
    backbone; its processor keeps the aspect ratio, sides multiples of 14): images of varying size."""
    torch.manual_seed(0)
    if family == "glpn":
        config = transformers.GLPNConfig(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[8, 16],
                                         patch_sizes=[7, 3], strides=[4, 2], num_attention_heads=[1, 1],
                                         mlp_ratios=[2, 2], decoder_hidden_size=16, initializer_range=0.3)
        return transformers.GLPNForDepthEstimation(config).eval(), transformers.GLPNImageProcessor(size_divisor=32)
    backbone = transformers.Dinov2Config(hidden_size=16, num_hidden_layers=4, num_attention_heads=2,
                                         intermediate_size=32, patch_size=14, image_size=28, out_indices=[1, 2, 3, 4],
                                         reshape_hidden_states=False)
    config = transformers.DepthAnythingConfig(backbone_config=backbone, patch_size=14, reassemble_hidden_size=16,
                                              neck_hidden_sizes=[8, 8, 16, 16], fusion_hidden_size=8,
                                              head_hidden_size=8, initializer_range=0.3)
    processor = transformers.DPTImageProcessor(size={"height": 42, "width": 42}, keep_aspect_ratio=True,
                                               ensure_multiple_of=14, do_pad=False)
    return transformers.DepthAnythingForDepthEstimation(config).eval(), processor


# Depth Anything's head reads its output size with int(): only strict export keeps it dynamic (~15 s).
@pytest.mark.parametrize("family", [pytest.param("glpn", marks=pytest.mark.sweep),
                                    pytest.param("depth_anything", marks=pytest.mark.slow)])
def test_depth_estimation_of_varying_image_sizes_equals_transformers_pipeline(family, tmp_path) -> None:
    directory, out = str(tmp_path / family), tmp_path / "out"
    model, processor = write_depth_model(directory, family)
    prog, onnx, eager = exported_image_model(model, processor, directory, out, "depth-estimation")
    shape = prog.model.graph.inputs[0].shape
    assert [i.name for i in prog.model.graph.inputs] == ["pixel_values"]
    assert [isinstance(n, int) for n in shape] == [False, True, False, False]  # height and width dynamic
    pictures = images((70, 100), (100, 64), (40, 50))
    sizes = {tuple(processor(p, return_tensors="pt")["pixel_values"].shape[-2:]) for p in pictures}
    assert len(sizes) > 1, sizes
    for result, wanted, picture in zip(onnx(pictures), eager(pictures), pictures):
        depth = wanted["predicted_depth"].numpy()
        assert depth.shape == (picture.height, picture.width) and np.ptp(depth) > 0
        np.testing.assert_allclose(result["predicted_depth"].numpy(), depth, atol=1e-4 * np.abs(depth).max(), rtol=0)
        gray = np.asarray(result["depth"], np.int16) - np.asarray(wanted["depth"], np.int16)
        assert np.abs(gray).max() <= 1


def test_dpt_semantic_segmentation_equals_transformers_pipeline(tmp_path) -> None:
    directory, out = str(tmp_path / "dpt"), tmp_path / "out"
    torch.manual_seed(0)
    labels = {0: "sky", 1: "road", 2: "tree"}
    config = transformers.DPTConfig(hidden_size=32, num_hidden_layers=4, num_attention_heads=4, intermediate_size=64,
                                    image_size=32, patch_size=8, backbone_out_indices=[0, 1, 2, 3],
                                    neck_hidden_sizes=[8, 16, 16, 32], fusion_hidden_size=16, head_in_index=-1,
                                    use_auxiliary_head=False, num_labels=3, id2label=labels,
                                    label2id={v: k for k, v in labels.items()}, initializer_range=0.3)
    model = transformers.DPTForSemanticSegmentation(config).eval()
    processor = transformers.DPTImageProcessor(size={"height": 32, "width": 32})
    prog, onnx, eager = exported_image_model(model, processor, directory, out, "image-segmentation")
    assert [o.name for o in prog.model.graph.outputs] == ["logits"]
    assert [isinstance(n, int) for n in prog.model.graph.inputs[0].shape] == [False, True, True, True]  # one size
    assert_same_segments(onnx, eager)


AUDIO_LABELS = {0: "speech", 1: "music", 2: "noise", 3: "silence"}


def write_wav2vec2(directory: str, norm: str) -> torch.nn.Module:
    """A random Wav2Vec2ForSequenceClassification and its feature extractor (an attention mask where its
    convolutions are layer-normalised, as the Hub's models have it)."""
    torch.manual_seed(0)
    config = transformers.Wav2Vec2Config(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, conv_dim=(16, 16, 16),
        conv_stride=(5, 4, 2), conv_kernel=(10, 8, 4), num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
        feat_extract_norm=norm, do_stable_layer_norm=norm == "layer", classifier_proj_size=16, num_labels=4,
        id2label=AUDIO_LABELS, label2id={v: k for k, v in AUDIO_LABELS.items()}, initializer_range=0.3)
    model = transformers.Wav2Vec2ForSequenceClassification(config).eval()
    model.save_pretrained(directory)
    transformers.Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=16000, padding_value=0.0, do_normalize=True,
                                          return_attention_mask=norm == "layer").save_pretrained(directory)
    return model


def test_hubert_audio_classification_equals_transformers_pipeline(tmp_path) -> None:
    directory, out = str(tmp_path / "hubert"), tmp_path / "out"
    torch.manual_seed(0)
    config = transformers.HubertConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64, conv_dim=(16, 16, 16),
        conv_stride=(5, 4, 2), conv_kernel=(10, 8, 4), num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
        classifier_proj_size=16, num_labels=4, id2label=AUDIO_LABELS, label2id={v: k for k, v in AUDIO_LABELS.items()},
        initializer_range=0.3)
    model = transformers.HubertForSequenceClassification(config).eval()
    model.save_pretrained(directory)
    transformers.Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=16000, padding_value=0.0, do_normalize=True,
                                          return_attention_mask=False).save_pretrained(directory)
    assert pick_task(directory).task == "audio-classification"
    prog = export_hf(directory, "auto", out)
    assert [i.name for i in prog.model.graph.inputs] == ["input_values"]
    onnx = pipeline(out, top_k=None)
    extractor = transformers.AutoFeatureExtractor.from_pretrained(directory)
    eager = transformers.pipeline("audio-classification", model=model, feature_extractor=extractor, top_k=None)
    rng = np.random.default_rng(0)
    clips = [rng.standard_normal(n).astype(np.float32) for n in (3000, 5210)]
    got = onnx(clips)
    assert_same(got, eager(clips))
    assert_same(onnx(clips, batch_size=2), eager(clips, batch_size=2))


@pytest.mark.parametrize("norm", ["layer", "group"])
def test_audio_classification_equals_transformers_pipeline(norm, tmp_path) -> None:
    directory, out = str(tmp_path / "wav2vec2"), tmp_path / "out"
    model = write_wav2vec2(directory, norm)
    assert pick_task(directory).task == "audio-classification"
    prog = export_hf(directory, "auto", out)
    assert [i.name for i in prog.model.graph.inputs] == ["input_values", *(["attention_mask"] if norm == "layer"
                                                                           else [])]
    assert "preprocessor_config.json" in os.listdir(out)
    onnx = pipeline(out, top_k=None)
    extractor = transformers.AutoFeatureExtractor.from_pretrained(directory)
    eager = transformers.pipeline("audio-classification", model=model, feature_extractor=extractor, top_k=None)
    rng = np.random.default_rng(0)
    clips = [rng.standard_normal(n).astype(np.float32) for n in (3000, 5210, 1600)]  # none the example's length
    got = onnx(clips)
    assert_same(got, eager(clips))
    assert len({r[0]["label"] for r in got}) > 1
    assert_same(onnx(clips, batch_size=3), eager(clips, batch_size=3))  # one padded batch
    assert_same(onnx(clips[0], top_k=2), eager(clips[0], top_k=2))


def _frames(clips: list[np.ndarray], extractor, model) -> tuple[dict[str, np.ndarray], np.ndarray]:
    batch = dict(extractor(clips, sampling_rate=16000, padding=True, return_tensors="np"))
    batch = {k: v.astype(np.int64) if k == "attention_mask" else v for k, v in batch.items()}
    with torch.no_grad():
        return batch, model(**{k: torch.from_numpy(v) for k, v in batch.items()}).logits.numpy()


def test_audio_frame_classification_matches_eager_on_padded_batches(tmp_path) -> None:
    """Wav2Vec2ForAudioFrameClassification (a label per frame, speaker diarization's): the feature extractor's
    padded batch and mask, at lengths and batch sizes other than the example's."""
    directory, out = str(tmp_path / "frames"), tmp_path / "out"
    torch.manual_seed(0)
    config = transformers.Wav2Vec2Config(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, conv_dim=(16, 16, 16),
        conv_stride=(5, 4, 2), conv_kernel=(10, 8, 4), num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
        feat_extract_norm="layer", do_stable_layer_norm=True, num_labels=3, initializer_range=0.3)
    config.architectures = ["Wav2Vec2ForAudioFrameClassification"]
    model = transformers.Wav2Vec2ForAudioFrameClassification(config).eval()
    model.save_pretrained(directory)
    extractor = transformers.Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=16000, padding_value=0.0,
                                                      do_normalize=True, return_attention_mask=True)
    extractor.save_pretrained(directory)
    assert pick_task(directory).task == "audio-frame-classification"
    prog = export_hf(directory, "auto", out)
    assert [i.name for i in prog.model.graph.inputs] == ["input_values", "attention_mask"]
    rng = np.random.default_rng(1)
    for lengths in ((3000, 5210, 1600), (7000,)):
        batch, expected = _frames([rng.standard_normal(n).astype(np.float32) for n in lengths], extractor, model)
        np.testing.assert_allclose(prog(**batch).logits.numpy(), expected, atol=1e-4, rtol=1e-3)
    with pytest.raises(onnxport.InvalidInputError, match="no pipeline runs a model exported for audio-frame"):
        pipeline(out)


def test_audio_spectrogram_transformer_takes_its_extractors_frames(tmp_path) -> None:
    """AST classifies log-mel frames its feature extractor pads to one length (its positions are learned for it):
    the example is the extractor's, only the batch dynamic."""
    directory, out = str(tmp_path / "ast"), tmp_path / "out"
    torch.manual_seed(0)
    config = transformers.ASTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                    max_length=64, num_mel_bins=32, frequency_stride=10, time_stride=10,
                                    num_labels=4, id2label=AUDIO_LABELS,
                                    label2id={v: k for k, v in AUDIO_LABELS.items()})
    model = transformers.ASTForAudioClassification(config).eval()
    model.save_pretrained(directory)
    extractor = transformers.ASTFeatureExtractor(num_mel_bins=32, max_length=64)
    extractor.save_pretrained(directory)
    prog = export_hf(directory, "auto", out)
    assert [d if isinstance(d, int) else "dynamic" for d in prog.model.graph.inputs[0].shape] == ["dynamic", 64, 32]
    rng = np.random.default_rng(2)
    batch, expected = _frames([rng.standard_normal(n).astype(np.float32) for n in (3000, 9000, 500)], extractor, model)
    np.testing.assert_allclose(prog(**batch).logits.numpy(), expected, atol=1e-4, rtol=1e-3)
    onnx = pipeline(out, top_k=None)
    eager = transformers.pipeline("audio-classification", model=model, feature_extractor=extractor, top_k=None)
    clip = rng.standard_normal(4000).astype(np.float32)
    assert_same(onnx(clip), eager(clip))


def test_cli_exports_audio_classification(tmp_path, capsys) -> None:
    directory, out = str(tmp_path / "wav2vec2"), tmp_path / "out"
    write_wav2vec2(directory, "group")
    assert main(["export-hf", directory, "--task", "auto", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "task auto: audio-classification (config.json's architectures: Wav2Vec2ForSequenceClassification)" in printed
    assert task_of(out) == "audio-classification"


def test_auto_picks_the_image_and_audio_tasks(tmp_path) -> None:
    expected = {
        "CLIPModel": (transformers.CLIPConfig(), "zero-shot-image-classification"),
        "SiglipModel": (transformers.SiglipConfig(), "zero-shot-image-classification"),
        "YolosForObjectDetection": (transformers.YolosConfig(), "object-detection"),
        "DetrForObjectDetection": (transformers.DetrConfig(use_timm_backbone=False), "object-detection"),
        "RTDetrForObjectDetection": (transformers.RTDetrConfig(), "object-detection"),
        "SegformerForSemanticSegmentation": (transformers.SegformerConfig(), "image-segmentation"),
        "DPTForDepthEstimation": (transformers.DPTConfig(), "depth-estimation"),
        "GLPNForDepthEstimation": (transformers.GLPNConfig(), "depth-estimation"),
        "Wav2Vec2ForSequenceClassification": (transformers.Wav2Vec2Config(), "audio-classification"),
        "HubertForSequenceClassification": (transformers.HubertConfig(), "audio-classification"),
        "WavLMForXVector": (transformers.WavLMConfig(), "audio-xvector"),
        "BertForSequenceClassification": (transformers.BertConfig(), "text-classification"),
    }
    for architecture, (config, task) in expected.items():
        config.architectures = [architecture]
        directory = str(tmp_path / architecture)
        config.save_pretrained(directory)
        picked = pick_task(directory)
        assert (picked.task, architecture in picked.why) == (task, True), architecture


def test_image_size_the_config_does_not_give_is_refused(tmp_path) -> None:
    directory = tmp_path / "segformer"
    config = transformers.SegformerConfig(num_encoder_blocks=1, depths=[1], sr_ratios=[1], hidden_sizes=[8],
                                          patch_sizes=[3], strides=[2], num_attention_heads=[1], mlp_ratios=[2],
                                          decoder_hidden_size=8, num_labels=2)
    transformers.SegformerForSemanticSegmentation(config).save_pretrained(directory)
    data = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**data, "image_size": [0, 32]}))
    with pytest.raises(onnxport.InvalidInputError, match=r"image_size \[0, 32\] is not a size in pixels"):
        export_hf(directory, "image-segmentation", tmp_path / "out")
    assert not os.path.exists(tmp_path / "out")


def write_swin2sr(directory: str) -> torch.nn.Module:
    """A Swin2SR (super-resolution by 2) and its image processor, which pads an image to a multiple of 4."""
    torch.manual_seed(0)
    config = transformers.Swin2SRConfig(image_size=16, embed_dim=16, depths=[1], num_heads=[2], window_size=4,
                                        upscale=2, mlp_ratio=2.0)
    model = transformers.Swin2SRForImageSuperResolution(config).eval()
    model.save_pretrained(directory)
    transformers.Swin2SRImageProcessor(pad_size=4).save_pretrained(directory)
    return model


@pytest.mark.sweep  # a minute: torch's reasoning on windows padded at every height and width
def test_image_to_image_of_varying_sizes_equals_transformers(tmp_path) -> None:
    from onnxport.hf.image_to_image import ImageToImagePipeline

    directory = str(tmp_path / "swin2sr")
    model = write_swin2sr(directory)
    program = export_hf(directory, "auto", tmp_path / "out")
    assert "task auto: image-to-image" in str(program.report)
    eager = ImageToImagePipeline(model, transformers.AutoImageProcessor.from_pretrained(directory))
    onnx = pipeline(tmp_path / "out")
    for image in images((20, 28), (13, 9), (33, 40)):  # each padded to its own multiple of 4, then doubled
        got, expected = np.asarray(onnx(image)), np.asarray(eager(image))
        assert got.shape == expected.shape and got.shape[:2] >= (2 * image.height, 2 * image.width)
        assert np.abs(got.astype(int) - expected.astype(int)).max() <= 1


def write_owlvit(directory: str, initializer_factor: float = 3.0) -> torch.nn.Module:
    """A random OWL-ViT (open-vocabulary detection: text queries of an image) with the word-level tokenizer and its
    image processor (32x32 images: 16 boxes)."""
    torch.manual_seed(0)
    text = dict(vocab_size=len(WORDS) + 5, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, max_position_embeddings=16, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, image_size=32,
                  patch_size=8)
    config = transformers.OwlViTConfig(text_config=text, vision_config=vision, projection_dim=32,
                                       initializer_factor=initializer_factor)
    model = transformers.OwlViTForObjectDetection(config).eval()
    model.save_pretrained(directory)
    write_word_tokenizer(directory)
    transformers.OwlViTImageProcessor(size={"height": 32, "width": 32}, crop_size={"height": 32, "width": 32}
                                      ).save_pretrained(directory)
    return model


def test_zero_shot_object_detection_equals_transformers_pipeline(tmp_path) -> None:
    directory, out = str(tmp_path / "owlvit"), tmp_path / "out"
    model = write_owlvit(directory)
    program = export_hf(directory, "auto", out)
    assert "task auto: zero-shot-object-detection" in str(program.report)
    onnx = pipeline(out)
    eager = transformers.pipeline("zero-shot-object-detection", model=model, tokenizer=directory,
                                  image_processor=directory)
    labels = ["cat", "a big dog", "car", "house"]  # more queries than the example's, one longer
    for picture in images((40, 50), (32, 70)):
        got, expected = onnx(picture, candidate_labels=labels, threshold=0.0), eager(picture, candidate_labels=labels,
                                                                                     threshold=0.0)
        assert len(got) == len(expected) > len(labels)
        assert_same(got, expected)


def tiny_depth_pro() -> torch.nn.Module:
    vit = dict(model_type="dinov2", hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16,
               patch_size=4, image_size=8)
    config = transformers.DepthProConfig(
        patch_size=8, fusion_hidden_size=8, use_fov_model=False, intermediate_hook_ids=[0],
        intermediate_feature_dims=[8], scaled_images_ratios=[0.25, 0.5, 1],
        scaled_images_overlap_ratios=[0.0, 0.5, 0.25], scaled_images_feature_dims=[8, 8, 8], image_model_config=vit,
        patch_model_config=vit, fov_model_config=vit)
    torch.manual_seed(0)
    return transformers.DepthProForDepthEstimation(config).eval()


def test_depth_pro_of_a_dynamic_batch_exports_and_matches_eager_at_another_batch() -> None:
    # DepthPro counts the patches of each scale with len() of a tensor whose first dim holds the batch: captured
    # as t.shape[0] (onnxport.capture.rewrite_len), so the batch stays dynamic.
    model = tiny_depth_pro()
    prog = onnxport.export(model, (torch.randn(2, 3, 32, 32),), dynamic_shapes=({0: torch.export.Dim.DYNAMIC},))
    assert prog.report.verification.ok
    assert [r.kind for r in prog.report.rewrites] == ["len"]
    pixels = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(prog(pixels).predicted_depth, model(pixels).predicted_depth, atol=1e-3, rtol=1e-3)


def test_depth_pro_without_the_rewrite_is_refused_at_its_line_in_transformers() -> None:
    with pytest.raises(onnxport.CaptureError, match="len\\(\\) of a tensor whose first dim is dynamic") as caught:
        onnxport.export(tiny_depth_pro(), (torch.randn(2, 3, 32, 32),),
                        dynamic_shapes=({0: torch.export.Dim.DYNAMIC},), rewrite_control_flow=False)
    assert caught.value.location.file.endswith("modeling_depth_pro.py")  # the model's file, in a library
    assert "len(i)" in caught.value.location.code


@pytest.mark.parametrize("family, step", [("glpn", 32), ("depth_anything", 14)])
def test_image_steps_are_the_multiples_the_processor_makes_every_side(family, step, tmp_path) -> None:
    """Verification breaks a model's remainder guards only at sides the processor makes (``sizes_in_steps``):
    GLPN's ``size_divisor``, Depth Anything's ``ensure_multiple_of``."""
    from onnxport.hf import examples

    directory = str(tmp_path / family)
    model, processor = write_depth_model(directory, family)
    model.save_pretrained(directory)
    processor.save_pretrained(directory)
    config = transformers.AutoConfig.from_pretrained(directory)
    steps = examples.image_steps(model, config)
    assert steps["pixel_values_dim2"] == steps["pixel_values_dim3"] == step
