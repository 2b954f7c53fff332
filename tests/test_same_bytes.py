"""One model exported in two processes gives the same bytes: nothing in the file may follow Python's per-process
string hashing (a model looping over a set of its layer kinds: ModernBERT's rotary tables)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import pytest

pytest.importorskip("transformers")

pytestmark = [pytest.mark.transformers, pytest.mark.sweep]  # two processes importing torch: 20 s

_EXPORT = """
import sys, torch, onnxport, transformers
torch.manual_seed(0)
config = transformers.ModernBertConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                       num_attention_heads=2, global_attn_every_n_layers=2, local_attention=8,
                                       pad_token_id=0, global_rope_theta=10000.0, local_rope_theta=100.0)
model = transformers.ModernBertModel(config).eval()
ids = torch.randint(1, 64, (2, 9), generator=torch.Generator().manual_seed(1))
onnxport.export(model, (), {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, verify=False).save(sys.argv[1])
"""


def test_a_model_looping_over_a_set_of_layer_kinds_exports_the_same_bytes_in_two_processes(tmp_path) -> None:
    digests = []
    for seed in ("1", "3"):  # two hash seeds that order {"full_attention", "sliding_attention"} each its own way
        path = tmp_path / f"model-{seed}.onnx"
        env = {**os.environ, "PYTHONHASHSEED": seed}
        subprocess.run([sys.executable, "-c", _EXPORT, str(path)], check=True, env=env, timeout=600,
                       capture_output=True)
        digests.append(hashlib.sha256(path.read_bytes()).hexdigest())
    assert digests[0] == digests[1]
