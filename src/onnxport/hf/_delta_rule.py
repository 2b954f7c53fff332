"""The chunked gated delta rule of transformers' gated delta-net layers, written for capture.

transformers' ``torch_chunk_gated_delta_rule`` (Qwen3-Next, Qwen3.5, OLMo hybrid...) computes a prompt
chunk by chunk. Under torch.export it inverts each chunk's unit lower-triangular "UT" system by forward
substitution, a Python loop of ``chunk_size - 1`` slice updates that makes the capture several times
slower, and it walks the chunks in a Python loop over ``num_chunks``, which fixes the number of chunks
of the example (one, for any short prompt) into the graph: the graph is wrong for longer prompts.

:func:`chunk_gated_delta_rule` takes the same arguments and returns the same values, but

* inverts ``I + A`` (``A`` strictly lower-triangular, so nilpotent) as the product of
  ``I + (-A)^(2^k)`` for ``k < ceil(log2(chunk_size))``: a few batched matmuls, exact up to rounding;
* walks the chunks with ``torch._higher_order_ops.scan`` when compiled or exported, the recurrent
  state as the carry, so the number of chunks stays symbolic and one graph serves every length;
* cuts the length into chunks by gathering, with one spare chunk, so that no shape check of torch.export
  (``chunks == 1``, ``padded % chunks == 0``) bounds the length to the example's chunk count.

Run eagerly, it walks the chunks in a Python loop over the same step (``scan`` would compile itself
there). :mod:`onnxport.hf.patches` swaps it in for transformers' function only during the capture.
"""

from __future__ import annotations

from typing import Any

import torch

from onnxport.hf._chunks import carried, chunk_positions, in_token_order

__all__ = ["chunk_gated_delta_rule"]


