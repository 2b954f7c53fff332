"""Weight-only quantization of an exported model's linear layers: int4 or int8, round to nearest.

Each linear layer with a constant weight (``Gemm(x, W, b, transB=1)``, PyTorch's ``[out, in]`` weight as
onnxport writes it, or ``MatMul(x, W)`` with ``W`` constant ``[in, out]``) has its weight cut along the
input dim into blocks of ``block_size`` values, each block stored as ``bits``-bit integers with one scale
(and, ``symmetric=False``, one zero point), in one of two forms:

- ``"matmulnbits"``: onnxruntime's ``com.microsoft::MatMulNBits``, the product itself on the packed
  weight (``bias`` added after it). The form onnxruntime (CPU, CUDA, web) runs fastest.
- ``"dequantize"``: standard ``DequantizeLinear`` with ``block_size`` (opset 21) of an ``INT4``/``UINT4``
  (``INT8``/``UINT8``) initializer, feeding the layer's own ``Gemm``/``MatMul``: portable to every
  runtime that implements opset 21.

Symmetric blocks map the value of largest magnitude to the most negative integer (-8 for int4, -128
for int8), so the whole range is used; asymmetric ones map the block's [min, max] (0 included) onto
[0, 2**bits - 1]. ``skip`` names weights left in float (an LM head, say) by substring.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import ml_dtypes
import numpy as np
import onnx_ir as ir
from onnx_ir.passes import common as common_passes

from onnxport.errors import InvalidInputError
from onnxport.optimize._match import new_initializer

__all__ = ["FORMS", "QuantizeResult", "QuantizedCheck", "dequantized", "measure", "quantize_model"]

FORMS = ("matmulnbits", "dequantize")
_MS_DOMAIN = "com.microsoft"
_FLOATS = (ir.DataType.FLOAT, ir.DataType.FLOAT16)


@dataclasses.dataclass
class QuantizeResult:
    """What ``quantize_model`` did: the layers quantized (weight names), those left in float and why,
    and the weights' bytes before and after."""

    form: str
    bits: int
    block_size: int
    symmetric: bool
    quantized: list[str] = dataclasses.field(default_factory=list)
    left: dict[str, str] = dataclasses.field(default_factory=dict)
    bytes_before: int = 0
    bytes_after: int = 0
    checks: list[QuantizedCheck] = dataclasses.field(default_factory=list)  # against eager PyTorch, if measured

    def __str__(self) -> str:
        kind = "symmetric" if self.symmetric else "asymmetric"
        text = (f"int{self.bits} weights ({kind}, blocks of {self.block_size}, {self.form}): "
                f"{len(self.quantized)} linear layer(s), {self.bytes_before / 1e6:.1f} MB -> {self.bytes_after / 1e6:.1f} MB")
        if self.left:
            text += f"; left in float: {', '.join(f'{k} ({v})' for k, v in list(self.left.items())[:5])}"
            text += f" and {len(self.left) - 5} more" if len(self.left) > 5 else ""
        return "\n".join([text, *(f"  {c}" for c in self.checks)])


@dataclasses.dataclass
class QuantizedCheck:
    """One output of a quantized model against eager PyTorch's float one, on the same inputs: the largest
    absolute difference, the cosine similarity of the two (flattened), and, for an output whose last dim
    scores classes (logits), the share of rows whose top class agrees."""

    name: str
    max_abs: float
    cosine: float
    top1: float | None

    def __str__(self) -> str:
        top1 = f", top-1 agreement {self.top1:.1%}" if self.top1 is not None else ""
        return f"{self.name}: cosine similarity {self.cosine:.6f}, max abs difference {self.max_abs:.3g}{top1}"


def measure(names: Sequence[str], expected: Sequence[object], actual: Sequence[object]) -> list[QuantizedCheck]:
    """Per float output, how close the quantized model's outputs are to eager PyTorch's."""
    import torch

    checks = []
    for name, e, a in zip(names, expected, actual):
        if not (isinstance(e, torch.Tensor) and isinstance(a, torch.Tensor)) or not e.is_floating_point():
            continue
        e64, a64 = e.detach().double().reshape(-1), a.detach().double().reshape(-1)
        if e64.numel() == 0 or e64.shape != a64.shape:
            continue
        denominator = float(e64.norm() * a64.norm())
        cosine = float(e64 @ a64) / denominator if denominator else float(torch.equal(e64, a64))
        top1 = None
        if e.dim() >= 2 and e.shape[-1] > 1:
            top1 = float((e.argmax(-1) == a.reshape(e.shape).argmax(-1)).double().mean())
        checks.append(QuantizedCheck(name, float((e64 - a64).abs().max()), cosine, top1))
    return checks


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


