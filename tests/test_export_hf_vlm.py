"""export-hf's image-text-to-text: tiny random vision-language models with their processors (tests/vlm_dirs.py),
exported and generated from in onnxruntime by ``generate_vlm`` against transformers' ``generate`` on the PyTorch
model. Nothing downloaded."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
import torch

from onnxport.errors import InvalidInputError
from onnxport.hf import export_hf, pick_task
from onnxport.hf.multimodal import FILES as VLM_FILES
from onnxport.hf.multimodal import generate_vlm

transformers = pytest.importorskip("transformers")

from tests.vlm_dirs import (idefics3_inputs, images, internvl_inputs, pixtral_inputs, reference,  # noqa: E402
                            write_gemma3, write_idefics3, write_internvl, write_llava, write_mistral3,
                            write_florence2, write_paligemma)

pytestmark = pytest.mark.transformers  # run on the second pinned transformers too (make test-transformers)

@pytest.fixture(scope="module")
def llava(tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, str, str]:
    """The model, its directory, and the folder export-hf wrote for it with default arguments (streamed)."""
    directory = str(tmp_path_factory.mktemp("llava"))
    model = write_llava(directory)
    assert pick_task(directory).task == "image-text-to-text"
    out = str(tmp_path_factory.mktemp("llava_onnx"))
    export_hf(directory, "auto", out)
    return model, directory, out


def test_llava_folder_generates_as_transformers_on_a_padded_batch_of_images(llava):
    model, directory, out = llava
    assert all(os.path.isfile(os.path.join(out, name)) for name in (*VLM_FILES, "processor_config.json"))
    texts = ["user: <image> what is in this picture ? assistant:", "<image> describe it"]
    pictures = images((40, 48), (32, 32))
    expected = reference(model, directory, texts, pictures, 6)
    assert expected.shape[1] > 20  # two prompts of 16 image tokens each, one padded
    assert torch.equal(generate_vlm(out, texts, pictures, max_new_tokens=6), expected)


def test_llava_folder_generates_from_text_alone(llava):
    model, directory, out = llava
    texts = ["what is a cat ?"]
    assert torch.equal(generate_vlm(out, texts, max_new_tokens=5), reference(model, directory, texts, None, 5))


@pytest.fixture(scope="module")
def mistral3(tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, str, str]:
    """The model, its directory, and the folder export-hf wrote for it with default arguments (streamed)."""
    directory = str(tmp_path_factory.mktemp("mistral3"))
    model = write_mistral3(directory)
    out = str(tmp_path_factory.mktemp("mistral3_onnx"))
    export_hf(directory, "image-text-to-text", out)
    return model, directory, out


@pytest.mark.sweep
def test_mistral3_folder_generates_as_transformers_on_images_of_two_sizes(mistral3):
    model, directory, out = mistral3
    texts = ["user: [IMG] what is in this picture ? assistant:", "[IMG] describe it"]
    inputs = pixtral_inputs(directory, texts, images((40, 60), (32, 32)))
    assert inputs["image_sizes"].tolist() == [[48, 64], [32, 32]]  # one image at a time, each of its own size
    with torch.no_grad():
        expected = model.generate(**inputs, do_sample=False, max_new_tokens=6)
    assert torch.equal(generate_vlm(out, inputs=inputs, max_new_tokens=6), expected)


@pytest.mark.sweep
def test_mistral3_folder_generates_in_onnxruntime_genai_as_transformers(mistral3, tmp_path):
    """onnxruntime-genai loads the folder as it is: its own processor reads the image (genai_image_processor.json)
    and expands the prompt's [IMG], and its tokens and first scores are transformers' on the same image."""
    og = pytest.importorskip("onnxruntime_genai")
    from PIL import Image

    model, directory, out = mistral3
    (picture,) = images((48, 64))  # a size both processors keep: multiples of 16 within 64 a side
    picture.save(tmp_path / "image.png")
    prompt = "user: [IMG] what is in this picture ? assistant:"
    genai = og.Model(out)
    inputs = genai.create_multimodal_processor()(prompt, images=og.Images.open(str(tmp_path / "image.png")))
    params = og.GeneratorParams(genai)
    params.set_search_options(max_length=200, do_sample=False)
    generator = og.Generator(genai, params)
    generator.set_inputs(inputs)
    generator.generate_next_token()
    first_scores = np.array(generator.get_output("logits"))[0, -1]  # the decoder's output on the prompt
    for _ in range(5):
        generator.generate_next_token()
    tokens = [int(t) for t in generator.get_sequence(0)]

    expected_inputs = pixtral_inputs(directory, [prompt], [Image.open(tmp_path / "image.png")])
    with torch.no_grad():
        expected = model.generate(**expected_inputs, do_sample=False, max_new_tokens=6)[0].tolist()
        scores = model(**expected_inputs).logits[0, -1].numpy()
    assert tokens == expected
    np.testing.assert_allclose(first_scores, scores, atol=1e-4, rtol=1e-4)


@pytest.mark.sweep
def test_internvl_folder_from_the_command_line_generates_as_transformers_on_images_cut_into_tiles(tmp_path, capsys):
    from onnxport.cli import main

    directory, out = str(tmp_path / "internvl"), str(tmp_path / "onnx")
    model = write_internvl(directory)
    assert pick_task(directory).task == "image-text-to-text"
    assert main(["export-hf", directory, "--task", "auto", "-o", out]) == 0
    assert capsys.readouterr().out.count("verification (onnxruntime vs eager PyTorch): passed") == 3
    texts = ["user: <image> what is in this picture ? assistant:", "<image> describe it"]
    inputs = internvl_inputs(directory, texts, images((40, 80), (32, 32)))
    assert inputs["pixel_values"].shape[0] == 4  # 2 tiles and a thumbnail, then 1 tile
    with torch.no_grad():
        expected = model.generate(**inputs, do_sample=False, max_new_tokens=6)
    assert torch.equal(generate_vlm(out, inputs=inputs, max_new_tokens=6), expected)


def test_gemma3_folder_generates_as_transformers_with_image_tokens_attending_both_ways(tmp_path):
    """Gemma 3's image tokens see each other both ways in the prompt: which tokens are image tokens rides in a last
    column of the decoder's embeddings (1 in an image row, 0 in a token's), from which the decoder makes its
    token_type_ids, so a consumer that feeds embeddings alone runs it; the mask combining that with the sliding
    window is captured without vmap."""
    directory, out = str(tmp_path / "gemma3"), str(tmp_path / "onnx")
    model = write_gemma3(directory)
    export_hf(directory, "auto", out)
    decoder = onnx.load(os.path.join(out, "model.onnx"), load_external_data=False)
    inputs = {i.name: i for i in decoder.graph.input}
    assert "token_type_ids" not in inputs
    assert inputs["inputs_embeds"].type.tensor_type.shape.dim[2].dim_value == 32 + 1
    texts = ["user: <start_of_image> what is in this picture ? assistant:", "<start_of_image> describe it"]
    pictures = [[picture] for picture in images((40, 48), (32, 32))]
    expected = reference(model, directory, texts, pictures, 6)
    assert torch.equal(generate_vlm(out, texts, pictures, max_new_tokens=6), expected)


# SmolVLM (Idefics3's architecture, with an in-place write torch 2.10 cannot functionalize) in the sweep
@pytest.mark.parametrize("kind", ["idefics3", pytest.param("smolvlm", marks=pytest.mark.sweep)])
def test_idefics3_and_smolvlm_folders_generate_as_transformers_on_images_cut_into_tiles(kind, tmp_path):
    """Idefics3's processor cuts an image into tiles and a global view, padding a batch of prompts' images with
    empty tiles that the model drops (pixel_attention_mask marks their padding pixels)."""
    directory, out = str(tmp_path / kind), str(tmp_path / "onnx")
    model = write_idefics3(directory, kind)
    export_hf(directory, "auto", out)
    texts = ["user: <image> what is in this picture ? assistant:", "<image> describe it"]
    inputs = idefics3_inputs(directory, texts, [[picture] for picture in images((40, 64), (32, 32))])
    assert inputs["pixel_values"].shape[:2] == (2, 5)  # 4 tiles and a global view; 1 view padded with 4 empty ones
    with torch.no_grad():
        expected = model.generate(**inputs, do_sample=False, max_new_tokens=6)
    assert torch.equal(generate_vlm(out, inputs=inputs, max_new_tokens=6), expected)


@pytest.mark.sweep
def test_paligemma_folder_generates_as_transformers_with_its_prompt_attending_both_ways(tmp_path):
    """PaliGemma's prompt (its image tokens and text) attends both ways in the first step and its new tokens
    causally: the decoder tells the first step from its empty past, with no input of its own (so every consumer
    runs it). The tokens differ when the prompt attends causally: the test would see a causal decoder."""
    directory, out = str(tmp_path / "paligemma"), str(tmp_path / "onnx")
    model = write_paligemma(directory)
    export_hf(directory, "auto", out)
    texts, pictures = ["<image>what is in this picture ?", "<image>describe it"], images((40, 48), (32, 64))
    expected = reference(model, directory, texts, pictures, 6)
    assert torch.equal(generate_vlm(out, texts, pictures, max_new_tokens=6), expected)
    batch = transformers.AutoProcessor.from_pretrained(directory)(text=texts, images=pictures, return_tensors="pt",
                                                                  padding=True)
    with torch.no_grad():
        causal = model.generate(**{**batch, "token_type_ids": torch.ones_like(batch["input_ids"])}, do_sample=False,
                                max_new_tokens=6)
    assert not torch.equal(causal, expected)


@pytest.mark.sweep  # 23 s: Florence-2 runs in the transformers.js matrix (a sweep too) and the census
def test_florence2_folder_generates_as_transformers_through_its_encoder_and_decoders(tmp_path):
    """Florence-2's language model is an encoder-decoder: the prompt, its image rows merged in, goes through the
    encoder once (encoder_model.onnx on inputs_embeds), and its decoders generate from the start token."""
    directory, out = str(tmp_path / "florence2"), str(tmp_path / "onnx")
    model = write_florence2(directory)
    progs = export_hf(directory, "auto", out)
    assert progs.encoder is not None and progs.decoder_with_past is not None
    assert sorted(f for f in os.listdir(out) if f.endswith(".onnx")) == [
        "decoder_model.onnx", "decoder_with_past_model.onnx", "embedding.onnx", "encoder_model.onnx", "vision.onnx"]
    texts, pictures = ["what is in this picture ?", "describe it"], images((40, 48), (32, 64))
    expected = reference(model, directory, texts, pictures, 6)
    assert expected[0, 1] != expected[1, 1]  # the prompts part: the encoder's states reach the decoder
    assert torch.equal(generate_vlm(out, texts, pictures, max_new_tokens=6), expected)


@pytest.mark.sweep
def test_lighton_ocr_folder_generates_as_transformers_on_images_of_two_sizes(tmp_path):
    """LightOnOCR's Pixtral tower reads each image at its own size: its image encoder takes one image at a time."""
    from tests.vlm_dirs import lighton_inputs, write_lighton_ocr

    directory, out = str(tmp_path / "lighton_ocr"), str(tmp_path / "onnx")
    model = write_lighton_ocr(directory)
    export_hf(directory, "image-text-to-text", out)
    inputs = lighton_inputs(directory, ["user: [IMG] what is in this picture ?", "[IMG] describe it"],
                            images((40, 60), (32, 32)))
    with torch.no_grad():
        expected = model.generate(**inputs, do_sample=False, max_new_tokens=6)
    assert torch.equal(generate_vlm(out, inputs=inputs, max_new_tokens=6), expected)


