"""LongT5's local attention blocks and global tokens, of a symbolic number during a capture.

Written for transformers 5.x (``transformers.models.longt5.modeling_longt5``). LongT5's encoder splits its sequence
into blocks of ``local_radius + 1`` tokens (``_split_into_blocks``), padding it first, in Python, only when its
length is not a multiple of the block (``if x.shape[dim] % block_len != 0``); its transient-global attention makes
one global token per ``global_block_size`` tokens, with a Python branch for a sequence shorter than one
(``if num_globals > 0``) and ``one_hot`` over their number. Under torch.export each is a guard on the encoder's
length, which then cannot stay dynamic.

During the capture (:func:`blocks_of_any_length`), a symbolic length is split with no branch: the sequence is padded
to ``blocks * block_len`` by gathering its positions and zeroing those past its end, so the padded length is
``blocks * block_len`` by construction and neither the padding nor the reshape asks torch.export for a proof.
``blocks`` is one more than transformers' (``length`` divided by the block, rounded up): with at least two blocks at
any length, torch's contiguity checks (is a dim of size 1?) have one answer; the extra block, zeros and masked like
the zeros ``_concatenate_3_blocks`` pads with, changes no real token's attention, and its own tokens are cut off by
the attention's ``[:, :seq_length]``. The number of global tokens is made a size torch.export knows nothing of
(an unbacked one), since its example's value (0 or 1 at a short example) would otherwise be fixed by broadcasting and
contiguity checks; the global ids and aggregates are computed with tensor ops for any number of them, none
included. Concrete lengths go to transformers' own functions. The encoder's states are transformers' at every
length (verification checks others than the example's).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch

from onnxport.hf.attribute_swap import swapped

__all__ = ["blocks_of_any_length"]

_MODULE = "transformers.models.longt5.modeling_longt5"


def _split(original: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    def split_into_blocks(x: torch.Tensor, block_len: int, dim: int) -> torch.Tensor:
        length = x.shape[dim]
        if not isinstance(length, torch.SymInt):
            return original(x, block_len, dim)
        dim = dim % x.ndim
        # one block more than transformers' (all padding): never one block, a size whose strides torch would guard on
        blocks = (length + 2 * block_len - 1) // block_len  # a product torch's reshapes see divide evenly
        # padded by a gather rather than by pad(), whose amount torch.export cannot prove non-negative
        positions = torch.arange(blocks * block_len, device=x.device)
        taken = x.index_select(dim, positions.clamp(max=length - 1))
        inside = (positions < length).reshape((-1,) + (1,) * (x.ndim - 1 - dim))
        padded = torch.where(inside, taken, torch.zeros((), dtype=x.dtype, device=x.device))
        return padded.reshape(x.shape[:dim] + (blocks, block_len) + x.shape[dim + 1:])

    return split_into_blocks


def _fixed_block_ids(original: Callable[..., Any]) -> Callable[..., Any]:
    counts: dict[tuple[int, str, int], torch.SymInt] = {}

    def unbacked_count(seq_len: torch.SymInt, global_block_size: int, device: torch.device) -> torch.SymInt:
        """The number of global tokens as a size torch.export knows nothing of but that it is one, so that no
        guard fixes its example's value (0 or 1 at a short example: broadcasting and contiguity checks decide on
        it); one per capture and length, shared by every layer."""
        key = (id(seq_len.node.shape_env), str(seq_len.node.expr), global_block_size)
        if key not in counts:
            count = (torch.ones(seq_len, device=device, dtype=torch.int64).sum() // global_block_size).item()
            torch._check_is_size(count)
            counts[key] = count
        return counts[key]

    def make_global_fixed_block_ids(attention_mask: torch.Tensor, global_block_size: int) -> Any:
        batch_size, seq_len = attention_mask.shape[:2]
        if not isinstance(seq_len, torch.SymInt):
            return original(attention_mask, global_block_size)
        dtype = attention_mask.dtype
        # the same float arithmetic as transformers', so that the ids agree to the last token
        step = torch.ones_like(attention_mask) / global_block_size
        fixed = torch.cumsum(step, dim=1) - step
        mask = torch.where(attention_mask != 0.0, 1.0, -1000.0).type(dtype)
        ids = torch.floor(mask + fixed - 1.0).type(dtype).clamp(min=-1)
        ids = ids * attention_mask + (attention_mask - 1)
        # orphan tokens (after the last full block) join the block before them
        ends = (torch.arange(seq_len, device=ids.device) % global_block_size) == global_block_size - 1
        full_blocks = torch.logical_and(ends, ids >= 0).sum(-1).unsqueeze(-1).type(ids.dtype) - 1
        ids = torch.where(ids < full_blocks, ids, full_blocks)
        num_globals = unbacked_count(seq_len, global_block_size, ids.device)
        segments = torch.arange(num_globals, device=ids.device, dtype=ids.dtype)
        segment_ids = torch.where(segments[None, :] <= ids.max(dim=-1).values[:, None], 1, 0)
        return ids.type(torch.int), segment_ids.type(torch.int)

    return make_global_fixed_block_ids


def _global_aggregates(original: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    def create_global_aggregates(hidden_states: torch.Tensor, block_ids: torch.Tensor, global_seq_len: int) -> Any:
        if not isinstance(global_seq_len, torch.SymInt):
            return original(hidden_states, block_ids, global_seq_len)
        # one_hot() fixes a symbolic number of classes; a padding token's id (-1) matches no global token
        globals_ = torch.arange(global_seq_len, device=block_ids.device, dtype=block_ids.dtype)
        one_hot = block_ids[..., None] == globals_
        return torch.einsum("...nd,...ng->...gd", hidden_states, one_hot.type(hidden_states.dtype))

    return create_global_aggregates


_WRAPPERS = {"_split_into_blocks": _split, "_make_global_fixed_block_ids": _fixed_block_ids,
             "_create_global_aggregates": _global_aggregates}


@contextlib.contextmanager
def blocks_of_any_length() -> Iterator[None]:
    """Inside the context, LongT5's block split and global block ids keep a symbolic length symbolic (see the
    module's docstring); nothing when LongT5's module is not loaded."""
    module = sys.modules.get(_MODULE)
    changes = []
    if module is not None:
        for name, wrap in _WRAPPERS.items():
            function = vars(module).get(name)
            if callable(function):
                changes.append((module, name, wrap(function)))
    with swapped(changes):
        yield
