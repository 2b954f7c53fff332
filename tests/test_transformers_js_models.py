"""Architectures whose ``--target transformers.js`` folders transformers.js once could not run, each exported
from a tiny random checkpoint and run in Node by the pinned transformers.js through its pipeline at fp32, the
generated text equal to transformers' greedy ``generate``: M2M100 (NLLB's architecture; its sinusoid position
table grows with the length), GPTBigCode (StarCoder's; transformers.js feeds its multi-query cache as one
``key_value`` tensor per layer), a Gemma 3 checkpoint with its vision tower asked for text generation
(transformers.js runs it through its image-text-to-text sessions), BART's sequence classifier (its head reads
the end-of-sequence token's features: the example must hold one per text), a ViT's image features (task
image-feature-extraction), Moonshine's speech recognition (raw samples of any length; transformers.js's feature
extractor gives no mask), Cohere ASR's, Wav2Vec2's CTC recognition, Swin2SR's super-resolution (image-to-image),
VITS's text-to-audio (the tokenizer.json export-hf writes for its Python tokenizer; a checkpoint without noise
speaks transformers' waveform, a noisy one its own), Donut's document question answering, TrOCR's and ViT-GPT2's
image-to-text, SAM's and SAM 2's masks (its model and processor: transformers.js has no mask-generation pipeline),
OWL-ViT's and DETR's boxes (on pictures its processor leaves their size: transformers.js resizes otherwise than
PIL), all in one Node process."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
import torch

from onnxport.hf import export_hf
from tests import speech_dirs
from tests.speech_synthesis_dirs import TEXTS, write_vits
from tests.test_transformers_js import (
    NEW_TOKENS,
    PROMPT,
    Case,
    assert_close_scores,
    run_js,
    write_special_tokenizer,
    write_vit,
)
from tests.vlm_dirs import write_gemma3

transformers = pytest.importorskip("transformers")

pytestmark = [pytest.mark.transformers, pytest.mark.sweep]  # in CI once, at the newest versions

VOCAB = 99


def _seq2seq(root: str, name: str, model: object) -> Case:
    directory = os.path.join(root, name)
    model.save_pretrained(directory)
    write_special_tokenizer(directory, VOCAB)
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    options = {"max_new_tokens": NEW_TOKENS, "do_sample": False}
    texts = [PROMPT, "w40 w41 w42 w7 w9 w11 w13 w15 w17 w19 w21 w23"]  # the second longer than the example
    expected = []
    for text in texts:
        ids = model.generate(**tokenizer(text, return_tensors="pt"), **options, num_beams=1)
        expected.append([{"generated_text": tokenizer.decode(ids[0], skip_special_tokens=True)}])
    return Case("text2text-generation", directory, texts, options, expected)


def _m2m100(root: str) -> Case:
    torch.manual_seed(0)
    config = transformers.M2M100Config(
        vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=8, init_std=0.5,
        decoder_start_token_id=2, pad_token_id=0, eos_token_id=2, bos_token_id=1, scale_embedding=True)
    # 8 positions: the prompts and the generated tokens run past the table the checkpoint was saved with
    return _seq2seq(root, "m2m100", transformers.M2M100ForConditionalGeneration(config).eval())


def _causal(root: str, name: str, model: object | None = None) -> Case:
    directory = os.path.join(root, name)
    if model is not None:
        model.save_pretrained(directory)
        write_special_tokenizer(directory, VOCAB)
    options = {"max_new_tokens": NEW_TOKENS, "do_sample": False}
    eager = transformers.pipeline("text-generation", model=directory)
    texts = [PROMPT, "w40 w41 w42"]
    return Case("text-generation", directory, texts, options, [eager(t, **options) for t in texts])


def _gpt_bigcode(root: str) -> Case:
    torch.manual_seed(0)
    config = transformers.GPTBigCodeConfig(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                           multi_query=True, bos_token_id=1, eos_token_id=2, pad_token_id=0,
                                           initializer_range=0.3)
    return _causal(root, "gpt_bigcode", transformers.GPTBigCodeForCausalLM(config).eval())


def _gemma3(root: str) -> Case:
    write_gemma3(os.path.join(root, "gemma3"))  # saved with its vision tower, as Gemma 3's 4B and larger are
    return _causal(root, "gemma3")


def _end_with_eos(directory: str) -> None:
    """The directory's tokenizer ends each text with ``</s>``, as BART's does (its classification head reads the
    features there)."""
    from tokenizers import Tokenizer, processors

    path = os.path.join(directory, "tokenizer.json")
    tokenizer = Tokenizer.from_file(path)
    tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A </s>",
                                                             special_tokens=[("<s>", 1), ("</s>", 2)])
    tokenizer.save(path)


def _bart_classifier(root: str) -> Case:
    directory = os.path.join(root, "bart-classifier")
    torch.manual_seed(0)
    config = transformers.BartConfig(
        vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64, num_labels=3,
        pad_token_id=0, bos_token_id=1, eos_token_id=2, init_std=0.5)
    model = transformers.BartForSequenceClassification(config).eval()
    model.save_pretrained(directory)
    write_special_tokenizer(directory, VOCAB)
    _end_with_eos(directory)
    eager = transformers.pipeline("text-classification", model=directory, top_k=None)
    texts = [PROMPT, "w40 w41 w42 w7 w9"]
    return Case("text-classification", directory, texts, {"top_k": None}, [eager(t)[0] for t in texts])


def _vit_features(root: str) -> Case:
    directory, model, paths, pictures = write_vit(root, "ViTModel")
    eager = transformers.pipeline("image-feature-extraction", model=model, image_processor=directory)
    return Case("image-feature-extraction", directory, [{"image": p} for p in paths], {},
                [eager(p, return_tensors=True) for p in pictures])


def _moonshine(root: str) -> Case:
    directory, model, extractor = speech_dirs.write_moonshine(os.path.join(root, "moonshine"))
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    audio = speech_dirs.clips((0.9, 1.7))  # the second longer than the example's clips
    options = {"max_new_tokens": NEW_TOKENS}
    expected = []
    for clip in audio:
        ids = model.generate(**speech_dirs.encoded(extractor, [clip]), do_sample=False, num_beams=1, **options)
        expected.append({"text": tokenizer.decode(ids[0], skip_special_tokens=True)})
    return Case("automatic-speech-recognition", directory, [{"audio": clip.tolist()} for clip in audio], options,
                expected)


def _cohere_asr(root: str) -> Case:
    """transformers.js's pipeline starts the decoder from the prompt alone, and feeds the encoder no mask (its
    forward_params name none: the feature extractor's mask leaves out a clip's last frame, which transformers.js's
    encoder reads): the checkpoint's start token is the prompt's first, and transformers is given the same."""
    directory, model, extractor = speech_dirs.write_cohere_asr(os.path.join(root, "cohere_asr"))
    prompt = torch.tensor([speech_dirs.write_cohere_asr_processor(directory)])
    model.config.decoder_start_token_id = model.generation_config.decoder_start_token_id = int(prompt[0, 0])
    model.save_pretrained(directory)
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    audio = speech_dirs.clips((0.9, 1.7))
    options = {"max_new_tokens": NEW_TOKENS}
    expected = []
    for clip in audio:
        features = speech_dirs.encoded(extractor, [clip])["input_features"]
        ids = model.generate(input_features=features, decoder_input_ids=prompt, do_sample=False, num_beams=1,
                             **options)
        expected.append({"text": tokenizer.decode(ids[0], skip_special_tokens=True).strip()})
    return Case("automatic-speech-recognition", directory, [{"audio": clip.tolist()} for clip in audio], options,
                expected)


def _wav2vec2_ctc(root: str) -> Case:
    """A CTC model: transformers.js decodes the frames' ids with the tokenizer.json export-hf makes of vocab.json."""
    directory, _, _ = speech_dirs.write_wav2vec2_ctc(os.path.join(root, "wav2vec2-ctc"), norm="layer")
    eager = transformers.pipeline("automatic-speech-recognition", model=directory)
    audio = speech_dirs.clips((0.9, 1.7, 0.3))
    return Case("automatic-speech-recognition", directory, [{"audio": clip.tolist()} for clip in audio], {},
                [eager(clip) for clip in audio])


