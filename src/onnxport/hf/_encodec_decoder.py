"""EnCodec's decoder (MusicGen's codec) written for capture, so that one graph takes any number of frames.

Two of transformers' layers fix the example's length under torch.export:

- ``EncodecConv1d`` computes the extra right padding of a convolution from its kernel size and stride held as
  tensor buffers (``torch.ceil`` of a float division: an unbacked integer the graph cannot size a padding by), and
  pads a sequence shorter than its reflection with zeros first in a Python branch on the length.
  :func:`conv_forward` computes the same paddings with integer arithmetic on the length, and gathers the
  reflection by index (:func:`pad1d`), whatever the length;
- ``EncodecLSTM`` runs ``nn.LSTM``, which torch.export unrolls over the example's frames. :func:`lstm_forward`
  runs the same recurrence (PyTorch's gates, in its order: input, forget, cell, output) with
  ``torch._higher_order_ops.scan`` over the frames, an ONNX ``Scan``.

:func:`decoder_symbolic` swaps both ``forward`` methods in for the ``with`` alone, and they compute with them only
while being compiled or exported: run eagerly (verification's reference), they are transformers' own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

__all__ = ["conv_forward", "decoder_symbolic", "lstm_forward", "pad1d"]


def pad1d(hidden: torch.Tensor, left: int, right: int, mode: str) -> torch.Tensor:
    """``hidden`` padded by ``left`` and ``right`` in ``mode``. A reflection is gathered by index, as transformers'
    ``_pad1d`` computes it: the sequence reflected as if padded with zeros up to ``max(length, reflection + 1)``
    (zeros where a reflection longer than the sequence reaches past it), with no branch on the length."""
    if mode != "reflect":
        return torch.nn.functional.pad(hidden, (left, right), mode)
    length = hidden.shape[-1]
    at = torch.arange(-left, length + right, device=hidden.device)  # the source position of each output one
    last = at[-1:] - right  # length - 1, as a tensor
    widened = torch.clamp(last + 1, min=max(left, right) + 1)
    source = torch.where(at < 0, -at, torch.where(at < widened, at, 2 * (widened - 1) - at))
    picked = hidden.index_select(-1, torch.minimum(source, last))
    return torch.where(source <= last, picked, torch.zeros((), dtype=hidden.dtype, device=hidden.device))


def conv_forward(self: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """``EncodecConv1d.forward``, its paddings computed from the length with integers (see the module)."""
    conv = self.conv
    kernel = (conv.kernel_size[0] - 1) * conv.dilation[0] + 1
    stride = conv.stride[0]
    total = kernel - stride
    length = hidden.shape[-1]
    frames = -((kernel - total - length) // stride)  # ceil((length - kernel + total) / stride)
    extra = frames * stride + kernel - total - length
    if self.causal:
        hidden = pad1d(hidden, total, extra, self.pad_mode)
    else:
        right = total // 2
        hidden = pad1d(hidden, total - right, right + extra, self.pad_mode)
    hidden = conv(hidden)
    return self.norm(hidden) if self.norm_type == "time_group_norm" else hidden


def lstm_forward(self: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """``EncodecLSTM.forward`` (``[batch, channels, frames]`` in and out, the LSTM's output added to its input),
    its layers scanned over the frames (see the module)."""
    from torch._higher_order_ops.scan import scan

    lstm = self.lstm
    x = hidden.permute(2, 0, 1)  # [frames, batch, channels]
    out = x
    for layer in range(lstm.num_layers):
        recurrent = getattr(lstm, f"weight_hh_l{layer}")
        gates = out @ getattr(lstm, f"weight_ih_l{layer}").T
        if lstm.bias:
            gates = gates + getattr(lstm, f"bias_ih_l{layer}") + getattr(lstm, f"bias_hh_l{layer}")
        zeros = gates.new_zeros(gates.shape[1], lstm.hidden_size)

        def step(carry: list[torch.Tensor], frame: list[torch.Tensor], recurrent: torch.Tensor = recurrent
                 ) -> tuple[list[torch.Tensor], torch.Tensor]:
            h, c = carry
            i, f, g, o = (frame[0] + h @ recurrent.T).chunk(4, dim=-1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            return [h, c], h.clone()

        _, out = scan(step, [zeros, zeros.clone()], [gates])
    return (out + x).permute(1, 2, 0)


def _when_compiling(ours, theirs):  # noqa: ANN001, ANN202 - two forward methods of one module class
    def forward(self: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
        return (ours if torch.compiler.is_compiling() else theirs)(self, hidden)

    return forward


@contextlib.contextmanager
def decoder_symbolic() -> Iterator[None]:
    """``EncodecConv1d`` and ``EncodecLSTM`` compute with :func:`conv_forward` and :func:`lstm_forward` while
    compiled or exported inside the ``with``."""
    from transformers.models.encodec import modeling_encodec as encodec

    saved = {cls: cls.forward for cls in (encodec.EncodecConv1d, encodec.EncodecLSTM)}
    encodec.EncodecConv1d.forward = _when_compiling(conv_forward, saved[encodec.EncodecConv1d])
    encodec.EncodecLSTM.forward = _when_compiling(lstm_forward, saved[encodec.EncodecLSTM])
    try:
        yield
    finally:
        for cls, forward in saved.items():
            cls.forward = forward
