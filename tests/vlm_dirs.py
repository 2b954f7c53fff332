"""Tiny random vision-language model directories (config, safetensors, a byte-level BPE tokenizer with the family's
image tokens, its image processor) written as users save them, and the inputs their processors give where the
processor cannot be built here (it needs torchvision for its video processor). Nothing downloaded."""

from __future__ import annotations

import json
import os

import numpy as np
import torch
import transformers

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
        image_processor=transformers.CLIPImageProcessor(size={"shortest_edge": 32},
                                                        crop_size={"height": 32, "width": 32}),
        tokenizer=transformers.AutoTokenizer.from_pretrained(directory), patch_size=8,
        vision_feature_select_strategy="default", num_additional_image_tokens=1, image_token="<image>")
    processor.save_pretrained(directory)
    return model


def write_mistral3(directory: str) -> torch.nn.Module:
    """A random Mistral 3 (Pixtral vision tower in 8x8 patches merged 2x2, Mistral text model), its image
    processor (images of any size up to 64 pixels a side, in multiples of the patches merged: 16, which the
    processor asks of it) and its processor's settings."""
    torch.manual_seed(0)
    vocab = write_tokenizer(directory, tuple(PIXTRAL_TOKENS))
    config = transformers.Mistral3Config(
        **_pixtral_sizes("mistral", len(vocab)), image_token_index=vocab["[IMG]"], spatial_merge_size=2,
        vision_feature_layer=-1)
    model = transformers.Mistral3ForConditionalGeneration(config).eval()
    model.save_pretrained(directory)
    _save_pixtral_processor(directory, "PixtralProcessor")
    return model


def _pixtral_sizes(text_type: str, vocab: int) -> dict[str, dict]:
    """The sub-configs of a Pixtral tower (64-pixel images in 8x8 patches) and a tiny text model of
    ``text_type``."""
    return {"vision_config": dict(model_type="pixtral", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                  num_attention_heads=4, image_size=64, patch_size=8, head_dim=8),
            "text_config": dict(model_type=text_type, vocab_size=vocab, hidden_size=32, intermediate_size=64,
                                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                max_position_embeddings=256, bos_token_id=1, eos_token_id=2, pad_token_id=0)}


def _save_pixtral_processor(directory: str, processor_class: str) -> None:
    """Pixtral's image processor (64-pixel sides, 8-pixel patches merged 2 by 2) and the settings of the processor
    ``processor_class`` as it saves them (its image tokens)."""
    transformers.PixtralImageProcessorPil(size={"longest_edge": 64}, patch_size=8).save_pretrained(directory)
    with open(os.path.join(directory, "processor_config.json"), "w", encoding="utf-8") as f:
        json.dump({"processor_class": processor_class, "image_token": "[IMG]", "image_break_token": "[IMG_BREAK]",
                   "image_end_token": "[IMG_END]", "patch_size": 8, "spatial_merge_size": 2}, f)


def pixtral_inputs(directory: str, texts: list[str], pictures: list[object]) -> dict[str, torch.Tensor]:
    """What Pixtral's processor gives (it needs torchvision, which is not installed here): the images resized
    and padded, their sizes, and each prompt's ``[IMG]`` replaced by the image's rows of patches, each row ended
    by ``[IMG_BREAK]`` and the last by ``[IMG_END]``."""
    pixels = transformers.PixtralImageProcessorPil.from_pretrained(directory)(pictures, return_tensors="pt",
                                                                              patch_size={"height": 16, "width": 16})
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


def write_gemma3(directory: str, side: int = 32, tokens: int = 16) -> torch.nn.Module:
    """A random Gemma 3 (SigLIP tower on ``side``-pixel images in 4x4 patches pooled to ``tokens`` tokens, 16 for
    32 pixels, 256 for 64 as onnxruntime-genai counts them; a Gemma 3 text model with a sliding window) and its
    processor, whose image tokens attend to each other both ways."""
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
                         num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                         max_position_embeddings=4 * tokens + 256, sliding_window=16, bos_token_id=1, eos_token_id=2,
                         pad_token_id=0),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                           image_size=side, patch_size=4),
        mm_tokens_per_image=tokens, image_token_index=vocab["<image_soft_token>"],
        boi_token_index=vocab["<start_of_image>"], eoi_token_index=vocab["<end_of_image>"])
    model = transformers.Gemma3ForConditionalGeneration(config).eval()
    model.save_pretrained(directory)
    image_processor = transformers.Gemma3ImageProcessorPil(size={"height": side, "width": side})
    transformers.Gemma3Processor(image_processor=image_processor, image_seq_length=tokens,
                                 tokenizer=transformers.AutoTokenizer.from_pretrained(directory)
                                 ).save_pretrained(directory)
    with open(os.path.join(directory, "chat_template.jinja"), "w", encoding="utf-8") as f:
        f.write("{% for message in messages %}{{ message['content'] }}{% endfor %}")
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


