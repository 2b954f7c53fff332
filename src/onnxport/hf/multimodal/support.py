"""Which vision-language types onnxport exports: those whose folders are tested to generate transformers' tokens
(``tests/test_export_hf_vlm.py``, the census in ``bench/image_text_census.md``); another is refused before anything
is loaded or written, with what stands in the way where it is known."""

from __future__ import annotations

from typing import Any

from onnxport.errors import InvalidInputError

__all__ = ["AUDIO_SUPPORTED", "CENSUS", "SUPPORTED", "TESTED", "check_supported"]

# Tested in tests/test_export_hf_vlm*.py and tests/test_transformers_js_vlm.py, with their processors' prompts (or
# their images alone, for an encoder that reads them: test_export_hf_vlm_encoded.py):
TESTED = ("llava", "mistral3", "internvl", "gemma3", "qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5",
          "qwen3_5_moe", "idefics3", "smolvlm", "paligemma", "florence2", "glm_ocr", "lighton_ocr", "gemma4", "llama4",
          "video_llava", "deepseek_vl_hybrid", "paddleocr_vl", "instructblip", "vision-encoder-decoder", "pix2struct",
          "pp_formulanet", "blip")
# Right in the census (one image; a padded batch of prompts of one and two images of other sizes):
CENSUS = ("aya_vision", "cohere2_vision", "cosmos3_omni", "exaone4_5", "glm46v", "glm4v", "glm4v_moe", "glmga",
          "got_ocr2", "hyperclovax_vision_v2", "idefics2", "granite_docling", "minimax_m3_vl", "ovis2",
          "pp_chart2table", "qianfan_ocr", "vipllava", "mistral_large4", "blip-2", "deepseek_vl", "aria",
          "video_llama_3", "lfm3_vl", "hunyuan_vl", "muse_glimmer", "ernie4_5_vl_moe",
          "cosmos3_edge", "janus", "llava_next", "llava_next_video",
          "llava_onevision", "lfm2_vl", "instructblipvideo",
          "gemma4_unified", "fast_vlm", "molmo2", "qwen2_5_omni_thinker", "qwen3_omni_moe_thinker",
          "inkling_mm_model", "inkling2", "inkling2_loop", "gemma3n")
SUPPORTED = (*TESTED, *CENSUS)
_NO_IMAGE_TOKEN = ("its image features enter its language model otherwise than as rows at the image tokens of the "
                   "prompt or as its encoder's input (as a prefix, through cross-attention layers of a decoder-only "
                   "model, at positions a mask marks, or beside layout boxes), which onnxport's split does not take "
                   "yet")
_GRID_LOOP = ("its vision tower and merger read each image's grid of patches (target_sizes) in a Python loop over the "
              "images (their windows and merged blocks), which onnxport's loop rewrites do not cover yet")
_IMAGE_TOKENIZER = ("its images enter its language model as discrete codes of an image tokenizer (a VQ codebook's "
                    "ids among its vocabulary), not as rows of image features, which onnxport's split does not take "
                    "yet")
_GRID_POSITIONS = ("its vision tower makes each image's position embeddings in a Python loop over the images' grids "
                   "(for t, h, w in grid_thw: one interpolation per grid), which onnxport's loop rewrites do not cover "
                   "yet")
_GLOBAL_AND_LOCAL = ("its image features join each image's global view and its local crops, laid out by the crops' "
                     "grid (patches_grid), in a Python loop over the images, which onnxport's loop rewrites do not "
                     "cover yet")
_WHY_NOT = {
    "deepseek_ocr2": _GLOBAL_AND_LOCAL, "unlimited_ocr": _GLOBAL_AND_LOCAL,
    "kimi_k25": _GRID_POSITIONS, "hy_v4_vl": _GRID_POSITIONS,
    "nemotron_h_omni": "its image features are pixel-shuffled image by image in a Python loop over the images' grids "
                       "(image_grid_hw), which onnxport's loop rewrites do not cover yet",
    "fuyu": "its processor gives each image as a sequence of patches with newline tokens in the prompt "
            "(FuyuProcessor), of which onnxport makes no examples yet",
    "chameleon": _IMAGE_TOKENIZER, "emu3": _IMAGE_TOKENIZER, "apertus1p5": _IMAGE_TOKENIZER,
    "git": _NO_IMAGE_TOKEN, "idefics": _NO_IMAGE_TOKEN, "kosmos-2": _NO_IMAGE_TOKEN,
    "kosmos-2.5": _NO_IMAGE_TOKEN, "udop": _NO_IMAGE_TOKEN,
    "mistral4": "its image-text-to-text class in transformers (Mistral4ForCausalLM) takes no images: export it for "
                "text-generation",
    "shieldgemma2": "its image-text-to-text class (Gemma3ForConditionalGeneration on a ShieldGemma 2 config) saves "
                    "its weights under names it does not load back (transformers initialises them at random)",
    "t5gemma2": "the first step of its decoder (sliding-window attention over an encoder-decoder cache) is captured "
                "by torch.export only up to the window's length, which one graph for every length cannot hold",
    "minicpmv4_6": _GRID_LOOP, "minicpmv4_7": _GRID_LOOP, "minicpm_ocr": _GRID_LOOP,
    "mllama": "its image rows enter through cross-attention layers of its text decoder (cross_attention_states, "
              "masked per image and tile), which onnxport's split into image encoder, embedding and decoder does not "
              "take yet",
    "pi0": "PI0ForConditionalGeneration predicts robot actions by flow matching (no generate of text tokens): it is "
           "not an image-text-to-text model for any runtime onnxport writes for",
    "evolla": "EvollaForProteinText2Text reads protein sequences, not images",
    "diffusion_gemma": "DiffusionGemmaForBlockDiffusion generates by block diffusion, not token by token, which no "
                       "runtime onnxport writes for runs",
}


# audio-text-to-text (tests/test_transformers_js_audio_text.py): models that hear and do not see, split as the others
# with their audio encoder in place of the image encoder (families.AUDIO_ONLY).
AUDIO_SUPPORTED = ("voxtral", "granite_speech")


def check_supported(config: Any, task: str = "image-text-to-text") -> None:
    """Refuse a vision-language model (for ``audio-text-to-text``, a model that hears) whose split is not known to
    generate as transformers does."""
    kind = config.model_type
    if task == "audio-text-to-text":
        if kind in AUDIO_SUPPORTED:
            return
        raise InvalidInputError(f"onnxport does not export {kind} models for audio-text-to-text yet: its split into "
                                "audio encoder, embedding and decoder is not tested to generate as transformers does",
                                fix=f"export one of {', '.join(AUDIO_SUPPORTED)}; or its text model for "
                                "text-generation, or the whole model with onnxport.export")
    if kind in SUPPORTED:
        return
    if kind in AUDIO_SUPPORTED:
        raise InvalidInputError(f"a {kind} model hears and does not see: onnxport exports it for audio-text-to-text",
                                fix="pass task='audio-text-to-text' (--task audio-text-to-text)")
    why = _WHY_NOT.get(kind, "its split into image encoder, embedding and decoder is not tested to generate as "
                             "transformers does")
    raise InvalidInputError(f"onnxport does not export {kind} models for image-text-to-text yet: {why}",
                            fix=f"export one of {', '.join(SUPPORTED)}; or export its text model for "
                            "text-generation, or the whole model with onnxport.export")
