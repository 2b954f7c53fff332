"""The rounding of weight-only quantization: a weight's blocks as integer codes, scales and zero points (round
to nearest, over the range of least squared error), the weight they stand for, and codes packed two a byte.
Numpy alone: ``weights`` (the graph rewrite), ``gptq`` (its calibrated rounding) and the translation of
quantized ops build on it."""

from __future__ import annotations

import numpy as np

from onnxport.errors import InvalidInputError

__all__ = ["FORMS", "check_options", "dequantized", "pack_codes", "quantize_blocks", "quantize_rows"]

FORMS = ("matmulnbits", "dequantize")


def check_options(bits: int, block_size: int, form: str, accuracy_level: int) -> None:
    if bits not in (4, 8):
        raise InvalidInputError(f"bits must be 4 or 8, not {bits!r}", fix="pass bits=4 or bits=8")
    if not isinstance(block_size, int) or block_size < 16 or block_size > 256 or block_size & (block_size - 1):
        raise InvalidInputError(f"block_size must be a power of two from 16 to 256, not {block_size!r}",
                                fix="pass block_size=32 (the usual choice), 16, 64, 128 or 256")
    if form not in FORMS:
        raise InvalidInputError(f"form must be one of {', '.join(FORMS)}, not {form!r}",
                                fix="pass form='matmulnbits' for onnxruntime, form='dequantize' for other runtimes")
    if accuracy_level not in (0, 1, 2, 3, 4):
        raise InvalidInputError(f"accuracy_level must be 0 to 4, not {accuracy_level!r}",
                                fix="pass accuracy_level=4 (int8 activations: fastest on CPU) or 0 (float)")


def quantize_blocks(w: np.ndarray, bits: int, block_size: int, symmetric: bool
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``w`` ``[N, K]`` (float64) as unsigned codes ``[N, blocks, block_size]`` (K zero-padded), scales
    ``[N, blocks]`` and, asymmetric, zero points ``[N, blocks]``; a value is ``(code - zero) * scale``,
    the zero being ``2**(bits-1)`` when symmetric."""
    n, k = w.shape
    blocks = -(-k // block_size)
    padded = np.zeros((n, blocks * block_size), dtype=np.float64)
    padded[:, :k] = w
    grouped = padded.reshape(n, blocks, block_size)
    top = (1 << bits) - 1
    best: tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray] | None = None
    for shrink in _SHRINKS:  # per block, the range whose rounding loses the least (squared error)
        codes, scales, zeros = _round(grouped, bits, top, symmetric, shrink)
        zero = (1 << (bits - 1)) if zeros is None else zeros[..., None]
        error = np.square((codes - zero) * scales[..., None] - grouped).sum(-1)
        if best is None:
            best = (codes, scales, zeros, error)
            continue
        better = error < best[3]
        best = (np.where(better[..., None], codes, best[0]), np.where(better, scales, best[1]),
                None if zeros is None else np.where(better, zeros, best[2]), np.minimum(error, best[3]))
    codes, scales, zeros, _ = best
    return codes.astype(np.uint8), scales, None if zeros is None else zeros.astype(np.uint8)


# The ranges tried per block, as fractions of its full one: rounding to a slightly narrower range clips
# the extreme value a little and rounds every other value finer; the one of least squared error wins
# (the full range when nothing beats it). Measured on random weights, blocks of 32: int4 2-7% less squared
# error (uniform Linear init, normal(0, 0.02)), int8 none.
_SHRINKS = (1.0, 0.95, 0.9, 0.85, 0.8)


def _round(grouped: np.ndarray, bits: int, top: int, symmetric: bool, shrink: float
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Codes (float), scales and zero points (float, None when symmetric) of each block over ``shrink``
    times its range."""
    if symmetric:
        middle = 1 << (bits - 1)
        extreme = np.take_along_axis(grouped, np.abs(grouped).argmax(-1)[..., None], -1)[..., 0]
        scales = extreme * shrink / -middle  # at full range the largest magnitude lands on -middle exactly
        scales[scales == 0] = 1.0
        return np.clip(np.rint(grouped / scales[..., None]) + middle, 0, top), scales, None
    low = np.minimum(grouped.min(-1), 0.0) * shrink
    high = np.maximum(grouped.max(-1), 0.0) * shrink
    scales = (high - low) / top
    scales[scales == 0] = 1.0
    zeros = np.clip(np.rint(-low / scales), 0, top)
    return np.clip(np.rint(grouped / scales[..., None]) + zeros[..., None], 0, top), scales, zeros


_ROWS_AT_ONCE = 1 << 21  # values rounded per pass: the float64 working copies stay within ~100 MB


def quantize_rows(w_nk: np.ndarray, bits: int, block_size: int, symmetric: bool
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``quantize_blocks`` a few rows at a time (each row's blocks are independent), so that quantizing a large
    weight (an LM head of a 128k vocabulary) does not hold several float64 copies of it."""
    step = max(1, _ROWS_AT_ONCE // max(1, w_nk.shape[1]))
    parts = [quantize_blocks(w_nk[i:i + step].astype(np.float64), bits, block_size, symmetric)
             for i in range(0, w_nk.shape[0], step)]
    zeros = None if parts[0][2] is None else np.concatenate([p[2] for p in parts])
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]), zeros


def dequantized(codes: np.ndarray, scales: np.ndarray, zeros: np.ndarray | None, bits: int, k: int) -> np.ndarray:
    """The ``[N, K]`` float64 weight the codes stand for (for tests and error reports)."""
    zero = (1 << (bits - 1)) if zeros is None else zeros[..., None].astype(np.float64)
    values = (codes.astype(np.float64) - zero) * scales[..., None]
    return values.reshape(codes.shape[0], -1)[:, :k]


def pack_codes(codes: np.ndarray, bits: int) -> np.ndarray:
    """Codes packed along the last axis, low bits first (two int4 codes a byte)."""
    if bits == 8:
        return codes
    if codes.shape[-1] % 2:
        codes = np.concatenate([codes, np.zeros(codes.shape[:-1] + (1,), dtype=np.uint8)], axis=-1)
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)
