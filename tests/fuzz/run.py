"""Run the fuzz check over a range of seeds and print a summary: outcomes, then the failures (and the
refusals) grouped by cause, with the smallest seed of each group and a command reproducing it.

    python -m tests.fuzz.run --start 0 --count 300
    python -m tests.fuzz.run --start 0 --count 300 --json out.json    # every outcome, for comparisons
    python -m tests.fuzz.run --seeds 22 57 --no-verify    # export unverified: are these refusals justified?
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import sys
import time

from tests.fuzz.check import Outcome, check_seeds


def summary(outcomes: list[Outcome], seconds: float | None = None, *, show_refused: bool = True) -> str:
    counts = collections.Counter(o.status for o in outcomes)
    static = [o for o in outcomes if o.seed % 2 == 0]
    dynamic = [o for o in outcomes if o.seed % 2 == 1]
    lines = [f"{len(outcomes)} programs ({len(static)} static, {len(dynamic)} dynamic)"
             + (f" in {seconds:.1f} s ({seconds / max(1, len(outcomes)):.2f} s each)" if seconds is not None else "")]
    lines.append(f"  {'':10s} {'all':>5s} {'static':>7s} {'dynamic':>8s}")
    for status in ("matched", "refused", "failed"):
        lines.append(f"  {status:10s} {counts[status]:5d} {sum(o.status == status for o in static):7d} "
                     f"{sum(o.status == status for o in dynamic):8d}")
    for status in ("failed", "refused") if show_refused else ("failed",):
        groups: dict[str, list[Outcome]] = collections.defaultdict(list)
        for o in outcomes:
            if o.status == status:
                groups[o.cause].append(o)
        if not groups:
            continue
        lines.append("")
        lines.append(f"{status}, by cause:")
        for cause, members in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            first = min(members, key=lambda o: o.seed)
            seeds = ", ".join(str(o.seed) for o in sorted(members, key=lambda o: o.seed)[:20])
            more = f" (+{len(members) - 20})" if len(members) > 20 else ""
            lines.append(f"  {len(members):4d}  {cause}")
            lines.append(f"        seeds: {seeds}{more}")
            lines.append(f"        smallest: python -m tests.fuzz.check --seed {first.seed}")
            lines.append(f"          program: {first.description[:300]}")
            lines.append(f"          {first.detail[:400]}")
    timed = [o for o in outcomes if o.export_s]
    if timed:
        lines.append("")
        lines.append(f"time per program: export {sum(o.export_s for o in timed) / len(timed):.3f} s, eager "
                     f"{sum(o.eager_s for o in timed) / len(timed):.3f} s, onnxruntime "
                     f"{sum(o.ort_s for o in timed) / len(timed):.3f} s (mean); slowest export "
                     f"{max(o.export_s for o in timed):.2f} s (seed {max(timed, key=lambda o: o.export_s).seed})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--seeds", type=int, nargs="+", help="these seeds instead of a range")
    parser.add_argument("--no-verify", action="store_true", help="export with verify=False (see check.py)")
    parser.add_argument("--json", help="write every outcome to this file")
    parser.add_argument("--progress", action="store_true", help="one line per program on stderr")
    ns = parser.parse_args(argv)
    start = time.perf_counter()
    seeds = ns.seeds if ns.seeds else range(ns.start, ns.start + ns.count)
    options = {"verify": False} if ns.no_verify else {}
    outcomes = check_seeds(seeds, progress=ns.progress, **options)
    seconds = time.perf_counter() - start
    print(summary(outcomes, seconds))
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump([dataclasses.asdict(o) for o in outcomes], f, indent=1)
    return 1 if any(o.status == "failed" for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
