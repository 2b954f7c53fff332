"""Model directories for image-to-text and document-question-answering tests, VisionEncoderDecoders as the Hub's are
built, saved as transformers saves them with their image processor and a fast tokenizer:

- a tiny Donut (a DonutSwin encoder and an MBart decoder, its cache sized by the MBart config's encoder_layers as
  Donut's is), taught a few answers so that its generation reaches its end tokens; its tokenizer holds the DocVQA
  task tokens and pads on the right;
- TrOCR (a ViT encoder, a TrOCR decoder) and ViT-GPT2 (a ViT encoder, a GPT-2 decoder with cross-attention)."""

from __future__ import annotations

import json
import os

import torch
import transformers

from tests.vlm_dirs import images, spread, vision_encoder_decoder, write_tokenizer

TASK_TOKENS = ("<s_docvqa>", "<s_question>", "</s_question>", "<s_answer>", "</s_answer>")
# The questions the model is taught, and their answers (each asked of both pictures).
ANSWERS = {"what is in this picture?": "a cat", "what is it?": "the dog"}
PICTURES = ((40, 60), (50, 30))
_TOKENS = {"decoder_start_token_id": 1, "pad_token_id": 0, "eos_token_id": 2}  # a captioner's config's


def prompt(question: str) -> str:
    """Donut's DocVQA prompt, as transformers' and transformers.js's pipelines write it."""
    return f"<s_docvqa><s_question>{question}</s_question><s_answer>"


def write_donut(directory: str) -> torch.nn.Module:
    """The Donut in ``directory`` (images resized to 32x48), trained until greedy generation gives each
    :data:`ANSWERS` answer and its end tokens for both :data:`PICTURES`."""
    torch.manual_seed(0)
    vocab = write_tokenizer(directory, image_tokens=TASK_TOKENS)
    path = os.path.join(directory, "tokenizer_config.json")
    with open(path, encoding="utf-8") as f:
        settings = json.load(f)
    with open(path, "w", encoding="utf-8") as f:
        json.dump({**settings, "padding_side": "right"}, f)  # Donut's; transformers' pipeline refuses others
    encoder = transformers.DonutSwinConfig(image_size=[32, 48], patch_size=4, embed_dim=16, depths=[1, 1],
                                           num_heads=[2, 2], window_size=2)
    decoder = transformers.MBartConfig(vocab_size=len(vocab), d_model=32, decoder_layers=2, decoder_attention_heads=4,
                                       decoder_ffn_dim=64, max_position_embeddings=64, is_decoder=True,
                                       add_cross_attention=True, scale_embedding=True, bos_token_id=1, eos_token_id=2,
                                       pad_token_id=0, decoder_start_token_id=1)
    config = transformers.VisionEncoderDecoderConfig.from_encoder_decoder_configs(encoder, decoder)
    config.decoder_start_token_id, config.pad_token_id, config.eos_token_id = 1, 0, 2
    model = transformers.VisionEncoderDecoderModel(config)
    spread(model)
    processor = transformers.DonutImageProcessorPil(size={"height": 32, "width": 48}, do_align_long_axis=False)
    processor.save_pretrained(directory)
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    _teach(model, tokenizer, processor(images(*PICTURES), return_tensors="pt")["pixel_values"])
    model.eval().save_pretrained(directory)
    return model


