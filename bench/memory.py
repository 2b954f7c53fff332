"""Peak memory of exporting a ~1.9 GB float32 Llama checkpoint: ``onnxport export-hf --streaming`` (weights streamed
from the safetensors files) against ``torch.onnx.export(dynamo=True)`` on the model loaded by transformers.

    python bench/memory.py                        # hidden 2048, 8 layers: 1.93 GB of float32 weights
    python bench/memory.py --layers 2 --out /tmp/memory.md

The checkpoint is written once into ``--dir`` (random weights, sharded safetensors with an index, as
``save_pretrained`` writes it; one shard in memory at a time) and deleted afterwards unless ``--keep``.
Each exporter runs in a fresh subprocess, which imports what it needs, resets its peak-RSS counter
(``/proc/self/clear_refs``), notes its RSS, then exports and saves; the figure is the peak RSS
(``VmHWM``) minus the RSS after imports, over the bytes of the weights. Both export the decode step
``export-hf`` exports (``past_key_values`` in, ``present`` out), torch.onnx with static shapes. A last
subprocess runs onnxport's saved model in onnxruntime on a 7-token prompt and compares its logits with
transformers' on the same checkpoint.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

import torch

SHARD_BYTES = 512 * 2**20


def write_checkpoint(directory: str, hidden: int, layers: int, vocab: int) -> int:
    """A Llama checkpoint directory with random weights, written shard by shard; returns the weights' bytes."""
    import transformers
    from safetensors.torch import save_file

    config = transformers.LlamaConfig(hidden_size=hidden, intermediate_size=hidden * 11 // 4, num_hidden_layers=layers,
                                      num_attention_heads=hidden // 64, num_key_value_heads=max(1, hidden // 512),
                                      vocab_size=vocab, max_position_embeddings=4096, tie_word_embeddings=False,
                                      bos_token_id=1, eos_token_id=2, pad_token_id=0, dtype="float32")
    with torch.device("meta"):
        shapes = {k: v.shape for k, v in transformers.LlamaForCausalLM(config).state_dict().items()}
    os.makedirs(directory, exist_ok=True)
    generator = torch.Generator().manual_seed(0)
    shards: list[dict[str, torch.Tensor]] = [{}]
    total, size, names = 0, 0, {}
    files: list[str] = []

    def flush() -> None:
        name = f"model-{len(files) + 1:05d}.safetensors"
        save_file(shards[0], os.path.join(directory, name), metadata={"format": "pt"})
        names.update(dict.fromkeys(shards[0], name))
        files.append(name)
        shards[0] = {}

    for key, shape in shapes.items():
        tensor = torch.ones(shape) if len(shape) == 1 else torch.randn(shape, generator=generator) * 0.02
        if size and size + tensor.nbytes > SHARD_BYTES:
            flush()
            size = 0
        shards[0][key] = tensor
        size += tensor.nbytes
        total += tensor.nbytes
    flush()
    count = len(files)  # the names save_pretrained gives: model-00001-of-0000N.safetensors
    final = {f: f.replace(".safetensors", f"-of-{count:05d}.safetensors") for f in files}
    for old, new in final.items():
        os.replace(os.path.join(directory, old), os.path.join(directory, new))
    index = {"metadata": {"total_size": total}, "weight_map": {k: final[v] for k, v in names.items()}}
    with open(os.path.join(directory, "model.safetensors.index.json"), "w", encoding="utf-8") as f:
        json.dump(index, f, indent=2)
    config.save_pretrained(directory)
    return total


def _memory() -> dict[str, int]:
    fields = {}
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                fields[line.split(":")[0]] = int(line.split()[1]) * 1024
    return fields


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")  # resets VmHWM to the current RSS
        return True
    except OSError:
        return False


def measure(exporter: str, directory: str, out: str) -> dict[str, object]:
    """Run in the subprocess: import, note the RSS, export and save; the peak beyond the RSS after imports."""
    import transformers  # noqa: F401 - both exporters need it; its import is not the export's memory

    if exporter == "onnxport":
        from onnxport.cli import main
    else:
        import onnxscript  # noqa: F401
        import torch.onnx  # noqa: F401

        import onnxport  # noqa: F401 - its cache registration and example inputs, imported before the count
    reset = _reset_peak()
    before = _memory()["VmRSS"]
    start = time.perf_counter()
    if exporter == "onnxport":
        code = main(["export-hf", directory, "-o", out, "-q", "--streaming"])
        assert code == 0
    else:
        _torch_onnx(directory, out)
    seconds = time.perf_counter() - start
    peak = _memory()["VmHWM"]
    return {"imports": before, "peak": peak, "beyond": peak - before, "seconds": seconds, "reset": reset}


def _torch_onnx(directory: str, out: str) -> None:
    import transformers

    from onnxport.hf.cache import registered as transformers_caches
    from onnxport.hf.examples import generation_inputs

    model = transformers.AutoModelForCausalLM.from_pretrained(directory).eval()
    inputs = generation_inputs(model, model.config)
    os.makedirs(out, exist_ok=True)
    with transformers_caches(), torch.no_grad():
        prog = torch.onnx.export(model, (), kwargs=inputs, dynamo=True, verbose=False, optimize=True)
        prog.save(os.path.join(out, "model.onnx"), external_data=True)