def _swin2sr(root: str) -> Case:
    """Super-resolution of images of other sizes than the example's, each padded to its own multiple of 4: sizes
    that are not one already (transformers.js leaves those as they are, where transformers pads a window more), and
    a plain border (transformers.js mirrors the edge pixels in another way than torchvision)."""
    from PIL import Image

    from onnxport.hf.image_to_image import ImageToImagePipeline
    from tests.test_export_hf_vision_tasks import write_swin2sr

    directory = os.path.join(root, "swin2sr")
    eager = ImageToImagePipeline(write_swin2sr(directory), transformers.AutoImageProcessor.from_pretrained(directory))
    paths, pictures = [], []
    for i, (h, w) in enumerate([(21, 30), (13, 9)]):
        pixels = np.random.default_rng(i).integers(0, 255, (h, w, 3), dtype=np.uint8)
        pixels[-4:], pixels[:, -4:] = 90, 90
        paths.append(os.path.join(root, f"small{i}.png"))
        pictures.append(Image.fromarray(pixels))
        pictures[-1].save(paths[-1])
    return Case("image-to-image", directory, [{"image": p} for p in paths], {}, [eager(p) for p in pictures])


def _vits(root: str, noise: bool = False) -> Case:
    directory, _ = write_vits(os.path.join(root, f"vits-{'noisy' if noise else 'still'}"), noise=noise)
    eager = transformers.pipeline("text-to-audio", model=directory)
    return Case("text-to-audio", directory, TEXTS, {}, [eager(text) for text in TEXTS])


