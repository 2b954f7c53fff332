"""GPTQ: weight-only int4/int8 quantization that uses calibration data to lower each layer's output error.

Round to nearest (``kernels.quantize_blocks``) rounds every weight on its own. GPTQ (Frantar et al., 2022,
"GPTQ: Accurate Post-Training Quantization for Generative Pre-trained Transformers") rounds the weight
``W`` ``[N, K]`` of a linear layer one input column at a time and, after each, moves the rounding error
onto the columns not yet rounded so that the layer's output on the calibration inputs ``X`` ``[rows, K]``
changes least: it minimises ``||X W^T - X Wq^T||^2`` greedily, with the Hessian of that loss,
``H = 2 X^T X / rows``, telling how an error in one column can be made up by the others. The update for
column ``j`` is ``W[:, j+1:] -= err_j * U[j, j+1:]`` with ``err_j = (w_j - q_j) / U[j, j]``, where ``U``
is the upper Cholesky factor of ``H^-1`` (``H^-1 = U^T U``), computed once. Updates are applied lazily,
a batch of columns at a time, as one matrix product for the columns after the batch.

The codes have exactly the layout of ``kernels.quantize_blocks``: ``block_size`` consecutive input columns share
a scale (and, asymmetric, a zero point), fixed when GPTQ reaches the block's first column, from the
block's weights as the updates so far have left them, with the same formula as round to nearest. So the
same writers store them as ``MatMulNBits`` or blocked ``DequantizeLinear``, and with ``H`` the identity
(no column informs another) GPTQ's codes are round to nearest's.

``collect_hessians`` runs the exported model in onnxruntime over calibration feeds (``calibrate.collect``)
and accumulates ``X^T X`` of the inputs of the linear layers, one feed at a time; ``calibrated_codes``
quantizes every linear layer of a model with them. All Hessians come from one pass of the float model (the
paper feeds each block the outputs of the blocks quantized before it; on a 2-layer Llama doing so moved the
logits' mean error by 3% at most, either way).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir

from onnxport.errors import InvalidInputError
from onnxport.quantize.calibrate import collect
from onnxport.quantize.layers import linear_layers, shared
from onnxport.quantize.kernels import check_options, quantize_blocks

__all__ = ["calibrated_codes", "collect_hessians", "gptq_quantize"]

_BATCH = 128  # columns per lazy update (a multiple of every block size up to 128)


def gptq_quantize(w_nk: np.ndarray, hessian: np.ndarray, bits: int, block_size: int, symmetric: bool, *,
                  damp: float = 0.01, act_order: bool = False
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """GPTQ codes of ``w_nk`` ``[N, K]`` for calibration Hessian ``hessian`` ``[K, K]`` (``2 X^T X / rows``
    or any positive multiple of it), as ``kernels.quantize_blocks`` lays them out: codes ``[N, blocks,
    block_size]`` (uint8, K padded with the zero point's code), scales ``[N, blocks]`` (float64) and,
    asymmetric, zero points ``[N, blocks]`` (uint8), else None.

    ``damp`` adds ``damp * mean(diag(H))`` to ``H``'s diagonal (it keeps ``H`` invertible and the updates
    tame). An input that never fired (``H[i, i] == 0``) gets weight 0. ``act_order`` rounds the columns in
    order of decreasing ``H[i, i]`` (the inputs with most energy first, while the most columns are left
    to absorb their error); a block's scale is then fixed when its first column in that order is reached.
    """
    check_options(bits, block_size, "matmulnbits", 0)
    w = np.array(w_nk, dtype=np.float64)  # a copy: updated in place
    h = np.array(hessian, dtype=np.float64)
    if w.ndim != 2 or w.shape[1] == 0:
        raise InvalidInputError(f"the weight must be 2-D [N, K] with K > 0, not of shape {w.shape}",
                                fix="pass the layer's weight as [out features, in features]")
    n, k = w.shape
    if h.shape != (k, k):
        raise InvalidInputError(f"the Hessian must be [K, K] = [{k}, {k}] for a weight of shape {w.shape}, "
                                f"not {h.shape}", fix="pass 2 X^T X / rows of the layer's inputs X [rows, K]")
    if not (np.isfinite(w).all() and np.isfinite(h).all()):
        raise InvalidInputError("the weight or the Hessian holds NaN or infinity",
                                fix="check the model's weights and the calibration inputs")
    if not (isinstance(damp, (int, float)) and 0 < damp < 1):
        raise InvalidInputError(f"damp must be a number in (0, 1), not {damp!r}", fix="pass damp=0.01 (the usual)")

    diag = np.diag(h).copy()
    dead = diag <= 0
    h[dead, dead] = 1.0
    w[:, dead] = 0.0
    order = np.argsort(-np.diag(h), kind="stable") if act_order else np.arange(k)
    w = w[:, order]
    h = h[np.ix_(order, order)]
    u = _inverse_cholesky(h, damp)

    blocks = -(-k // block_size)
    top = (1 << bits) - 1
    middle = 1 << (bits - 1)
    scales = np.ones((n, blocks), dtype=np.float64)
    zero_codes = np.zeros((n, blocks), dtype=np.float64)  # a block's zero as a code (middle, symmetric)
    reached = np.zeros(blocks, dtype=bool)
    position = np.empty(k, dtype=np.int64)  # where each original column sits in the rounding order
    position[order] = np.arange(k)
    codes = np.zeros((n, blocks * block_size), dtype=np.uint8)

    for start in range(0, k, _BATCH):
        end = min(start + _BATCH, k)
        batch = w[:, start:end].copy()
        errors = np.zeros_like(batch)
        for t in range(end - start):
            j = start + t
            block = int(order[j]) // block_size
            if not reached[block]:
                reached[block] = True
                members = position[block * block_size:min((block + 1) * block_size, k)]  # all at j or later
                current = np.empty((n, members.size), dtype=np.float64)
                inside = members < end
                current[:, inside] = batch[:, members[inside] - start]
                outside = members[~inside]  # after this batch: its pending updates added
                current[:, ~inside] = w[:, outside] - errors[:, :t] @ u[start:j, outside]
                _, block_scales, block_zeros = quantize_blocks(current, bits, block_size, symmetric)
                scales[:, block] = block_scales[:, 0]
                zero_codes[:, block] = middle if block_zeros is None else block_zeros[:, 0]
            scale, zero = scales[:, block], zero_codes[:, block]
            column = batch[:, t]
            q = np.clip(np.rint(column / scale) + zero, 0, top)
            codes[:, order[j]] = q
            error = (column - (q - zero) * scale) / u[j, j]
            batch[:, t + 1:] -= np.outer(error, u[j, j + 1:end])
            errors[:, t] = error
        w[:, end:] -= errors @ u[start:end, end:]

    codes[:, k:] = zero_codes[:, -1:].astype(np.uint8)  # the padding holds 0, as round to nearest's
    codes = codes.reshape(n, blocks, block_size)
    return codes, scales, (None if symmetric else zero_codes.astype(np.uint8))


def _inverse_cholesky(h: np.ndarray, damp: float) -> np.ndarray:
    """The upper Cholesky factor ``U`` of ``(H + damp * mean(diag H) * I)^-1`` (``U^T U``); the damping
    grows tenfold, up to three times, while the dampened ``H`` is not numerically positive definite."""
    k = h.shape[0]
    mean = float(np.mean(np.diag(h)))
    for attempt in range(4):
        dampened = h + np.eye(k) * (damp * 10 ** attempt * mean)
        try:
            lower = np.linalg.cholesky(dampened)
            inverse = np.linalg.inv(lower)  # H^-1 = L^-T L^-1
            return np.linalg.cholesky(inverse.T @ inverse).T
        except np.linalg.LinAlgError:
            continue
    raise InvalidInputError("the calibration Hessian is not positive definite even with ten times more damping",
                            fix="pass more (and more varied) calibration feeds, or a larger damp")


def collect_hessians(model: ir.Model, feeds: Sequence[dict[str, np.ndarray]], values: Sequence[str]
                     ) -> dict[str, np.ndarray]:
    """``H = 2 X^T X / rows`` (float64 ``[K, K]``) for each value named in ``values`` (the inputs of
    linear layers), ``X`` being the value over all ``feeds`` flattened to ``[rows, K]`` (rows: all its
    leading dims), accumulated one run at a time."""

    def gram(name: str, array: np.ndarray, state: tuple[np.ndarray, int] | None) -> tuple[np.ndarray, int]:
        if array.ndim == 0:
            raise InvalidInputError(f"{name!r} is a scalar, not a linear layer's input",
                                    fix="name values of rank 1 or more: [..., K]")
        x = array.reshape(-1, array.shape[-1]).astype(np.float64)
        total, rows = state if state is not None else (np.zeros((x.shape[1], x.shape[1])), 0)
        total += x.T @ x
        return total, rows + x.shape[0]

    grams = collect(model, feeds, values, gram)
    empty = [name for name, (_, rows) in grams.items() if rows == 0]
    if empty:
        raise InvalidInputError(f"the calibration feeds gave no rows for {', '.join(map(repr, empty[:5]))}",
                                fix="feed non-empty inputs (batch and sequence of at least 1)")
    return {name: 2.0 * total / rows for name, (total, rows) in grams.items()}


def calibrated_codes(model: ir.Model, feeds: Sequence[dict[str, np.ndarray]], bits: int, block_size: int,
                     symmetric: bool, *, damp: float = 0.01, act_order: bool = False, skip: Sequence[str] = ()
                     ) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
    """GPTQ codes (``kernels.quantize_blocks``'s layout) of every linear layer in ``model``'s main graph that
    ``quantize_model`` would quantize (a weight no other node reads, not named in ``skip``), by weight
    name, in graph order; the model is left as it was. Layers that share an input share its Hessian."""
    check_options(bits, block_size, "matmulnbits", 0)
    graph = model.graph
    layers = [layer for layer in linear_layers(graph)
              if not any(s and s in layer.name for s in skip) and not shared(layer)]
    if not layers:
        return {}
    hessians = collect_hessians(model, feeds, [layer.x.name for layer in layers])
    return {layer.name: gptq_quantize(layer.weight_nk().astype(np.float64), hessians[layer.x.name], bits, block_size,
                                      symmetric, damp=damp, act_order=act_order) for layer in layers}
