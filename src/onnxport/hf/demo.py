"""``onnxport demo``'s language-model step: a tiny random-weight Llama exported with its KV cache, and
greedy generation with it in onnxruntime next to transformers' own ``model.generate``."""

from __future__ import annotations

import torch

from onnxport.hf.generate import generate
from onnxport.hf.signature import cache_argument, cache_of

__all__ = ["generation_demo"]


def generation_demo(path: str, progress: bool = True) -> list[str]:
    """Export a tiny random-weight Llama from a decode step with its ``DynamicCache``, save it at ``path``, and
    generate 8 tokens greedily for two prompts (one left-padded) in onnxruntime with ``onnxport.generate``,
    next to ``model.generate``'s tokens. Returns the lines to print (one saying why, without transformers)."""
    try:
        import transformers
    except ImportError:
        return ["skipped: transformers is not installed (pip install transformers)"]
    from onnxport.api import export

    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    model = transformers.LlamaForCausalLM(config).eval()
    model.generation_config.eos_token_id = None  # eight tokens on both sides
    model.generation_config.pad_token_id = 0
    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(3, 128, (2, 4), generator=generator)
    with torch.no_grad():
        cache = cache_of(model(input_ids=prompt, attention_mask=torch.ones_like(prompt), use_cache=True))
    step = {"input_ids": torch.randint(3, 128, (2, 3), generator=generator),
            "attention_mask": torch.ones(2, 7, dtype=torch.long),
            "position_ids": torch.arange(4, 7).expand(2, 3), cache_argument(model): cache}
    prog = export(model, (), step, dynamic_shapes="auto", progress=progress)
    prog.save(path)
    ids = torch.randint(3, 128, (2, 6), generator=generator)
    mask = torch.ones_like(ids)
    ids[1, :2], mask[1, :2] = 0, 0  # a shorter prompt, left-padded
    tokens = generate(prog, ids, mask, max_new_tokens=8)
    expected = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=8)
    inputs = ", ".join(f"{v.name}{[str(d) for d in v.shape]}" for v in prog.model.graph.inputs[:4])
    return [
        f"inputs: {inputs}, ... ({len(prog.input_names)} in all)",
        str(prog.report.verification),
        "greedy generation in onnxruntime (onnxport.generate), 8 new tokens:",
        *(f"  prompt {i}: {ids[i][mask[i].bool()].tolist()} -> {tokens[i, 6:].tolist()}" for i in range(2)),
        "transformers model.generate: " + ("the same tokens" if torch.equal(tokens, expected) else
                                           f"DIFFERENT tokens {expected[:, 6:].tolist()}"),
    ]