def _pictures(root: str, sizes: tuple[tuple[int, int], ...]) -> tuple[list[str], list[object]]:
    from tests.vlm_dirs import images

    pictures = images(*sizes)
    paths = [os.path.join(root, f"picture{i}-{h}x{w}.png") for i, (h, w) in enumerate(sizes)]
    for picture, path in zip(pictures, paths, strict=True):
        picture.save(path)
    return paths, pictures


def _donut(root: str) -> Case:
    """Donut's document question answering: transformers.js's pipeline writes its DocVQA prompt as transformers'
    does, and reads the answer between its answer tokens."""
    from tests.document_dirs import ANSWERS, PICTURES, write_donut

    directory = os.path.join(root, "donut")
    model = write_donut(directory)
    eager = transformers.pipeline("document-question-answering", model=model, image_processor=directory,
                                  tokenizer=directory)
    paths, pictures = _pictures(root, PICTURES)
    asked = [(i, question) for i in range(len(paths)) for question in ANSWERS]
    return Case("document-question-answering", directory, [{"image": paths[i], "question": q} for i, q in asked], {},
                [eager(pictures[i], q) for i, q in asked])


def _captioner(root: str, name: str) -> Case:
    """A VisionEncoderDecoder's image-to-text on pictures of its image processor's size (transformers.js resizes
    others otherwise than PIL): TrOCR's (its decoder's cross-attention cached) and ViT-GPT2's (transformers.js caches
    its GPT-2 decoder's self-attention alone)."""
    from tests.document_dirs import write_trocr, write_vit_gpt2

    directory = os.path.join(root, name)
    model = {"trocr": write_trocr, "vit-gpt2": write_vit_gpt2}[name](directory)
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    processor = transformers.AutoImageProcessor.from_pretrained(directory)
    paths, pictures = _pictures(root, ((32, 32),) * 2)
    expected = []
    for picture in pictures:
        with torch.no_grad():
            ids = model.generate(**processor(picture, return_tensors="pt"), do_sample=False, max_new_tokens=NEW_TOKENS)
        expected.append([{"generated_text": tokenizer.decode(ids[0], skip_special_tokens=True).strip()}])
    return Case("image-to-text", directory, [{"image": p} for p in paths], {"max_new_tokens": NEW_TOKENS}, expected)


