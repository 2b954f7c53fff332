"""``export_hf(..., "image-text-to-text", target="transformers.js")``: the folder transformers.js loads with
``AutoProcessor`` and ``AutoModelForImageTextToText`` (sessions ``vision_encoder``, ``embed_tokens`` and
``decoder_model_merged``), run in Node by the pinned ``@huggingface/transformers`` (tests/runtimes/transformers-js,
``make runtimes``) as its users run it: its own processor on a prompt and a picture, then ``generate``.

The tokens it generates equal transformers' ``generate`` on the PyTorch model given what transformers.js's
processor gave (its processors resize and expand prompts their own way; one image per prompt, as its Qwen VL
image processor takes one image at a time; for Gemma 4, also a prompt with a clip of sound, which its
``audio_encoder`` hears) in fp32 and fp16; the quantized dtypes run and continue the prompt.
The layout's tables (``onnxport.hf.multimodal.consumers``) are checked against the installed transformers.js's
source. Qwen2-VL in fp32 runs in ``make test``; every model in fp32 (Qwen2-VL in every dtype, Gemma 4 in fp16 and
q4 too, Florence-2 and LFM2-VL in q4), and two in headless Chromium through the example page, is a ``sweep``. Tiny
random models, nothing downloaded."""

from __future__ import annotations

import inspect
import json
import math
import os
import re
from typing import Any, NamedTuple

import pytest
import torch

from onnxport.hf import export_hf
from onnxport.hf import transformers_js as tjs
from onnxport.hf.multimodal import TRANSFORMERS_JS
from onnxport.hf.multimodal.consumers import TRANSFORMERS_JS_TYPES
from tests.runtimes.browser import open_pages
from tests.runtimes.runtimes import HERE as RUNTIMES_HERE
from tests.runtimes.runtimes import ROOT as RUNTIMES_ROOT
from tests.runtimes.runtimes import run_transformers_js

transformers = pytest.importorskip("transformers")

from tests import vlm_dirs, vlm_dirs_audio, vlm_dirs_lfm  # noqa: E402

pytestmark = pytest.mark.transformers

MODULES = os.path.join(RUNTIMES_ROOT, "transformers-js")
SOURCE = os.path.join(MODULES, "node_modules", "@huggingface", "transformers", "src")
RUNNER = os.path.join(RUNTIMES_HERE, "run_transformers_js_vlm.mjs")
NEW_TOKENS = 6
PICTURES = ((40, 48), (32, 64))  # one prompt each
CLIP = [round(0.5 * math.sin(2 * math.pi * 440 * i / 16000), 5) for i in range(9600)]  # 0.6 s of 440 Hz at 16 kHz


class Case(NamedTuple):
    """A model type's directory writer, its prompt (the placeholder transformers.js's processor expands),
    whether that processor takes (images, text) rather than (text, images), and whether the PyTorch model takes
    the image's size (``image_sizes``: Pixtral's tower), which transformers.js's processor does not give, and
    whether transformers.js puts the image's rows before the prompt rather than in place of image tokens
    (Florence-2's: transformers' processor puts the image tokens there), and, for a model that also hears, a prompt
    for a clip of sound (:data:`CLIP`, given to the processor as ``processor(text, null, audio)``)."""

    write: Any
    prompt: str
    images_first: bool = False
    sizes: bool = False
    prepends_images: bool = False
    audio_prompt: str | None = None


