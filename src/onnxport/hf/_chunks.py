"""What the chunked recurrences (``_delta_rule``, ``_chunk_scan``) share: a state carried from chunk to chunk, as a
``scan`` under capture (one graph for any number of chunks) and a Python loop when run eagerly; and the chunks'
outputs put back in token order."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

__all__ = ["carried", "chunk_positions", "in_token_order"]


def chunk_positions(length: int | torch.SymInt, chunk_size: int,
                    device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The token positions of each chunk, [chunks, chunk_size], clamped into the length, and which of them lie past
    it (padding, to be zeroed). One chunk more than the length needs keeps the count at 2 or more, so that no shape
    check (``chunks == 1``) bounds the length to the example's chunk count; gathering by these positions rather than
    padding and reshaping leaves torch.export no ``padded % chunk_size == 0`` to prove."""
    chunks = (length + chunk_size - 1) // chunk_size + 1
    positions = (torch.arange(chunks, device=device) * chunk_size).unsqueeze(-1) \
        + torch.arange(chunk_size, device=device)
    return positions.clamp(max=length - 1), positions >= length


def carried(step: Callable[[torch.Tensor, list[torch.Tensor]], tuple[torch.Tensor, torch.Tensor]],
            state: torch.Tensor, per_chunk: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """``step(state, [each of per_chunk at chunk i])`` over the chunks (``per_chunk``'s first dim), in order: the
    last state and the outputs stacked along a first dim of chunks."""
    if torch.compiler.is_compiling():
        from torch._higher_order_ops.scan import scan

        return scan(step, state, list(per_chunk))
    outs = []
    for i in range(per_chunk[0].shape[0]):
        state, out = step(state, [t[i] for t in per_chunk])
        outs.append(out)
    return state, torch.stack(outs)


def in_token_order(out: torch.Tensor, length: int | torch.SymInt, chunk_size: int) -> torch.Tensor:
    """[chunks, batch, heads, chunk_size, dim] -> [batch, length, heads, dim]: the first ``length`` tokens (the
    last chunk's padding left out)."""
    tokens = torch.arange(length, device=out.device)
    return out.permute(1, 0, 3, 2, 4)[:, tokens // chunk_size, tokens % chunk_size]
