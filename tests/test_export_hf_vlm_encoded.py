"""export-hf's image-text-to-text for the encoder-decoders whose encoder reads the images themselves (TrOCR's and
Donut's VisionEncoderDecoder, Pix2Struct, PP-FormulaNet; BLIP's captioner, whose text decoder cross-attends its vision
model as theirs does: ``multimodal.components.images_encoded``): a seq2seq folder
(``encoder_model``, ``decoder_model``, ``decoder_with_past_model``) whose encoder takes the processor's image inputs.
Each generates transformers' tokens in onnxport's runner on one image and on a batch of two of other sizes, from the
start token and, where the model takes one, from a task prompt."""

from __future__ import annotations

import os

import pytest
import torch

from onnxport.hf import export_hf
from onnxport.hf.multimodal import generate_vlm
from onnxport.hf.multimodal.runner import ENCODED_FILES

transformers = pytest.importorskip("transformers")

from tests.vlm_dirs import (  # noqa: E402
    images,
    write_blip,
    write_pix2struct,
    write_pp_formulanet,
    write_vision_encoder_decoder,
)

pytestmark = [pytest.mark.transformers, pytest.mark.sweep]


def _generates_as_transformers(model: torch.nn.Module, out: str, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    with torch.no_grad():
        expected = model.generate(**inputs, do_sample=False, max_new_tokens=6)
    got = generate_vlm(out, inputs={k: v.numpy() for k, v in inputs.items()}, max_new_tokens=6)
    assert expected.shape[1] > 2  # tokens past the start
    assert torch.equal(got, expected)
    return got


def _exported(directory: str, out: str) -> None:
    export_hf(directory, "image-text-to-text", out)
    assert sorted(n for n in os.listdir(out) if n.endswith(".onnx")) == sorted(ENCODED_FILES)


def test_vision_encoder_decoder_folder_generates_from_the_images_and_from_a_task_prompt(tmp_path):
    directory, out = str(tmp_path / "ved"), str(tmp_path / "onnx")
    model = write_vision_encoder_decoder(directory)
    _exported(directory, out)
    processor = transformers.ViTImageProcessorPil.from_pretrained(directory)
    for sizes in ([(40, 48)], [(56, 40), (32, 64)]):
        _generates_as_transformers(model, out, dict(processor(images(*sizes), return_tensors="pt")))
    pixels = processor(images((40, 48), (24, 64)), return_tensors="pt")["pixel_values"]
    prompt = torch.tensor([[1, 7, 9]] * 2)  # Donut's way: the decoder starts from a task prompt
    got = _generates_as_transformers(model, out, {"pixel_values": pixels, "decoder_input_ids": prompt})
    assert torch.equal(got[:, :3], prompt)


def test_pix2struct_folder_takes_its_patches_and_their_mask(tmp_path):
    directory, out = str(tmp_path / "pix2struct"), str(tmp_path / "onnx")
    model = write_pix2struct(directory)
    _exported(directory, out)
    processor = transformers.Pix2StructImageProcessorPil.from_pretrained(directory)
    for sizes in ([(40, 48)], [(56, 40), (16, 64)]):
        given = dict(processor(images(*sizes), return_tensors="pt"))
        if len(sizes) > 1:  # images of other sizes leave other counts of patches masked out
            assert len({int(m.sum()) for m in given["attention_mask"]}) == 2
        _generates_as_transformers(model, out, given)


def test_pp_formulanet_folder_reads_the_pooled_rows_of_its_tower(tmp_path):
    directory, out = str(tmp_path / "pp_formulanet"), str(tmp_path / "onnx")
    model = write_pp_formulanet(directory)
    _exported(directory, out)
    pixels = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    for batch in (pixels[:1], pixels):
        _generates_as_transformers(model, out, {"pixel_values": batch})


def test_blip_folder_captions_from_its_bos_and_from_a_prompt_to_its_sep(tmp_path):
    directory, out = str(tmp_path / "blip"), str(tmp_path / "onnx")
    model = write_blip(directory)
    _exported(directory, out)
    processor = transformers.BlipImageProcessorPil.from_pretrained(directory)
    for sizes in ([(40, 48)], [(56, 40), (32, 64)]):
        _generates_as_transformers(model, out, dict(processor(images(*sizes), return_tensors="pt")))
    pixels = processor(images((40, 48), (24, 64)), return_tensors="pt")["pixel_values"]
    prompt = torch.tensor([[1, 7, 9, 3]] * 2)  # "[CLS] a picture [SEP]" as its processor gives it
    with torch.no_grad():  # BLIP's generate starts from the prompt less its [SEP], [CLS] made its bos
        expected = model.generate(pixel_values=pixels, input_ids=prompt.clone(), do_sample=False, max_new_tokens=6)
    got = generate_vlm(out, inputs={"pixel_values": pixels.numpy(), "decoder_input_ids": prompt[:, :-1].numpy()},
                       max_new_tokens=6)
    assert expected.shape[1] > 3 and torch.equal(got, expected)


def test_blip_starts_from_its_text_configs_bos_as_its_generate_does():
    from onnxport.hf.seq2seq import decoder_start_token

    config = transformers.BlipConfig(text_config=dict(bos_token_id=30522, sep_token_id=102))
    assert decoder_start_token(transformers.GenerationConfig(bos_token_id=1), config) == 30522
