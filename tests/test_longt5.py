"""LongT5 exported for text2text-generation with a dynamic encoder length: its local attention pads the sequence
to a multiple of its block in Python, which onnxport's capture patch (:mod:`onnxport.hf._longt5_blocks`) does with
no branch. For both encoder attention types, a tiny random checkpoint is exported through ``export_hf`` (from its
default example), and ``generate_seq2seq`` on padded batches of texts of several lengths (1 to 40 tokens: block
multiples and not, shorter than a block, and a lone row) gives the tokens of transformers' greedy ``generate``; the
encoder file's states equal eager's at those lengths; and transformers' LongT5 is left as it was."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
import torch

import onnxport
from onnxport.hf import export_hf
from tests.test_transformers_js import write_special_tokenizer

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.transformers

VOCAB = 99
BLOCKS = dict(local_radius=4, global_block_size=4)  # blocks of 5 tokens, a global token per 4
KINDS = ("local", "transient-global")
NEW_TOKENS = 8
LENGTHS = [(1, 3), (9, 17), (40, 5, 10), (15,)]  # each batch's texts' lengths in words (= tokens)
FILES = ("encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx")


def _texts(lengths: tuple[int, ...], seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(f"w{i}" for i in rng.integers(3, VOCAB, n)) for n in lengths]


@pytest.fixture(scope="module", params=KINDS)
def exported(request, tmp_path_factory) -> tuple[Any, Any, str]:
    """(the eager model, its tokenizer, the folder export_hf wrote) for one encoder attention type."""
    root = tmp_path_factory.mktemp(f"longt5-{request.param}")
    directory, out = str(root / "model"), str(root / "out")
    torch.manual_seed(0)
    config = transformers.LongT5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                                       encoder_attention_type=request.param, decoder_start_token_id=0,
                                       pad_token_id=0, eos_token_id=2, **BLOCKS)
    model = transformers.LongT5ForConditionalGeneration(config).eval()
    with torch.no_grad():  # weights wider than the init's, for tokens that differ from row to row
        for param in model.parameters():
            if param.dim() > 1:
                param.normal_(0, 0.3)
    model.save_pretrained(directory)
    write_special_tokenizer(directory, VOCAB)
    export_hf(directory, "text2text-generation", out)
    return model, transformers.AutoTokenizer.from_pretrained(directory), out


@pytest.mark.parametrize("lengths", LENGTHS, ids=lambda n: "-".join(map(str, n)))
def test_generate_is_transformers_greedy_generate(exported, lengths) -> None:
    model, tokenizer, out = exported
    batch = tokenizer(_texts(lengths, sum(lengths)), padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = model.generate(**batch, max_new_tokens=NEW_TOKENS, do_sample=False, num_beams=1)
    got = onnxport.generate_seq2seq(*(os.path.join(out, f) for f in FILES), batch["input_ids"],
                                    batch["attention_mask"], decoder_start_token_id=0, max_new_tokens=NEW_TOKENS)
    assert torch.equal(got, expected)


def test_encoder_states_are_eager_at_lengths_other_than_the_example(exported) -> None:
    import onnxruntime as ort

    model, tokenizer, out = exported
    session = ort.InferenceSession(os.path.join(out, "encoder_model.onnx"))
    for length in (1, 3, 5, 9, 17, 40):
        batch = tokenizer(_texts((length, max(length - 2, 1)), length), padding=True, return_tensors="pt")
        got = session.run(None, {k: v.numpy() for k, v in batch.items()})[0]
        with torch.no_grad():
            expected = model.get_encoder()(**batch).last_hidden_state.numpy()
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5 + 1e-4 * np.abs(expected).max(),
                                   err_msg=f"encoder length {length}")


def test_transformers_longt5_is_untouched_after_an_export_and_a_failed_capture(exported) -> None:
    from transformers.models.longt5 import modeling_longt5

    from onnxport.hf.patches import patched

    names = ("_split_into_blocks", "_make_global_fixed_block_ids", "_create_global_aggregates")
    before = {name: getattr(modeling_longt5, name) for name in names}
    assert all(f.__module__ == modeling_longt5.__name__ for f in before.values())
    with pytest.raises(RuntimeError, match="capture failed"), patched(exported[0]):
        assert all(getattr(modeling_longt5, name) is not before[name] for name in names)
        raise RuntimeError("capture failed")
    assert {name: getattr(modeling_longt5, name) for name in names} == before
