"""export-hf's ``image-to-text`` and ``document-question-answering``: an encoder-decoder whose encoder reads the
image (a VisionEncoderDecoder: TrOCR, Donut), exported as for image-text-to-text (``encoder_model``,
``decoder_model``, ``decoder_with_past_model``), and run by ``onnxport.hf.pipeline``: onnxport's image-to-text
pipeline (transformers 5 has none) and transformers' document-question-answering pipeline, each on onnxruntime
giving what the PyTorch model gives. Tiny random models (the Donut taught a few answers), nothing downloaded."""

from __future__ import annotations

import os

import pytest
import torch

from onnxport.errors import InvalidInputError
from onnxport.hf import export_hf, pick_task, pipeline
from onnxport.hf.image_to_text import EncodedGenerator

transformers = pytest.importorskip("transformers")

from tests.document_dirs import ANSWERS, PICTURES, prompt, write_donut  # noqa: E402
from tests.vlm_dirs import images, write_pix2struct, write_vision_encoder_decoder  # noqa: E402

pytestmark = pytest.mark.transformers


@pytest.fixture(scope="module")
def donut(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("donut") / "model")
    return directory, write_donut(directory)


def test_donut_answers_questions_as_transformers_document_question_answering_pipeline(donut, tmp_path):
    directory, model = donut
    out = str(tmp_path / "onnx")
    export_hf(directory, "document-question-answering", out)
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    processor = transformers.AutoImageProcessor.from_pretrained(directory)
    eager = transformers.pipeline("document-question-answering", model=model, tokenizer=tokenizer,
                                  image_processor=processor)
    exported = pipeline(out)
    assert isinstance(exported, transformers.DocumentQuestionAnsweringPipeline)
    pictures = images(*PICTURES, (64, 64))  # the third unseen in training
    for question in [*ANSWERS, "describe it"]:
        for picture in pictures:
            expected = eager(picture, question)
            assert exported(picture, question) == expected
            if question in ANSWERS:
                assert expected == [{"answer": ANSWERS[question]}]


def test_donut_decoder_cache_has_its_decoders_layers_not_its_configs_encoder_layers(donut, tmp_path):
    # MBart's DynamicCache is sized by its config's encoder_layers (12 by default); the decoder fills 2
    import onnx

    directory, _ = donut
    out = str(tmp_path / "onnx")
    export_hf(directory, "image-to-text", out)
    names = [i.name for i in onnx.load(os.path.join(out, "decoder_with_past_model.onnx")).graph.input]
    assert [n for n in names if n.endswith(".decoder.key")] == [f"past_key_values.{i}.decoder.key" for i in (0, 1)]


def test_vision_encoder_decoder_is_image_to_text_by_auto_and_captions_as_transformers_generate(tmp_path):
    directory, out = str(tmp_path / "ved"), str(tmp_path / "onnx")
    model = write_vision_encoder_decoder(directory)
    assert pick_task(directory).task == "image-to-text"
    export_hf(directory, "auto", out)
    captioner = pipeline(out)
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    processor = transformers.AutoImageProcessor.from_pretrained(directory)
    pictures = images((40, 48), (56, 40))
    got = captioner(pictures, max_new_tokens=6)
    for picture, answer in zip(pictures, got, strict=True):
        with torch.no_grad():
            ids = model.generate(**processor(picture, return_tensors="pt"), do_sample=False, max_new_tokens=6)
        assert ids.shape[1] > 3
        assert answer == [{"generated_text": tokenizer.decode(ids[0], skip_special_tokens=True)}]
    assert captioner(pictures[0], max_new_tokens=6) == got[0]
    with pytest.raises(InvalidInputError, match="greedily"):
        captioner(pictures[0], generate_kwargs={"do_sample": True})


def test_the_runner_stops_at_the_decoders_last_learned_position(donut, tmp_path):
    directory, _ = donut
    out = str(tmp_path / "onnx")
    export_hf(directory, "document-question-answering", out)
    generator = EncodedGenerator.of(out)
    pixels = transformers.AutoImageProcessor.from_pretrained(directory)(images((40, 60)), return_tensors="pt")
    ids = transformers.AutoTokenizer.from_pretrained(directory)(prompt("describe it"), add_special_tokens=False,
                                                                return_tensors="pt").input_ids
    tokens = generator.generate(pixels["pixel_values"], decoder_input_ids=ids, max_new_tokens=500, eos_token_id=-1)
    assert tokens.shape[1] == generator.config.decoder.max_position_embeddings


def test_the_encoded_tasks_refuse_other_models_before_loading_them(tmp_path):
    directory = str(tmp_path / "pix2struct")
    write_pix2struct(directory)
    with pytest.raises(InvalidInputError, match="Donut") as info:
        export_hf(directory, "document-question-answering", str(tmp_path / "a"))
    assert "image-to-text" in info.value.fix
    with pytest.raises(InvalidInputError, match="transformers.js does not run pix2struct models for image-to-text"):
        export_hf(directory, "image-to-text", str(tmp_path / "b"), target="transformers.js", dtypes=["fp32"])
    assert not os.path.exists(tmp_path / "a") and not os.path.exists(tmp_path / "b")


def test_an_image_text_to_text_model_is_refused_for_image_to_text(tmp_path):
    from tests.vlm_dirs import write_llava

    directory = str(tmp_path / "llava")
    write_llava(directory)
    with pytest.raises(InvalidInputError, match="reads the image's rows among its prompt's tokens") as info:
        export_hf(directory, "image-to-text", str(tmp_path / "out"))
    assert info.value.fix == "export it for image-text-to-text"


def test_a_decoder_transformers_js_cannot_cache_is_refused_for_it(tmp_path):
    directory = str(tmp_path / "ved")
    write_vision_encoder_decoder(directory)  # a BERT decoder
    with pytest.raises(InvalidInputError, match="cannot size the cache of a bert decoder"):
        export_hf(directory, "image-to-text", str(tmp_path / "out"), target="transformers.js", dtypes=["fp32"])


def test_the_encoded_tables_are_what_the_installed_transformers_js_reads() -> None:
    import re

    from onnxport.hf.multimodal.consumers import TRANSFORMERS_JS_DECODER_CACHES, TRANSFORMERS_JS_ENCODED_TYPES
    from tests.test_transformers_js_vlm import SOURCE, _read

    if not os.path.isdir(SOURCE):
        pytest.fail(f"transformers.js is not installed in {SOURCE}: run `make runtimes`")
    registry = _read("models/registry.js")
    for task, mapping in (("image-to-text", "MODEL_FOR_VISION_2_SEQ_MAPPING_NAMES"),
                          ("document-question-answering", "MODEL_FOR_DOCUMENT_QUESTION_ANSWERING_MAPPING_NAMES")):
        listed = re.search(mapping + r" = new Map\(\[(.*?)\]\);", registry, re.S).group(1)
        for model_type in TRANSFORMERS_JS_ENCODED_TYPES[task]:
            assert f"['{model_type}'," in listed, (task, model_type)
    configs = _read("configs.js")
    for model_type, cross in TRANSFORMERS_JS_DECODER_CACHES.items():
        start = configs.index(f"case '{model_type}':")  # its case falls through to the block that sizes it
        block = configs[start:configs.index("break;", start)]
        assert ("mapping['num_decoder_layers']" in block) == cross, model_type
        assert "mapping['num_layers']" in block or cross, model_type
