"""Run a folder ``export_hf`` wrote in onnxruntime behind transformers' own pipeline: ``pipeline(folder)``.

The model is ``OnnxRuntimeModel``: an onnxruntime session called as transformers' pipelines call a model (keyword
tensors in, the task's ``ModelOutput`` out), so the tokenizer, the image processor and the post-processing are
transformers' own, read from the folder (``export_hf`` copies config.json and the tokenizer or processor files
there), and the answers are those ``transformers.pipeline(task)`` gives for the model in PyTorch, scores within
the export's precision; the image tasks (``image-classification``, ``zero-shot-image-classification`` with the
tokenizer too, ``object-detection``, ``image-segmentation``, ``depth-estimation``) get the folder's image
processor, ``audio-classification`` its feature extractor; ``text-to-audio`` (VITS) gives the waveform the model draws.
Four tasks transformers has no pipeline for get
onnxport's: ``question-answering`` (``onnxport.hf.question_answering``), ``sentence-similarity``
(``SentenceSimilarityPipeline``: embeddings as sentence-transformers' ``encode`` gives them, and cosine
similarities), ``image-to-image`` (``onnxport.hf.image_to_image``: super-resolution, as transformers 4 and
transformers.js compute it) and ``image-to-text`` (``onnxport.hf.image_to_text``: an image encoder-decoder's
captions, generated in onnxruntime). ``document-question-answering`` (a Donut folder) runs transformers' own
pipeline, its ``generate`` onnxport's (:data:`GENERATING`), and ``mask-generation`` transformers' own on SAM's two
models (``onnxport.hf.mask_generation.SamOnnxModel``).

The task is the one each exported model names in its metadata (``onnxport.hf.task``); a folder exported for
text generation or another seq2seq task is refused, naming what runs it (onnxruntime-genai, ``onnxport.generate``,
``onnxport.generate_seq2seq``).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from onnxport import metadata
from onnxport.arguments import as_path
from onnxport.errors import InvalidInputError
from onnxport.hf.examples import ENCODED_TASKS, TASKS
from onnxport.hf.pipeline_model import PipelineModel
from onnxport.hf.sentence import SETTINGS_FILE
from onnxport.hf.tasks import model_class_names

__all__ = ["RUNNABLE", "OnnxRuntimeModel", "SentenceSimilarityPipeline", "pipeline"]

_ANY = "ModelOutput"  # a ModelOutput of the model's outputs, whatever they are (the model's own class is its module's)
# The tasks pipeline() runs -> the transformers ModelOutput class their model returns, and its output needed (one of
# them, for a tuple).
RUNNABLE = {
    "feature-extraction": ("BaseModelOutputWithPooling", "last_hidden_state"),
    "text-classification": ("SequenceClassifierOutput", "logits"),
    "token-classification": ("TokenClassifierOutput", "logits"),
    "fill-mask": ("MaskedLMOutput", "logits"),
    "question-answering": ("QuestionAnsweringModelOutput", "start_logits"),
    "image-classification": ("ImageClassifierOutput", "logits"),
    "image-feature-extraction": ("BaseModelOutputWithPooling", "last_hidden_state"),
    "sentence-similarity": (None, "sentence_embedding"),
    "zero-shot-image-classification": (_ANY, "logits_per_image"),
    "object-detection": (_ANY, "pred_boxes"),
    # a semantic head's logits per class and pixel; a universal one's per query (DETR's panoptic head: logits and
    # pred_masks; MaskFormer's: class_queries_logits and masks_queries_logits), which its processor post-processes
    "image-segmentation": (_ANY, ("logits", "class_queries_logits")),
    "depth-estimation": ("DepthEstimatorOutput", "predicted_depth"),
    "audio-classification": ("SequenceClassifierOutput", "logits"),
    "text-to-audio": (_ANY, "waveform"),
    "image-to-image": ("ImageSuperResolutionOutput", "reconstruction"),
    "zero-shot-object-detection": (_ANY, "pred_boxes"),
    "automatic-speech-recognition": ("CausalLMOutput", "logits"),  # a CTC model's (a seq2seq folder is refused)
}
# What each task's pipeline reads besides the model: its tokenizer, image processor or feature extractor.
_COMPONENTS = {"image-classification": ("image_processor",), "image-feature-extraction": ("image_processor",),
               "object-detection": ("image_processor",), "image-to-image": ("image_processor",),
               "image-segmentation": ("image_processor",), "depth-estimation": ("image_processor",),
               "zero-shot-image-classification": ("tokenizer", "image_processor"),
               "zero-shot-object-detection": ("tokenizer", "image_processor"),
               "audio-classification": ("feature_extractor",),
               "automatic-speech-recognition": ("feature_extractor", "tokenizer")}
# The tasks whose folder holds an encoder and decoders that a pipeline runs (``onnxport.hf.image_to_text``).
GENERATING = tuple(ENCODED_TASKS)
MASKS = TASKS["mask-generation"].pieces  # SAM's models, run behind transformers' mask-generation pipeline
ALIASES = {"sentiment-analysis": "text-classification", "ner": "token-classification"}  # transformers' names
_NO_PIPELINE = ("transformers has no pipeline for it: run the folder's model.onnx in onnxruntime on what its feature "
                "extractor gives (transformers.AutoFeatureExtractor.from_pretrained(folder))")
_ELSEWHERE = {
    "text-generation": "run the folder with onnxruntime-genai (og.Model(folder)) or onnxport.generate(folder + "
                       "'/model.onnx', input_ids)",
    "text2text-generation": "generate with onnxport.generate_seq2seq(encoder, decoder, decoder_with_past, ...)",
    "automatic-speech-recognition": "generate with onnxport.generate_seq2seq(encoder, decoder, decoder_with_past, ...)",
    "image-text-to-text": "generate with onnxport.hf.multimodal.generate_vlm(folder, text, images)",
    "audio-text-to-text": "transformers has no pipeline for it: generate with "
                          "onnxport.hf.multimodal.generate_vlm(folder, inputs=...) on what its processor gives",
    "audio-frame-classification": _NO_PIPELINE,
    "audio-xvector": _NO_PIPELINE,
    "image-matting": "transformers has no pipeline for it: run the folder's model.onnx in onnxruntime on what its "
                     "image processor gives (AutoImageProcessor.from_pretrained(folder)(images, trimaps)): alphas",
    "pose-estimation": "transformers has no pipeline for it: run the folder's model.onnx in onnxruntime on what its "
                       "image processor gives (AutoImageProcessor.from_pretrained(folder)(images, boxes=...)), and "
                       "read keypoints from its heatmaps with the processor's post_process_pose_estimation",
    "time-series-forecasting": "transformers has no pipeline for it: run the folder's model.onnx in onnxruntime on "
                               "past_values [batch, context_length, num_input_channels]",
}
_NUMPY = {"tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(float)": np.float32,
          "tensor(float16)": np.float16, "tensor(double)": np.float64, "tensor(bool)": np.bool_}
_FILES = {"tokenizer": ("tokenizer.json", "tokenizer_config.json"), "image_processor": ("preprocessor_config.json",),
          "feature_extractor": ("preprocessor_config.json",)}
_EXPORT_AGAIN = "export the model again with onnxport export-hf (python: onnxport.hf.export_hf)"


def pipeline(folder: str | os.PathLike[str], task: str | None = None, *, providers: Sequence[Any] | None = None,
             session_options: Any = None, **kwargs: Any) -> Any:
    """transformers' pipeline for the task of the exported ``folder`` (or its ``model.onnx``), running the model
    in onnxruntime: ``pipeline("out")("Paris is the [MASK] of France")``.

    A ``text-to-image`` folder (a diffusers pipeline: ``model_index.json``) gets
    ``onnxport.hf.diffusion_runner.OnnxDiffusionPipeline``, which runs the denoising loop with diffusers' own
    scheduler: ``pipeline("out")("a photo of a cat", num_inference_steps=20).images``.

    ``task`` defaults to the one the model was exported for (and must agree with it); ``providers`` and
    ``session_options`` are onnxruntime's (default: the CPU provider); other keyword arguments go to the
    pipeline (``top_k=``, ``aggregation_strategy=``, ...). The pipeline's tensors stay on the CPU: onnxruntime's
    providers choose where the model runs.
    """
    import onnxruntime as ort

    folder = as_path(folder, "folder", "pass the folder export-hf wrote")
    if os.path.isfile(os.path.join(folder, "model_index.json")) and task in (None, "text-to-image"):
        from onnxport.hf.diffusion_runner import text_to_image  # a diffusers pipeline, run with its scheduler

        return text_to_image(folder, providers=providers)
    path = os.path.join(folder, "model.onnx")
    if folder.endswith(".onnx") and os.path.isfile(folder):
        path, folder = folder, os.path.dirname(folder) or "."
    if not os.path.isdir(folder):
        raise InvalidInputError(f"{folder} is not a folder", fix="give the folder export_hf (onnxport export-hf) wrote")
    if not os.path.isfile(path):
        encoder = os.path.join(folder, "encoder_model.onnx")
        recorded = _recorded_task(encoder) if os.path.isfile(encoder) else None
        if recorded in GENERATING:
            return _generating(folder, _task(task, recorded, encoder), kwargs)
        vision = os.path.join(folder, f"{MASKS[0]}.onnx")
        if os.path.isfile(vision) and _task(task, _recorded_task(vision), vision) == "mask-generation":
            return _masks(folder, providers, session_options, kwargs)
        if recorded == "feature-extraction":  # onnxport.hf.audio_codec's two files
            raise InvalidInputError(f"{folder} holds an audio codec's encoder_model and decoder_model, which no "
                                    "pipeline runs", fix="run them with onnxruntime: encoder_model gives the "
                                    "audio_codes of input_values, decoder_model the audio_values of audio_codes")
        if os.path.isfile(encoder):
            raise InvalidInputError(f"{folder} holds a seq2seq export (encoder_model.onnx, decoder_model.onnx, ...), "
                                    "which no pipeline runs", fix=_ELSEWHERE["text2text-generation"])
        if os.path.isfile(os.path.join(folder, "text_encoder.onnx")):  # onnxport.hf.musicgen's three files
            raise InvalidInputError(
                f"{folder} holds MusicGen's text_encoder, decoder_model_merged and encodec_decode, which onnxport's "
                "pipeline does not run", fix="generate with them in a loop of your own (onnxport.hf.musicgen "
                "describes the files), or export for transformers.js and run its MusicgenForConditionalGeneration")
        raise InvalidInputError(f"{folder} has no model.onnx",
                                fix="give the folder export_hf (onnxport export-hf) wrote")
    if not os.path.isfile(os.path.join(folder, "config.json")):
        raise InvalidInputError(f"{folder} has no config.json, which the pipeline reads (labels, tokens)",
                                fix=f"{_EXPORT_AGAIN}, which copies it, or copy the model's config.json there")
    task = _task(task, _recorded_task(path), path)
    if task == "mask-generation":
        raise InvalidInputError(f"mask-generation runs SAM's {' and '.join(MASKS)}, and {folder} holds one model.onnx",
                                fix=f"export the model with export_hf(directory, {task!r}, folder)")
    if task in GENERATING:
        raise InvalidInputError(f"{task} runs an encoder and its decoders (encoder_model.onnx, decoder_model.onnx, "
                                f"decoder_with_past_model.onnx), and {folder} holds one model.onnx",
                                fix=f"export the model with export_hf(directory, {task!r}, folder)")
    components = _COMPONENTS.get(task, ("tokenizer",))
    _check_components(folder, components)
    session = ort.InferenceSession(path, sess_options=session_options,
                                   providers=list(providers) if providers else ["CPUExecutionProvider"])
    import transformers

    config = transformers.AutoConfig.from_pretrained(folder, local_files_only=True)
    model = OnnxRuntimeModel.of(session, config, task, path)
    if task == "sentence-similarity":
        if kwargs:
            raise InvalidInputError(f"sentence-similarity takes no {', '.join(sorted(kwargs))}",
                                    fix="pass batch_size to encode() instead")
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
        return SentenceSimilarityPipeline(model, tokenizer, _settings(folder))
    if task == "question-answering":
        from onnxport.hf.question_answering import QuestionAnsweringPipeline

        tokenizer = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
        return QuestionAnsweringPipeline(model=model, tokenizer=tokenizer, task=task, device="cpu", **kwargs)
    if task == "image-to-image":
        from onnxport.hf.image_to_image import ImageToImagePipeline

        if kwargs:
            raise InvalidInputError(f"image-to-image takes no {', '.join(sorted(kwargs))}", fix="leave them out")
        processor = transformers.AutoImageProcessor.from_pretrained(folder, local_files_only=True)
        return ImageToImagePipeline(model, processor)
    # transformers loads the tokenizer (or image processor) from the folder, as it would from the model's directory
    return transformers.pipeline(task, model=model, config=folder, device="cpu",
                                 **{component: folder for component in components}, **kwargs)


def _generating(folder: str, task: str, kwargs: dict[str, Any]) -> Any:
    """The pipeline of a :data:`GENERATING` task on ``folder``'s encoder and decoders: onnxport's image-to-text one
    (transformers 5 has none), transformers' document-question-answering one on Donut's."""
    import transformers

    from onnxport.hf.image_to_text import EncodedGenerator, ImageToTextPipeline

    _check_components(folder, ("tokenizer", "image_processor"))
    model = EncodedGenerator.of(folder)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    processor = transformers.AutoImageProcessor.from_pretrained(folder, local_files_only=True)
    if task == "image-to-text":
        if kwargs:
            raise InvalidInputError(f"image-to-text takes no {', '.join(sorted(kwargs))} here",
                                    fix="pass max_new_tokens or generate_kwargs when calling the pipeline")
        return ImageToTextPipeline(model, processor, tokenizer)
    try:
        return transformers.DocumentQuestionAnsweringPipeline(
            model=model, tokenizer=tokenizer, image_processor=processor, task=task, device="cpu", **kwargs)
    except ValueError as exc:  # the pipeline's own checks: a Donut, a fast tokenizer that pads on the right
        raise InvalidInputError(f"transformers' {task} pipeline does not take {folder}: {exc}",
                                fix="export a Donut checkpoint (a donut-swin encoder) with its fast tokenizer, which "
                                "pads on the right") from None


def _masks(folder: str, providers: Any, session_options: Any, kwargs: dict[str, Any]) -> Any:
    """transformers' mask-generation pipeline on SAM's two models in ``folder`` (``onnxport.hf.mask_generation``)."""
    import transformers

    from onnxport.hf.mask_generation import SamOnnxModel

    _check_components(folder, ("image_processor",))
    model = SamOnnxModel.of(folder, providers=providers, session_options=session_options)
    return transformers.pipeline("mask-generation", model=model, config=folder, image_processor=folder, device="cpu",
                                 **kwargs)


def _check_components(folder: str, components: Sequence[str]) -> None:
    """Refuse a folder that lacks the files of one of the pipeline's ``components`` (tokenizer, image processor...)."""
    for component in components:
        files = _FILES[component]
        if not any(os.path.isfile(os.path.join(folder, name)) for name in files):
            raise InvalidInputError(f"{folder} has no {component.replace('_', ' ')} ({' or '.join(files)})",
                                    fix=f"copy the model's {component.replace('_', ' ')} files there (export_hf "
                                    "copies them when the model directory has them)")