CASES = {
    "qwen2_vl": Case(lambda d: vlm_dirs.write_qwen_vl(d, "qwen2_vl"), f"user: {vlm_dirs.QWEN_IMAGE} what is it ?"),
    "qwen2_5_vl": Case(lambda d: vlm_dirs.write_qwen_vl(d, "qwen2_5_vl"), f"user: {vlm_dirs.QWEN_IMAGE} what is it ?"),
    "qwen3_vl": Case(lambda d: vlm_dirs.write_qwen_vl(d, "qwen3_vl"), f"user: {vlm_dirs.QWEN_IMAGE} what is it ?"),
    "qwen3_vl_moe": Case(lambda d: vlm_dirs.write_qwen_vl(d, "qwen3_vl_moe"),
                         f"user: {vlm_dirs.QWEN_IMAGE} what is it ?"),
    "qwen3_5": Case(lambda d: vlm_dirs.write_qwen_vl(d, "qwen3_5"), f"user: {vlm_dirs.QWEN_IMAGE} what is it ?"),
    "qwen3_5_moe": Case(lambda d: vlm_dirs.write_qwen_vl(d, "qwen3_5_moe"),
                        f"user: {vlm_dirs.QWEN_IMAGE} what is it ?"),
    "glm_ocr": Case(vlm_dirs.write_glm_ocr, "user: <|begin_of_image|><|image|><|end_of_image|> what is it ?"),
    "llava": Case(vlm_dirs.write_llava, "user: <image> what is in this picture ? assistant:", images_first=True),
    "gemma3": Case(vlm_dirs.write_gemma3, "user: <start_of_image> what is in this picture ? assistant:"),
    "gemma4": Case(vlm_dirs_audio.write_gemma4_with_audio, "user: <|image|> describe the picture . assistant:",
                   audio_prompt="user: <|audio|> what is it ?"),
    "idefics3": Case(vlm_dirs.write_idefics3, "user: <image> what is in this picture ?"),
    "smolvlm": Case(lambda d: vlm_dirs.write_idefics3(d, "smolvlm"), "user: <image> what is in this picture ?"),
    "paligemma": Case(vlm_dirs.write_paligemma, "<image>what is in this picture ?", images_first=True),
    "florence2": Case(vlm_dirs.write_florence2, "what is in this picture ?", images_first=True, prepends_images=True),
    "mistral3": Case(vlm_dirs.write_mistral3, "user: [IMG] what is in this picture ? assistant:", images_first=True,
                     sizes=True),
    "lfm2_vl": Case(vlm_dirs_lfm.write_lfm2_vl_with_processor, "user: <image> what is in this picture ?",
                    images_first=True),
    "lfm3_vl": Case(vlm_dirs_lfm.write_lfm3_vl, f"user: {vlm_dirs_lfm.LFM3_VL_IMAGE} what is it ?", images_first=True),
}
QUICK = (("qwen2_vl", "fp32"),)


def run_js(jobs: list[dict], scratch: str) -> list[dict]:
    """The jobs run by run_transformers_js_vlm.mjs in one Node process."""
    return run_transformers_js(RUNNER, jobs, scratch, timeout=1200)


class Run(NamedTuple):
    """A folder run in transformers.js: the PyTorch model, transformers.js's result, the folder, the pictures."""

    model: Any
    result: dict
    folder: str
    pictures: list[str]


def run_folders(root: str, wanted: list[tuple[str, str]]) -> dict[tuple[str, str], Run]:
    """(type, dtype) -> its ``Run``, each type exported once in its dtypes and all run in one Node process."""
    models, folders, jobs = {}, {}, []
    for kind in dict.fromkeys(kind for kind, _ in wanted):
        case = CASES[kind]
        directory, out = os.path.join(root, kind), os.path.join(root, f"{kind}-js")
        models[kind] = case.write(directory)
        dtypes = [dtype for k, dtype in wanted if k == kind]
        export_hf(directory, "image-text-to-text", out, target="transformers.js", dtypes=dtypes)
        paths = []
        for i, picture in enumerate(vlm_dirs.images(*PICTURES)):
            paths.append(os.path.join(directory, f"picture{i}.png"))
            picture.save(paths[-1])
        cases = [{"text": case.prompt, "images": [path], "max_new_tokens": NEW_TOKENS} for path in paths]
        if case.audio_prompt is not None:
            cases.append({"text": case.audio_prompt, "images": [], "audio": CLIP, "max_new_tokens": NEW_TOKENS})
        jobs += [{"folder": out, "dtype": dtype, "images_first": case.images_first, "cases": cases} for dtype in dtypes]
        folders[kind] = (out, paths)
    results = run_js(jobs, root)
    return {(kind, dtype): Run(models[kind], result, *folders[kind])
            for (kind, dtype), result in zip(wanted, results)}


