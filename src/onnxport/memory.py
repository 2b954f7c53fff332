"""How much memory the machine has free, and whether a model's weights fit in it comfortably."""

from __future__ import annotations

import os

__all__ = ["LOAD_FACTOR", "available_memory", "fits", "gib"]

# A loaded export holds the weights about three times at its peak: the eager model, the ONNX model's copy while
# it is serialised, and onnxruntime's session in the verification's child process.
LOAD_FACTOR = 3
SPARE = 1 << 30  # and leaves a GiB for everything else


def available_memory() -> int | None:
    """Bytes of memory free for new work (Linux's MemAvailable, else the free pages), or None."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def fits(nbytes: int, available: int | None = None) -> bool:
    """Whether weights of ``nbytes`` can be loaded and verified with memory to spare (unknown memory: only
    weights under 2 GiB)."""
    available = available_memory() if available is None else available
    if available is None:
        return nbytes < 2 << 30
    return LOAD_FACTOR * nbytes + SPARE <= available


def gib(nbytes: int) -> str:
    return f"{nbytes / (1 << 30):.1f} GiB"
