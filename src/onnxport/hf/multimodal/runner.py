"""onnxport's own runner of a vision-language folder: greedy generation in onnxruntime.

A prompt runs the image encoder once on every image (once per image for a ``per_image`` encoder, each cut to
its own size from the processor's padded batch), the merge on the prompt's ids and those rows, and the decoder;
each later token runs the merge with no rows (``[0, width]``) and the decoder, fed back its cache. Positions are
counted over the attention mask, or, for a decoder that takes three per token, the model's own
``get_rope_index`` (:mod:`.positions`). An encoder-decoder language model (Florence-2) runs the merged prompt
through its encoder once, and its decoders from its start token (``onnxport.hf.generate.generate_seq2seq``); one
whose encoder reads the images themselves (a VisionEncoderDecoder, Pix2Struct) runs the image inputs through it.
A model that hears alone (``audio-text-to-text``: Voxtral, Granite Speech) runs its audio encoder where the others
run their image encoder.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from onnxport.arguments import as_path
from onnxport.errors import InvalidInputError
from onnxport.hf.multimodal.components import ENCODED_IMAGE_INPUTS, as_image_inputs
from onnxport.hf.multimodal.consumers import ONNXRUNTIME
from onnxport.hf.multimodal.families import image_token_id
from onnxport.hf.multimodal.positions import RopeIndex

__all__ = ["AUDIO_FILES", "ENCODED_FILES", "FILES", "SEQ2SEQ_FILES", "generate_vlm"]

FILES = tuple(f"{stem}.onnx" for stem in ONNXRUNTIME.files.values())
# A model that hears alone (audio-text-to-text): its audio encoder in place of the image encoder.
AUDIO_FILES = (f"{next(iter(set(ONNXRUNTIME.audio_files.values())))}.onnx", *FILES[1:])
SEQ2SEQ_FILES = tuple(f"{stem}.onnx" for stem in ONNXRUNTIME.seq2seq_files.values())
ENCODED_FILES = tuple(f"{stem}.onnx" for stem in ONNXRUNTIME.files_of(True, images_encoded=True).values())
_NUMPY = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64,
          "tensor(int32)": np.int32, "tensor(bool)": np.bool_, "tensor(double)": np.float64}


def generate_vlm(folder: str | os.PathLike[str], text: str | list[str] | None = None, images: Any = None, *,
                 audio: Any = None, inputs: Mapping[str, Any] | None = None, max_new_tokens: int = 8,
                 eos_token_id: int | None = None, pad_token_id: int | None = None) -> torch.Tensor:
    """Greedy generation in onnxruntime from a folder ``export_hf`` wrote for ``image-text-to-text``: the
    prompt's tokens and up to ``max_new_tokens`` new ones, ``(batch, prompt + new)``, as transformers'
    ``generate(do_sample=False)`` returns them; for a model whose language model is an encoder-decoder (Florence-2,
    or a VisionEncoderDecoder: ``images`` alone, or ``inputs`` with a ``decoder_input_ids`` task prompt), the
    decoder's tokens, its start token first, ``(batch, 1 + new)``, as transformers returns them.

    ``text`` and ``images`` go through the folder's transformers processor as they would for the PyTorch
    model (a prompt holds the processor's image placeholder once per image; a batch of prompts is padded as
    the processor pads it). Or ``inputs``: what a processor gives (``input_ids``, ``attention_mask``,
    ``pixel_values`` and what else it gives for the images: ``image_grid_thw``, ``image_sizes``, ...), for a
    processor that cannot be loaded where this runs (one that needs torchvision). ``eos_token_id`` and
    ``pad_token_id`` default to the folder's generation config.

    A folder written for ``audio-text-to-text`` (``audio.onnx`` in place of ``vision.onnx``: Voxtral, Granite
    Speech) takes ``text`` and ``audio`` (clips, as the processor takes them), or ``inputs`` with the feature
    extractor's ``input_features`` (and Granite Speech's ``input_features_mask``, which keeps a padded clip's rows
    as its forward keeps them): the audio encoder runs once per clip (per window), its rows taking the audio tokens'
    place as an image's take the image tokens'.
    """
    import onnxruntime as ort
    import transformers

    folder = as_path(folder, "folder", "pass the folder export-hf wrote")
    seq2seq = os.path.isfile(os.path.join(folder, SEQ2SEQ_FILES[2]))  # an encoder-decoder language model's
    encoded = seq2seq and not os.path.isfile(os.path.join(folder, FILES[0]))  # its encoder reads the images
    heard = not seq2seq and os.path.isfile(os.path.join(folder, AUDIO_FILES[0])) and \
        not os.path.isfile(os.path.join(folder, FILES[0]))  # a model that hears alone
    files = ENCODED_FILES if encoded else SEQ2SEQ_FILES if seq2seq else AUDIO_FILES if heard else FILES
    missing = [name for name in files if not os.path.isfile(os.path.join(folder, name))]
    if missing:
        raise InvalidInputError(f"{folder} has no {', '.join(missing)}",
                                fix="export the model with export_hf(directory, 'image-text-to-text', folder) "
                                    "('audio-text-to-text' for a model that hears)")
    if (inputs is None) == (text is None and images is None and audio is None):
        raise InvalidInputError("generate_vlm takes a prompt (text, and images or audio) or the inputs a processor "
                                "made, not both or neither", fix="pass text= (and images= or audio=), or inputs=")
    if inputs is None:
        processor = transformers.AutoProcessor.from_pretrained(folder)
        media = {"audio": audio} if audio is not None else {"images": images}
        inputs = processor(text=text, **media, return_tensors="np", padding=True)
    if encoded:
        return _generate_encoded(folder, files, inputs, max_new_tokens, eos_token_id, pad_token_id)
    batch = {k: v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else np.asarray(v)
             for k, v in as_image_inputs(dict(inputs)).items()}
    batch.setdefault("attention_mask", np.ones_like(batch["input_ids"]))
    vision, merge = (ort.InferenceSession(os.path.join(folder, name), providers=["CPUExecutionProvider"])
                     for name in files[:2])
    output = merge.get_outputs()[0]
    features = np.zeros((0, output.shape[-1]), dtype=_NUMPY.get(output.type, np.float32))
    if heard and batch.get("input_features") is not None:
        features = _audio_rows(vision, batch)
    elif batch.get("pixel_values") is not None:
        features = _image_rows(vision, batch)

    def embed(ids: np.ndarray, prompt: bool) -> np.ndarray:
        return merge.run(None, {"input_ids": ids, "image_features": features if prompt else features[:0]})[0]

    generation, eos_token_id, pad_token_id = _stops(folder, eos_token_id, pad_token_id)
    from onnxport.hf.generate import generate, generate_seq2seq

    ids, mask = batch["input_ids"].astype(np.int64), batch["attention_mask"].astype(np.int64)
    if seq2seq:  # the prompt through the encoder; the decoder from the model's start token
        from onnxport.hf.seq2seq import decoder_start_token

        start = decoder_start_token(generation, transformers.AutoConfig.from_pretrained(folder))
        paths = [os.path.join(folder, name) for name in files[2:]]
        return generate_seq2seq(*paths, torch.from_numpy(embed(ids, True)), torch.from_numpy(mask),
                                decoder_start_token_id=start, max_new_tokens=max_new_tokens,
                                eos_token_id=eos_token_id, pad_token_id=pad_token_id)
    decoder = ort.InferenceSession(os.path.join(folder, files[-1]), providers=["CPUExecutionProvider"])
    return generate(os.path.join(folder, files[-1]), torch.from_numpy(ids), torch.from_numpy(mask),
                    max_new_tokens=max_new_tokens, eos_token_id=eos_token_id, pad_token_id=pad_token_id, embed=embed,
                    positions=_positions(folder, decoder, ids, mask, batch))


def _generate_encoded(folder: str, files: tuple[str, ...], inputs: Mapping[str, Any], max_new_tokens: int,
                      eos_token_id: int | None, pad_token_id: int | None) -> torch.Tensor:
    """Greedy generation of a model whose encoder reads the images (a VisionEncoderDecoder's): the processor's image
    inputs through the encoder, the decoders from the start token, or from ``decoder_input_ids`` (a task prompt)."""
    import transformers

    from onnxport.hf.generate import generate_seq2seq
    from onnxport.hf.seq2seq import VISION_TEXT_DECODERS, decoder_start_token

    def tensor(name: str) -> torch.Tensor | None:
        value = inputs.get(name)
        if value is None or isinstance(value, torch.Tensor):
            return value
        return torch.from_numpy(np.asarray(value))

    main = next((name for name in ENCODED_IMAGE_INPUTS if inputs.get(name) is not None), None)
    if main is None:
        raise InvalidInputError(f"the encoder of {folder} takes {' or '.join(ENCODED_IMAGE_INPUTS)}, which the "
                                "inputs lack", fix="pass the images (images=), or what the model's processor gives "
                                "for them (inputs=)")
    config = transformers.AutoConfig.from_pretrained(folder)
    ends = VISION_TEXT_DECODERS.get(config.model_type)
    if ends is not None and eos_token_id is None:  # BLIP's generate stops at its [SEP]
        eos_token_id = getattr(config.get_text_config(), ends[2], None)
    generation, eos_token_id, pad_token_id = _stops(folder, eos_token_id, pad_token_id)
    start = decoder_start_token(generation, config)
    return generate_seq2seq(*(os.path.join(folder, name) for name in files), tensor(main), tensor("attention_mask"),
                            decoder_start_token_id=start, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id,
                            pad_token_id=pad_token_id, decoder_input_ids=tensor("decoder_input_ids"))


def _stops(folder: str, eos_token_id: Any, pad_token_id: int | None) -> tuple[Any, int | None, int | None]:
    """The folder's generation config (None where it has none), and the end and pad tokens: those given, else the
    generation config's (the first of a list of end tokens)."""
    import transformers

    generation = None
    if os.path.isfile(os.path.join(folder, "generation_config.json")):
        generation = transformers.GenerationConfig.from_pretrained(folder)
        eos_token_id = generation.eos_token_id if eos_token_id is None else eos_token_id
        pad_token_id = generation.pad_token_id if pad_token_id is None else pad_token_id
    if isinstance(eos_token_id, list):
        eos_token_id = eos_token_id[0]
    return generation, eos_token_id, pad_token_id


def _image_rows(vision: Any, batch: dict[str, np.ndarray]) -> np.ndarray:
    """Every image's rows, one image after the other, from the image encoder ``vision``."""
    declared = {i.name: _NUMPY.get(i.type, np.float32) for i in vision.get_inputs()}
    if "image_sizes" in batch and "image_sizes" not in declared:  # one image at a time, cut to its own size
        pixels = [batch["pixel_values"][i:i + 1, :, :h, :w] for i, (h, w) in enumerate(batch["image_sizes"])]
        return np.concatenate([vision.run(None, {"pixel_values": p.astype(declared["pixel_values"])})[0]
                               for p in pixels])
    absent = [name for name in declared if name not in batch]
    if absent:
        raise InvalidInputError(f"the image encoder takes {', '.join(absent)}, which the processor did not give",
                                fix="pass what the model's processor gives for the images (inputs=)")
    return vision.run(None, {name: batch[name].astype(kind) for name, kind in declared.items()})[0]


def _audio_rows(audio: Any, batch: dict[str, np.ndarray]) -> np.ndarray:
    """Every clip's rows (every window's, Voxtral's), one after the other, from the audio encoder ``audio``, run on
    one at a time as the processor padded it; those ``input_features_mask`` keeps, where it is given (Granite
    Speech's padded clips: its forward keeps those rows alone)."""
    name = audio.get_inputs()[0].name
    features = batch["input_features"].astype(np.float32)
    rows = np.concatenate([audio.run(None, {name: features[i:i + 1]})[0] for i in range(features.shape[0])])
    mask = batch.get("input_features_mask")
    if mask is not None and mask.size == rows.shape[0]:
        rows = rows[mask.reshape(-1).astype(bool)]
    return rows


def _positions(folder: str, decoder: Any, ids: np.ndarray, mask: np.ndarray, batch: dict[str, np.ndarray]) -> Any:
    """The decoder's positions for ``generate``: None (counted over the mask) unless it takes three per token."""
    import transformers

    declared = {i.name: i for i in decoder.get_inputs()}
    if "position_ids" not in declared or len(declared["position_ids"].shape) != 3:
        return None
    config = transformers.AutoConfig.from_pretrained(folder)
    model_class = transformers.AutoModelForImageTextToText._model_mapping[type(config)]
    rope = RopeIndex.of_config(config, model_class, image_token_id(config))
    if rope is None:
        raise InvalidInputError(f"the decoder takes 3-d position_ids, and {model_class.__name__} has no "
                                "get_rope_index to make them", fix="export the folder again with this transformers")
    prompt = rope.prompt(ids, mask, batch)

    def positions(step_mask: np.ndarray, new: int) -> np.ndarray:
        return prompt if step_mask.shape[1] == ids.shape[1] else rope(step_mask, new)

    return positions
