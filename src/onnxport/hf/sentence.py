"""sentence-transformers directories (``export_hf(..., "sentence-similarity")``): the embedding in the ONNX graph.

Such a directory lists its modules in ``modules.json``: a ``Transformer`` (a transformers model in the folder
the entry names, the directory itself for most), then a ``Pooling`` (its ``config.json`` names the poolings:
the first token's state, the maximum or the mean over the tokens the mask keeps, the mean times the square
root of their number, concatenated in that order when several are on) and an optional ``Normalize`` (L2).
``SentenceEmbedding`` computes all of it, so the model's outputs are ``token_embeddings`` (the transformer's
last hidden state) and ``sentence_embedding``, as sentence-transformers' ``encode`` computes them. Other
modules (``Dense``, ``LayerNorm``, ...) and poolings (weighted mean, last token) are refused, naming them.
"""

from __future__ import annotations

import json
import os
from typing import Any, NamedTuple

import torch

from onnxport.errors import InvalidInputError
from onnxport.hf.tasks import MODULES_FILE

__all__ = ["SETTINGS_FILE", "SentenceEmbedding", "SentenceModel", "read_sentence_model"]

SETTINGS_FILE = "sentence_bert_config.json"  # the Transformer module's max_seq_length and do_lower_case
# Pooling config keys -> the pooling, in the order sentence-transformers concatenates them.
POOLINGS = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max", "pooling_mode_mean_tokens": "mean",
            "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len"}
UNSUPPORTED_POOLINGS = {"pooling_mode_weightedmean_tokens": "weighted mean", "pooling_mode_lasttoken": "last token"}
_FIX = ("export the transformer alone (--task feature-extraction, from the folder that holds its config.json) and "
        "apply the other modules to its last_hidden_state yourself")


class SentenceModel(NamedTuple):
    """What a sentence-transformers directory holds: where its transformer is, its poolings, whether the
    embedding is normalised."""

    transformer: str
    poolings: tuple[str, ...]
    normalize: bool


def read_sentence_model(directory: str) -> SentenceModel:
    """The modules of the sentence-transformers directory ``directory``; ``InvalidInputError`` for a
    ``modules.json`` that is missing, unreadable or lists modules onnxport does not compute."""
    path = os.path.join(directory, MODULES_FILE)
    if not os.path.isfile(path):
        raise InvalidInputError(f"{directory} is not a sentence-transformers directory: it has no {MODULES_FILE}",
                                fix="export a transformers model for feature-extraction instead, or point at the "
                                "folder sentence-transformers' save() wrote")
    modules = _read_json(path)
    if not isinstance(modules, list) or not all(isinstance(m, dict) and isinstance(m.get("type"), str)
                                                for m in modules):
        raise InvalidInputError(f"{path} is not a list of modules, each with its type",
                                fix="restore the file as sentence-transformers wrote it")
    kinds = [m["type"].rpartition(".")[2] for m in modules]
    where = [os.path.join(directory, str(m.get("path") or "")) for m in modules]
    if kinds[:2] != ["Transformer", "Pooling"] or kinds[2:] not in ([], ["Normalize"]):
        others = sorted({k for k in kinds if k not in ("Transformer", "Pooling", "Normalize")})
        what = f"modules onnxport does not compute ({', '.join(others)})" if others else \
            f"modules in an order onnxport does not compute ({', '.join(kinds)})"
        raise InvalidInputError(f"{path} lists {what}: it computes Transformer, Pooling and an optional Normalize",
                                fix=_FIX)
    if not os.path.isfile(os.path.join(where[0], "config.json")):
        raise InvalidInputError(f"the Transformer module of {directory} has no config.json in {where[0]}",
                                fix="restore the model's files as sentence-transformers saved them")
    pooling = _read_json(os.path.join(where[1], "config.json"))
    if not isinstance(pooling, dict):
        raise InvalidInputError(f"{os.path.join(where[1], 'config.json')} is not a JSON object of pooling settings",
                                fix="restore the file as sentence-transformers wrote it")
    unsupported = [name for key, name in UNSUPPORTED_POOLINGS.items() if pooling.get(key)]
    if unsupported:
        raise InvalidInputError(f"the Pooling module of {directory} uses {' and '.join(unsupported)} pooling, which "
                                "onnxport does not compute (it computes cls, max, mean and mean_sqrt_len)", fix=_FIX)
    poolings = tuple(name for key, name in POOLINGS.items() if pooling.get(key))
    if not poolings:
        raise InvalidInputError(f"the Pooling module of {directory} turns no pooling on",
                                fix="set one of " + ", ".join(POOLINGS) + " to true in its config.json")
    return SentenceModel(where[0], poolings, kinds[2:] == ["Normalize"])


def _read_json(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as exc:
        raise InvalidInputError(f"cannot read {path}: {exc}",
                                fix="restore the file as sentence-transformers wrote it") from None


class SentenceEmbedding(torch.nn.Module):
    """A transformers model, then the poolings and normalisation of a sentence-transformers directory:
    ``{"token_embeddings": last hidden state, "sentence_embedding": pooled (and normalised)}``."""

    def __init__(self, transformer: torch.nn.Module, poolings: tuple[str, ...], normalize: bool) -> None:
        super().__init__()
        self.transformer = transformer
        self.poolings = poolings
        self.normalize = normalize
        self.config = transformer.config

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        extra = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
        tokens = self.transformer(input_ids=input_ids, attention_mask=attention_mask, **extra, return_dict=True)[0]
        mask = attention_mask.unsqueeze(-1).to(tokens.dtype)
        pooled = []
        for pooling in self.poolings:
            if pooling == "cls":
                pooled.append(tokens[:, 0])
            elif pooling == "max":  # the padding's states never win
                pooled.append(torch.where(mask > 0, tokens, torch.full_like(tokens, -1e9)).amax(dim=1))
            else:
                count = mask.sum(dim=1).clamp(min=1e-9)
                total = (tokens * mask).sum(dim=1)
                pooled.append(total / (count if pooling == "mean" else count.sqrt()))
        embedding = pooled[0] if len(pooled) == 1 else torch.cat(pooled, dim=1)
        if self.normalize:
            embedding = torch.nn.functional.normalize(embedding, p=2.0, dim=1)
        return {"token_embeddings": tokens, "sentence_embedding": embedding}
