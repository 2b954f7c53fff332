"""The task of a model directory, read from its files as the Hugging Face Hub reads a model's task (``--task auto``).

A sentence-transformers directory (a ``modules.json``) is ``sentence-similarity``, a diffusers pipeline directory
(a ``model_index.json``) ``text-to-image``; otherwise each class named in
config.json's ``architectures`` gives a task by its head: ``*ForCausalLM`` (and ``*LMHeadModel``) generate text,
``*ForMaskedLM`` fill a mask, ``*ForSequenceClassification``, ``*ForTokenClassification``,
``*ForQuestionAnswering``, ``*ForImageClassification``, ``*ForObjectDetection``, ``*ForDepthEstimation`` and
``*ForAudioClassification`` are those tasks, ``*ForSemanticSegmentation`` and ``*ForImageSegmentation`` (CLIPSeg's,
prompted by text) are ``image-segmentation``, ``*ForCTC``
``automatic-speech-recognition``, ``*ForImageMatting`` ``image-matting`` and ``*ForPoseEstimation``
``pose-estimation``; a class transformers' audio-classification, zero-shot-image-classification,
zero-shot-object-detection, text-to-waveform or image-to-image auto class loads is that task (the sequence classifier
of an audio model, ``Wav2Vec2ForSequenceClassification``; ``CLIPModel``, ``SiglipModel``; ``OwlViTForObjectDetection``;
``VitsModel``: ``text-to-audio``; ``Swin2SRForImageSuperResolution``; ``SamModel``: ``mask-generation``);
``PatchTSTForPrediction`` and ``PatchTSMixerForPrediction`` are ``time-series-forecasting`` (the other
``*ForPrediction`` classes, Informer's, TimesFM's, are not exported); a
``*ForConditionalGeneration`` is ``text2text-generation``, ``automatic-speech-recognition`` or
``image-text-to-text`` where transformers' seq2seq, speech-seq2seq or image-text-to-text auto classes load it
(``audio-text-to-text`` where both its speech-seq2seq and its multimodal LM auto classes do: a language model that
hears, Voxtral, Granite Speech), a ``VisionEncoderDecoderModel`` (TrOCR, Donut: its encoder reads the image)
``image-to-text``, and a bare ``*Model`` of a text model (one with a vocabulary) is ``feature-extraction``.
Anything else, or classes that disagree, is refused: the caller names the task.
"""

from __future__ import annotations

import json
import os
from typing import Any, NamedTuple

from onnxport.arguments import as_path
from onnxport.errors import InvalidInputError
from onnxport.hf import forecasting

__all__ = ["MODULES_FILE", "Picked", "heads", "is_ctc", "model_class_names", "pick_task"]

MODULES_FILE = "modules.json"  # what makes a directory a sentence-transformers model
PIPELINE_INDEX = "model_index.json"  # what makes a directory a diffusers pipeline

