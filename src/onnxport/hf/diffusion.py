"""Export a local diffusers pipeline directory (``model_index.json`` and one folder per component, as
``pipeline.save_pretrained`` writes it; nothing is downloaded) for ``text-to-image``.

``export_diffusion(directory, out)`` exports each model of the pipeline with ``onnxport.export`` into its own
folder of ``out``, as ONNX diffusion pipelines lay them out:

- ``text_encoder/``, ``text_encoder_2/``, ``text_encoder_3/`` (those the pipeline has): ``input_ids`` (and
  ``attention_mask`` for the encoders that are not CLIP's, such as T5) of dynamic batch and length in;
  every output of the model out, by its name: ``last_hidden_state``, ``pooler_output`` or ``text_embeds``, and
  for CLIP encoders ``hidden_states.0`` ... ``hidden_states.N`` (SDXL conditions on the penultimate one);
- ``unet/`` (``sample``, ``timestep``, ``encoder_hidden_states``, and SDXL's ``text_embeds`` and ``time_ids``;
  ``out_sample`` out) or ``transformer/`` (``hidden_states``, ``encoder_hidden_states``, ``timestep``, and what
  the model takes besides: ``encoder_attention_mask`` for PixArt, ``pooled_projections`` for SD3; ``out_sample``
  out), with a dynamic batch and text length and, for a UNet, a dynamic latent height and width (multiples of
  its downsampling; a transformer's latent size is its config's, which its positional table fixes);
- ``vae_decoder/`` (``latent_sample`` in, ``sample`` out: the VAE's decode of unscaled latents) and
  ``vae_encoder/`` (``sample`` in, ``latent_parameters`` out: the mean and log-variance of the latent
  distribution, concatenated on the channels), dynamic batch, height and width.

Each folder gets its component's ``config.json`` (the VAE's for both of its halves); ``model_index.json``,
``scheduler/`` and the tokenizer folders are copied as they are, and every model's metadata names its task
(``onnxport.hf.task`` = ``text-to-image``), so that ``onnxport.hf.diffusion_runner.OnnxDiffusionPipeline``
runs the folder in onnxruntime.

By default every component is loaded with ``from_pretrained`` and its export verified where the pipeline's weights
fit in memory with room to spare (``onnxport.memory.fits``), as ``export_hf`` does. Otherwise, or with
``streaming=True``, the weights are never loaded: each diffusers model is built from its config with its
parameters on the meta device (its computed buffers, such as positional tables, real) and in float32, as
diffusers' ``from_pretrained`` builds it; a transformers text encoder is built as ``export_hf`` builds a streamed
model, in its checkpoint's dtype. The safetensors files are then copied tensor by tensor into each model's
data file. Such models are not verified against eager PyTorch (the first line of each report says so);
``streaming=False`` loads every component with ``from_pretrained`` and verifies each export.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from typing import Any, NamedTuple

import torch

from onnxport import memory, metadata
from onnxport.arguments import as_path, check_output_folder
from onnxport.errors import InvalidInputError, OnnxportError
from onnxport.hf import stream
from onnxport.program import OnnxProgram

__all__ = ["INDEX_FILE", "TASK", "export_diffusion", "read_model_index"]

TASK = "text-to-image"
INDEX_FILE = "model_index.json"
TEXT_ENCODERS = ("text_encoder", "text_encoder_2", "text_encoder_3")
COPIED_FOLDERS = ("scheduler", "tokenizer", "tokenizer_2", "tokenizer_3")
EXAMPLE_BATCH = 2
_PIPELINE_FIX = ("point at a diffusers pipeline directory (model_index.json and a folder per component, as "
                 "pipeline.save_pretrained writes it)")
_DIFFUSERS_WEIGHTS = "diffusion_pytorch_model.safetensors"
_IN_MEMORY = "export with the models loaded instead (export_diffusion(..., streaming=False))"


class Component(NamedTuple):
    """One model of the pipeline to export: the folder it is read from, the folder it is written to, and the
    library and class ``model_index.json`` names for it."""

    source: str
    name: str
    library: str
    cls: str


def read_model_index(directory: str | os.PathLike) -> dict[str, Any]:
    """``directory``'s ``model_index.json``, checked to be a JSON object naming the pipeline's class."""
    directory = as_path(directory, "directory", "pass the folder of a diffusers pipeline (its model_index.json)")
    if not os.path.isdir(directory):
        what = "is a file" if os.path.exists(directory) else "does not exist"
        raise InvalidInputError(f"{directory} {what}", fix=_PIPELINE_FIX)
    path = os.path.join(directory, INDEX_FILE)
    if not os.path.isfile(path):
        raise InvalidInputError(f"{directory} has no {INDEX_FILE}: it is not a diffusers pipeline", fix=_PIPELINE_FIX)
    try:
        with open(path, encoding="utf-8") as f:
            index = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"{path} is not valid JSON: {exc}",
                                fix="save the pipeline again with pipeline.save_pretrained(directory)") from None
    if not isinstance(index, dict) or not isinstance(index.get("_class_name"), str):
        raise InvalidInputError(f"{path} names no pipeline class (_class_name)",
                                fix="save the pipeline again with pipeline.save_pretrained(directory)")
    return index


def _components(directory: str, index: dict[str, Any]) -> list[Component]:
    """The models ``export_diffusion`` writes, in order: text encoders, denoiser, VAE decoder and encoder."""
    def named(key: str) -> tuple[str, str] | None:
        value = index.get(key)
        if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, str) for v in value):
            return value[0], value[1]
        return None

    found = []
    for key in TEXT_ENCODERS:
        entry = named(key)
        if entry is not None:
            if entry[0] != "transformers":
                raise InvalidInputError(f"{key} is a {entry[0]}.{entry[1]}; onnxport exports transformers text "
                                        "encoders only", fix="give a pipeline whose text encoders are transformers "
                                        "models (CLIP, T5)")
            found.append(Component(key, key, *entry))
    denoisers = [key for key in ("unet", "transformer") if named(key) is not None]
    if len(denoisers) != 1 or named("vae") is None:
        raise InvalidInputError(
            f"{os.path.join(directory, INDEX_FILE)} ({index['_class_name']}) names "
            f"{'no' if not denoisers else 'both a'} unet or transformer{'' if named('vae') else ' and no vae'}: "
            "onnxport exports text-to-image pipelines of one denoiser and an AutoencoderKL",
            fix="give a text-to-image pipeline such as Stable Diffusion, SDXL, PixArt or SD3")
    found.append(Component(denoisers[0], denoisers[0], *named(denoisers[0])))
    vae = named("vae")
    if vae[1] != "AutoencoderKL":
        raise InvalidInputError(f"the pipeline's vae is a {vae[1]}, onnxport exports an AutoencoderKL",
                                fix="give a pipeline whose vae is an AutoencoderKL")
    found += [Component("vae", "vae_decoder", *vae), Component("vae", "vae_encoder", *vae)]
    for part in found:
        if not os.path.isfile(os.path.join(directory, part.source, "config.json")):
            raise InvalidInputError(f"{os.path.join(directory, part.source)} has no config.json",
                                    fix=f"save the whole pipeline with save_pretrained; {_PIPELINE_FIX}")
    return found


def export_diffusion(directory: str | os.PathLike, out: str | os.PathLike = "onnx", *, opset: int | None = None,
                     progress: bool = False, streaming: bool | None = None, target: Any = None,
                     reuse_blocks: bool = True) -> dict[str, OnnxProgram]:
    """Export the text-to-image pipeline in ``directory`` into the folder ``out``; returns each component's
    program by its folder name (``text_encoder``, ``unet`` or ``transformer``, ``vae_decoder``, ...).

    ``streaming=True`` exports without loading the weights (see the module's docstring); ``False`` loads each
    model with ``from_pretrained`` and verifies its export against it; left out, the weights are loaded where
    they fit in memory with room to spare, else streamed. ``opset``, ``target`` and
    ``reuse_blocks`` are ``onnxport.export``'s, given to every export (``reuse_blocks=False`` saves time on
    small models, whose few repeated layers do not pay for their separate capture). Nothing is written to
    ``out`` until every component is exported; the files are then written into a hidden folder in ``out`` and
    moved into place, and a failure removes what was written (``out`` too, where this call created it).
    """
    from onnxport.api import export

    directory = as_path(directory, "directory", "pass the folder of a diffusers pipeline (its model_index.json)")
    as_path(out, "out", "pass the folder to write the files into")
    index = read_model_index(directory)
    if streaming is not None and not isinstance(streaming, bool):
        raise InvalidInputError(f"streaming must be True, False or None, not {streaming!r}",
                                fix="leave it out (loaded and verified where the weights fit in memory), or pass "
                                "True to stream them, False to load them")
    components = _components(directory, index)
    why_streamed = "streaming=True" if streaming else ""
    if streaming is None:  # loaded and verified where every component fits in memory at once
        sizes = [stream.loaded_size(os.path.join(directory, source), None)
                 for source in sorted({c.source for c in components})]
        total = sum(size or 0 for size in sizes)
        streaming = not memory.fits(total)
        if streaming:
            why_streamed = f"{memory.gib(total)} of weights loaded would not fit {memory.LOAD_FACTOR} times over here"
    copied = [name for name in COPIED_FOLDERS if os.path.isdir(os.path.join(directory, name))]
    check_output_folder(out, [INDEX_FILE, *(f"{c.name}/model.onnx" for c in components),
                              *(f"{c.name}/config.json" for c in components)])
    for name in {c.name for c in components} | set(copied):
        if os.path.isfile(os.path.join(out, name)):
            raise InvalidInputError(f"cannot write the folder {os.path.join(out, name)}: it is a file",
                                    fix="remove or rename that file, or give another output folder")
    programs: dict[str, OnnxProgram] = {}
    loaded: dict[str, torch.nn.Module] = {}
    for part in components:
        model, weights = loaded.get(part.source), None
        if model is None or streaming:
            model, weights = _load(directory, part, streaming)
            loaded[part.source] = model
        wrapper, inputs, dynamic, names = _signature(part, model, index)
        if progress:
            print(f"[onnxport] {part.name}: {type(model).__name__}", file=sys.stderr, flush=True)
        if weights is not None:
            weights = weights.renamed({f"model.{key}": key for key in weights})  # the wrapper's names
        prog = export(wrapper, (), inputs, dynamic_shapes=dynamic, output_names=names, opset=opset,
                      progress=progress, weights=weights, target=target, reuse_blocks=reuse_blocks)
        prog.model.metadata_props[metadata.TASK] = TASK
        if streaming:
            prog.report.unverified = (f"the weights were streamed from the safetensors files, never loaded "
                                      f"({why_streamed}); pass streaming=False (--in-memory) to load and verify")
        programs[part.name] = prog
    _write(directory, out, programs, components, copied)
    return programs


def _write(directory: str, out: str | os.PathLike, programs: dict[str, OnnxProgram], components: list[Component],
           copied: list[str]) -> None:
    """Save the programs and copy the pipeline's other files into a hidden folder in ``out``, then move them
    into place; on a failure, remove what was written (and ``out``, where it did not exist before)."""
    out = os.path.abspath(os.fspath(out))
    created = not os.path.exists(out)
    os.makedirs(out, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".onnxport-", dir=out)
    try:
        for part in components:
            os.makedirs(os.path.join(staging, part.name), exist_ok=True)
            programs[part.name].save(os.path.join(staging, part.name, "model.onnx"))
            shutil.copyfile(os.path.join(directory, part.source, "config.json"),
                            os.path.join(staging, part.name, "config.json"))
        for name in copied:
            shutil.copytree(os.path.join(directory, name), os.path.join(staging, name))
        shutil.copyfile(os.path.join(directory, INDEX_FILE), os.path.join(staging, INDEX_FILE))
    except BaseException:
        shutil.rmtree(out if created else staging, ignore_errors=True)
        raise
    try:
        for root, _, files in os.walk(staging):
            place = os.path.join(out, os.path.relpath(root, staging))
            os.makedirs(place, exist_ok=True)
            for name in files:
                os.replace(os.path.join(root, name), os.path.join(place, name))
    finally:
        shutil.rmtree(staging, ignore_errors=True)


# --- building the models ---------------------------------------------------------------------------------------

def _load(directory: str, part: Component, streaming: bool) -> tuple[torch.nn.Module, Any]:
    """The component's model (on the meta device with its ``Weights`` when streaming, else loaded)."""
    folder = os.path.join(directory, part.source)
    try:
        if part.library == "transformers":
            return _text_encoder(folder, part.cls, streaming)
        return _diffusers_model(folder, part.cls, streaming)
    except (ValueError, OSError, TypeError, KeyError) as exc:
        if isinstance(exc, OnnxportError):
            raise
        raise InvalidInputError(f"{part.library} cannot load {folder} as {part.cls}: {type(exc).__name__}: {exc}"[:600],
                                fix=f"check the component's config.json and weights; {_PIPELINE_FIX}") from None