def chunk_gated_delta_rule(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    chunk_size: int = 64,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The gated delta rule over a whole sequence, computed by chunks of ``chunk_size`` tokens.

    ``query`` and ``key`` are ``[batch, length, k_heads, k_dim]``, ``value`` is ``[batch, length,
    v_heads, v_dim]`` (``v_heads`` a multiple of ``k_heads``: each key head serves that many consecutive
    value heads), ``g`` (the log decay, <= 0) and ``beta`` (the write strength) are ``[batch, length,
    v_heads]``, ``initial_state`` is ``[batch, v_heads, k_dim, v_dim]``. Returns the output, ``[batch,
    length, v_heads, v_dim]`` in the dtype of ``query``, and the final state (float32) when
    ``output_final_state``, else None. Packed sequences (``cu_seqlens``) are not supported."""
    if kwargs.get("cu_seqlens") is not None:
        raise ValueError("chunk_gated_delta_rule cannot keep packed sequences (cu_seqlens) apart")
    out_dtype = query.dtype
    batch, length, k_heads, k_dim = key.shape
    v_heads, v_dim = value.shape[-2:]
    if v_heads != k_heads:
        query = query.repeat_interleave(v_heads // k_heads, dim=2)
        key = key.repeat_interleave(v_heads // k_heads, dim=2)

    # [batch, heads, length, ...] in float32
    query, key, value, beta, g = (
        t.transpose(1, 2).to(torch.float32).contiguous() for t in (query, key, value, beta, g)
    )
    if use_qk_l2norm_in_kernel:
        query = _l2_normalized(query)
        key = _l2_normalized(key)
    query = query * k_dim**-0.5

    # Split the length into chunks, [batch, heads, chunks, chunk_size, ...], the last ones padded with zeros.
    # One chunk more than the length needs: the spare (zero keys, values, beta and log decay) leaves the
    # state as it is and its outputs are dropped, but it keeps the count at 2 or more, so that torch.export,
    # seeing one chunk in a short example, does not guard on a count of 1 (shape checks ask ``size == 1``)
    # and bound the length to 64. The chunks are gathered by index rather than padded and reshaped, whose
    # view checks torch.export cannot prove for a symbolic length (``padded % chunks == 0``).
    positions, padding = chunk_positions(length, chunk_size, query.device)
    query, key, value = (t[:, :, positions].masked_fill(padding.unsqueeze(-1), 0.0) for t in (query, key, value))
    beta, g = (t[:, :, positions].masked_fill(padding, 0.0) for t in (beta, g))

    # Within a chunk: log decay from the chunk's start to each position, and decay between positions
    # (j <= i; zero above the diagonal, masked before exp so that it cannot overflow).
    log_decay = g.cumsum(dim=-1)
    above = torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=query.device).triu(1)
    between = (log_decay.unsqueeze(-1) - log_decay.unsqueeze(-2)).masked_fill(above, float("-inf")).exp()

    k_beta = key * beta.unsqueeze(-1)
    v_beta = value * beta.unsqueeze(-1)
    # The UT system I + A, A strictly lower: A[i, j] = beta_i decay(j -> i) k_i . k_j for j < i.
    strict_lower = ((k_beta @ key.transpose(-1, -2)) * between).tril(-1)
    solved = _unit_lower_solve(strict_lower, torch.cat([v_beta, k_beta * log_decay.exp().unsqueeze(-1)], dim=-1))
    new_values, k_decayed = solved.split([v_dim, k_dim], dim=-1)

    scores = (query @ key.transpose(-1, -2)) * between  # causal attention within the chunk, decay included
    query_decayed = query * log_decay.exp().unsqueeze(-1)  # reads the state left by the previous chunk
    chunk_end = log_decay[..., -1:]
    key_to_end = key * (chunk_end - log_decay).exp().unsqueeze(-1)  # writes, decayed to the chunk's end
    chunk_decay = chunk_end.exp().unsqueeze(-1)  # [batch, heads, chunks, 1, 1]

    if initial_state is None:
        state = torch.zeros(batch, v_heads, k_dim, v_dim, dtype=torch.float32, device=query.device)
    else:
        state = initial_state.to(device=query.device, dtype=torch.float32)

    # The chunks in order, the state carried from one to the next: chunks first.
    per_chunk = [t.movedim(2, 0) for t in (new_values, k_decayed, query_decayed, key_to_end, scores, chunk_decay)]
    state, out = carried(_chunk_step, state, per_chunk)

    out = in_token_order(out, length, chunk_size)
    out = out.contiguous().to(out_dtype)
    return out, (state if output_final_state else None)


def _chunk_step(state: torch.Tensor, chunk: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """One chunk of the recurrence: ``state`` is ``[batch, heads, k_dim, v_dim]`` as left by the previous
    chunks; returns the state after this chunk and this chunk's output ``[batch, heads, chunk_size, v_dim]``.
    The chunk's new values lose what the old state already predicts (the delta rule), the output adds the
    old state's read to the attention within the chunk, and the state decays then takes the writes."""
    new_values, k_decayed, query_decayed, key_to_end, scores, chunk_decay = chunk
    delta = new_values - k_decayed @ state
    out = query_decayed @ state + scores @ delta
    state = state * chunk_decay + key_to_end.transpose(-1, -2) @ delta
    return state, out


def _unit_lower_solve(strict_lower: torch.Tensor, rhs: torch.Tensor) -> torch.Tensor:
    """``(I + A)^-1 @ rhs`` for ``A`` strictly lower-triangular ``[..., n, n]``, without a loop over rows.

    ``A`` is nilpotent (``A^n = 0``), so with ``N = -A``: ``(I + A)^-1 = I + N + ... + N^(n-1)
    = (I + N)(I + N^2)(I + N^4)...`` up to ``N^(2^(K-1))``, ``2^K >= n``. The factors are applied to
    ``rhs`` one by one, ``N`` squared between them: ``2K - 1`` matmuls."""
    n = strict_lower.shape[-1]
    power = -strict_lower
    for k in range(max(n - 1, 0).bit_length()):
        if k:
            power = power @ power
        rhs = rhs + power @ rhs
    return rhs


def _l2_normalized(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``x`` scaled to unit L2 norm along its last dimension, ``eps`` added to the squared norm."""
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + eps)
