"""Quantized models at capture: tensor-subclass weights as plain tensors, quantized linear layers as matmuls.

- torchao's ``quantize_`` turns weights into tensor subclasses (``Int8Tensor``, ``IntxUnpackedToInt8Tensor``,
  ...). torch.export keeps such a parameter whole and reads its parts with ``export.access_subclass_inner_tensor``;
  :func:`prepare_program` makes each part a constant of the program of its own (``<weight>.qdata``,
  ``<weight>.scale``, ...), so they become integer and float initializers.
- ``Int8Tensor``'s own linear multiplies by the scales after the product; :class:`TorchaoIntegration` has the
  layers holding one dequantize their weight with ``torchao::dequantize_affine`` first, for the duration of the
  capture only, so the file holds ``DequantizeLinear`` of the int8 weight, which onnxruntime runs as an integer
  kernel.
- ``linear(x, dequantize(w), b)`` becomes ``matmul(x, dequantize(w).T) + b``: onnxruntime fuses a dequantized
  weight into ``MatMulNBits``, ``QLinearMatMul`` or ``MatMulIntegerToFloat`` behind a ``MatMul``, not behind the
  ``Gemm`` a linear layer is otherwise written as.
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterator
from typing import Any

import torch
from torch.export.graph_signature import InputKind, InputSpec, TensorArgument
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from onnxport.capture import integrations
from onnxport.errors import CaptureError

__all__ = ["TorchaoIntegration", "prepare_program"]


def _dequantize_targets() -> set[Any]:
    targets: set[Any] = set()
    qd = getattr(torch.ops, "quantized_decomposed", None)
    for name in ("dequantize_per_tensor", "dequantize_per_channel"):
        packet = getattr(qd, name, None) if qd is not None else None
        if packet is not None:
            targets.update(getattr(packet, o) for o in packet.overloads())
    if "torchao" in sys.modules:
        packet = getattr(getattr(torch.ops, "torchao", None), "dequantize_affine", None)
        if packet is not None:
            targets.add(packet.default)
    return targets


@torch.library.custom_op("onnxport::dequantized_linear", mutates_args=())
def dequantized_linear(x: torch.Tensor, qdata: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor | None,
                       block_size: list[int], quant_min: int, quant_max: int,
                       bias: torch.Tensor | None) -> torch.Tensor:
    """``linear(x, w, bias)`` with ``w`` torchao's ``dequantize_affine`` of the integer ``qdata`` ``[N, K]``
    (int8 storage, ``[quant_min, quant_max]``), one ``scale`` and ``zero_point`` per ``block_size`` block:
    a weight-only quantized linear layer, which onnxport writes as one fused op where the target has one."""
    n, k = qdata.shape
    rows, cols = n // block_size[0], -(-k // block_size[1])
    codes = qdata.to(torch.float32)
    if zero_point is not None:
        codes = codes - _per_element(zero_point.reshape(rows, cols).to(torch.float32), block_size, n, k)
    weight = codes * _per_element(scale.reshape(rows, cols).to(torch.float32), block_size, n, k)
    return torch.nn.functional.linear(x, weight.to(x.dtype), bias)


def _per_element(values: torch.Tensor, block_size: list[int], n: int, k: int) -> torch.Tensor:
    return values.repeat_interleave(block_size[0], 0).repeat_interleave(block_size[1], 1)[:n, :k]


@dequantized_linear.register_fake
def _(x, qdata, scale, zero_point, block_size, quant_min, quant_max, bias):  # noqa: ANN001, ANN202
    return x.new_empty((*x.shape[:-1], qdata.shape[0]))


def prepare_program(ep: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """``ep`` with subclass weights split into their parts and quantized linear layers as matmuls; ``ep`` itself
    when it has neither."""
    ep = _unwrap_subclasses(ep)
    _int8_as_uint8(ep.graph_module)
    _linear_as_matmul(ep.graph_module)
    return ep


def _int8_as_uint8(gm: torch.fx.GraphModule) -> None:
    """Per-tensor int8 quantization read only by dequantize ops -> uint8, codes and zero point plus 128: the same
    values and saturation. onnxruntime runs uint8 activations with int8 weights (U8S8) natively, and its own
    int8-to-uint8 rewrite fails to load int8 activations quantized around a Transpose (onnxruntime 1.32, in
    attention)."""
    qd = getattr(torch.ops, "quantized_decomposed", None)
    if qd is None:
        return
    quantize, dequantize = qd.quantize_per_tensor.default, qd.dequantize_per_tensor.default
    changed = False
    for node in list(gm.graph.nodes):
        if node.target is not quantize or node.args[5] != torch.int8 or not node.users:
            continue
        x, scale, zero, qmin, qmax, _ = node.args
        readers = list(node.users)
        if not all(r.target is dequantize and r.args[0] is node and r.args[1:6] == node.args[1:6] and "out_dtype"
                   not in r.kwargs for r in readers):
            continue
        node.args = (x, scale, zero + 128, qmin + 128, qmax + 128, torch.uint8)
        node.meta["val"] = node.meta["val"].to(torch.uint8) if "val" in node.meta else None
        for reader in readers:
            reader.args = (node, scale, zero + 128, qmin + 128, qmax + 128, torch.uint8)
        changed = True
    if changed:
        gm.recompile()


# -- tensor-subclass weights ------------------------------------------------------------------------------------


def _unwrap_subclasses(ep: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    gm = ep.graph_module
    access = getattr(getattr(torch.ops, "export", None), "access_subclass_inner_tensor", None)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    specs = list(ep.graph_signature.input_specs)
    state = {k: v for k, v in ep.state_dict.items()}
    constants = dict(ep.constants)
    changed = False
    new_specs: list[InputSpec] = []
    for node, spec in zip(placeholders, specs):
        if spec.kind not in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            new_specs.append(spec)
            continue
        value = state.get(spec.target) if spec.target in state else constants.get(spec.target)
        if not is_traceable_wrapper_subclass(value):
            new_specs.append(spec)
            continue
        changed = True
        parts: dict[str, torch.fx.Node] = {}
        for user in list(node.users):
            if access is None or user.target is not access.default:
                raise CaptureError(
                    f"{spec.target} is a {type(value).__name__} (a tensor subclass) that the captured program uses "
                    f"whole, in {user.name} = {user.target}",
                    fix="export the model after converting that weight to a plain tensor, or use a torchao "
                    "quantization whose weights torch.export splits into their parts (int8 or intx weight-only)")
            attr = user.args[1]
            inner = getattr(value, attr)
            if is_traceable_wrapper_subclass(inner):
                raise CaptureError(f"{spec.target}.{attr} is itself a tensor subclass ({type(inner).__name__})",
                                   fix="convert that weight to plain tensors before exporting")
            if attr not in parts:
                with gm.graph.inserting_before(node):
                    part = gm.graph.placeholder(f"{node.name}_{attr}")
                part.meta.update(user.meta)
                target = f"{spec.target}.{attr}"
                constants[target] = inner.detach()
                new_specs.append(InputSpec(InputKind.CONSTANT_TENSOR, TensorArgument(part.name), target, None))
                parts[attr] = part
            user.replace_all_uses_with(parts[attr])
            gm.graph.erase_node(user)
        gm.graph.erase_node(node)
        state.pop(spec.target, None)
        constants.pop(spec.target, None)
    if not changed:
        return ep
    gm.recompile()
    signature = torch.export.graph_signature.ExportGraphSignature(new_specs, list(ep.graph_signature.output_specs))
    return torch.export.ExportedProgram(
        root=gm, graph=gm.graph, graph_signature=signature, state_dict=state,
        range_constraints=ep.range_constraints, module_call_graph=ep.module_call_graph,
        example_inputs=ep.example_inputs, constants=constants, verifiers=ep.verifiers,
    )


# -- linear layers on dequantized weights -------------------------------------------------------------------------


def _linear_as_matmul(gm: torch.fx.GraphModule) -> None:
    """``linear(x, dequantize(w), b)`` -> ``matmul(x, permute(dequantize(w), [1, 0])) + b``, in place."""
    dequantize = _dequantize_targets()
    aten = torch.ops.aten
    changed = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not aten.linear.default or len(node.args) < 2:
            continue
        weight = node.args[1]
        if not isinstance(weight, torch.fx.Node) or weight.target not in dequantize:
            continue
        x, bias = node.args[0], node.args[2] if len(node.args) > 2 else node.kwargs.get("bias")
        if _weight_only(weight, x):
            with gm.graph.inserting_before(node):
                q, block_size, scale, zero, _, qmin, qmax = (list(weight.args) + [None] * 7)[:7]
                out = gm.graph.call_function(torch.ops.onnxport.dequantized_linear.default,
                                             (x, q, scale, zero, list(block_size), int(qmin), int(qmax), bias))
            out.meta.update({k: v for k, v in node.meta.items() if k != "val"})
            out.meta["val"] = node.meta["val"]
            node.replace_all_uses_with(out)
            gm.graph.erase_node(node)
            if not weight.users:
                gm.graph.erase_node(weight)
            changed = True
            continue
        vals = [n.meta.get("val") for n in (x, weight, bias) if isinstance(n, torch.fx.Node)]
        fake = torch._guards.detect_fake_mode(vals)
        if fake is None or weight.meta.get("val") is None or weight.meta["val"].dim() != 2:
            continue
        x_val = x.meta["val"]
        added: list[torch.fx.Node] = []

        def call(target: Any, *args: Any) -> torch.fx.Node:
            new = gm.graph.call_function(target, args)
            # the meta values of the arguments, those inside lists too (a reshape to [batch, ...] of symbolic sizes)
            new.meta["val"] = target(*torch.fx.node.map_arg(args, lambda a: a.meta["val"]))
            added.append(new)
            return new

        with gm.graph.inserting_before(node), fake:
            t = call(aten.permute.default, weight, [1, 0])
            # Rows of a 2-D product: onnxruntime (1.32) fails to load an int8 QDQ MatMul + Add of a 3-D input.
            lead = [d if isinstance(d, int) else call(aten.sym_size.int, x, i) for i, d in enumerate(x_val.shape[:-1])]
            rows = call(aten.reshape.default, x, [-1, x_val.shape[-1]]) if x_val.dim() > 2 else x
            out = call(aten.mm.default if x_val.dim() >= 2 else aten.matmul.default, rows, t)
            if isinstance(bias, torch.fx.Node):
                out = call(aten.add.Tensor, out, bias)
            if x_val.dim() > 2:
                out = call(aten.reshape.default, out, [*lead, weight.meta["val"].shape[0]])
        for n in added:
            for key in ("stack_trace", "nn_module_stack", "source_fn_stack"):
                if key in node.meta:
                    n.meta[key] = node.meta[key]
        node.replace_all_uses_with(out)
        gm.graph.erase_node(node)
        changed = True
    if changed:
        gm.recompile()


def _weight_only(weight: torch.fx.Node, x: Any) -> bool:
    """``weight`` is torchao's ``dequantize_affine`` of a constant 2-D int8 weight in blocks along its rows
    (``[1, group]``, or per row), to float32, read by a float32 input."""
    args = list(weight.args)
    if getattr(weight.target, "name", lambda: "")() != "torchao::dequantize_affine" or len(args) < 7:
        return False
    q, block_size, _, _, dtype, qmin, qmax = args[:7]
    out_dtype = args[7] if len(args) > 7 else weight.kwargs.get("output_dtype", torch.float32)
    q_val, x_val = q.meta.get("val") if isinstance(q, torch.fx.Node) else None, getattr(x, "meta", {}).get("val")
    return (isinstance(q, torch.fx.Node) and q.op == "placeholder" and q_val is not None and q_val.dim() == 2
            and q_val.dtype == torch.int8 and dtype == torch.int8 and out_dtype == torch.float32
            and isinstance(x_val, torch.Tensor) and x_val.dtype == torch.float32
            and qmin is not None and qmax is not None and list(block_size)[0] == 1)


# -- torchao ------------------------------------------------------------------------------------------------------


def _int8_weight(weight: Any) -> bool:
    """torchao's int8 weight-only ``Int8Tensor`` (no activation quantization)."""
    return (type(weight).__name__ == "Int8Tensor" and type(weight).__module__.startswith("torchao.")
            and getattr(weight, "act_quant_kwargs", None) is None and getattr(weight, "act_pre_scale", None) is None
            and weight.qdata.dim() == 2)


def _dequantized_linear(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    w = self.weight
    zero = getattr(w, "zero_point", None)
    weight = torch.ops.torchao.dequantize_affine(w.qdata, list(w.block_size), w.scale, zero, torch.int8,
                                                 -128, 127, output_dtype=w.dtype)
    return torch.nn.functional.linear(x, weight, self.bias)


class TorchaoIntegration(integrations.Integration):
    """During capture, linear layers with a torchao int8 weight-only weight dequantize it first."""

    name = "torchao"

    @contextlib.contextmanager
    def patched(self, model: Any) -> Iterator[None]:
        if "torchao" not in sys.modules or not isinstance(model, torch.nn.Module):
            yield
            return
        patched = []
        try:
            for module in model.modules():
                if isinstance(module, torch.nn.Linear) and _int8_weight(module.weight) and "forward" not in vars(module):
                    module.forward = types.MethodType(_dequantized_linear, module)
                    patched.append(module)
            yield
        finally:
            for module in patched:
                del module.forward


integrations.register(TorchaoIntegration())
