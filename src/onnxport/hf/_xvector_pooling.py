"""An x-vector head's statistics pooling over each row's own frames, for any batch, during a capture.

Written for transformers 5.x (``WavLMForXVector`` and the heads built like it: Wav2Vec2's, UniSpeech-SAT's,
Data2VecAudio's, Wav2Vec2-Conformer's). Given an ``attention_mask``, the head pools the mean and standard deviation
of its TDNN's frames row by row, in a Python loop over the batch (``for i, length in enumerate(lengths)``, then
``hidden_states[i, :length]``): under torch.export the loop fixes the batch at the example's, and the slices add
guards on the clip's length.

During the capture (:func:`xvector_pooling_masked`), such a head's forward pools with tensor ops instead: each row's
frames are those before its length (the same lengths transformers computes from the mask, through the feature
encoder's and the TDNN's convolutions), the mean a masked sum divided by their count, the deviation the unbiased one
(``torch.std``'s). A length is read as Python's slice ``[:length]`` reads it (past the end: every frame; negative:
counted from the end), so a degenerate clip pools what transformers pools. Without a mask, with labels (training),
a selection of hidden states asked for, or outside a capture, transformers' own forward runs; the hidden states
are returned where the caller asks for them (``output_hidden_states``), as transformers' forward returns them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from onnxport.hf.attribute_swap import swapped

__all__ = ["masked_statistics", "xvector_pooling_masked"]

# What a head must hold for the pooled forward below to be its own forward, pooling aside.
_PARTS = ("tdnn", "projector", "feature_extractor", "classifier", "_get_tdnn_output_lengths",
          "_get_feat_extract_output_lengths", "base_model")


def masked_statistics(hidden_states: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean and unbiased standard deviation over dim 1 of ``hidden_states`` (batch, frames, features), each row
    over its frames ``[:length]`` (Python's slice of that length), with no branch on the lengths."""
    frames = hidden_states.shape[1]
    lengths = lengths.to(torch.int64)
    ends = torch.where(lengths < 0, (lengths + frames).clamp(min=0), lengths.clamp(max=frames))
    inside = (torch.arange(frames, device=hidden_states.device)[None, :] < ends[:, None]).unsqueeze(-1)
    count = ends.to(hidden_states.dtype)[:, None]
    zero = torch.zeros((), dtype=hidden_states.dtype, device=hidden_states.device)
    mean = torch.where(inside, hidden_states, zero).sum(dim=1) / count
    squares = torch.where(inside, (hidden_states - mean[:, None, :]) ** 2, zero).sum(dim=1)
    return mean, torch.sqrt(squares / (count - 1))


def _pooled(head: torch.nn.Module, original: Callable[..., Any]) -> Callable[..., Any]:
    from transformers.modeling_outputs import XVectorOutput

    def forward(input_values: torch.Tensor, attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, **kwargs: Any) -> Any:
        config = head.config
        asked = kwargs.get("output_hidden_states", getattr(config, "output_hidden_states", False))
        if attention_mask is None or labels is not None or asked not in (True, False, None):
            return original(input_values, attention_mask=attention_mask, labels=labels, **kwargs)
        return_dict = kwargs.pop("return_dict", None)
        return_dict = getattr(config, "return_dict", True) if return_dict is None else return_dict
        kwargs["output_hidden_states"] = bool(asked) or config.use_weighted_layer_sum
        outputs = head.base_model(input_values, attention_mask=attention_mask, **kwargs)
        if config.use_weighted_layer_sum:
            weights = torch.nn.functional.softmax(head.layer_weights, dim=-1)
            hidden_states = (torch.stack(outputs.hidden_states, dim=1) * weights.view(-1, 1, 1)).sum(dim=1)
        else:
            hidden_states = outputs.last_hidden_state
        hidden_states = head.projector(hidden_states)
        for layer in head.tdnn:
            hidden_states = layer(hidden_states)
        lengths = head._get_tdnn_output_lengths(head._get_feat_extract_output_lengths(attention_mask.sum(dim=1)))
        mean, std = masked_statistics(hidden_states, lengths)
        embeddings = head.feature_extractor(torch.cat([mean, std], dim=-1))
        output = XVectorOutput(logits=head.classifier(embeddings), embeddings=embeddings,
                               hidden_states=outputs.hidden_states if asked else None, attentions=outputs.attentions)
        return output if return_dict else output.to_tuple()

    return forward


def _is_xvector_head(module: torch.nn.Module) -> bool:
    kind = type(module)
    return (kind.__module__.startswith("transformers.") and kind.__name__.endswith("ForXVector")
            and all(hasattr(module, part) for part in _PARTS))


@contextlib.contextmanager
def xvector_pooling_masked(model: torch.nn.Module) -> Iterator[None]:
    """Inside the context, each transformers x-vector head in ``model`` pools a masked batch with tensor ops (see
    the module's docstring); its forward is put back on exit."""
    changes = [(module, "forward", _pooled(module, module.forward)) for module in model.modules()
               if _is_xvector_head(module)]
    with swapped(changes):
        yield