def quantize_model(model: ir.Model, *, bits: int = 4, block_size: int = 32, symmetric: bool = True,
                   form: str = "matmulnbits", skip: Sequence[str] = (), accuracy_level: int = 4) -> QuantizeResult:
    """Quantize the main graph's linear layers in place (see the module's docstring)."""
    check_options(bits, block_size, form, accuracy_level)
    opset = model.opset_imports.get("", 0)
    if form == "dequantize" and opset < 21:
        raise InvalidInputError(f"form='dequantize' needs opset 21 (blocked DequantizeLinear); the model has {opset}",
                                fix="export with opset=21 or later, or use form='matmulnbits' for onnxruntime")
    result = QuantizeResult(form, bits, block_size, symmetric)
    graph = model.graph
    for node in list(graph):
        found = _linear(graph, node)
        if found is None:
            continue
        weight, transposed = found
        name = weight.name or "?"
        reason = _refused(weight, skip)
        if reason:
            result.left[name] = reason
            continue
        array = np.asarray(weight.const_value.numpy())
        w_nk = array.T if transposed else array  # [N, K]: blocks along K
        q, scales, zeros = _quantize(w_nk.astype(np.float64), bits, block_size, symmetric)
        result.bytes_before += array.nbytes
        if form == "matmulnbits":
            result.bytes_after += _to_matmulnbits(graph, node, weight, q, scales, zeros, bits, block_size,
                                                  accuracy_level, array.dtype)
        else:
            result.bytes_after += _to_dequantize(graph, node, weight, q, scales, zeros, bits, block_size,
                                                 transposed, array.dtype)
        result.quantized.append(name)
    if result.quantized and form == "matmulnbits" and _MS_DOMAIN not in model.opset_imports:
        model.opset_imports[_MS_DOMAIN] = 1
    common_passes.RemoveUnusedNodesPass()(model)  # the float weights replaced
    return result


def _linear(graph: ir.Graph, node: ir.Node) -> tuple[ir.Value, bool] | None:
    """``(weight, transposed)`` for a linear layer with a constant 2-D weight, else None: ``transposed``
    when the weight is stored ``[K, N]`` (a ``MatMul``'s) rather than ``[N, K]`` (``Gemm(transB=1)``)."""
    if node.domain or node.op_type not in ("Gemm", "MatMul") or len(node.inputs) < 2:
        return None
    weight = node.inputs[1]
    if weight is None or weight.is_graph_input() or graph.initializers.get(weight.name or "") is not weight:
        return None
    tensor = weight.const_value
    if tensor is None or tensor.dtype not in _FLOATS or len(tensor.shape) != 2:
        return None
    if node.inputs[0] is None or node.inputs[0].dtype != tensor.dtype:
        return None
    if node.op_type == "Gemm":
        attrs = {k: a.value for k, a in node.attributes.items()}
        if attrs.get("transA", 0) or not attrs.get("transB", 0) or attrs.get("alpha", 1.0) != 1.0:
            return None
        if attrs.get("beta", 1.0) != 1.0 and len(node.inputs) > 2 and node.inputs[2] is not None:
            return None
        return weight, False
    return weight, True


def _refused(weight: ir.Value, skip: Sequence[str]) -> str:
    """Why this layer's weight stays in float, or ''."""
    name = weight.name or ""
    if any(s and s in name for s in skip):
        return "skipped by name"
    if len(list(weight.uses())) != 1:
        return "shared by other nodes"
    return ""


