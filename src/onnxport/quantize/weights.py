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
[0, 2**bits - 1]; each block's range is then the one, among the full range and a few narrower ones
(``onnxport.quantize.kernels``), whose rounding loses the least. ``skip`` names weights left in float (an LM head, say) by substring.
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
from onnxport.quantize.fuse import fuse_siblings
from onnxport.quantize.kernels import pack_codes, quantize_blocks, quantize_rows
from onnxport.quantize.layers import Linear, find_linear, shared
from onnxport.quantize.options import QuantizeOptions

__all__ = ["TOLERANCES", "QuantizeResult", "QuantizedCheck", "left_text", "measure", "quantize_model",
           "tolerance_for"]

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
    method: str = "rtn"
    other_bits: dict[str, int] = dataclasses.field(default_factory=dict)  # layers of another width (lm_head=)
    tables: dict[str, int] = dataclasses.field(default_factory=dict)  # embedding tables quantized: their bits
    fused: list[list[str]] = dataclasses.field(default_factory=list)  # layers fused into one MatMulNBits (fuse.py)

    def __str__(self) -> str:
        kind = "symmetric" if self.symmetric else "asymmetric"
        how = ", GPTQ" if self.method == "gptq" else ""
        text = (f"int{self.bits} weights ({kind}, blocks of {self.block_size}, {self.form}{how}): "
                f"{len(self.quantized)} linear layer(s)")
        if self.other_bits:
            text += f" ({', '.join(f'{k} int{v}' for k, v in self.other_bits.items())})"
        if self.tables:
            text += f", embedding table(s) {', '.join(f'{k} int{v}' for k, v in self.tables.items())}"
        text += f", {self.bytes_before / 1e6:.1f} MB -> {self.bytes_after / 1e6:.1f} MB"
        if self.fused:
            text += f"; {sum(map(len, self.fused))} layers fused into {len(self.fused)} products (same input)"
        text += left_text(self.left)
        return "\n".join([text, *(f"  {c}" for c in self.checks)])


def left_text(left: dict[str, str]) -> str:
    """``; left in float: a (why), b (why) ...`` for a result's text, the first five; '' for none."""
    if not left:
        return ""
    text = f"; left in float: {', '.join(f'{k} ({v})' for k, v in list(left.items())[:5])}"
    return text + (f" and {len(left) - 5} more" if len(left) > 5 else "")


@dataclasses.dataclass
class QuantizedCheck:
    """One output of a quantized model against eager PyTorch's float one, on the same inputs: the largest
    absolute difference, the cosine similarity of the two (flattened), and, for an output whose last dim
    scores classes (logits), the share of rows whose top class agrees and whose eager top class is among
    the quantized model's five best. ``tolerance`` is the cosine similarity stated for the quantization
    (``tolerance_for``); ``ok`` whether the output reaches it."""

    name: str
    max_abs: float
    cosine: float
    top1: float | None
    top5: float | None = None
    tolerance: float | None = None

    @property
    def ok(self) -> bool:
        return self.tolerance is None or self.cosine >= self.tolerance

    def __str__(self) -> str:
        top = f", top-1 agreement {self.top1:.1%}" if self.top1 is not None else ""
        top += f", eager's top-1 in the top 5 {self.top5:.1%}" if self.top5 is not None else ""
        verdict = ""
        if self.tolerance is not None:
            verdict = f" ({'within' if self.ok else 'BELOW'} the {self.tolerance} stated)"
        return f"{self.name}: cosine similarity {self.cosine:.6f}{verdict}, max abs difference {self.max_abs:.3g}{top}"


# The cosine similarity to eager PyTorch's float outputs a quantized model is held to, by what was
# quantized; set from measurements (bench/quantize.md, tests): int4 weights 0.985-0.99 on random-weight
# Llama and BERT-base outputs, int8 weights 0.9999, int8 activations 0.9997.
TOLERANCES = {"int4": 0.98, "int8": 0.999, "activations": 0.99}


def tolerance_for(result: object) -> float:
    """The cosine similarity a quantized model's outputs are held to (``TOLERANCES``): by its narrowest weights."""
    if not hasattr(result, "bits"):
        return TOLERANCES["activations"]
    widths = {result.bits, *result.other_bits.values(), *result.tables.values()}
    return TOLERANCES["int4"] if 4 in widths else TOLERANCES["int8"]