def spread(model: torch.nn.Module) -> None:
    """Every weight drawn anew so that activations keep their scale (matrices N(0, 1/fan_in), biases N(0, 0.1),
    norm scales N(1, 0.2)): a tiny model's scores then part, and greedy tokens do not all repeat one."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() > 1:
                std, mean = param[0].numel() ** -0.5, 0.0
            else:
                std, mean = (0.1, 0.0) if name.endswith("bias") else (0.2, 1.0)
            param.copy_(torch.randn(param.shape, generator=generator) * std + mean)


QWEN_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
QWEN_IMAGE = "<|vision_start|><|image_pad|><|vision_end|>"  # one image in a Qwen VL prompt


def write_qwen_vl(directory: str, kind: str = "qwen2_vl") -> torch.nn.Module:
    """A random model of the Qwen VL line (``kind``: qwen2_vl, qwen2_5_vl with windowed vision attention in its
    first layer, qwen3_vl with two deepstack sets, qwen3_vl_moe with experts, qwen3_5 with a gated delta-net
    layer, qwen3_5_moe with both) whose vision tower reads 8x8 patches merged 2x2, a Qwen text model with
    multimodal RoPE, and its image processor (images of 16x16 to 64x64 pixels, rounded to 16)."""
    torch.manual_seed(0)
    vocab = write_tokenizer(directory, QWEN_TOKENS)
    rope = {"rope_type": "default", "mrope_section": [2, 1, 1], "rope_theta": 10000.0}
    text = dict(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, rope_parameters=rope,
                bos_token_id=1, eos_token_id=2, pad_token_id=0)
    vision = dict(depth=2, embed_dim=32, hidden_size=32, num_heads=4, patch_size=8, spatial_merge_size=2,
                  temporal_patch_size=2, in_channels=3)
    if kind == "qwen2_5_vl":
        vision.update(intermediate_size=64, out_hidden_size=32, window_size=32, fullatt_block_indexes=[1])
    if kind in ("qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe"):
        text.update(head_dim=8, rope_parameters={**rope, "mrope_interleaved": True})
        vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=4, patch_size=8, spatial_merge_size=2,
                      temporal_patch_size=2, in_channels=3, out_hidden_size=32, num_position_embeddings=16,
                      deepstack_visual_indexes=[0, 1])
    if kind in ("qwen3_vl_moe", "qwen3_5_moe"):
        text.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, decoder_sparse_step=1,
                    shared_expert_intermediate_size=32)
    if kind in ("qwen3_5", "qwen3_5_moe"):  # gated delta-net layers, then full attention
        text.update(layer_types=["linear_attention", "full_attention"], linear_conv_kernel_dim=4,
                    linear_key_head_dim=8, linear_value_head_dim=8, linear_num_key_heads=2,
                    linear_num_value_heads=4)
        vision.pop("deepstack_visual_indexes")
    names = {"qwen2_vl": "Qwen2VL", "qwen2_5_vl": "Qwen2_5_VL", "qwen3_vl": "Qwen3VL", "qwen3_vl_moe": "Qwen3VLMoe",
             "qwen3_5": "Qwen3_5", "qwen3_5_moe": "Qwen3_5Moe"}[kind]
    config = getattr(transformers, f"{names}Config")(
        text_config=text, vision_config=vision, image_token_id=vocab["<|image_pad|>"],
        video_token_id=vocab["<|video_pad|>"], vision_start_token_id=vocab["<|vision_start|>"],
        vision_end_token_id=vocab["<|vision_end|>"])
    model = getattr(transformers, f"{names}ForConditionalGeneration")(config).eval()
    model.save_pretrained(directory)
    transformers.Qwen2VLImageProcessorPil(min_pixels=16 * 16, max_pixels=64 * 64, patch_size=8, merge_size=2,
                                          temporal_patch_size=2).save_pretrained(directory)
    return model


def grid_inputs(directory: str, texts: list[str], pictures: list[object], image_processor: type,
                image_token: str) -> dict[str, torch.Tensor]:
    """What a processor of image grids gives (the Qwen VL line's and GLM's, which need torchvision for their video
    processors): the images' patches and grids, each prompt's ``image_token`` repeated once per merged patch of its
    image (2x2 patches merged), and each token's modality (``mm_token_type_ids``: 1 for an image token)."""
    pixels = image_processor.from_pretrained(directory)(pictures, return_tensors="pt")
    grids = iter(pixels["image_grid_thw"].tolist())
    prompts = []
    for text in texts:
        pieces = text.split(image_token)
        expanded = [pieces[0]]
        for piece in pieces[1:]:
            t, h, w = next(grids)
            expanded.append(image_token * (t * h * w // 4) + piece)
        prompts.append("".join(expanded))
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    tokens = tokenizer(prompts, return_tensors="pt", padding=True)
    image = tokenizer.convert_tokens_to_ids(image_token)
    return {**tokens, "mm_token_type_ids": (tokens["input_ids"] == image).to(torch.int64), **pixels}


def qwen_inputs(directory: str, texts: list[str], pictures: list[object]) -> dict[str, torch.Tensor]:
    """What a Qwen VL processor gives (:func:`grid_inputs`)."""
    return grid_inputs(directory, texts, pictures, transformers.Qwen2VLImageProcessorPil, "<|image_pad|>")


IDEFICS_TOKENS = ("<image>", "<fake_token_around_image>", "<global-img>", "<end_of_utterance>")


def write_idefics3(directory: str, kind: str = "idefics3") -> torch.nn.Module:
    """A random Idefics3 or SmolVLM (``kind``; a SigLIP tower on 32x32 tiles in 8x8 patches, pixel-shuffled to 4
    tokens a tile; a Llama text model), its image processor (an image cut into tiles of 32 pixels, at most 64 a
    side, and a global view) and its processor (Idefics3's: SmolVLM's needs torchvision for its video processor,
    and prompts a SmolVLM as Idefics3's does)."""
    torch.manual_seed(0)
    vocab = write_tokenizer(directory, IDEFICS_TOKENS)
    names = {"idefics3": "Idefics3", "smolvlm": "SmolVLM"}[kind]
    config = getattr(transformers, f"{names}Config")(
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                           image_size=32, patch_size=8),
        text_config=dict(model_type="llama", vocab_size=len(vocab), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         bos_token_id=1, eos_token_id=2, pad_token_id=0),
        image_token_id=vocab["<image>"], scale_factor=2)
    model = getattr(transformers, f"{names}ForConditionalGeneration")(config).eval()
    model.save_pretrained(directory)
    image_processor = getattr(transformers, f"{names}ImageProcessorPil")(
        size={"longest_edge": 64}, max_image_size={"longest_edge": 32}, do_image_splitting=True)
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    transformers.Idefics3Processor(image_processor=image_processor, tokenizer=tokenizer,
                                   image_seq_len=4).save_pretrained(directory)
    if kind == "smolvlm":  # what SmolVLMProcessor saves, for the consumers that build it
        with open(os.path.join(directory, "processor_config.json"), encoding="utf-8") as f:
            settings = json.load(f)
        settings["processor_class"] = "SmolVLMProcessor"
        with open(os.path.join(directory, "processor_config.json"), "w", encoding="utf-8") as f:
            json.dump(settings, f)
    return model


def idefics3_inputs(directory: str, texts: list[str], pictures: list[list[object]]) -> dict[str, torch.Tensor]:
    """What Idefics3's processor gives (a prompt's ``<image>`` expanded to its tiles' and global view's tokens)."""
    image_processor = transformers.AutoImageProcessor.from_pretrained(directory)
    processor = transformers.Idefics3Processor(image_processor=image_processor, image_seq_len=4,
                                               tokenizer=transformers.AutoTokenizer.from_pretrained(directory))
    return processor(text=texts, images=pictures, return_tensors="pt", padding=True)


def write_paligemma(directory: str) -> torch.nn.Module:
    """A random PaliGemma (SigLIP tower on 32x32 images in 8x8 patches, 16 tokens an image; a Gemma text model),
    its weights drawn anew from N(0, 0.2) (the tiny default init gives a tie of scores that repeats one token),
    and its processor (an image's 16 tokens before the prompt, which attends both ways)."""
    torch.manual_seed(0)
    vocab = write_tokenizer(directory, ("<image>",))
    config = transformers.PaliGemmaConfig(
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                           image_size=32, patch_size=8, projection_dim=32),
        text_config=dict(model_type="gemma", vocab_size=len(vocab), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                         max_position_embeddings=512, bos_token_id=1, eos_token_id=2, pad_token_id=0),
        image_token_id=vocab["<image>"], projection_dim=32)
    model = transformers.PaliGemmaForConditionalGeneration(config).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0, 0.2)
    model.save_pretrained(directory)
    image_processor = transformers.SiglipImageProcessorPil(size={"height": 32, "width": 32})
    image_processor.image_seq_length = 16
    transformers.PaliGemmaProcessor(image_processor=image_processor,
                                    tokenizer=transformers.AutoTokenizer.from_pretrained(directory)
                                    ).save_pretrained(directory)
    return model


