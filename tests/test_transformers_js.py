"""``export_hf(..., target="transformers.js")``: the folder transformers.js loads, run in Node by the pinned
``@huggingface/transformers`` (tests/runtimes/transformers-js, installed by ``make runtimes``) through
``pipeline(task, folder, {dtype})``, for each task it has a pipeline for and each dtype the folder holds.

fp32 equals transformers' own pipeline on the PyTorch model (labels and tokens equal, scores within 1e-4);
the other dtypes run and stay within the bounds stated in ``CLOSE``. Tiny random models, nothing downloaded.
All folders are exported once and run in one Node process (the ``js`` fixture), and one model per kind in
headless Chromium: that matrix (about a minute) is a ``sweep``, run once per CI (``make test-sweep``); ``make
test`` runs the rest (the merged decoder, external data, a bfloat16 checkpoint, the refusals) in Node."""

from __future__ import annotations

import json
import os
import pathlib
from unittest import mock

import numpy as np
import pytest
import torch

import onnxport
from onnxport.hf import export_hf
from onnxport.hf import transformers_js as tjs
from tests.hf_dirs import write_llama
from tests.runtimes.browser import need_chromium, open_pages
from tests.runtimes.runtimes import HERE as RUNTIMES_HERE
from tests.runtimes.runtimes import ROOT as RUNTIMES_ROOT
from tests.runtimes.runtimes import run_transformers_js

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.transformers

MODULES = os.path.join(RUNTIMES_ROOT, "transformers-js")
RUNNER = os.path.join(RUNTIMES_HERE, "run_transformers_js.mjs")
DTYPES = tuple(tjs.DTYPES)
# How far each dtype's scores (probabilities) may be from fp32's: float16 arithmetic, then int8 weights and
# activations, then 4-bit weights. Loose for the quantized ones: these tiny random models (32-wide layers, wide
# random weights for scores far apart) have the quantization error of a real model and none of its redundancy,
# and torch's other releases draw other weights (measured at most 0.11 for q8 and 0.41 for q4 over torch 2.10
# and 2.15).
CLOSE = {"fp32": 1e-4, "fp16": 5e-3, "q8": 0.2, "q4": 0.5, "q4f16": 0.5}
PROMPT = "w5 w17 w33 w8"
NEW_TOKENS = 8


def write_special_tokenizer(directory: str, vocab_size: int, kind: str = "PreTrainedTokenizerFast") -> None:
    """A word-level tokenizer (``<pad>``=0, ``<s>``=1, ``</s>``=2, then ``w3``...) whose three special tokens are
    marked special, so that both transformers and transformers.js leave them out of decoded text."""
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, vocab_size)}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.add_special_tokens([AddedToken(t, special=True) for t in ("<pad>", "<s>", "</s>")])
    tokenizer.save(os.path.join(directory, "tokenizer.json"))
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"tokenizer_class": kind, "bos_token": "<s>", "eos_token": "</s>",
                   "pad_token": "<pad>", "unk_token": "<pad>"}, f)


def write_png(path: str, height: int, width: int, seed: int = 0) -> object:
    from PIL import Image

    rng = np.random.default_rng(seed)
    image = Image.fromarray(rng.integers(0, 255, (height, width, 3), dtype=np.uint8))
    image.save(path)
    return image


class Case:
    """One exported folder: the task, the source directory, the inputs given to both pipelines, the options
    (the same in both), and transformers' result for each input."""

    def __init__(self, task: str, directory: str, inputs: list, options: dict, expected: list) -> None:
        self.task, self.directory, self.inputs, self.options, self.expected = task, directory, inputs, options, expected
        self.out = ""  # the exported folder


def _text_generation(root: str) -> Case:
    directory = os.path.join(root, "llama")
    write_llama(directory)
    write_special_tokenizer(directory, 99)
    options = {"max_new_tokens": NEW_TOKENS, "do_sample": False}
    eager = transformers.pipeline("text-generation", model=directory)
    return Case("text-generation", directory, [PROMPT], options, [eager(PROMPT, **options)])


def _text2text(root: str) -> Case:
    directory = os.path.join(root, "t5")
    torch.manual_seed(0)
    config = transformers.T5Config(vocab_size=99, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                                   decoder_start_token_id=0, pad_token_id=0, eos_token_id=2, initializer_factor=4.0)
    model = transformers.T5ForConditionalGeneration(config).eval()
    model.save_pretrained(directory)
    write_special_tokenizer(directory, 99)
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    options = {"max_new_tokens": NEW_TOKENS, "do_sample": False}
    texts = [PROMPT, "w40 w41 w42"]
    expected = []
    for text in texts:
        ids = model.generate(**tokenizer(text, return_tensors="pt"), **options, num_beams=1)
        expected.append([{"generated_text": tokenizer.decode(ids[0], skip_special_tokens=True)}])
    return Case("text2text-generation", directory, texts, options, expected)


