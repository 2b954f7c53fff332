"""The folder transformers.js loads: ``export_hf(..., target="transformers.js")``.

transformers.js (npm ``@huggingface/transformers``) runs ONNX models in browsers and Node through onnxruntime-web
and onnxruntime-node. It loads a model folder as the Hub lays it out:

- the model's ``config.json`` (with a ``transformers.js_config`` entry), its tokenizer or processor files and
  ``generation_config.json``, beside
- ``onnx/``: one file per session and per precision, ``<session><suffix>.onnx``. The sessions depend on the kind
  of model: ``model`` (encoders, and decoder-only models with their KV cache), ``encoder_model`` and
  ``decoder_model_merged`` (encoder-decoders: T5, BART, Whisper). The suffix is that of the ``dtype`` a user
  picks (``pipeline(task, folder, {dtype})``): none for fp32, ``_fp16``, ``_quantized`` (q8: int8 weights and
  activations, transformers.js's default on the wasm backend), ``_q4`` and ``_q4f16`` (4-bit weights in a
  float32 or float16 model). A dtype whose file is missing is an error there, so the folder holds every one.

The variants are made from the exported float32 model: fp16 by onnxport's half conversion (float32 islands,
float32 inputs and outputs: transformers.js feeds float32 whatever the weights), q8 by its dynamic int8
quantization, q4 and q4f16 by its 4-bit ``MatMulNBits`` (blocks of 32). ``decoder_model_merged`` is the first
decoder step and the step with past in one file: an ``If`` on the ``use_cache_branch`` input, which
transformers.js sets once it has a cache; their shared weights are stored once.

A file whose weights exceed 2 GB (protobuf's limit) keeps them in ``<file>.onnx_data``, as transformers.js
reads them, and ``transformers.js_config.use_external_data_format`` names it.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx_ir as ir
import torch
from torch.utils import _pytree as pytree

from onnxport.errors import InvalidInputError
from onnxport.program import OnnxProgram
from onnxport.report import Report
from onnxport.verify.session import initializer_bytes

__all__ = ["DTYPES", "ENCODER_DECODER_TYPES", "GENERATION_FIX", "NAME", "SUBFOLDER", "TASKS", "config_settings",
           "engine_target", "file_names", "merge_decoders", "name_states", "processor_settings", "session_name",
           "splits_features", "variant", "variants", "write_folder"]

NAME = "transformers.js"
SUBFOLDER = "onnx"
# dtype -> file suffix, as transformers.js names them; the default folder holds them all.
DTYPES = {"fp32": "", "fp16": "_fp16", "q8": "_quantized", "q4": "_q4", "q4f16": "_q4f16"}
# The export-hf tasks transformers.js runs (a pipeline, or a class of its registry: audio frame classification and
# x-vectors; for image-text-to-text AutoModelForImageTextToText, for audio-text-to-text AutoModelForAudioTextToText:
# onnxport.hf.multimodal.consumers; for mask-generation its SamModel, which has no pipeline there), and the sessions
# (files) each loads.
SEQ2SEQ_SESSIONS = ("encoder_model", "decoder_model_merged")
TASKS = ("text-generation", "feature-extraction", "text-classification", "fill-mask", "token-classification",
         "question-answering", "image-classification", "image-feature-extraction", "zero-shot-image-classification",
         "object-detection", "image-segmentation", "depth-estimation", "audio-classification",
         "audio-frame-classification", "audio-xvector",
         "text2text-generation", "automatic-speech-recognition", "image-text-to-text", "audio-text-to-text",
         "text-to-audio", "image-to-image", "image-to-text", "document-question-answering", "mask-generation",
         "zero-shot-object-detection",
         "image-matting", "pose-estimation",  # no pipeline: its VitMatteForImageMatting, VitPoseForPoseEstimation
         "time-series-forecasting")  # no pipeline: its PatchTSTForPrediction, PatchTSMixerForPrediction
# The model types whose bare model transformers.js loads as an encoder-decoder (its registry's
# MODEL_MAPPING_NAMES_ENCODER_DECODER: T5Model, WhisperModel, ...): the SEQ2SEQ_SESSIONS, its forward running the
# encoder, then the decoder on decoder_input_ids; their feature-extraction folders hold those two sessions.
ENCODER_DECODER_TYPES = ("t5", "longt5", "mt5", "bart", "mbart", "marian", "whisper", "cohere_asr", "m2m_100",
                         "blenderbot", "blenderbot-small")
# The model types of the vision towers transformers.js loads from onnx/vision_model*.onnx (session_name).
_VISION_MODEL_TYPES = ("clip_vision_model", "siglip_vision_model")
# Tasks transformers.js has a pipeline for whose folders onnxport does not write yet, and why.
_NOT_YET: dict[str, str] = {}
# transformers.js releases and the onnxruntime they run on: 4.0 to 4.2 on onnxruntime-node 1.24.3 and
# onnxruntime-web 1.25 (a development build), 4.3 on 1.30 and 1.31. Its files are written for the oldest.
_ENGINES = (((4, 0), "onnxruntime-web>=1.24"),)
_SPEC = re.compile(r"^\s*transformers\.js\s*(?:>=\s*(\d+)(?:\.(\d+))?(?:\.\d+)?)?\s*$")
_TWO_GB = 2 * 1024**3
BRANCH = "use_cache_branch"


def engine_target(target: Any) -> str | None:
    """The onnxruntime target a ``transformers.js[>=X.Y]`` target's files are written for; None when ``target``
    is not a transformers.js one."""
    if not isinstance(target, str) or not target.strip().startswith(NAME):
        return None
    match = _SPEC.match(target)
    if match is None:
        raise InvalidInputError(f"target {target!r} is not one onnxport writes for",
                                fix="write transformers.js or transformers.js>=4.0")
    version = (int(match.group(1)), int(match.group(2) or 0)) if match.group(1) else _ENGINES[0][0]
    engine = None
    for since, runtime in _ENGINES:
        if version >= since:
            engine = runtime
    if engine is None:
        oldest = _ENGINES[0][0]
        raise InvalidInputError(f"target {target!r} is older than onnxport writes for: transformers.js "
                                f"{oldest[0]}.{oldest[1]} is the oldest", fix=f"name {NAME}>={oldest[0]}.{oldest[1]}")
    return engine


def session_name(task: str, config: Any) -> str:
    """The file transformers.js loads a single-model folder of ``task`` from: ``vision_model`` for the vision
    towers its image-feature-extraction classes load so (CLIPVisionModelWithProjection, SiglipVisionModel: their
    ``model_file_name``), else ``model``."""
    if task == "image-feature-extraction" and getattr(config, "model_type", None) in _VISION_MODEL_TYPES:
        return "vision_model"
    return "model"


def splits_features(config: Any) -> bool:
    """Whether transformers.js loads the bare model of ``config`` as an encoder-decoder (its feature-extraction folder
    holds the :data:`SEQ2SEQ_SESSIONS`, not one ``model``): a type of :data:`ENCODER_DECODER_TYPES`."""
    return getattr(config, "model_type", None) in ENCODER_DECODER_TYPES


def check_task(task: str) -> None:
    """Refuse a task transformers.js has no pipeline for (or computes otherwise), saying what to do instead."""
    if task == "sentence-similarity":
        raise InvalidInputError(
            "transformers.js pools sentence embeddings itself, from the transformer's last_hidden_state",
            fix="export the directory's transformer with task feature-extraction and call pipeline("
            "'feature-extraction', folder, {pooling: 'mean', normalize: true}) as its modules.json says")
    if task in _NOT_YET:
        raise InvalidInputError(f"onnxport does not write {task} folders for transformers.js yet: {_NOT_YET[task]}",
                                fix="export it for onnxruntime (no target) and run it with onnxport.hf.pipeline")
    if task not in TASKS:
        raise InvalidInputError(f"transformers.js has no pipeline for {task}",
                                fix=f"export it for onnxruntime (no target), or pick one of {', '.join(TASKS)}")


# Causal LMs whose cache transformers.js 4.3 feeds under names or in a layout onnxport's file does not have
# (getCacheNames in configs.js), or whose class there cannot run a text-only checkpoint: model type -> why.
_GENERATION_REFUSED = {
    "olmo_hybrid": "it feeds a linear-attention layer three conv states (past_conv.{i}.query, .key, .value), where "
                   "transformers 5's layer keeps one of its fused convolution",
    "zaya": "it feeds key, value, conv_state and shift_state for every cca_time1-th layer, where transformers' cache "
            "holds each layer's key, value, conv_state and recurrent_state",
    "glm_moe_dsa": "it feeds the keys and values of each layer alone, where the model's cache also holds its "
                   "indexer's keys (indexer_key)",
    "deepseek_v4": "it feeds each layer's keys and values and its compressors' pending tokens (past_compressor.{i}.kv, "
                   ".gate; past_indexer.{i}.kv, .gate), where transformers' cache also holds the entries compressed so "
                   "far (compressed_kv), a compressed_sparse_attention layer's overlap (overlap_kv, overlap_gate) and "
                   "their count (entry_count)",
    "qwen3_5_text": "its Qwen3_5ForCausalLM reads the vision config's spatial_merge_size, which a text checkpoint "
                    "does not have",
    "qwen3_5_moe_text": "its Qwen3_5MoeForCausalLM reads the vision config's spatial_merge_size, which a text "
                        "checkpoint does not have",
}
# The refusals above whose fix is not an export for onnxruntime: onnxport refuses that one too.
GENERATION_FIX = {
    "deepseek_v4": "generate with transformers: onnxport's export for onnxruntime refuses this cache too (its "
                   "compressed entries and their count are no inputs and outputs it can name); export the bare model "
                   "for feature-extraction",
}


# Other tasks' folders transformers.js's class for the type cannot run: (task, model type) -> why.
_TASK_REFUSED = {
    ("automatic-speech-recognition", "speecht5"): "its SpeechT5ForSpeechToText passes its encoder input_ids and "
    "attention_mask alone (its forward_params), never the audio's input_values, and its speech-recognition "
    "pipeline does not run speecht5",
}


def generation_refusal(config: Any, task: str = "text-generation") -> str | None:
    """Why transformers.js cannot run a ``task`` folder of ``config``, or None: :data:`_TASK_REFUSED`; for
    text-generation (its cache names or its class) :data:`_GENERATION_REFUSED`, or a decoder whose type it sizes as
    an encoder-decoder's (MBart's, TrOCR's: it feeds past_key_values.{i}.decoder.* and .encoder.*, a decoder alone
    having no encoder)."""
    from onnxport.hf.multimodal.consumers import TRANSFORMERS_JS_DECODER_CACHES

    model_type = getattr(config, "model_type", "")
    if (task, model_type) in _TASK_REFUSED:
        return _TASK_REFUSED[task, model_type]
    if task != "text-generation":
        return None
    if model_type in _GENERATION_REFUSED:
        return _GENERATION_REFUSED[model_type]
    if TRANSFORMERS_JS_DECODER_CACHES.get(model_type):
        return (f"it sizes a {model_type} decoder's cache as an encoder-decoder's (past_key_values.{{i}}.decoder.* "
                "and .encoder.*), which a decoder alone does not have")
    return None


def check_dtypes(dtypes: Any) -> tuple[str, ...]:
    """``dtypes`` (None: all of ``DTYPES``) as a checked tuple."""
    if dtypes is None:
        return tuple(DTYPES)
    if isinstance(dtypes, str):
        dtypes = [d.strip() for d in dtypes.split(",") if d.strip()]
    if not isinstance(dtypes, Iterable) or not (dtypes := tuple(dtypes)) or any(d not in DTYPES for d in dtypes):
        raise InvalidInputError(f"dtypes {dtypes!r} are not transformers.js's",
                                fix=f"pick some of {', '.join(DTYPES)} (default: all)")
    return tuple(dict.fromkeys(dtypes))


def file_names(sessions: Sequence[str], dtypes: Sequence[str]) -> list[str]:
    """The files under the output folder, ``onnx/<session><suffix>.onnx``."""
    return [f"{SUBFOLDER}/{session}{DTYPES[dtype]}.onnx" for session in sessions for dtype in dtypes]


# -- the precisions ---------------------------------------------------------------------------------------------


def variant(prog: OnnxProgram, dtype: str) -> OnnxProgram:
    """``prog`` (a float32 export) in transformers.js's ``dtype``: a new program, ``prog`` left as it is."""
    if dtype == "fp32":
        return prog
    if dtype == "q8":
        return prog.quantize(activations="dynamic")
    if dtype == "q4":
        return prog.quantize(bits=4)
    half = _half(prog)
    return half if dtype == "fp16" else half.quantize(bits=4)