def measure(names: Sequence[str], expected: Sequence[object], actual: Sequence[object],
            tolerance: float | None = None) -> list[QuantizedCheck]:
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
        top1 = top5 = None
        if e.dim() >= 2 and e.shape[-1] > 1:
            scores = a.reshape(e.shape)
            best = e.argmax(-1)
            top1 = float((best == scores.argmax(-1)).double().mean())
            five = scores.topk(min(5, e.shape[-1]), dim=-1).indices
            top5 = float((five == best[..., None]).any(-1).double().mean())
        checks.append(QuantizedCheck(name, float((e64 - a64).abs().max()), cosine, top1, top5, tolerance))
    return checks


def quantize_model(model: ir.Model, options: QuantizeOptions | None = None, *, target: str | None = None
                   ) -> QuantizeResult:
    """Quantize the main graph's linear layers (and, ``options.embeddings``, its embedding tables) in place,
    weight-only, as ``options`` say (the defaults when None; see the module's docstring and ``QuantizeOptions``;
    its ``calibration``, for ``method="gptq"``, is input feeds of the model here, ``{input name: array}``).
    ``target`` (the export's) picks the form when ``options.form`` is None, and refuses forms its oldest
    release cannot load or computes wrong.

    ``options.codes`` maps weight names to codes made elsewhere (a GPTQ or AWQ checkpoint's), stored as they are
    instead of rounding those layers' weights (whatever ``lm_head`` says): ``(codes, scales, zeros)`` or
    ``(codes, scales, zeros, g_idx)`` of ``bits`` bits in blocks of ``block_size``, laid out as
    ``quantize_blocks`` returns them; ``g_idx`` (``[K]``, or None) names the block of each input where blocks
    are not runs of consecutive inputs (act-order GPTQ): the inputs are then sorted by block, the codes
    with them, and the layer reads its input through a ``Gather`` in that order (one per input and order,
    so that layers reading the same input are still fused). ``codes_only`` leaves the layers ``codes``
    does not name in float."""
    options = QuantizeOptions() if options is None else options
    bits, block_size, symmetric, form = options.bits, options.block_size, options.symmetric, options.form_for(target)
    skip, lm_head, embeddings, method = options.skip, options.lm_head, options.embeddings, options.method
    calibration, codes, codes_only = options.calibration, options.codes, options.codes_only
    head_bits = bits if lm_head is None else lm_head
    opset = model.opset_imports.get("", 0)
    if form == "dequantize" and opset < 21:
        raise InvalidInputError(f"form='dequantize' needs opset 21 (blocked DequantizeLinear); the model has {opset}",
                                fix="export with opset=21 or later, or use form='matmulnbits' for onnxruntime")
    _check_target(target, form, {bits, head_bits} - {0}, embeddings, symmetric)
    result = QuantizeResult(form, bits, block_size, symmetric, method=method)
    graph = model.graph
    gptq = {}
    if method == "gptq":
        from onnxport.quantize.gptq import calibrated_codes

        gptq = calibrated_codes(model, calibration, bits, block_size, symmetric, skip=skip, act_order=True)
    codes = {} if codes is None else codes
    reordered: dict[tuple[int, bytes], ir.Value] = {}  # the inputs read in another order, by (input, order)
    for node in list(graph):
        layer = find_linear(graph, node) if node.graph is graph else None  # (an Add replaced with its product)
        if layer is None:
            continue
        name = layer.name
        layer_bits = bits if name in codes else head_bits if _writes_output(layer.output) else bits
        reason = "left in float (lm_head=0)" if layer_bits == 0 else _refused(layer, skip)
        if not reason and codes_only and name not in codes:
            reason = "float in the source: no codes given"
        if reason:
            result.left[name] = reason
            continue
        array = np.asarray(layer.weight.const_value.numpy())
        w_nk = array.T if layer.transposed else array  # [N, K]: blocks along K
        if name in codes:
            q, scales, zeros, g_idx = _given_codes(name, codes[name], w_nk.shape, bits, block_size)
            if g_idx is not None:
                q, order = _in_block_order(name, q, g_idx, block_size)
                layer = dataclasses.replace(layer, x=_reordered_input(graph, layer, order, reordered))
                layer.nodes[0].replace_input_with(0, layer.x)
        elif name in gptq and layer_bits == bits:
            q, scales, zeros = gptq[name]
        else:
            q, scales, zeros = quantize_rows(w_nk, layer_bits, block_size, symmetric)
        k = w_nk.shape[1]
        result.bytes_before += array.nbytes
        if form == "matmulnbits":
            result.bytes_after += _to_matmulnbits(graph, layer, q, scales, zeros, layer_bits, block_size,
                                                  options.accuracy_level, array.dtype, k)
        else:
            result.bytes_after += _to_dequantize(graph, layer, q, scales, zeros, layer_bits, block_size,
                                                 array.dtype, k)
        result.quantized.append(name)
        if layer_bits != bits:
            result.other_bits[name] = layer_bits
    unused = [name for name in codes if name not in result.quantized and name not in result.left]
    if unused:
        raise InvalidInputError(f"codes were given for {len(unused)} weight(s) that no linear layer of the model has "
                                f"({', '.join(unused[:3])}{', ...' if len(unused) > 3 else ''})",
                                fix="name each layer's codes by its weight's name in the model (model.state_dict()'s)")
    if not result.quantized and not result.left and _bfloat16_layers(graph):
        raise InvalidInputError("the linear layers' weights are bfloat16, which MatMulNBits and DequantizeLinear's "
                                "onnxruntime kernels do not take: no layer could be quantized",
                                fix="export the model in float32 (model.float()) or float16, then quantize")
    if form == "matmulnbits":
        result.fused = fuse_siblings(graph)
    if embeddings:
        _embeddings(graph, result, embeddings, block_size, symmetric, form, skip)
    if form == "matmulnbits" and _MS_DOMAIN not in model.opset_imports and (result.quantized or result.tables):
        model.opset_imports[_MS_DOMAIN] = 1
    common_passes.RemoveUnusedNodesPass()(model)  # the float weights replaced
    return result