def _sam(root: str) -> Case:
    """SAM's masks for point prompts (one point; two on the object and one off it) on a picture of its processor's
    size: transformers.js's SamModel and processor, as its users call them (it has no mask-generation pipeline)."""
    from tests.document_dirs import write_sam

    directory = os.path.join(root, "sam")
    model = write_sam(directory)
    processor = transformers.SamProcessor(image_processor=transformers.AutoImageProcessor.from_pretrained(directory))
    paths, pictures = _pictures(root, ((64, 64),))
    prompts = [{"points": [[[[20.0, 30.0]]]]}, {"points": [[[[10.0, 12.0], [40.0, 50.0], [60.0, 5.0]]]],
                                                  "labels": [[[1, 1, 0]]]}]
    expected = []
    for prompt in prompts:
        inputs = processor(images=pictures[0], input_points=prompt["points"], input_labels=prompt.get("labels"),
                           return_tensors="pt")
        with torch.no_grad():
            out = model(pixel_values=inputs["pixel_values"], input_points=inputs["input_points"],
                        input_labels=inputs.get("input_labels"))
        sized = processor.post_process_masks(out.pred_masks, inputs["original_sizes"], inputs["reshaped_input_sizes"])
        expected.append({"iou_scores": out.iou_scores, "pred_masks": out.pred_masks, "masks": sized[0]})
    return Case("mask-generation", directory, [{"image": paths[0], **prompt} for prompt in prompts], {}, expected)


def _sam2(root: str) -> Case:
    """SAM 2's masks and object scores for the prompts of :func:`_sam` on a picture of its processor's size: its
    Sam2Model and Sam2Processor. transformers' Sam2ImageProcessor needs torchvision: the picture is rescaled and
    normalised here as it does, the masks sized as its ``post_process_masks`` sizes them (bilinear, then > 0)."""
    from tests.document_dirs import SAM2_PROCESSOR, write_sam2

    directory = os.path.join(root, "sam2")
    model = write_sam2(directory)
    paths, pictures = _pictures(root, ((64, 64),))
    mean, std = (torch.tensor(SAM2_PROCESSOR[k]).view(3, 1, 1) for k in ("image_mean", "image_std"))
    pixels = torch.from_numpy(np.asarray(pictures[0].convert("RGB"), dtype=np.float32)).permute(2, 0, 1)
    pixels = ((pixels * SAM2_PROCESSOR["rescale_factor"] - mean) / std)[None]
    prompts = [{"points": [[[[20.0, 30.0]]]]}, {"points": [[[[10.0, 12.0], [40.0, 50.0], [60.0, 5.0]]]],
                                                  "labels": [[[1, 1, 0]]]}]
    expected = []
    for prompt in prompts:
        labels = torch.tensor(prompt["labels"]) if "labels" in prompt else None
        with torch.no_grad():
            out = model(pixel_values=pixels, input_points=torch.tensor(prompt["points"]), input_labels=labels)
        sized = torch.nn.functional.interpolate(out.pred_masks[0], (64, 64), mode="bilinear", align_corners=False) > 0
        expected.append({"iou_scores": out.iou_scores, "pred_masks": out.pred_masks, "masks": sized,
                         "object_score_logits": out.object_score_logits})
    return Case("mask-generation", directory, [{"image": paths[0], **prompt} for prompt in prompts], {}, expected)


def _owlvit(root: str) -> Case:
    """OWL-ViT's boxes for three text queries (one of two words: the queries padded together, where transformers'
    pipeline runs one at a time) on pictures of its processor's size."""
    from tests.test_export_hf_vision_tasks import write_owlvit

    directory = os.path.join(root, "owlvit")
    eager = transformers.pipeline("zero-shot-object-detection", model=write_owlvit(directory, initializer_factor=1.0),
                                  tokenizer=directory, image_processor=directory)
    labels = ["cat", "a big dog", "car"]
    paths, pictures = _pictures(root, ((32, 32),) * 2)
    return Case("zero-shot-object-detection", directory, [{"image": p, "labels": labels} for p in paths],
                {"threshold": 0.0}, [eager(p, candidate_labels=labels, threshold=0.0) for p in pictures])


