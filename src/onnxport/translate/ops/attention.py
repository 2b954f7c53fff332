"""Scaled dot-product attention: one opset-23 ``Attention`` node where it fits, else MatMul and Softmax."""

from __future__ import annotations

import math

import ml_dtypes
import onnx_ir as ir

from onnxport.translate.builder import Ctx
from onnxport.translate.ops._common import axes, rank
from onnxport.translate.registry import aten, ops

aten_ = ops.aten


def _shape_slice(ctx: Ctx, x: ir.Value, start: int, end: int | None = None) -> ir.Value:
    """``x.shape[start:end]`` at run time as a 1-D int64 value."""
    out = ctx.op.Shape(x, start=start, end=end)
    r = rank(x)
    stop = r if end is None else (end + r if end < 0 else end)
    out.shape = ir.Shape([stop - (start + r if start < 0 else start)])
    return out


def _repeat_heads(ctx: Ctx, kv: ir.Value, q: ir.Value) -> ir.Value:
    """``kv.repeat_interleave(q_heads // kv_heads, dim=-3)``: each kv head serves that many consecutive
    q heads; head counts may be symbolic (the group size is then computed from Shape)."""
    q_heads, kv_heads = q.shape[-3], kv.shape[-3]
    if isinstance(q_heads, int) and isinstance(kv_heads, int):
        groups, heads = ctx.const([q_heads // kv_heads, 1, 1]), ctx.const([q_heads])
    else:
        heads = _shape_slice(ctx, q, -3, -2)
        groups = ctx.op.Concat(ctx.op.Div(heads, _shape_slice(ctx, kv, -3, -2)), ctx.const([1, 1]), axis=0)
    spread = ctx.op.Expand(ctx.op.Unsqueeze(kv, ctx.const([-3])), groups)
    shape = ctx.op.Concat(_shape_slice(ctx, kv, 0, -3), heads, _shape_slice(ctx, kv, -2), axis=0)
    out = ctx.op.Reshape(spread, shape)
    out.shape = ir.Shape([*kv.shape[:-3], q_heads, *kv.shape[-2:]])
    return out


def _scale(ctx: Ctx, q: ir.Value, scale: float | None) -> ir.Value:
    """``scale`` (default 1/sqrt(E)) as a scalar of q's dtype; E comes from Shape when symbolic."""
    if scale is not None:
        return ctx.const(scale, like=q)
    e = q.shape[-1]
    if isinstance(e, int):
        return ctx.const(e**-0.5, like=q)
    e_val = ctx.op.Squeeze(ctx.op.CastLike(_shape_slice(ctx, q, -1), q), ctx.const([0]))
    return ctx.op.Pow(e_val, ctx.const(-0.5, like=q))


def _causal_keep(ctx: Ctx, q: ir.Value, k: ir.Value) -> ir.Value:
    """torch's causal mask: a lower-triangular (L, S) bool matrix, sizes from the inputs at run time."""
    seq = [q.shape[-2], k.shape[-2]]
    if all(isinstance(s, int) for s in seq):
        size = ctx.const(seq)
    else:
        size = ctx.op.Concat(_shape_slice(ctx, q, -2, -1), _shape_slice(ctx, k, -2, -1), axis=0)
    return ctx.op.Trilu(ctx.op.Expand(ctx.const(True), size), upper=0)


_ATTENTION_DTYPES = (ir.DataType.FLOAT, ir.DataType.FLOAT16)  # onnxruntime's CPU kernel has no bfloat16


def _fits_attention(ctx: Ctx, q: ir.Value, k: ir.Value, mask: ir.Value | None, dropout_p: float) -> bool:
    """Whether ONNX ``Attention`` computes this call: the target runs it right (opset 23 and a release that
    computes this dtype and grouping right, see ``onnxport.targets``), 4-D inputs (batch, heads, seq, embed), a
    dtype onnxruntime runs it in, no dropout, and a mask that broadcasts over the scores from the right.
    ``Attention`` takes grouped key/value heads as they are (q heads a multiple of kv heads), as torch's
    ``enable_gqa`` does, and gives a query row that a bool mask hides entirely zero weights, as torch does (a
    float mask's row of the lowest value, which torch averages, is lifted: ``_lift_lowest``)."""
    if dropout_p or q.dtype not in _ATTENTION_DTYPES or k.dtype != q.dtype or rank(q) != 4 or rank(k) != 4:
        return False
    if not ctx.forms.attention(q.dtype, grouped=q.shape[1] != k.shape[1]):
        return False
    return mask is None or (rank(mask) <= 4 and mask.dtype in (ir.DataType.BOOL, q.dtype))


def _attention(ctx: Ctx, q: ir.Value, k: ir.Value, v: ir.Value, mask: ir.Value | None, is_causal: bool,
               scale: float | None) -> ir.Value:
    """One ``Attention`` node. torch's causal mask is aligned to the top left; ``Attention``'s ``is_causal``
    is used only where the query and key lengths are the same dim, else the mask is spelled out."""
    if is_causal and q.shape[-2] != k.shape[-2]:
        mask, is_causal = _causal_keep(ctx, q, k), False
    attrs = {"is_causal": 1} if is_causal else {}
    if scale is not None:
        attrs["scale"] = float(scale)
    if mask is not None and mask.dtype != ir.DataType.BOOL:
        mask = _lift_lowest(ctx, mask, q)
    if mask is not None:
        mask = _mask_rows(ctx, mask, q)
    out = ctx.op.Attention(q, k, v, *([] if mask is None else [mask]), **attrs)
    out.shape = ir.Shape([*q.shape[:-1], v.shape[-1]])
    return out


def _lift_lowest(ctx: Ctx, mask: ir.Value, q: ir.Value) -> ir.Value:
    """A float mask with its dtype's lowest value made half of it. onnxruntime's ``Attention`` reads the lowest
    finite value as -inf and gives a row that is all of it zero weights; torch adds it to the scores, which it
    swamps, and averages the values uniformly (a padded frame's row of the additive masks transformers fills with
    ``finfo.min``: Parakeet's). Half the lowest keeps torch's result in both: a hidden key's weight is still 0, a
    row hidden entirely still the uniform average. A row of -inf stays one: torch gives it zero weights too. (A
    float32 graph converted to float16 afterwards saturates the constant to float16's lowest, and such a row is
    zero again there.)"""
    lowest = float(ml_dtypes.finfo(q.dtype.numpy()).min)
    return ctx.op.Where(ctx.op.Equal(mask, ctx.const(lowest, like=mask)), ctx.const(lowest / 2, like=mask), mask)


def _mask_rows(ctx: Ctx, mask: ir.Value, q: ir.Value) -> ir.Value:
    """``mask`` with a row per query: onnxruntime's ``Attention`` does not broadcast the mask's query dim
    (a padding mask of shape (B, 1, 1, S) fails there), so one of size 1, or not known to be the query
    length, is expanded to it."""
    mask_shape = mask.shape
    if mask_shape is not None and len(mask_shape) >= 2 and q.shape is not None and mask_shape[-2] == q.shape[-2]:
        return mask
    # Expand aligns from the right: (q_len, 1) spreads the query dim and keeps every other.
    out = ctx.op.Expand(mask, ctx.op.Concat(_shape_slice(ctx, q, -2, -1), ctx.const([1]), axis=0))
    if mask_shape is not None and q.shape is not None:
        out.shape = ir.Shape([*mask_shape[:-2], q.shape[-2], mask_shape[-1]])
    return out


def _bias(ctx: Ctx, keep: ir.Value, q: ir.Value) -> ir.Value:
    """A bool mask as a bias added to the scores: 0 where kept, the lowest finite value of the scores' dtype
    where hidden. Its exponential after Softmax's shift is 0, as -inf's is (a row hidden entirely is handled
    apart, see ``_mask_bias``), and a static quantizer calibrating the sum (onnxruntime's ``quantize_static``)
    gets a finite range from it, where -inf gives an infinite scale that turns every score into NaN or 0."""
    lowest = float(ml_dtypes.finfo(q.dtype.numpy()).min)
    return ctx.op.Where(keep, ctx.const(0.0, like=q), ctx.const(lowest, like=q))


def _mask_bias(ctx: Ctx, mask: ir.Value, q: ir.Value) -> tuple[ir.Value, ir.Value]:
    """``(bias, seen)`` for a user's mask: ``softmax(scores + bias) * seen`` is torch's attention weights.

    A query row the mask hides entirely (a left-padded position) would be all -inf, and Softmax gives NaN
    there, which spreads through later layers; torch gives that row zero weights. So such a row's bias is 0
    (a finite softmax) and ``seen``, 1 for every other row, zeroes it. Both depend on the mask alone: every
    layer reading the same mask shares them (CSE), and each layer pays one Add and one Mul, where finding
    hidden rows from each layer's scores costs a reduction, a test and a select over the whole score
    tensor.

    A row is found hidden by reducing which keys it keeps (0 or 1), not the bias itself: OpenVINO's
    ``ReduceMax`` of a row of -inf gives the lowest finite float, so a test of that maximum for -inf finds
    no row hidden there, and the softmax of the -inf row is NaN. A float mask's kept keys are those above -inf
    (a comparison, which onnxruntime-web's WebGPU provider runs, where it has no ``IsInf``)."""
    if mask.dtype == ir.DataType.BOOL:
        bias, kept = _bias(ctx, mask, q), mask
    else:
        bias = ctx.cast(mask, q.dtype)
        kept = ctx.op.Greater(bias, ctx.const(-math.inf, like=q))  # not IsInf: no WebGPU kernel
    seen = ctx.op.ReduceMax(ctx.cast(kept, q.dtype), axes(ctx, [-1]), keepdims=1)
    bias = ctx.op.Where(ctx.cast(seen, ir.DataType.BOOL), bias, ctx.const(0.0, like=q))
    return bias, seen


@aten(aten_.scaled_dot_product_attention.default)
def scaled_dot_product_attention(
    ctx: Ctx,
    q: ir.Value,
    k: ir.Value,
    v: ir.Value,
    attn_mask: ir.Value | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    *,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> ir.Value:
    """scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, float dropout_p=0., bool is_causal=False, *, float? scale=None, bool enable_gqa=False) -> Tensor"""
    if _fits_attention(ctx, q, k, attn_mask, dropout_p):
        return _attention(ctx, q, k, v, attn_mask, is_causal, scale)
    if enable_gqa and q.shape[-3] != k.shape[-3]:  # symbolic counts differ here even when equal at run time
        k, v = _repeat_heads(ctx, k, q), _repeat_heads(ctx, v, q)
    r = rank(k)
    perm = list(range(r - 2)) + [r - 1, r - 2]
    # Scaling q before the product keeps float16 scores in range, and onnxruntime folds a scalar Mul on
    # a MatMul input (and the Transpose of k) into one FusedMatMul.
    scores = ctx.op.MatMul(ctx.op.Mul(q, _scale(ctx, q, scale)), ctx.op.Transpose(k, perm=perm))
    if is_causal:  # every query row keeps at least its first key: no row is hidden entirely
        scores = ctx.op.Add(scores, _bias(ctx, _causal_keep(ctx, q, k), q))
        weights = ctx.op.Softmax(scores, axis=-1)
    elif attn_mask is not None:
        bias, seen = _mask_bias(ctx, attn_mask, q)
        weights = ctx.op.Mul(ctx.op.Softmax(ctx.op.Add(scores, bias), axis=-1), seen)
    else:
        weights = ctx.op.Softmax(scores, axis=-1)
    if dropout_p:  # a model traced in training mode: keep its random dropout rather than drop it silently
        weights = ctx.op.Dropout(weights, ctx.const(float(dropout_p), like=weights), ctx.const(True, ir.DataType.BOOL))
    return ctx.op.MatMul(weights, v)


@aten(aten_._scaled_dot_product_flash_attention_for_cpu.default)
def _scaled_dot_product_flash_attention_for_cpu(
    ctx: Ctx,
    q: ir.Value,
    k: ir.Value,
    v: ir.Value,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    *,
    attn_mask: ir.Value | None = None,
    scale: float | None = None,
) -> tuple[ir.Value, ir.Value]:
    """_scaled_dot_product_flash_attention_for_cpu(Tensor query, Tensor key, Tensor value, float dropout_p=0., bool is_causal=False, *, Tensor? attn_mask=None, float? scale=None) -> (Tensor output, Tensor logsumexp)

    The output of ``scaled_dot_product_attention`` (4-D inputs, grouped key/value heads taken as they are)
    and the logsumexp [N, H, L] of each query row's scaled, masked scores. Translated rather than left to
    torch's decomposition, which returns the attention weights [N, H, L, S] in place of the logsumexp (on
    every torch release from 2.10 to 2.15; eager and the schema agree on all of them).
    """
    if is_causal and attn_mask is not None:  # the kernel applies both; scaled_dot_product_attention one of them
        attn_mask, is_causal = _with_causal(ctx, attn_mask, q, k), False
    out = scaled_dot_product_attention(ctx, q, k, v, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=True)
    return out, _row_logsumexp(ctx, q, k, attn_mask, is_causal, scale)


def _with_causal(ctx: Ctx, mask: ir.Value, q: ir.Value, k: ir.Value) -> ir.Value:
    """A float mask with torch's causal mask added (-inf above the diagonal), typed with the broadcast shape."""
    out = ctx.op.Add(mask, _bias(ctx, _causal_keep(ctx, q, k), mask))
    dims = [1] * max(0, 2 - rank(mask)) + list(mask.shape.dims)
    seq = (q.shape[-2], k.shape[-2])
    out.shape = ir.Shape([*dims[:-2], *(s if d == 1 else d for d, s in zip(dims[-2:], seq))])
    return out


def _row_logsumexp(ctx: Ctx, q: ir.Value, k: ir.Value, mask: ir.Value | None, is_causal: bool,
                   scale: float | None) -> ir.Value:
    """The flash kernel's logsumexp over the keys of the scaled scores plus the mask (a float one: the kernel
    refuses bool masks) or the causal bias, in the output's dtype (float32 for half inputs, as the kernel
    accumulates), spelled out from the row maximum like ``logsumexp``; 0 for a row the mask hides entirely,
    as the kernel gives. An unused logsumexp costs nothing: its nodes are dropped with the dead code."""
    dtype = ctx.out_dtype(1) or q.dtype
    if q.shape[-3] != k.shape[-3]:
        k = _repeat_heads(ctx, k, q)
    qf, kf = ctx.cast(q, dtype), ctx.cast(k, dtype)
    r = rank(kf)
    key_t = ctx.op.Transpose(kf, perm=[*range(r - 2), r - 1, r - 2])
    scores = ctx.op.MatMul(ctx.op.Mul(qf, _scale(ctx, qf, scale)), key_t)
    if is_causal:
        scores = ctx.op.Add(scores, _bias(ctx, _causal_keep(ctx, q, k), qf))
    elif mask is not None:
        scores = ctx.op.Add(scores, ctx.cast(mask, dtype))
    last, zero = axes(ctx, [-1]), ctx.const(0.0, like=qf)
    peak = ctx.op.ReduceMax(scores, last, keepdims=1)
    hidden = ctx.op.IsInf(peak, detect_positive=0)
    peak = ctx.op.Where(ctx.op.IsInf(peak), zero, peak)
    lse = ctx.op.Add(ctx.op.Log(ctx.op.ReduceSum(ctx.op.Exp(ctx.op.Sub(scores, peak)), last, keepdims=1)), peak)
    return ctx.op.Squeeze(ctx.op.Where(hidden, zero, lse), last)