def _library_class(library: str, name: str) -> type:
    module = __import__(library)
    cls = getattr(module, name, None)
    if not isinstance(cls, type) or not issubclass(cls, torch.nn.Module):
        raise InvalidInputError(f"{library} {getattr(module, '__version__', '')} has no model class {name}",
                                fix=f"install a {library} that has {name}, or check model_index.json")
    return cls


def _text_encoder(folder: str, name: str, streaming: bool) -> tuple[torch.nn.Module, Any]:
    """A transformers text encoder: loaded, or built on the meta device as ``export_hf`` streams a model."""
    cls = _library_class("transformers", name)
    if not streaming:
        return cls.from_pretrained(folder, local_files_only=True).eval(), None
    from onnxport.hf import stream
    from onnxport.hf.examples import read_config

    return stream.meta_model(folder, name, read_config(folder))


@contextlib.contextmanager
def _parameters_on_meta() -> Iterator[None]:
    """Modules built in the block get their parameters on the meta device (each moved there as it is registered,
    so that its initialisation computes nothing and no memory is kept); their buffers stay real, so that those a
    model computes when it is built (positional tables) hold values."""
    register = torch.nn.Module.register_parameter

    def on_meta(module: torch.nn.Module, name: str, param: torch.nn.Parameter | None) -> None:
        if param is not None and not param.is_meta:
            param = torch.nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
        register(module, name, param)

    torch.nn.Module.register_parameter = on_meta
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = register


