"""export-hf's image-text-to-text: tiny random LLaVA, Mistral 3, InternVL and Gemma 3 models with their processors written here,
exported as three models (vision, embedding, decoder), and generated from in onnxruntime by ``generate_vlm``
against transformers' ``generate`` on the PyTorch model. Nothing downloaded."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

from onnxport.errors import InvalidInputError
from onnxport.hf import export_hf, pick_task
from onnxport.hf.vlm import VLM_FILES, generate_vlm

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.transformers  # run on the second pinned transformers too (make test-transformers)

WORDS = "what is in this picture a cat dog the user assistant describe it".split()
SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]
PIXTRAL_TOKENS = ["[IMG]", "[IMG_BREAK]", "[IMG_END]"]  # an image's patches, the end of a row, the end of the image


def write_tokenizer(directory: str, image_tokens: tuple[str, ...] = ("<image>",)) -> dict[str, int]:
    """A byte-level BPE tokenizer (as transformers and onnxruntime-genai's tokenizer both read it) trained on
    WORDS, with ``image_tokens`` special tokens, padding on the left."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=[*SPECIALS, *image_tokens], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator([" ".join(WORDS) + " . : ?"] * 4, trainer)
    os.makedirs(directory, exist_ok=True)
    tokenizer.save(os.path.join(directory, "tokenizer.json"))
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
                   "pad_token": "<pad>", "unk_token": "<unk>", "padding_side": "left"}, f)
    return tokenizer.get_vocab()


def write_llava(directory: str) -> torch.nn.Module:
    """A random LLaVA (CLIP vision tower on 32x32 images in 8x8 patches, Llama text model) and its processor."""
    torch.manual_seed(0)
    vocab = write_tokenizer(directory)
    config = transformers.LlavaConfig(
        vision_config=dict(model_type="clip_vision_model", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, image_size=32, patch_size=8),
        text_config=dict(model_type="llama", vocab_size=len(vocab), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=128, bos_token_id=1, eos_token_id=2, pad_token_id=0),
        image_token_id=vocab["<image>"], vision_feature_layer=-2, vision_feature_select_strategy="default")
    model = transformers.LlavaForConditionalGeneration(config).eval()
    model.save_pretrained(directory)
    processor = transformers.LlavaProcessor(
        image_processor=transformers.CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}),
        tokenizer=transformers.AutoTokenizer.from_pretrained(directory), patch_size=8,
        vision_feature_select_strategy="default", num_additional_image_tokens=1, image_token="<image>")
    processor.save_pretrained(directory)
    return model


def write_mistral3(directory: str) -> torch.nn.Module:
    """A random Mistral 3 (Pixtral vision tower in 8x8 patches merged 2x2, Mistral text model) and its image
    processor (images of any size up to 64 pixels a side, in multiples of 16)."""
    torch.manual_seed(0)
    vocab = write_tokenizer(directory, tuple(PIXTRAL_TOKENS))
    config = transformers.Mistral3Config(
        vision_config=dict(model_type="pixtral", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, image_size=64, patch_size=8, head_dim=8),
        text_config=dict(model_type="mistral", vocab_size=len(vocab), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                         max_position_embeddings=256, bos_token_id=1, eos_token_id=2, pad_token_id=0),
        image_token_index=vocab["[IMG]"], spatial_merge_size=2, vision_feature_layer=-1)
    model = transformers.Mistral3ForConditionalGeneration(config).eval()
    model.save_pretrained(directory)
    transformers.PixtralImageProcessorPil(size={"longest_edge": 64}, patch_size=16).save_pretrained(directory)
    return model