@pytest.mark.sweep
@pytest.mark.parametrize("both_ways", [False, True])
def test_gemma4_folder_generates_as_transformers_with_its_per_layer_embeddings(both_ways, tmp_path):
    """Gemma 4's decoder takes per-layer embeddings of the token ids (an image token's: the pad token's), which
    ride as more columns of its inputs_embeds; with its vision tokens attending both ways, the image flag column
    too (its mm_token_type_ids)."""
    from tests.vlm_dirs import gemma4_inputs, write_gemma4

    directory, out = str(tmp_path / "gemma4"), str(tmp_path / "onnx")
    model = write_gemma4(directory, both_ways)
    export_hf(directory, "image-text-to-text", out)
    texts = ["user: <|image|> what is in this picture ?", "<|image|><|image|> describe it : a dog"]
    inputs = gemma4_inputs(model, directory, texts, [[p] for p in images((40, 48), (32, 64), (56, 40))])
    with torch.no_grad():
        expected = model.generate(**inputs, do_sample=False, max_new_tokens=6)
    assert torch.equal(generate_vlm(out, inputs=inputs, max_new_tokens=6), expected)
    decoder = onnx.load(os.path.join(out, "model.onnx"), load_external_data=False)
    width = {i.name: i for i in decoder.graph.input}["inputs_embeds"].type.tensor_type.shape.dim[2].dim_value
    assert width == 32 + 2 * 8 + int(both_ways)  # hidden, per-layer embeddings of its 2 layers, the image flag


