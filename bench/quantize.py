"""Weight quantization: size, latency and accuracy of onnxport's quantized models against onnxruntime-genai's
builder on a Llama-style decoder, and of a quantized BERT-base encoder, in one run.

    python bench/quantize.py [--threads 2] [--out bench/quantize.md]
    python bench/quantize.py --quick              # smoke run: 2 layers, a few timed runs, no table worth quoting

The decoder is bench/llm.py's (hidden 512, 8 layers, 8 heads, 2 KV heads, vocab 32000, random weights),
exported once by onnxport from a decode step with dynamic batch, sequence and past lengths; every onnxport
row is that program, as it is or through ``prog.quantize(...)``, saved with external data. The builder rows
are ``python -m onnxruntime_genai.models.builder -p fp32|int4|int8 -e cpu`` with its defaults, run on the
same weights saved as a local model directory. Every model, ours and the builder's, runs in one onnxruntime
``InferenceSession`` (CPU provider, ``--threads`` intra-op threads that do not spin between runs, default graph
optimisations; bench/run.py's ``session_options``), fed the
same inputs by name, so that all rows are timed the same way: a decode step (1 new token, batch 1) at past
lengths 128 and 1024 and a prefill of 128 tokens, the sessions run in turn, in a new random order each round
(bench/run.py's ``latency_ms``), so that the machine's drift and the traces one model leaves in the caches
hit them alike.

Accuracy is against eager PyTorch float32: a random prompt of 16 tokens, then 64 decode steps, teacher-forced
with the same random token ids for every model (each step feeds the next token of that fixed sequence and
the cache the model returned), each step's logits compared with eager's logits at that position. The BERT
rows (BertModel's base sizes, random weights, batch 1 x 128 tokens, the last 28 padded) compare
``last_hidden_state``.

The row lists (``LLAMA_ROWS``, ``BERT_ROWS``) are (label, build) entries: ``build(case, folder)`` writes a
model into ``folder`` and returns its path, so another quantizer is one more entry.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llm  # noqa: E402
import run as bench_run  # noqa: E402
from run import latency_ms, log, model_bytes, publish, quiet, session_options  # noqa: E402

import onnxport  # noqa: E402

PROMPT = 16
STEPS = 64
CALLS = (("decode, past 128", 128, 1), ("decode, past 1024", 1024, 1), ("prefill 128", 0, 128))
CACHE_NAMES = {"key": "past_key_values.%d.key", "value": "past_key_values.%d.value"}
BERT_SEQ, BERT_PADDED = 128, 28


# -- the rows ------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Case:
    """What a row's build function gets: the eager model, onnxport's float32 program of it, a scratch folder."""

    model: torch.nn.Module
    prog: Any
    workdir: str

    def hf_dir(self) -> str:
        """The model saved as a local model directory (once), for the builders that read one."""
        return llm.save_hf(self.model, self.workdir)


@dataclasses.dataclass
class Variant:
    label: str
    build: Callable[[Case, str], str]  # (case, empty folder) -> path of the model file written there


def onnxport_model(**quantize: Any) -> Callable[[Case, str], str]:
    """onnxport's program, through ``prog.quantize(**quantize)`` when options are given, saved with external data."""

    def build(case: Case, folder: str) -> str:
        prog = case.prog.quantize(**quantize) if quantize else case.prog
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, "model.onnx")
        prog.save(path, external_data=True)
        return path

    return build


def onnxport_gptq(**quantize: Any) -> Callable[[Case, str], str]:
    """onnxport's quantization with GPTQ, calibrated on 8 prompts of 64 random tokens (an empty cache)."""

    def build(case: Case, folder: str) -> str:
        torch.manual_seed(1)
        calibration = [llm.step_inputs(case.model, 0, 64) for _ in range(8)]
        return onnxport_model(**quantize, method="gptq", calibration=calibration)(case, folder)

    return build


