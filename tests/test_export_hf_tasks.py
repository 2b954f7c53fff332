"""export-hf's encoder tasks (fill-mask, token-classification, question-answering, sentence-similarity), the
folder run in onnxruntime by ``onnxport.hf.pipeline`` against transformers' own pipeline on the PyTorch model,
and ``--task auto``. Tiny random models and tokenizers built here; nothing downloaded."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

import onnxport
from onnxport.cli import main
from onnxport.hf import export_hf, pick_task, pipeline

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.transformers  # run on the second pinned transformers too (make test-transformers)

WORDS = ("the a an of in on at to is was and who what where when which city capital river country paris "
         "france berlin germany rome italy london alice bob carol lives works visited near big old new "
         "cat dog sat mat ran park north south ##s ##ing ##ed").split()
SPECIAL = {"bert": ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
           "roberta": ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]}
LABELS = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}
SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
             max_position_embeddings=64, initializer_range=0.3)  # wide weights: scores far apart, no ties
TEXTS = ["paris is the capital of [MASK] .", "alice [MASK] in berlin", "the old cat sat on the [MASK] near the big "
         "river and the dog ran to the park", "[MASK] works in rome"]
QA = [{"question": "where does alice live ?", "context": "alice lives in paris , the capital of france ."},
      {"question": "who visited rome ?", "context": "bob visited rome and carol visited london near the river ."},
      {"question": "what is big ?", "context": "the city is big"}]


def write_tokenizer(directory: str, family: str) -> object:
    """A WordPiece tokenizer (BERT, DistilBERT) over WORDS, or a byte-level BPE one (RoBERTa) trained on them,
    saved with save_pretrained as a hub model's; returns it."""
    os.makedirs(directory, exist_ok=True)
    scratch = os.path.join(directory, "scratch")
    os.makedirs(scratch)
    if family == "roberta":
        from tokenizers import ByteLevelBPETokenizer

        bpe = ByteLevelBPETokenizer()
        bpe.train_from_iterator([" ".join(WORDS)] * 4, vocab_size=300, min_frequency=1,
                                special_tokens=SPECIAL["roberta"])
        bpe.save_model(scratch)
        tokenizer = transformers.RobertaTokenizer(os.path.join(scratch, "vocab.json"),
                                                  os.path.join(scratch, "merges.txt"), model_max_length=64)
    else:
        with open(os.path.join(scratch, "vocab.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join([*SPECIAL["bert"], *WORDS, ","]) + "\n")
        kind = transformers.DistilBertTokenizer if family == "distilbert" else transformers.BertTokenizer
        tokenizer = kind(os.path.join(scratch, "vocab.txt"), model_max_length=64)
    for name in os.listdir(scratch):
        os.remove(os.path.join(scratch, name))
    os.rmdir(scratch)
    tokenizer.save_pretrained(directory)
    return tokenizer


def tiny_model(family: str, head: str, vocab: int, **extra: object) -> torch.nn.Module:
    """A random ``{Bert,DistilBert,Roberta}{head}`` of SIZES."""
    torch.manual_seed(0)
    if family == "distilbert":
        config = transformers.DistilBertConfig(vocab_size=vocab, dim=32, n_layers=2, n_heads=4, hidden_dim=64,
                                               max_position_embeddings=64, initializer_range=0.3, **extra)
    elif family == "roberta":
        config = transformers.RobertaConfig(vocab_size=vocab, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                                            **{"type_vocab_size": 1, **SIZES, "max_position_embeddings": 66, **extra})
    else:
        config = transformers.BertConfig(vocab_size=vocab, **SIZES, **extra)
    prefix = {"bert": "Bert", "distilbert": "DistilBert", "roberta": "Roberta"}[family]
    return getattr(transformers, prefix + head)(config).eval()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """(family, head) -> (directory, model, tokenizer), each saved once for the module."""
    made = {}

    def make(family: str, head: str, **extra: object):
        if (family, head) not in made:
            directory = str(tmp_path_factory.mktemp(f"{family}-{head}"))
            tokenizer = write_tokenizer(directory, family)
            model = tiny_model(family, head, len(tokenizer), **extra)
            model.save_pretrained(directory)
            made[family, head] = directory, model, tokenizer
        return made[family, head]

    return make


def assert_same(got: object, expected: object, path: str = "") -> None:
    """Equal structures and values; floats within 1e-4."""
    if isinstance(expected, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(got) == len(expected), f"{path}: {got!r} != {expected!r}"
        for i, (g, e) in enumerate(zip(got, expected)):
            assert_same(g, e, f"{path}[{i}]")
    elif isinstance(expected, dict):
        assert isinstance(got, dict) and set(got) == set(expected), f"{path}: {got!r} != {expected!r}"
        for key in expected:
            assert_same(got[key], expected[key], f"{path}.{key}")
    elif isinstance(expected, (float, np.floating)):
        assert got == pytest.approx(float(expected), abs=1e-4), f"{path}: {got!r} != {expected!r}"
    else:
        assert got == expected, f"{path}: {got!r} != {expected!r}"


@pytest.mark.parametrize("family", ["bert", "distilbert", "roberta"])
def test_fill_mask_equals_transformers_pipeline(model_dir, family, tmp_path) -> None:
    directory, model, tokenizer = model_dir(family, "ForMaskedLM")
    prog = export_hf(directory, "fill-mask", tmp_path)
    names = [i.name for i in prog.model.graph.inputs]
    assert names == ["input_ids", "attention_mask", *(["token_type_ids"] if family == "bert" else [])]
    assert {"model.onnx", "config.json", "tokenizer.json", "tokenizer_config.json"} <= set(os.listdir(tmp_path))
    texts = [t.replace("[MASK]", tokenizer.mask_token) for t in TEXTS]
    onnx = pipeline(tmp_path)
    eager = transformers.pipeline("fill-mask", model=model, tokenizer=tokenizer)
    assert_same(onnx(texts[0]), eager(texts[0]))
    batched = onnx(texts, batch_size=4, top_k=3)  # one padded batch of four lengths
    assert_same(batched, eager(texts, batch_size=4, top_k=3))
    assert_same(batched, eager(texts, top_k=3))  # each text alone: the padding changes nothing
    assert len({r[0]["token"] for r in batched}) > 1


def test_token_types_follow_the_directory_tokenizer(tmp_path) -> None:
    """A RoBERTa checkpoint whose config keeps two token types (as RobertaConfig's default does) while its
    tokenizer gives none: the model is exported without token_type_ids, so the tokenizer's encoding feeds it,
    and transformers' pipeline runs the same."""
    directory = str(tmp_path / "roberta")
    tokenizer = write_tokenizer(directory, "roberta")
    assert "token_type_ids" not in tokenizer.model_input_names
    model = tiny_model("roberta", "ForTokenClassification", len(tokenizer), type_vocab_size=2, num_labels=5)
    model.save_pretrained(directory)
    prog = export_hf(directory, "token-classification", tmp_path / "out")
    assert [i.name for i in prog.model.graph.inputs] == ["input_ids", "attention_mask"]
    texts = ["alice lives in paris", "bob visited rome and carol visited london near the river"]
    eager = transformers.pipeline("token-classification", model=model, tokenizer=tokenizer)
    assert_same(pipeline(tmp_path / "out")(texts), eager(texts))


@pytest.mark.parametrize(("family", "aggregation"), [("bert", "none"), ("bert", "simple"), ("distilbert", "first")])
def test_token_classification_equals_transformers_pipeline(model_dir, family, aggregation, tmp_path) -> None:
    directory, model, tokenizer = model_dir(family, "ForTokenClassification", num_labels=5, id2label=LABELS,
                                            label2id={v: k for k, v in LABELS.items()})
    export_hf(directory, "token-classification", tmp_path)
    texts = ["alice lives in paris", "bob visited rome and carol works near the river in london", "cats ran"]
    onnx = pipeline(tmp_path, aggregation_strategy=aggregation)
    eager = transformers.pipeline("token-classification", model=model, tokenizer=tokenizer,
                                  aggregation_strategy=aggregation)
    got = onnx(texts, batch_size=3)
    assert_same(got, eager(texts, batch_size=3))
    assert_same(got, [eager(t) for t in texts])
    assert any(got) and len({e["entity" if aggregation == "none" else "entity_group"] for r in got for e in r}) > 1


def brute_force_answer(model: torch.nn.Module, tokenizer, question: str, context: str) -> tuple[str, float]:
    """The best span of at most 15 context tokens by p(start) * p(end), found by trying every one."""
    encoded = tokenizer(question, context, return_offsets_mapping=True, return_tensors="pt")
    offsets = encoded.pop("offset_mapping")[0].tolist()
    with torch.no_grad():
        out = model(**encoded)
    inside = [i for i, s in enumerate(encoded.sequence_ids(0)) if s == 1]
    p_start = torch.softmax(out.start_logits[0, inside].double(), 0)
    p_end = torch.softmax(out.end_logits[0, inside].double(), 0)
    best = max((float(p_start[a] * p_end[b]), a, b)
               for a in range(len(inside)) for b in range(a, min(a + 15, len(inside))))
    score, a, b = best
    return context[offsets[inside[a]][0]:offsets[inside[b]][1]], score


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_question_answering_runs_in_onnxruntime_as_in_pytorch(model_dir, family, tmp_path) -> None:
    from onnxport.hf.question_answering import QuestionAnsweringPipeline

    directory, model, tokenizer = model_dir(family, "ForQuestionAnswering")
    prog = export_hf(directory, "question-answering", tmp_path)
    assert [o.name for o in prog.model.graph.outputs] == ["start_logits", "end_logits"]
    onnx = pipeline(tmp_path)
    eager = QuestionAnsweringPipeline(model=model, tokenizer=tokenizer)
    got = onnx(question=QA[0]["question"], context=QA[0]["context"])
    answer, score = brute_force_answer(model, tokenizer, QA[0]["question"], QA[0]["context"])
    assert (got["answer"], got["score"]) == (answer, pytest.approx(score, abs=1e-4))
    assert QA[0]["context"][got["start"]:got["end"]] == got["answer"]
    batched = onnx(QA, batch_size=3, top_k=3)
    assert_same(batched, eager(QA, top_k=3))
    assert [b[0]["answer"] for b in batched] == [brute_force_answer(model, tokenizer, **q)[0] for q in QA]
    # A context longer than a window: read in overlapping windows, the same best span over them all.
    long = {"question": "who lives near the river ?", "context": " ".join([QA[1]["context"], QA[0]["context"]] * 3)}
    windows = dict(max_seq_len=32, doc_stride=8, top_k=4, handle_impossible_answer=True)
    split = tokenizer(long["question"], long["context"], truncation="only_second", max_length=32, stride=8,
                      return_overflowing_tokens=True)
    assert len(split["input_ids"]) >= 3
    assert_same(onnx(long, **windows), eager(long, **windows))
    assert_same(onnx([long, QA[2]], batch_size=2, **windows), eager([long, QA[2]], **windows))


@pytest.mark.parametrize(("family", "head", "task"), [("bert", "ForQuestionAnswering", "question-answering"),
                                                     ("roberta", "ForMaskedLM", "fill-mask")])
def test_loaded_models_are_verified_with_padding_and_segments(model_dir, family, head, task, tmp_path) -> None:
    directory, *_ = model_dir(family, head)
    prog = export_hf(directory, task, tmp_path, streaming=False)
    assert prog.report.verification.ok


def test_question_answering_bad_calls(model_dir, tmp_path) -> None:
    directory, *_ = model_dir("bert", "ForQuestionAnswering")
    export_hf(directory, "question-answering", tmp_path)
    qa = pipeline(tmp_path)
    for call, match in [(lambda: qa("where ?"), "question-answering input is str"),
                        (lambda: qa(question="where ?"), "a question and a context are needed"),
                        (lambda: qa(question=["a", "b"], context=["c"]), "2 questions but 1 contexts"),
                        (lambda: qa(QA[0], top_k=0), "top_k must be a positive int"),
                        (lambda: qa(QA[0], beams=2), "takes no beams")]:
        with pytest.raises(onnxport.InvalidInputError, match=match):
            call()


def write_sentence_transformer(directory: str, family: str, poolings: tuple[str, ...], normalize: bool,
                               subfolder: str = "") -> torch.nn.Module:
    """A sentence-transformers directory as its save() writes it: the transformer (in ``subfolder``), a
    Pooling module and an optional Normalize, listed in modules.json; returns the transformer."""
    where = os.path.join(directory, subfolder)
    tokenizer = write_tokenizer(where, family)
    model = tiny_model(family, "Model", len(tokenizer))
    model.save_pretrained(where)
    with open(os.path.join(where, "sentence_bert_config.json"), "w") as f:
        json.dump({"max_seq_length": 12, "do_lower_case": True}, f)
    modules = [{"idx": 0, "name": "0", "path": subfolder, "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
        os.makedirs(os.path.join(directory, "2_Normalize"))
    with open(os.path.join(directory, "modules.json"), "w") as f:
        json.dump(modules, f)
    os.makedirs(os.path.join(directory, "1_Pooling"))
    keys = {"cls": "pooling_mode_cls_token", "max": "pooling_mode_max_tokens", "mean": "pooling_mode_mean_tokens",
            "mean_sqrt_len": "pooling_mode_mean_sqrt_len_tokens"}
    with open(os.path.join(directory, "1_Pooling", "config.json"), "w") as f:
        json.dump({"word_embedding_dimension": 32, **{key: name in poolings for name, key in keys.items()},
                   "pooling_mode_weightedmean_tokens": False, "pooling_mode_lasttoken": False,
                   "include_prompt": True}, f)
    return model


def reference_embeddings(model: torch.nn.Module, tokenizer, sentences: list[str], poolings: tuple[str, ...],
                         normalize: bool) -> np.ndarray:
    """Each sentence alone through the PyTorch model, then pooled as sentence-transformers pools (no padding)."""
    rows = []
    for sentence in sentences:
        encoded = tokenizer(sentence.lower(), truncation=True, max_length=12, return_tensors="pt")
        with torch.no_grad():
            states = model(**encoded).last_hidden_state[0].double()
        parts = {"cls": states[0], "max": states.max(0).values, "mean": states.mean(0),
                 "mean_sqrt_len": states.sum(0) / len(states) ** 0.5}
        row = torch.cat([parts[p] for p in ("cls", "max", "mean", "mean_sqrt_len") if p in poolings])
        rows.append((row / row.norm() if normalize else row).numpy())
    return np.stack(rows)


@pytest.mark.parametrize(("family", "poolings", "normalize", "subfolder"), [
    ("bert", ("mean",), True, ""),
    ("distilbert", ("cls", "max", "mean_sqrt_len"), False, "0_Transformer"),
    ("roberta", ("max",), True, ""),
])
def test_sentence_similarity_pools_in_the_graph(family, poolings, normalize, subfolder, tmp_path) -> None:
    directory = str(tmp_path / "st")
    model = write_sentence_transformer(directory, family, poolings, normalize, subfolder)
    assert pick_task(directory).task == "sentence-similarity"
    out = tmp_path / "out"
    prog = export_hf(directory, "auto", out)
    assert [o.name for o in prog.model.graph.outputs] == ["token_embeddings", "sentence_embedding"]
    assert "sentence_bert_config.json" in os.listdir(out)
    sim = pipeline(out)
    tokenizer = transformers.AutoTokenizer.from_pretrained(os.path.join(directory, subfolder))
    sentences = ["Alice lives in Paris", "the cat", "  bob visited rome and carol visited london near the river "
                 "in the north of the big old country", "Paris"]
    expected = reference_embeddings(model, tokenizer, sentences, poolings, normalize)
    got = sim.encode(sentences, batch_size=4)  # one padded batch; the long one cut at max_seq_length
    assert got.shape == (4, 32 * len(poolings))
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(sim.encode(sentences[1]), expected[1], atol=1e-4, rtol=1e-4)
    unit = expected / np.linalg.norm(expected, axis=1, keepdims=True)
    scores = sim({"source_sentence": sentences[0], "sentences": sentences[1:]})
    np.testing.assert_allclose(scores, unit[1:] @ unit[0], atol=1e-4)


def test_sentence_similarity_equals_sentence_transformers(tmp_path) -> None:
    """Where sentence-transformers is installed (not in CI), its own encode() is the reference."""
    sentence_transformers = pytest.importorskip("sentence_transformers")
    directory = str(tmp_path / "st")
    write_sentence_transformer(directory, "roberta", ("mean", "max"), True)
    export_hf(directory, "sentence-similarity", tmp_path / "out")
    sentences = ["Alice lives in Paris", " the cat ", "bob visited rome and carol visited london near the river"]
    expected = sentence_transformers.SentenceTransformer(directory, device="cpu").encode(sentences, batch_size=3)
    np.testing.assert_allclose(pipeline(tmp_path / "out").encode(sentences), expected, atol=1e-4, rtol=1e-4)


def test_sentence_similarity_verified_when_loaded(tmp_path) -> None:
    directory = str(tmp_path / "st")
    write_sentence_transformer(directory, "bert", ("mean",), True)
    prog = export_hf(directory, "sentence-similarity", tmp_path / "out", streaming=False)
    assert prog.report.verification.ok


@pytest.mark.parametrize(("modules", "pooling", "match"), [
    (["Transformer", "Pooling", "Dense", "Normalize"], {"pooling_mode_mean_tokens": True},
     r"does not compute \(Dense\)"),
    (["Transformer", "Pooling"], {"pooling_mode_lasttoken": True}, "last token pooling"),
    (["Transformer", "Pooling"], {"pooling_mode_mean_tokens": False}, "turns no pooling on"),
])
def test_sentence_similarity_refuses_what_it_does_not_compute(model_dir, modules, pooling, match, tmp_path) -> None:
    directory = tmp_path / "st"
    directory.mkdir()
    source, *_ = model_dir("bert", "Model")
    for name in os.listdir(source):
        os.link(os.path.join(source, name), directory / name)
    (directory / "modules.json").write_text(json.dumps(
        [{"idx": i, "name": str(i), "path": "" if i == 0 else f"{i}_{kind}",
          "type": f"sentence_transformers.models.{kind}"}
         for i, kind in enumerate(modules)]))
    (directory / "1_Pooling").mkdir()
    (directory / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    with pytest.raises(onnxport.InvalidInputError, match=match):
        export_hf(directory, "auto", tmp_path / "out")
    assert not os.path.exists(tmp_path / "out")
    with pytest.raises(onnxport.InvalidInputError, match="has no modules.json"):
        export_hf(source, "sentence-similarity", tmp_path / "out")


def test_existing_tasks_run_as_transformers_pipelines(model_dir, tmp_path) -> None:
    directory, model, tokenizer = model_dir("bert", "ForSequenceClassification", num_labels=3)
    export_hf(directory, "text-classification", tmp_path / "cls")
    texts = ["alice lives in paris", "the cat sat on the mat near the river", "rome"]
    onnx = pipeline(tmp_path / "cls", top_k=None)
    eager = transformers.pipeline("text-classification", model=model, tokenizer=tokenizer, top_k=None)
    assert_same(onnx(texts, batch_size=3), eager(texts, batch_size=3))
    with pytest.raises(onnxport.InvalidInputError, match="marks a second text"):
        onnx({"text": "who lives in paris", "text_pair": "alice lives in paris"})

    directory, model, tokenizer = model_dir("bert", "Model")
    export_hf(directory, "feature-extraction", tmp_path / "features")
    features = pipeline(tmp_path / "features")(texts[1])
    expected = transformers.pipeline("feature-extraction", model=model, tokenizer=tokenizer)(texts[1])
    np.testing.assert_allclose(np.array(features), np.array(expected), atol=1e-4, rtol=1e-4)


def test_a_model_that_takes_no_attention_mask_is_exported_without_one(tmp_path) -> None:
    """FNet mixes tokens by a Fourier transform and takes no attention mask (its tokenizer gives none): the
    exported model takes none either, and computes eager's logits."""
    ort = pytest.importorskip("onnxruntime")
    torch.manual_seed(0)
    config = transformers.FNetConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, intermediate_size=64,
                                     max_position_embeddings=64, num_labels=3)
    model = transformers.FNetForSequenceClassification(config).eval()
    model.save_pretrained(tmp_path / "fnet")
    prog = export_hf(tmp_path / "fnet", "text-classification", tmp_path / "out")
    assert prog.report.verification.ok
    assert [v.name for v in prog.model.graph.inputs] == ["input_ids"]
    ids = torch.randint(3, 99, (1, 11))
    session = ort.InferenceSession(str(tmp_path / "out" / "model.onnx"), providers=["CPUExecutionProvider"])
    with torch.no_grad():
        expected = model(input_ids=ids).logits.numpy()
    np.testing.assert_allclose(session.run(None, {"input_ids": ids.numpy()})[0], expected, atol=1e-5, rtol=1e-5)


def test_image_classification_runs_as_transformers_pipeline(tmp_path) -> None:
    from PIL import Image

    directory = str(tmp_path / "vit")
    torch.manual_seed(0)
    config = transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                    image_size=32, patch_size=8, num_labels=4, initializer_range=0.3)
    model = transformers.ViTForImageClassification(config).eval()
    model.save_pretrained(directory)
    transformers.ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(directory)
    export_hf(directory, "auto", tmp_path / "out")
    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8))
              for h, w in ((40, 50), (32, 32), (64, 20))]
    eager = transformers.pipeline("image-classification", model=model, image_processor=directory)
    assert_same(pipeline(tmp_path / "out")(images, batch_size=3, top_k=4), eager(images, top_k=4))


def test_pipeline_refuses_what_it_cannot_run(model_dir, tmp_path) -> None:
    import shutil

    import onnx

    with pytest.raises(onnxport.InvalidInputError, match="has no model.onnx"):
        pipeline(tmp_path)
    directory, *_ = model_dir("bert", "ForMaskedLM")
    export_hf(directory, "fill-mask", tmp_path / "mlm")
    props = onnx.load(str(tmp_path / "mlm" / "model.onnx"), load_external_data=False).metadata_props
    assert {p.key: p.value for p in props}["onnxport.hf.task"] == "fill-mask"
    for task, match in [("text-generation", "onnxruntime-genai"), ("text2text-generation", "generate_seq2seq"),
                        (None, "does not name its task")]:
        shutil.copytree(tmp_path / "mlm", tmp_path / str(task))
        model = onnx.load(str(tmp_path / str(task) / "model.onnx"), load_external_data=False)
        props = {p.key: p.value for p in model.metadata_props if p.key != "onnxport.hf.task"}
        onnx.helper.set_model_props(model, {**props, **({"onnxport.hf.task": task} if task else {})})
        onnx.save(model, str(tmp_path / str(task) / "model.onnx"))
        with pytest.raises(onnxport.InvalidInputError, match=match):
            pipeline(tmp_path / str(task))
    assert pipeline(tmp_path / "None", "fill-mask").task == "fill-mask"  # an older export: the task given
    with pytest.raises(onnxport.InvalidInputError, match="exported for fill-mask, not token-classification"):
        pipeline(tmp_path / "mlm", "token-classification")
    assert pipeline(tmp_path / "mlm" / "model.onnx", "fill-mask").task == "fill-mask"
    os.remove(tmp_path / "mlm" / "config.json")
    with pytest.raises(onnxport.InvalidInputError, match="has no config.json"):
        pipeline(tmp_path / "mlm")


def _config_dir(parent, name: str, config: object) -> str:
    directory = str(parent / name)
    config.save_pretrained(directory)
    return directory


def test_auto_picks_the_task_of_each_family(tmp_path) -> None:
    bert = dict(vocab_size=99, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64)
    expected = {
        "BertForMaskedLM": "fill-mask", "RobertaForMaskedLM": "fill-mask", "DistilBertForMaskedLM": "fill-mask",
        "BertForTokenClassification": "token-classification", "DistilBertForQuestionAnswering": "question-answering",
        "BertForQuestionAnswering": "question-answering", "RobertaForSequenceClassification": "text-classification",
        "BertModel": "feature-extraction", "LlamaForCausalLM": "text-generation", "GPT2LMHeadModel": "text-generation",
        "T5ForConditionalGeneration": "text2text-generation", "BartForConditionalGeneration": "text2text-generation",
        "WhisperForConditionalGeneration": "automatic-speech-recognition",
        "ViTForImageClassification": "image-classification", "ViTModel": "image-feature-extraction",
    }
    kinds = {"Bert": transformers.BertConfig(**bert), "Roberta": transformers.RobertaConfig(**bert),
             "DistilBert": transformers.DistilBertConfig(vocab_size=99), "Llama": transformers.LlamaConfig(),
             "GPT2": transformers.GPT2Config(), "T5": transformers.T5Config(), "Bart": transformers.BartConfig(),
             "Whisper": transformers.WhisperConfig(), "ViT": transformers.ViTConfig()}
    for architecture, task in expected.items():
        config = kinds[next(k for k in sorted(kinds, key=len, reverse=True) if architecture.startswith(k))]
        config.architectures = [architecture]
        picked = pick_task(_config_dir(tmp_path, architecture, config))
        assert (picked.task, architecture in picked.why) == (task, True), architecture


@pytest.mark.parametrize(("architectures", "match"), [
    (["BertForPreTraining"], r"architectures \(BertForPreTraining\) name no head"),
    (None, "names no architectures"),
    (["BertForMaskedLM", "BertForTokenClassification"], "architectures disagree"),
])
def test_auto_refuses_what_it_cannot_tell(architectures, match, tmp_path, capsys) -> None:
    config = transformers.ViTConfig() if architectures == ["ViTModel"] else transformers.BertConfig()
    config.architectures = architectures
    directory = _config_dir(tmp_path, "model", config)
    with pytest.raises(onnxport.InvalidInputError, match=match) as info:
        export_hf(directory, "auto", tmp_path / "out")
    assert "--task" in info.value.fix
    assert main(["export-hf", directory, "--task", "auto", "-o", str(tmp_path / "out")]) == 1
    assert "cannot tell the task" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "out")


def test_cli_auto_prints_the_task_and_writes_a_runnable_folder(model_dir, tmp_path, capsys) -> None:
    directory, model, tokenizer = model_dir("bert", "ForTokenClassification", num_labels=5, id2label=LABELS,
                                            label2id={v: k for k, v in LABELS.items()})
    out = tmp_path / "out"
    assert main(["export-hf", directory, "--task", "auto", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "task auto: token-classification (config.json's architectures: BertForTokenClassification)" in printed
    assert f"saved {out / 'config.json'}" in printed
    text = "carol lives near rome"
    assert_same(pipeline(out)(text), transformers.pipeline("ner", model=model, tokenizer=tokenizer)(text))