def torch_inputs(model: torch.nn.Module, given: dict[str, dict]) -> dict[str, torch.Tensor]:
    """What transformers.js's processor gave, as the PyTorch model's generate takes it."""
    types = {"float32": torch.float32, "bool": torch.bool}  # int64 else
    inputs = {name: torch.tensor(v["data"], dtype=types.get(v["type"], torch.int64)).reshape(v["dims"])
              for name, v in given.items()}
    parameters = inspect.signature(model.forward).parameters
    image = model.config.image_token_id
    case = CASES[model.config.model_type]
    if case.prepends_images:  # the image's tokens before the prompt, as transformers' processor puts them
        ids, mask = inputs["input_ids"], inputs["attention_mask"]
        count = vlm_dirs.image_tokens(model, inputs["pixel_values"])
        inputs["input_ids"] = torch.cat([torch.full((ids.shape[0], count), image), ids], dim=1)
        inputs["attention_mask"] = torch.cat([torch.ones(ids.shape[0], count, dtype=mask.dtype), mask], dim=1)
    if "mm_token_type_ids" in parameters:
        inputs["mm_token_type_ids"] = (inputs["input_ids"] == image).to(torch.int64)
    if model.config.model_type == "gemma3":  # as Gemma 3's processor marks its image tokens
        inputs["token_type_ids"] = (inputs["input_ids"] == image).to(torch.int64)
    if case.sizes:  # one image, of its tensor's size
        inputs["image_sizes"] = torch.tensor([list(inputs["pixel_values"].shape[-2:])])
    return {name: value for name, value in inputs.items() if name in parameters}


def check(model: torch.nn.Module, result: dict, dtype: str) -> None:
    assert "error" not in result, result.get("error")
    assert len(result["cases"]) == len(PICTURES) + (CASES[model.config.model_type].audio_prompt is not None)
    for case in result["cases"]:
        inputs = torch_inputs(model, case["inputs"])
        heard = "input_features" in inputs  # the clip's case: its audio tokens, else the picture's
        token = model.config.audio_token_id if heard else model.config.image_token_id
        assert (inputs["input_ids"] == token).sum() > 1  # the picture's (clip's) tokens, expanded
        (tokens,) = case["tokens"]
        decoder_only = not model.config.is_encoder_decoder  # an encoder-decoder's tokens: its start token, then new
        prompt = inputs["input_ids"][0].tolist() if decoder_only else [model.generation_config.decoder_start_token_id]
        assert tokens[:len(prompt)] == prompt and len(tokens) <= len(prompt) + NEW_TOKENS
        if dtype in ("fp32", "fp16"):  # greedy: transformers' tokens
            with torch.no_grad():
                expected = model.generate(**inputs, do_sample=False, max_new_tokens=NEW_TOKENS)
            assert tokens == expected[0].tolist()


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    return run_folders(str(tmp_path_factory.mktemp("vlm-js")), list(QUICK))


@pytest.mark.parametrize(("kind", "dtype"), QUICK)
def test_a_folder_generates_in_transformers_js_as_transformers(quick, kind, dtype) -> None:
    run = quick[kind, dtype]
    check(run.model, run.result, dtype)


# Every model in fp32; Qwen2-VL's in every dtype, the dtypes being made alike for all; Gemma 4's (its audio encoder's)
# in fp16 and q4 too, and the 4-bit ones of an encoder-decoder's merged decoder and of a decoder with conv states
# (Florence-2's and LFM2-VL's q4); Gemma 3's q8 for the browser.
MATRIX = [(kind, dtype) for kind in CASES for dtype in tjs.DTYPES
          if dtype == "fp32" or kind == "qwen2_vl" or (kind, dtype) in (("gemma4", "fp16"), ("gemma4", "q4"),
                                                                        ("florence2", "q4"), ("lfm2_vl", "q4"),
                                                                        ("gemma3", "q8"))]


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    return run_folders(str(tmp_path_factory.mktemp("vlm-js-matrix")), MATRIX)


@pytest.mark.sweep
@pytest.mark.parametrize(("kind", "dtype"), MATRIX)
def test_every_model_generates_in_transformers_js_in_its_dtypes(matrix, kind, dtype) -> None:
    run = matrix[kind, dtype]
    check(run.model, run.result, dtype)


BROWSER = (("qwen2_vl", "fp32"), ("gemma3", "q8"))  # the Qwen line and another, in transformers.js's wasm default


