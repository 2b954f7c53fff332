"""The chunked scan of transformers' Mamba-2 mixers, written for capture.

transformers' ``mamba2_chunk_scan`` (Mamba-2, Bamba, Falcon-H1, GraniteMoeHybrid, NemotronH, Zamba2; its PyTorch
fallback when no ``mamba_ssm`` kernel is there) pads a prompt to a multiple of ``chunk_size`` and cuts it into
chunks with ``reshape(batch, -1, chunk_size, ...)``. torch.export cannot prove that a symbolic ``length + (chunk -
length % chunk) % chunk`` divides evenly, and its size-oblivious capture then records the chunk count of the
example (one, for any prompt shorter than a chunk) in the ops after the reshape: the segment sum over the chunks is
an ``Expand`` to ``[.., 2, 2]``, so the graph fails on any prompt longer than one chunk (a bare model's and a causal
LM's alike).

:func:`mamba2_chunk_scan` takes the same arguments and returns the same values, but cuts the length into chunks by
gathering, with one spare chunk (as :mod:`onnxport.hf._delta_rule` does), and walks the chunks with
``torch._higher_order_ops.scan`` when compiled or exported, the state as the carry, so the number of chunks stays
symbolic and one graph serves every length. Run eagerly, it loops over the chunks in Python.
:mod:`onnxport.hf.patches` swaps it in for transformers' function only during the capture.

Per head, with ``x_t`` the input scaled by its step ``dt_t`` and ``a_t = A dt_t`` its log decay, the state ``[head_dim,
state]`` is ``h_t = exp(a_t) h_{t-1} + x_t B_t^T`` and the output ``y_t = h_t C_t + D u_t``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from onnxport.hf._chunks import carried, chunk_positions, in_token_order

__all__ = ["mamba2_chunk_scan"]


def mamba2_chunk_scan(
    hidden_states: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,  # noqa: N803 - the names of transformers' function, which callers pass by keyword
    B: torch.Tensor,  # noqa: N803
    C: torch.Tensor,  # noqa: N803
    chunk_size: int,
    D: torch.Tensor | None = None,  # noqa: N803
    dt_bias: torch.Tensor | None = None,
    initial_states: torch.Tensor | None = None,
    dt_softplus: bool = False,
    dt_limit: tuple[float, float] = (0.0, float("inf")),
    return_final_states: bool = False,
    **kwargs: Any,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """``hidden_states`` is ``[batch, length, heads, head_dim]``, ``dt`` ``[batch, length, heads]``, ``A``, ``D``
    and ``dt_bias`` ``[heads]``, ``B`` and ``C`` ``[batch, length, groups, state]`` (each group serves ``heads //
    groups`` consecutive heads), ``initial_states`` ``[batch, heads, head_dim, state]``. Returns the output
    ``[batch, length, heads, head_dim]`` in float32, and the final state (float32) with ``return_final_states``.
    ``kwargs`` (``z``, which transformers' fallback ignores too, and kernel options) are ignored."""
    batch, length, heads, head_dim = hidden_states.shape
    if dt_bias is not None:
        dt = dt + dt_bias.to(dt.dtype)
    if dt_softplus:
        dt = F.softplus(dt)
    dt = torch.clamp(dt, min=dt_limit[0], max=dt_limit[1]).float()
    inputs = hidden_states.float()
    B, C = (t.float().repeat_interleave(heads // t.shape[2], dim=2, output_size=heads) for t in (B, C))  # noqa: N806

    # Heads first, [batch, heads, length, ...], then cut into [batch, heads, chunks, chunk_size, ...], the last
    # positions zero (no write, no decay: the state passes through). One chunk more than the length needs keeps the
    # count at 2 or more, so that no shape check (``chunks == 1``) bounds the length to the example's chunk count;
    # gathering rather than padding and reshaping leaves torch.export no ``padded % chunk_size == 0`` to prove.
    x, b, c = (inputs * dt[..., None]).transpose(1, 2), B.transpose(1, 2), C.transpose(1, 2)
    log_step = (A.float() * dt).transpose(1, 2)
    positions, padding = chunk_positions(length, chunk_size, x.device)
    x, b, c = (t[:, :, positions].masked_fill(padding.unsqueeze(-1), 0.0) for t in (x, b, c))
    log_decay = log_step[:, :, positions].masked_fill(padding, 0.0).cumsum(dim=-1)  # from the chunk's start

    # Within a chunk: decay from position s to l (s <= l; masked above the diagonal before exp, which cannot overflow).
    above = torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=x.device).triu(1)
    between = (log_decay.unsqueeze(-1) - log_decay.unsqueeze(-2)).masked_fill(above, float("-inf")).exp()
    within = ((c @ b.transpose(-1, -2)) * between) @ x  # [batch, heads, chunks, chunk_size, head_dim]
    c_decayed = c * log_decay.exp().unsqueeze(-1)  # reads the state left by the previous chunk
    chunk_end = log_decay[..., -1:]
    writes = x.transpose(-1, -2) @ (b * (chunk_end - log_decay).exp().unsqueeze(-1))  # [.., head_dim, state]
    chunk_decay = chunk_end.exp().unsqueeze(-1)  # [batch, heads, chunks, 1, 1]

    if initial_states is None:
        state = torch.zeros(batch, heads, head_dim, b.shape[-1], dtype=torch.float32, device=x.device)
    else:
        state = initial_states.to(device=x.device, dtype=torch.float32)
    per_chunk = [t.movedim(2, 0) for t in (within, c_decayed, writes, chunk_decay)]
    state, out = carried(_chunk_step, state, per_chunk)

    out = in_token_order(out, length, chunk_size)
    if D is not None:
        out = out + D[..., None] * inputs
    return (out, state) if return_final_states else out


def _chunk_step(state: torch.Tensor, chunk: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """One chunk: ``state`` ``[batch, heads, head_dim, state]`` as the previous chunks left it; returns the state after
    this chunk and the chunk's output ``[batch, heads, chunk_size, head_dim]``: what it computes within itself plus
    its read of the decayed state."""
    within, c_decayed, writes, chunk_decay = chunk
    out = within + c_decayed @ state.transpose(-1, -2)
    return state * chunk_decay + writes, out