def _half(prog: OnnxProgram) -> OnnxProgram:
    from onnxport.half import to_half

    model = _clone(prog.model)
    opset = model.opset_imports.get("", 0)
    summary = to_half(model, opset, from_float32=True, keep_io=True)
    report = Report(notes=[*prog.report.notes, str(summary)])
    return _flat_program(model, report)


def _clone(model: ir.Model) -> ir.Model:
    """A copy of ``model`` whose values' types are its own (``ir.Model.clone`` shares them, so that retyping a
    value of the copy would retype the original's too)."""
    copied = model.clone()
    for graph in (copied.graph, *copied.graph.subgraphs()):
        values = [*graph.inputs, *graph.initializers.values(), *(v for node in graph for v in node.outputs)]
        for value in values:
            if value.type is not None:
                value.type = copy.copy(value.type)
    return copied


def _flat_program(model: ir.Model, report: Report) -> OnnxProgram:
    """A program over ``model``'s flat inputs and outputs (called as ``prog(*tensors)``, returning a list)."""
    inputs, outputs = len(model.graph.inputs), len(model.graph.outputs)
    return OnnxProgram(model, report=report, in_spec=pytree.tree_flatten((tuple(range(inputs)), {}))[1],
                       out_spec=pytree.tree_flatten(list(range(outputs)))[1], input_used=[True] * inputs,
                       output_slots=list(range(outputs)))


