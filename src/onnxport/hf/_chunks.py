"""What the chunked recurrences (``_delta_rule``, ``_chunk_scan``) share: a state carried from chunk to chunk, as a
``scan`` under capture (one graph for any number of chunks) and a Python loop when run eagerly; and the chunks'
outputs put back in token order."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

__all__ = ["carried", "in_token_order"]


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