def _encoder(root: str, task: str, head: str, **extra: object) -> Case:
    from tests.test_export_hf_tasks import LABELS, QA, TEXTS, tiny_model, write_tokenizer


    directory = os.path.join(root, head or "bert")
    tokenizer = write_tokenizer(directory, "bert")
    if task == "token-classification":
        extra = dict(num_labels=5, id2label=LABELS, label2id={v: k for k, v in LABELS.items()})
    model = tiny_model("bert", head or "Model", len(tokenizer), **extra)
    model.save_pretrained(directory)
    if task == "question-answering":
        from onnxport.hf.question_answering import QuestionAnsweringPipeline

        eager = QuestionAnsweringPipeline(model=model, tokenizer=tokenizer)
        return Case(task, directory, QA[:2], {}, [eager(**q) for q in QA[:2]])
    # Words of the vocabulary only: transformers.js drops [UNK] from token classification as a special token.
    texts = ([TEXTS[1], TEXTS[3]] if task == "fill-mask"
             else ["alice lives in paris", "bob visited rome and carol works near the river in london"])
    eager = transformers.pipeline(task, model=model, tokenizer=tokenizer)
    return Case(task, directory, texts, {}, [eager(t) for t in texts])


def write_vit(root: str, cls: str, **extra: object) -> tuple[str, object, list[str], list[object]]:
    """A random ViT of class ``cls`` on 32-pixel images saved with its image processor under ``root/vit``, and two
    pictures of the model's size (no resizing, which transformers.js does its own way): directory, model, paths,
    pictures."""
    directory = os.path.join(root, "vit")
    torch.manual_seed(0)
    config = transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                    image_size=32, patch_size=8, initializer_range=0.3, **extra)
    model = getattr(transformers, cls)(config).eval()
    model.save_pretrained(directory)
    transformers.ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(directory)
    paths = [os.path.join(root, f"image{i}.png") for i in range(2)]
    return directory, model, paths, [write_png(p, 32, 32, seed=i) for i, p in enumerate(paths)]


def _image_classification(root: str) -> Case:
    directory, model, paths, pictures = write_vit(root, "ViTForImageClassification", num_labels=4)
    eager = transformers.pipeline("image-classification", model=model, image_processor=directory)
    options = {"top_k": 4}
    return Case("image-classification", directory, [{"image": p} for p in paths], options,
                [eager(p, **options) for p in pictures])


def _audio_classification(root: str) -> Case:
    from tests.test_export_hf_vision_tasks import write_wav2vec2

    directory = os.path.join(root, "wav2vec2")
    model = write_wav2vec2(directory, "group")
    extractor = transformers.AutoFeatureExtractor.from_pretrained(directory)
    eager = transformers.pipeline("audio-classification", model=model, feature_extractor=extractor)
    rng = np.random.default_rng(0)
    clips = [(rng.standard_normal(n) * 0.25).clip(-1, 1).astype(np.float32) for n in (3000, 5210)]  # as a WAV holds
    options = {"top_k": 4}
    return Case("audio-classification", directory, [{"audio": c.tolist()} for c in clips], options,
                [eager(c, **options) for c in clips])


def _zero_shot(root: str) -> Case:
    from tests.test_export_hf_vision_tasks import write_zero_shot

    directory = os.path.join(root, "clip")
    model = write_zero_shot(directory, "clip")
    path = os.path.join(root, "zero_shot.png")
    picture = write_png(path, 32, 32, seed=3)
    labels = ["cat", "dog", "car"]
    eager = transformers.pipeline("zero-shot-image-classification", model=model, tokenizer=directory,
                                  image_processor=directory)
    return Case("zero-shot-image-classification", directory, [{"image": path, "labels": labels}], {},
                [eager(picture, candidate_labels=labels)])


def _object_detection(root: str) -> Case:
    directory = os.path.join(root, "yolos")
    torch.manual_seed(0)
    labels = {0: "cat", 1: "dog", 2: "car"}
    config = transformers.YolosConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                      intermediate_size=64, image_size=[32, 48], patch_size=8, num_detection_tokens=6,
                                      num_labels=3, id2label=labels, label2id={v: k for k, v in labels.items()},
                                      initializer_range=0.3)
    model = transformers.YolosForObjectDetection(config).eval()
    with torch.no_grad():  # its tokens and positions start at zero: each detection token would find the same box
        for name, value in model.named_parameters():
            if name.endswith(("cls_token", "detection_tokens", "position_embeddings")):
                value.normal_()
    model.save_pretrained(directory)
    transformers.YolosImageProcessor(size={"height": 32, "width": 48}).save_pretrained(directory)
    path = os.path.join(root, "detection.png")
    picture = write_png(path, 32, 48, seed=4)
    eager = transformers.pipeline("object-detection", model=model, image_processor=directory)
    options = {"threshold": 0.3}
    return Case("object-detection", directory, [{"image": path}], options, [eager(picture, **options)])