def _check_target(target: str | None, form: str, bits: set[int], embeddings: int, symmetric: bool) -> None:
    """Refuse what the target's oldest onnxruntime cannot load, or computes wrong."""
    if not target:
        return
    from onnxport.targets import QUANTIZED_SINCE, parse

    parsed = parse(target)
    if not parsed.runtime.startswith("onnxruntime"):
        return
    needs = [((form, b), f"{form} of {b} bits") for b in sorted(bits)]
    if embeddings:
        kind = "4-asymmetric" if embeddings == 4 and not symmetric else embeddings
        table_form = ("gather", kind) if form == "matmulnbits" else ("dequantize", embeddings)
        kind_text = "asymmetric" if not symmetric else "symmetric"
        needs.append((table_form, f"{embeddings}-bit embedding tables ({kind_text})"))
    for key, what in needs:
        since = QUANTIZED_SINCE[key]
        if parsed.version < since:
            raise InvalidInputError(
                f"{what}: needs onnxruntime {since[0]}.{since[1]}; the export's target is {target} (older releases "
                "refuse the file, or compute it wrong)",
                fix=f"export with target='onnxruntime>={since[0]}.{since[1]}', or quantize with bits=4 (MatMulNBits "
                "of 4 bits loads in every release the default target covers)")


def _bfloat16_layers(graph: ir.Graph) -> bool:
    """Whether the graph holds bfloat16 matrices (which onnxport computes through Casts to float32)."""
    return any(v.dtype == ir.DataType.BFLOAT16 and v.shape is not None and len(v.shape) == 2
               for v in graph.initializers.values())


def _writes_output(value: ir.Value) -> bool:
    """Whether a layer's output is a model output, through reshapes or casts at most: an LM head, a classifier."""
    through = ("Add", "Reshape", "Cast", "Identity", "Squeeze", "Unsqueeze", "Flatten")
    for _ in range(4):
        if value.is_graph_output():
            return True
        uses = list(value.uses())
        if len(uses) != 1 or uses[0].node.op_type not in through or uses[0].node.domain:
            return False
        value = uses[0].node.outputs[0]
    return False


def _refused(layer: Linear, skip: Sequence[str]) -> str:
    """Why this layer's weight stays in float, or ''."""
    if any(s and s in layer.name for s in skip):
        return "skipped by name"
    if shared(layer):
        return "shared by other nodes"
    return ""