# -- the merged decoder ------------------------------------------------------------------------------------------


def merge_decoders(first: OnnxProgram, with_past: OnnxProgram) -> OnnxProgram:
    """One model computing ``first`` (a decoder's first step: no past inputs) when its boolean input
    ``use_cache_branch`` is false, and ``with_past`` (a step with the cache) when it is true.

    Its inputs are ``with_past``'s and ``use_cache_branch``; its outputs, named as both have them, come from an
    ``If``. Each model's graph becomes a branch; their initializers move to the outer graph, stored once where
    both hold the same tensor (the decoder's weights)."""
    if [v.name for v in first.model.graph.outputs] != [v.name for v in with_past.model.graph.outputs]:
        raise InvalidInputError("the two decoders have different outputs", fix="export both from one model")
    missing = {v.name for v in first.model.graph.inputs} - {v.name for v in with_past.model.graph.inputs}
    if missing:
        raise InvalidInputError(f"the first decoder takes inputs the one with past does not: {sorted(missing)}",
                                fix="export both from one model")
    models = [with_past.model.clone(), first.model.clone()]  # then, else
    inputs = [ir.Value(name=v.name, type=v.type, shape=v.shape) for v in models[0].graph.inputs]
    branch = ir.Value(name=BRANCH, type=ir.TensorType(ir.DataType.BOOL), shape=ir.Shape([1]))
    outer = {v.name: v for v in inputs}
    stored: dict[tuple[Any, ...], ir.Value] = {}
    initializers: list[ir.Value] = []
    branches = []
    for model, tag in zip(models, ("with_past", "first")):
        graph = model.graph
        for i, value in enumerate(list(graph.outputs)):
            if value.producer() is None:  # an input or weight returned as it came: a branch must compute it
                copy = ir.Node("", "Identity", [value], name=f"{value.name}/returned")
                copy.outputs[0].name, copy.outputs[0].type, copy.outputs[0].shape = value.name, value.type, value.shape
                graph.append(copy)
                graph.outputs[i] = copy.outputs[0]
        for value in list(graph.inputs):
            value.replace_all_uses_with(outer[value.name])
        graph.inputs.clear()
        for name in list(graph.initializers):
            value = graph.initializers.pop(name)
            key = _content_key(value)
            if key in stored:
                value.replace_all_uses_with(stored[key])
                continue
            stored[key] = value
            initializers.append(value)
        for node in graph.all_nodes():  # the branches' own names, apart from each other's and the outer ones
            for value in node.outputs:
                value.name = f"{tag}/{value.name}"
            for attr in node.attributes.values():
                if attr.type == ir.AttributeType.GRAPH:
                    for value in attr.value.inputs:
                        value.name = f"{tag}/{value.name}"
        graph.name = tag
        branches.append(graph)
    _unique_initializer_names(initializers)
    outputs = []
    for a, b in zip(branches[0].outputs, branches[1].outputs):
        name = a.name.split("/", 1)[1]
        outputs.append(ir.Value(name=name, type=a.type, shape=_common_shape(a.shape, b.shape)))
    node = ir.Node("", "If", [branch], [ir.AttrGraph("then_branch", branches[0]),
                                       ir.AttrGraph("else_branch", branches[1])], outputs=outputs, name="merged")
    opsets = {**models[1].opset_imports, **models[0].opset_imports}
    graph = ir.Graph([*inputs, branch], outputs, nodes=[node], initializers=initializers, opset_imports=opsets,
                     name="decoder_model_merged")
    functions = {**models[1].functions, **models[0].functions}
    merged = ir.Model(graph, ir_version=max(m.ir_version for m in models), producer_name=models[0].producer_name,
                      producer_version=models[0].producer_version, functions=list(functions.values()))
    merged.metadata_props.update(models[0].metadata_props)
    report = Report(notes=[f"merged: {len(initializers)} initializers for both branches"])
    return _flat_program(merged, report)


