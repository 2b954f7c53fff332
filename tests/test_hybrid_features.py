"""onnxport's chunked scan of Mamba-2 mixers (:mod:`onnxport.hf._chunk_scan`), swapped in for transformers'
``mamba2_chunk_scan`` during the capture of NemotronH, GraniteMoeHybrid, Bamba, Falcon-H1 and Zamba2: the same
results as transformers' own across chunk boundaries, and a bare hybrid model (its features and its states) captured
from a prompt shorter than one chunk right for prompts of several chunks."""

from __future__ import annotations

import pytest
import torch
from torch.export import Dim

import onnxport
from onnxport.hf import patches
from onnxport.hf._chunk_scan import mamba2_chunk_scan

transformers = pytest.importorskip("transformers")
modeling_nemotron_h = pytest.importorskip("transformers.models.nemotron_h.modeling_nemotron_h")
if not hasattr(modeling_nemotron_h, "mamba2_chunk_scan"):  # older transformers scan inside the mixer
    pytest.skip("this transformers has no mamba2_chunk_scan to replace", allow_module_level=True)

pytestmark = pytest.mark.transformers

CHUNK = 8


def _scan_arguments(length: int, initial: bool) -> tuple[tuple, dict]:
    g = torch.Generator().manual_seed(length)
    batch, heads, head_dim, groups, states = 2, 4, 3, 2, 5
    args = (torch.randn(batch, length, heads, head_dim, generator=g), torch.randn(batch, length, heads, generator=g),
            -2 * torch.rand(heads, generator=g), torch.randn(batch, length, groups, states, generator=g),
            torch.randn(batch, length, groups, states, generator=g))
    kwargs = dict(chunk_size=CHUNK, D=torch.randn(heads, generator=g), dt_bias=torch.randn(heads, generator=g),
                  dt_softplus=True, return_final_states=True, z=None,
                  initial_states=torch.randn(batch, heads, head_dim, states, generator=g) if initial else None)
    return args, kwargs


@pytest.mark.parametrize("initial", [False, True], ids=["zero_state", "given_state"])
@pytest.mark.parametrize("length", [1, 5, CHUNK, CHUNK + 5, 3 * CHUNK])
def test_chunk_scan_matches_transformers(length: int, initial: bool) -> None:
    args, kwargs = _scan_arguments(length, initial)
    theirs = getattr(modeling_nemotron_h.mamba2_chunk_scan, "__wrapped__", modeling_nemotron_h.mamba2_chunk_scan)
    want_out, want_state = theirs(*args, **kwargs)
    out, state = mamba2_chunk_scan(*args, **kwargs)
    torch.testing.assert_close(out, want_out, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(state, want_state, rtol=1e-4, atol=1e-5)


def test_chunk_scan_swapped_in_and_restored() -> None:
    original = modeling_nemotron_h.mamba2_chunk_scan
    with patches._scans_swapped(torch.nn.Linear(1, 1)):
        assert modeling_nemotron_h.mamba2_chunk_scan is mamba2_chunk_scan
    assert modeling_nemotron_h.mamba2_chunk_scan is original


def _ids(batch: int, length: int) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, 64, (batch, length), generator=torch.Generator().manual_seed(length))
    return {"input_ids": ids, "attention_mask": torch.ones(batch, length, dtype=torch.long)}


def test_nemotron_h_features_right_beyond_the_example_chunks() -> None:
    """Captured from 6 tokens (one chunk of 8), the bare model and its states are right for 5, 13 and 21 tokens:
    transformers' reshape into chunks fixed the example's one chunk (an Expand to two, verification failing above
    7 tokens)."""
    torch.manual_seed(0)
    config = transformers.NemotronHConfig(
        vocab_size=64, hidden_size=16, num_attention_heads=2, num_key_value_heads=1, head_dim=8,
        intermediate_size=16, mamba_num_heads=4, mamba_head_dim=4, n_groups=2, ssm_state_size=4, chunk_size=CHUNK,
        conv_kernel=4, layers_block_type=["mamba", "attention"], use_cache=True)
    model = transformers.NemotronHModel(config).eval()
    length = Dim.AUTO
    onnx = onnxport.export(model, (), _ids(2, 6), dynamic_shapes={"input_ids": {1: length},
                                                                  "attention_mask": {1: length}})
    assert onnx.output_names == ["last_hidden_state", "present.0.conv_state", "present.0.recurrent_state",
                                 "present.1.key", "present.1.value"]
    for tokens in (5, CHUNK + 5, 2 * CHUNK + 5):
        inputs = _ids(2, tokens)
        with torch.no_grad():
            want = model(**inputs)
        got = onnx(**inputs)
        torch.testing.assert_close(got.last_hidden_state, want.last_hidden_state, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(got.past_key_values.layers[0].recurrent_states[0],
                                   want.past_key_values.layers[0].recurrent_states[0], rtol=1e-4, atol=1e-5)