def _image_segmentation(root: str) -> Case:
    directory = os.path.join(root, "segformer")
    torch.manual_seed(0)
    labels = {0: "sky", 1: "road", 2: "tree"}
    config = transformers.SegformerConfig(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32],
                                          patch_sizes=[7, 3], strides=[4, 2], num_attention_heads=[1, 2],
                                          mlp_ratios=[2, 2], decoder_hidden_size=32, image_size=32, num_labels=3,
                                          id2label=labels, label2id={v: k for k, v in labels.items()},
                                          initializer_range=0.3)
    model = transformers.SegformerForSemanticSegmentation(config).eval()
    model.save_pretrained(directory)
    transformers.SegformerImageProcessor(size={"height": 32, "width": 32}).save_pretrained(directory)
    path = os.path.join(root, "segmentation.png")
    picture = write_png(path, 32, 32, seed=5)
    eager = transformers.pipeline("image-segmentation", model=model, image_processor=directory)
    return Case("image-segmentation", directory, [{"image": path}], {}, [eager(picture)])


def _depth_estimation(root: str) -> Case:
    directory = os.path.join(root, "dpt")
    torch.manual_seed(0)
    config = transformers.DPTConfig(hidden_size=32, num_hidden_layers=4, num_attention_heads=4, intermediate_size=64,
                                    image_size=32, patch_size=8, backbone_out_indices=[0, 1, 2, 3],
                                    neck_hidden_sizes=[8, 16, 16, 32], fusion_hidden_size=16, head_in_index=-1,
                                    initializer_range=0.15)  # depths of a few units, as float16 holds them
    model = transformers.DPTForDepthEstimation(config).eval()
    model.save_pretrained(directory)
    transformers.DPTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(directory)
    path = os.path.join(root, "depth.png")
    picture = write_png(path, 32, 32, seed=6)
    eager = transformers.pipeline("depth-estimation", model=model, image_processor=directory)
    return Case("depth-estimation", directory, [{"image": path}], {}, [eager(picture)])


def _speech_recognition(root: str) -> Case:
    from tests.test_export_hf import _seq2seq_dir

    directory, model = _seq2seq_dir(pathlib.Path(root), "whisper")
    write_special_tokenizer(directory, 99, "WhisperTokenizer")  # transformers.js decodes speech with its own
    # 32 frames of 8 mel bins: the encoder's 2 * max_source_positions; a mask, as some checkpoints' extractors give
    # (transformers.js's gives none: the encoder must take none)
    extractor = transformers.WhisperFeatureExtractor(feature_size=8, sampling_rate=16000, hop_length=500,
                                                     chunk_length=1, n_fft=400, return_attention_mask=True)
    extractor.save_pretrained(directory)
    rng = np.random.default_rng(1)
    clip = rng.standard_normal(12000).astype(np.float32) * 0.1
    options = {"max_new_tokens": NEW_TOKENS}
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    features = extractor(clip, sampling_rate=16000, return_tensors="pt").input_features
    ids = model.generate(features, **options)
    return Case("automatic-speech-recognition", directory, [{"audio": clip.tolist()}], options,
                [{"text": tokenizer.decode(ids[0], skip_special_tokens=True)}])


MAKERS = {
    "text-generation": _text_generation,
    "text2text-generation": _text2text,
    "feature-extraction": lambda root: _encoder(root, "feature-extraction", ""),
    "text-classification": lambda root: _encoder(root, "text-classification", "ForSequenceClassification"),
    "fill-mask": lambda root: _encoder(root, "fill-mask", "ForMaskedLM"),
    "token-classification": lambda root: _encoder(root, "token-classification", "ForTokenClassification"),
    "question-answering": lambda root: _encoder(root, "question-answering", "ForQuestionAnswering"),
    "image-classification": _image_classification,
    "audio-classification": _audio_classification,
    "zero-shot-image-classification": _zero_shot,
    "object-detection": _object_detection,
    "image-segmentation": _image_segmentation,
    "depth-estimation": _depth_estimation,
    "automatic-speech-recognition": _speech_recognition,
}