# The heads whose name says the task, in the order they are tried (the first suffix that matches wins).
_HEADS = (
    ("ForCausalLM", "text-generation"),
    ("LMHeadModel", "text-generation"),
    ("ForMaskedLM", "fill-mask"),
    ("ForSequenceClassification", "text-classification"),
    ("ForTokenClassification", "token-classification"),
    ("ForQuestionAnswering", "question-answering"),
    ("ForImageClassification", "image-classification"),
    ("ForImageClassificationWithTeacher", "image-classification"),
    ("ForObjectDetection", "object-detection"),
    ("ForSemanticSegmentation", "image-segmentation"),
    ("ForImageSegmentation", "image-segmentation"),  # CLIPSeg: no auto class maps it
    ("ForDepthEstimation", "depth-estimation"),
    ("ForAudioClassification", "audio-classification"),
    ("ForAudioFrameClassification", "audio-frame-classification"),
    ("ForXVector", "audio-xvector"),
    ("ForCTC", "automatic-speech-recognition"),  # a CTC head: one model, characters per frame
    ("ForImageMatting", "image-matting"),  # VitMatte
    ("ForPoseEstimation", "pose-estimation"),  # VitPose
)
# transformers' lists of the classes each auto class loads, by task (its modeling_auto module).
_MAPPINGS = {
    "text-generation": "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "feature-extraction": "MODEL_MAPPING_NAMES",
    "text-classification": "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
    "fill-mask": "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
    "token-classification": "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES",
    "question-answering": "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES",
    "image-classification": "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
    "image-feature-extraction": "MODEL_MAPPING_NAMES",
    "text2text-generation": "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
    "automatic-speech-recognition": "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES",
    "zero-shot-image-classification": "MODEL_FOR_ZERO_SHOT_IMAGE_CLASSIFICATION_MAPPING_NAMES",
    "object-detection": "MODEL_FOR_OBJECT_DETECTION_MAPPING_NAMES",
    "image-segmentation": "MODEL_FOR_SEMANTIC_SEGMENTATION_MAPPING_NAMES",
    "depth-estimation": "MODEL_FOR_DEPTH_ESTIMATION_MAPPING_NAMES",
    "audio-classification": "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES",
    "audio-frame-classification": "MODEL_FOR_AUDIO_FRAME_CLASSIFICATION_MAPPING_NAMES",
    "audio-xvector": "MODEL_FOR_AUDIO_XVECTOR_MAPPING_NAMES",
    "image-text-to-text": "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES",
    "multimodal": "MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES",  # with speech-seq2seq's: audio-text-to-text (_task_of)
    "text-to-audio": "MODEL_FOR_TEXT_TO_WAVEFORM_MAPPING_NAMES",
    "image-to-image": "MODEL_FOR_IMAGE_TO_IMAGE_MAPPING_NAMES",
    "zero-shot-object-detection": "MODEL_FOR_ZERO_SHOT_OBJECT_DETECTION_MAPPING_NAMES",
    "mask-generation": "MODEL_FOR_MASK_GENERATION_MAPPING_NAMES",
    "image-matting": "MODEL_FOR_IMAGE_MATTING_MAPPING_NAMES",
    "pose-estimation": "MODEL_FOR_POSE_ESTIMATION_MAPPING_NAMES",
    "ctc": "MODEL_FOR_CTC_MAPPING_NAMES",  # automatic-speech-recognition by a CTC head (see is_ctc)
}


class Picked(NamedTuple):
    """The task ``auto`` picked and what it read to pick it (for people)."""

    task: str
    why: str

    def __str__(self) -> str:
        return f"task auto: {self.task} ({self.why})"


def heads(task: str) -> tuple[str, ...]:
    """The ends of the names of the model classes that are ``task``'s by their head (``ForSemanticSegmentation``,
    ``ForImageSegmentation`` for image-segmentation)."""
    return tuple(suffix for suffix, of in _HEADS if of == task)


def model_class_names(task: str, model_type: str) -> tuple[str, ...]:
    """The transformers classes that the auto class of ``task`` loads for ``model_type`` (none when unknown)."""
    try:
        from transformers.models.auto import modeling_auto
    except ImportError:
        return ()
    names = getattr(modeling_auto, _MAPPINGS.get(task, ""), {}).get(model_type, ())
    return (names,) if isinstance(names, str) else tuple(names)