def logits_error(directory: str, out: str) -> dict[str, float]:
    """Run in a subprocess: onnxport's saved model in onnxruntime against transformers, prompt of 7 tokens."""
    import numpy as np
    import onnxruntime as ort
    import transformers

    vocab = transformers.AutoConfig.from_pretrained(directory).vocab_size
    ids = torch.randint(3, vocab, (1, 7), generator=torch.Generator().manual_seed(3))
    session = ort.InferenceSession(os.path.join(out, "model.onnx"), providers=["CPUExecutionProvider"])
    feeds = {"input_ids": ids.numpy(), "attention_mask": np.ones((1, 7), np.int64), "position_ids": np.arange(7)[None]}
    for i in session.get_inputs():
        if i.name.startswith("past_key_values"):
            feeds[i.name] = np.zeros((1, i.shape[1], 0, i.shape[3]), np.float32)
    got = torch.from_numpy(session.run(["logits"], feeds)[0])
    del session
    model = transformers.AutoModelForCausalLM.from_pretrained(directory).eval()
    with torch.no_grad():
        expected = model(input_ids=ids).logits
    return {"max_abs": float((got - expected).abs().max()), "scale": float(expected.abs().max())}


def _subprocess(*args: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return {"error": " | ".join(tail)[:400]}
    return json.loads(lines[-1])


def _run(exporter: str, directory: str, workdir: str) -> dict[str, object]:
    out = os.path.join(workdir, f"out-{exporter}")
    result = _subprocess("--measure", exporter, directory, out)
    if exporter == "onnxport" and "error" not in result:
        result["logits"] = _subprocess("--logits", directory, out)
    shutil.rmtree(out, ignore_errors=True)
    return result


def table(results: dict[str, dict[str, object]], weights: int, args: argparse.Namespace) -> str:
    gb = 1e9
    lines = [
        "# Peak memory of an export: onnxport export-hf vs torch.onnx",
        "",
        f"Llama, hidden {args.hidden}, {args.layers} layers, vocab {args.vocab}, float32: "
        f"{weights / gb:.2f} GB of weights in {args.shards} safetensors shards. "
        f"torch {torch.__version__}, {platform.machine()}, {os.cpu_count()} cores. `make bench-memory`.",
        "",
        "| exporter | what it does | peak RSS beyond imports (GB) | / weights | export + save (s) |",
        "|---|---|---|---|---|",
    ]
    what = {"onnxport": "`onnxport export-hf DIR --streaming` (weights streamed, never loaded)",
            "torch.onnx": "`from_pretrained`, then `torch.onnx.export(dynamo=True)`, saved with external data"}
    for name, r in results.items():
        if "error" in r:
            lines.append(f"| {name} | {what[name]} | fail: {r['error']} | n/a | n/a |")
            continue
        lines.append(f"| {name} | {what[name]} | {r['beyond'] / gb:.2f} | {r['beyond'] / weights:.2f}x | "
                     f"{r['seconds']:.1f} |")
    lines += ["", "Peak RSS (`VmHWM`) minus the RSS right after imports, in a fresh process per exporter; "
              "weights = the bytes of the safetensors tensors."]
    check = results.get("onnxport", {}).get("logits")
    if check:
        text = (f"fail: {check['error']}" if "error" in check else
                f"{check['max_abs']:.2e} (largest logit {check['scale']:.2f})")
        lines += ["", f"onnxport's model in onnxruntime vs transformers on the same checkpoint, 7-token prompt: "
                  f"max abs logits error {text}."]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measure", nargs=3, metavar=("EXPORTER", "DIR", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--logits", nargs=2, metavar=("DIR", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--dir", default=None, help="where to write the checkpoint (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the checkpoint afterwards")
    parser.add_argument("--exporters", default="onnxport,torch.onnx")
    parser.add_argument("--out", default=None, help="also write the table to this markdown file")
    args = parser.parse_args(argv)
    if args.measure or args.logits:
        print(json.dumps(measure(*args.measure) if args.measure else logits_error(*args.logits)), flush=True)
        return 0
    workdir = tempfile.mkdtemp(prefix="onnxport-memory-")
    directory = args.dir or os.path.join(workdir, "llama")
    try:
        print(f"writing the checkpoint to {directory}", file=sys.stderr, flush=True)
        weights = write_checkpoint(directory, args.hidden, args.layers, args.vocab)
        args.shards = len([f for f in os.listdir(directory) if f.endswith(".safetensors")])
        results = {}
        for exporter in args.exporters.split(","):
            print(f"measuring {exporter}", file=sys.stderr, flush=True)
            results[exporter] = _run(exporter, directory, workdir)
        text = table(results, weights, args)
        print(text)
        if args.out:
            with open(args.out, "w", encoding="utf-8") as f:
                f.write(text)
    finally:
        if not args.keep:
            shutil.rmtree(directory, ignore_errors=True)
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
