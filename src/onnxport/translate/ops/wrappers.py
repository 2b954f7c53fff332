"""Region wrappers: higher-order ops that only scope their body (grad mode, autocast, checkpointing).

torch.export keeps a ``with torch.no_grad():`` block, a ``torch.autocast(...)`` block or an
activation-checkpointed call as a higher-order op around a submodule when the model is exported with
autograd on. None of that scoping means anything in an inference graph, so the body is inlined into
the enclosing graph; an enabled autocast region first has its implicit casts made explicit. Effect tokens
(``with_effects``) around checks that ONNX cannot raise are dropped.
"""

from __future__ import annotations

from typing import Any

import torch

from onnxport.translate.builder import Ctx
from onnxport.translate.registry import aten

__all__ = ["explicit_autocast"]

_hop = torch.ops.higher_order
_aten = torch.ops.aten

# Ops that change the dtype on purpose: their input is not cast to the output's dtype.
_DTYPE_CHANGING = frozenset({
    _aten._to_copy.default, _aten.to.dtype, _aten.to.dtype_layout, _aten.to.device, _aten.to.other,
    _aten.view.dtype, _aten._assert_tensor_metadata.default,
})


@aten(_hop.wrap_with_set_grad_enabled)
def wrap_with_set_grad_enabled(ctx: Ctx, enabled: bool, body: torch.fx.GraphModule, *args: Any) -> list[Any]:
    """wrap_with_set_grad_enabled(bool enabled, GraphModule body, *args) -> tuple

    ``torch.no_grad()`` / ``torch.enable_grad()`` regions: gradients do not exist in ONNX, the body is inlined.
    """
    return ctx.inline(body, args)


@aten(_hop.wrap_with_autocast)
def wrap_with_autocast(
    ctx: Ctx, device_type: str, dtype: torch.dtype | None, enabled: bool, cache_enabled: bool | None,
    body: torch.fx.GraphModule, *args: Any,
) -> list[Any]:
    """wrap_with_autocast(str device_type, ScalarType? dtype, bool enabled, bool? cache_enabled,
    GraphModule body, *args) -> tuple

    An enabled region runs some ops in ``dtype`` (matmuls, convolutions) and others in float32
    (softmax, norms) without a cast in the graph: torch's metadata records each op's output dtype, so
    every floating input whose dtype differs from its op's floating output gets an explicit cast first.
    A disabled region (or one for another device, which changed no dtype) is inlined as it is.
    """
    return ctx.inline(explicit_autocast(body) if enabled else body, args)


@aten(_hop.tag_activation_checkpoint, _hop.wrap_activation_checkpoint)
def activation_checkpoint(ctx: Ctx, body: torch.fx.GraphModule, *args: Any, **kwargs: Any) -> list[Any]:
    """tag_activation_checkpoint(GraphModule body, *args, **checkpoint_kwargs) -> tuple

    Checkpointing only changes what autograd keeps for the backward pass; the forward is the body.
    """
    return ctx.inline(body, args)


@aten(_hop.invoke_subgraph)
def invoke_subgraph(ctx: Ctx, body: torch.fx.GraphModule, identifier: str | None, *operands: Any) -> list[Any]:
    """invoke_subgraph(GraphModule body, str? identifier, *operands) -> tuple

    A region compiled once and called at several places (``torch.compiler.nested_compile_region``):
    each call is inlined with its own operands.
    """
    return ctx.inline(body, operands)


def explicit_autocast(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of ``gm`` in which each op's floating inputs are cast to its floating output dtype.

    Autocast casts the inputs of an op on its lists (to the autocast dtype, or up to float32) right
    before the op; ``meta["val"]`` of the op already has the resulting dtype. ``gm`` is left untouched.
    """
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    attrs: dict[str, Any] = {}
    for node in gm.graph.nodes:
        if node.op == "get_attr":  # nested regions (a no_grad block inside autocast) run under it too
            sub = _attr(gm, node.target)
            attrs[node.target] = explicit_autocast(sub) if isinstance(sub, torch.fx.GraphModule) else sub
        out = _floating_dtype(node.meta.get("val"))
        if node.op == "call_function" and out is not None and node.target not in _DTYPE_CHANGING:
            cast = lambda arg, out=out: _cast_node(graph, env[arg], out) if _needs_cast(arg, out) else env[arg]  # noqa: E731
            node_args = torch.fx.node.map_arg(node.args, cast)
            node_kwargs = torch.fx.node.map_arg(node.kwargs, cast)
            new = graph.create_node(node.op, node.target, node_args, node_kwargs, node.name)
            new.meta = dict(node.meta)
            env[node] = new
        else:
            env[node] = graph.node_copy(node, env.__getitem__)
    return torch.fx.GraphModule(attrs, graph)


def _attr(gm: torch.nn.Module, dotted: str) -> Any:
    for part in dotted.split("."):
        gm = getattr(gm, part)
    return gm


def _floating_dtype(val: Any) -> torch.dtype | None:
    """The dtype of the first tensor of ``val`` when it is floating point, else None."""
    if isinstance(val, (tuple, list)):
        val = next((v for v in val if isinstance(v, torch.Tensor)), None)
    if isinstance(val, torch.Tensor) and val.dtype.is_floating_point:
        return val.dtype
    return None


def _needs_cast(arg: torch.fx.Node, dtype: torch.dtype) -> bool:
    val = arg.meta.get("val")
    return isinstance(val, torch.Tensor) and val.dtype.is_floating_point and val.dtype != dtype


def _cast_node(graph: torch.fx.Graph, arg: torch.fx.Node, dtype: torch.dtype) -> torch.fx.Node:
    cast = graph.create_node("call_function", _aten._to_copy.default, (arg,), {"dtype": dtype}, name=f"{arg.name}_autocast")
    cast.meta = {k: v for k, v in arg.meta.items() if k in ("stack_trace", "nn_module_stack")}
    cast.meta["val"] = arg.meta["val"].to(dtype)
    return cast


@aten(torch.ops.higher_order.with_effects)
def with_effects(ctx: Ctx, token: None, op: object, *args: object, **kwargs: object) -> tuple[None, ...]:
    """with_effects(token, op, *args, **kwargs) -> (token, *op outputs)

    torch's decompositions of the checked linalg ops (``linalg_inv`` inside ``linalg_tensorinv``) thread
    ``_linalg_check_errors`` through an effect token. ONNX cannot raise, so the check is dropped and the
    token (no ONNX value) passes through; a singular input gives inf/NaN instead of an error.
    """
    if op is not _aten._linalg_check_errors.default:
        raise ctx.unsupported(
            f"the side effect of {op} has no ONNX form",
            fix="remove the effectful call (printing, assertions, custom ops with effects) from the exported code",
        )
    return (None,)
