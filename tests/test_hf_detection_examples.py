"""export-hf's example inputs for zero-shot-object-detection (``onnxport.hf.examples.detection_queries_inputs``):
a detector that reads one text per image (Grounding DINO, its labels as phrases of that text) gets one text per
image, which its eager forward runs; OWL-ViT keeps a text per query. Tiny random models, nothing downloaded."""

from __future__ import annotations

import pytest
import torch

import onnxport
from onnxport.hf import examples
from onnxport.versions import torch_at_least

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.transformers


def tiny_grounding_dino() -> tuple[torch.nn.Module, object]:
    """A Grounding DINO of a 2-stage Swin and a 1-layer BERT (a vocabulary that holds BERT's "." id, 1012)."""
    config = transformers.GroundingDinoConfig(
        backbone_config=transformers.SwinConfig(embed_dim=8, depths=[1, 1], num_heads=[1, 1], window_size=2,
                                                image_size=32, out_features=["stage1", "stage2"]),
        text_config=transformers.BertConfig(vocab_size=1100, hidden_size=16, num_hidden_layers=1,
                                            num_attention_heads=2, intermediate_size=16),
        d_model=32, encoder_layers=1, decoder_layers=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
        encoder_attention_heads=2, decoder_attention_heads=2, num_queries=4, num_feature_levels=2,
        encoder_n_points=1, decoder_n_points=1, max_text_len=16, use_timm_backbone=False, backbone=None,
        use_pretrained_backbone=False)
    torch.manual_seed(0)
    return transformers.GroundingDinoForObjectDetection(config).eval(), config


def test_grounding_dino_gets_one_text_per_image() -> None:
    model, config = tiny_grounding_dino()
    inputs = examples.detection_queries_inputs(model, config)
    assert len(inputs["input_ids"]) == len(inputs["attention_mask"]) == len(inputs["pixel_values"]) == 1
    with torch.no_grad():
        out = model(**inputs)  # three texts for one image: "The size of tensor a (21) must match ... (7)"
    assert out.logits.shape[:2] == (1, config.num_queries)


def test_owlvit_keeps_a_text_per_query() -> None:
    config = transformers.OwlViTConfig(
        text_config={"vocab_size": 50, "hidden_size": 16, "intermediate_size": 16, "num_hidden_layers": 1,
                     "num_attention_heads": 2, "max_position_embeddings": 16},
        vision_config={"hidden_size": 16, "intermediate_size": 16, "num_hidden_layers": 1,
                       "num_attention_heads": 2, "image_size": 32, "patch_size": 16},
        projection_dim=16)
    model = transformers.OwlViTForObjectDetection(config).eval()
    inputs = examples.detection_queries_inputs(model, config)
    assert len(inputs["input_ids"]) == 3 and len(inputs["pixel_values"]) == 1


def test_grounding_dino_exports_images_of_any_size(tmp_path) -> None:
    """Grounding DINO turns each feature level's ``(height, width)`` into ``spatial_shapes`` with ``torch.as_tensor``
    and its reference points with ``torch.linspace`` (``onnxport.hf._level_shapes``): exported with a processor that
    keeps the aspect ratio, height and width stay dynamic (its one text per image, of any length), and onnxruntime
    equals eager PyTorch on an image of another size with another text."""
    import onnxruntime

    from onnxport.hf import export_hf

    directory, out = tmp_path / "grounding-dino", tmp_path / "out"
    model, _ = tiny_grounding_dino()
    model.save_pretrained(directory)
    transformers.GroundingDinoImageProcessor(size={"shortest_edge": 64, "longest_edge": 96}).save_pretrained(directory)
    if not torch_at_least("2.11"):  # torch 2.10 cannot make a masked_fill_ over these sizes functional (a guard on a
        # size it reads from data): refused before anything is written; a lead of its own
        with pytest.raises(onnxport.CaptureError, match="masked_fill_"):
            export_hf(directory, "zero-shot-object-detection", out, streaming=False)
        assert not (out / "model.onnx").exists()
        return
    prog = export_hf(directory, "zero-shot-object-detection", out, streaming=False)
    assert transformers.models.grounding_dino.modeling_grounding_dino.torch is torch  # put back after the capture
    shapes = {i.name: i.shape for i in prog.model.graph.inputs}
    assert [isinstance(n, int) for n in shapes["pixel_values"]] == [True, True, False, False]
    assert [isinstance(n, int) for n in shapes["input_ids"]] == [True, False]  # one text, of any length
    session = onnxruntime.InferenceSession(str(out / "model.onnx"))
    generator = torch.Generator().manual_seed(1)
    ids = torch.tensor([[101, 1000, 1012, 1001, 1002, 1012, 102]])  # "[CLS] a . b c . [SEP]"
    inputs = {"pixel_values": torch.randn(1, 3, 72, 56, generator=generator), "input_ids": ids,
              "attention_mask": torch.ones_like(ids), "pixel_mask": torch.ones(1, 72, 56, dtype=torch.long)}
    with torch.no_grad():
        expected = model(**inputs)
    names = [i.name for i in session.get_inputs()]
    got = dict(zip([o.name for o in session.get_outputs()],
                   session.run(None, {k: v.numpy() for k, v in inputs.items() if k in names})))
    for name in ("logits", "pred_boxes"):
        torch.testing.assert_close(torch.from_numpy(got[name]), getattr(expected, name), atol=1e-4, rtol=1e-4)
