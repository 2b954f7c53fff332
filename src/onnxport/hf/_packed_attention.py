"""Attention over packed sequences (many images' patches in one row), as one masked attention.

The vision towers of Qwen2-VL and the families built like it (Qwen2.5/3/3.5-VL, GLM-4V, ERNIE-VL, HunYuan-VL,
...) put every image's patches in one sequence and mark where each image ends (``cu_seqlens``). Their
attention layers then either hand ``cu_seqlens`` to a flash-attention kernel, or, on every other
implementation, split the queries, keys and values per image with ``torch.split(t, lengths.tolist())`` and
attend within each piece. The split's sizes are data: torch.export cannot capture it, and a graph that
could would hold one attention per image of the example.

During the capture onnxport gives such a tower's config an attention implementation of its own, which
the layers take for a flash kernel (``is_flash_attention_requested`` looks for "flash" in its name): it is
handed ``cu_seq_lens_q``/``cu_seq_lens_k`` and computes the same as the split, as one attention whose mask
lets a patch see only the patches of its own image. The graph then takes any number of patches per image.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Iterator
from typing import Any

import torch

from onnxport.hf.attribute_swap import swapped

__all__ = ["PACKED_ATTENTION", "packed_attention", "packed_attention_on"]

# "flash" in the name is what makes transformers pass the sequences' bounds instead of splitting
PACKED_ATTENTION = "onnxport_flash_packed"
_SPLITTING = ("eager", "sdpa", None)


def _segments(bounds: torch.Tensor, length: int | torch.SymInt, device: torch.device) -> torch.Tensor:
    """For each of ``length`` positions, the index of the sequence it belongs to, from the sequences'
    cumulative bounds ``[0, end_0, end_1, ..., length]``: the bounds at or before it, less one (no slice of
    the bounds: slicing a dim the image count sets would fix that count)."""
    positions = torch.arange(length, device=device)
    return (positions[:, None] >= bounds.to(positions.dtype)[None, :]).sum(-1) - 1


def packed_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                     cu_seq_lens_q: torch.Tensor | None = None, cu_seq_lens_k: torch.Tensor | None = None,
                     is_causal: bool | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' attention interface, ``[batch, heads, tokens, dim]`` in, ``[batch, tokens, heads, dim]``
    out. With ``cu_seq_lens_q`` a token attends only to the keys of its own sequence; without, this is
    transformers' SDPA attention."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if cu_seq_lens_q is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout,
                                      is_causal=is_causal, **kwargs)
    bounds_k = cu_seq_lens_q if cu_seq_lens_k is None else cu_seq_lens_k
    same = (_segments(cu_seq_lens_q, query.shape[2], query.device)[:, None]
            == _segments(bounds_k, key.shape[2], key.device)[None, :])
    if is_causal:
        same = same & torch.ones_like(same).tril()
    if key.shape[1] != query.shape[1]:  # grouped key/value heads
        groups = query.shape[1] // key.shape[1]
        key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=same, scale=scaling,
                                                           dropout_p=dropout if module.training else 0.0)
    return out.transpose(1, 2).contiguous(), None


@functools.lru_cache(maxsize=None)
def _splits_packed(kind: type) -> bool:
    """Whether modules of class ``kind`` are attention layers over packed sequences: their forward takes
    ``cu_seqlens``."""
    forward = kind.forward
    try:
        return "cu_seqlens" in inspect.signature(forward).parameters
    except (TypeError, ValueError):
        return False


@contextlib.contextmanager
def packed_attention_on(model: torch.nn.Module) -> Iterator[None]:
    """The config of every attention layer of ``model`` over packed sequences that would split them (eager
    or SDPA) computes with :func:`packed_attention` instead; restored on exit."""
    from transformers import AttentionInterface

    configs: dict[int, Any] = {}
    for module in model.modules():
        config = getattr(module, "config", None)
        if config is not None and _splits_packed(type(module)) \
                and getattr(config, "_attn_implementation_internal", None) in _SPLITTING:
            configs[id(config)] = config
    if not configs:
        yield
        return
    AttentionInterface.register(PACKED_ATTENTION, packed_attention)
    with swapped((config, "_attn_implementation_internal", PACKED_ATTENTION) for config in configs.values()):
        yield
