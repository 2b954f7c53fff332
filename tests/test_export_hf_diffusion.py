"""export_diffusion (text-to-image): tiny random diffusers pipelines written here (Stable Diffusion, SDXL,
PixArt-alpha, SD3; their tokenizers too: nothing downloaded), exported, and run in onnxruntime by
``OnnxDiffusionPipeline`` against the diffusers pipeline on the same prompt, latents and steps. Stable Diffusion
runs in ``make test``; SDXL, PixArt and SD3 (the same export and runner on other pipelines) are a ``sweep``."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

from onnxport import metadata
from onnxport.errors import InvalidInputError
from onnxport.hf import export_hf, pick_task, pipeline
from onnxport.hf.diffusion import export_diffusion
from onnxport.hf.diffusion_runner import OnnxDiffusionPipeline

transformers = pytest.importorskip("transformers")
diffusers = pytest.importorskip("diffusers")

pytestmark = pytest.mark.transformers  # the text encoders are transformers models: run on both pinned versions

LETTERS = "abcdefghijklmnopqrstuvwxyz"
PROMPT = "a red cat"


def write_clip_tokenizer(directory: str, max_length: int = 12) -> None:
    """A CLIP tokenizer whose words split into letters (no merges): vocab.json, merges.txt, tokenizer_config."""
    os.makedirs(directory, exist_ok=True)
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for letter in LETTERS:
        vocab[letter] = len(vocab)
        vocab[letter + "</w>"] = len(vocab)
    with open(os.path.join(directory, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f)
    with open(os.path.join(directory, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"tokenizer_class": "CLIPTokenizer", "model_max_length": max_length, "bos_token": "<|startoftext|>",
                   "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>", "pad_token": "<|endoftext|>"}, f)


def clip_tokenizer(tmp_path: os.PathLike, name: str) -> object:
    folder = os.path.join(tmp_path, f"{name}-src")
    write_clip_tokenizer(folder)
    return transformers.CLIPTokenizer.from_pretrained(folder)


def t5_tokenizer(tmp_path: os.PathLike) -> object:
    """A word-level tokenizer (``<pad>``=0, ``</s>``=1, ``<unk>``=2) ending each text with ``</s>``, as T5's does."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2, **{w: i + 3 for i, w in enumerate("a red cat dog blue".split())}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    folder = os.path.join(tmp_path, "t5-src")
    os.makedirs(folder, exist_ok=True)
    tok.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "pad_token": "<pad>", "eos_token": "</s>",
                   "unk_token": "<unk>", "model_max_length": 16}, f)
    return transformers.AutoTokenizer.from_pretrained(folder)


def clip_encoder(projection: bool = False, hidden: int = 16) -> torch.nn.Module:
    config = transformers.CLIPTextConfig(vocab_size=2 + 2 * len(LETTERS), hidden_size=hidden, intermediate_size=32,
                                         num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=12,
                                         projection_dim=8, bos_token_id=0, eos_token_id=1, pad_token_id=1)
    cls = transformers.CLIPTextModelWithProjection if projection else transformers.CLIPTextModel
    return cls(config).eval()


def tiny_vae(levels: int = 2) -> torch.nn.Module:
    """An AutoencoderKL of ``levels`` blocks (latents 2 ** (levels - 1) times smaller than the images)."""
    return diffusers.AutoencoderKL(in_channels=3, out_channels=3, block_out_channels=(8, 16)[:levels],
                                   down_block_types=("DownEncoderBlock2D",) * levels,
                                   up_block_types=("UpDecoderBlock2D",) * levels, latent_channels=4, norm_num_groups=4,
                                   sample_size=16, layers_per_block=1)


def tiny_unet(cross: int, levels: int = 2, **extra: object) -> torch.nn.Module:
    """A UNet2DConditionModel of ``levels`` blocks down and up (cross-attention in the outer one)."""
    return diffusers.UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(8, 16)[:levels],
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D")[:levels],
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D")[-levels:], cross_attention_dim=cross, attention_head_dim=4,
        norm_num_groups=4, **extra)


def stable_diffusion(tmp_path: os.PathLike) -> object:
    torch.manual_seed(0)
    return diffusers.StableDiffusionPipeline(
        vae=tiny_vae(), text_encoder=clip_encoder(), tokenizer=clip_tokenizer(tmp_path, "tok"), unet=tiny_unet(16),
        scheduler=diffusers.PNDMScheduler(skip_prk_steps=True), safety_checker=None, feature_extractor=None,
        requires_safety_checker=False)


def stable_diffusion_xl(tmp_path: os.PathLike) -> object:
    torch.manual_seed(0)
    unet = tiny_unet(32, levels=1, addition_embed_type="text_time", addition_time_embed_dim=4,
                     projection_class_embeddings_input_dim=8 + 6 * 4)  # pooled text (8) and 6 time ids
    return diffusers.StableDiffusionXLPipeline(
        vae=tiny_vae(levels=1), text_encoder=clip_encoder(), text_encoder_2=clip_encoder(projection=True),
        tokenizer=clip_tokenizer(tmp_path, "tok"), tokenizer_2=clip_tokenizer(tmp_path, "tok2"), unet=unet,
        scheduler=diffusers.EulerDiscreteScheduler(), add_watermarker=False)


