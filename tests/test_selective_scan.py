"""onnxport's selective scan (:mod:`onnxport.hf._selective_scan`), swapped in for transformers' during the capture
of Mamba layers: the same results as transformers' own on random inputs, one graph captured from a short prompt
right for long ones, and a Mamba checkpoint's text-generation folder (no cache) generating transformers' tokens."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import onnxport
from onnxport.hf import export_hf, patches
from onnxport.hf._selective_scan import selective_scan
from tests.hf_dirs import NEW_TOKENS, PROMPT, save_spread

transformers = pytest.importorskip("transformers")
modeling_mamba = pytest.importorskip("transformers.models.mamba.modeling_mamba")
if not hasattr(modeling_mamba, "mamba_selective_scan"):  # older transformers loop inside the layer
    pytest.skip("this transformers has no mamba_selective_scan to replace", allow_module_level=True)

pytestmark = pytest.mark.transformers


def _arguments(length: int) -> dict[str, object]:
    g = torch.Generator().manual_seed(length)
    batch, channels, states = 2, 6, 4
    return dict(hidden_states=torch.randn(batch, channels, length, generator=g),
                dt=torch.randn(batch, channels, length, generator=g),
                A=-torch.rand(channels, states, generator=g), B=torch.randn(batch, states, length, generator=g),
                C=torch.randn(batch, states, length, generator=g), D=torch.randn(channels, generator=g),
                z=torch.randn(batch, channels, length, generator=g), delta_bias=torch.randn(channels, generator=g),
                delta_softplus=True)


@pytest.mark.parametrize("last_state", [False, True])
def test_matches_transformers(last_state) -> None:
    arguments = _arguments(9)
    expected = modeling_mamba.mamba_selective_scan.__wrapped__(**arguments, return_last_state=last_state) \
        if hasattr(modeling_mamba.mamba_selective_scan, "__wrapped__") \
        else modeling_mamba.mamba_selective_scan(**arguments, return_last_state=last_state)
    got = selective_scan(**arguments, return_last_state=last_state)
    for g, e in zip(got if last_state else [got], expected if last_state else [expected]):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)


def test_swapped_in_and_restored() -> None:
    original = modeling_mamba.mamba_selective_scan
    with pytest.raises(RuntimeError), patches._scans_swapped(torch.nn.Linear(1, 1)):
        assert modeling_mamba.mamba_selective_scan is selective_scan
        raise RuntimeError
    assert modeling_mamba.mamba_selective_scan is original


def _mamba() -> transformers.MambaForCausalLM:
    torch.manual_seed(0)
    config = transformers.MambaConfig(vocab_size=99, hidden_size=32, state_size=8, num_hidden_layers=2, expand=2,
                                      conv_kernel=4, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    return transformers.MambaForCausalLM(config)


def test_dynamic_export_right_for_long_prompts() -> None:
    """Captured from 7 tokens with dynamic sizes (no cache), the graph matches eager at 40 tokens: the tokens
    are scanned, not unrolled to the example's length."""
    ort = pytest.importorskip("onnxruntime")
    model = _mamba().eval()
    inputs = {"input_ids": torch.randint(3, 99, (2, 7)), "use_cache": False}
    prog = onnxport.export(model, (), inputs, dynamic_shapes="auto")
    assert prog.report.verification.ok
    session = ort.InferenceSession(prog.model_proto.SerializeToString(), providers=["CPUExecutionProvider"])
    long = torch.randint(3, 99, (1, 40))
    with torch.no_grad():
        expected = model(input_ids=long, use_cache=False).logits.numpy()
    got = session.run(None, {"input_ids": long.numpy()})[0]
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=1e-4)


def test_text_generation_folder_of_a_mamba_checkpoint(tmp_path) -> None:
    """A Mamba checkpoint's state is not a cache onnxruntime-genai feeds: export-hf writes it without one (no
    genai_config.json), verified, and onnxport.generate gives transformers' greedy tokens."""
    directory, out = str(tmp_path / "mamba"), tmp_path / "out"
    model = save_spread(_mamba(), directory)
    prog = export_hf(directory, "text-generation", out)
    assert prog.report.verification.ok
    assert not (out / "genai_config.json").exists()
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        expected = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS, do_sample=False)
    assert onnxport.generate(str(out / "model.onnx"), ids, max_new_tokens=NEW_TOKENS).tolist() == expected.tolist()