def run_js(jobs: list[dict], scratch: str) -> list[dict]:
    """The jobs run by run_transformers_js.mjs in one Node process."""
    return run_transformers_js(RUNNER, jobs, scratch)


@pytest.fixture(scope="module")
def js(tmp_path_factory):
    """task -> (Case, {dtype: transformers.js's outputs}), every folder exported and run once."""
    root = str(tmp_path_factory.mktemp("transformers-js"))
    cases, jobs = {}, []
    for task, make in MAKERS.items():
        case = make(root)
        out = os.path.join(root, f"{task}-out")
        export_hf(case.directory, task, out, target="transformers.js")
        case.out = out
        cases[task] = case
        jobs += [{"folder": out, "task": task, "dtype": dtype, "inputs": case.inputs, "options": case.options}
                 for dtype in DTYPES]
    results = iter(run_js(jobs, root))
    return {task: (case, {dtype: next(results) for dtype in DTYPES}) for task, case in cases.items()}


def scores(result: object) -> dict[str, float]:
    """label (or token, or answer) -> score, from a pipeline's result for one input."""
    items = result if isinstance(result, list) else [result]
    found = {}
    for item in items:
        key = item.get("label", item.get("token_str", item.get("entity", item.get("answer"))))
        if "index" in item:
            key = f"{item['index']}:{key}"
        found[key] = item["score"]
    return found


def assert_close_scores(got: object, expected: object, bound: float) -> None:
    got, expected = scores(got), scores(expected)
    if bound <= 1e-4:
        assert set(got) == set(expected), (got, expected)
    for key in set(got) & set(expected):
        assert abs(got[key] - expected[key]) <= bound, (key, got[key], expected[key])
    assert set(got) & set(expected), (got, expected)


OWN_CHECKS = ("text-generation", "text2text-generation", "automatic-speech-recognition", "feature-extraction",
              "object-detection", "image-segmentation", "depth-estimation")


@pytest.mark.sweep
@pytest.mark.parametrize("task", [t for t in MAKERS if t not in OWN_CHECKS])
@pytest.mark.parametrize("dtype", DTYPES)
def test_classifying_pipelines_equal_transformers(js, task, dtype) -> None:
    case, results = js[task]
    result = results[dtype]
    assert "error" not in result, result.get("error")
    for got, expected in zip(result["outputs"], case.expected, strict=True):
        if task == "question-answering":  # the best answer; transformers.js scores it otherwise
            if dtype in ("fp32", "fp16"):
                assert got["answer"] == expected["answer"]
            assert got["answer"] and 0 < got["score"] <= 1
        else:
            assert_close_scores(got, expected, CLOSE[dtype])


@pytest.mark.sweep
@pytest.mark.parametrize("dtype", DTYPES)
def test_feature_extraction_equals_transformers(js, dtype) -> None:
    case, results = js["feature-extraction"]
    result = results[dtype]
    assert "error" not in result, result.get("error")
    for got, expected in zip(result["outputs"], case.expected, strict=True):
        got = np.array(got["data"], dtype=np.float32).reshape(got["dims"])
        expected = np.asarray(expected, dtype=np.float32)
        assert got.shape == expected.shape
        if dtype == "fp32":
            np.testing.assert_allclose(got, expected, atol=1e-4, rtol=1e-4)
        else:  # each token's features point the same way
            cosine = (got * expected).sum(-1) / np.linalg.norm(got, axis=-1) / np.linalg.norm(expected, axis=-1)
            assert cosine.min() >= 1 - CLOSE[dtype], cosine.min()