def _detr(root: str) -> Case:
    """DETR's boxes on pictures neither processor resizes (shortest edge 64, longest 96: transformers.js scales a
    picture up until its longest edge is 96, transformers does not), one of each orientation: dynamic height and
    width, no padding (transformers.js feeds a pixel mask of ones, 64x64 whatever the size). transformers.js drops
    a box whose likeliest class is DETR's no-object one, where transformers keeps it at a low threshold: the
    no-object class is made unlikely, as a trained DETR's is where it finds something."""
    from tests.test_export_hf_vision_tasks import write_detector

    directory = os.path.join(root, "detr")
    model, processor = write_detector(directory, "detr")
    with torch.no_grad():
        model.class_labels_classifier.bias[-1] -= 10.0
    model.save_pretrained(directory)
    processor.save_pretrained(directory)
    eager = transformers.pipeline("object-detection", model=model, image_processor=directory)
    paths, pictures = _pictures(root, ((64, 96), (96, 64)))
    return Case("object-detection", directory, [{"image": p} for p in paths], {"threshold": 0.0},
                [eager(p, threshold=0.0) for p in pictures])


def _detections(found: list[dict]) -> list[tuple]:
    return sorted((d["label"], tuple(d["box"][k] for k in ("xmin", "ymin", "xmax", "ymax")), d["score"]) for d in found)


MAKERS = {"m2m100": _m2m100, "gpt_bigcode": _gpt_bigcode, "gemma3": _gemma3, "bart-classifier": _bart_classifier,
          "vit-features": _vit_features, "moonshine": _moonshine, "cohere_asr": _cohere_asr, "vits": _vits,
          "vits-noisy": lambda root: _vits(root, noise=True), "wav2vec2-ctc": _wav2vec2_ctc, "swin2sr": _swin2sr,
          "donut": _donut, "trocr": lambda root: _captioner(root, "trocr"),
          "vit-gpt2": lambda root: _captioner(root, "vit-gpt2"), "sam": _sam, "sam2": _sam2, "owlvit": _owlvit,
          "detr": _detr}


# The cases of the tasks added last also run in fp16 and q8 (transformers.js's default on the wasm backend).
OTHER_DTYPES = ("fp16", "q8")
EVERY_DTYPE = ("donut", "trocr", "vit-gpt2", "sam", "owlvit", "detr")


@pytest.fixture(scope="module")
def js(tmp_path_factory):
    """name -> (Case, fp32 result, {dtype: result} of OTHER_DTYPES for the EVERY_DTYPE cases)."""
    root = str(tmp_path_factory.mktemp("transformers-js-models"))
    cases, jobs = {}, []
    for name, make in MAKERS.items():
        case = make(root)
        case.out = os.path.join(root, f"{name}-out")
        dtypes = ["fp32", *OTHER_DTYPES] if name in EVERY_DTYPE else ["fp32"]
        export_hf(case.directory, case.task, case.out, target="transformers.js", dtypes=dtypes)
        cases[name] = case
        jobs += [{"folder": case.out, "task": case.task, "dtype": dtype, "inputs": case.inputs,
                  "options": case.options} for dtype in dtypes]
    results = iter(run_js(jobs, root))
    return {name: (case, next(results), {dtype: next(results) for dtype in OTHER_DTYPES if name in EVERY_DTYPE})
            for name, case in cases.items()}


def test_the_speech_types_without_a_mask_take_none_in_the_installed_transformers_js() -> None:
    from onnxport.hf.transformers_js import UNMASKED_AUDIO
    from tests.test_transformers_js_vlm import _read

    for kind in UNMASKED_AUDIO:
        params = re.search(r"forward_params = \[([^\]]*)\]", _read(f"models/{kind}/modeling_{kind}.js")).group(1)
        assert "'decoder_input_ids'" in params, (kind, params)
        if "'attention_mask'" in params:  # fed none by its feature extractor (Whisper's gives the features alone)
            extractor = _read(f"models/{kind}/feature_extraction_{kind}.js")
            assert "attention_mask" not in extractor and "input_features:" in extractor, kind