def export_hf_model(**options: Any) -> Callable[[Case, str], str]:
    """``onnxport.export_hf`` of the local model directory for text-generation, as the command line runs it with
    ``--quantize int4`` and no other flag: the folder's default target, options and verification."""

    def build(case: Case, folder: str) -> str:
        onnxport.export_hf(case.hf_dir(), "text-generation", folder, **options)
        return os.path.join(folder, "model.onnx")

    return build


def genai_builder_model(precision: str, *extra_options: str) -> Callable[[Case, str], str]:
    """onnxruntime-genai's builder for the CPU at ``precision``, its defaults unless ``extra_options``."""

    def build(case: Case, folder: str) -> str:
        return llm.genai_build(case.hf_dir(), folder, precision, os.path.join(case.workdir, "cache"), extra_options)

    return build


INT4 = {"bits": 4, "block_size": 32, "symmetric": True, "accuracy_level": 4}
INT8 = {"bits": 8, "block_size": 32, "symmetric": True, "accuracy_level": 4}

LLAMA_ROWS = [
    Variant("onnxport fp32", onnxport_model()),
    Variant("onnxport int4", onnxport_model(**INT4, form="matmulnbits")),
    Variant("onnxport int4 dequantize", onnxport_model(**INT4, form="dequantize")),
    Variant("onnxport int8", onnxport_model(**INT8, form="matmulnbits")),
    Variant("onnxport int8 dequantize", onnxport_model(**INT8, form="dequantize")),
    Variant("onnxport int4 GPTQ", onnxport_gptq(**INT4, form="matmulnbits")),
    # wider blocks: fewer scales to apply, a smaller file, more error (the least-loss rounding leaves room)
    Variant("onnxport int4 blocks of 64", onnxport_model(**{**INT4, "block_size": 64}, form="matmulnbits")),
    Variant("onnxport int4 GPTQ blocks of 128", onnxport_gptq(**{**INT4, "block_size": 128}, form="matmulnbits")),
    Variant("onnxport int8 GPTQ blocks of 128", onnxport_gptq(**{**INT8, "block_size": 128}, form="matmulnbits")),
    Variant("onnxport int8 dynamic activations", onnxport_model(activations="dynamic")),
    Variant("export-hf --quantize int4 (no other flag)", export_hf_model(quantize="int4")),
    # the builder (0.18) on CPU: -p int4 and -p int8 are both weight-only MatMulNBits (round to nearest, blocks
    # of 32, symmetric, accuracy_level 4: int8 activations), of 4 and 8 bits
    Variant("builder int4", genai_builder_model("int4")),
    Variant("builder int8", genai_builder_model("int8")),
    Variant("builder fp32", genai_builder_model("fp32")),
]
# The rows the ratio columns divide by, and the (row, reference) pairs held to: decode latency at most 1.0x,
# max abs logit error and file size no larger.
LLAMA_BASES = ("onnxport fp32", "builder int4")
LLAMA_TARGETS = (("onnxport int4", "builder int4"), ("export-hf --quantize int4 (no other flag)", "builder int4"), ("onnxport int4 blocks of 64", "builder int4"),
                 ("onnxport int4 GPTQ blocks of 128", "builder int4"), ("onnxport int8", "builder int8"),
                 ("onnxport int8 GPTQ blocks of 128", "builder int8"))

BERT_ROWS = [
    Variant("onnxport fp32", onnxport_model()),
    Variant("onnxport int4", onnxport_model(**INT4, form="matmulnbits")),
    Variant("onnxport int8", onnxport_model(**INT8, form="matmulnbits")),
    Variant("onnxport int8 dequantize", onnxport_model(**INT8, form="dequantize")),
    Variant("onnxport int8 dynamic activations", onnxport_model(activations="dynamic")),
]


@dataclasses.dataclass
class Built:
    label: str
    path: str = ""
    session: Any = None
    mb: float = 0.0
    ops: str = ""
    error: str = ""  # why the row has no model: its cells say so
    ms: dict[str, float] = dataclasses.field(default_factory=dict)
    accuracy: dict[str, float] = dataclasses.field(default_factory=dict)


