"""Pipelines for a folder ``export_hf`` wrote for ``image-to-text`` or ``document-question-answering``: an
encoder-decoder whose encoder reads the image (a VisionEncoderDecoder: TrOCR, Donut, ViT-GPT2; Pix2Struct, BLIP's
captioner), its encoder and decoders run in onnxruntime by ``onnxport.hf.multimodal.generate_vlm``.

- :class:`EncodedGenerator` is the folder called as transformers' pipelines call a model's ``generate``: greedy
  search, the settings read from the call, the generation config it passes, or the folder's. transformers'
  ``document-question-answering`` pipeline runs a Donut folder with it.
- :class:`ImageToTextPipeline`: transformers 5 has no image-to-text pipeline, so this is onnxport's, computed as
  transformers 4's and transformers.js's are: the image processor's pixels, one image at a time, the generated
  tokens decoded without their special tokens.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from typing import Any

from onnxport.errors import InvalidInputError
from onnxport.hf.pipeline_model import PipelineModel

__all__ = ["EncodedGenerator", "ImageToTextPipeline"]

# What a pipeline hands generate() beside the settings: the model's inputs, and flags that ask for what the runner
# does not return (attentions: the document-question-answering pipeline asks, and reads only the tokens).
_INPUTS = ("pixel_values", "flattened_patches", "attention_mask", "decoder_input_ids")
_IGNORED = ("output_attentions",)
_MAX_LENGTH = 20  # generate's length in all where nothing sets one


class EncodedGenerator(PipelineModel):
    """The encoder and decoders in ``folder``, with ``generate`` as a transformers encoder-decoder's: the image
    inputs (``inputs``, ``pixel_values`` or ``flattened_patches`` with their ``attention_mask``) and an optional
    ``decoder_input_ids`` prompt in, the decoder's tokens out (``(batch, prompt + new)``, its start token first
    without a prompt), or a ``GenerateEncoderDecoderOutput`` of them for ``return_dict_in_generate``.

    Greedy search only; new tokens stop at the end-of-sequence token, at ``max_new_tokens`` (or ``max_length``
    in all), and where the decoder reads learned positions, at its last position (``max_position_embeddings``),
    as transformers.js stops there."""

    main_input_name = "pixel_values"
    input_modalities = ("image", "text")
    output_modalities = ("text",)

    def __init__(self, folder: str, config: Any, generation_config: Any = None) -> None:
        import transformers

        self.folder = folder
        self.name_or_path = folder
        self.config = config
        self.generation_config = generation_config or transformers.GenerationConfig.from_model_config(config)

    @classmethod
    def of(cls, folder: str) -> EncodedGenerator:
        """The generator of ``folder`` (its config.json, and its generation_config.json where it has one)."""
        import transformers

        config = transformers.AutoConfig.from_pretrained(folder, local_files_only=True)
        generation = None
        if os.path.isfile(os.path.join(folder, "generation_config.json")):
            generation = transformers.GenerationConfig.from_pretrained(folder, local_files_only=True)
        return cls(folder, config, generation)

    def __repr__(self) -> str:
        return f"EncodedGenerator({self.folder!r})"

    def can_generate(self) -> bool:
        return True

    def generate(self, inputs: Any = None, generation_config: Any = None, *, return_dict_in_generate: bool = False,
                 **kwargs: Any) -> Any:
        from onnxport.hf.multimodal import generate_vlm

        settings = copy.deepcopy(generation_config or self.generation_config)
        given = settings.update(**{k: v for k, v in kwargs.items() if k not in _IGNORED})  # the rest: model inputs
        unknown = sorted(k for k in given if k not in _INPUTS and given[k] is not None)
        if unknown:
            raise InvalidInputError(f"generate takes no {', '.join(unknown)} here",
                                    fix=f"pass the image inputs ({', '.join(_INPUTS)}) and generation settings")
        if settings.do_sample or (settings.num_beams or 1) > 1:
            raise InvalidInputError("onnxport's runner generates greedily (do_sample=False, num_beams=1)",
                                    fix="leave do_sample and num_beams out")
        feeds = {k: v for k, v in given.items() if k in _INPUTS and v is not None}
        if inputs is not None:
            feeds.setdefault("pixel_values", inputs)
        prompt = feeds.get("decoder_input_ids")
        tokens = generate_vlm(self.folder, inputs=feeds, max_new_tokens=self._new_tokens(settings, prompt),
                              eos_token_id=settings.eos_token_id, pad_token_id=settings.pad_token_id)
        if not return_dict_in_generate:
            return tokens
        from transformers.generation.utils import GenerateEncoderDecoderOutput

        return GenerateEncoderDecoderOutput(sequences=tokens)

    def _new_tokens(self, settings: Any, prompt: Any) -> int:
        """The most new tokens: ``max_new_tokens``, else what ``max_length`` leaves, within the decoder's learned
        positions."""
        length = 1 if prompt is None else int(prompt.shape[-1])
        new = settings.max_new_tokens if settings.max_new_tokens is not None else \
            (settings.max_length or _MAX_LENGTH) - length
        positions = getattr(self.config.get_text_config(decoder=True), "max_position_embeddings", None)
        if isinstance(positions, int):
            new = min(new, positions - length)
        if new < 1:
            raise InvalidInputError(f"the prompt's {length} tokens leave no room for new ones "
                                    f"(max_new_tokens {settings.max_new_tokens}, max_length {settings.max_length}, "
                                    f"the decoder's positions {positions})", fix="pass a larger max_new_tokens, or a "
                                    "shorter prompt")
        return new


class ImageToTextPipeline:
    """``pipeline(folder)`` for ``image-to-text``: ``captioner(image)`` -> ``[{"generated_text": ...}]``, a list of
    those for a list of images. An image is a PIL image, a path or a URL (as transformers' ``load_image`` reads
    them); ``max_new_tokens`` (default: the folder's generation config, else 20) and ``generate_kwargs``
    (greedy settings, a ``decoder_input_ids`` prompt) go to :class:`EncodedGenerator`'s ``generate``."""

    task = "image-to-text"

    def __init__(self, model: EncodedGenerator, image_processor: Any, tokenizer: Any) -> None:
        self.model = model
        self.image_processor = image_processor
        self.tokenizer = tokenizer

    def __call__(self, images: Any, max_new_tokens: int | None = None,
                 generate_kwargs: dict[str, Any] | None = None) -> list[Any]:
        from transformers.image_utils import load_image

        single = not isinstance(images, Sequence) or isinstance(images, str)
        settings = dict(generate_kwargs or {})
        if max_new_tokens is not None:
            settings["max_new_tokens"] = max_new_tokens
        results = []
        for image in [images] if single else list(images):
            try:
                picture = load_image(image)
            except (OSError, ValueError, TypeError) as exc:
                raise InvalidInputError(f"cannot read the image {str(image)[:80]!r}: {exc}",
                                        fix="pass a PIL image, a file path or a URL") from None
            inputs = {k: v for k, v in self.image_processor(picture, return_tensors="pt").items() if k in _INPUTS}
            tokens = self.model.generate(**inputs, **settings)
            results.append([{"generated_text": self.tokenizer.decode(row, skip_special_tokens=True)}
                            for row in tokens])
        return results[0] if single else results
