"""Quantized models in onnxruntime (CPU, one thread): onnxport's file of each quantized model against its float
export, and against ``torch.onnx.export(dynamo=True)``'s file of the same quantized model where that exports.

    python bench/pt2e.py [--out bench/pt2e.md]

Models: a small CNN (Conv+BN+ReLU blocks, pooling, linear head) and a 2-layer BERT encoder (transformers'
``BertModel``, random weights), each quantized with PT2E (``prepare_pt2e``/``convert_pt2e``, XNNPACK's
symmetric per-channel config, and the X86 Inductor quantizer's default, calibrated on random inputs); and an MLP with torchao's int8 and int4
weight-only quantization. Latencies are medians of interleaved runs (``bench/run.py``'s ``latency_ms``);
ratios are quantized / float (< 1: faster). Errors are the largest absolute difference from the eager
quantized model on the benchmark input, with the size of one quantization step of the output beside it.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import warnings

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

import onnxport  # noqa: E402
from run import latency_ms, log, make_session, publish, quiet  # noqa: E402


class Cnn(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        chans = [3, 32, 64, 128]
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Conv2d(a, b, 3, padding=1), torch.nn.BatchNorm2d(b), torch.nn.ReLU())
            for a, b in zip(chans, chans[1:]))
        self.head = torch.nn.Linear(chans[-1], 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = torch.nn.functional.max_pool2d(block(x), 2)
        return self.head(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1))


def cnn() -> tuple[torch.nn.Module, tuple]:
    torch.manual_seed(0)
    model = Cnn().eval()
    with torch.no_grad():  # BatchNorm statistics that are not the identity
        for block in model.blocks:
            block[1].running_mean.uniform_(-0.2, 0.2)
            block[1].running_var.uniform_(0.5, 2.0)
    return model, (torch.randn(4, 3, 64, 64),)


def bert() -> tuple[torch.nn.Module, tuple]:
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(vocab_size=1000, hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=1024, max_position_embeddings=128)
    model = BertModel(config, add_pooling_layer=False).eval()

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = model

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.bert(input_ids=ids).last_hidden_state

    return Encoder().eval(), (torch.randint(0, 1000, (2, 64)),)


def pt2e(model: torch.nn.Module, args: tuple, calibration: list[tuple], quantizer: str = "xnnpack") -> torch.nn.Module:
    """``model`` quantized with PT2E: XNNPACK's symmetric per-channel config, or the X86 Inductor quantizer's
    default (uint8 activations, int8 per-channel weights; captured strict, whose source_fn_stack it reads)."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    if quantizer == "x86":
        from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as x86

        chosen = x86.X86InductorQuantizer().set_global(x86.get_default_x86_inductor_quantization_config())
    else:
        from torchao.testing.pt2e._xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config

        chosen = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    prepared = prepare_pt2e(torch.export.export(model, args, strict=quantizer == "x86").module(), chosen)
    for batch in calibration:
        prepared(*batch)
    return convert_pt2e(prepared)


class Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def torchao(config: str) -> torch.nn.Module:
    from torchao.quantization import Int8WeightOnlyConfig, IntxWeightOnlyConfig, PerGroup, quantize_

    torch.manual_seed(0)
    model = Mlp().eval()
    quantize_(model, Int8WeightOnlyConfig() if config == "int8" else
              IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(32)))
    return model


def output_step(model: torch.nn.Module) -> float | None:
    """The scale of the last quantize op of a PT2E model (one step of its output), if it ends in one."""
    graph = getattr(model, "graph", None)
    scales = [n.args[1] for n in graph.nodes if "quantize_per_tensor" in str(n.target)] if graph else []
    return float(scales[-1]) if scales and isinstance(scales[-1], float) else None


def run(session, args: tuple) -> np.ndarray:
    names = [i.name for i in session.get_inputs()]
    return session.run(None, dict(zip(names, [a.numpy() for a in args])))[0]