def _recorded_task(path: str) -> str | None:
    """The task ``path``'s metadata names (its graph read, not its weights)."""
    import onnx

    try:
        model = onnx.load(path, load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - protobuf raises its own types
        raise InvalidInputError(f"{path} is not an ONNX model: {exc}", fix=_EXPORT_AGAIN) from None
    return metadata.text(model, metadata.TASK)


def _task(asked: str | None, recorded: str | None, path: str) -> str:
    if asked is not None and not isinstance(asked, str):
        raise InvalidInputError(f"task must be a task's name, not {type(asked).__name__}",
                                fix=f"pass one of {', '.join(RUNNABLE)}, or leave it out")
    asked = ALIASES.get(asked, asked)
    if asked is not None and recorded is not None and asked != recorded:
        raise InvalidInputError(f"{path} was exported for {recorded}, not {asked}",
                                fix=f"leave task out (it is {recorded}), or export the model for {asked}")
    task = asked or recorded
    if task is None:
        raise InvalidInputError(f"{path} does not name its task (onnxport's export_hf writes it in the model)",
                                fix="pass the task: pipeline(folder, 'text-classification'), or " + _EXPORT_AGAIN)
    if task in (*GENERATING, "mask-generation"):
        return task
    if task in _ELSEWHERE and task not in RUNNABLE:  # (a speech model.onnx is a CTC model's)
        raise InvalidInputError(f"no pipeline runs a model exported for {task}", fix=_ELSEWHERE[task])
    if task not in RUNNABLE:
        raise InvalidInputError(f"onnxport has no pipeline for the task {task!r}",
                                fix=f"use one of {', '.join(RUNNABLE)}")
    return task


class OnnxRuntimeModel(PipelineModel):
    """An exported model in an onnxruntime session, called as a transformers model: ``model(**tensors)`` -> the
    task's ``ModelOutput`` (torch tensors). ``OnnxRuntimeModel.of`` names its class after the transformers class
    the task's auto class loads (``BertForMaskedLM``...), which is what pipelines check a model by.

    Inputs are fed by name and cast to the model's types; ``token_type_ids`` are zeros where the tokenizer gives
    none (an ``attention_mask`` ones, as a model reads a missing one: SigLIP's tokenizer gives none; a
    ``pixel_mask`` ones too, for a model exported with one, DETR's, whose processor pads no batch), and
    dropped where the model takes none if they are all zeros (a single text), as are a ``pixel_mask`` and an
    ``attention_mask`` of ones (no padding; YOLOS takes no pixel mask, a group-norm Wav2Vec2 no attention mask):
    other inputs the model does not take are an ``InvalidInputError``, never
    silently dropped. Images of varying size (DETR's, RT-DETR's: dynamic height and width) go as the image
    processor gives them; a model exported for one size refuses others.
    """

    main_input_name = "input_ids"

    def __init__(self, session: Any, config: Any, task: str, path: str = "model.onnx") -> None:
        self.session = session
        self.config = config
        self.task = task
        self.path = path
        self.name_or_path = os.path.dirname(path)
        self.base_model_prefix = getattr(config, "model_type", "model")
        inputs = {i.name: i.type for i in session.get_inputs()}
        self.dtype = torch.float16 if "tensor(float16)" in inputs.values() else torch.float32
        modalities = [kind for name, kind in (("pixel_values", "image"), ("input_values", "audio"),
                                               ("input_ids", "text")) if name in inputs]
        if modalities and "input_ids" not in inputs:
            self.main_input_name = next(n for n in ("pixel_values", "input_values") if n in inputs)
        self.input_modalities = tuple(modalities) or ("text",)

    @classmethod
    def of(cls, session: Any, config: Any, task: str, path: str = "model.onnx") -> OnnxRuntimeModel:
        # (a speech folder's model.onnx is a CTC model's: transformers' pipeline decodes it as one by its class)
        kind = {"sentence-similarity": "feature-extraction", "automatic-speech-recognition": "ctc"}.get(task, task)
        names = model_class_names(kind, getattr(config, "model_type", ""))
        name = names[0] if names else cls.__name__
        return cls.named(name)(session, config, task, path)

    def __repr__(self) -> str:
        return f"OnnxRuntimeModel({self.path!r}, task={self.task!r})"

    def __call__(self, **inputs: Any) -> Any:
        return self.forward(**inputs)

    def forward(self, **inputs: Any) -> Any:
        given = {k: v for k, v in inputs.items() if isinstance(v, (torch.Tensor, np.ndarray))}
        feeds = {}
        for spec in self.session.get_inputs():
            if spec.name in given:
                feeds[spec.name] = _array(given.pop(spec.name), spec.type)
                _check_shape(feeds[spec.name], spec, self.path)
            elif spec.name in ("token_type_ids", "attention_mask") and "input_ids" in inputs:
                fill = np.zeros if spec.name == "token_type_ids" else np.ones  # no mask: every token counts
                feeds[spec.name] = fill(tuple(inputs["input_ids"].shape), dtype=_NUMPY.get(spec.type, np.int64))
            elif spec.name == "pixel_mask" and "pixel_values" in inputs:  # not padded: every pixel counts
                pixels = inputs["pixel_values"].shape
                feeds[spec.name] = np.ones((pixels[0], *pixels[2:]), dtype=_NUMPY.get(spec.type, np.int64))
            else:
                raise InvalidInputError(f"{self.path} takes {spec.name}, which the pipeline did not pass",
                                        fix=f"run it with the pipeline of its task ({self.task})")
        types = given.pop("token_type_ids", None)
        if types is not None and bool(np.asarray(types).any()):
            raise InvalidInputError(
                f"the tokenizer marks a second text (token_type_ids), but {self.path} takes no token_type_ids, so "
                "its answer would be the model's for one text", fix=f"pass single texts, or {_EXPORT_AGAIN} for a "
                "task that takes token_type_ids (fill-mask, token-classification, question-answering)")
        mask = given.pop("pixel_mask", None)
        if mask is not None and not bool(np.asarray(mask).all()):
            raise InvalidInputError(
                f"the image processor padded the images (pixel_mask), but {self.path} takes no pixel_mask, so its "
                "answer would count the padding as the image's", fix="resize the images to one size (the image "
                "processor's size as {'height': ..., 'width': ...}), or pass the images one at a time")
        mask = given.pop("attention_mask", None)
        if mask is not None and not bool(np.asarray(mask).all()):
            raise InvalidInputError(
                f"the pipeline padded the batch (attention_mask), but {self.path} takes no attention_mask (a model "
                "that reads zero-padded audio as it is: Wav2Vec2 with group norm), so its answer would count the "
                "padding as the input's", fix="pass the inputs one at a time")
        if given:
            raise InvalidInputError(f"the pipeline passed {', '.join(sorted(given))}, which {self.path} does not take",
                                    fix=f"run it with the pipeline of its task ({self.task}), or {_EXPORT_AGAIN}")
        values = self.session.run(None, feeds)
        names = [o.name for o in self.session.get_outputs()]
        outputs = {name: torch.from_numpy(np.ascontiguousarray(v)) for name, v in zip(names, values)}
        kind, needed = RUNNABLE[self.task]
        needed = (needed,) if isinstance(needed, str) else needed
        if not set(needed) & set(outputs):
            raise InvalidInputError(f"{self.path} has no output {' or '.join(needed)} (its outputs: "
                                    f"{', '.join(outputs)})",
                                    fix=f"run it with the pipeline of the task it was exported for, or {_EXPORT_AGAIN}")
        if kind is None:
            return outputs
        output_class = _output_class(kind, tuple(name for name in outputs if name.isidentifier()))
        fields = {f.name for f in dataclasses.fields(output_class)}
        return output_class(**{k: v for k, v in outputs.items() if k in fields})


def _check_shape(array: np.ndarray, spec: Any, path: str) -> None:
    """Refuse an input whose fixed sizes differ from the model's (images of the one size it was exported for,
    where its image processor gives one size; height and width are dynamic where it gives varying sizes)."""
    shape = list(spec.shape)
    if len(shape) == array.ndim and all(not isinstance(n, int) or n == m for n, m in zip(shape, array.shape)):
        return
    wanted = "[" + ", ".join(str(n) if isinstance(n, int) else "*" for n in shape) + "]"
    fix = ("give the image processor the model's size (its preprocessor_config.json's size as {'height': ..., "
           "'width': ...}, the config's image_size), or, for a model that takes images of any size, give the model "
           "directory the image processor that sizes its images (its preprocessor_config.json) and "
           f"{_EXPORT_AGAIN}: height and width are dynamic where the processor gives images of varying size"
           if spec.name in ("pixel_values", "pixel_mask") else f"pass {spec.name} of the shape the model takes")
    raise InvalidInputError(f"{path} takes {spec.name} of shape {wanted}, not {list(array.shape)}", fix=fix)


_OUTPUT_CLASSES: dict[tuple[str, ...], type] = {}


def _output_class(kind: str, names: tuple[str, ...]) -> type:
    """transformers' ``ModelOutput`` class ``kind``; for ``_ANY``, one whose fields are ``names`` (made once)."""
    import transformers.modeling_outputs
    from transformers.utils import ModelOutput

    if kind != _ANY:
        return getattr(transformers.modeling_outputs, kind)
    if names not in _OUTPUT_CLASSES:
        fields = [(name, Any, dataclasses.field(default=None)) for name in names]
        _OUTPUT_CLASSES[names] = dataclasses.make_dataclass("OnnxRuntimeOutput", fields, bases=(ModelOutput,),
                                                            namespace={"__module__": __name__})
    return _OUTPUT_CLASSES[names]


def _array(value: Any, onnx_type: str) -> np.ndarray:
    array = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
    dtype = _NUMPY.get(onnx_type)
    return array if dtype is None or array.dtype == dtype else array.astype(dtype)


def _settings(folder: str) -> dict[str, Any]:
    path = os.path.join(folder, SETTINGS_FILE)
    if not os.path.isfile(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            settings = json.load(f)
    except (OSError, ValueError) as exc:
        raise InvalidInputError(f"cannot read {path}: {exc}", fix="restore it from the sentence-transformers "
                                "directory, or export it again") from None
    return settings if isinstance(settings, dict) else {}


class SentenceSimilarityPipeline:
    """A sentence-transformers model exported by ``export_hf(..., "sentence-similarity")``, in onnxruntime.

    ``encode(sentences)`` gives the embeddings as sentence-transformers' ``SentenceTransformer.encode`` does
    (texts lower-cased where its ``do_lower_case`` says, cut to its ``max_seq_length`` tokens; numpy, one row
    per sentence). Calling it as the Hub's sentence-similarity task,
    ``sim({"source_sentence": s, "sentences": [...]})`` (or ``sim(source_sentence=s, sentences=[...])``), gives
    the cosine similarity of ``s`` with each sentence.
    """

    task = "sentence-similarity"

    def __init__(self, model: OnnxRuntimeModel, tokenizer: Any, settings: dict[str, Any] | None = None) -> None:
        self.model = model
        self.tokenizer = tokenizer
        settings = settings or {}
        limits = [n for n in (getattr(model.config, "max_position_embeddings", None), tokenizer.model_max_length)
                  if isinstance(n, int) and n > 0]
        self.max_seq_length = settings.get("max_seq_length") or (min(limits) if limits else None)
        self.do_lower_case = bool(settings.get("do_lower_case", False))

    def encode(self, sentences: str | Sequence[str], batch_size: int = 32,
               output_value: str = "sentence_embedding") -> np.ndarray | list[np.ndarray]:
        """The embedding of each sentence (``output_value="token_embeddings"``: each one's tokens' states,
        without the padding), one row per sentence; one sentence gives one vector."""
        single = isinstance(sentences, str)
        texts = [sentences] if single else list(sentences)
        if not all(isinstance(t, str) for t in texts):
            raise InvalidInputError("encode takes a string or a list of strings", fix="pass e.g. ['a text', 'another']")
        if output_value not in ("sentence_embedding", "token_embeddings"):
            raise InvalidInputError(f"output_value {output_value!r} is not an output of the model",
                                    fix="use sentence_embedding or token_embeddings")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidInputError(f"batch_size must be a positive int, not {batch_size!r}", fix="pass e.g. 32")
        texts = [t.lower() for t in texts] if self.do_lower_case else texts
        results: list[Any] = []
        for start in range(0, len(texts), batch_size):
            batch = self.tokenizer(texts[start:start + batch_size], padding=True, truncation="longest_first",
                                   max_length=self.max_seq_length, return_tensors="pt")
            outputs = self.model(**batch)
            if output_value == "sentence_embedding":
                results.extend(outputs["sentence_embedding"].numpy())
            else:
                mask = batch["attention_mask"].bool()
                results.extend(row[keep].numpy() for row, keep in zip(outputs["token_embeddings"], mask))
        if output_value == "token_embeddings":
            return results[0] if single else results
        embeddings = np.stack(results) if results else np.zeros((0, 0), dtype=np.float32)
        return embeddings[0] if single else embeddings

    def __call__(self, inputs: dict[str, Any] | None = None, *, source_sentence: str | None = None,
                 sentences: Sequence[str] | None = None, batch_size: int = 32) -> list[float]:
        """The cosine similarity of ``source_sentence`` with each of ``sentences``."""
        if inputs is not None:
            if not isinstance(inputs, dict) or source_sentence is not None or sentences is not None:
                raise InvalidInputError("sentence-similarity takes {'source_sentence': ..., 'sentences': [...]}",
                                        fix="pass that dict, or source_sentence= and sentences=")
            source_sentence, sentences = inputs.get("source_sentence"), inputs.get("sentences")
        if not isinstance(source_sentence, str) or isinstance(sentences, str) or not sentences:
            raise InvalidInputError("sentence-similarity needs a source sentence and a list of sentences",
                                    fix='pass {"source_sentence": "a text", "sentences": ["one", "two"]}')
        embeddings = self.encode([source_sentence, *sentences], batch_size=batch_size).astype(np.float64)
        norms = np.maximum(np.linalg.norm(embeddings, axis=1), 1e-12)
        unit = embeddings / norms[:, None]
        return [float(v) for v in unit[1:] @ unit[0]]
