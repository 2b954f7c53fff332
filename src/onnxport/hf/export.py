"""Export a local transformers model directory (config.json plus weights; nothing is downloaded).

``export_hf(directory, task, out)`` loads the model for the task, builds example inputs from its
config, exports it with dynamic batch and sequence, and writes ``OUT/model.onnx``. For
``text-generation`` the model takes and returns its KV cache (names as onnxruntime-genai and optimum
use them), and OUT/ also gets a ``genai_config.json`` and the tokenizer files found in the directory,
so that onnxruntime-genai loads OUT/ as it is. A causal LM that returns no KV cache (GPT-1, XLNet, a
state-space model) is exported without one: its model takes the whole sequence at each step, returns logits
alone, and OUT/ has no ``genai_config.json`` (the report says so; ``onnxport.generate`` runs it). The seq2seq
tasks (``text2text-generation``, ``automatic-speech-recognition``) write three models as optimum names them:
``encoder_model.onnx``, ``decoder_model.onnx`` and ``decoder_with_past_model.onnx``
(see ``onnxport.hf.seq2seq``). The encoder tasks
(``fill-mask``, ``token-classification``, ``question-answering``, ``sentence-similarity``: a sentence-transformers
directory, its pooling and normalisation in the graph, ``onnxport.hf.sentence``) take ``token_type_ids`` too where
the model has segment embeddings. The image tasks (``image-classification``, ``zero-shot-image-classification``:
CLIP or SigLIP, its texts and images batched apart; ``object-detection``, ``image-segmentation`` (semantic),
``depth-estimation``) take images in a dynamic batch, of the size the model's image processor gives: where it
gives images of varying size (DETR's and RT-DETR's shortest and longest edge, GLPN's multiple of 32, Depth Anything's
kept aspect ratio) their height and width are dynamic too, with the ``pixel_mask`` of a padded batch where the
processor gives one and the model takes it; otherwise the config's ``image_size``; ``audio-classification``
takes raw audio (``input_values``, and ``attention_mask`` where the model's feature extractor gives one) of
dynamic batch and length; ``text-to-audio`` (VITS: ``onnxport.hf.text_to_audio``) takes text ids and gives the
waveform (SpeechT5's text-to-speech model and its vocoder, two folders for transformers.js:
``onnxport.hf.speecht5_speech``). ``task="auto"`` reads the task from the directory (``onnxport.hf.tasks``).

OUT/ gets the model's ``config.json`` and its tokenizer or processor files, and every model written names its
task in its metadata (``onnxport.hf.task``), so that ``onnxport.hf.pipeline(OUT)`` runs it in onnxruntime behind
transformers' own pipeline (``onnxport.hf.runner``).

By default the model is loaded with ``from_pretrained`` and the export verified against it wherever the weights
fit in memory with room to spare (``onnxport.memory.fits``: three times their loaded size, and a GiB). Larger
checkpoints are streamed (``streaming``): the model is built on the meta device and its safetensors files are
copied tensor by tensor into the model's data file (``model.onnx.<digest>.data``; ``onnxport.hf.stream``), so a
checkpoint larger than memory exports. Eager PyTorch cannot run such a model, so it is not verified against it,
and the first line of each report says so and why. ``streaming=True`` streams whatever the size, ``False`` loads.

A checkpoint quantized with GPTQ or AWQ (config.json's ``quantization_config``; ``onnxport.hf.prequantized``)
is loaded with its quantized layers' weights dequantized, in memory (not streamed), exported and verified as a
float model, then each of those layers becomes a ``MatMulNBits`` holding the checkpoint's own codes, scales
and zero points (blocks of its ``group_size``); the layers it holds in float (an LM head) stay float.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch

from onnxport import memory, metadata
from onnxport.arguments import as_path, check_output_folder
from onnxport.errors import InvalidInputError, OnnxportError
from onnxport.hf import (
    hub,
    musicgen,
    prequantized,
    speecht5_speech,
    stream,
    transformers_js,
    uniform_cache,
    verify_loop,
)
from onnxport.hf.audio_codec import FEATURES as CODEC_FEATURES
from onnxport.hf.audio_codec import check_audio_codec, export_audio_codec, is_audio_codec
from onnxport.hf.char_tokenizers import TOKENIZER_FILE, tokenizer_json
from onnxport.hf.diffusion import INDEX_FILE, export_diffusion
from onnxport.hf.examples import (
    CTC_SPEECH,
    ENCODED_TASKS,
    ENCODER_DECODER_FEATURES,
    TASKS,
    Task,
    caching,
    image_steps,
    read_config,
)
from onnxport.hf.forecasting import TASK as FORECASTING
from onnxport.hf.forecasting import forecaster_class
from onnxport.hf.genai import cached, genai_config, genai_target, note_cacheless, warn_states_genai_does_not_feed
from onnxport.hf.loading import load_pretrained
from onnxport.hf.mask_generation import check_mask_generation, export_mask_generation
from onnxport.hf.multimodal import ONNXRUNTIME, TRANSFORMERS_JS, VlmPrograms, check_supported, export_multimodal
from onnxport.hf.multimodal.components import images_encoded
from onnxport.hf.multimodal.consumers import (
    TRANSFORMERS_JS_AUDIO_TYPES,
    TRANSFORMERS_JS_DECODER_CACHES,
    TRANSFORMERS_JS_ENCODED_TYPES,
    TRANSFORMERS_JS_TYPES,
    transformers_js_refusal,
    transformers_js_settings,
    transformers_js_text_only,
)
from onnxport.hf.multimodal.genai import genai_names, write_genai
from onnxport.hf.sentence import SETTINGS_FILE, SentenceEmbedding, read_sentence_model
from onnxport.hf.seq2seq import Seq2SeqPrograms, check_speech, export_seq2seq
from onnxport.hf.signature import cache_argument
from onnxport.hf.tasks import MODULES_FILE, heads, is_ctc, pick_task
from onnxport.hf.text_to_audio import check_text_to_audio
from onnxport.program import OnnxProgram
from onnxport.quantize.options import QuantizeOptions
from onnxport.serial import serialized
from onnxport.verify.sizes import sizes_in_steps

__all__ = ["export_hf"]

# Files onnxruntime-genai and transformers' tokenizers and processors read, copied to OUT/ when the directory
# has them.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                   "vocab.json", "merges.txt", "vocab.txt", "added_tokens.json", "spiece.model", "spm.model",
                   "sentencepiece.bpe.model", "generation_config.json", "preprocessor_config.json",
                   "processor_config.json", "chat_template.jinja", "chat_template.json")
# Copied too: what transformers' pipelines read besides (the labels, the settings of the tokenizer's use).
COPIED_FILES = (*TOKENIZER_FILES, "config.json", SETTINGS_FILE)
SEQ2SEQ_FILES = ("encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx")
logger = logging.getLogger("onnxport")


@serialized
def export_hf(directory: str | os.PathLike, task: str = "text-generation", out: str | os.PathLike = "onnx",
              *, opset: int | None = None, progress: bool = False,
              streaming: bool | None = None, target: Any = None,
              quantize: bool | str | QuantizeOptions | Mapping[str, Any] | None = None,
              dtypes: Sequence[str] | str | None = None, dtype: str | None = None, revision: str | None = None,
              verify_generation: bool | str = True
              ) -> OnnxProgram | Seq2SeqPrograms | VlmPrograms | dict[str, OnnxProgram]:
    """Export the model in ``directory`` for ``task`` into the folder ``out``; returns the program (the three
    programs of a seq2seq task, the three of a vision-language model; for ``text-to-image``, a diffusers pipeline
    directory, ``{component: program}``: ``onnxport.hf.diffusion``; for ``mask-generation``, SAM's
    ``{file stem: program}``: ``onnxport.hf.mask_generation``; likewise for ``feature-extraction`` by an audio
    codec, Mimi's or DAC's ``encoder_model`` and ``decoder_model``: ``onnxport.hf.audio_codec``, and for
    ``text-to-audio`` by MusicGen, its ``text_encoder``, ``decoder_model_merged`` and ``encodec_decode``:
    ``onnxport.hf.musicgen``).

    ``streaming`` (default: None, decided by size) exports without loading the weights when True: the ONNX
    weights are the checkpoint's, copied from its safetensors files when the model is saved, and the export is not
    verified against eager PyTorch (the report's first line says so). ``False`` loads the model with
    ``from_pretrained`` and verifies the export against it. Left out, the model is loaded wherever its weights
    fit in memory with room to spare, streamed where they do not (never for the seq2seq tasks, whose example
    inputs come from running the encoder). ``target`` is ``onnxport.export``'s (the runtime the files are for),
    passed to every export; left out (and ``opset`` too), a folder onnxruntime-genai loads (``text-generation``,
    ``image-text-to-text``) is written for the onnxruntime the oldest genai onnxport supports requires
    (``onnxport.hf.genai.genai_target``: ``onnxruntime>=1.26``, with fused attention), the others for
    ``onnxport.export``'s default.

    ``quantize`` is ``onnxport.export``'s too (``True`` or ``"int4"``, ``"int8"``, a ``QuantizeOptions``
    or a dict of its fields): the linear layers' weights of every model written are quantized
    (``MatMulNBits`` for the onnxruntime targets, which onnxruntime-genai runs as it is) and the quantized
    models are what the folder gets. Streamed weights are read one at a time to be quantized; those left in
    float (embeddings, norms) are still copied file to file when the model is saved. A model none of whose
    layers it could quantize (bfloat16 weights, say) is refused before anything is written.

    A GPTQ or AWQ checkpoint keeps its codes without ``quantize`` (see the module's docstring); ``quantize``
    then also rounds the layers it holds in float, with its bits and group size (other ones are refused), and
    its other options (``accuracy_level``, ``lm_head``, ``skip``, ...) apply as usual.

    ``task="auto"`` picks the task from the directory (``onnxport.hf.tasks.pick_task``: config.json's
    ``architectures``, or a sentence-transformers ``modules.json``), logs it and notes it in each program's
    report; a directory that does not tell is an ``InvalidInputError``.

    ``directory`` may be a Hugging Face Hub id (``owner/name``) instead (``onnxport.hf.hub``): its configs,
    safetensors and tokenizer files are fetched into the Hub's cache (at ``revision``, default ``main``) with
    ``huggingface_hub``, which reads the token, cache and offline settings as the Hub's tools do.

    ``dtype`` is the precision of the models written, whatever the checkpoint's storage type: ``"fp32"`` (the
    default: what CPUs compute fastest and every runtime computes; a bfloat16 or float16 checkpoint's weights are
    converted as they are copied), ``"fp16"`` (float16 with float32 islands, ``onnxport.half``; inputs, outputs
    and the cache in float16), ``"bf16"`` (bfloat16 weights, computed as the model computes them), or ``"auto"``
    (the checkpoint's own, as ``from_pretrained`` builds the model).

    ``target="transformers.js"`` (or ``"transformers.js>=4.0"``) writes the folder transformers.js loads
    (``onnxport.hf.transformers_js``): ``onnx/`` with one file per session (``model``; ``encoder_model`` and
    ``decoder_model_merged`` for the seq2seq tasks, and for feature-extraction by a bare encoder-decoder it runs as
    one, ``transformers_js.ENCODER_DECODER_TYPES``: T5Model, WhisperModel, its decoder's ``last_hidden_state`` the
    main output; ``encoder_model`` and ``decoder_model`` for an audio codec's, its MimiModel and DacModel) and per
    ``dtypes`` (default: all of ``fp32``, ``fp16``,
    ``q8``, ``q4``, ``q4f16``, the precisions its users pick with ``dtype:``), written for the onnxruntime-web
    its oldest release runs; ``quantize`` does not apply there (``dtypes`` chooses the precisions). The
    programs returned are the float32 ones.

    ``verify_generation`` (default True): a ``text-generation`` decoder loaded in float32 (not streamed, not
    quantized) is also run through a generation loop, a left-padded batch of two prompts then decode steps fed back
    through its cache, its logits compared with eager PyTorch's at every step (``onnxport.hf.verify_loop``); a
    mismatch raises ``VerificationError`` naming the step before anything is written (``"warn"`` only warns,
    ``False`` skips the loop).
    """
    directory = hub.resolve(as_path(directory, "directory", _DIRECTORY_FIX), revision)
    as_path(out, "out", "pass the folder to write the files into, e.g. out='onnx'")
    named = QuantizeOptions.named(quantize)
    quantize = QuantizeOptions.of(quantize)  # checked before anything is loaded or written
    precision = _precision(dtype)
    engine = transformers_js.engine_target(target)
    if verify_generation not in (True, False, "warn"):
        raise InvalidInputError(f"verify_generation must be True, False or 'warn', not {verify_generation!r}",
                                fix="leave it out (the generation loop runs and a mismatch raises)")
    if engine is not None and precision != torch.float32:  # auto too: its fp32 file is float32 whatever is stored
        raise InvalidInputError(f"a transformers.js folder's precisions are its dtypes, not dtype={dtype!r}",
                                fix="leave dtype out and pick the files with dtypes= (fp16, q4f16, ...)")
    if engine is not None:
        if quantize is not None:
            raise InvalidInputError("a transformers.js folder holds its own quantized variants (q8, q4, q4f16)",
                                    fix="leave quantize out and choose the variants with dtypes=")
        dtypes = transformers_js.check_dtypes(dtypes)
    elif dtypes is not None:
        raise InvalidInputError("dtypes= chooses the files of a transformers.js folder",
                                fix="pass target='transformers.js' too, or leave dtypes out")
    if task == "text-to-image" or (task == "auto" and os.path.isfile(os.path.join(directory, INDEX_FILE))):
        if engine is not None:
            transformers_js.check_task("text-to-image")
        if dtype is not None:
            raise InvalidInputError("dtype= does not apply to a text-to-image pipeline: each component is exported "
                                    "in the dtype its checkpoint stores", fix="leave dtype out")
        if quantize is not None:
            raise InvalidInputError("onnxport does not quantize a text-to-image pipeline",
                                    fix="export it without quantize")
        if task == "auto":
            logger.info("%s", pick_task(directory))
        return export_diffusion(directory, out, opset=opset, progress=progress, streaming=streaming, target=target)
    if not isinstance(task, str) or (task not in TASKS and task != "auto"):
        raise InvalidInputError(f"task {task!r} is not one onnxport exports from a directory",
                                fix=f"use one of {', '.join(TASKS)}, or auto (read from the directory)")
    if not os.path.isdir(directory):
        what = "is a file" if os.path.exists(directory) else "does not exist"
        raise InvalidInputError(f"{directory} {what}", fix="point at a transformers model directory (config.json "
                                "and safetensors weights, as save_pretrained writes it)")
    if not os.path.isfile(os.path.join(directory, "config.json")) and not (
            os.path.isfile(os.path.join(directory, MODULES_FILE)) and task in ("auto", "sentence-similarity")):
        raise InvalidInputError(f"{directory} has no config.json", fix="point at a transformers model directory "
                                "(config.json and safetensors weights, as save_pretrained writes it)")
    picked = None
    if task == "auto":
        picked = pick_task(directory)
        task = picked.task
        logger.info("%s", picked)
    if engine is not None:
        transformers_js.check_task(task)
        target = engine
    from onnxport.api import export

    spec = CTC_SPEECH if task == "automatic-speech-recognition" and is_ctc(directory) else TASKS[task]
    if target is None and opset is None and (task == "text-generation" or spec.vlm):
        target = genai_target()  # a folder onnxruntime-genai loads: the onnxruntime it requires computes fused ops
    if spec.vlm and precision == torch.float16:
        raise InvalidInputError(f"onnxport does not export {task} models as float16",
                                fix="pass dtype='fp32' (the default), 'bf16' or 'auto'")
    sentence = read_sentence_model(directory) if task == "sentence-similarity" else None
    model_dir = sentence.transformer if sentence is not None else directory  # where config.json and weights are
    if streaming is not None and not isinstance(streaming, bool):
        raise InvalidInputError(f"streaming must be True, False or None, not {streaming!r}",
                                fix="leave it out (loaded and verified where the weights fit in memory), or pass "
                                "True to stream them, False to load them")
    asked_streaming = streaming
    if streaming and (spec.seq2seq or spec.pieces):
        raise _loaded_only(f"{task} models are exported with their")
    # Where the files go, and what the directory says, before anything is loaded or exported.
    copied = [name for name in COPIED_FILES if os.path.isfile(os.path.join(model_dir, name))]
    # transformers.js reads tokenizer.json alone: one made for a Python-only character tokenizer (VITS's, CTC's)
    tokenizer = tokenizer_json(model_dir) if engine is not None else None
    if engine is not None:
        sessions = transformers_js.SEQ2SEQ_SESSIONS if spec.seq2seq else () if spec.vlm else spec.pieces or (
            transformers_js.session_name(task, read_config(model_dir) if task == "image-feature-extraction" else None),)
        written = [*transformers_js.file_names(sessions, dtypes), *copied, *((TOKENIZER_FILE,) if tokenizer else ())]
    else:
        models = SEQ2SEQ_FILES if spec.seq2seq else () if spec.vlm else \
            tuple(f"{stem}.onnx" for stem in spec.pieces) or ("model.onnx",)
        written = [*models,
                   *(("genai_config.json",) if task == "text-generation" else ()), *copied]
    check_output_folder(out, written)  # before anything is read: a folder that cannot take the files says so first
    config = read_config(model_dir)
    if task == FORECASTING:  # PatchTST, PatchTSMixer: loaded by the class of their type
        spec = spec._replace(auto=forecaster_class(config))
    if engine is not None and task == "feature-extraction" and transformers_js.splits_features(config):
        spec = ENCODER_DECODER_FEATURES  # its bare model's forward: encoder_model, then decoder_model_merged
        if streaming:
            raise _loaded_only(f"a transformers.js feature-extraction folder of a {config.model_type} model is "
                               "exported with its")
        check_output_folder(out, transformers_js.file_names(transformers_js.SEQ2SEQ_SESSIONS, dtypes))
    if task == "feature-extraction" and is_audio_codec(config):  # its encode and decode: onnxport.hf.audio_codec
        check_audio_codec(config, streaming)
        spec = CODEC_FEATURES
        check_output_folder(out, transformers_js.file_names(spec.pieces, dtypes) if engine is not None
                            else [f"{stem}.onnx" for stem in spec.pieces])
    why = transformers_js.generation_refusal(config, task) if engine is not None else None
    if why is not None:
        runner = " and run it with onnxruntime-genai or onnxport.generate" if task == "text-generation" else ""
        fix = transformers_js.GENERATION_FIX.get(config.model_type, f"export it for onnxruntime (no target){runner}")
        raise InvalidInputError(f"transformers.js cannot run a {config.model_type} {task} folder: {why}", fix=fix)
    if engine is not None and task == "text-generation" and transformers_js_text_only(config):
        why = transformers_js_refusal(config)
        if why is not None:
            raise InvalidInputError(
                f"transformers.js generates text with a {config.model_type} checkpoint through its image-text-to-text "
                "sessions (embed_tokens, decoder_model_merged), which onnxport writes from the whole model's "
                f"image-text-to-text export, and this one it does not write: {why}",
                fix="export it for onnxruntime (no target) and run it with onnxruntime-genai or onnxport.generate")
        logger.info("transformers.js generates text with a %s checkpoint through its image-text-to-text sessions "
                    "(embed_tokens, decoder_model_merged): the folder is the image-text-to-text one",
                    config.model_type)
        task, spec = "image-text-to-text", TASKS["image-text-to-text"]
    if spec.vlm:  # a vision-language model's files follow its config (encoder-decoder or not)
        check_supported(config, task)  # first: what stands in the way of a type said before its config is read
        layout = TRANSFORMERS_JS if engine is not None else ONNXRUNTIME
        encoded = _images_encoded(_model_class(spec.auto, config, task), config)
        _check_encoded_task(task, config, encoded)
        stems = tuple(layout.files_for(config, bool(getattr(config, "is_encoder_decoder", False)), encoded).values())
        check_output_folder(out, transformers_js.file_names(stems, dtypes) if engine is not None
                            else [f"{stem}.onnx" for stem in stems])
    if task == "automatic-speech-recognition" and spec.seq2seq:
        check_speech(config, spec.auto)
    if task == "text-to-audio" and config.model_type in speecht5_speech.TYPES:  # onnxport.hf.speecht5_speech
        return speecht5_speech.export_folder(model_dir, out, config, engine=engine, streaming=streaming, dtypes=dtypes,
                                             copied=copied, picked=picked, opset=opset, progress=progress)
    if task == "text-to-audio" and config.model_type in musicgen.TYPES:  # onnxport.hf.musicgen
        return musicgen.export_musicgen(model_dir, out, config, engine=engine, dtypes=dtypes, copied=copied,
                                        picked=picked, precision=precision, streaming=streaming, quantize=quantize,
                                        opset=opset, progress=progress, target=target)
    if task == "text-to-audio":
        check_text_to_audio(config, spec.auto)
    if task == "mask-generation":
        check_mask_generation(config)
    if task == "text-generation" or spec.seq2seq or spec.vlm:
        caching(config)  # a checkpoint saved with "use_cache": false still exports with its cache in and out
    elif task == "feature-extraction" and not spec.pieces and not getattr(config, "is_encoder_decoder", False):
        # A bare decoder's features need no cache: with it on (transformers' default) forward builds one and returns
        # it, extra outputs of no use, and one onnxport cannot always name (DeepSeek V4's compressor buffers).
        caching(config, on=False)
    if spec.vlm:
        why = None if engine is None else _transformers_js_vlm_refusal(task, config)
        if why is not None:
            raise InvalidInputError(f"transformers.js does not run {config.model_type} models for {task}: {why}",
                                    fix="export it for onnxruntime (no target) and run it with onnxport.hf.pipeline "
                                    "(generate_vlm for image-text-to-text)")
        check_output_folder(out, genai_names(config) if engine is None else ())  # genai's, for the types it runs
    scheme = prequantized.scheme_of(config)
    if scheme is not None:
        if sentence is not None:
            raise InvalidInputError(f"onnxport does not export a {scheme.method.upper()} checkpoint for {task}",
                                    fix="export its transformer for feature-extraction")
        if engine is not None:
            raise InvalidInputError(f"a transformers.js folder is made from float weights, not {scheme.method.upper()} "
                                    "codes", fix="export the float checkpoint the codes were made from (its q4 and "
                                    "q4f16 files hold 4-bit weights), or this one for onnxruntime (no target)")
        quantize = _prequantized_options(scheme, quantize, named, task, spec, asked_streaming)
        streaming = False
    why_streamed = "streaming=True" if streaming else ""
    if streaming is None:
        streaming, why_streamed = _stream_or_load(model_dir, spec, precision)
    import transformers

    # The model is built in float32 for fp32 and fp16 (float16 comes from the half-precision conversion, with its
    # float32 islands), in bfloat16 for bf16, in the checkpoint's dtype for auto; a transformers.js folder's fp32
    # file is float32 too (its other files are made from it).
    half = precision == torch.float16
    built = {"dtype": torch.float32 if half else precision} if precision is not None else {}
    weights = None
    auto = _model_class(spec.auto, config, task)
    unmapped = _unmapped(auto, config, task)
    if unmapped is not None:  # not a truncated file, which the fix of a failed load suspects
        raise InvalidInputError(f"transformers cannot load {model_dir} for {task}: {unmapped}",
                                fix=f"export it for the task of its class (--task auto reads it), or, if it is a "
                                f"model for {task}, name its class in config.json's architectures")
    try:
        if scheme is not None:
            model, codes = prequantized.load(directory, auto, config, scheme)
            quantize = quantize.changed(codes=codes)
        elif streaming:
            model, weights = stream.meta_model(model_dir, auto, config, **built)
        else:
            model = load_pretrained(getattr(transformers, auto), model_dir, config,
                                    f"a model for {task} (its head included)", **built)
    except OnnxportError:
        raise
    except Exception as exc:  # noqa: BLE001 - a file transformers or safetensors cannot read (truncated, ...)
        raise InvalidInputError(f"transformers cannot load {model_dir} as {auto}: {type(exc).__name__}: {exc}"[:600],
                                fix=f"check that the directory holds a model for {task}, and that its weight files "
                                "are whole (a download or copy cut short leaves them truncated)") from None
    if sentence is not None:
        model = SentenceEmbedding(model, sentence.poolings, sentence.normalize).eval()
        if weights is not None:
            weights = weights.renamed({f"transformer.{key}": key for key in weights})
    static_ids: dict[str, set[int]] = {}  # per file, the dims of input_ids its task leaves static
    if spec.vlm:  # an image encoder, an embedding, decoders; the decoders' linear layers are what quantize rounds
        made = export_multimodal(model, config, model_dir, layout, opset=opset, progress=progress, weights=weights,
                                 target=target, quantize=quantize)
        result = VlmPrograms.of(made, layout, bool(getattr(config, "is_encoder_decoder", False)),
                                images_encoded(model, config))
        files = made if engine is not None else {f"{stem}.onnx": prog for stem, prog in made.items()}
    elif spec.pieces:  # several models made from the one loaded (mask-generation's, a codec's), each verified
        pieces = export_audio_codec if spec is CODEC_FEATURES else export_mask_generation
        result = pieces(model, opset=opset, progress=progress, target=target, quantize=quantize,
                        dtype=torch.float16 if half else None)
        files = result if engine is not None else {f"{stem}.onnx": prog for stem, prog in result.items()}
    elif spec.seq2seq:
        inputs = spec.inputs(model, config)
        axes = spec.dynamic(model, config) if callable(spec.dynamic) else None
        if engine is not None:  # the encoder inputs transformers.js's processor gives
            inputs = transformers_js.seq2seq_inputs(config, inputs)
        result = export_seq2seq(model, inputs, opset=opset, progress=progress, target=target,
                                dtype=torch.float16 if half else None, audio_axes=axes, states_mask=engine is None)
        if quantize is not None:
            result = Seq2SeqPrograms(*(prog.quantize(quantize) for prog in result))
        files = dict(zip(SEQ2SEQ_FILES, result))
    else:
        # export quantizes after verifying the float model (when the weights are loaded) and measures the result
        inputs = spec.inputs(model, config)
        dynamic = spec.dynamic(model, config) if callable(spec.dynamic) else spec.dynamic
        with _one_head_size(model, inputs, task, engine) as inputs, sizes_in_steps(image_steps(model, config)):
            result = export(model, (), inputs, dynamic_shapes=dynamic, opset=opset, progress=progress,
                            weights=weights, target=target, quantize=quantize, dtype=torch.float16 if half else None)
        files = {"model.onnx": result}
        if isinstance(dynamic, Mapping) and isinstance(dynamic.get("input_ids"), Mapping):
            static_ids = {"model.onnx": {0, 1} - set(dynamic["input_ids"])}
        if task == "text-generation" and cache_argument(model) not in inputs:
            note_cacheless(model, result, engine)
    if streaming:  # the first line of each report says so
        streamed = result.values() if isinstance(result, dict) else result if isinstance(result, tuple) else [result]
        for prog in streamed:
            if prog is None:  # a piece a VlmPrograms does not hold (no image encoder of a model that hears alone)
                continue
            prog.report.unverified = (f"the weights were streamed from the safetensors files, never loaded "
                                      f"({why_streamed}); pass streaming=False (--in-memory) to load and verify")
    _check_token_dims(files, static_ids)
    if quantize is not None:
        _check_quantized({name: prog for name, prog in files.items()
                          if not spec.vlm or prog is result.decoder or prog is result.decoder_with_past})
    if engine is not None and spec.seq2seq:
        files = {"encoder_model": result.encoder,
                 "decoder_model_merged": transformers_js.merge_decoders(result.decoder, result.decoder_with_past)}
    elif engine is not None and not spec.vlm and not spec.pieces:
        files = {transformers_js.session_name(task, config): result}
    for prog in files.values():
        prog.model.metadata_props[metadata.TASK] = task
        if picked is not None:
            prog.report.notes.append(str(picked))
    if engine is not None:  # every file made before any is written
        for prog in files.values():
            transformers_js.name_states(prog, config.model_type)
            transformers_js.fuse_key_values(prog, config)
    if task == "text-generation" and not spec.vlm and verify_generation:  # before anything is written
        _verify_generation(model, files, verify_generation, streamed=streaming, quantized=quantize is not None)
    if engine is not None:
        made = transformers_js.variants(files, dtypes)
        os.makedirs(out, exist_ok=True)
        _copy(model_dir, out, copied)
        if tokenizer is not None:
            with open(os.path.join(out, TOKENIZER_FILE), "w", encoding="utf-8") as f:
                json.dump(tokenizer, f, ensure_ascii=False)
        transformers_js.write_folder(out, made, transformers_js_settings(config, model_dir) if spec.vlm
                                     else {**transformers_js.processor_settings(model_dir),
                                           **transformers_js.config_settings(config)})
        return result
    os.makedirs(out, exist_ok=True)
    for name, prog in files.items():
        prog.save(os.path.join(out, name))
    if task == "text-generation" and not cached(result):  # genai cannot run it: no config that says it can
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(out, "genai_config.json"))  # an earlier export's, which describes another model
    elif task == "text-generation":
        warn_states_genai_does_not_feed(result)
        with open(os.path.join(out, "genai_config.json"), "w", encoding="utf-8") as f:
            json.dump(genai_config(config, model, result), f, indent=2)
    elif spec.vlm:
        write_genai(out, config, model, model_dir, result)
    _copy(model_dir, out, copied)
    return result


_DIRECTORY_FIX = ("pass a transformers model directory (config.json and weights) or a Hub model id, e.g. "
                  "export_hf('Qwen/Qwen2.5-0.5B', 'text-generation', 'out')")

# export_hf's dtype= values and the dtype each builds the model in (None: the checkpoint's).
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16, "auto": None}


def _verify_generation(model: torch.nn.Module, files: dict[str, OnnxProgram], mode: bool | str, *, streamed: bool,
                       quantized: bool) -> None:
    """Run the decoder of a text-generation folder through ``verify_loop``'s generation loop, where eager PyTorch
    can be compared with it in float32; say in its report why not elsewhere."""
    (name, prog), = files.items()
    file = name if name.endswith(".onnx") else f"onnx/{name}.onnx"
    why = ("the weights were streamed" if streamed else "the file is quantized" if quantized
           else verify_loop.why_not(model, prog))
    if why:
        prog.report.notes.append(f"generation loop not run: {why}")
        return
    check = verify_loop.check_decoder(model, prog, file)
    if check is not None:
        verify_loop.judge(check, mode)


def _precision(dtype: Any) -> torch.dtype | None:
    """``dtype`` (None: ``"fp32"``) as the torch dtype of the models written; None for ``"auto"``."""
    if dtype is None:
        return torch.float32
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise InvalidInputError(f"dtype={dtype!r} is not a precision export_hf writes",
                                fix=f"pass one of {', '.join(DTYPES)} (default fp32)")
    return DTYPES[dtype]


def _loaded_only(what: str) -> InvalidInputError:
    """The refusal of ``streaming=True`` for models whose example inputs come from running their encoder: ``what``
    says which, up to their weights."""
    return InvalidInputError(f"{what} weights loaded (the decoders' example inputs come from "
                             "running the encoder)", fix="leave streaming unset, or pass streaming=False")


# The auto classes of a task's other heads, tried in order for a config its own auto class does not map:
# image-segmentation's panoptic and instance heads (DETR's, MaskFormer's), which give masks per query, not per class.
_WIDER = {"AutoModelForSemanticSegmentation": ("AutoModelForUniversalSegmentation",)}


def _heads(auto: str, task: str | None) -> tuple[str, ...]:
    """The ends of the names of a task's model classes: its auto class's and :data:`_WIDER`'s heads
    (``ForUniversalSegmentation``), and those ``--task auto`` reads as the task's (``onnxport.hf.tasks.heads``:
    ``ForImageSegmentation`` for image-segmentation)."""
    named = [name[len("AutoModel"):] for name in (auto, *_WIDER.get(auto, ())) if name.startswith("AutoModelFor")]
    return tuple(dict.fromkeys([*named, *(heads(task) if task is not None else ())]))


def _model_class(auto: str, config: Any, task: str | None = None) -> str:
    """The class that loads ``config`` for a task: the task's ``auto`` class, or, for a config class that auto class
    does not map (``MllamaForCausalLM`` saves a ``MllamaTextConfig``), the auto class of its other heads
    (:data:`_WIDER`) that maps it, or the model class config.json's ``architectures`` names, where the auto class
    loads that class for other configs or the name ends in a head of the task (:func:`_heads`: CLIPSeg's
    ``CLIPSegForImageSegmentation``, which no auto class maps); for ``AutoModel``, a tower with its projection that
    ``architectures`` names (``CLIPVisionModelWithProjection``)."""
    import transformers

    architectures = getattr(config, "architectures", None) or ()
    projected = next((name for name in architectures
                      if name.endswith("ModelWithProjection") and hasattr(transformers, name)), None)
    if auto == "AutoModel" and projected is not None:  # a tower saved with its projection (CLIP's: image_embeds),
        return projected  # which the bare class AutoModel loads leaves out
    mapping = getattr(getattr(transformers, auto, None), "_model_mapping", None)
    if mapping is None or type(config) in mapping:
        return auto
    wider = next((other for other in _WIDER.get(auto, ()) if type(config) in getattr(
        getattr(transformers, other, None), "_model_mapping", {})), None)
    if wider is not None:
        return wider
    names = getattr(mapping, "_model_mapping", {}).values()
    known = {name for entry in names for name in ((entry,) if isinstance(entry, str) else entry)}
    ends = _heads(auto, task)
    named = next((name for name in architectures if hasattr(transformers, name) and (
        name in known or name.endswith(ends))), None)
    return named if named is not None else auto


def _unmapped(auto: str, config: Any, task: str) -> str | None:
    """Why ``auto`` (the class :func:`_model_class` chose) cannot load ``config`` for ``task``, where it is an auto
    class that maps no such config; None otherwise."""
    import transformers

    mapping = getattr(getattr(transformers, auto, None), "_model_mapping", None)
    if mapping is None or type(config) in mapping:
        return None
    named = ", ".join(getattr(config, "architectures", None) or ()) or "no class"
    return (f"transformers' {auto} maps no {type(config).__name__}, and config.json's architectures ({named}) names "
            f"no class of transformers whose name ends in a head of {task} ({', '.join(_heads(auto, task))})")


def _check_encoded_task(task: str, config: Any, encoded: bool) -> None:
    """Refuse, before the model is loaded, an ``ENCODED_TASKS`` task for a model that is not such an
    encoder-decoder (or not of the task's types)."""
    if task not in ENCODED_TASKS:
        return
    if not encoded:
        raise InvalidInputError(
            f"{task} is the task of an encoder-decoder whose encoder reads the image (a VisionEncoderDecoder: "
            f"TrOCR, Donut), and a {config.model_type} model reads the image's rows among its prompt's tokens",
            fix="export it for image-text-to-text")
    types = ENCODED_TASKS[task]
    if types is not None and config.model_type not in types:
        raise InvalidInputError(
            f"{task} asks a {', '.join(types)} model (Donut) its question as a prompt between its task tokens, "
            f"which a {config.model_type} model does not read", fix="export it for image-to-text")


def _transformers_js_vlm_refusal(task: str, config: Any) -> str | None:
    """Why transformers.js cannot run a model of ``config`` for ``task`` (image-text-to-text or an
    ``ENCODED_TASKS`` one, or audio-text-to-text) from onnxport's files, or None."""
    if task == "audio-text-to-text":
        return None if config.model_type in TRANSFORMERS_JS_AUDIO_TYPES else "it has no such audio-text-to-text type"
    if task in ENCODED_TASKS:
        types = TRANSFORMERS_JS_ENCODED_TYPES[task]
        if config.model_type not in types:
            return f"its {task} pipeline loads {', '.join(types)} models alone"
        decoder = config.get_text_config(decoder=True).model_type
        if decoder not in TRANSFORMERS_JS_DECODER_CACHES:
            return (f"it cannot size the cache of a {decoder} decoder (its getNormalizedConfig knows the decoders of "
                    f"{', '.join(TRANSFORMERS_JS_DECODER_CACHES)})")
        return None
    if config.model_type not in TRANSFORMERS_JS_TYPES:
        return "it has no such model type"
    return transformers_js_refusal(config)


def _images_encoded(auto: str, config: Any) -> bool:
    """Whether the class ``auto`` loads for ``config`` reads its images as its encoder's input (its folder is then
    a seq2seq one: ``multimodal.components.images_encoded``), told before the model is loaded."""
    import transformers

    cls = getattr(transformers, auto, None)
    with contextlib.suppress(KeyError, AttributeError, ValueError):
        cls = cls._model_mapping[type(config)]
    return images_encoded(cls, config)


@contextlib.contextmanager
def _one_head_size(model: torch.nn.Module, inputs: dict[str, Any], task: str, engine: Any) -> Iterator[dict[str, Any]]:
    """``inputs`` as they are, or, for a genai folder whose model caches keys and values of different head sizes
    (multi-head latent attention), with the cache padded to one size while ``model`` is exported that way
    (``onnxport.hf.uniform_cache``)."""
    argument = cache_argument(model)
    cache = inputs.get(argument)
    if task != "text-generation" or engine is not None or cache is None or uniform_cache.uniform(cache):
        yield inputs
        return
    with uniform_cache.padded(model, argument, cache) as example:
        yield {**inputs, argument: example}


def _stream_or_load(directory: str, spec: Task, precision: torch.dtype | None) -> tuple[bool, str]:
    """Whether to stream the weights (and why) when the caller did not say: load them, and so verify the export,
    wherever they fit in memory with room to spare (``onnxport.memory.fits``); stream only those that do not."""
    if spec.seq2seq or spec.pieces:
        return False, ""
    nbytes = stream.loaded_size(directory, precision)
    if nbytes is None or memory.fits(nbytes):  # no safetensors files: from_pretrained reads what there is
        return False, ""
    available = memory.available_memory()
    free = f"{memory.gib(available)} free" if available is not None else "free memory unknown"
    why = (f"{memory.gib(nbytes)} of weights loaded would not fit {memory.LOAD_FACTOR} times over in the memory "
           f"here, {free}")
    logger.info("streaming the weights: %s", why)
    return True, why


def _copy(directory: str, out: str, names: Sequence[str]) -> None:
    for name in names:
        shutil.copyfile(os.path.join(directory, name), os.path.join(out, name))


def _prequantized_options(scheme: prequantized.Scheme, quantize: QuantizeOptions | None, named: frozenset[str],
                          task: str, spec: Task, streaming: bool | None) -> QuantizeOptions:
    """The quantization of a GPTQ or AWQ checkpoint (its codes are added once it is loaded): only its quantized
    layers without ``quantize``; with it, the float ones too, with the checkpoint's bits and group size (and its
    symmetry, unless ``quantize`` names one). ``named``: the options ``quantize=`` set."""
    name = f"a {scheme.method.upper()} checkpoint"
    if spec.seq2seq:
        raise InvalidInputError(f"onnxport does not export {name} for {task}",
                                fix="export it for text-generation, feature-extraction or text-classification")
    if streaming:
        raise InvalidInputError(f"{name} is exported with its weights dequantized in memory, not streamed",
                                fix="leave streaming unset")
    asked = quantize or QuantizeOptions()
    if asked.activations is not None:
        raise InvalidInputError(f"quantize's activations= would quantize the weights of {name} anew, dropping its "
                                "codes", fix="leave activations out: its layers keep their codes (weight-only)")
    for key, have in (("bits", scheme.bits), ("block_size", scheme.group_size)):
        if key in named and getattr(asked, key) != have:
            raise InvalidInputError(
                f"quantize asks for {key}={getattr(asked, key)}, but the checkpoint's layers are {scheme}, and keep "
                "their codes",
                fix=f"leave {key} out (the float layers left, such as the LM head, are then quantized like the "
                f"checkpoint's: {key}={have}), or export without quantize")
    return asked.changed(bits=scheme.bits, block_size=scheme.group_size, codes_only=quantize is None,
                         symmetric=asked.symmetric if "symmetric" in named else scheme.symmetric)


def _check_token_dims(files: dict[str, OnnxProgram], static: Mapping[str, set[int]]) -> None:
    """Refuse, before anything is written, a model whose token ids torch.export fixed to the example's batch or
    length (the model's code makes them so): a folder that takes only prompts of the example's length. ``static``:
    per file, the dims of input_ids its task leaves static by design (one text per image of Grounding DINO)."""
    for name, prog in files.items():
        for value in prog.model.graph.inputs:
            if value.name == "input_ids" and value.shape is not None:
                fixed = [f"{axis} {size}" for dim, (axis, size) in enumerate(zip(("batch", "length"), value.shape))
                         if isinstance(size, int) and dim not in static.get(name, ())]
                if fixed:
                    raise InvalidInputError(
                        f"torch.export fixed the {' and '.join(fixed)} of {name}'s input_ids to the example's: the "
                        "model's code makes them static (the export's warnings name where), and the folder would "
                        "take no other", fix="export the model with onnxport.export and static shapes, or change "
                        "the code that fixes them")


def _check_quantized(files: dict[str, OnnxProgram]) -> None:
    """Refuse, before anything is written, a quantized export that quantized no layer of a model (not one
    left in float by ``skip``): it has no linear layer (bfloat16 weights ``quantize`` refuses itself)."""
    for name, prog in files.items():
        result = prog.report.quantization
        if getattr(result, "quantized", True) or getattr(result, "left", None):
            continue
        raise InvalidInputError(f"no linear layer of {name} was quantized: it has no MatMul or Gemm with a constant "
                                "float weight", fix="export without quantize")
