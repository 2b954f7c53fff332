"""OpInfo census: every entry of torch's ``op_db``, per dtype, through ``onnxport.export``.

For each entry and dtype, the first ``--samples`` samples (tensors as inputs, other arguments baked in) are
exported, run in onnxruntime and compared with eager PyTorch (``tests/opinfo_census.py`` says how each entry
is counted). Coverage is (matched + random) / (entries with a sample eager runs, minus those torch.export
cannot capture); random entries are random ops, whose outputs are checked by shape and dtype.

    python bench/opinfo.py --dtypes float32 --out bench/opinfo.md
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
import warnings

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import onnxport  # noqa: E402
from tests.opinfo_census import DTYPES, census_entry, ci_dtype, entry_key  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", nargs="+", default=["float32"], choices=sorted(DTYPES) + ["ci"],
                        help="ci: float32, else int64, else bool, per entry (what tests/test_opinfo.py runs)")
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--only", nargs="*", default=None, help="entry names (name or name.variant)")
    parser.add_argument("--out", default=None, help="markdown summary")
    parser.add_argument("--json", default=None, help="per-entry results")
    parser.add_argument("--write-expected", default=None, metavar="FILE",
                        help="write the entries that do not match (first dtype) as tests/opinfo_expected.py")
    ns = parser.parse_args()
    from torch.testing._internal.common_methods_invocations import op_db

    rows: dict[str, dict[str, dict]] = collections.defaultdict(dict)
    start = time.perf_counter()
    for dtype_name in ns.dtypes:
        for info in op_db:
            key = entry_key(info)
            if ns.only and key not in ns.only:
                continue
            dtype = DTYPES.get(dtype_name) or ci_dtype(info)
            if dtype is None:
                continue
            result = census_entry(info, dtype, ns.samples)
            if result is not None:
                rows[dtype_name][key] = result
        print(f"{dtype_name}: {len(rows[dtype_name])} entries, {time.perf_counter() - start:.0f}s", file=sys.stderr)
    lines = [f"OpInfo census: torch {torch.__version__}, onnxport {onnxport.__version__}, first {ns.samples} "
             "samples per entry, tensors as inputs; coverage = (matched + random) / (entries eager runs that "
             "torch.export captures); random: outputs of random ops, checked by shape and dtype.", "",
             "| dtype | entries | matched | random | refused | mismatch | not capturable | eager fails | coverage |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for dtype_name, entries in rows.items():
        counts = collections.Counter(r["status"] for r in entries.values())
        base = len(entries) - counts["eager fails"] - counts["not capturable"]
        good = counts["matched"] + counts["random"]
        lines.append(f"| {dtype_name} | {len(entries)} | {counts['matched']} | {counts['random']} | "
                     f"{counts['refused']} | {counts['mismatch']} | {counts['not capturable']} | "
                     f"{counts['eager fails']} | {100 * good / max(base, 1):.1f}% |")
    for dtype_name, entries in rows.items():
        missing = collections.Counter(op for r in entries.values() if r["status"] == "refused" for op in r["ops"])
        lines += ["", f"{dtype_name}: most common reasons for refusal: " +
                  ", ".join(f"{op} ({n})" for op, n in missing.most_common(40))]
    text = "\n".join(lines)
    print(text)
    if ns.out:
        with open(ns.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    if ns.write_expected:
        _write_expected(ns.write_expected, rows[ns.dtypes[0]])
    if ns.json:
        with open(ns.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1, sort_keys=True)


def _write_expected(path: str, entries: dict[str, dict]) -> None:
    lines = ['"""The OpInfo entries that do not match eager today, with their outcome: ``tests/test_opinfo.py`` fails',
             'when an entry not listed stops matching, when a listed one changes outcome, and when a listed one',
             'matches (remove it then). Written by ``python bench/opinfo.py --write-expected``."""', "",
             "EXPECTED = {"]
    for key, r in sorted(entries.items()):
        if r["status"] in ("matched", "random", "eager fails"):
            continue
        reason = ", ".join(r["ops"]) or r["detail"]
        lines.append(f"    {key!r}: {(r['status'] + ': ' + reason)[:110]!r},")
    lines.append("}")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    warnings.simplefilter("ignore")
    main()