def pixtral_inputs(directory: str, texts: list[str], pictures: list[object]) -> dict[str, torch.Tensor]:
    """What Pixtral's processor gives (it needs torchvision, which is not installed here): the images resized
    and padded, their sizes, and each prompt's ``[IMG]`` replaced by the image's rows of patches, each row ended
    by ``[IMG_BREAK]`` and the last by ``[IMG_END]``."""
    pixels = transformers.PixtralImageProcessorPil.from_pretrained(directory)(pictures, return_tensors="pt")
    prompts = []
    for text, (height, width) in zip(texts, pixels["image_sizes"].tolist()):
        rows = ["[IMG]" * (width // 16) for _ in range(height // 16)]
        prompts.append(text.replace("[IMG]", "[IMG_BREAK]".join(rows) + "[IMG_END]", 1))
    tokens = transformers.AutoTokenizer.from_pretrained(directory)(prompts, return_tensors="pt", padding=True)
    return {**tokens, **pixels}


def write_internvl(directory: str) -> torch.nn.Module:
    """A random InternVL (its vision tower on 32x32 tiles in 8x8 patches, pixel-shuffled to 4 tokens a tile;
    a Qwen2 text model) and its image processor (an image cut into up to 2 tiles and a thumbnail)."""
    torch.manual_seed(0)
    vocab = write_tokenizer(directory, ("<img>", "</img>", "<IMG_CONTEXT>"))
    config = transformers.InternVLConfig(
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                           image_size=[32, 32], patch_size=[8, 8]),
        text_config=dict(model_type="qwen2", vocab_size=len(vocab), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=256, bos_token_id=1, eos_token_id=2, pad_token_id=0),
        image_token_id=vocab["<IMG_CONTEXT>"], downsample_ratio=0.5, vision_feature_layer=-1,
        vision_feature_select_strategy="default")
    model = transformers.InternVLForConditionalGeneration(config).eval()
    model.save_pretrained(directory)
    transformers.GotOcr2ImageProcessorPil(size={"height": 32, "width": 32}, crop_to_patches=True, min_patches=1,
                                          max_patches=2).save_pretrained(directory)
    return model


def internvl_inputs(directory: str, texts: list[str], pictures: list[object]) -> dict[str, torch.Tensor]:
    """What InternVL's processor gives (it needs torchvision for its video processor): every tile of the
    images, and each prompt's ``<image>`` replaced by ``<img>``, 4 ``<IMG_CONTEXT>`` per tile, ``</img>``."""
    pixels = transformers.GotOcr2ImageProcessorPil.from_pretrained(directory)(pictures, return_tensors="pt")
    prompts = [text.replace("<image>", "<img>" + "<IMG_CONTEXT>" * (4 * int(tiles)) + "</img>", 1)
               for text, tiles in zip(texts, pixels["num_patches"])]
    tokens = transformers.AutoTokenizer.from_pretrained(directory)(prompts, return_tensors="pt", padding=True)
    return {**tokens, "pixel_values": pixels["pixel_values"]}


def write_gemma3(directory: str) -> torch.nn.Module:
    """A random Gemma 3 (SigLIP tower on 32x32 images in 4x4 patches pooled to 16 tokens; a Gemma 3 text model
    with a sliding window) and its processor, whose image tokens attend to each other both ways."""
    torch.manual_seed(0)
    vocab = write_tokenizer(directory, ("<start_of_image>", "<end_of_image>", "<image_soft_token>"))
    with open(os.path.join(directory, "tokenizer_config.json"), encoding="utf-8") as f:
        settings = json.load(f)
    settings["extra_special_tokens"] = {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>",
                                        "image_token": "<image_soft_token>"}
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(settings, f)
    config = transformers.Gemma3Config(
        text_config=dict(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=256,
                         sliding_window=16, bos_token_id=1, eos_token_id=2, pad_token_id=0),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                           image_size=32, patch_size=4),
        mm_tokens_per_image=16, image_token_index=vocab["<image_soft_token>"],
        boi_token_index=vocab["<start_of_image>"], eoi_token_index=vocab["<end_of_image>"])
    model = transformers.Gemma3ForConditionalGeneration(config).eval()
    model.save_pretrained(directory)
    transformers.Gemma3Processor(image_processor=transformers.Gemma3ImageProcessorPil(size={"height": 32, "width": 32}),
                                 tokenizer=transformers.AutoTokenizer.from_pretrained(directory),
                                 image_seq_length=16).save_pretrained(directory)
    return model