@pytest.mark.parametrize(("kind", "architecture"), [("Git", "GitForCausalLM"),
                                                    ("Kosmos2", "Kosmos2ForConditionalGeneration")])
def test_a_vision_language_model_not_known_to_split_right_is_refused_before_anything_is_written(tmp_path, kind,
                                                                                                  architecture):
    """Refused with what stands in the way, before anything else of its config is read (Kosmos-2's names no image
    token)."""
    config = getattr(transformers, f"{kind}Config")()
    config.architectures = [architecture]
    config.save_pretrained(tmp_path / "model")
    with pytest.raises(InvalidInputError, match=f"{config.model_type} models .* otherwise than as rows at the image"):
        export_hf(tmp_path / "model", "image-text-to-text", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_generate_vlm_refuses_a_folder_without_the_three_models(tmp_path):
    (tmp_path / "model.onnx").write_bytes(b"")
    with pytest.raises(InvalidInputError, match="vision.onnx, embedding.onnx"):
        generate_vlm(tmp_path, "what ?")


def test_an_image_processor_saved_for_another_size_of_model_is_refused_before_anything_is_written(tmp_path):
    """A folder whose image processor gives 64-pixel images to a tower of 32-pixel ones: onnxport's error, naming the
    example's inputs, not the tower's own RuntimeError."""
    directory = str(tmp_path / "llava")
    write_llava(directory)
    os.unlink(os.path.join(directory, "processor_config.json"))  # the image processor's settings nest there
    transformers.CLIPImageProcessorPil(size={"shortest_edge": 64}, crop_size={"height": 64, "width": 64}
                                       ).save_pretrained(directory)
    with pytest.raises(InvalidInputError, match=r"image path fails .*\(pixel_values \[\d+, 3, 64, 64\]\)"):
        export_hf(directory, "image-text-to-text", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_processors_floating_outputs_reach_the_model_in_its_dtype():
    """Llama 4's torchvision processor gives bfloat16 pixels: the examples give them in the model's dtype; ids stay."""
    from onnxport.hf.multimodal.examples import _in_dtype

    model = torch.nn.Linear(2, 2)
    assert _in_dtype(torch.ones(2, dtype=torch.bfloat16), model).dtype == torch.float32
    assert _in_dtype(torch.ones(2, dtype=torch.bfloat16), model.half()).dtype == torch.float16
    assert _in_dtype(torch.ones(2, dtype=torch.int64), model).dtype == torch.int64