def build_rows(rows: Sequence[Variant], case: Case, threads: int) -> list[Built]:
    built = []
    for i, row in enumerate(rows):
        log(f"build {row.label}")
        result = Built(row.label)
        try:
            with quiet():
                result.path = row.build(case, os.path.join(case.workdir, f"row{i}"))
            result.mb = model_bytes(result.path) / 1e6
            result.ops = weight_ops(result.path)
            result.session = open_session(result.path, threads)
        except Exception as exc:  # noqa: BLE001 - a failed row is a result to report
            result.error = bench_run.short(exc, 100)
        built.append(result)
    return built


def open_session(path: str, threads: int) -> Any:
    import onnxruntime as ort

    return ort.InferenceSession(path, session_options(threads), providers=["CPUExecutionProvider"])


def weight_ops(path: str) -> str:
    """What holds the model's weights: MatMulNBits by (bits, block, accuracy level), DequantizeLinear by
    weight type, MatMulInteger, and the MatMul/Gemm left with a float initializer as weight."""
    proto = onnx.load(path, load_external_data=False)
    graph = proto.graph
    initializers = {t.name: t for t in graph.initializer}
    counts: dict[str, int] = {}
    for node in graph.node:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type == "MatMulNBits":
            key = f"MatMulNBits {attrs.get('bits', 4)}-bit block {attrs.get('block_size')} " \
                  f"accuracy_level {attrs.get('accuracy_level', 0)}"
        elif node.op_type in ("DequantizeLinear", "GatherBlockQuantized") and node.input[0] in initializers:
            dtype = onnx.helper.tensor_dtype_to_string(initializers[node.input[0]].data_type).replace("TensorProto.", "")
            key = f"{node.op_type} {dtype.lower()}"
        elif node.op_type == "MatMulInteger" and len(node.input) > 1 and node.input[1] in initializers:
            key = "MatMulInteger int8 (DynamicQuantizeLinear activations)"
        elif node.op_type in ("MatMul", "Gemm") and len(node.input) > 1 and node.input[1] in initializers:
            key = f"{node.op_type} float"
        else:
            continue
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{n} {k}" for k, n in counts.items()) or "none"