def images(*sizes: tuple[int, int]) -> list[object]:
    from PIL import Image

    rng = np.random.default_rng(0)
    return [Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)) for h, w in sizes]


def reference(model: torch.nn.Module, directory: str, texts: list[str], pictures: list[object] | None,
              new: int) -> torch.Tensor:
    processor = transformers.AutoProcessor.from_pretrained(directory)
    batch = processor(text=texts, images=pictures, return_tensors="pt", padding=True)
    with torch.no_grad():
        return model.generate(**batch, do_sample=False, max_new_tokens=new)


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


def test_mistral3_folder_generates_as_transformers_on_images_of_two_sizes(mistral3):
    model, directory, out = mistral3
    texts = ["user: [IMG] what is in this picture ? assistant:", "[IMG] describe it"]
    inputs = pixtral_inputs(directory, texts, images((40, 60), (32, 32)))
    assert inputs["image_sizes"].tolist() == [[48, 64], [32, 32]]  # one image at a time, each of its own size
    with torch.no_grad():
        expected = model.generate(**inputs, do_sample=False, max_new_tokens=6)
    assert torch.equal(generate_vlm(out, inputs=inputs, max_new_tokens=6), expected)


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


def test_internvl_folder_generates_as_transformers_on_images_cut_into_tiles(tmp_path):
    directory, out = str(tmp_path / "internvl"), str(tmp_path / "onnx")
    model = write_internvl(directory)
    assert pick_task(directory).task == "image-text-to-text"
    export_hf(directory, "auto", out)
    texts = ["user: <image> what is in this picture ? assistant:", "<image> describe it"]
    inputs = internvl_inputs(directory, texts, images((40, 80), (32, 32)))
    assert inputs["pixel_values"].shape[0] == 4  # 2 tiles and a thumbnail, then 1 tile
    with torch.no_grad():
        expected = model.generate(**inputs, do_sample=False, max_new_tokens=6)
    assert torch.equal(generate_vlm(out, inputs=inputs, max_new_tokens=6), expected)


def test_gemma3_folder_generates_as_transformers_with_image_tokens_attending_both_ways(tmp_path):
    """Gemma 3's image tokens see each other both ways in the prompt: its decoder takes token_type_ids over the
    whole sequence (so onnxruntime-genai, which feeds embeddings alone, gets no genai_config.json for it), and
    the mask combining that with the sliding window is captured without vmap."""
    import onnx

    directory, out = str(tmp_path / "gemma3"), str(tmp_path / "onnx")
    model = write_gemma3(directory)
    export_hf(directory, "auto", out)
    decoder = onnx.load(os.path.join(out, "model.onnx"), load_external_data=False)
    assert "token_type_ids" in [i.name for i in decoder.graph.input]
    assert not os.path.exists(os.path.join(out, "genai_config.json"))
    texts = ["user: <start_of_image> what is in this picture ? assistant:", "<start_of_image> describe it"]
    pictures = [[picture] for picture in images((40, 48), (32, 32))]
    expected = reference(model, directory, texts, pictures, 6)
    assert torch.equal(generate_vlm(out, texts, pictures, max_new_tokens=6), expected)


def test_a_vision_language_model_not_known_to_split_right_is_refused_before_anything_is_written(tmp_path):
    config = transformers.Qwen2VLConfig(text_config=dict(vocab_size=64, hidden_size=32, intermediate_size=64,
                                                         num_hidden_layers=1, num_attention_heads=2,
                                                         num_key_value_heads=1))
    config.architectures = ["Qwen2VLForConditionalGeneration"]
    config.save_pretrained(tmp_path / "qwen2_vl")
    with pytest.raises(InvalidInputError, match="qwen2_vl models .* 3-d positions"):
        export_hf(tmp_path / "qwen2_vl", "auto", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_generate_vlm_refuses_a_folder_without_the_three_models(tmp_path):
    (tmp_path / "model.onnx").write_bytes(b"")
    with pytest.raises(InvalidInputError, match="vision.onnx, embedding.onnx"):
        generate_vlm(tmp_path, "what ?")