def _diffusers_files(folder: str) -> str | list[str]:
    """The safetensors files diffusers loads from ``folder`` without a variant: its sharded checkpoint's
    shards, or ``diffusion_pytorch_model.safetensors``; else the folder (every safetensors file in it)."""
    index = os.path.join(folder, f"{_DIFFUSERS_WEIGHTS}.index.json")
    if os.path.isfile(index):
        try:
            with open(index, encoding="utf-8") as f:
                shards = sorted(set(json.load(f)["weight_map"].values()))
        except (OSError, KeyError, TypeError, AttributeError, ValueError) as exc:
            raise InvalidInputError(f"{index} is not a checkpoint index ({type(exc).__name__}: {exc})",
                                    fix="save the pipeline again with save_pretrained") from None
        return [os.path.join(folder, str(shard)) for shard in shards]
    single = os.path.join(folder, _DIFFUSERS_WEIGHTS)
    return [single] if os.path.isfile(single) else folder


def _diffusers_model(folder: str, name: str, streaming: bool) -> tuple[torch.nn.Module, Any]:
    """A diffusers model: loaded in float32, or built from its config with its parameters on the meta device and
    its checkpoint's safetensors as weights (diffusers names them as the model does)."""
    cls = _library_class("diffusers", name)
    if not streaming:
        return cls.from_pretrained(folder, local_files_only=True).eval(), None
    from onnxport.weights import Weights

    try:
        weights = Weights.open(_diffusers_files(folder))
    except InvalidInputError as exc:
        raise InvalidInputError(exc.message, fix=f"{_IN_MEMORY}; or {exc.fix}") from None
    config = cls.load_config(folder)
    with _parameters_on_meta():
        model = cls.from_config(config).eval()
    expected = model.state_dict()
    missing = sorted(key for key, tensor in expected.items() if tensor.is_meta and key not in weights)
    if missing:
        raise InvalidInputError(
            f"the checkpoint in {folder} lacks {len(missing)} weights of {name} ({', '.join(missing[:3])}"
            f"{', ...' if len(missing) > 3 else ''}), or names them otherwise than the model does",
            fix=f"save the model with a diffusers that names them as this one does; {_IN_MEMORY}")
    return model, weights.renamed({key: key for key in expected if key in weights})


