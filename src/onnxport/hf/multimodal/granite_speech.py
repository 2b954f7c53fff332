"""Granite Speech's audio encoder, for any count of frames in one graph that onnxruntime runs.

- Its conformer's attention (``GraniteSpeechConformerAttention``) cuts the frames into blocks of ``context_size``,
  the last padded, and decides in Python whether there is a padded block (``if num_features % context_size >
  0``), masking the padding of that block alone. torch.export follows the count of frames symbolically but keeps
  one side of that decision: a graph made on a clip whose frames fill their last block would take no other, and the
  other way round. Here the attention masks the last block's padding as a tensor (the frames past the count, none
  where the last block is full): the same scores either way, in one graph.
- Its projector (``GraniteSpeechEncoderProjector``) hands its Q-Former one batch of queries, ``[1, queries,
  hidden]``, for every window of frames, ``[windows, window, hidden]``, which torch's attention broadcasts and
  ONNX ``Attention`` does not (the batch of the queries and of the keys must agree): here the queries are expanded
  to the windows first, the same rows.

:func:`whole_blocks` applies both to a model's modules (their instances, the classes untouched) while inside;
transformers 5.23 and 5.24 need them (the classes as they are there). The audio encoder is captured and run inside,
and they are undone on every path.
"""

from __future__ import annotations

import contextlib
import math
import types
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812

__all__ = ["whole_blocks"]


def _attention(self: Any, hidden_states: torch.Tensor, attention_dists: torch.Tensor) -> torch.Tensor:
    """The conformer attention's forward (see the module): its blocks and relative positions, the padding masked
    by tensors."""
    hidden_states = self.pre_norm(hidden_states)
    batch, frames, _ = hidden_states.shape
    size = self.context_size
    blocks = (frames + size - 1) // size
    hidden_states = F.pad(hidden_states, (0, 0, 0, blocks * size - frames))
    query = self.to_q(hidden_states)
    key, value = self.to_kv(hidden_states).chunk(2, dim=-1)
    query, key, value = (t.reshape(batch * blocks, size, self.num_heads, -1).transpose(1, 2)
                         for t in (query, key, value))
    scores = torch.einsum("b h c d, c r d -> b h c r", query, self.rel_pos_emb(attention_dists)) * self.scale
    held = frames - (blocks - 1) * size  # the frames of the last block, 1 to size
    index = torch.arange(size, device=hidden_states.device)
    padding = ~((index[:, None] < held) & (index[None, :] < held))
    last = (torch.arange(batch * blocks, device=hidden_states.device) % blocks) == blocks - 1
    scores = scores.masked_fill(last[:, None, None, None] & padding, -torch.finfo(scores.dtype).max)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=scores, scale=self.scale)
    out = out.transpose(1, 2).reshape(batch, hidden_states.shape[1], -1)
    return self.dropout(self.to_out(out[:, :frames, :]))


def _projector(self: Any, hidden_states: torch.Tensor) -> torch.Tensor:
    """The projector's forward (see the module): its windows of frames, the queries one batch per window."""
    batch, frames, width = hidden_states.size()
    blocks = math.ceil(frames / self.window_size)
    hidden_states = F.pad(hidden_states, (0, 0, 0, blocks * self.window_size - frames))
    hidden_states = hidden_states.view(batch * blocks, self.window_size, width)
    queries = self.query.expand(hidden_states.shape[0], -1, -1)
    out = self.qformer(query_embeds=queries, encoder_hidden_states=hidden_states, encoder_attention_mask=None,
                       return_dict=True)
    return self.linear(out.last_hidden_state.view(batch, blocks * self.window_size // self.downsample_rate, -1))


_FORWARDS = {"GraniteSpeechConformerAttention": _attention, "GraniteSpeechEncoderProjector": _projector}


@contextlib.contextmanager
def whole_blocks(model: torch.nn.Module) -> Iterator[None]:
    """Every Granite Speech conformer attention and projector of ``model`` computed by this module's forwards while
    inside (no change for a model that has none)."""
    found = [m for m in model.modules() if type(m).__name__ in _FORWARDS]
    for m in found:  # on the instances: the classes stay as transformers has them
        m.forward = types.MethodType(_FORWARDS[type(m).__name__], m)
    try:
        yield
    finally:
        for m in found:
            del m.forward