def _typed(session: Any, flat: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    feeds = {}
    for spec in session.get_inputs():
        array = flat[spec.name]
        feeds[spec.name] = array.astype(np.int32) if spec.type == "tensor(int32)" else array
    return feeds


# -- the decoder ---------------------------------------------------------------------------------------


def teacher_forced(session: Any, tokens: np.ndarray, prompt: int, config: Any) -> np.ndarray:
    """The logits ``[steps, vocab]`` of the decode steps after a prefill of ``tokens[:, :prompt]``, each step
    fed the next token of ``tokens`` and the cache the previous call returned."""
    head = config.hidden_size // config.num_attention_heads
    empty = np.zeros((1, config.num_key_value_heads, 0, head), dtype=np.float32)
    past = {CACHE_NAMES[kv] % i: empty for i in range(config.num_hidden_layers) for kv in ("key", "value")}
    names = [o.name for o in session.get_outputs()]
    logits = []
    for start, stop in [(0, prompt)] + [(t, t + 1) for t in range(prompt, tokens.shape[1])]:
        flat = {"input_ids": tokens[:, start:stop], "attention_mask": np.ones((1, stop), dtype=np.int64),
                "position_ids": np.arange(start, stop, dtype=np.int64)[None], **past}
        outputs = dict(zip(names, session.run(None, _typed(session, flat))))
        if start >= prompt:
            logits.append(outputs["logits"][0, -1])
        past = {name.replace("present", "past_key_values", 1): value for name, value in outputs.items()
                if name.startswith("present")}
    return np.stack(logits)


def measure_llama(opts: argparse.Namespace, workdir: str) -> tuple[list[Built], float]:
    model = llm.build(opts.hidden, opts.layers, opts.heads, opts.kv_heads, opts.vocab)
    log("export with onnxport")
    start = time.perf_counter()
    with quiet():
        prog = onnxport.export(model, (), llm.step_inputs(model, 4, 3), dynamic_shapes="auto", target=opts.target)
    export_s = time.perf_counter() - start
    os.makedirs(workdir, exist_ok=True)
    rows = build_rows(LLAMA_ROWS, Case(model, prog, workdir), opts.threads)
    ok = [r for r in rows if not r.error]

    log(f"accuracy: prompt of {PROMPT}, {opts.steps} teacher-forced decode steps")
    generator = torch.Generator().manual_seed(1)
    tokens = torch.randint(3, opts.vocab, (1, PROMPT + opts.steps), generator=generator)
    with torch.no_grad():
        expected = model(input_ids=tokens, use_cache=False).logits[0, PROMPT:].double().numpy()
    for row in ok:
        try:
            got = teacher_forced(row.session, tokens.numpy(), PROMPT, model.config).astype(np.float64)
        except Exception as exc:  # noqa: BLE001
            row.accuracy = {"error": bench_run.short(exc, 100)}
            continue
        row.accuracy = {"max_abs": float(np.abs(got - expected).max()),
                        "top1": float((got.argmax(-1) == expected.argmax(-1)).mean())}

    for label, past, new in CALLS:
        log(label)
        torch.manual_seed(2)
        inputs = llm.step_inputs(model, past, new)  # the same inputs for every row
        runs = [(r.session, llm.ort_feeds(r.session, inputs, CACHE_NAMES)) for r in ok]
        for row, ms in zip(ok, latency_ms(runs)):
            row.ms[label] = ms
    return rows, export_s


# -- the encoder ---------------------------------------------------------------------------------------


def measure_bert(opts: argparse.Namespace, workdir: str) -> list[Built]:
    import transformers

    torch.manual_seed(0)
    config = transformers.BertConfig(num_hidden_layers=opts.bert_layers)
    model = transformers.BertModel(config).eval()
    mask = torch.ones(1, BERT_SEQ, dtype=torch.int64)
    mask[:, BERT_SEQ - BERT_PADDED:] = 0
    inputs = {"input_ids": torch.randint(0, config.vocab_size, (1, BERT_SEQ)), "attention_mask": mask}
    log("BERT: export with onnxport")
    with quiet():
        prog = onnxport.export(model, (), inputs, dynamic_shapes="auto", target=opts.target)
    os.makedirs(workdir, exist_ok=True)
    rows = build_rows(BERT_ROWS, Case(model, prog, workdir), opts.threads)
    ok = [r for r in rows if not r.error]
    with torch.no_grad():
        expected = model(**inputs).last_hidden_state.double().numpy().reshape(-1)
    runs = []
    for row in ok:
        feeds = _typed(row.session, {k: v.numpy() for k, v in inputs.items()})
        runs.append((row.session, feeds))
        names = [o.name for o in row.session.get_outputs()]
        index = names.index("last_hidden_state") if "last_hidden_state" in names else 0
        got = row.session.run(None, feeds)[index].astype(np.float64).reshape(-1)
        row.accuracy = {"max_abs": float(np.abs(got - expected).max()),
                        "cosine": float(got @ expected / (np.linalg.norm(got) * np.linalg.norm(expected)))}
    log(f"BERT: encoder, 1 x {BERT_SEQ}")
    for row, ms in zip(ok, latency_ms(runs)):
        row.ms["encoder"] = ms
    return rows


# -- the report ----------------------------------------------------------------------------------------


def _ratio(value: float | None, base: float | None) -> str:
    return f"{value / base:.2f}x" if value and base else "n/a"


def _fail(row: Built, width: int) -> str:
    return f"| {row.label} | fail: {row.error} |" + " |" * (width - 1)


def llama_tables(rows: list[Built]) -> list[str]:
    by_label = {r.label: r for r in rows}
    calls = [c[0] for c in CALLS]
    lines = ["| model | MB | " + " | ".join(f"{c} ms" for c in calls) + " | max abs logit err | top-1 agreement |",
             "|---|---:|" + "---:|" * (len(calls) + 2)]
    for r in rows:
        if r.error:
            lines.append(_fail(r, len(calls) + 3))
            continue
        acc = r.accuracy
        err = (f"{acc['max_abs']:.3g} | {acc['top1']:.1%}" if "max_abs" in acc
               else f"fail: {acc.get('error', '?')} | n/a")
        lines.append(f"| {r.label} | {r.mb:.1f} | " + " | ".join(f"{r.ms[c]:.2f}" for c in calls) + f" | {err} |")
    lines += ["", "Ratios (below 1x: smaller or faster than the row divided by):", ""]
    header, rule = "| model |", "|---|"
    for base in LLAMA_BASES:
        header += f" MB / {base} |" + "".join(f" {c} / {base} |" for c in calls)
        rule += "---:|" * (len(calls) + 1)
    lines += [header, rule]
    for r in rows:
        if r.error:
            continue
        cells = []
        for base_label in LLAMA_BASES:
            base = by_label.get(base_label)
            ok = base is not None and not base.error
            cells.append(_ratio(r.mb, base.mb if ok else None))
            cells += [_ratio(r.ms.get(c), base.ms.get(c) if ok else None) for c in calls]
        lines.append(f"| {r.label} | " + " | ".join(cells) + " |")
    lines.append("")
    for label, ref in LLAMA_TARGETS:
        mine, theirs = by_label.get(label), by_label.get(ref)
        if mine is None or theirs is None or mine.error or theirs.error:
            lines.append(f"- {label} against {ref}: n/a (a row failed)")
            continue
        decode = [mine.ms[c] / theirs.ms[c] for c in calls if c.startswith("decode")]
        errors = (mine.accuracy.get("max_abs"), theirs.accuracy.get("max_abs"))
        checks = {"decode at most 1.0x": max(decode) <= 1.0, "file no larger": mine.mb <= theirs.mb,
                  "max abs logit error no larger": None not in errors and errors[0] <= errors[1]}
        failed = [name for name, ok in checks.items() if not ok]
        verdict = "met" if not failed else "not met (" + ", ".join(failed) + ")"
        lines.append(f"- {label} against {ref}: " + ", ".join(f"{c} {mine.ms[c] / theirs.ms[c]:.2f}x" for c in calls)
                     + f", size {mine.mb / theirs.mb:.2f}x, max abs logit error "
                     + " against ".join("n/a" if e is None else f"{e:.3g}" for e in errors)
                     + f"; decode at most 1.0x, no larger file and error: {verdict}")
    return lines


def bert_table(rows: list[Built]) -> list[str]:
    base = rows[0] if rows and not rows[0].error else None
    lines = [f"| model | MB | encoder 1 x {BERT_SEQ} ms | MB / {rows[0].label} | ms / {rows[0].label} "
             "| max abs err | cosine |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r.error:
            lines.append(_fail(r, 6))
            continue
        lines.append(f"| {r.label} | {r.mb:.1f} | {r.ms['encoder']:.2f} | {_ratio(r.mb, base and base.mb)} "
                     f"| {_ratio(r.ms['encoder'], base and base.ms.get('encoder'))} | {r.accuracy['max_abs']:.3g} "
                     f"| {r.accuracy['cosine']:.6f} |")
    return lines


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


def report(opts: argparse.Namespace, llama: list[Built], export_s: float, bert: list[Built]) -> str:
    runs = f"at least {bench_run.LATENCY_MIN_RUNS} runs each"
    if bench_run.LATENCY_BUDGET_S > 0:
        runs += f", then until {bench_run.LATENCY_BUDGET_S:g} s per model or {bench_run.LATENCY_MAX_RUNS} runs"
    else:
        runs = f"{bench_run.LATENCY_MIN_RUNS} runs each"
    lines = ["# Weight quantization: onnxport against onnxruntime-genai's builder (onnxruntime CPU)", ""]
    if opts.quick:
        lines += [f"**Quick mode (`--quick`): a smoke run ({opts.layers} decoder layers, {opts.bert_layers} encoder "
                  f"layers, {opts.steps} decode steps, {bench_run.LATENCY_MIN_RUNS} timed runs); not a "
                  "measurement.**", ""]
    lines += [
        f"Machine: {_cpu()}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.machine()}. torch "
        f"{torch.__version__}, onnxruntime {_version('onnxruntime')}, onnxruntime-genai {_version('onnxruntime-genai')}, "
        f"transformers {_version('transformers')}, onnx {onnx.__version__}. onnxruntime: CPU provider, "
        f"{opts.threads} intra-op threads (1 inter-op), spinning off (spinning threads of one session slow the next one timed), default graph optimisations; onnxport target {opts.target}.",
        "",
        f"Latency: median of one `InferenceSession.run`, batch 1, the rows of a table run in turn, in a new random order each round ({runs}, after 5 "
        "warm-up runs each), same inputs for every row; files saved with external data, sizes count the model file "
        "and its data files. onnxport quantizes with `prog.quantize(bits, block_size=32, symmetric=True, "
        "accuracy_level=4, form=...)`: `matmulnbits` (com.microsoft::MatMulNBits) unless the label says "
        "`dequantize` (opset 21 blocked DequantizeLinear before the float MatMul/Gemm). The builder rows are "
        "`python -m onnxruntime_genai.models.builder -p <precision> -e cpu` with its defaults, from the same "
        "weights.",
        "",
        f"## Llama-style decoder: hidden {opts.hidden}, {opts.layers} layers, {opts.heads} heads, {opts.kv_heads} KV "
        f"heads, vocab {opts.vocab}",
        "",
        f"onnxport export (float32, dynamic batch/sequence/past): {export_s:.1f} s. Accuracy against eager PyTorch "
        f"float32: a random prompt of {PROMPT} tokens, then {opts.steps} decode steps teacher-forced with the same "
        "random token ids for every model; max abs logit error over all steps, top-1 agreement = share of the "
        "steps whose argmax matches eager's (the weights are random, so the logits lie close together and top-1 "
        "is a harsh test). The builder's graph differs from onnxport's: one MatMulNBits for the fused q/k/v "
        "projections, positions computed from `attention_mask` (no `position_ids` input); its defaults leave the "
        "embedding in float and quantize the LM head, as `prog.quantize` does without `skip`.",
        "",
    ]
    lines += llama_tables(llama)
    lines += ["", "Weights of each model:", ""]
    lines += [f"- {r.label}: {r.ops}" for r in llama if not r.error]
    lines += ["", f"## BERT-base encoder: hidden 768, {opts.bert_layers} layers, batch 1 x {BERT_SEQ} tokens "
              f"(the last {BERT_PADDED} padded)", "",
              "Accuracy: `last_hidden_state` against eager PyTorch float32 (all positions).", ""]
    lines += bert_table(bert)
    lines += ["", "Weights of each model:", ""]
    lines += [f"- {r.label}: {r.ops}" for r in bert if not r.error]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=None, help="decoder layers (8; 2 with --quick)")
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--bert-layers", type=int, default=None, help="encoder layers (12; 2 with --quick)")
    parser.add_argument("--steps", type=int, default=None, help=f"teacher-forced decode steps ({STEPS}; 16 with --quick)")
    parser.add_argument("--threads", type=int, default=2, help="onnxruntime intra-op threads (and torch's)")
    parser.add_argument("--target", default="onnxruntime>=1.26", help="onnxport's target (default: onnxruntime>=1.26)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 2 decoder and 2 encoder layers, 16 decode steps, 3 timed runs per figure")
    parser.add_argument("--out", help="also write the markdown to this file")
    opts = parser.parse_args(argv)
    opts.layers = opts.layers or (2 if opts.quick else 8)
    opts.bert_layers = opts.bert_layers or (2 if opts.quick else 12)
    opts.steps = opts.steps or (16 if opts.quick else STEPS)
    if opts.quick:
        bench_run.LATENCY_MIN_RUNS, bench_run.LATENCY_BUDGET_S = 3, 0.0
    torch.set_num_threads(opts.threads)
    with tempfile.TemporaryDirectory() as workdir:
        llama, export_s = measure_llama(opts, os.path.join(workdir, "llama"))
        for row in llama:
            row.session = None  # free the decoder sessions before the encoder's
        bert = measure_bert(opts, os.path.join(workdir, "bert"))
    publish(report(opts, llama, export_s, bert), opts.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