def write_florence2(directory: str) -> torch.nn.Module:
    """A random Florence-2 (a DaViT tower on 64x64 images, 5 tokens an image; a BART encoder-decoder), its weights
    drawn anew at scales that keep activations' (the tiny default init repeats one token), its tokenizer (BART's:
    a text between ``<s>`` and ``</s>``) and its processor (an image's tokens, then the prompt between ``<s>`` and
    ``</s>``)."""
    from tokenizers import Tokenizer, processors

    torch.manual_seed(0)
    vocab = write_tokenizer(directory, ("<image>",))
    tokenizer = Tokenizer.from_file(os.path.join(directory, "tokenizer.json"))  # BART's: <s> text </s>
    tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 1),
                                                                                                   ("</s>", 2)])
    tokenizer.save(os.path.join(directory, "tokenizer.json"))
    with open(os.path.join(directory, "tokenizer_config.json"), encoding="utf-8") as f:
        settings = json.load(f)
    settings["extra_special_tokens"] = {"image_token": "<image>"}
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(settings, f)
    config = transformers.Florence2Config(
        vision_config=dict(depths=[1, 1, 1, 1], embed_dim=[8, 16, 16, 32], num_heads=[1, 1, 1, 1],
                           num_groups=[1, 1, 1, 1], window_size=2, projection_dim=32, max_position_embeddings=8,
                           max_temporal_embeddings=4),
        text_config=dict(model_type="bart", vocab_size=len(vocab), d_model=32, encoder_layers=2, decoder_layers=2,
                         encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                         max_position_embeddings=128, bos_token_id=1, eos_token_id=2, pad_token_id=0,
                         decoder_start_token_id=2, forced_eos_token_id=None),
        image_token_id=vocab["<image>"])
    model = transformers.Florence2ForConditionalGeneration(config).eval()
    spread(model)
    model.save_pretrained(directory)
    image_processor = transformers.CLIPImageProcessorPil(size={"height": 64, "width": 64}, do_center_crop=False)
    image_processor.image_seq_length = 5
    transformers.Florence2Processor(image_processor=image_processor,
                                    tokenizer=transformers.AutoTokenizer.from_pretrained(directory)
                                    ).save_pretrained(directory)
    return model