@pytest.mark.sweep
def test_the_example_page_generates_in_chromium_as_in_node(matrix, tmp_path) -> None:
    """In Chromium on the wasm backend, through the example page: the tokens transformers.js gives in Node, where
    fp32 gives transformers' own."""
    queries = []
    for kind, dtype in BROWSER:
        run = matrix[kind, dtype]
        os.symlink(run.folder, tmp_path / kind)
        os.symlink(run.pictures[0], tmp_path / f"{kind}.png")
        options = {"images_first": CASES[kind].images_first, "max_new_tokens": NEW_TOKENS}
        queries.append({"model": kind, "task": "image-text-to-text", "dtype": dtype,
                        "input": f"{kind}.png|{CASES[kind].prompt}", "options": json.dumps(options)})
    for (kind, dtype), got in zip(BROWSER, open_pages(tmp_path, queries), strict=True):
        assert "error" not in got, got.get("error")
        assert "Chrom" in got["userAgent"]
        assert got["output"]["tokens"] == matrix[kind, dtype].result["cases"][0]["tokens"]


def _read(path: str) -> str:
    with open(os.path.join(SOURCE, path), encoding="utf-8") as f:
        return f.read()


def test_the_layout_is_what_the_installed_transformers_js_reads() -> None:
    if not os.path.isdir(SOURCE):
        pytest.fail(f"transformers.js is not installed in {MODULES}: run `make runtimes`")
    sessions = _read("models/session_config.js")
    block = sessions[sessions.index("[MODEL_TYPES.ImageTextToText]"):]
    block = block[:block.index("cache_sessions")]
    assert set(re.findall(r"'(\w+)'", block)) >= set(TRANSFORMERS_JS.files.values())
    registry = _read("models/registry.js")
    mapping = registry[registry.index("MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES = new Map(["):]
    types = re.findall(r"\['([\w-]+)', '\w+'\]", mapping[:mapping.index("]);")])
    known = transformers.models.auto.modeling_auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES
    assert tuple(t for t in types if t in known) == TRANSFORMERS_JS_TYPES
    assert "image_grid_thw_name = 'grid_thw'" in _read("models/qwen2_vl/modeling_qwen2_vl.js")
    assert TRANSFORMERS_JS.inputs["qwen2_vl"] == {"image_grid_thw": "grid_thw"}
    lfm2_vl = _read("models/lfm2_vl/image_processing_lfm2_vl.js")  # its mask int64, after the base class's resizing
    assert "new Tensor('int64', mask_data" in lfm2_vl and "this.preprocess(x, { do_pad: false })" in lfm2_vl
    assert TRANSFORMERS_JS.model_input_types["lfm2_vl"] == {"pixel_attention_mask": torch.int64}
    audio = sessions[sessions.index("[MODEL_TYPES.ImageAudioTextToText]"):]  # Gemma 4's: an audio encoder too
    audio = audio[:audio.index("cache_sessions")]
    assert set(re.findall(r"'(\w+)'", audio)) == {*TRANSFORMERS_JS.files.values(),
                                                  *TRANSFORMERS_JS.audio_files.values()}
    assert re.search(r"'Gemma4ForConditionalGeneration',\s*ALL_MODEL_FILES\.Gemma4ForConditionalGeneration,\s*"
                     r"MODEL_TYPES\.ImageAudioTextToText", registry)
    gemma = _read("models/gemma3n/modeling_gemma3n.js")  # its inputs and output, the mask a bool as given
    assert "const { audio_features } = await sessionRun(this.sessions['audio_encoder'], {" in gemma
    assert "new Tensor('bool', frame_mask, [1, num_frames])" in _read("models/gemma4/feature_extraction_gemma4.js")


@pytest.mark.parametrize(("write", "why"), [(vlm_dirs.write_internvl, "transformers.js does not run internvl"),
                                           pytest.param(lambda d: vlm_dirs.write_any_resolution(d, "llava_onevision"),
                                                        "runs a LLaVA-OneVision as a LLaVA", id="llava_onevision"),
                                           (vlm_dirs.write_lighton_ocr, "has no LightOnOcrProcessor"),
                                           pytest.param(vlm_dirs.write_gemma4, "a checkpoint without an audio tower "
                                                        r"\(no audio_config in its config.json\)", id="gemma4")])
def test_a_type_transformers_js_does_not_run_is_refused_before_anything_is_written(tmp_path, write, why) -> None:
    from onnxport.errors import InvalidInputError

    directory = str(tmp_path / "model")
    write(directory)
    with pytest.raises(InvalidInputError, match=why):
        export_hf(directory, "image-text-to-text", tmp_path / "out", target="transformers.js")
    assert not (tmp_path / "out").exists()