def _given_codes(name: str, given: Sequence[np.ndarray | None], shape: tuple[int, int], bits: int, block_size: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """``quantize_model``'s ``codes[name]`` checked against the layer's ``[N, K]`` weight: codes, scales,
    zero points (or None) and g_idx (or None)."""
    if not isinstance(given, (tuple, list)) or len(given) not in (3, 4):
        raise InvalidInputError(f"codes[{name!r}] must be (codes, scales, zeros) or (codes, scales, zeros, g_idx)",
                                fix="pass the layer's codes as quantize_model's docstring lays them out")
    q, scales, zeros, g_idx = (*given, None)[:4]
    n, k = shape
    blocks = -(-k // block_size)
    top = 1 << bits
    fix = f"give codes of {bits} bits in blocks of {block_size} for a weight of shape [{n}, {k}] (out, in)"
    q = np.asarray(q)
    if q.shape != (n, blocks, block_size) or q.dtype != np.uint8 or q.max(initial=0) >= top:
        raise InvalidInputError(f"codes[{name!r}]: codes of shape {list(q.shape)} and dtype {q.dtype} (largest "
                                f"{q.max(initial=0)}), not uint8 [{n}, {blocks}, {block_size}] below {top}", fix=fix)
    scales = np.asarray(scales)
    if scales.shape != (n, blocks):
        raise InvalidInputError(f"codes[{name!r}]: scales of shape {list(scales.shape)}, not [{n}, {blocks}]", fix=fix)
    if zeros is not None:
        zeros = np.asarray(zeros)
        if zeros.shape != (n, blocks) or zeros.dtype != np.uint8 or zeros.max(initial=0) >= top:
            raise InvalidInputError(f"codes[{name!r}]: zero points of shape {list(zeros.shape)} and dtype "
                                    f"{zeros.dtype}, not uint8 [{n}, {blocks}] below {top}", fix=fix)
    if g_idx is not None:
        g_idx = np.asarray(g_idx)
        if g_idx.shape != (k,) or g_idx.min(initial=0) < 0 or g_idx.max(initial=0) >= blocks:
            raise InvalidInputError(f"codes[{name!r}]: g_idx of shape {list(g_idx.shape)}, not [{k}] blocks below "
                                    f"{blocks}", fix=fix)
    return q, scales, zeros, g_idx


def _in_block_order(name: str, codes: np.ndarray, g_idx: np.ndarray, block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Codes whose blocks are not runs of consecutive inputs (``g_idx``: each input's block) with the inputs
    sorted by block, and that order: the layer computes the same from ``x[..., order]``."""
    n, blocks, _ = codes.shape
    k = g_idx.shape[0]
    sizes = np.bincount(g_idx, minlength=blocks).tolist()
    if sizes != [block_size] * (blocks - 1) + [k - block_size * (blocks - 1)]:
        raise InvalidInputError(f"codes[{name!r}]: g_idx puts {sorted(set(sizes))} inputs in a block; each must have "
                                f"{block_size} (the last the rest)", fix="give blocks of block_size inputs each")
    order = np.argsort(g_idx, kind="stable")
    flat = codes.reshape(n, -1).copy()
    flat[:, :k] = flat[:, order]
    return flat.reshape(codes.shape), order


def _reordered_input(graph: ir.Graph, layer: Linear, order: np.ndarray, done: dict[tuple[int, bytes], ir.Value]
                     ) -> ir.Value:
    """The layer's input with its last dim in ``order`` (a ``Gather``), one per input and order."""
    key = (id(layer.x), order.tobytes())
    if key not in done:
        indices = new_initializer(graph, f"{layer.name}.input_order", order.astype(np.int64))
        gather = ir.Node("", "Gather", [layer.x, indices], attributes=[ir.AttrInt64("axis", -1)],
                         name=f"{layer.nodes[0].name or layer.name}.input_order")
        gather.outputs[0].dtype = layer.x.dtype
        gather.outputs[0].shape = None if layer.x.shape is None else ir.Shape(list(layer.x.shape))
        graph.insert_before(layer.nodes[0], gather)
        done[key] = gather.outputs[0]
    return done[key]


def _to_matmulnbits(graph: ir.Graph, layer: Linear, codes: np.ndarray, scales: np.ndarray, zeros: np.ndarray | None,
                    bits: int, block_size: int, accuracy_level: int, dtype: np.dtype, k: int) -> int:
    n, blocks, _ = codes.shape
    node, base = layer.nodes[0], layer.name
    inputs = [layer.x, new_initializer(graph, f"{base}.q{bits}", pack_codes(codes, bits)),
              new_initializer(graph, f"{base}.scales", scales.astype(dtype).reshape(-1))]
    if zeros is not None:
        inputs.append(new_initializer(graph, f"{base}.zero_points", pack_codes(zeros, bits).reshape(-1)))
    attributes = [ir.AttrInt64("K", int(k)), ir.AttrInt64("N", int(n)), ir.AttrInt64("bits", bits),
                  ir.AttrInt64("block_size", block_size), ir.AttrInt64("accuracy_level", accuracy_level)]
    product = ir.Node(_MS_DOMAIN, "MatMulNBits", inputs, attributes=attributes, name=node.name,
                      metadata_props=dict(node.metadata_props))
    new = [product]
    out = product.outputs[0]
    if layer.bias is not None:
        add = ir.Node("", "Add", [out, layer.bias], name=f"{node.name or base}.bias")
        new.append(add)
        out = add.outputs[0]
    ir.convenience.replace_nodes_and_values(graph, layer.nodes[-1], layer.nodes, new, [layer.output], [out])
    return sum(v.const_value.nbytes for v in inputs[1:])


def _to_dequantize(graph: ir.Graph, layer: Linear, codes: np.ndarray, scales: np.ndarray, zeros: np.ndarray | None,
                   bits: int, block_size: int, dtype: np.dtype, k: int) -> int:
    n, blocks, _ = codes.shape
    node, base = layer.nodes[0], layer.name
    # The product reads [K, N]: a MatMul's (a weight behind a Transpose too: the Transpose goes), a Gemm's
    # without transB. Otherwise [N, K].
    transposed = node.op_type == "MatMul" or layer.transposed
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
    dq.outputs[0].dtype = layer.weight.dtype
    dq.outputs[0].shape = ir.Shape([k, n] if transposed else [n, k])
    graph.insert_before(node, dq)
    node.replace_input_with(1, dq.outputs[0])
    return sum(v.const_value.nbytes for v in inputs)


def _embeddings(graph: ir.Graph, result: QuantizeResult, bits: int, block_size: int, symmetric: bool, form: str,
                skip: Sequence[str]) -> None:
    """Each ``Gather`` of rows of a constant float table becomes a gather of the rows' codes and scales,
    dequantized after: ``com.microsoft::GatherBlockQuantized`` (form ``matmulnbits``), or standard
    ``Gather`` of int8-stored codes then a blocked ``DequantizeLinear`` along the row (``dequantize``:
    onnxruntime has no Gather of INT4, so int4 codes take a byte each there)."""
    for node in list(graph):
        if node.op_type != "Gather" or node.domain or int(node.attributes.get("axis", ir.AttrInt64("axis", 0)).value):
            continue
        table = node.inputs[0]
        if table is None or table.is_graph_input() or graph.initializers.get(table.name or "") is not table:
            continue
        tensor = table.const_value
        if tensor is None or tensor.dtype not in _FLOATS or len(tensor.shape) != 2:
            continue
        name = table.name or "table"
        if any(s and s in name for s in skip):
            result.left[name] = "skipped by name"
            continue
        array = np.asarray(tensor.numpy())
        rows, width = array.shape
        codes, scales, zeros = quantize_blocks(array.astype(np.float64), bits, block_size, symmetric)
        flat = codes.reshape(rows, -1)[:, :width]
        scale_array = scales.astype(array.dtype)
        if form == "matmulnbits":
            inputs = [new_initializer(graph, f"{name}.q{bits}", pack_codes(flat, bits)), node.inputs[1],
                      new_initializer(graph, f"{name}.scales", scale_array)]
            if zeros is not None:
                inputs.append(new_initializer(graph, f"{name}.zero_points", pack_codes(zeros, bits)))
            gathered = ir.Node(_MS_DOMAIN, "GatherBlockQuantized", inputs, name=node.name,
                               attributes=[ir.AttrInt64("gather_axis", 0), ir.AttrInt64("quantize_axis", 1),
                                           ir.AttrInt64("block_size", block_size), ir.AttrInt64("bits", bits)])
            new = [gathered]
            stored = [inputs[0], *inputs[2:]]
        else:
            middle = 1 << (bits - 1)
            code_array = (flat.astype(np.int16) - middle).astype(np.int8) if zeros is None else flat
            stored = [new_initializer(graph, f"{name}.q{bits}", code_array),
                      new_initializer(graph, f"{name}.scales", scale_array)]
            if zeros is not None:
                stored.append(new_initializer(graph, f"{name}.zero_points", zeros))
            picked = [ir.Node("", "Gather", [v, node.inputs[1]], attributes=[ir.AttrInt64("axis", 0)],
                              name=f"{node.name or name}.{v.name}") for v in stored]
            dq = ir.Node("", "DequantizeLinear", [p.outputs[0] for p in picked], name=f"{node.name or name}.dequantize",
                         attributes=[ir.AttrInt64("axis", -1), ir.AttrInt64("block_size", block_size)])
            new = [*picked, dq]
        out = new[-1].outputs[0]
        out.dtype, out.shape = node.outputs[0].dtype, node.outputs[0].shape
        ir.convenience.replace_nodes_and_values(graph, node, [node], new, [node.outputs[0]], [out])
        result.tables[name] = bits
        result.bytes_before += array.nbytes
        result.bytes_after += sum(v.const_value.nbytes for v in stored)