@pytest.mark.sweep
@pytest.mark.parametrize("task", ["text-generation", "text2text-generation", "automatic-speech-recognition"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_generation_equals_transformers(js, task, dtype) -> None:
    case, results = js[task]
    result = results[dtype]
    assert "error" not in result, result.get("error")
    for given, got, expected in zip(case.inputs, result["outputs"], case.expected, strict=True):
        key = "text" if task == "automatic-speech-recognition" else "generated_text"
        text, wanted = (got, expected) if key == "text" else (got[0], expected[0])
        text, wanted = text[key], wanted[key]
        assert isinstance(text, str)
        if dtype in ("fp32", "fp16"):  # greedy: the same tokens (transformers joins new ones without a space)
            assert "".join(text.split()) == "".join(wanted.split())
        else:  # quantized: a text of the prompt's words, of the length asked for at most
            prompt = given if task == "text-generation" else ""
            assert text.startswith(prompt) and len(text[len(prompt):].split()) <= NEW_TOKENS


@pytest.mark.sweep
@pytest.mark.parametrize("dtype", DTYPES)
def test_object_detection_equals_transformers(js, dtype) -> None:
    case, results = js["object-detection"]
    result = results[dtype]
    assert "error" not in result, result.get("error")
    (got,), (expected,) = result["outputs"], case.expected
    assert got and all(case.options["threshold"] <= box["score"] <= 1 for box in got)
    if dtype == "fp32":  # the same boxes, in pixels (rounded: one apart at most)
        assert len(got) == len(expected)
        for a, b in zip(sorted(got, key=lambda x: x["score"]), sorted(expected, key=lambda x: x["score"])):
            assert a["label"] == b["label"] and abs(a["score"] - b["score"]) <= CLOSE[dtype]
            assert all(abs(a["box"][k] - b["box"][k]) <= 1 for k in b["box"])


@pytest.mark.sweep
@pytest.mark.parametrize("dtype", DTYPES)
def test_image_segmentation_equals_transformers(js, dtype) -> None:
    case, results = js["image-segmentation"]
    result = results[dtype]
    assert "error" not in result, result.get("error")
    (got,), (expected,) = result["outputs"], case.expected
    masks = {s["label"]: np.array(s["mask"]["data"]).reshape(s["mask"]["height"], s["mask"]["width"]) for s in got}
    wanted = {s["label"]: np.asarray(s["mask"]) for s in expected}
    assert set(masks) <= set(wanted) and len(wanted) > 1
    if dtype == "fp32":
        assert set(masks) == set(wanted)
    agree = np.mean([np.mean(masks.get(label, 0) == mask) for label, mask in wanted.items()])
    assert agree >= (1.0 if dtype == "fp32" else 0.9), agree


@pytest.mark.sweep
@pytest.mark.parametrize("dtype", DTYPES)
def test_depth_estimation_equals_transformers(js, dtype) -> None:
    case, results = js["depth-estimation"]
    result = results[dtype]
    assert "error" not in result, result.get("error")
    (got,), (expected,) = result["outputs"], case.expected
    depth = np.array(got["predicted_depth"]["data"]).reshape(got["predicted_depth"]["dims"])
    wanted = expected["predicted_depth"].numpy()
    assert depth.shape == wanted.shape and np.ptp(wanted) > 0
    # Both resize the model's depth map to the image, each with its own interpolation: compared in shape.
    assert np.corrcoef(depth.ravel(), wanted.ravel())[0, 1] >= (0.99 if dtype in ("fp32", "fp16") else 0.9)


@pytest.mark.sweep
def test_folder_layout_and_config(js) -> None:
    case, _ = js["text2text-generation"]
    out = os.path.join(os.path.dirname(case.directory), "text2text-generation-out")
    names = sorted(os.listdir(os.path.join(out, "onnx")))
    assert names == sorted(f"{s}{tjs.DTYPES[d]}.onnx" for s in tjs.SEQ2SEQ_SESSIONS for d in DTYPES)
    with open(os.path.join(out, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    assert config["transformers.js_config"] == {} and config["model_type"] == "t5"
    assert {"tokenizer.json", "tokenizer_config.json", "generation_config.json"} <= set(os.listdir(out))


def test_merged_decoder_computes_both_steps(tmp_path) -> None:
    """decoder_model_merged equals the first step without use_cache_branch and the step with past with it, and
    stores the weights the two share once."""
    import onnx
    import onnxruntime as ort

    case = _text2text(str(tmp_path))
    progs = export_hf(case.directory, "text2text-generation", tmp_path / "ort")
    merged = tjs.merge_decoders(progs.decoder, progs.decoder_with_past)
    path = str(tmp_path / "merged.onnx")
    merged.save(path)
    onnx.checker.check_model(path, full_check=True)
    both = sum(np.prod(v.shape.numpy()) for p in progs[1:] for v in p.model.graph.initializers.values())
    once = sum(np.prod(v.shape.numpy()) for v in merged.model.graph.initializers.values())
    assert once <= 0.6 * both
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    ids = np.array([[0, 5, 6]], dtype=np.int64)
    states = np.random.default_rng(0).standard_normal((1, 4, 32)).astype(np.float32)
    mask = np.ones((1, 4), dtype=np.int64)
    feeds = {"input_ids": ids, "encoder_attention_mask": mask, "encoder_hidden_states": states,
             tjs.BRANCH: np.array([False])}
    first = progs.decoder.run_flat([torch.from_numpy(feeds[v.name]) for v in progs.decoder.model.graph.inputs])
    for value in merged.model.graph.inputs:
        if value.name.startswith("past_key_values"):
            feeds[value.name] = np.zeros((1, 4, 0, 8), dtype=np.float32)
    got = session.run(None, feeds)
    for a, b in zip(got, first, strict=True):
        np.testing.assert_allclose(a, b.numpy(), atol=1e-5)
    names = [o.name for o in progs.decoder.model.graph.outputs]
    past = {n.replace("present", "past_key_values"): v for n, v in zip(names, got) if n.startswith("present")}
    step = np.array([[7]], dtype=np.int64)
    feeds = dict(feeds, input_ids=step, **past, **{tjs.BRANCH: np.array([True])})
    expected = progs.decoder_with_past.run_flat([torch.from_numpy(feeds[v.name])
                                                 for v in progs.decoder_with_past.model.graph.inputs])
    for a, b in zip(session.run(None, feeds), expected, strict=True):
        np.testing.assert_allclose(a, b.numpy(), atol=1e-5)


def test_bad_calls(tmp_path) -> None:
    directory = str(tmp_path / "llama")
    write_llama(directory)
    for kwargs, match in [
        (dict(target="transformers.js", quantize="int4"), "holds its own quantized variants"),
        (dict(target="transformers.js", dtypes=["fp8"]), "not transformers.js's"),
        (dict(dtypes=["fp16"]), "chooses the files of a transformers.js folder"),
        (dict(target="transformers.js>=3.0"), "older than onnxport writes for"),
        (dict(target="transformers.jsx"), "not one onnxport writes for"),
    ]:
        with pytest.raises(onnxport.InvalidInputError, match=match):
            export_hf(directory, "text-generation", tmp_path / "out", **kwargs)
    with pytest.raises(onnxport.InvalidInputError, match="pools sentence embeddings itself"):
        export_hf(directory, "sentence-similarity", tmp_path / "out", target="transformers.js")
    assert not (tmp_path / "out").exists()


def test_cli_dtypes_choose_the_files(tmp_path, capsys) -> None:
    from onnxport.cli import main

    directory, out = str(tmp_path / "llama"), tmp_path / "out"
    write_llama(directory)
    assert main(["export-hf", directory, "-o", str(out), "--target", "transformers.js>=4.0", "--dtypes", "fp32,q4"]) == 0
    assert sorted(os.listdir(out / "onnx")) == ["model.onnx", "model_q4.onnx"]
    assert f"saved {out / 'onnx' / 'model_q4.onnx'}" in capsys.readouterr().out



# -- a real browser ---------------------------------------------------------------------------------------------

# One model per kind (an encoder, a decoder with its cache, an encoder-decoder, a vision model), in the dtype
# transformers.js picks on wasm by default (q8) and in fp32.
BROWSER = [("text-classification", "fp32"), ("text-classification", "q8"), ("text-generation", "fp32"),
           ("text-generation", "q8"), ("text2text-generation", "fp32"), ("image-classification", "fp32"),
           ("image-classification", "q4f16"), ("audio-classification", "fp32"),
           ("automatic-speech-recognition", "fp32")]
SPLIT = ("text-generation", "fp32 with external data")  # run as fp32, from a folder with model.onnx_data


def write_wav(path: pathlib.Path, samples: list[float]) -> str:
    """``samples`` (16 kHz) as a 32-bit float WAV file; returns its name."""
    import wave

    data = np.asarray(samples, dtype=np.float32)
    with wave.open(str(path), "wb") as f:  # wave writes PCM only: 32-bit integers of the floats' full scale
        f.setnchannels(1)
        f.setsampwidth(4)
        f.setframerate(16000)
        f.writeframes((np.clip(data, -1, 1) * (2**31 - 1)).astype("<i4").tobytes())
    return path.name


@pytest.fixture(scope="module")
def browser(js, tmp_path_factory):
    """(task, dtype) -> what the example page left in Chromium for the first input of the task's case."""
    need_chromium()
    root = tmp_path_factory.mktemp("site")
    for task, _ in BROWSER:
        if not (root / task).exists():
            os.symlink(js[task][0].out, root / task)
    # The decoder again with its weights in model.onnx_data, which the page fetches beside the model.
    with mock.patch.object(tjs, "_TWO_GB", 1024):
        export_hf(js["text-generation"][0].directory, "text-generation", root / "split", target="transformers.js",
                  dtypes=["fp32"])
    queries = []
    for task, dtype in [*BROWSER, SPLIT]:
        case = js[task][0]
        given = case.inputs[0]
        if isinstance(given, dict) and "audio" in given:  # a WAV file of the samples, served beside the folders
            given = write_wav(root / f"{task}.wav", given["audio"])
        elif isinstance(given, dict):  # an image: served beside the folders
            name = os.path.basename(given["image"])
            if not (root / name).exists():
                os.symlink(given["image"], root / name)
            given = name
        folder = "split" if (task, dtype) == SPLIT else task
        queries.append({"model": folder, "task": task, "dtype": dtype.split()[0], "input": given,
                        "options": json.dumps(case.options)})
    return dict(zip(BROWSER + [SPLIT], open_pages(root, queries)))


@pytest.mark.sweep
def test_the_browser_reads_external_data_as_declared(browser, js) -> None:
    result = browser[SPLIT]
    assert "error" not in result, result.get("error")
    assert result["output"] == js["text-generation"][1]["fp32"]["outputs"][0]


@pytest.mark.sweep
@pytest.mark.parametrize(("task", "dtype"), BROWSER)
def test_the_example_page_runs_each_model_kind_in_chromium(browser, js, task, dtype) -> None:
    """In Chromium on the wasm backend: fp32 computes what transformers.js computes in Node (onnxruntime-node)
    to float32's rounding, so equals transformers' pipeline; the others stay within their bounds of it (the
    wasm build's integer and float16 kernels round otherwise than the native ones)."""
    result = browser[task, dtype]
    assert "error" not in result, result.get("error")
    assert "Chrom" in result["userAgent"]
    case, results = js[task]
    got, in_node = result["output"], results[dtype]["outputs"][0]
    if task in ("text-generation", "text2text-generation", "automatic-speech-recognition"):
        assert got == in_node
    elif dtype == "fp32":
        assert_close_scores(got, in_node, 1e-4)
    else:
        assert_close_scores(got, case.expected[0], CLOSE[dtype])


def test_a_bfloat16_checkpoint_gives_float32_files_that_generate_as_transformers(tmp_path) -> None:
    """The fp32 file is float32 whatever the checkpoint's dtype (the weights converted as they are copied), and
    every dtype is made from it: a bfloat16 checkpoint gives the folder a float32 one would."""
    import onnx

    directory, out = str(tmp_path / "llama"), str(tmp_path / "out")
    write_llama(directory, dtype=torch.bfloat16)
    write_special_tokenizer(directory, 99)
    export_hf(directory, "text-generation", out, target="transformers.js", dtypes=["fp32", "q4"])
    model = onnx.load(os.path.join(out, "onnx", "model.onnx"))
    assert {init.data_type for init in model.graph.initializer} <= {onnx.TensorProto.FLOAT, onnx.TensorProto.INT64}
    options = {"max_new_tokens": NEW_TOKENS, "do_sample": False}
    results = run_js([{"folder": out, "task": "text-generation", "dtype": d, "inputs": [PROMPT], "options": options}
                      for d in ("fp32", "q4")], str(tmp_path))
    expected = transformers.pipeline("text-generation", model=directory, dtype=torch.float32)(PROMPT, **options)
    assert "error" not in results[1], results[1].get("error")
    got = results[0]["outputs"][0][0]["generated_text"]
    assert "".join(got.split()) == "".join(expected[0]["generated_text"].split())


def test_a_variant_that_cannot_be_made_leaves_nothing_written(tmp_path, monkeypatch) -> None:
    directory, out = str(tmp_path / "llama"), tmp_path / "out"
    write_llama(directory)
    made = tjs.variant

    def failing(prog, dtype):
        if dtype == "q4f16":
            raise onnxport.InvalidInputError("no q4f16 today", fix="none")
        return made(prog, dtype)

    monkeypatch.setattr(tjs, "variant", failing)
    with pytest.raises(onnxport.InvalidInputError, match="no q4f16 today"):
        export_hf(directory, "text-generation", out, target="transformers.js")
    assert not out.exists()


def test_external_data_is_named_and_declared_as_transformers_js_reads_it(tmp_path, monkeypatch) -> None:
    """A file over the protobuf limit (lowered here) keeps its weights in ``<file>.onnx_data``, which
    ``use_external_data_format`` declares; transformers.js loads it so, and generates as from one file."""
    import onnx

    directory = str(tmp_path / "llama")
    write_llama(directory)
    write_special_tokenizer(directory, 99)
    export_hf(directory, "text-generation", tmp_path / "whole", target="transformers.js", dtypes=["fp32"])
    monkeypatch.setattr(tjs, "_TWO_GB", 1024)
    out = tmp_path / "split"
    export_hf(directory, "text-generation", out, target="transformers.js", dtypes=["fp32", "q4"])
    assert sorted(os.listdir(out / "onnx")) == ["model.onnx", "model.onnx_data", "model_q4.onnx", "model_q4.onnx_data"]
    with open(out / "config.json", encoding="utf-8") as f:
        settings = json.load(f)["transformers.js_config"]
    assert settings == {"use_external_data_format": {"model.onnx": 1, "model_q4.onnx": 1}}
    locations = {e.value for t in onnx.load(str(out / "onnx" / "model.onnx"), load_external_data=False).graph.initializer
                 for e in t.external_data if e.key == "location"}
    assert locations == {"model.onnx_data"}
    cache = onnx.load(str(out / "onnx" / "model.onnx"), load_external_data=False).graph.input
    assert all(i.type.tensor_type.shape.dim[0].dim_param == "batch_size" for i in cache if "past" in i.name)
    options = {"max_new_tokens": NEW_TOKENS, "do_sample": False}
    jobs = [{"folder": str(folder), "task": "text-generation", "dtype": "fp32", "inputs": [PROMPT], "options": options}
            for folder in (tmp_path / "whole", out)]
    whole, split = run_js(jobs, str(tmp_path))
    assert "error" not in split, split.get("error")
    assert split == whole


def test_a_hybrid_models_layer_kinds_are_written_in_transformers_js_words() -> None:
    """transformers 5 saves a Granite 4 hybrid's layers as linear_attention and full_attention; transformers.js 4.3
    names its caches from "mamba" and "attention" layers (getCacheNames in configs.js), and feeds none for others."""
    transformers = pytest.importorskip("transformers")
    from onnxport.hf.transformers_js import _HYBRID_LAYERS, config_settings
    from tests.test_transformers_js_vlm import SOURCE, _read

    config = transformers.GraniteMoeHybridConfig(num_hidden_layers=3,
                                                 layer_types=["linear_attention", "full_attention", "linear_attention"])
    assert config_settings(config) == {"config.json": {"layer_types": ["mamba", "attention", "mamba"]}}
    assert config_settings(transformers.LlamaConfig()) == {}
    if not os.path.isdir(SOURCE):
        pytest.fail("transformers.js is not installed: run `make runtimes`")
    names = _read("configs.js")
    branch = names[names.index("['granitemoehybrid', 'falcon_h1', 'nemotron_h'].includes"):][:800]
    assert all(f"'{model_type}'" in branch for model_type in _HYBRID_LAYERS)
    assert "=== 'mamba'" in branch and "=== 'attention'" in branch


def test_causal_lms_whose_cache_transformers_js_feeds_otherwise_are_refused_before_loading(tmp_path) -> None:
    transformers = pytest.importorskip("transformers")
    from onnxport.hf.transformers_js import _GENERATION_REFUSED, generation_refusal
    from tests.test_transformers_js_vlm import SOURCE, _read

    directory = str(tmp_path / "mbart")
    transformers.MBartConfig(vocab_size=64, d_model=16, decoder_layers=1, decoder_attention_heads=2,
                             architectures=["MBartForCausalLM"]).save_pretrained(directory)  # no weights: not loaded
    with pytest.raises(onnxport.InvalidInputError, match="sizes a mbart decoder's cache as an encoder-decoder's"):
        export_hf(directory, "text-generation", tmp_path / "out", target="transformers.js")
    assert not os.path.exists(tmp_path / "out")
    assert generation_refusal(transformers.LlamaConfig()) is None
    directory = str(tmp_path / "speecht5")  # a speech recognizer whose transformers.js class feeds no audio
    transformers.SpeechT5Config(architectures=["SpeechT5ForSpeechToText"]).save_pretrained(directory)
    with pytest.raises(onnxport.InvalidInputError, match="SpeechT5ForSpeechToText passes its encoder input_ids"):
        export_hf(directory, "automatic-speech-recognition", tmp_path / "out", target="transformers.js")
    assert not os.path.exists(tmp_path / "out")
    if not os.path.isdir(SOURCE):
        pytest.fail("transformers.js is not installed: run `make runtimes`")
    names = _read("configs.js")
    cache_names = names[names.index("export function getCacheNames"):names.index("function getKeyValueNames")]
    assert "_conv.${i}.query" in cache_names and "'olmo_hybrid'" in cache_names
    assert ".conv_state`" in cache_names and ".shift_state`" in cache_names  # zaya's
    assert "glm_moe_dsa" not in cache_names and "indexer_key" not in cache_names
    assert "_compressor.${i}.kv`" in cache_names and "'deepseek_v4'" in cache_names  # no compressed entries
    assert "compressed_kv" not in cache_names and "overlap" not in cache_names
    assert set(_GENERATION_REFUSED) == {"olmo_hybrid", "zaya", "glm_moe_dsa", "deepseek_v4", "qwen3_5_text",
                                        "qwen3_5_moe_text"}
    rope = _read("models/modeling_utils.js")
    rope = rope[rope.index("'qwen2_vl_text'"):][:1200]  # the text types given the vision rope index
    assert "'qwen3_5_text'" in rope and "'qwen3_5_moe_text'" in rope and "get_rope_index" in rope