def image_tokens(model: torch.nn.Module, pixel_values: torch.Tensor) -> int:
    """The rows of image features one image of ``pixel_values`` takes in a prompt."""
    with torch.no_grad():
        features = model.get_image_features(pixel_values=pixel_values[:1])
    features = getattr(features, "pooler_output", features)
    return sum(f.reshape(-1, f.shape[-1]).shape[0] for f in (features if isinstance(features, (list, tuple))
                                                             else [features]))


GLM_TOKENS = ("<|begin_of_image|>", "<|end_of_image|>", "<|image|>", "<|video|>")


def write_glm_ocr(directory: str) -> torch.nn.Module:
    """A random GLM-OCR (a GLM-4V-style vision tower in 8x8 patches merged 2x2, a GLM text model with multimodal
    RoPE) and its image processor (GLM-4.6V's: images of 16x16 to 64x64 pixels, rounded to 16)."""
    torch.manual_seed(0)
    vocab = write_tokenizer(directory, GLM_TOKENS)
    config = transformers.GlmOcrConfig(
        text_config=dict(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         rope_parameters={"rope_type": "default", "mrope_section": [2, 1, 1], "rope_theta": 10000.0,
                                          "partial_rotary_factor": 1.0},
                         bos_token_id=1, eos_token_id=2, pad_token_id=0),
        vision_config=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=4, image_size=32, patch_size=8,
                           spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=32),
        image_token_id=vocab["<|image|>"], video_token_id=vocab["<|video|>"],
        image_start_token_id=vocab["<|begin_of_image|>"], image_end_token_id=vocab["<|end_of_image|>"])
    model = transformers.GlmOcrForConditionalGeneration(config).eval()
    spread(model)
    model.save_pretrained(directory)
    processor = transformers.Glm46VImageProcessorPil(size={"shortest_edge": 16 * 16, "longest_edge": 64 * 64},
                                                     patch_size=8, merge_size=2, temporal_patch_size=2)
    processor.save_pretrained(directory)
    with open(os.path.join(directory, "preprocessor_config.json"), encoding="utf-8") as f:
        settings = json.load(f)
    settings["processor_class"] = "Glm46VProcessor"  # as GLM-OCR's checkpoints name it
    with open(os.path.join(directory, "preprocessor_config.json"), "w", encoding="utf-8") as f:
        json.dump(settings, f)
    return model


def glm_inputs(directory: str, texts: list[str], pictures: list[object]) -> dict[str, torch.Tensor]:
    """What GLM-4.6V's processor gives for GLM-OCR (:func:`grid_inputs`)."""
    return grid_inputs(directory, texts, pictures, transformers.Glm46VImageProcessorPil, "<|image|>")


def write_lighton_ocr(directory: str) -> torch.nn.Module:
    """A random LightOnOCR (a Pixtral tower in 8x8 patches merged 2x2, each image at its own size; a Qwen3 text
    model), its image processor (images of any size up to 64 pixels a side) and its processor's settings."""
    torch.manual_seed(0)
    vocab = write_tokenizer(directory, tuple(PIXTRAL_TOKENS))
    config = transformers.LightOnOcrConfig(
        **_pixtral_sizes("qwen3", len(vocab)), image_token_id=vocab["[IMG]"], spatial_merge_size=2)
    model = transformers.LightOnOcrForConditionalGeneration(config).eval()
    spread(model)
    model.save_pretrained(directory)
    _save_pixtral_processor(directory, "LightOnOcrProcessor")
    return model