def pick_task(directory: str | os.PathLike[str]) -> Picked:
    """The task of the model in ``directory``; an ``InvalidInputError`` when its files do not tell."""
    directory = as_path(directory, "directory", "pass a transformers model directory")
    if not os.path.isdir(directory):
        raise InvalidInputError(f"{directory} is not a folder", fix="point at a transformers model directory "
                                "(config.json and safetensors weights, as save_pretrained writes it)")
    if os.path.isfile(os.path.join(directory, MODULES_FILE)):
        return Picked("sentence-similarity", f"a sentence-transformers directory: it has {MODULES_FILE}")
    if os.path.isfile(os.path.join(directory, PIPELINE_INDEX)):
        return Picked("text-to-image", f"a diffusers pipeline directory: it has {PIPELINE_INDEX}")
    path = os.path.join(directory, "config.json")
    fix = "name the task: --task (or task=) with one of the tasks export-hf knows"
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        raise InvalidInputError(f"cannot tell the task of {directory}: {path} cannot be read ({exc})",
                                fix=fix) from None
    architectures = data.get("architectures") if isinstance(data, dict) else None
    if not architectures or not isinstance(architectures, list) or not all(isinstance(a, str) for a in architectures):
        raise InvalidInputError(f"cannot tell the task of {directory}: {path} names no architectures",
                                fix=fix + ' (or add the model\'s class, e.g. "architectures": ["BertForMaskedLM"])')
    model_type = data.get("model_type") if isinstance(data.get("model_type"), str) else ""
    tasks = {name: _task_of(name, model_type, data) for name in architectures}
    found = sorted({t for t in tasks.values() if t is not None})
    if len(found) == 1:
        names = ", ".join(name for name, t in tasks.items() if t == found[0])
        return Picked(found[0], f"config.json's architectures: {names}")
    if not found:
        raise InvalidInputError(
            f"cannot tell the task of {directory}: config.json's architectures ({', '.join(architectures)}) name no "
            "head onnxport exports for a task", fix=fix)
    raise InvalidInputError(
        f"cannot tell the task of {directory}: config.json's architectures disagree ("
        + ", ".join(f"{name}: {t}" for name, t in tasks.items() if t is not None) + ")", fix=fix)


def is_ctc(directory: str) -> bool:
    """Whether the speech model in ``directory`` recognises speech by a CTC head (Wav2Vec2, HuBERT, WavLM, Parakeet's
    CTC: one model, a character per audio frame) rather than as an encoder-decoder: config.json's architectures
    name a ``*ForCTC`` class, or its type has a CTC class and no speech encoder-decoder one."""
    try:
        with open(os.path.join(directory, "config.json"), encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return False
    names = data.get("architectures") or []
    model_type = data.get("model_type") if isinstance(data.get("model_type"), str) else ""
    if any(isinstance(n, str) and n.endswith("ForCTC") for n in names):
        return True
    return bool(model_class_names("ctc", model_type)) and not model_class_names("automatic-speech-recognition",
                                                                                model_type)


def _task_of(name: str, model_type: str, data: dict[str, Any]) -> str | None:
    if model_type == "vision-encoder-decoder":  # an image's text (a Donut asked questions: document-question-answering)
        return "image-to-text"
    for task in ("audio-classification", "zero-shot-image-classification", "zero-shot-object-detection",
                 "text-to-audio", "image-to-image", "mask-generation"):
        if name in model_class_names(task, model_type):  # Wav2Vec2ForSequenceClassification, CLIPModel, VitsModel, ...
            return task
    if name.endswith("ForPrediction"):  # Informer's, Autoformer's, TimesFM's too: PatchTST's and PatchTSMixer's alone
        return forecasting.TASK if name == forecasting.CLASSES.get(model_type) else None
    for suffix, task in _HEADS:
        if name.endswith(suffix):
            return task
    if name.endswith(("ForConditionalGeneration", "ForSpeechSeq2Seq")):
        if name in model_class_names("automatic-speech-recognition", model_type) and \
                name in model_class_names("multimodal", model_type):  # a language model that hears (Voxtral)
            return "audio-text-to-text"
        for task in ("automatic-speech-recognition", "text2text-generation", "image-text-to-text"):
            if name in model_class_names(task, model_type):
                return task
        return None
    if name.endswith("Model") and "For" not in name and "vocab_size" in _text_settings(data) \
            and not data.get("is_encoder_decoder"):
        return "feature-extraction"  # the bare encoder or decoder of a text model; an image one has no vocabulary
    if name.endswith("Model") and "For" not in name and "image_size" in data and "vocab_size" not in data:
        return "image-feature-extraction"  # the bare vision model (ViT's, DINOv2's)
    return None


def _text_settings(data: dict[str, Any]) -> dict[str, Any]:
    text = data.get("text_config")
    return text if isinstance(text, dict) and "vocab_size" in text else data
