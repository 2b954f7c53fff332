"""The zoo: tiny random-config models people export, as data.

Each ``ZooCase`` builds a model from a small config (no downloads) and makes realistic inputs at a
given (batch, size): token ids inside the vocabulary, attention masks whose last row is right-padded,
images and audio of the model's own shape. ``dynamic`` names the dims that vary. One runner
(``tests/zoo/test_zoo.py``) exports every case through the public API and checks it at two sizes;
``bench/zoo.py`` times the same cases for the table in ``bench/zoo.md``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch.export import Dim

Inputs = Callable[[int, int], dict[str, Any]]

BS = {0: Dim.DYNAMIC, 1: Dim.DYNAMIC}  # batch and sequence
B = {0: Dim.DYNAMIC}
VOCAB = 99
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, vocab_size=VOCAB,
            max_position_embeddings=128)


@dataclasses.dataclass(frozen=True)
class ZooCase:
    """One model: ``build()`` gives it, ``inputs(batch, size)`` its kwargs, ``dynamic`` its dynamic_shapes."""

    name: str
    family: str
    build: Callable[[], torch.nn.Module]
    inputs: Inputs
    dynamic: dict[str, Any]
    example: tuple[int, int] = (2, 8)   # (batch, size) exported from
    other: tuple[int, int] = (3, 5)     # (batch, size) checked against eager afterwards
    tol: float = 1e-4
    slow: bool = False


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def ids(batch: int, seq: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, VOCAB, (batch, seq), generator=_gen(seed))


def padded_mask(batch: int, seq: int) -> torch.Tensor:
    """Ones, with the last row right-padded (as a tokenizer pads the shorter texts of a batch)."""
    mask = torch.ones(batch, seq, dtype=torch.int64)
    mask[-1, max(1, seq - 3):] = 0
    return mask


def text(batch: int, seq: int) -> dict[str, Any]:
    return {"input_ids": ids(batch, seq), "attention_mask": padded_mask(batch, seq)}


def causal(batch: int, seq: int) -> dict[str, Any]:
    return {**text(batch, seq), "use_cache": False}


def seq2seq(batch: int, seq: int) -> dict[str, Any]:
    return {**text(batch, seq), "decoder_input_ids": ids(batch, max(2, seq - 3), seed=1), "use_cache": False}


def image(channels: int = 3, side: int = 32) -> Inputs:
    return lambda batch, size: {"pixel_values": torch.randn(batch, channels, side, side, generator=_gen(batch))}


def sized_image(batch: int, size: int) -> dict[str, Any]:
    """An image whose side follows ``size`` (4 * size pixels), for models that take any image size."""
    return {"pixel_values": torch.randn(batch, 3, 4 * size, 4 * size, generator=_gen(batch))}


def text_and_image(batch: int, seq: int) -> dict[str, Any]:
    return {**text(batch, seq), **image()(batch, seq)}


def audio(batch: int, size: int) -> dict[str, Any]:
    return {"input_values": torch.randn(batch, 200 * size, generator=_gen(batch))}


def _t():  # transformers is a test dependency; imported when a case is built
    import transformers

    return transformers


def _causal_lm(config: str, **kw: Any) -> Callable[[], torch.nn.Module]:
    return lambda: _t().AutoModelForCausalLM.from_config(getattr(_t(), config)(**kw))


def _encoder(config: str, **kw: Any) -> Callable[[], torch.nn.Module]:
    return lambda: _t().AutoModel.from_config(getattr(_t(), config)(**kw))


def _vision(model: str, config: str, **kw: Any) -> Callable[[], torch.nn.Module]:
    return lambda: getattr(_t(), model)(getattr(_t(), config)(**kw))


S2S = dict(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
           decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=128,
           pad_token_id=1, decoder_start_token_id=2)
VIS = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=32, patch_size=8)
TEXT_SIDE = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                 max_position_embeddings=64)
CONV_AUDIO = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, conv_dim=(16, 16),
                  conv_stride=(5, 4), conv_kernel=(10, 8), num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2)
S2S_DYNAMIC = {"input_ids": BS, "attention_mask": BS, "decoder_input_ids": BS}


def _whisper() -> torch.nn.Module:
    config = _t().WhisperConfig(
        vocab_size=VOCAB, num_mel_bins=16, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_source_positions=32,
        max_target_positions=64, pad_token_id=1, decoder_start_token_id=2, bos_token_id=2, eos_token_id=2,
    )
    return _t().WhisperForConditionalGeneration(config)


def whisper_inputs(batch: int, seq: int) -> dict[str, Any]:
    return {"input_features": torch.randn(batch, 16, 64, generator=_gen(batch)), "decoder_input_ids": ids(batch, seq),
            "use_cache": False}


def _unet() -> torch.nn.Module:
    import diffusers

    return diffusers.UNet2DConditionModel(
        sample_size=16, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(16, 32),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=16, attention_head_dim=8, norm_num_groups=8,
    )


def unet_inputs(batch: int, seq: int) -> dict[str, Any]:
    return {"sample": torch.randn(batch, 4, 16, 16, generator=_gen(batch)),
            "timestep": torch.randint(0, 1000, (batch,), generator=_gen(seq)),
            "encoder_hidden_states": torch.randn(batch, seq, 16, generator=_gen(seq))}


def _vae() -> torch.nn.Module:
    import diffusers

    return diffusers.AutoencoderKL(
        in_channels=3, out_channels=3, block_out_channels=(16, 32), down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2, latent_channels=4, norm_num_groups=8, sample_size=32,
    )


def vae_inputs(batch: int, size: int) -> dict[str, Any]:
    return {"sample": torch.randn(batch, 3, 4 * size, 4 * size, generator=_gen(batch))}


def _dit() -> torch.nn.Module:
    import diffusers

    return diffusers.DiTTransformer2DModel(
        num_attention_heads=2, attention_head_dim=8, in_channels=4, out_channels=8, num_layers=2, sample_size=8,
        patch_size=2, num_embeds_ada_norm=10, norm_num_groups=8,
    )


def dit_inputs(batch: int, size: int) -> dict[str, Any]:
    return {"hidden_states": torch.randn(batch, 4, 8, 8, generator=_gen(batch)),
            "timestep": torch.randint(0, 1000, (batch,), generator=_gen(size)),
            "class_labels": torch.randint(0, 10, (batch,), generator=_gen(size + 1))}


TEXT_DYNAMIC = {"input_ids": BS, "attention_mask": BS}

ZOO = [
    # text encoders
    ZooCase("bert", "text encoder", _encoder("BertConfig", **TINY), text, TEXT_DYNAMIC),
    ZooCase("roberta", "text encoder", _encoder("RobertaConfig", **TINY), text, TEXT_DYNAMIC),
    ZooCase("distilbert", "text encoder", _encoder("DistilBertConfig", vocab_size=VOCAB, dim=32, n_layers=2, n_heads=4,
                                                   hidden_dim=64), text, TEXT_DYNAMIC),
    ZooCase("albert", "text encoder", _encoder("AlbertConfig", embedding_size=16, **TINY), text, TEXT_DYNAMIC),
    ZooCase("electra", "text encoder", _encoder("ElectraConfig", embedding_size=16, **TINY), text, TEXT_DYNAMIC),
    ZooCase("deberta_v2", "text encoder", _encoder("DebertaV2Config", **TINY), text, TEXT_DYNAMIC),
    ZooCase("xlm_roberta", "text encoder", _encoder("XLMRobertaConfig", **TINY), text, TEXT_DYNAMIC),
    ZooCase("mpnet", "text encoder", _encoder("MPNetConfig", **TINY), text, TEXT_DYNAMIC),
    ZooCase("modernbert", "text encoder", _encoder("ModernBertConfig", **{**TINY, "num_hidden_layers": 3},
                                                   pad_token_id=0), text, TEXT_DYNAMIC),
    # decoders
    ZooCase("gpt2", "decoder", _causal_lm("GPT2Config", vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4,
                                          n_positions=128), causal, TEXT_DYNAMIC),
    ZooCase("llama", "decoder", _causal_lm("LlamaConfig", **TINY, num_key_value_heads=2), causal, TEXT_DYNAMIC),
    ZooCase("qwen2", "decoder", _causal_lm("Qwen2Config", **TINY, num_key_value_heads=2), causal, TEXT_DYNAMIC),
    ZooCase("qwen3", "decoder", _causal_lm("Qwen3Config", **TINY, head_dim=8, num_key_value_heads=2), causal,
            TEXT_DYNAMIC),
    ZooCase("mistral", "decoder", _causal_lm("MistralConfig", **TINY, num_key_value_heads=2), causal, TEXT_DYNAMIC),
    ZooCase("phi", "decoder", _causal_lm("PhiConfig", **TINY), causal, TEXT_DYNAMIC),
    ZooCase("phi3", "decoder", _causal_lm("Phi3Config", **TINY, pad_token_id=0), causal, TEXT_DYNAMIC),
    ZooCase("gemma", "decoder", _causal_lm("GemmaConfig", **TINY, head_dim=8, num_key_value_heads=2), causal,
            TEXT_DYNAMIC),
    ZooCase("gemma2", "decoder", _causal_lm("Gemma2Config", **TINY, head_dim=8, num_key_value_heads=2), causal,
            TEXT_DYNAMIC),
    ZooCase("gpt_neox", "decoder", _causal_lm("GPTNeoXConfig", **TINY), causal, TEXT_DYNAMIC),
    ZooCase("falcon", "decoder", _causal_lm("FalconConfig", vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                            num_attention_heads=4), causal, TEXT_DYNAMIC),
    ZooCase("opt", "decoder", _causal_lm("OPTConfig", vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                         num_attention_heads=4, ffn_dim=64, word_embed_proj_dim=32,
                                         max_position_embeddings=128), causal, TEXT_DYNAMIC),
    ZooCase("bloom", "decoder", _causal_lm("BloomConfig", vocab_size=VOCAB, hidden_size=32, n_layer=2, n_head=4),
            causal, TEXT_DYNAMIC),
    ZooCase("olmo", "decoder", _causal_lm("OlmoConfig", **TINY), causal, TEXT_DYNAMIC),
    ZooCase("starcoder2", "decoder", _causal_lm("Starcoder2Config", **TINY, num_key_value_heads=2), causal,
            TEXT_DYNAMIC),
    ZooCase("gptj", "decoder", _causal_lm("GPTJConfig", vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, rotary_dim=4,
                                          n_positions=128), causal, TEXT_DYNAMIC),
    ZooCase("mixtral", "decoder", _causal_lm("MixtralConfig", **TINY, num_key_value_heads=2, num_local_experts=4,
                                             num_experts_per_tok=2), causal, TEXT_DYNAMIC),
    # from the census: gated delta-net layers (scanned chunks) beside attention ones, experts in every layer
    ZooCase("qwen3_next", "decoder", _causal_lm(
        "Qwen3NextConfig", **TINY, head_dim=8, num_key_value_heads=2, linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=8, linear_value_head_dim=8, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
        shared_expert_intermediate_size=32, layer_types=["linear_attention", "full_attention"]), causal, TEXT_DYNAMIC,
        slow=True),
    # seq2seq
    ZooCase("t5", "seq2seq", lambda: _t().T5ForConditionalGeneration(_t().T5Config(
        vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, decoder_start_token_id=0)),
        seq2seq, S2S_DYNAMIC),
    ZooCase("bart", "seq2seq", lambda: _t().BartForConditionalGeneration(_t().BartConfig(**S2S)), seq2seq, S2S_DYNAMIC),
    ZooCase("marian", "seq2seq", lambda: _t().MarianMTModel(_t().MarianConfig(**S2S)), seq2seq, S2S_DYNAMIC),
    ZooCase("pegasus", "seq2seq", lambda: _t().PegasusForConditionalGeneration(_t().PegasusConfig(**S2S)), seq2seq,
            S2S_DYNAMIC),
    ZooCase("mbart", "seq2seq", lambda: _t().MBartForConditionalGeneration(_t().MBartConfig(**S2S)), seq2seq,
            S2S_DYNAMIC),
    # vision
    ZooCase("vit", "vision", _vision("ViTModel", "ViTConfig", **VIS), image(), {"pixel_values": B}),
    ZooCase("deit", "vision", _vision("DeiTModel", "DeiTConfig", **VIS), image(), {"pixel_values": B}),
    ZooCase("dinov2", "vision", _vision("Dinov2Model", "Dinov2Config", **VIS), image(), {"pixel_values": B}),
    ZooCase("beit", "vision", _vision("BeitModel", "BeitConfig", **VIS), image(), {"pixel_values": B}),
    ZooCase("swin", "vision", _vision("SwinModel", "SwinConfig", image_size=32, patch_size=4, embed_dim=16,
                                      depths=[1, 1], num_heads=[2, 2], window_size=4), image(), {"pixel_values": B}),
    ZooCase("resnet", "vision", _vision("ResNetModel", "ResNetConfig", embedding_size=8, hidden_sizes=[8, 16, 24, 32],
                                        depths=[1, 1, 1, 1]), sized_image,
            {"pixel_values": {0: Dim.DYNAMIC, 2: Dim.DYNAMIC, 3: Dim.DYNAMIC}}, example=(2, 8), other=(1, 10)),
    ZooCase("convnext", "vision", _vision("ConvNextModel", "ConvNextConfig", hidden_sizes=[8, 16, 24, 32],
                                          depths=[1, 1, 1, 1]), image(), {"pixel_values": B}),
    ZooCase("segformer", "vision", _vision("SegformerModel", "SegformerConfig", num_encoder_blocks=2, depths=[1, 1],
                                           sr_ratios=[2, 1], hidden_sizes=[8, 16], num_attention_heads=[1, 2],
                                           decoder_hidden_size=16), image(), {"pixel_values": B}),
    ZooCase("mobilevit", "vision", _vision("MobileViTModel", "MobileViTConfig", image_size=32,
                                           hidden_sizes=[16, 24, 32], neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 48]),
            image(), {"pixel_values": B}),
    # multimodal
    ZooCase("clip", "multimodal", lambda: _t().CLIPModel(_t().CLIPConfig(text_config=TEXT_SIDE, vision_config=VIS)),
            text_and_image, {**TEXT_DYNAMIC, "pixel_values": B}),
    ZooCase("siglip", "multimodal", lambda: _t().SiglipModel(_t().SiglipConfig(text_config=TEXT_SIDE,
                                                                                 vision_config=VIS)),
            lambda b, s: {"input_ids": ids(b, s), **image()(b, s)}, {"input_ids": BS, "pixel_values": B}),
    # audio
    ZooCase("wav2vec2", "audio", _vision("Wav2Vec2Model", "Wav2Vec2Config", **CONV_AUDIO), audio,
            {"input_values": BS}),
    ZooCase("hubert", "audio", _vision("HubertModel", "HubertConfig", **CONV_AUDIO), audio, {"input_values": BS}),
    ZooCase("ast", "audio", _vision("ASTModel", "ASTConfig", hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                    intermediate_size=64, num_mel_bins=16, max_length=32, patch_size=8,
                                    frequency_stride=8, time_stride=8),
            lambda b, s: {"input_values": torch.randn(b, 32, 16, generator=_gen(b))}, {"input_values": B}),
    ZooCase("whisper", "audio", _whisper, whisper_inputs, {"input_features": B, "decoder_input_ids": BS}),
    # diffusers
    ZooCase("unet", "diffusion", _unet, unet_inputs, {"sample": B, "timestep": B, "encoder_hidden_states": BS},
            tol=1e-3),
    ZooCase("vae", "diffusion", _vae, vae_inputs, {"sample": {0: Dim.DYNAMIC, 2: Dim.DYNAMIC, 3: Dim.DYNAMIC}},
            example=(2, 8), other=(1, 12), tol=1e-3),
    ZooCase("dit", "diffusion", _dit, dit_inputs, {"hidden_states": B, "timestep": B, "class_labels": B}, tol=1e-3),
]