def _quantize(w: np.ndarray, bits: int, block_size: int, symmetric: bool
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
    if symmetric:
        middle = 1 << (bits - 1)
        extreme = np.take_along_axis(grouped, np.abs(grouped).argmax(-1)[..., None], -1)[..., 0]
        scales = extreme / -middle  # the largest magnitude lands on -middle exactly
        scales[scales == 0] = 1.0
        codes = np.clip(np.rint(grouped / scales[..., None]) + middle, 0, top)
        return codes.astype(np.uint8), scales, None
    low = np.minimum(grouped.min(-1), 0.0)
    high = np.maximum(grouped.max(-1), 0.0)
    scales = (high - low) / top
    scales[scales == 0] = 1.0
    zeros = np.clip(np.rint(-low / scales), 0, top)
    codes = np.clip(np.rint(grouped / scales[..., None]) + zeros[..., None], 0, top)
    return codes.astype(np.uint8), scales, zeros.astype(np.uint8)


def dequantized(codes: np.ndarray, scales: np.ndarray, zeros: np.ndarray | None, bits: int, k: int) -> np.ndarray:
    """The ``[N, K]`` float64 weight the codes stand for (for tests and error reports)."""
    zero = (1 << (bits - 1)) if zeros is None else zeros[..., None].astype(np.float64)
    values = (codes.astype(np.float64) - zero) * scales[..., None]
    return values.reshape(codes.shape[0], -1)[:, :k]


def _pack(codes: np.ndarray, bits: int) -> np.ndarray:
    """Codes packed along the last axis, low bits first (two int4 codes a byte)."""
    if bits == 8:
        return codes
    if codes.shape[-1] % 2:
        codes = np.concatenate([codes, np.zeros(codes.shape[:-1] + (1,), dtype=np.uint8)], axis=-1)
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)


def _to_matmulnbits(graph: ir.Graph, node: ir.Node, weight: ir.Value, codes: np.ndarray, scales: np.ndarray,
                    zeros: np.ndarray | None, bits: int, block_size: int, accuracy_level: int,
                    dtype: np.dtype) -> int:
    n, blocks, _ = codes.shape
    k = weight.shape[0] if node.op_type == "MatMul" else weight.shape[1]
    base = weight.name or "weight"
    inputs = [node.inputs[0], new_initializer(graph, f"{base}.q{bits}", _pack(codes, bits)),
              new_initializer(graph, f"{base}.scales", scales.astype(dtype).reshape(-1))]
    if zeros is not None:
        inputs.append(new_initializer(graph, f"{base}.zero_points", _pack(zeros, bits).reshape(-1)))
    attributes = [ir.AttrInt64("K", int(k)), ir.AttrInt64("N", int(n)), ir.AttrInt64("bits", bits),
                  ir.AttrInt64("block_size", block_size), ir.AttrInt64("accuracy_level", accuracy_level)]
    product = ir.Node(_MS_DOMAIN, "MatMulNBits", inputs, attributes=attributes, name=node.name,
                      metadata_props=dict(node.metadata_props))
    new = [product]
    out = product.outputs[0]
    bias = node.inputs[2] if node.op_type == "Gemm" and len(node.inputs) > 2 else None
    if bias is not None:
        add = ir.Node("", "Add", [out, bias], name=f"{node.name or base}.bias")
        new.append(add)
        out = add.outputs[0]
    ir.convenience.replace_nodes_and_values(graph, node, [node], new, [node.outputs[0]], [out])
    return sum(v.const_value.nbytes for v in inputs[1:])


def _to_dequantize(graph: ir.Graph, node: ir.Node, weight: ir.Value, codes: np.ndarray, scales: np.ndarray,
                   zeros: np.ndarray | None, bits: int, block_size: int, transposed: bool, dtype: np.dtype) -> int:
    n, blocks, _ = codes.shape
    k = weight.shape[0] if transposed else weight.shape[1]
    base = weight.name or "weight"
    flat = codes.reshape(n, -1)[:, :k].astype(np.int16)
    if zeros is None:  # signed codes, zero point 0
        middle = 1 << (bits - 1)
        stored = (flat - middle).astype(ml_dtypes.int4 if bits == 4 else np.int8)
        zero_array = None
    else:
        stored = flat.astype(ml_dtypes.uint4 if bits == 4 else np.uint8)
        zero_array = zeros.astype(ml_dtypes.uint4 if bits == 4 else np.uint8)
    scale_array = scales.astype(dtype)
    axis = 1
    if transposed:  # the MatMul's weight is [K, N]: blocks along axis 0
        stored, scale_array, axis = stored.T, scale_array.T, 0
        zero_array = zero_array.T if zero_array is not None else None
    inputs = [new_initializer(graph, f"{base}.q{bits}", stored), new_initializer(graph, f"{base}.scales", scale_array)]
    if zero_array is not None:
        inputs.append(new_initializer(graph, f"{base}.zero_points", zero_array))
    dq = ir.Node("", "DequantizeLinear", inputs, attributes=[ir.AttrInt64("axis", axis),
                                                             ir.AttrInt64("block_size", block_size)],
                 name=f"{node.name or base}.dequantize")
    dq.outputs[0].dtype = weight.dtype
    dq.outputs[0].shape = weight.shape
    graph.insert_before(node, dq)
    node.replace_input_with(1, dq.outputs[0])
    return sum(v.const_value.nbytes for v in inputs)
