"""A vision-language model's pieces exported for one consumer's layout (:mod:`.consumers`).

The model is split once (:mod:`.components`, :mod:`.families`); the layout says which pieces become files and
what they are called. Each piece is exported with ``onnxport.export`` and verified against eager PyTorch: the
image encoder on the image processor's inputs for two pictures, then one and three (:mod:`.examples`), the audio
encoder (where the layout loads one: ``Layout.audio_file``) on its feature extractor's for two clips, then a short
and a long one, the others on made-up prompts and a decode step on a past. A model that hears alone
(``Family.audio_only``: Voxtral, Granite Speech, for ``audio-text-to-text``) has no image encoder: its audio encoder
(``HeardAudioEncoder``, on ``examples.heard_sets``) gives the rows its audio tokens take, which the merge and the
token embedding treat as an image's. A model whose encoder reads the images
themselves (a VisionEncoderDecoder's, Pix2Struct's) is exported as :mod:`onnxport.hf.seq2seq` exports any
encoder-decoder, from its image processor's inputs.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from onnxport.errors import InvalidInputError, OnnxportError
from onnxport.hf import stream
from onnxport.hf.multimodal.components import (
    AudioEncoder,
    FeatureMerge,
    ImageEncoder,
    TokenEmbedding,
    WideDecoder,
    image_features,
    image_rows,
    images_encoded,
)
from onnxport.hf.multimodal.consumers import ONNXRUNTIME, TRANSFORMERS_JS, TRANSFORMERS_JS_DECODER_CACHES, Layout
from onnxport.hf.multimodal.examples import (
    ImageSets,
    audio_sets,
    decoder_inputs,
    encoder_image_sets,
    heard_sets,
    image_sets,
    prompt_ids,
)
from onnxport.hf.multimodal.families import Family

__all__ = ["VlmPrograms", "export_multimodal", "split"]

_DECODER_INPUTS = ("inputs_embeds", "attention_mask", "position_ids", "per_layer_inputs")


class VlmPrograms(NamedTuple):
    """A vision-language model's programs: the image encoder, the embedding (the merge for onnxruntime's layout,
    the token embedding for transformers.js's) and the decoder; for an encoder-decoder language model, also its
    encoder and its decoder with past (the decoder is then the first step's; for transformers.js both in one); the
    audio encoder, where the layout has one for the model."""

    vision: Any
    embedding: Any
    decoder: Any
    encoder: Any = None
    decoder_with_past: Any = None
    audio: Any = None

    @classmethod
    def of(cls, made: dict[str, Any], layout: Layout, encoder_decoder: bool, images_encoded: bool = False
           ) -> VlmPrograms:
        """The programs ``export_multimodal`` made for ``layout``, by piece (no image encoder nor embedding for a
        model whose encoder reads the images)."""
        by_piece = {piece: made[stem] for piece, stem in layout.files_of(encoder_decoder, images_encoded).items()
                    if stem in made}
        audio = next((made[stem] for stem in dict.fromkeys(layout.audio_files.values()) if stem in made), None)
        return cls(by_piece.get("vision"), by_piece.get("merge", by_piece.get("tokens")),
                   by_piece.get("decoder", by_piece.get("merged")), by_piece.get("encoder"),
                   by_piece.get("decoder_with_past"), audio)


def _meta(model: torch.nn.Module) -> bool:
    return any(p.is_meta for p in model.parameters())


def _run(module: torch.nn.Module, inputs: dict[str, Any]) -> Any:
    """``module`` on an example image set; where the model's image path fails on it (most often: a folder whose image
    processor was saved for other patch or image sizes than the model's), an onnxport error naming the inputs."""
    try:
        if _meta(module):
            return stream.meta_call(module, **inputs)
        with torch.no_grad():
            return module(**inputs)
    except OnnxportError:
        raise
    except Exception as exc:  # noqa: BLE001 - the model's own error on these inputs, said as onnxport's
        shapes = ", ".join(f"{name} {list(value.shape)}" for name, value in inputs.items()
                           if isinstance(value, torch.Tensor))
        raise InvalidInputError(
            f"the model's image path fails on the example images made with its folder's image processor ({shapes}): "
            f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
            fix="if the folder's image processor was saved for another size of model, save the one that belongs to "
                "it (its patch and image sizes those of the config's vision_config), or none") from exc


def split(model: torch.nn.Module, config: Any, directory: str | None) -> tuple[Family, ImageSets]:
    """The model's family and its image encoder's example input sets (the capture's first)."""
    family = Family.of(model, config)
    if family.audio_only:  # no images: its audio encoder's rows take their place (export_multimodal)
        return family, ImageSets()
    per_image = family.per_image
    sets = image_sets(model, config, directory, per_image)
    out = _run(_FeaturesOf(model), sets[0]) if not per_image else None
    deepstack = len(getattr(out, "deepstack_features", None) or ())
    return Family.of(model, config, deepstack), sets


class _FeaturesOf(torch.nn.Module):
    """``get_image_features`` as a module (to run on the meta device)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, **inputs: Any) -> Any:
        return image_features(self.model)(**inputs, return_dict=True)


def export_multimodal(model: torch.nn.Module, config: Any, directory: str | None, layout: Layout = ONNXRUNTIME,
                      **options: Any) -> dict[str, Any]:
    """The pieces of ``layout`` (file stem -> ``OnnxProgram``), each exported with ``onnxport.export`` and
    ``options`` (``weights``: the model's streamed weights, named as the model names them; ``quantize`` applies to
    the decoder alone; the rest passed as they are)."""
    from torch.export import Dim

    from onnxport.api import export

    if images_encoded(model, config):
        return _encoded_pieces(model, config, directory, layout, options)
    layout.audio_file(config)  # first: a consumer's audio encoder the model cannot give is refused
    family, sets = split(model, config, directory)
    types = {**layout.input_types, **layout.model_input_types.get(family.model_type, {})}
    sets = ImageSets({name: value.to(types.get(name, value.dtype)) for name, value in given.items()}
                     for given in sets)  # each input of the type the consumer gives
    weights = options.pop("weights", None)
    quantize = options.pop("quantize", None)  # the decoder's layers only, as a runtime for these models expects
    apart = family.model_type in layout.per_layer_apart and bool(family.per_layer)
    vision = ImageEncoder(model, family, batched=family.model_type in layout.batched_rows, per_layer_apart=apart)
    heard = heard_sets(config, directory) if family.audio_only else None  # its audio rows stand for the image's
    made = _run(vision, sets[0]) if heard is None else _run(AudioEncoder.of(model, family), heard[0])
    rows = image_rows(made).shape[0]
    ids = prompt_ids(config, family, rows if not family.per_image else 2 * rows)
    features = torch.randn(int((ids == family.image_token).sum()), family.width,
                           generator=torch.Generator().manual_seed(1))
    if made.dim() == 3:  # the merge takes the rows per image, as the image encoder gives them
        per = made.shape[1]
        features = features.reshape(-1, per, family.width) if features.shape[0] % per == 0 else features[None]
    tokens_out = ["inputs_embeds", "per_layer_inputs"] if apart else ["inputs_embeds"]
    ids_dims = {0: Dim.DYNAMIC, 1: Dim.DYNAMIC}
    merge = FeatureMerge(model, family)
    pieces = {
        "vision": lambda: (vision, sets[0], sets.dynamic, ["image_features"], [((), s) for s in sets[1:]]),
        "tokens": lambda: (TokenEmbedding(model, family, apart), {"input_ids": ids}, {"input_ids": ids_dims},
                           tokens_out, ()),
        "merge": lambda: (merge, {"input_ids": ids, "image_features": features},
                          {"input_ids": ids_dims,
                           "image_features": {d: Dim.DYNAMIC for d in range(features.dim() - 1)}},
                          ["inputs_embeds"], ()),
    }
    if not family.encoder_decoder:  # an encoder-decoder's encoder and decoders are seq2seq's, below
        pieces["decoder"] = lambda: _decoder_piece(model, config, family, apart)
    pieces["audio"] = lambda: _audio_piece(model, config, directory, family, apart, heard)
    files = layout.files_for(config, family.encoder_decoder)
    programs = {}
    for piece, stem in files.items():
        if piece not in pieces:
            continue
        module, inputs, dynamic, outputs, others = pieces[piece]()
        programs[stem] = export(module, (), inputs, dynamic_shapes=dynamic, weights=_renamed(weights, module, model),
                                output_names=outputs, verify_inputs=others,
                                quantize=quantize if piece == "decoder" else None, **options)
    if family.encoder_decoder:
        programs.update(_seq2seq_pieces(model, merge, ids, features, files, quantize, options,
                                        family.model_type in layout.decoder_embeds))
    renamed = layout.inputs.get(family.model_type, {})
    for value in (v for piece in ("vision", "audio") if piece in files and renamed
                  for v in programs[files[piece]].model.graph.inputs):
        value.name = renamed.get(value.name, value.name)
    return {stem: programs[stem] for stem in files.values()}


def _decoder_piece(model: torch.nn.Module, config: Any, family: Family, apart: bool) -> tuple[Any, ...]:
    """The decoder's module, example step, dynamic shapes, output names (its own) and other inputs (none)."""
    from torch.export import Dim

    from onnxport.hf.cache import auto_spec

    model = _language_model(model)
    step = decoder_inputs(model, config, family, apart)
    cache_name = next(name for name in step if name not in _DECODER_INPUTS)
    tokens = {0: Dim.AUTO, 1: Dim.AUTO}
    positions = {1: Dim.AUTO, 2: Dim.AUTO} if family.positions == "rope-index" else tokens
    decoder = model if family.plain else WideDecoder(model, family)
    dims = {"inputs_embeds": tokens, "attention_mask": tokens, "position_ids": positions, "per_layer_inputs": tokens,
            cache_name: auto_spec(step[cache_name])}
    return decoder, step, {name: dims[name] for name in step}, None, ()


def _audio_piece(model: torch.nn.Module, config: Any, directory: str | None, family: Family, apart: bool,
                 heard: ImageSets | None) -> tuple[Any, ...]:
    """The audio encoder's module, example clips, dynamic shapes, output name and the clips it is verified on
    (``heard``: those of a model that hears alone, made already)."""
    sets = heard if heard is not None else audio_sets(model, config, directory)
    return (AudioEncoder.of(model, family, apart), sets[0], sets.dynamic, ["audio_features"],
            [((), clips) for clips in sets[1:]])


def _language_model(model: torch.nn.Module) -> torch.nn.Module:
    """The module the decoder is: the model, or, where its forward cannot run without pixels (BLIP-2's), its
    language model, a causal LM of its own."""
    import inspect

    pixels = inspect.signature(model.forward).parameters.get("pixel_values")
    language = getattr(model, "language_model", None)
    if pixels is None or pixels.default is not inspect.Parameter.empty or language is None:
        return model
    return language


def _seq2seq_pieces(model: torch.nn.Module, merge: FeatureMerge, ids: torch.Tensor, features: torch.Tensor,
                    files: dict[str, str], quantize: Any, options: dict[str, Any], by_embeds: bool) -> dict[str, Any]:
    """An encoder-decoder language model's encoder (on the merged prompt's embeddings) and decoders, as
    ``onnxport.hf.seq2seq`` exports them (taking the new tokens' embeddings with ``by_embeds``): the two decoders,
    or both in one for ``merged``."""
    from onnxport.hf.seq2seq import export_seq2seq
    from onnxport.hf.transformers_js import merge_decoders

    with torch.no_grad():
        embeds = merge(ids, features)
    mask = torch.ones(ids.shape, dtype=torch.int64)
    mask[-1, :1] = 0  # a padded prompt
    made = export_seq2seq(model, {"inputs_embeds": embeds, "attention_mask": mask}, opset=options.get("opset"),
                          progress=options.get("progress", False), target=options.get("target"),
                          decoder_embeds=by_embeds)
    if quantize is not None:
        made = type(made)(made.encoder, made.decoder.quantize(quantize), made.decoder_with_past.quantize(quantize))
    pieces = {"encoder": lambda: made.encoder, "decoder": lambda: made.decoder,
              "decoder_with_past": lambda: made.decoder_with_past,
              "merged": lambda: merge_decoders(made.decoder, made.decoder_with_past)}
    return {stem: pieces[piece]() for piece, stem in files.items() if piece in pieces}


def _encoded_pieces(model: torch.nn.Module, config: Any, directory: str | None, layout: Layout,
                    options: dict[str, Any]) -> dict[str, Any]:
    """The encoder and decoders of a model whose encoder reads the images (``components.images_encoded``), as
    ``onnxport.hf.seq2seq`` exports them from the image processor's inputs for three pictures (the two decoders in
    one for ``merged``); ``quantize`` applies to the decoders alone."""
    from onnxport.hf.seq2seq import export_seq2seq
    from onnxport.hf.transformers_js import merge_decoders

    if options.get("weights") is not None:
        raise InvalidInputError(f"{config.model_type} models are exported with their weights loaded (the decoders' "
                                "examples come from running the encoder)", fix="pass streaming=False")
    sets = encoder_image_sets(model, config, directory)
    cross = layout is not TRANSFORMERS_JS or \
        TRANSFORMERS_JS_DECODER_CACHES.get(config.get_text_config(decoder=True).model_type, True)
    made = export_seq2seq(model, sets[0], opset=options.get("opset"), progress=options.get("progress", False),
                          target=options.get("target"), cross_cache=cross)
    quantize = options.get("quantize")
    if quantize is not None:
        made = type(made)(made.encoder, made.decoder.quantize(quantize), made.decoder_with_past.quantize(quantize))
    pieces = {"encoder": made.encoder, "decoder": made.decoder, "decoder_with_past": made.decoder_with_past}
    files = layout.files_of(True, images_encoded=True)
    if "merged" in files:
        pieces["merged"] = merge_decoders(made.decoder, made.decoder_with_past)
    return {stem: pieces[piece] for piece, stem in files.items()}


def _renamed(weights: Any, module: torch.nn.Module, model: torch.nn.Module) -> Any:
    """The streamed ``weights`` (named as ``model`` names them) named as ``module`` names the same tensors."""
    if weights is None or module is model:
        return weights
    held = set(weights)
    names: dict[int, str] = {}  # a tensor's name among those the weights hold (a tied one has several)
    for n, t in (*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)):
        if n in held or id(t) not in names:
            names[id(t)] = n
    mine = {n: names[id(t)] for n, t in (*module.named_parameters(remove_duplicate=False),
                                         *module.named_buffers(remove_duplicate=False)) if id(t) in names}
    return weights.renamed({new: old for new, old in mine.items() if old in held})