def lighton_inputs(directory: str, texts: list[str], pictures: list[object]) -> dict[str, torch.Tensor]:
    """What LightOnOCR's processor gives: the images resized to multiples of the merged patches and padded, their
    sizes, and each prompt's ``[IMG]`` repeated once per merged patch of its image."""
    pixels = transformers.PixtralImageProcessorPil.from_pretrained(directory)(pictures, return_tensors="pt",
                                                                              patch_size={"height": 16, "width": 16})
    prompts = [text.replace("[IMG]", "[IMG]" * ((h // 16) * (w // 16)), 1)
               for text, (h, w) in zip(texts, pixels["image_sizes"].tolist())]
    tokens = transformers.AutoTokenizer.from_pretrained(directory)(prompts, return_tensors="pt", padding=True)
    return {**tokens, **pixels}


GEMMA4_TOKENS = ("<|image>", "<image|>", "<|image|>", "<|video|>", "<|audio>", "<audio|>", "<|audio|>")


def write_gemma4(directory: str, vision_both_ways: bool = False, audio_config: dict | None = None) -> torch.nn.Module:
    """A random Gemma 4 (its vision tower on 8x8 patches pooled 3x3; a text model with per-layer embeddings of the
    token ids, a sliding window; with ``vision_both_ways``, image tokens attending to each other both ways; an audio
    tower of ``audio_config``, none without) and its image processor (images of up to 70 soft tokens, at their own
    aspect ratio)."""
    torch.manual_seed(0)
    vocab = write_tokenizer(directory, GEMMA4_TOKENS)
    config = transformers.Gemma4Config(
        text_config=dict(vocab_size=len(vocab), vocab_size_per_layer_input=len(vocab), hidden_size=32,
                         intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=8, hidden_size_per_layer_input=8, sliding_window=16,
                         layer_types=["sliding_attention", "full_attention"], max_position_embeddings=512,
                         use_bidirectional_attention="vision" if vision_both_ways else None,
                         bos_token_id=1, eos_token_id=2, pad_token_id=0),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                           num_key_value_heads=4, head_dim=8, patch_size=8, position_embedding_size=64),
        audio_config=audio_config, boi_token_id=vocab["<|image>"], eoi_token_id=vocab["<image|>"],
        image_token_id=vocab["<|image|>"], video_token_id=vocab["<|video|>"], boa_token_id=vocab["<|audio>"],
        eoa_token_index=vocab["<audio|>"], audio_token_id=vocab["<|audio|>"])
    model = transformers.Gemma4ForConditionalGeneration(config).eval()
    spread(model)
    model.save_pretrained(directory)
    transformers.Gemma4ImageProcessorPil(patch_size=8, max_soft_tokens=70).save_pretrained(directory)
    return model


def gemma4_inputs(model: torch.nn.Module, directory: str, texts: list[str],
                  pictures: list[list[object]]) -> dict[str, torch.Tensor]:
    """What Gemma 4's processor gives (it needs torchvision for its video processor): each prompt's ``<|image|>``
    expanded to its image's soft tokens between ``<|image>`` and ``<image|>``, each token's modality."""
    pixels = transformers.Gemma4ImageProcessorPil.from_pretrained(directory)(
        [p for group in pictures for p in group], return_tensors="pt")
    counts = iter(pixels["num_soft_tokens_per_image"].tolist())
    prompts = []
    for text in texts:
        pieces = text.split("<|image|>")
        prompts.append(pieces[0] + "".join("<|image>" + "<|image|>" * next(counts) + "<image|>" + piece
                                           for piece in pieces[1:]))
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    tokens = tokenizer(prompts, return_tensors="pt", padding=True)
    image = tokenizer.convert_tokens_to_ids("<|image|>")
    return {**tokens, "mm_token_type_ids": (tokens["input_ids"] == image).to(torch.int64),
            "pixel_values": pixels["pixel_values"], "image_position_ids": pixels["image_position_ids"]}


def token_inputs(directory: str, texts: list[str], image_token: str, rows: list[int]) -> dict[str, torch.Tensor]:
    """The directory's tokenizer on ``texts``, the i-th ``image_token`` of the prompts (in order) repeated
    ``rows[i]`` times, as a processor expands an image's placeholder to its rows of features; padded."""
    counts = iter(rows)
    prompts = []
    for text in texts:
        pieces = text.split(image_token)
        prompts.append(pieces[0] + "".join(image_token * next(counts) + rest for rest in pieces[1:]))
    return dict(transformers.AutoTokenizer.from_pretrained(directory)(prompts, return_tensors="pt", padding=True))


def write_llama4(directory: str) -> torch.nn.Module:
    """A random Llama 4 (its vision tower on 32x32 tiles in 8x8 patches, pixel-shuffled to 4 rows a tile, which
    its forward projects after get_image_features; a Llama 4 text model of a dense and a mixture-of-experts
    layer). Its image processor needs torchvision: tests feed tiles of pixels (``token_inputs``)."""
    torch.manual_seed(0)
    vocab = write_tokenizer(directory, ("<|image|>",))
    config = transformers.Llama4Config(
        vision_config=dict(hidden_size=32, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                           image_size=32, patch_size=8, vision_output_dim=32, projector_input_dim=32,
                           projector_output_dim=32, pixel_shuffle_ratio=0.5),
        text_config=dict(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, intermediate_size_mlp=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                         num_local_experts=2, interleave_moe_layer_step=2, max_position_embeddings=256,
                         bos_token_id=1, eos_token_id=2, pad_token_id=0),
        image_token_index=vocab["<|image|>"])
    model = transformers.Llama4ForConditionalGeneration(config).eval()
    spread(model)
    model.save_pretrained(directory)
    return model


def write_video_llava(directory: str) -> torch.nn.Module:
    """A random Video-LLaVA (CLIP towers on 32x32 images in 8x8 patches, a Llama text model) and its image
    processor, which names its output ``pixel_values_images`` (its processor needs torchvision for videos:
    tests tokenize with ``token_inputs``, 16 rows an image)."""
    torch.manual_seed(0)
    vocab = write_tokenizer(directory, ("<image>", "<video>"))
    tower = dict(model_type="clip_vision_model", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                 num_attention_heads=4, image_size=32, patch_size=8)
    config = transformers.VideoLlavaConfig(
        vision_config=tower,
        text_config=dict(model_type="llama", vocab_size=len(vocab), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=256, bos_token_id=1, eos_token_id=2, pad_token_id=0),
        image_token_index=vocab["<image>"], video_token_index=vocab["<video>"], vision_feature_layer=-2,
        vision_feature_select_strategy="default")
    model = transformers.VideoLlavaForConditionalGeneration(config).eval()
    spread(model)
    model.save_pretrained(directory)
    transformers.VideoLlavaImageProcessor(size={"shortest_edge": 32},
                                          crop_size={"height": 32, "width": 32}).save_pretrained(directory)
    return model


def write_deepseek_vl_hybrid(directory: str) -> torch.nn.Module:
    """A random DeepSeek-VL hybrid (a SigLIP tower on 32x32 images and a SAM tower on 64x64 ones, both in 8x8
    patches; a Llama text model) and its image processor, which gives ``pixel_values`` and
    ``high_res_pixel_values``; its model for generation has no ``get_image_features`` (its base model has)."""
    torch.manual_seed(0)
    vocab = write_tokenizer(directory)
    config = transformers.DeepseekVLHybridConfig(
        vision_config=dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=64,
                           num_hidden_layers=2, num_attention_heads=4, image_size=32, patch_size=8),
        high_res_vision_config=dict(model_type="sam_vision_model", hidden_size=32, mlp_dim=64, num_hidden_layers=2,
                                    num_attention_heads=4, image_size=64, patch_size=8, output_channels=32,
                                    global_attn_indexes=[1], window_size=4, num_pos_feats=16),
        text_config=dict(model_type="llama", vocab_size=len(vocab), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=256, bos_token_id=1, eos_token_id=2, pad_token_id=0),
        image_token_id=vocab["<image>"])
    model = transformers.DeepseekVLHybridForConditionalGeneration(config).eval()
    spread(model)
    model.save_pretrained(directory)
    transformers.DeepseekVLHybridImageProcessorPil(size={"height": 32, "width": 32},
                                                   high_res_size={"height": 64, "width": 64}).save_pretrained(directory)
    return model


def write_paddleocr_vl(directory: str) -> torch.nn.Module:
    """A random PaddleOCR-VL (its vision tower on 8x8 patches, positions interpolated per image, each image's 2x2
    blocks merged by its projector; an ERNIE text model with multimodal RoPE) and its image processor (images of
    16x16 to 64x64 pixels, rounded to 16)."""
    torch.manual_seed(0)
    vocab = write_tokenizer(directory, QWEN_TOKENS)
    config = transformers.PaddleOCRVLConfig(
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                           image_size=32, patch_size=8, spatial_merge_size=2),
        text_config=dict(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=256,
                         rope_parameters={"rope_type": "default", "mrope_section": [2, 1, 1], "rope_theta": 10000.0},
                         bos_token_id=1, eos_token_id=2, pad_token_id=0),
        image_token_id=vocab["<|image_pad|>"], video_token_id=vocab["<|video_pad|>"],
        vision_start_token_id=vocab["<|vision_start|>"], vision_end_token_id=vocab["<|vision_end|>"])
    model = transformers.PaddleOCRVLForConditionalGeneration(config).eval()
    spread(model)
    model.save_pretrained(directory)
    transformers.PaddleOCRVLImageProcessorPil(size={"shortest_edge": 16 * 16, "longest_edge": 64 * 64}, patch_size=8,
                                              merge_size=2, temporal_patch_size=1).save_pretrained(directory)
    return model