@pytest.mark.parametrize("name", list(MAKERS))
def test_runs_as_transformers(js, name) -> None:
    case, result = js[name][:2]
    assert "error" not in result, result.get("error")
    for got, expected in zip(result["outputs"], case.expected, strict=True):
        if case.task == "text-classification":
            assert_close_scores(got, expected, 1e-4)
            continue
        if case.task == "image-feature-extraction":  # last_hidden_state, [1, patches + 1, hidden]
            got = np.array(got["data"], dtype=np.float32).reshape(got["dims"])
            np.testing.assert_allclose(got, expected.numpy(), atol=1e-4, rtol=1e-4)
            continue
        if case.task == "image-to-image":  # RawImage: height, width, channels
            image = np.array(got["data"], dtype=np.int64).reshape(got["height"], got["width"], got["channels"])
            assert np.abs(image - np.asarray(expected).astype(np.int64)).max() <= 1
            continue
        if case.task == "text-to-audio":
            audio = np.array(got["audio"], dtype=np.float32)
            assert got["sampling_rate"] == expected["sampling_rate"] and len(audio) % 16 == 0 and len(audio)
            if name == "vits":  # no noise: transformers' waveform; the noisy one draws its own
                np.testing.assert_allclose(audio, expected["audio"], atol=1e-4)
            continue
        if case.task in ("zero-shot-object-detection", "object-detection"):  # every box (threshold 0)
            got, expected = _detections(got), _detections(expected)
            assert [g[:2] for g in got] == [e[:2] for e in expected] and len(got) >= 5
            np.testing.assert_allclose([g[2] for g in got], [e[2] for e in expected], atol=1e-4)
            continue
        if case.task == "mask-generation":  # tensors as {dims, data}
            for key in [k for k in ("iou_scores", "pred_masks", "object_score_logits") if k in expected]:
                value = np.array(got[key]["data"], dtype=np.float32).reshape(got[key]["dims"])
                np.testing.assert_allclose(value, expected[key].numpy(), atol=1e-4, rtol=1e-4)
            sized = np.array(got["masks"]["data"]).reshape(got["masks"]["dims"]).astype(bool)
            assert sized.shape == tuple(expected["masks"].shape) and (sized != expected["masks"].numpy()).mean() < 1e-3
            continue
        if case.task == "document-question-answering":
            assert got == expected and expected[0]["answer"]
            continue
        if case.task == "automatic-speech-recognition":
            got, expected = [got], [expected]
        key = "text" if case.task == "automatic-speech-recognition" else "generated_text"
        text, wanted = got[0][key], expected[0][key]
        assert "".join(text.split()) == "".join(wanted.split()), (text, wanted)


@pytest.mark.parametrize("dtype", OTHER_DTYPES)
@pytest.mark.parametrize("name", EVERY_DTYPE)
def test_runs_in_the_other_dtypes(js, name, dtype) -> None:
    """Every answer given, of fp32's form; fp16's scores and masks near fp32's (float16 weights, float32 islands)."""
    case, fp32, others = js[name]
    result = others[dtype]
    assert "error" not in result, result.get("error")
    assert len(result["outputs"]) == len(fp32["outputs"])
    for got, reference in zip(result["outputs"], fp32["outputs"], strict=True):
        if case.task == "mask-generation":
            for key in ("iou_scores", "pred_masks", "masks"):
                assert got[key]["dims"] == reference[key]["dims"]
            if dtype == "fp16":
                np.testing.assert_allclose(got["pred_masks"]["data"], reference["pred_masks"]["data"], atol=2e-2)
        elif case.task in ("image-to-text", "document-question-answering"):
            key = "generated_text" if case.task == "image-to-text" else "answer"
            assert isinstance(got[0][key], str)
        else:  # detection: as many boxes (threshold 0; DETR's no-object class made unlikely), each labelled
            assert len(got) == len(reference)
            assert all(isinstance(d["label"], str) and set(d["box"]) == {"xmin", "ymin", "xmax", "ymax"} for d in got)
            if dtype == "fp16":
                np.testing.assert_allclose(sorted(d["score"] for d in got), sorted(d["score"] for d in reference),
                                           atol=1e-2)