# --- the signature of each model --------------------------------------------------------------------------------

class _TextEncoder(torch.nn.Module):
    """A text encoder's outputs as a flat dict: each output by its name, the hidden states as ``hidden_states.i``."""

    def __init__(self, model: torch.nn.Module, hidden_states: bool):
        super().__init__()
        self.model = model
        self.hidden_states = hidden_states

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        extra = {}
        if attention_mask is not None:  # the mask has the ids' batch and length
            torch._check(attention_mask.shape[0] == input_ids.shape[0])
            torch._check(attention_mask.shape[1] == input_ids.shape[1])
            extra["attention_mask"] = attention_mask
        outputs = self.model(input_ids=input_ids, output_hidden_states=self.hidden_states, return_dict=True, **extra)
        flat = {}
        for key, value in outputs.items():
            if isinstance(value, torch.Tensor):
                flat[key] = value
            elif key == "hidden_states" and value is not None:
                flat.update({f"hidden_states.{i}": state for i, state in enumerate(value)})
        return flat


def _same_batch(first: torch.Tensor, *others: torch.Tensor | None) -> None:
    """Tell the capture that every input has the batch of the first, before the model computes with them: it
    then knows one batch size, not one per input related by the model's reshapes."""
    for other in others:
        if other is not None:
            torch._check(other.shape[0] == first.shape[0])