def _instructblip_sizes(vocab: int) -> dict[str, object]:
    """InstructBLIP's (and InstructBLIP-Video's) sub-configs, tiny: a BLIP tower on 32x32 images in 8x8 patches, a
    Q-Former of 4 queries, a Llama text model of ``vocab`` tokens."""
    return dict(
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                           image_size=32, patch_size=8),
        qformer_config=dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                            num_attention_heads=4, encoder_hidden_size=32, max_position_embeddings=64),
        text_config=dict(model_type="llama", vocab_size=vocab, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=256, bos_token_id=1, eos_token_id=2, pad_token_id=0),
        num_query_tokens=4)


def write_instructblip(directory: str) -> torch.nn.Module:
    """A random InstructBLIP (a BLIP tower on 32x32 images in 8x8 patches, a Q-Former of 4 queries that reads the
    prompt's text beside the image, a Llama text model; 4 image tokens an image) and its image processor."""
    torch.manual_seed(0)
    vocab = write_tokenizer(directory)
    config = transformers.InstructBlipConfig(**_instructblip_sizes(len(vocab)), image_token_index=vocab["<image>"])
    model = transformers.InstructBlipForConditionalGeneration(config).eval()
    spread(model)
    model.save_pretrained(directory)
    transformers.BlipImageProcessorPil(size={"height": 32, "width": 32}).save_pretrained(directory)
    return model


