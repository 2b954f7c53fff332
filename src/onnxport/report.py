"""The one record of an export: stages and timings, capture attempts, warnings, verification."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["Attempt", "Report", "Stage"]

# How verification makes its inputs at other sizes (see onnxport.verify.sizes).
SIZES_HOW = "the example cut or stretched in the middle of each dynamic dim, so masks keep their padding"


@dataclasses.dataclass
class Stage:
    """One stage of the pipeline and how long it took."""

    name: str
    seconds: float = 0.0
    detail: str = ""


@dataclasses.dataclass
class Attempt:
    """One capture strategy tried, and the first line of its error when it failed."""

    strategy: str
    ok: bool
    error: str = ""


@dataclasses.dataclass
class Report:
    """What happened during one export; every stage appends to it. ``str(report)`` is for people."""

    stages: list[Stage] = dataclasses.field(default_factory=list)
    attempts: list[Attempt] = dataclasses.field(default_factory=list)
    rewrites: list[Any] = dataclasses.field(default_factory=list)
    sizes_verified: list[str] = dataclasses.field(default_factory=list)
    decomposed: dict[str, int] = dataclasses.field(default_factory=dict)
    traced_ops: dict[str, int] = dataclasses.field(default_factory=dict)  # custom ops traced through their code
    warnings: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)  # what onnxport did for the user, for the record
    blocks: list[str] = dataclasses.field(default_factory=list)  # repeated blocks captured once, or why not
    verification: Any = None
    generation: Any = None  # a decoder's generation loop against eager PyTorch (onnxport.hf.verify_loop)
    unverified: str = ""  # why the program was not compared with eager PyTorch: said on the report's first line
    quantization: Any = None  # onnxport.quantize.QuantizeResult of a quantized program, with its checks
    progress: bool = False

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[Stage]:
        """Time a stage; print one progress line when it ends if ``progress`` is on."""
        record = Stage(name)
        start = time.perf_counter()
        try:
            yield record
        finally:
            record.seconds = time.perf_counter() - start
            self.stages.append(record)
            if self.progress:
                detail = f"  {record.detail}" if record.detail else ""
                print(f"[onnxport] {name:<10} {record.seconds:7.3f}s{detail}", file=sys.stderr, flush=True)

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def branch(self) -> Report:
        """A report for another program made from the same capture: what is recorded so far, copied (the
        capture's stages, attempts, rewrites, warnings and notes); the later stages record into each alone."""
        copied = {f.name: (list(v) if isinstance(v, list) else dict(v) if isinstance(v, dict) else v)
                  for f in dataclasses.fields(self) for v in [getattr(self, f.name)]}
        return Report(**copied)

    @property
    def total_seconds(self) -> float:
        return sum(s.seconds for s in self.stages)

    def __str__(self) -> str:
        skipped = getattr(self.verification, "skipped", "")  # onnxruntime could not run the model here
        why = self.unverified or skipped
        lines = [f"onnxport export report: NOT VERIFIED ({why})" if why else "onnxport export report"]
        for s in self.stages:
            lines.append(f"  {s.name:<10} {s.seconds:7.3f}s  {s.detail}".rstrip())
        lines.append(f"  {'total':<10} {self.total_seconds:7.3f}s")
        if self.attempts:
            lines.append("capture attempts:")
            for a in self.attempts:
                status = "ok" if a.ok else f"failed: {a.error}"
                lines.append(f"  {a.strategy}: {status}")
        if self.rewrites:
            lines.append(f"source rewritten for capture, during export only ({len(self.rewrites)}):")
            lines.extend("  " + str(r).replace("\n", "\n  ") for r in self.rewrites)
        if self.decomposed:
            ops = ", ".join(f"{k} x{v}" for k, v in sorted(self.decomposed.items()))
            lines.append(f"decomposed (no direct translation): {ops}")
        if self.traced_ops:
            ops = ", ".join(f"{k} x{v}" for k, v in sorted(self.traced_ops.items()))
            lines.append(f"custom ops traced through their implementation (no translation registered): {ops}")
        if self.blocks:
            lines.append("repeated blocks:")
            lines.extend(f"  - {b}" for b in self.blocks)
        if self.notes:
            lines.append("notes:")
            lines.extend(f"  - {n}" for n in self.notes)
        if self.warnings:
            lines.append("warnings:")
            lines.extend(f"  - {w}" for w in self.warnings)
        if self.verification is not None:
            lines.append(str(self.verification))
        if self.generation is not None:
            lines.append(str(self.generation))
        if self.sizes_verified:
            lines.append(f"other sizes verified ({SIZES_HOW}): " + "; ".join(self.sizes_verified))
        if self.quantization is not None:
            lines.append(f"quantized: {self.quantization}")
        return "\n".join(lines)