class _UNet(torch.nn.Module):
    """A ``UNet2DConditionModel`` called as the pipelines call it; SDXL's added conditions as inputs of their own."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, sample: torch.Tensor, timestep: torch.Tensor, encoder_hidden_states: torch.Tensor,
                text_embeds: torch.Tensor | None = None, time_ids: torch.Tensor | None = None) -> torch.Tensor:
        _same_batch(sample, timestep, encoder_hidden_states, text_embeds, time_ids)
        added = {"text_embeds": text_embeds, "time_ids": time_ids} if text_embeds is not None else None
        return self.model(sample, timestep, encoder_hidden_states=encoder_hidden_states, added_cond_kwargs=added,
                          return_dict=False)[0]


class _Transformer(torch.nn.Module):
    """A diffusion transformer (PixArt, SD3) called with its inputs by name; PixArt's resolution conditions as
    inputs of their own."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor, timestep: torch.Tensor,
                encoder_attention_mask: torch.Tensor | None = None, pooled_projections: torch.Tensor | None = None,
                resolution: torch.Tensor | None = None, aspect_ratio: torch.Tensor | None = None) -> torch.Tensor:
        _same_batch(hidden_states, encoder_hidden_states, timestep, encoder_attention_mask, pooled_projections,
                    resolution, aspect_ratio)
        extra: dict[str, Any] = {}
        if encoder_attention_mask is not None:
            extra["encoder_attention_mask"] = encoder_attention_mask
        if pooled_projections is not None:
            extra["pooled_projections"] = pooled_projections
        if "added_cond_kwargs" in _parameters(self.model):
            extra["added_cond_kwargs"] = {"resolution": resolution, "aspect_ratio": aspect_ratio}
        return self.model(hidden_states=hidden_states, encoder_hidden_states=encoder_hidden_states,
                          timestep=timestep, return_dict=False, **extra)[0]


class _VaeDecoder(torch.nn.Module):
    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, latent_sample: torch.Tensor) -> torch.Tensor:
        return self.model.decode(latent_sample, return_dict=False)[0]


class _VaeEncoder(torch.nn.Module):
    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, sample: torch.Tensor) -> torch.Tensor:
        return self.model.encode(sample, return_dict=False)[0].parameters


def _parameters(model: torch.nn.Module) -> set[str]:
    return set(inspect.signature(model.forward).parameters)


def _randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


_Signature = tuple[torch.nn.Module, dict[str, torch.Tensor], dict[str, Any], list[str]]


