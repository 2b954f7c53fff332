"""OpInfo census: every entry of torch's ``op_db``, per dtype, through ``onnxport.export``.

For each entry and dtype, the first ``--samples`` samples (tensors as inputs, other arguments baked in) are
exported, run in onnxruntime and compared with eager PyTorch. An entry counts as *matched* when every sample
that eager accepts exports and matches; *refused* when onnxport refuses one (an op without a translation, an
argument ONNX cannot express); *not capturable* when torch.export itself refuses; *mismatch* when a sample
exports but differs; *eager fails* when eager refuses every sample (no sample to compare). Coverage is
matched / (entries with a sample eager runs, minus those torch.export cannot capture).

    python bench/opinfo.py --dtypes float32 --out bench/opinfo.md
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import os
import sys
import time
import warnings

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import onnxport  # noqa: E402
from tests.opinfo_census import DTYPES, census_entry  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", nargs="+", default=["float32"], choices=sorted(DTYPES))
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--only", nargs="*", default=None, help="entry names (name or name.variant)")
    parser.add_argument("--out", default=None, help="markdown summary")
    parser.add_argument("--json", default=None, help="per-entry results")
    ns = parser.parse_args()
    from torch.testing._internal.common_methods_invocations import op_db

    rows: dict[str, dict[str, dict]] = collections.defaultdict(dict)
    start = time.perf_counter()
    for dtype_name in ns.dtypes:
        dtype = DTYPES[dtype_name]
        for info in op_db:
            key = f"{info.name}.{info.variant_test_name}" if info.variant_test_name else info.name
            if ns.only and key not in ns.only:
                continue
            result = census_entry(info, dtype, ns.samples)
            if result is not None:
                rows[dtype_name][key] = result
        print(f"{dtype_name}: {len(rows[dtype_name])} entries, {time.perf_counter() - start:.0f}s", file=sys.stderr)
    lines = [f"OpInfo census: torch {torch.__version__}, onnxport {onnxport.__version__}, first {ns.samples} "
             "samples per entry, tensors as inputs; coverage = matched / (entries eager runs that torch.export "
             "captures).", "", "| dtype | entries | matched | refused | mismatch | not capturable | eager fails | "
             "coverage |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for dtype_name, entries in rows.items():
        counts = collections.Counter(r["status"] for r in entries.values())
        base = len(entries) - counts["eager fails"] - counts["not capturable"]
        lines.append(f"| {dtype_name} | {len(entries)} | {counts['matched']} | {counts['refused']} | "
                     f"{counts['mismatch']} | {counts['not capturable']} | {counts['eager fails']} | "
                     f"{100 * counts['matched'] / max(base, 1):.1f}% |")
    for dtype_name, entries in rows.items():
        missing = collections.Counter(op for r in entries.values() if r["status"] == "refused" for op in r["ops"])
        lines += ["", f"{dtype_name}: most common reasons for refusal: " +
                  ", ".join(f"{op} ({n})" for op, n in missing.most_common(40))]
    text = "\n".join(lines)
    print(text)
    if ns.out:
        with open(ns.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    if ns.json:
        with open(ns.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    warnings.simplefilter("ignore")
    main()