def vision_encoder_decoder(directory: str, decoder: object, **tokens: int) -> torch.nn.Module:
    """A VisionEncoderDecoder of a ViT encoder (32x32 images in 8x8 patches) and ``decoder``'s config, its weights
    spread, saved in ``directory`` with its ViT image processor; ``tokens``: the config's start, pad and end ids."""
    encoder = transformers.ViTConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                     image_size=32, patch_size=8)
    config = transformers.VisionEncoderDecoderConfig.from_encoder_decoder_configs(encoder, decoder)
    for name, value in tokens.items():
        setattr(config, name, value)
    model = transformers.VisionEncoderDecoderModel(config).eval()
    spread(model)
    model.save_pretrained(directory)
    transformers.ViTImageProcessorPil(size={"height": 32, "width": 32}).save_pretrained(directory)
    return model


def write_vision_encoder_decoder(directory: str) -> torch.nn.Module:
    """A random VisionEncoderDecoder as TrOCR and Donut are built (a ViT encoder; a BERT decoder with
    cross-attention, whose learned positions bound its length; no start token of its own, so generation starts from
    its bos) and its ViT image processor."""
    torch.manual_seed(0)
    vocab = write_tokenizer(directory)
    return vision_encoder_decoder(directory, transformers.BertConfig(
        vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=64, is_decoder=True, add_cross_attention=True, bos_token_id=1, eos_token_id=2,
        pad_token_id=0))


def write_pix2struct(directory: str) -> torch.nn.Module:
    """A random Pix2Struct (its encoder reads up to 24 patches of 16x16 pixels, flattened with their row and column,
    and their mask; a T5-style decoder) and its image processor."""
    torch.manual_seed(0)
    vocab = write_tokenizer(directory)
    config = transformers.Pix2StructConfig(
        vision_config=dict(hidden_size=32, patch_embed_hidden_size=768, d_ff=64, d_kv=8, num_hidden_layers=2,
                           num_attention_heads=4),
        text_config=dict(vocab_size=len(vocab), hidden_size=32, d_ff=64, d_kv=8, num_layers=2, num_heads=4,
                         decoder_start_token_id=0, pad_token_id=0, eos_token_id=2))
    model = transformers.Pix2StructForConditionalGeneration(config).eval()
    spread(model)
    model.save_pretrained(directory)
    transformers.Pix2StructImageProcessorPil(max_patches=24).save_pretrained(directory)
    return model


def write_pp_formulanet(directory: str) -> torch.nn.Module:
    """A random PP-FormulaNet (a SAM-style tower on 64x64 images whose decoder reads its pooler_output, an MBart-style
    decoder), with no image processor (its own needs torchvision): the export's images are pixels of its size."""
    torch.manual_seed(0)
    vocab = write_tokenizer(directory)
    config = transformers.PPFormulaNetConfig(
        vision_config=dict(hidden_size=32, output_channels=16, num_hidden_layers=2, num_attention_heads=4,
                           image_size=64, patch_size=8, mlp_dim=64, global_attn_indexes=[1], window_size=4,
                           post_conv_in_channels=16, post_conv_mid_channels=16, post_conv_out_channels=32,
                           decoder_hidden_size=32),
        text_config=dict(vocab_size=len(vocab), d_model=32, decoder_layers=2, decoder_attention_heads=4,
                         decoder_ffn_dim=64, max_position_embeddings=64, bos_token_id=0, eos_token_id=2,
                         pad_token_id=1, decoder_start_token_id=2, forced_eos_token_id=None))
    model = transformers.PPFormulaNetForConditionalGeneration(config).eval()
    spread(model)
    model.save_pretrained(directory)
    return model