def _teach(model: torch.nn.Module, tokenizer: object, pixels: torch.Tensor) -> None:
    """Teacher-forced steps on each question's prompt, answer and end tokens for both pictures."""
    rows = [tokenizer(prompt(q) + a + "</s_answer></s>", add_special_tokens=False).input_ids
            for q, a in ANSWERS.items()]
    longest = max(map(len, rows))
    ids = torch.tensor([r + [0] * (longest - len(r)) for r in rows]).repeat_interleave(len(pixels), 0)
    labels = ids.masked_fill(ids == 0, -100)
    pixel_values = pixels.repeat(len(rows), 1, 1, 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(200):
        optimizer.zero_grad()
        loss = model(pixel_values=pixel_values, decoder_input_ids=ids[:, :-1], labels=labels[:, 1:]).loss
        loss.backward()
        optimizer.step()


def write_trocr(directory: str) -> torch.nn.Module:
    """TrOCR's architecture: a ViT encoder and a TrOCR decoder (learned positions, cross-attention)."""
    torch.manual_seed(0)
    vocab = write_tokenizer(directory)
    return vision_encoder_decoder(directory, transformers.TrOCRConfig(
        vocab_size=len(vocab), d_model=32, decoder_layers=2, decoder_attention_heads=4, decoder_ffn_dim=64,
        max_position_embeddings=64, bos_token_id=1, eos_token_id=2, pad_token_id=0, decoder_start_token_id=1),
        **_TOKENS)


def write_vit_gpt2(directory: str) -> torch.nn.Module:
    """ViT-GPT2's architecture (transformers.js's default image-to-text model): a ViT encoder and a GPT-2 decoder
    with cross-attention."""
    torch.manual_seed(0)
    vocab = write_tokenizer(directory)
    return vision_encoder_decoder(directory, transformers.GPT2Config(
        vocab_size=len(vocab), n_embd=32, n_layer=2, n_head=4, n_positions=64, add_cross_attention=True,
        bos_token_id=1, eos_token_id=2, pad_token_id=0, decoder_start_token_id=1), **_TOKENS)


def write_sam(directory: str) -> torch.nn.Module:
    """A tiny SAM (a ViT encoder on 64x64 images in 8x8 patches, windowed attention but in its last layer; a prompt
    encoder and mask decoder of width 16), its weights spread, and its image processor (longest edge 64, padded to
    64x64)."""
    torch.manual_seed(0)
    config = transformers.SamConfig(
        vision_config=dict(hidden_size=32, output_channels=16, num_hidden_layers=2, num_attention_heads=4,
                           image_size=64, patch_size=8, window_size=4, global_attn_indexes=[1], mlp_dim=64,
                           num_pos_feats=8),
        prompt_encoder_config=dict(hidden_size=16, image_size=64, patch_size=8, mask_input_channels=4),
        mask_decoder_config=dict(hidden_size=16, mlp_dim=32, num_hidden_layers=2, num_attention_heads=2,
                                 iou_head_hidden_dim=16))
    model = transformers.SamModel(config).eval()
    spread(model)
    model.save_pretrained(directory)
    transformers.SamImageProcessorPil(size={"longest_edge": 64}, pad_size={"height": 64, "width": 64},
                                      mask_size={"longest_edge": 16}, mask_pad_size={"height": 16, "width": 16}
                                      ).save_pretrained(directory)
    return model


# SAM 2's image processor settings (64x64 images, the ImageNet normalisation), as transformers' Sam2ImageProcessor
# would save them: it needs torchvision, which cannot be installed here, so the file is written by hand.
SAM2_PROCESSOR = {"image_processor_type": "Sam2ImageProcessor", "do_resize": True, "size": {"height": 64, "width": 64},
                  "mask_size": {"height": 16, "width": 16}, "do_rescale": True, "rescale_factor": 1 / 255,
                  "do_normalize": True, "image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225],
                  "do_convert_rgb": True, "resample": 2}


def write_sam2(directory: str) -> torch.nn.Module:
    """A tiny SAM 2 (a Hiera encoder on 64x64 images: four stages of width 8 to 64, windowed attention but in one
    block; embeddings at 16x16, 8x8 and 4x4; a prompt encoder and mask decoder of width 32), its weights spread, and
    its image processor's settings (:data:`SAM2_PROCESSOR`)."""
    torch.manual_seed(0)
    backbone = dict(model_type="sam2_hiera_det_model", hidden_size=8, num_attention_heads=1, image_size=[64, 64],
                    blocks_per_stage=[1, 1, 2, 1], embed_dim_per_stage=[8, 16, 32, 64],
                    num_attention_heads_per_stage=[1, 1, 2, 2], window_size_per_stage=[4, 4, 2, 2],
                    global_attention_blocks=[3], window_positional_embedding_background_size=[2, 2])
    config = transformers.Sam2Config(
        vision_config=dict(backbone_config=backbone, backbone_channel_list=[64, 32, 16, 8],
                           backbone_feature_sizes=[[16, 16], [8, 8], [4, 4]], fpn_hidden_size=32),
        prompt_encoder_config=dict(hidden_size=32, image_size=64, patch_size=16, mask_input_channels=4),
        mask_decoder_config=dict(hidden_size=32, mlp_dim=32, num_hidden_layers=2, num_attention_heads=2,
                                 iou_head_hidden_dim=16))
    model = transformers.Sam2Model(config).eval()
    spread(model)
    model.save_pretrained(directory)
    with open(os.path.join(directory, "preprocessor_config.json"), "w", encoding="utf-8") as f:
        json.dump(SAM2_PROCESSOR, f, indent=2)
    return model
