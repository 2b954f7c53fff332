"""Run a folder ``export_diffusion`` wrote: text to image in onnxruntime, as diffusers' pipeline does it in PyTorch.

``OnnxDiffusionPipeline.from_folder(OUT)`` opens each model of the folder in onnxruntime and loads, with
diffusers and transformers, what is not a model: the scheduler (the class ``model_index.json`` names, from
``OUT/scheduler``), the tokenizers and the image processor. Calling it runs the pipeline's own steps: the
prompt (and the negative prompt, for classifier-free guidance) encoded, latents drawn with the torch generator
given (or taken as given), the denoising loop stepped by the scheduler, and the latents decoded into images,
``"pil"`` or ``"np"`` as diffusers returns them. Four kinds of pipeline are run as diffusers runs them:
Stable Diffusion (a UNet and one CLIP text encoder), SDXL (a UNet with added text and time conditions and two
CLIP text encoders, conditioned on their penultimate hidden states), PixArt (a transformer and a T5 text
encoder, with its attention mask) and SD3 (a transformer conditioned on two CLIP encoders and T5, with a
flow-matching scheduler). Not run: SDXL's invisible watermark, PixArt's resolution binning and caption
cleaning, safety checkers, prompt weighting, LoRA scales, and schedulers' custom timesteps or sigmas.
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from onnxport.arguments import as_path
from onnxport.errors import InvalidInputError
from onnxport.hf.diffusion import INDEX_FILE, TEXT_ENCODERS, read_model_index

__all__ = ["OnnxDiffusionPipeline", "text_to_image"]

_NUMPY = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
          "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(bool)": np.bool_}
_GUIDANCE = {"sd": 7.5, "sdxl": 5.0, "pixart": 4.5, "sd3": 7.0}  # the pipelines' default guidance scales
_EXPORT_FIX = "export the pipeline with onnxport.hf.diffusion.export_diffusion(directory, folder)"


class OnnxModel:
    """One ONNX model of the folder in onnxruntime: called with named arrays (or tensors), each cast to the type
    the model declares; returns its outputs by name as torch tensors."""

    def __init__(self, path: str, providers: Sequence[Any] | None = None):
        import onnxruntime as ort

        self.path = path
        self.session = ort.InferenceSession(path, providers=list(providers) if providers else ["CPUExecutionProvider"])
        self.inputs = {i.name: _NUMPY.get(i.type, np.float32) for i in self.session.get_inputs()}
        self.outputs = [o.name for o in self.session.get_outputs()]
        with open(os.path.join(os.path.dirname(path), "config.json"), encoding="utf-8") as f:
            self.config = json.load(f)

    def __repr__(self) -> str:
        return f"OnnxModel({self.path!r}, inputs={list(self.inputs)}, outputs={self.outputs})"

    def __call__(self, **inputs: Any) -> dict[str, torch.Tensor]:
        feeds = {}
        for name, value in inputs.items():
            if name not in self.inputs:
                continue
            array = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
            feeds[name] = np.ascontiguousarray(array.astype(self.inputs[name], copy=False))
        missing = [name for name in self.inputs if name not in feeds]
        if missing:
            raise InvalidInputError(f"{self.path} needs {', '.join(missing)}, which the runner did not give",
                                    fix=f"export the folder again with this version of onnxport ({_EXPORT_FIX})")
        return {name: torch.from_numpy(value) for name, value in zip(self.outputs, self.session.run(None, feeds))}


class OnnxDiffusionPipeline:
    """A text-to-image pipeline of ONNX models, called as diffusers' pipelines are:
    ``pipe(prompt, num_inference_steps=..., guidance_scale=..., generator=..., latents=..., output_type="np")``."""

    def __init__(self, folder: str, index: dict[str, Any], models: dict[str, OnnxModel], tokenizers: list[Any],
                 scheduler: Any):
        from diffusers.image_processor import VaeImageProcessor

        self.folder, self.index, self.models = folder, index, models
        self.tokenizers, self.scheduler = tokenizers, scheduler
        self.encoders = [models[name] for name in TEXT_ENCODERS if name in models]
        self.denoiser = models.get("unet") or models["transformer"]
        self.vae_config = models["vae_decoder"].config
        self.vae_scale_factor = 2 ** (len(self.vae_config.get("block_out_channels", [0] * 4)) - 1)
        self.image_processor = VaeImageProcessor(vae_scale_factor=self.vae_scale_factor)
        if "unet" in models:
            self.kind = "sdxl" if "time_ids" in self.denoiser.inputs else "sd"
        elif "encoder_attention_mask" in self.denoiser.inputs:
            self.kind = "pixart"
        elif "pooled_projections" in self.denoiser.inputs:
            self.kind = "sd3"
        else:
            raise InvalidInputError(f"onnxport does not run {index['_class_name']} ({self.denoiser.path} takes "
                                    f"{', '.join(self.denoiser.inputs)})",
                                    fix="run Stable Diffusion, SDXL, PixArt or SD3 folders")

    @classmethod
    def from_folder(cls, folder: str | os.PathLike, *, providers: Sequence[Any] | None = None) -> OnnxDiffusionPipeline:
        """Open the folder ``export_diffusion`` wrote (``providers``: onnxruntime's, default the CPU)."""
        folder = as_path(folder, "folder", "pass the folder export-hf wrote")
        index = read_model_index(folder)
        models = {}
        for name in (*TEXT_ENCODERS, "unet", "transformer", "vae_decoder", "vae_encoder"):
            path = os.path.join(folder, name, "model.onnx")
            if os.path.isfile(path):
                models[name] = OnnxModel(path, providers)
        for needed in ("vae_decoder",):
            if needed not in models:
                raise InvalidInputError(f"{folder} has no {needed}/model.onnx", fix=_EXPORT_FIX)
        if "unet" not in models and "transformer" not in models:
            raise InvalidInputError(f"{folder} has no unet/model.onnx or transformer/model.onnx", fix=_EXPORT_FIX)
        tokenizers = []
        for encoder in TEXT_ENCODERS:
            if encoder not in models:
                continue
            name = encoder.replace("text_encoder", "tokenizer")
            library, cls_name = (index.get(name) or [None, None])[:2]
            if library is None or not os.path.isdir(os.path.join(folder, name)):
                raise InvalidInputError(f"{folder} has no {name}/ for its {encoder}",
                                        fix=f"copy the pipeline's {name} folder there ({_EXPORT_FIX} copies it)")
            tokenizers.append(getattr(__import__(library), cls_name).from_pretrained(os.path.join(folder, name)))
        library, cls_name = (index.get("scheduler") or [None, None])[:2]
        if library is None or not os.path.isdir(os.path.join(folder, "scheduler")):
            raise InvalidInputError(f"{folder} has no scheduler/", fix=f"copy the pipeline's scheduler folder there "
                                    f"({_EXPORT_FIX} copies it)")
        scheduler = getattr(__import__(library), cls_name).from_pretrained(os.path.join(folder, "scheduler"))
        return cls(folder, index, models, tokenizers, scheduler)

    def __repr__(self) -> str:
        return f"OnnxDiffusionPipeline({self.folder!r}, {self.index['_class_name']}, {self.kind})"

    # --- the prompt -----------------------------------------------------------------------------------------

    def _tokens(self, tokenizer: Any, texts: list[str], max_length: int) -> Any:
        return tokenizer(texts, padding="max_length", max_length=max_length, truncation=True,
                         add_special_tokens=True, return_tensors="pt")

    def _encode_sd(self, texts: list[str]) -> torch.Tensor:
        tokenizer, encoder = self.tokenizers[0], self.encoders[0]
        tokens = self._tokens(tokenizer, texts, tokenizer.model_max_length)
        return encoder(input_ids=tokens.input_ids)["last_hidden_state"]

    def _encode_sdxl(self, texts: list[str], max_length: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The penultimate hidden states of every encoder, concatenated, and the pooled text embeddings."""
        states, pooled = [], None
        for tokenizer, encoder in zip(self.tokenizers, self.encoders):
            tokens = self._tokens(tokenizer, texts, max_length or tokenizer.model_max_length)
            outputs = encoder(input_ids=tokens.input_ids)
            if pooled is None and outputs[encoder.outputs[0]].ndim == 2:  # as diffusers takes it: a 2-D first output
                pooled = outputs[encoder.outputs[0]]
            hidden = sorted((k for k in outputs if k.startswith("hidden_states.")), key=lambda k: int(k.split(".")[1]))
            states.append(outputs[hidden[-2]])
        return torch.cat(states, dim=-1), pooled

    def _encode_sd3(self, texts: list[str], max_sequence_length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Both CLIP encoders' penultimate hidden states, concatenated and padded to the T5 states' width, then
        the T5 states (zeros without a T5 encoder); the CLIP encoders' pooled embeddings, concatenated."""
        states, pooled = [], []
        for tokenizer, encoder in zip(self.tokenizers[:2], self.encoders[:2]):
            outputs = encoder(input_ids=self._tokens(tokenizer, texts, tokenizer.model_max_length).input_ids)
            hidden = sorted((k for k in outputs if k.startswith("hidden_states.")), key=lambda k: int(k.split(".")[1]))
            states.append(outputs[hidden[-2]])
            pooled.append(outputs[encoder.outputs[0]])
        clip = torch.cat(states, dim=-1)
        if len(self.encoders) > 2:
            ids = self._tokens(self.tokenizers[2], texts, max_sequence_length).input_ids
            t5 = self.encoders[2](input_ids=ids, attention_mask=torch.ones_like(ids))["last_hidden_state"]
        else:
            t5 = torch.zeros(len(texts), max_sequence_length, self.denoiser.config["joint_attention_dim"])
        clip = torch.nn.functional.pad(clip, (0, t5.shape[-1] - clip.shape[-1]))
        return torch.cat([clip, t5.to(clip.dtype)], dim=-2), torch.cat(pooled, dim=-1)

    def _encode_pixart(self, texts: list[str], max_length: int) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = self._tokens(self.tokenizers[0], texts, max_length)
        embeds = self.encoders[0](input_ids=tokens.input_ids, attention_mask=tokens.attention_mask)["last_hidden_state"]
        return embeds, tokens.attention_mask

    # --- the pipeline ---------------------------------------------------------------------------------------

    def __call__(self, prompt: str | list[str], negative_prompt: str | list[str] | None = None, *,
                 num_inference_steps: int = 50, guidance_scale: float | None = None, height: int | None = None,
                 width: int | None = None, num_images_per_prompt: int = 1, eta: float = 0.0,
                 generator: torch.Generator | list[torch.Generator] | None = None, latents: torch.Tensor | None = None,
                 output_type: str = "pil", max_sequence_length: int | None = None, return_dict: bool = True) -> Any:
        """Images for ``prompt`` (a text or a list of them), as the diffusers pipeline returns them:
        an ``ImagePipelineOutput`` (``.images``: PIL images, or an array (batch, height, width, 3) in [0, 1]
        with ``output_type="np"``), or the tuple ``(images,)`` with ``return_dict=False``.

        ``latents`` (batch, channels, height / scale, width / scale) replace the noise drawn from ``generator``,
        which the scheduler's steps use too where they draw noise. ``max_sequence_length`` is the length the T5
        prompts are padded to (PixArt's and SD3's; default as diffusers': 120, 300 for PixArt-Sigma, 256 for
        SD3)."""
        texts = [prompt] if isinstance(prompt, str) else list(prompt)
        if not texts or not all(isinstance(t, str) for t in texts):
            raise InvalidInputError("prompt must be a text or a non-empty list of texts", fix="pass prompt='a cat'")
        if output_type not in ("pil", "np", "pt", "latent"):
            raise InvalidInputError(f"output_type must be 'pil', 'np', 'pt' or 'latent', not {output_type!r}",
                                    fix="pass output_type='np' or 'pil'")
        negatives = None
        if negative_prompt is not None:
            negatives = [negative_prompt] * len(texts) if isinstance(negative_prompt, str) else list(negative_prompt)
            if len(negatives) != len(texts):
                raise InvalidInputError(f"{len(negatives)} negative prompts for {len(texts)} prompts",
                                        fix="give one negative prompt per prompt, or a single text")
        if max_sequence_length is None:
            lengths = {"PixArtSigmaPipeline": 300, "StableDiffusion3Pipeline": 256}
            max_sequence_length = lengths.get(self.index["_class_name"], 120)
        scale = _GUIDANCE[self.kind] if guidance_scale is None else guidance_scale
        guided = scale > 1
        size = self.denoiser.config.get("sample_size") or 64
        height = height or size * self.vae_scale_factor
        width = width or size * self.vae_scale_factor
        if height % self.vae_scale_factor or width % self.vae_scale_factor:
            raise InvalidInputError(f"height and width ({height}, {width}) must be multiples of "
                                    f"{self.vae_scale_factor}, the VAE's scale",
                                    fix=f"pass multiples of {self.vae_scale_factor}")
        conditions = self._conditions(texts, negatives, guided, num_images_per_prompt, height, width,
                                      max_sequence_length)
        shape = (len(texts) * num_images_per_prompt, self.denoiser.config["in_channels"],
                 height // self.vae_scale_factor, width // self.vae_scale_factor)
        latents = self._latents(shape, generator, latents)
        self._set_timesteps(num_inference_steps, latents)
        step = inspect.signature(self.scheduler.step).parameters
        extra = {**({"eta": eta} if "eta" in step else {}), **({"generator": generator} if "generator" in step else {})}
        if self.kind == "sd3":
            extra = {}  # as diffusers' SD3 pipeline steps its flow-matching scheduler
        for t in self.scheduler.timesteps:
            model_input = torch.cat([latents] * 2) if guided else latents
            if self.kind != "sd3":
                model_input = self.scheduler.scale_model_input(model_input, t)
            noise = self._denoise(model_input, t, conditions)
            if guided:
                uncond, text = noise.chunk(2)
                noise = uncond + scale * (text - uncond)
            latents = self.scheduler.step(noise, t, latents, **extra, return_dict=False)[0]
        if output_type == "latent":
            images = latents
        else:
            images = self.image_processor.postprocess(self._decode(latents), output_type=output_type,
                                                      do_denormalize=[True] * latents.shape[0])
        from diffusers.pipelines.pipeline_utils import ImagePipelineOutput

        return ImagePipelineOutput(images=images) if return_dict else (images,)

    def _conditions(self, texts: list[str], negatives: list[str] | None, guided: bool, copies: int, height: int,
                    width: int, max_sequence_length: int) -> dict[str, torch.Tensor]:
        """The denoiser's inputs besides the latents and timestep: negative rows first where guided."""
        def repeat(tensor: torch.Tensor) -> torch.Tensor:
            return tensor.repeat_interleave(copies, dim=0)

        if self.kind == "sd":
            embeds = repeat(self._encode_sd(texts))
            if guided:
                embeds = torch.cat([repeat(self._encode_sd(negatives or [""] * len(texts))), embeds])
            return {"encoder_hidden_states": embeds}
        if self.kind == "sd3":
            embeds, pooled = self._encode_sd3(texts, max_sequence_length)
            embeds, pooled = repeat(embeds), repeat(pooled)
            if guided:
                negative, negative_pooled = self._encode_sd3(negatives or [""] * len(texts), max_sequence_length)
                embeds, pooled = torch.cat([repeat(negative), embeds]), torch.cat([repeat(negative_pooled), pooled])
            return {"encoder_hidden_states": embeds, "pooled_projections": pooled}
        if self.kind == "sdxl":
            embeds, pooled = self._encode_sdxl(texts)
            embeds, pooled = repeat(embeds), repeat(pooled)
            if guided:
                if negatives is None and self.index.get("force_zeros_for_empty_prompt", True):
                    negative, negative_pooled = torch.zeros_like(embeds), torch.zeros_like(pooled)
                else:
                    negative, negative_pooled = self._encode_sdxl(negatives or [""] * len(texts), embeds.shape[1])
                    negative, negative_pooled = repeat(negative), repeat(negative_pooled)
                embeds, pooled = torch.cat([negative, embeds]), torch.cat([negative_pooled, pooled])
            time_ids = torch.tensor([[height, width, 0, 0, height, width]], dtype=embeds.dtype)
            return {"encoder_hidden_states": embeds, "text_embeds": pooled,
                    "time_ids": time_ids.repeat(embeds.shape[0], 1)}
        embeds, mask = self._encode_pixart(texts, max_sequence_length)
        embeds, mask = repeat(embeds), repeat(mask)
        if guided:
            negative, negative_mask = self._encode_pixart(negatives or [""] * len(texts), embeds.shape[1])
            embeds, mask = torch.cat([repeat(negative), embeds]), torch.cat([repeat(negative_mask), mask])
        conditions = {"encoder_hidden_states": embeds, "encoder_attention_mask": mask}
        if "resolution" in self.denoiser.inputs:
            rows = embeds.shape[0]
            conditions["resolution"] = torch.tensor([[height, width]], dtype=torch.float32).repeat(rows, 1)
            conditions["aspect_ratio"] = torch.tensor([[height / width]], dtype=torch.float32).repeat(rows, 1)
        return conditions

    def _latents(self, shape: tuple[int, ...], generator: Any, latents: torch.Tensor | None) -> torch.Tensor:
        """The initial noise, drawn as diffusers draws it (or the latents given), scaled for the scheduler."""
        if latents is None:
            from diffusers.utils.torch_utils import randn_tensor

            latents = randn_tensor(shape, generator=generator, device=torch.device("cpu"), dtype=torch.float32)
        elif tuple(latents.shape) != shape:
            raise InvalidInputError(f"latents have shape {list(latents.shape)}, this call needs {list(shape)}",
                                    fix="pass latents of that shape, or height and width that match them")
        latents = latents.to("cpu", torch.float32)
        return latents if self.kind == "sd3" else latents * self.scheduler.init_noise_sigma

    def _set_timesteps(self, steps: int, latents: torch.Tensor) -> None:
        """The scheduler's timesteps for ``steps`` steps; for a flow-matching scheduler with dynamic shifting, the
        shift of the image's length in patches, as diffusers' SD3 pipeline computes it."""
        config = self.scheduler.config
        if self.kind == "sd3" and config.get("use_dynamic_shifting", None):
            from diffusers.pipelines.stable_diffusion_3.pipeline_stable_diffusion_3 import calculate_shift

            patch = self.denoiser.config.get("patch_size", 2)
            length = (latents.shape[2] // patch) * (latents.shape[3] // patch)
            mu = calculate_shift(length, config.get("base_image_seq_len", 256), config.get("max_image_seq_len", 4096),
                                 config.get("base_shift", 0.5), config.get("max_shift", 1.16))
            self.scheduler.set_timesteps(steps, device="cpu", mu=mu)
        else:
            self.scheduler.set_timesteps(steps, device="cpu")

    def _denoise(self, sample: torch.Tensor, t: torch.Tensor, conditions: dict[str, torch.Tensor]) -> torch.Tensor:
        timestep = torch.as_tensor(t).reshape(-1).expand(sample.shape[0])
        name = "sample" if "sample" in self.denoiser.inputs else "hidden_states"
        noise = self.denoiser(**{name: sample, "timestep": timestep, **conditions})["out_sample"]
        if self.kind == "pixart" and self.denoiser.config.get("out_channels") == 2 * sample.shape[1]:
            noise = noise.chunk(2, dim=1)[0]  # learned sigma: the variance is not used
        return noise

    def _decode(self, latents: torch.Tensor) -> torch.Tensor:
        config = self.vae_config
        scaling = config.get("scaling_factor", 0.18215)
        mean, std = config.get("latents_mean"), config.get("latents_std")
        if self.kind == "sdxl" and mean is not None and std is not None:
            channels = latents.shape[1]
            latents = (latents * torch.tensor(std).view(1, channels, 1, 1) / scaling
                       + torch.tensor(mean).view(1, channels, 1, 1))
        elif self.kind == "sd3":
            latents = latents / scaling + (config.get("shift_factor") or 0.0)
        else:
            latents = latents / scaling
        return self.models["vae_decoder"](latent_sample=latents)["sample"]


def text_to_image(folder: str | os.PathLike, *, providers: Sequence[Any] | None = None) -> OnnxDiffusionPipeline:
    """``OnnxDiffusionPipeline.from_folder(folder)``: the text-to-image pipeline of a folder ``export_diffusion``
    wrote (``OUT/model_index.json`` and a folder per model)."""
    if not os.path.isfile(os.path.join(os.fspath(folder), INDEX_FILE)):
        raise InvalidInputError(f"{folder} has no {INDEX_FILE}", fix=_EXPORT_FIX)
    return OnnxDiffusionPipeline.from_folder(folder, providers=providers)