def pixart(tmp_path: os.PathLike) -> object:
    torch.manual_seed(0)
    encoder = transformers.T5EncoderModel(transformers.T5Config(
        vocab_size=8, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2, relative_attention_num_buckets=8,
        decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)).eval()
    transformer = diffusers.PixArtTransformer2DModel(
        sample_size=8, num_layers=1, patch_size=2, attention_head_dim=8, num_attention_heads=2, in_channels=4,
        out_channels=8, caption_channels=16, cross_attention_dim=16, norm_num_groups=4)
    return diffusers.PixArtAlphaPipeline(tokenizer=t5_tokenizer(tmp_path), text_encoder=encoder, vae=tiny_vae(levels=1),
                                         transformer=transformer, scheduler=diffusers.DPMSolverMultistepScheduler())


def stable_diffusion_3(tmp_path: os.PathLike) -> object:
    """SD3 without its T5 encoder (diffusers gives the transformer zeros for its states): two CLIP encoders with
    projections, a flow-matching scheduler, and a VAE with a shift."""
    torch.manual_seed(0)
    transformer = diffusers.SD3Transformer2DModel(
        sample_size=8, patch_size=2, in_channels=4, num_layers=1, attention_head_dim=8, num_attention_heads=2,
        joint_attention_dim=32, caption_projection_dim=16, pooled_projection_dim=16, out_channels=4,
        pos_embed_max_size=16)
    vae = diffusers.AutoencoderKL(in_channels=3, out_channels=3, block_out_channels=(8,),
                                  down_block_types=("DownEncoderBlock2D",), up_block_types=("UpDecoderBlock2D",),
                                  latent_channels=4, norm_num_groups=4, sample_size=16, layers_per_block=1,
                                  shift_factor=0.1, scaling_factor=1.5)
    return diffusers.StableDiffusion3Pipeline(
        transformer=transformer, scheduler=diffusers.FlowMatchEulerDiscreteScheduler(shift=3.0), vae=vae,
        text_encoder=clip_encoder(projection=True), tokenizer=clip_tokenizer(tmp_path, "tok"),
        text_encoder_2=clip_encoder(projection=True), tokenizer_2=clip_tokenizer(tmp_path, "tok2"),
        text_encoder_3=None, tokenizer_3=None)


def export_and_compare(tmp_path: os.PathLike, pipe: object, steps: int = 2, export: dict | None = None,
                       **call: object) -> dict:
    """Save ``pipe``, export it, and assert the ONNX pipeline's image is the diffusers pipeline's on the same
    prompt, latents and generator; returns the programs."""
    source, out = os.path.join(tmp_path, "pipe"), os.path.join(tmp_path, "onnx")
    pipe.save_pretrained(source)
    export = {"streaming": True, **(export or {})}  # the images are compared below: streamed unless asked to load
    programs = export_diffusion(source, out, **export)
    runner = OnnxDiffusionPipeline.from_folder(out)
    unet = getattr(pipe, "unet", None) or pipe.transformer
    side = unet.config.sample_size
    latents = torch.randn(1, unet.config.in_channels, side, side, generator=torch.Generator().manual_seed(1))
    expected = pipe(PROMPT, num_inference_steps=steps, latents=latents.clone(), output_type="np",
                    generator=torch.Generator().manual_seed(2), **call).images
    shared = {key: value for key, value in call.items() if key == "max_sequence_length"}  # the rest: diffusers'
    got = runner(PROMPT, num_inference_steps=steps, latents=latents.clone(), output_type="np",
                 generator=torch.Generator().manual_seed(2), **shared).images
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=0)
    pil = runner(PROMPT, num_inference_steps=1, latents=latents.clone()).images
    assert pil[0].size == (expected.shape[2], expected.shape[1])
    for name, prog in programs.items():
        assert prog.model.metadata_props[metadata.TASK] == "text-to-image"
        assert str(prog.report).startswith("onnxport export report: NOT VERIFIED") == export["streaming"]
        assert os.path.isfile(os.path.join(out, name, "model.onnx"))
        assert os.path.isfile(os.path.join(out, name, "config.json"))
    assert os.path.isfile(os.path.join(out, "model_index.json"))
    assert os.path.isfile(os.path.join(out, "scheduler", "scheduler_config.json"))
    return programs