def _signature(part: Component, model: torch.nn.Module, index: dict[str, Any]) -> _Signature:
    """The module exported for ``part``, its example inputs, dynamic shapes and output names."""
    # one named Dim for the batch of every input, so that the capture knows them equal; but Dim.DYNAMIC for the
    # UNet's and the VAE's, whose upsampling tests ``batch >= 64`` (a no-op branch a named Dim refuses)
    batch, dim = torch.export.Dim("batch"), torch.export.Dim.DYNAMIC
    config = model.config
    if part.library == "transformers":
        clip = getattr(config, "model_type", "").startswith("clip")
        vocab = getattr(config, "vocab_size", 100)
        length = min(getattr(config, "max_position_embeddings", 16) or 16, 16)
        ids = torch.randint(0, vocab, (EXAMPLE_BATCH, length), generator=torch.Generator().manual_seed(0))
        inputs = {"input_ids": ids}
        if not clip:
            mask = torch.ones_like(inputs["input_ids"])
            mask[-1, length // 2:] = 0
            inputs["attention_mask"] = mask
        wrapper = _TextEncoder(model, hidden_states=clip).eval()
        with _meta_outputs(model):  # without the mask: transformers reads a mask's values
            names = list(_run_meta(wrapper, {"input_ids": inputs["input_ids"]}))
        return wrapper, inputs, {key: {0: batch, 1: dim} for key in inputs}, names
    if part.name in ("vae_decoder", "vae_encoder"):
        scale = 2 ** (len(config.block_out_channels) - 1)  # pixels per latent
        size = config.sample_size[0] if isinstance(config.sample_size, (list, tuple)) else config.sample_size
        side = max(2, min(int(size) // scale, 8))  # latents of at most 8 x 8
        if part.name == "vae_decoder":
            inputs = {"latent_sample": _randn(EXAMPLE_BATCH, config.latent_channels, side, side)}
            wrapper, names = _VaeDecoder(model), ["sample"]
        else:
            inputs = {"sample": _randn(EXAMPLE_BATCH, config.in_channels, side * scale, side * scale)}
            wrapper, names = _VaeEncoder(model), ["latent_parameters"]
        key = next(iter(inputs))
        return wrapper.eval(), inputs, {key: {0: dim, 2: dim, 3: dim}}, names
    if part.source == "unet":
        return _unet_signature(model, config, dim)
    return _transformer_signature(model, config, batch, index)


def _unet_signature(model: torch.nn.Module, config: Any, batch: Any) -> _Signature:
    """A UNet's: ``sample`` (dynamic batch, and height and width in multiples of its downsampling), ``timestep``,
    ``encoder_hidden_states`` (dynamic length), and SDXL's ``text_embeds`` and ``time_ids``."""
    side = 2 ** (len(config.block_out_channels) - 1) * 2  # divisible by every downsampling of the UNet
    cross = config.cross_attention_dim
    cross = cross[0] if isinstance(cross, (list, tuple)) else cross
    inputs = {"sample": _randn(EXAMPLE_BATCH, config.in_channels, side, side),
              "timestep": torch.tensor([999.0, 10.0][:EXAMPLE_BATCH]),
              "encoder_hidden_states": _randn(EXAMPLE_BATCH, 7, cross, seed=1)}
    if config.addition_embed_type == "text_time":
        pooled = model.add_embedding.linear_1.in_features - 6 * config.addition_time_embed_dim
        inputs["text_embeds"] = _randn(EXAMPLE_BATCH, pooled, seed=2)
        inputs["time_ids"] = torch.tensor([[64.0, 64.0, 0.0, 0.0, 64.0, 64.0]] * EXAMPLE_BATCH)
    elif config.addition_embed_type is not None or config.time_cond_proj_dim is not None:
        raise InvalidInputError(f"onnxport does not export a UNet with addition_embed_type "
                                f"{config.addition_embed_type!r} or time_cond_proj_dim {config.time_cond_proj_dim!r}",
                                fix="give a Stable Diffusion or SDXL pipeline")
    dim = torch.export.Dim.DYNAMIC
    dynamic = {key: {0: batch} for key in inputs}
    # the latent height and width are multiples of the UNet's downsampling (which it checks in Python)
    factor = side // 2
    height, width = torch.export.Dim("latent_height_blocks"), torch.export.Dim("latent_width_blocks")
    dynamic["sample"] = {0: batch, 2: factor * height if factor > 1 else height,
                         3: factor * width if factor > 1 else width}
    dynamic["encoder_hidden_states"] = {0: batch, 1: dim}
    return _UNet(model).eval(), inputs, dynamic, ["out_sample"]


def _transformer_signature(model: torch.nn.Module, config: Any, batch: Any, index: dict[str, Any]) -> _Signature:
    """A diffusion transformer's: ``hidden_states`` (dynamic batch; the latents' size fixed, as the model's
    positional table is), ``encoder_hidden_states`` (dynamic length), ``timestep``, and PixArt's
    ``encoder_attention_mask`` (and ``resolution``, ``aspect_ratio`` where it takes them) or SD3's
    ``pooled_projections``."""
    taken = _parameters(model)
    side = config.sample_size
    inputs = {"hidden_states": _randn(EXAMPLE_BATCH, config.in_channels, side, side),
              "encoder_hidden_states": _randn(EXAMPLE_BATCH, 7, _text_width(config), seed=1),
              "timestep": torch.tensor([999.0, 10.0][:EXAMPLE_BATCH])}
    length = torch.export.Dim.DYNAMIC
    dynamic: dict[str, Any] = {"hidden_states": {0: batch}, "encoder_hidden_states": {0: batch, 1: length},
                               "timestep": {0: batch}}
    if "encoder_attention_mask" in taken:
        mask = torch.ones(EXAMPLE_BATCH, 7)
        mask[-1, 4:] = 0
        inputs["encoder_attention_mask"] = mask
        dynamic["encoder_attention_mask"] = {0: batch, 1: length}
    if "pooled_projections" in taken:
        inputs["pooled_projections"] = _randn(EXAMPLE_BATCH, config.pooled_projection_dim, seed=2)
        dynamic["pooled_projections"] = {0: batch}
    if getattr(model, "use_additional_conditions", False):
        inputs["resolution"] = torch.tensor([[1024.0, 1024.0]] * EXAMPLE_BATCH)
        inputs["aspect_ratio"] = torch.tensor([[1.0]] * EXAMPLE_BATCH)
        dynamic.update(resolution={0: batch}, aspect_ratio={0: batch})
    unknown = taken & {"img_ids", "txt_ids", "guidance", "controlnet_block_samples"}
    if unknown or "pooled_projections" not in taken and "encoder_attention_mask" not in taken:
        raise InvalidInputError(f"onnxport does not know the inputs of {type(model).__name__} "
                                f"({index['_class_name']})", fix="give a PixArt or SD3 pipeline")
    return _Transformer(model).eval(), inputs, dynamic, ["out_sample"]


def _text_width(config: Any) -> int:
    """The width of the text states a diffusion transformer takes."""
    for key in ("caption_channels", "joint_attention_dim", "cross_attention_dim"):
        value = getattr(config, key, None)
        if isinstance(value, int):
            return value
    raise InvalidInputError("onnxport cannot tell the width of the transformer's text states from its config",
                            fix="give a PixArt or SD3 pipeline")


@contextlib.contextmanager
def _meta_outputs(model: torch.nn.Module) -> Iterator[None]:
    """The model's real tensors on the meta device for the block (its parameters may be there already)."""
    swapped = []
    try:
        for module in model.modules():
            for kind in ("_parameters", "_buffers"):
                slots = getattr(module, kind)
                for attr, tensor in list(slots.items()):
                    if tensor is not None and not tensor.is_meta:
                        swapped.append((slots, attr, tensor))
                        slots[attr] = tensor.to("meta")
        yield
    finally:
        for slots, attr, tensor in reversed(swapped):
            slots[attr] = tensor


def _run_meta(module: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> dict[str, Any]:
    """What ``module`` returns on ``inputs``, run on the meta device (no weight read): names and shapes only."""
    with torch.no_grad():
        return module(**{key: value.to("meta") for key, value in inputs.items()})