def _content_key(value: ir.Value) -> tuple[Any, ...]:
    tensor = value.const_value
    data = tensor.tobytes() if tensor is not None else b""
    return (value.dtype, tuple(value.shape or ()), hashlib.sha256(data).hexdigest())


def _unique_initializer_names(values: list[ir.Value]) -> None:
    seen: set[str] = set()
    for value in values:
        name, n = value.name, 0
        while value.name in seen:
            n += 1
            value.name = f"{name}_{n}"
        seen.add(value.name)


def _common_shape(a: ir.Shape | None, b: ir.Shape | None) -> ir.Shape | None:
    """The dims two branches' outputs share; None (unknown) where they differ."""
    if a is None or b is None or len(a) != len(b):
        return None
    return ir.Shape([x if str(x) == str(y) else None for x, y in zip(a, b)])


# -- an encoder's inputs ----------------------------------------------------------------------------------------

# The speech types transformers.js feeds no attention_mask, where transformers' feature extractor gives one (a
# checkpoint's return_attention_mask): their model class hands generate none (its forward_params,
# models/<type>/modeling_<type>.js, name none: Moonshine, Cohere ASR), or its feature extractor makes none
# (feature_extraction_whisper.js); their encoder takes none (Whisper's reads none anyway).
UNMASKED_AUDIO = ("moonshine", "cohere_asr", "whisper")


