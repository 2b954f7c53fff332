"""A vision-language model's pieces exported for one consumer's layout (:mod:`.consumers`).

The model is split once (:mod:`.components`, :mod:`.families`); the layout says which pieces become files and
what they are called. Each piece is exported with ``onnxport.export`` and verified against eager PyTorch: the
image encoder on the image processor's inputs for two pictures, then one and three (:mod:`.examples`), the
others on made-up prompts and a decode step on a past.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from onnxport.hf import stream
from onnxport.hf.multimodal.components import FeatureMerge, ImageEncoder, TokenEmbedding, WideDecoder
from onnxport.hf.multimodal.consumers import ONNXRUNTIME, Layout
from onnxport.hf.multimodal.examples import ImageSets, decoder_inputs, image_sets, prompt_ids
from onnxport.hf.multimodal.families import Family

__all__ = ["VlmPrograms", "export_multimodal", "split"]

_DECODER_INPUTS = ("inputs_embeds", "attention_mask", "position_ids")


class VlmPrograms(NamedTuple):
    """A vision-language model's programs: the image encoder, the embedding (the merge for onnxruntime's layout,
    the token embedding for transformers.js's) and the decoder."""

    vision: Any
    embedding: Any
    decoder: Any


def _meta(model: torch.nn.Module) -> bool:
    return any(p.is_meta for p in model.parameters())


def _run(module: torch.nn.Module, inputs: dict[str, Any]) -> Any:
    if _meta(module):
        return stream.meta_call(module, **inputs)
    with torch.no_grad():
        return module(**inputs)


def split(model: torch.nn.Module, config: Any, directory: str | None) -> tuple[Family, ImageSets]:
    """The model's family and its image encoder's example input sets (the capture's first)."""
    per_image = Family.of(model, config).per_image
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
        return self.model.get_image_features(**inputs, return_dict=True)


def export_multimodal(model: torch.nn.Module, config: Any, directory: str | None, layout: Layout = ONNXRUNTIME,
                      **options: Any) -> dict[str, Any]:
    """The pieces of ``layout`` (file stem -> ``OnnxProgram``), each exported with ``onnxport.export`` and
    ``options`` (``weights``: the model's streamed weights, named as the model names them; ``quantize`` applies to
    the decoder alone; the rest passed as they are)."""
    from torch.export import Dim

    from onnxport.api import export
    from onnxport.hf.cache import auto_spec

    family, sets = split(model, config, directory)
    sets = ImageSets({name: value.to(layout.input_types.get(name, value.dtype)) for name, value in given.items()}
                     for given in sets)  # each input of the type the consumer gives
    weights = options.pop("weights", None)
    quantize = options.pop("quantize", None)  # the decoder's layers only, as a runtime for these models expects
    vision = ImageEncoder(model, family)
    rows = _run(vision, sets[0]).shape[0]
    ids = prompt_ids(config, family, rows if not family.per_image else 2 * rows)
    features = torch.randn(int((ids == family.image_token).sum()), family.width,
                           generator=torch.Generator().manual_seed(1))
    step = decoder_inputs(model, config, family)
    cache_name = next(name for name in step if name not in _DECODER_INPUTS)
    tokens = {0: Dim.AUTO, 1: Dim.AUTO}
    positions = {1: Dim.AUTO, 2: Dim.AUTO} if family.positions == "rope-index" else tokens
    decoder = model if family.plain else WideDecoder(model, family)
    ids_dims = {0: Dim.DYNAMIC, 1: Dim.DYNAMIC}
    pieces = {
        "vision": (vision, sets[0], sets.dynamic, ["image_features"], [((), s) for s in sets[1:]]),
        "tokens": (TokenEmbedding(model, family), {"input_ids": ids}, {"input_ids": ids_dims}, ["inputs_embeds"], ()),
        "merge": (FeatureMerge(model, family), {"input_ids": ids, "image_features": features},
                  {"input_ids": ids_dims, "image_features": {0: Dim.DYNAMIC}}, ["inputs_embeds"], ()),
        "decoder": (decoder, step, {"inputs_embeds": tokens, "attention_mask": tokens, "position_ids": positions,
                                    cache_name: auto_spec(step[cache_name])}, None, ()),
    }
    programs = {}
    for piece, stem in layout.files.items():
        module, inputs, dynamic, outputs, others = pieces[piece]
        programs[stem] = export(module, (), inputs, dynamic_shapes=dynamic, weights=_renamed(weights, module, model),
                                output_names=outputs, verify_inputs=others,
                                quantize=quantize if piece == "decoder" else None, **options)
    renamed = layout.inputs.get(family.model_type, {})
    for value in programs[layout.files["vision"]].model.graph.inputs if renamed else ():
        value.name = renamed.get(value.name, value.name)
    return programs


def _renamed(weights: Any, module: torch.nn.Module, model: torch.nn.Module) -> Any:
    """The streamed ``weights`` (named as ``model`` names them) named as ``module`` names the same tensors."""
    if weights is None or module is model:
        return weights
    names = {id(t): n for n, t in (*model.named_parameters(remove_duplicate=False),
                                   *model.named_buffers(remove_duplicate=False))}
    mine = {n: names[id(t)] for n, t in (*module.named_parameters(remove_duplicate=False),
                                         *module.named_buffers(remove_duplicate=False)) if id(t) in names}
    held = set(weights)
    return weights.renamed({new: old for new, old in mine.items() if old in held})
