"""Extractive question answering as a transformers pipeline (transformers 5 has none): the span of the context
that the model's start and end logits score best.

``QuestionAnsweringPipeline(model=..., tokenizer=...)`` takes a transformers ``*ForQuestionAnswering`` model or
``onnxport.hf.pipeline``'s onnxruntime one, and is called as ``qa(question=..., context=...)``,
``qa({"question": ..., "context": ...})`` or with a list of such dicts (``batch_size=`` batches their windows).
Each answer is ``{"score", "start", "end", "answer"}``: characters ``start:end`` of the context, and the product
of the start and end probabilities (softmax over the context's tokens of the window the span is in).

A context longer than ``max_seq_len`` tokens (with the question) is read in windows that overlap by
``doc_stride`` tokens; the best ``top_k`` spans of at most ``max_answer_len`` tokens over all windows are
returned (a dict for ``top_k=1``, else a list), the same span found in two windows once, with its best score.
``handle_impossible_answer=True`` lets the first token (``[CLS]``) stand for "no answer": the empty answer
competes with the spans, with the lowest of its windows' scores.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from transformers.pipelines.base import ChunkPipeline

from onnxport.errors import InvalidInputError

__all__ = ["QuestionAnsweringPipeline"]

_PASSED = ("context_mask", "offsets", "context", "is_last")  # what a window carries past the model
_USAGE = ('call it as qa(question="...", context="..."), qa({"question": ..., "context": ...}) or with a list of '
          "such dicts")


class QuestionAnsweringPipeline(ChunkPipeline):
    """The span of the context answering the question (see the module's docstring)."""

    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False
    _load_video_processor = False
    _load_tokenizer = True

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        question, context = kwargs.pop("question", None), kwargs.pop("context", None)
        if args:
            if len(args) > 1 or question is not None or context is not None:
                raise InvalidInputError("the question and context are given twice (or as several arguments)",
                                        fix=_USAGE)
            inputs = args[0]
        elif question is None or context is None:
            raise InvalidInputError("a question and a context are needed", fix=_USAGE)
        elif isinstance(question, str):
            inputs = {"question": question, "context": context}
        else:
            questions = list(question)
            contexts = [context] * len(questions) if isinstance(context, str) else list(context)
            if len(contexts) != len(questions):
                raise InvalidInputError(f"{len(questions)} questions but {len(contexts)} contexts",
                                        fix="give one context per question, or one context for all")
            inputs = [{"question": q, "context": c} for q, c in zip(questions, contexts)]
        for item in inputs if isinstance(inputs, list) else [inputs]:
            if not (isinstance(item, dict) and isinstance(item.get("question"), str)
                    and isinstance(item.get("context"), str)):
                raise InvalidInputError(f"a question-answering input is {type(item).__name__} {str(item)[:60]!r}",
                                        fix=_USAGE + ", question and context being strings")
            if not item["context"].strip():
                raise InvalidInputError("a context is empty", fix="give the text the answer is to be found in")
        return super().__call__(inputs, **kwargs)

    def _sanitize_parameters(self, top_k: int | None = None, max_answer_len: int | None = None,
                             max_seq_len: int | None = None, doc_stride: int | None = None,
                             handle_impossible_answer: bool | None = None, **unknown: Any) -> tuple[dict, dict, dict]:
        if unknown:
            raise InvalidInputError(f"question-answering takes no {', '.join(sorted(unknown))}",
                                    fix="use top_k, max_answer_len, max_seq_len, doc_stride or "
                                    "handle_impossible_answer")
        for name, value in (("top_k", top_k), ("max_answer_len", max_answer_len), ("max_seq_len", max_seq_len),
                            ("doc_stride", doc_stride)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise InvalidInputError(f"{name} must be a positive int, not {value!r}", fix=f"pass e.g. {name}=1")
        pre = {k: v for k, v in (("max_seq_len", max_seq_len), ("doc_stride", doc_stride)) if v is not None}
        post = {k: v for k, v in (("top_k", top_k), ("max_answer_len", max_answer_len),
                                  ("handle_impossible_answer", handle_impossible_answer)) if v is not None}
        return pre, {}, post

    def preprocess(self, example: dict[str, str], max_seq_len: int | None = None, doc_stride: int | None = None) -> Any:
        tokenizer = self.tokenizer
        max_seq_len = max_seq_len or min(tokenizer.model_max_length, 384)
        doc_stride = doc_stride or min(max_seq_len // 2, 128)
        question, context = example["question"].lstrip(), example["context"]
        question_first = tokenizer.padding_side == "right"  # the context is the pair's end the padding is at
        pair = (question, context) if question_first else (context, question)
        try:
            encoded = tokenizer(*pair, truncation="only_second" if question_first else "only_first",
                                max_length=max_seq_len, stride=doc_stride, return_overflowing_tokens=True,
                                return_offsets_mapping=True, padding=False)
        except Exception as exc:  # noqa: BLE001 - the tokenizers backend raises plain Exceptions
            raise InvalidInputError(f"the question and context do not fit windows of {max_seq_len} tokens "
                                    f"overlapping by {doc_stride}: {exc}",
                                    fix="pass a larger max_seq_len, a smaller doc_stride, or a shorter "
                                    "question") from None
        part = 1 if question_first else 0
        names = [n for n in tokenizer.model_input_names if n in encoded]
        windows = len(encoded["input_ids"])
        for i in range(windows):
            mask = [index == part for index in encoded.sequence_ids(i)]
            yield {**{n: torch.tensor([encoded[n][i]]) for n in names}, "context_mask": torch.tensor([mask]),
                   "offsets": [tuple(o) for o in encoded["offset_mapping"][i]], "context": context,
                   "is_last": i == windows - 1}

    def _forward(self, inputs: dict[str, Any]) -> dict[str, Any]:
        passed = {k: inputs.pop(k) for k in _PASSED}
        outputs = self.model(**inputs)
        return {"start_logits": outputs["start_logits"], "end_logits": outputs["end_logits"], **passed}

    def postprocess(self, windows: list[dict[str, Any]], top_k: int = 1, max_answer_len: int = 15,
                    handle_impossible_answer: bool = False) -> Any:
        context = windows[0]["context"]
        best: dict[tuple[int, int], float] = {}
        no_answer = None
        for window in windows:
            offsets = window["offsets"]
            size = len(offsets)
            inside = np.asarray(window["context_mask"]).reshape(-1)[:size].astype(bool)
            allowed = inside.copy()
            allowed[0] |= handle_impossible_answer
            p_start = _softmax(_logits(window["start_logits"], size), allowed)
            p_end = _softmax(_logits(window["end_logits"], size), allowed)
            if handle_impossible_answer:
                score = float(p_start[0] * p_end[0])
                no_answer = score if no_answer is None else min(no_answer, score)
            scores = np.outer(p_start, p_end)
            first, last = np.indices(scores.shape)
            valid = inside[:, None] & inside[None, :] & (last >= first) & (last - first < max_answer_len)
            flat = np.where(valid, scores, -1.0).reshape(-1)
            spans: set[tuple[int, int]] = set()  # this window's best top_k spans are enough: kept with their best score
            for index in np.argsort(-flat, kind="stable"):
                if flat[index] < 0 or len(spans) == top_k:
                    break
                start, end = divmod(int(index), size)
                span = (offsets[start][0], offsets[end][1])
                spans.add(span)
                best[span] = max(best.get(span, -1.0), float(flat[index]))
        answers = [{"score": score, "start": start, "end": end, "answer": context[start:end]}
                   for (start, end), score in best.items()]
        if no_answer is not None:
            answers.append({"score": no_answer, "start": 0, "end": 0, "answer": ""})
        answers = sorted(answers, key=lambda a: -a["score"])[:top_k]
        return answers[0] if top_k == 1 else answers


def _logits(values: Any, size: int) -> np.ndarray:
    array = values.float().numpy() if isinstance(values, torch.Tensor) else np.asarray(values, dtype=np.float32)
    return array.reshape(-1)[:size].astype(np.float64)


def _softmax(logits: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """The softmax of ``logits`` over the ``allowed`` positions (0 elsewhere)."""
    shifted = np.where(allowed, logits - logits[allowed].max(), -np.inf)
    weights = np.exp(shifted)
    return weights / weights.sum()