def write_blip(directory: str) -> torch.nn.Module:
    """A random BLIP captioner (a BLIP vision model on 32x32 images in 8x8 patches; a BERT text decoder that
    cross-attends its states, from its bos, to its [SEP]) and its image processor."""
    torch.manual_seed(0)
    vocab = write_tokenizer(directory)
    config = transformers.BlipConfig(
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                           image_size=32, patch_size=8),
        text_config=dict(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, encoder_hidden_size=32, max_position_embeddings=64, bos_token_id=1,
                         eos_token_id=2, sep_token_id=3, pad_token_id=0))
    model = transformers.BlipForConditionalGeneration(config).eval()
    spread(model)
    model.save_pretrained(directory)
    transformers.BlipImageProcessorPil(size={"height": 32, "width": 32}).save_pretrained(directory)
    return model


ANY_RESOLUTION_PINPOINTS = [[32, 32], [32, 64], [64, 32], [64, 64]]


def write_any_resolution(directory: str, kind: str = "llava_next") -> torch.nn.Module:
    """A random LLaVA-NeXT or LLaVA-OneVision (``kind``; a CLIP or SigLIP tower on tiles of 32x32 in 8x8 patches,
    grid pinpoints of up to 2x2 tiles, a Llama text model) and its any-resolution image processor."""
    torch.manual_seed(0)
    vocab = write_tokenizer(directory)
    onevision = kind == "llava_onevision"
    vision = dict(model_type="siglip_vision_model" if onevision else "clip_vision_model", hidden_size=32,
                  intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, image_size=32, patch_size=8)
    text = dict(model_type="llama", vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, bos_token_id=1,
                eos_token_id=2, pad_token_id=0)
    config_class = transformers.LlavaOnevisionConfig if onevision else transformers.LlavaNextConfig
    config = config_class(vision_config=vision, text_config=text, image_token_id=vocab["<image>"],
                          image_grid_pinpoints=ANY_RESOLUTION_PINPOINTS, vision_feature_layer=-1)
    model_class = transformers.LlavaOnevisionForConditionalGeneration if onevision \
        else transformers.LlavaNextForConditionalGeneration
    model = model_class(config).eval()
    spread(model)
    model.save_pretrained(directory)
    if onevision:
        processor = transformers.LlavaOnevisionImageProcessorPil(size={"height": 32, "width": 32},
                                                                 image_grid_pinpoints=ANY_RESOLUTION_PINPOINTS)
    else:
        processor = transformers.LlavaNextImageProcessorPil(size={"shortest_edge": 32},
                                                            crop_size={"height": 32, "width": 32},
                                                            image_grid_pinpoints=ANY_RESOLUTION_PINPOINTS)
    processor.save_pretrained(directory)
    return model


def write_lfm2_vl(directory: str, tokens: tuple[str, ...] = ("<image>",)) -> torch.nn.Module:
    """A random LFM2-VL (a SigLIP 2 NaFlex tower in 4x4 patches, 2x2 blocks merged per row; an LFM2 text model) with
    no image processor (its own needs torchvision): its examples and inputs are NaFlex patches of made-up grids.
    ``tokens``: the tokenizer's image tokens (``vlm_dirs_lfm`` adds the processor and its tokens)."""
    torch.manual_seed(0)
    vocab = write_tokenizer(directory, tokens)
    config = transformers.Lfm2VlConfig(
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                           patch_size=4, num_patches=64),
        text_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=len(vocab), layer_types=["full_attention", "conv"],
                         bos_token_id=1, eos_token_id=2, pad_token_id=0),
        projector_hidden_size=32, downsample_factor=2, image_token_id=vocab["<image>"])
    model = transformers.Lfm2VlForConditionalGeneration(config).eval()
    spread(model)
    model.save_pretrained(directory)
    return model


def write_instructblipvideo(directory: str) -> torch.nn.Module:
    """A random InstructBLIP-Video (InstructBLIP's modules, :func:`write_instructblip`'s sizes, on videos: each
    frame's 4 Q-Former rows at the prompt's video tokens), with no processor (its video processor needs
    torchvision)."""
    torch.manual_seed(0)
    vocab = write_tokenizer(directory, ("<video>",))
    config = transformers.InstructBlipVideoConfig(**_instructblip_sizes(len(vocab)),
                                                  video_token_index=vocab["<video>"])
    model = transformers.InstructBlipVideoForConditionalGeneration(config).eval()
    spread(model)
    model.save_pretrained(directory)
    return model