def row(name: str, float_model: torch.nn.Module, quantized: torch.nn.Module, args: tuple, target: str | None) -> str:
    log(name)
    with quiet():
        files = {"float": onnxport.export(float_model, args, verify=False).model_proto,
                 "onnxport": onnxport.export(quantized, args, verify=False, target=target).model_proto}
        try:
            files["torch.onnx"] = torch.onnx.export(quantized, args, dynamo=True, verbose=False).model_proto
            torch_note = ""
        except Exception as exc:  # noqa: BLE001 - a failure is a result
            torch_note = f"fails: {str(exc).splitlines()[0][:80]}"
    sessions = {}
    for label, proto in files.items():
        try:
            sessions[label] = make_session(proto)
        except Exception as exc:  # noqa: BLE001
            torch_note = f"onnxruntime refuses it: {str(exc).splitlines()[0][:80]}"
    labels = list(sessions)
    names = {label: [i.name for i in sessions[label].get_inputs()] for label in labels}
    feeds = [dict(zip(names[label], [a.numpy() for a in args])) for label in labels]
    times = dict(zip(labels, latency_ms(list(zip([sessions[k] for k in labels], feeds)))))
    with torch.no_grad():
        expected = quantized(*args).detach().numpy()
    err = {label: float(np.abs(run(sessions[label], args) - expected).max()) for label in labels if label != "float"}
    ops = collections.Counter(n.op_type for n in files["onnxport"].graph.node)
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(ops.items()) if k in (
        "QuantizeLinear", "DequantizeLinear", "MatMulInteger", "MatMulNBits", "Round", "Clip"))
    step = output_step(quantized)
    step_text = f"{step:.2g}" if step else "-"
    torch_cells = (f"{times['torch.onnx']:.3f} | {times['torch.onnx'] / times['float']:.2f} | {err['torch.onnx']:.2g}"
                   if "torch.onnx" in times else f"{torch_note} | - | -")
    return (f"| {name} | {times['float']:.3f} | {times['onnxport']:.3f} | **{times['onnxport'] / times['float']:.2f}** "
            f"| {err['onnxport']:.2g} | {step_text} | {torch_cells} | {kinds} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None)
    options = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    rows = []
    for quantizer, label in (("xnnpack", "XNNPACK"), ("x86", "X86Inductor")):
        model, args = cnn()
        calibration = [(torch.randn(4, 3, 64, 64),) for _ in range(8)]
        rows.append(row(f"CNN, PT2E ({label})", model, pt2e(model, args, calibration, quantizer), args, None))
        model, args = bert()
        calibration = [(torch.randint(0, 1000, (2, 64)),) for _ in range(8)]
        rows.append(row(f"BERT 2 layers, PT2E ({label})", model, pt2e(model, args, calibration, quantizer), args, None))
    x = (torch.randn(16, 512),)
    torch.manual_seed(0)
    plain = Mlp().eval()
    for config, target in (("int8", None), ("int4", None)):
        quantized = torchao(config)
        plain.load_state_dict({k: v.dequantize() if hasattr(v, "dequantize") else v
                               for k, v in quantized.state_dict().items()})
        name = f"MLP 512-2048-512, torchao {config} weight-only" + (f" ({target})" if target else "")
        rows.append(row(name, plain, quantized, x, target))
    header = [
        "| model | float ms | onnxport quantized ms | ratio | max err vs eager quantized | output step "
        "| torch.onnx quantized ms | ratio | max err | onnxport's quantization ops |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    note = (f"\n\nonnxruntime {__import__('onnxruntime').__version__}, torch {torch.__version__}, one thread, CPU. "
            "The float column is onnxport's export of the model before quantization (for torchao, of the "
            "dequantized weights). Ratios are quantized / float.\n\n"
            "The error column is the largest difference from the eager quantized model; for the PT2E models onnxruntime's integer kernels (QLinearConv, QGemm) requantize each activation in integer arithmetic, so values land up to a step of their quantization away (BERT's output follows a LayerNorm, which rescales the last step). The X86 Inductor quantizer leaves BERT's linear layers with float outputs: onnxport writes them as MatMulInteger (integer GEMM, then the scales), where a DequantizeLinear before a float MatMul, as torch.onnx writes them, dequantizes each weight at every run. torchao int8 weight-only is written as Cast and arithmetic on the int8 initializer, which onnxruntime folds into a float weight at load (the file is 4x smaller, the speed the float model's); int4 as MatMulNBits at accuracy level 0 (float activations, as torchao computes), which keeps the weights packed in memory and on this small MLP runs a little slower than float.\n")
    publish("\n".join(header + rows) + note, options.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
