"""The selective scan of transformers' Mamba layers (Mamba, Falcon-Mamba, Jamba, Zamba), written for capture.

transformers' ``mamba_selective_scan`` runs the recurrence over a prompt as a Python loop over its tokens when
no CUDA kernel is there. Under torch.export that loop is unrolled for the example's length, which the graph then
fixes: the model would take prompts of that one length. :func:`selective_scan` takes the same arguments and
returns the same values, and walks the tokens with ``torch._higher_order_ops.scan`` when compiled or exported
(the state as the carry, an ONNX ``Scan``), so the length stays symbolic. Run eagerly, it loops as transformers
does; and so it does when the last state is asked for (a model run with its cache): transformers' layers take
a multi-token step from a zero state, ignoring the cached one, and a single token another way, so no one
graph of theirs serves both, and the loop's fixed length makes that graph refused rather than wrong. :mod:`onnxport.hf.patches` swaps it in for transformers' function only during the capture.

The recurrence, per channel ``d`` and state index ``n``, with ``dt`` the step size (after its bias and softplus
where asked): ``h_t = exp(A[d, n] dt_t[d]) h_{t-1} + dt_t[d] B_t[n] x_t[d]``, ``y_t[d] = sum_n h_t[n] C_t[n]``,
then ``y + D x`` and ``y * silu(z)`` where given; ``h_0 = 0``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["selective_scan"]


def selective_scan(
    hidden_states: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,  # noqa: N803 - the names of transformers' function, which callers pass by keyword
    B: torch.Tensor,  # noqa: N803
    C: torch.Tensor,  # noqa: N803
    D: torch.Tensor | None = None,  # noqa: N803
    z: torch.Tensor | None = None,
    delta_bias: torch.Tensor | None = None,
    delta_softplus: bool = False,
    return_last_state: bool = False,
    **kwargs: Any,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """``hidden_states``, ``dt`` and ``z`` are ``[batch, channels, length]``, ``A`` is ``[channels, states]``,
    ``B`` and ``C`` are ``[batch, states, length]``, ``D`` and ``delta_bias`` ``[channels]``. Returns the output
    ``[batch, channels, length]`` in the dtype of ``hidden_states``, and the last state ``[batch, channels,
    states]`` (float32) with ``return_last_state``. ``kwargs`` (transformers' choice of a torch-only
    alternative) are ignored: this is one."""
    dtype = hidden_states.dtype
    if delta_bias is not None:
        dt = dt + delta_bias.to(dt.dtype)[..., None]
    if delta_softplus:
        dt = F.softplus(dt)
    # Tokens first: [length, batch, channels, states] for the decay and the write, [length, batch, states] to read.
    decay = torch.exp(A[None, :, None, :] * dt[:, :, :, None]).movedim(2, 0)
    write = (dt[:, :, :, None] * B[:, None, :, :].transpose(2, 3).float()
             * hidden_states[:, :, :, None].float()).movedim(2, 0)
    read = C.transpose(1, 2).movedim(1, 0)
    batch, channels, _ = hidden_states.shape
    state = torch.zeros(batch, channels, A.shape[-1], dtype=torch.float32, device=hidden_states.device)
    if torch.compiler.is_compiling() and not return_last_state:
        from torch._higher_order_ops.scan import scan

        def step(state: torch.Tensor, token: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
            return _step(state, token, dtype)

        state, out = scan(step, state, [decay, write, read])
    else:
        outs = []
        for i in range(decay.shape[0]):
            state, token_out = _step(state, [decay[i], write[i], read[i]], dtype)
            outs.append(token_out)
        out = torch.stack(outs)
    out = out.movedim(0, -1)  # [batch, channels, length]
    if D is not None:
        out = out + hidden_states * D[None, :, None]
    if z is not None:
        out = out * F.silu(z)
    return (out, state) if return_last_state else out


def _step(state: torch.Tensor, token: list[torch.Tensor], dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """One token: the state ``[batch, channels, states]`` decayed and written, and its read ``[batch, channels]``."""
    decay, write, read = token
    state = decay * state + write
    return state, (state.to(dtype) @ read.unsqueeze(-1))[..., 0]