def seq2seq_inputs(config: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    """An encoder-decoder's example encoder inputs, as transformers.js's processor gives them for the type: its
    speech pipelines encode one clip at a time, so a clip's mask holds no padding (the example's shorter clip ends
    in the padding's silence), and a type of :data:`UNMASKED_AUDIO` gets none."""
    if not {"input_features", "input_values"} & set(inputs) or "attention_mask" not in inputs:
        return inputs
    if config.model_type in UNMASKED_AUDIO:
        return {name: value for name, value in inputs.items() if name != "attention_mask"}
    return {**inputs, "attention_mask": torch.ones_like(inputs["attention_mask"])}


# -- the cache's names ----------------------------------------------------------------------------------------

# transformers.js's names of a linear-attention layer's states, by the model types its getCacheNames (configs.js)
# names them for (a vision-language type's: its text config's): ``past_{name}.{i}`` in and ``present_{name}.{i}``
# out, where onnxport names them ``past_key_values.{i}.{state}`` and ``present.{i}.{state}``.
_STATE_NAMES = {
    ("qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"):
        {"conv_state": "conv", "recurrent_state": "recurrent"},
    ("granitemoehybrid", "falcon_h1", "nemotron_h"): {"conv_state": "conv", "recurrent_state": "ssm"},
    ("lfm2", "lfm2_moe", "lfm3", "lfm2_vl", "lfm3_vl"): {"conv_state": "conv"},
}
_STATE = re.compile(r"^(past_key_values|present)\.(\d+)\.(\w+)$")


def name_states(prog: OnnxProgram, model_type: str) -> None:
    """Rename ``prog``'s linear-attention states as transformers.js names them for ``model_type`` (in place)."""
    names = next((names for types, names in _STATE_NAMES.items() if model_type in types), {})
    graph = prog.model.graph
    for value in (*graph.inputs, *graph.outputs) if names else ():
        match = _STATE.match(value.name or "")
        if match and match.group(3) in names:
            side = "past" if match.group(1) == "past_key_values" else "present"
            value.name = f"{side}_{names[match.group(3)]}.{match.group(2)}"


def fuse_key_values(prog: OnnxProgram, config: Any) -> None:
    """Where transformers.js feeds one tensor per layer for the cache of a multi-query model (``multi_query`` in
    its config: GPTBigCode), ``prog``'s key and value of a layer, ``[batch, 1, length, head]`` each, become that
    tensor, ``past_key_values.{i}.key_value`` in and ``present.{i}.key_value`` out, ``[batch, length, 2 * head]``,
    the key's columns first (in place)."""
    if not getattr(config, "multi_query", False):
        return
    graph = prog.model.graph
    layers = sorted({int(m.group(2)) for v in graph.inputs if (m := _STATE.match(v.name or ""))
                     and m.group(3) == "key"})
    axis_1 = ir.Value(name="key_value/axis_1", const_value=ir.tensor(np.array([1], dtype=np.int64)))
    graph.register_initializer(axis_1)
    inputs = {v.name: v for v in graph.inputs}
    outputs = {v.name: (i, v) for i, v in enumerate(graph.outputs)}
    for i in layers:
        key, value = inputs[f"past_key_values.{i}.key"], inputs[f"past_key_values.{i}.value"]
        batch, _, length, head = key.shape
        fused = ir.Value(name=f"past_key_values.{i}.key_value", type=key.type,
                         shape=ir.Shape([batch, length, 2 * head if isinstance(head, int) else None]))
        split = ir.Node("", "Split", [fused], [ir.AttrInt64("axis", -1), ir.AttrInt64("num_outputs", 2)],
                        num_outputs=2, name=f"past_key_values.{i}/split")
        nodes = [split]
        for old, half in ((key, split.outputs[0]), (value, split.outputs[1])):
            widened = ir.Node("", "Unsqueeze", [half, axis_1], name=f"{old.name}/unsqueeze")
            nodes.append(widened)
            old.replace_all_uses_with(widened.outputs[0])
        graph.insert_before(graph[0], nodes)
        graph.inputs[graph.inputs.index(key)] = fused
        graph.inputs.remove(value)
        (k_at, present_key), (_, present_value) = outputs[f"present.{i}.key"], outputs[f"present.{i}.value"]
        halves = []
        for old in (present_key, present_value):
            narrowed = ir.Node("", "Squeeze", [old, axis_1], name=f"{old.name}/squeeze")
            graph.append(narrowed)
            halves.append(narrowed.outputs[0])
        joined = ir.Node("", "Concat", halves, [ir.AttrInt64("axis", -1)], name=f"present.{i}/concat")
        graph.append(joined)
        joined.outputs[0].name = f"present.{i}.key_value"
        joined.outputs[0].type = present_key.type
        joined.outputs[0].shape = ir.Shape([present_key.shape[0], present_key.shape[2], fused.shape[2]])
        graph.outputs[k_at] = joined.outputs[0]
        graph.outputs.remove(present_value)
        present_key.name, present_value.name = f"present.{i}.key/unfused", f"present.{i}.value/unfused"
        outputs = {v.name: (n, v) for n, v in enumerate(graph.outputs)}


# -- the folder ------------------------------------------------------------------------------------------------


def variants(sessions: Mapping[str, OnnxProgram], dtypes: Sequence[str]) -> dict[str, OnnxProgram]:
    """``{file name: program}``: each session (a float32 program) in each dtype, ``<session><suffix>.onnx``."""
    return {f"{session}{DTYPES[dtype]}.onnx": variant(prog, dtype) for session, prog in sessions.items()
            for dtype in dtypes}


def write_folder(out: str, files: Mapping[str, OnnxProgram],
                 settings: Mapping[str, Mapping[str, Any]] | None = None) -> None:
    """Write ``files`` (``variants``'s) under ``out/onnx/``, and the ``transformers.js_config`` entry of
    ``out/config.json`` (copied there before); ``settings`` (``{file name: settings}``) are set in those JSON files
    of ``out`` (a file that is not there is written with them)."""
    folder = os.path.join(out, SUBFOLDER)
    os.makedirs(folder, exist_ok=True)
    external: dict[str, int] = {}
    for name, prog in files.items():
        path = os.path.join(folder, name)
        if initializer_bytes(prog.model) >= _TWO_GB:
            _save_with_data(prog, path)
            external[name] = 1
        else:
            prog.save(path, external_data=False)
            with contextlib.suppress(FileNotFoundError):
                os.remove(f"{path}_data")  # an earlier, larger save's
    for name, entries in (settings or {}).items():
        if name != "config.json" and entries:
            _add_settings(os.path.join(out, name), entries)
    _write_config(os.path.join(out, "config.json"), external, (settings or {}).get("config.json", {}))


# Image processors' settings transformers.js reads under another name than transformers 5 saves them: class ->
# {transformers' name: transformers.js's}. Swin2SR's window padding (transformers.js 4.3 takes size_divisor for a
# size to pad to, and fails).
_RENAMED_SETTINGS = {"Swin2SRImageProcessor": {"size_divisor": "pad_size"}}
# The processor transformers.js's AutoProcessor must be told to build (``processor_class``), by image processor type,
# where the processor does more than its image processor (SAM's scales the prompt's points) and transformers 5 saves
# no processor_class beside the image processor's settings.
_PROCESSOR_CLASSES = {"SamImageProcessor": "SamProcessor", "Sam2ImageProcessor": "Sam2Processor"}


# The layer kinds transformers.js reads in a hybrid model's config (getCacheNames in configs.js, written for the
# checkpoints transformers 4 saved: "mamba" and "attention"), where transformers 5 saves "linear_attention" and
# "full_attention": model type -> the config entry that lists them.
_HYBRID_LAYERS = {"granitemoehybrid": "layer_types", "falcon_h1": "layer_types", "nemotron_h": "layers_block_type"}
_LAYER_WORDS = {"linear_attention": "mamba", "full_attention": "attention"}
# The mask-generation types transformers.js runs with its Sam2Model (onnxport.hf.mask_generation).
_MULTISCALE_SAM = ("sam2", "sam3_tracker")


def config_settings(config: Any) -> dict[str, dict[str, Any]]:
    """``write_folder``'s ``settings`` for ``config.json``: the entries transformers.js reads in other words than
    transformers wrote them (a hybrid model's layer kinds), or that transformers does not write (a SAM 2 vision
    config's ``num_feature_levels``)."""
    entries = _feature_levels(config)
    key = _HYBRID_LAYERS.get(getattr(config, "model_type", ""))
    kinds = getattr(config, key, None) if key else None
    if isinstance(kinds, (list, tuple)) and any(k in _LAYER_WORDS for k in kinds):
        entries[key] = [_LAYER_WORDS.get(k, k) for k in kinds]
    return {"config.json": entries} if entries else {}


def _feature_levels(config: Any) -> dict[str, Any]:
    """The ``vision_config`` entry a SAM 3 tracker's folder needs: transformers.js's Sam2Model (which its
    Sam3TrackerModel extends) counts the image embeddings by ``vision_config.num_feature_levels``, which SAM 3's
    vision config lacks; there, the number of its ``backbone_feature_sizes``. Nothing where the config has it."""
    vision = getattr(config, "vision_config", None)
    sizes = getattr(vision, "backbone_feature_sizes", None)
    if getattr(config, "model_type", None) not in _MULTISCALE_SAM or not sizes or hasattr(vision, "num_feature_levels"):
        return {}
    return {"vision_config": {**vision.to_dict(), "num_feature_levels": len(sizes)}}


def processor_settings(directory: str) -> dict[str, dict[str, Any]]:
    """``write_folder``'s ``settings`` for the processor in ``directory``: its entries under the names
    transformers.js reads (none for most)."""
    try:
        with open(os.path.join(directory, "preprocessor_config.json"), encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    kind = data.get("image_processor_type", "") if isinstance(data, dict) else ""
    renamed = _RENAMED_SETTINGS.get(kind, {})
    entries = {theirs: data[ours] for ours, theirs in renamed.items() if ours in data and theirs not in data}
    if kind in _PROCESSOR_CLASSES and "processor_class" not in data:
        entries["processor_class"] = _PROCESSOR_CLASSES[kind]
    return {"preprocessor_config.json": entries} if entries else {}


def _add_settings(path: str, entries: Mapping[str, Any]) -> None:
    data: dict[str, Any] = {}
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    with open(path, "w", encoding="utf-8") as f:
        json.dump({**data, **entries}, f, indent=2)


def _save_with_data(prog: OnnxProgram, path: str) -> None:
    """``path`` with its weights in ``<path>_data``, the one data file transformers.js reads beside it: both
    written in a staging folder, the data moved into place first, then the model."""
    directory, name = os.path.split(path)
    staging = tempfile.mkdtemp(prefix=f".{name}.", dir=directory)
    try:
        ir.save(prog.model, os.path.join(staging, name), external_data=f"{name}_data")
        os.replace(os.path.join(staging, f"{name}_data"), f"{path}_data")
        os.replace(os.path.join(staging, name), path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _write_config(path: str, external: Mapping[str, int], entries: Mapping[str, Any]) -> None:
    config: dict[str, Any] = {}
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    config = {**config, **entries}
    settings = dict(config.get("transformers.js_config") or {})
    settings.pop("use_external_data_format", None)
    if external:
        settings["use_external_data_format"] = dict(external)
    config["transformers.js_config"] = settings
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
