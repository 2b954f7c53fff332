"""onnxruntime's quantization tools on onnxport's float Llama and on torch.onnx's, side by side.

    python bench/quantize_static.py --out bench/quantize_static.md

A Llama-style decoder (hidden 512, 8 layers, 8 heads, 2 KV heads, vocab 32000, no cache, random weights,
seed 0) exported with a dynamic batch and sequence by onnxport (its default target, and ``onnxruntime>=1.26``:
fused ``Attention``) and by ``torch.onnx.export(dynamo=True)``. Each file goes through
``onnxruntime.quantization.quantize_static`` (QDQ, MinMax, int8 activations and weights, 4 calibration
prompts of 32 tokens), with its defaults and with ``nodes_to_exclude=onnxport.quantize.static_exclusions(path)``
(the Softmax nodes and the node masking their input left in float); through ``quantize_dynamic`` (int8 weights,
activations quantized at run time; ``op_types_to_quantize=["MatMul", "Gather"]``, see docs/quantization.md); and through ``MatMulNBitsQuantizer`` (4 bits, blocks
of 32, symmetric). Error: the largest absolute difference of the quantized model's logits from eager PyTorch
float32's, over 4 other prompts of 32 tokens; the float file's error is beside it.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import warnings

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import onnxport  # noqa: E402

VOCAB, TOKENS = 32000, 32


def llama() -> torch.nn.Module:
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=512, intermediate_size=1376, num_hidden_layers=8,
                                      num_attention_heads=8, num_key_value_heads=2, use_cache=False)
    return transformers.LlamaForCausalLM(config).eval()


def prompts(seed: int, n: int = 4) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, VOCAB, (1, TOKENS), generator=g) for _ in range(n)]


def export(model: torch.nn.Module, how: str, path: str) -> None:
    ids = torch.randint(0, VOCAB, (2, TOKENS))
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if how == "torch.onnx":
        from torch.export import Dim

        batch, seq = Dim("batch"), Dim("seq")
        dims = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}
        torch.onnx.export(model, (), path, kwargs=inputs, dynamo=True, dynamic_shapes=dims)
    else:
        target = {"onnxport onnxruntime>=1.26": "onnxruntime>=1.26"}.get(how)
        onnxport.export(model, (), inputs, dynamic_shapes="auto", target=target).save(path)


def feeds(session, ids: torch.Tensor) -> dict[str, np.ndarray]:
    names = {i.name for i in session.get_inputs()}
    given = {"input_ids": ids.numpy(), "attention_mask": np.ones_like(ids.numpy())}
    return {k: v for k, v in given.items() if k in names}


def error(path: str, model: torch.nn.Module) -> float:
    import onnxruntime as ort

    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    worst = 0.0
    for ids in prompts(2):
        with torch.no_grad():
            expected = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits.numpy()
        worst = max(worst, float(np.abs(session.run(None, feeds(session, ids))[0] - expected).max()))
    return worst


def quantized(path: str, out: str, exclude: list[str]) -> None:
    import onnxruntime as ort
    from onnxruntime import quantization as q

    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])

    class Reader(q.CalibrationDataReader):
        def __init__(self) -> None:
            self.left = [feeds(session, ids) for ids in prompts(1)]

        def get_next(self) -> dict | None:
            return self.left.pop() if self.left else None

    q.quantize_static(path, out, Reader(), quant_format=q.QuantFormat.QDQ, calibrate_method=q.CalibrationMethod.MinMax,
                      activation_type=q.QuantType.QInt8, weight_type=q.QuantType.QInt8, nodes_to_exclude=exclude)


def dynamic(path: str, out: str) -> None:
    from onnxruntime import quantization as q

    # the op types docs/quantization.md gives: its defaults turn the standard Attention node into a QAttention
    # that does not load; the other files have no such node, and this is what the defaults quantize in them
    q.quantize_dynamic(path, out, op_types_to_quantize=["MatMul", "Gather"])


def nbits(path: str, out: str) -> None:
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    quantizer = MatMulNBitsQuantizer(onnx.load(path), bits=4, block_size=32, is_symmetric=True)
    quantizer.process()
    quantizer.model.save_model_to_file(out, use_external_data_format=True)


METHODS = ("quantize_static", "quantize_static, static_exclusions", "quantize_dynamic", "MatMulNBitsQuantizer int4")
FILES = ("torch.onnx", "onnxport", "onnxport onnxruntime>=1.26")


def measure(model: torch.nn.Module, how: str, tmp: str) -> dict[str, float]:
    """The float file's error and each tool's on it."""
    path = os.path.join(tmp, how.replace(" ", "_").replace(">=", "") + ".onnx")
    export(model, how, path)
    errors = {"float": error(path, model)}
    for method in METHODS:
        out = path.replace(".onnx", f".{METHODS.index(method)}.onnx")
        if method.startswith("quantize_static"):
            quantized(path, out, onnxport.quantize.static_exclusions(path) if "exclusions" in method else [])
        elif method == "quantize_dynamic":
            dynamic(path, out)
        else:
            nbits(path, out)
        errors[method] = error(out, model)
    return errors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="markdown file to write (default: print)")
    opts = parser.parse_args()
    warnings.filterwarnings("ignore")
    import onnxruntime
    import transformers

    model = llama()
    errors = {}
    with tempfile.TemporaryDirectory() as tmp:
        for how in FILES:
            errors[how] = measure(model, how, tmp)
            print(how, errors[how], file=sys.stderr, flush=True)
    base = errors["torch.onnx"]
    lines = ["# onnxruntime's quantization tools on onnxport's and torch.onnx's float Llama", "",
             f"Generated by `python bench/quantize_static.py` (see its docstring): torch {torch.__version__}, "
             f"transformers {transformers.__version__}, onnxruntime {onnxruntime.__version__}, "
             f"Python {platform.python_version()}, {platform.machine()}.", "",
             "| tool | " + " | ".join(f"{how} error" + ("" if how == "torch.onnx" else " | / torch.onnx's")
                                     for how in FILES) + " |",
             "|---|" + "---:|" * (2 * len(FILES) - 1)]
    for method in ("float", *METHODS):
        cells = [f"{errors[how][method]:.3g}" + ("" if how == "torch.onnx"
                                                 else f" | {errors[how][method] / base[method]:.2f}x")
                 for how in FILES]
        lines.append(f"| {method if method != 'float' else 'none (float file)'} | " + " | ".join(cells) + " |")
    lines += ["", "Errors: the largest absolute logit difference from eager float32 over 4 prompts of 32 tokens. "
              "With its defaults, `quantize_static` calibrates the sum of the scores and the attention mask (its "
              "range spans the mask's lowest value) and every score rounds to one step; "
              "`nodes_to_exclude=onnxport.quantize.static_exclusions(path)` keeps those nodes in float. onnxport's "
              "`onnxruntime>=1.26` file computes attention in one `Attention` node, the mask inside it, and needs "
              "no exclusion. `quantize_dynamic` runs with `op_types_to_quantize=[\"MatMul\", \"Gather\"]` "
              "(its defaults would turn that `Attention` node into a `QAttention` that does not load; in the other "
              "files it quantizes the same nodes as its defaults); `MatMulNBitsQuantizer`: 4 bits, blocks of 32, "
              "symmetric."]
    text = "\n".join(lines) + "\n"
    if opts.out:
        with open(opts.out, "w", encoding="utf-8") as f:
            f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