def test_stable_diffusion(tmp_path):
    """The image of one prompt, then two prompts with negative ones (a batch of 4 with guidance) at another size
    than the config's: batch and latent height and width are dynamic. The VAE encoder gives the latent
    distribution's mean and log-variance."""
    pipe = stable_diffusion(tmp_path)
    programs = export_and_compare(tmp_path, pipe, export={"reuse_blocks": False})
    assert set(programs) == {"text_encoder", "unet", "vae_decoder", "vae_encoder"}
    assert programs["unet"].input_names == ["sample", "timestep", "encoder_hidden_states"]
    assert programs["vae_encoder"].output_names == ["latent_parameters"]
    assert pick_task(os.path.join(tmp_path, "pipe")).task == "text-to-image"  # --task auto
    runner = pipeline(os.path.join(tmp_path, "onnx"))  # what onnxport.hf.pipeline gives a text-to-image folder
    assert isinstance(runner, OnnxDiffusionPipeline)
    with pytest.raises(InvalidInputError, match="does not quantize a text-to-image pipeline"):
        export_hf(os.path.join(tmp_path, "pipe"), "auto", os.path.join(tmp_path, "int4"), quantize="int4")
    assert not os.path.exists(os.path.join(tmp_path, "int4"))
    prompts, negatives = [PROMPT, "a blue dog"], ["dog", "cat"]
    latents = torch.randn(2, 4, 12, 16, generator=torch.Generator().manual_seed(3))
    expected = pipe(prompts, negative_prompt=negatives, height=24, width=32, num_inference_steps=2,
                    latents=latents.clone(), output_type="np", guidance_scale=3.0).images
    got = runner(prompts, negative_prompt=negatives, height=24, width=32, num_inference_steps=2,
                 latents=latents.clone(), output_type="np", guidance_scale=3.0).images
    assert got.shape == (2, 24, 32, 3)
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=0)
    image = torch.rand(3, 3, 24, 32, generator=torch.Generator().manual_seed(4)) * 2 - 1
    with torch.no_grad():
        want = pipe.vae.encode(image).latent_dist.parameters
    encoded = runner.models["vae_encoder"](sample=image)["latent_parameters"]
    torch.testing.assert_close(encoded, want, atol=1e-4, rtol=1e-4)


@pytest.mark.sweep
def test_stable_diffusion_xl(tmp_path):
    programs = export_and_compare(tmp_path, stable_diffusion_xl(tmp_path), export={"reuse_blocks": False})
    assert programs["unet"].input_names == ["sample", "timestep", "encoder_hidden_states", "text_embeds", "time_ids"]
    assert programs["text_encoder_2"].output_names[0] == "text_embeds"


@pytest.mark.sweep
def test_pixart(tmp_path):
    programs = export_and_compare(tmp_path, pixart(tmp_path), export={"streaming": False, "reuse_blocks": False},
                                  use_resolution_binning=False, clean_caption=False, max_sequence_length=24)
    assert all(prog.report.verification is not None for prog in programs.values())  # loaded, so verified
    assert "encoder_attention_mask" in programs["transformer"].input_names


@pytest.mark.sweep
def test_stable_diffusion_3(tmp_path):
    programs = export_and_compare(tmp_path, stable_diffusion_3(tmp_path), export={"reuse_blocks": False},
                                  max_sequence_length=8)
    assert programs["transformer"].input_names == ["hidden_states", "encoder_hidden_states", "timestep",
                                                   "pooled_projections"]
    assert "text_encoder_3" not in programs


def test_wrong_directory(tmp_path):
    out = os.path.join(tmp_path, "out")
    with pytest.raises(InvalidInputError, match="no model_index.json") as caught:
        export_diffusion(tmp_path, out)
    assert "save_pretrained" in caught.value.fix
    with pytest.raises(InvalidInputError, match="does not exist"):
        export_diffusion(os.path.join(tmp_path, "missing"), out)
    with open(os.path.join(tmp_path, "model_index.json"), "w", encoding="utf-8") as f:
        json.dump({"_class_name": "StableDiffusionPipeline", "vae": ["diffusers", "AutoencoderKL"]}, f)
    with pytest.raises(InvalidInputError, match="no unet or transformer"):
        export_diffusion(tmp_path, out)
    with open(os.path.join(tmp_path, "model_index.json"), "w", encoding="utf-8") as f:
        json.dump({"_class_name": "StableDiffusionPipeline", "vae": ["diffusers", "AutoencoderKL"],
                   "unet": ["diffusers", "UNet2DConditionModel"]}, f)
    with pytest.raises(InvalidInputError, match="unet has no config.json"):
        export_diffusion(tmp_path, out)
    assert not os.path.exists(out)
    for name in ("unet", "vae"):
        os.makedirs(os.path.join(tmp_path, name))
        with open(os.path.join(tmp_path, name, "config.json"), "w", encoding="utf-8") as f:
            f.write("{}")
    with open(out, "w", encoding="utf-8") as f:
        f.write("not a folder")
    with pytest.raises(InvalidInputError, match="it is a file"):
        export_diffusion(tmp_path, out)
    with pytest.raises(InvalidInputError, match="no vae_decoder/model.onnx"):
        OnnxDiffusionPipeline.from_folder(tmp_path)
