"""Higher-order control-flow operators: ``cond`` -> ``If``, ``while_loop`` -> ``Loop``, ``scan`` and
``map_impl`` -> ``Scan``.

Loop and scan bodies read the ops' ``additional_inputs`` (parameters, closed-over tensors and sizes)
straight from the enclosing graph, which ONNX subgraphs may do, so only the carried values and the
scanned slices become formal inputs of the ONNX bodies.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import onnx_ir as ir
import torch

from onnxport.errors import BUG_FIX, TranslationError
from onnxport.translate.builder import Ctx
from onnxport.translate.registry import aten

_hop = torch.ops.higher_order


@aten(_hop.cond)
def cond(
    ctx: Ctx,
    pred: ir.Value | bool,
    true_fn: torch.fx.GraphModule,
    false_fn: torch.fx.GraphModule,
    operands: Sequence[ir.Value],
) -> tuple[ir.Value, ...]:
    """cond(pred, true_fn, false_fn, operands) -> tuple of Tensors

    Both branches become subgraphs with no formal inputs that read the operands from the outer graph.
    """
    pred = ctx.as_value(pred, dtype=ir.DataType.BOOL) if not isinstance(pred, ir.Value) else ctx.cast(pred, ir.DataType.BOOL)
    names = _graph_names(ctx, (1, 2), ("then_branch", "else_branch"))
    operands = list(operands)
    then_graph = ctx.subgraph(true_fn, names[0], operands)
    else_graph = ctx.subgraph(false_fn, names[1], operands)
    outputs = ctx.op.If(pred, then_branch=then_graph, else_branch=else_graph, _outputs=len(then_graph.outputs))
    return outputs if isinstance(outputs, tuple) else (outputs,)


@aten(_hop.while_loop)
def while_loop(
    ctx: Ctx,
    cond_fn: torch.fx.GraphModule,
    body_fn: torch.fx.GraphModule,
    carried_inputs: Sequence[ir.Value | int | float | bool],
    additional_inputs: Sequence[Any],
) -> tuple[ir.Value, ...]:
    """while_loop(cond_fn, body_fn, carried_inputs, additional_inputs) -> tuple of carried values

    An unbounded ``Loop`` (no trip count): the first test runs in the enclosing graph, and the body
    runs the torch body then the torch cond on the new values, so one ONNX body holds both graphs.
    """
    extra = list(additional_inputs)
    body_inputs = _placeholders(body_fn)[: len(carried_inputs)]
    init = [_value(ctx, v, p) for v, p in zip(carried_inputs, body_inputs)]
    first = _as_bool(ctx, ctx.inline(cond_fn, init + extra)[0])
    (body_name,) = _graph_names(ctx, (1,), ("while_body",))
    iteration = ctx.formal(f"{body_name}_iter", 0)
    cond_in = ctx.formal(f"{body_name}_cond_in", True)
    carried = [_formal_like(ctx, p) for p in body_inputs]
    body = ctx.child(body_name, [iteration, cond_in, *carried])
    new = [_value(body, v, p) for v, p in zip(body.inline(body_fn, carried + extra), body_inputs)]
    again = _as_bool(body, body.inline(cond_fn, new + extra)[0])
    graph = body.finish([again, *new])
    outputs = ctx.op.Loop(None, first, *init, body=graph, _outputs=len(init))
    return outputs if isinstance(outputs, tuple) else (outputs,)


@aten(_hop.scan)
def scan(
    ctx: Ctx,
    combine_fn: torch.fx.GraphModule,
    init: Sequence[ir.Value],
    xs: Sequence[ir.Value],
    additional_inputs: Sequence[Any],
) -> tuple[ir.Value, ...]:
    """scan(combine_fn, init, xs, additional_inputs) -> (final carries..., stacked ys...)

    torch.export already moved ``dim`` to the front and flipped ``xs`` for ``reverse``, so the op
    always scans forward along axis 0, like ONNX ``Scan``.
    """
    formals = [_formal_like(ctx, p) for p in _placeholders(combine_fn)[: len(init) + len(xs)]]
    (name,) = _graph_names(ctx, (0,), ("scan_body",))
    body = ctx.child(name, formals)
    graph = body.finish(body.inline(combine_fn, formals + list(additional_inputs)))
    outputs = ctx.op.Scan(*init, *xs, body=graph, num_scan_inputs=len(xs), _outputs=len(graph.outputs))
    return outputs if isinstance(outputs, tuple) else (outputs,)


@aten(_hop.map_impl)
def map_impl(
    ctx: Ctx, f: torch.fx.GraphModule, xs: Sequence[ir.Value], pos_args: Sequence[Any]
) -> tuple[ir.Value, ...]:
    """map_impl(f, xs, pos_args) -> tuple of Tensors stacked along dim 0

    A stateless ``Scan``: every output of ``f`` is a scan output.
    """
    formals = [_formal_like(ctx, p) for p in _placeholders(f)[: len(xs)]]
    (name,) = _graph_names(ctx, (0,), ("map_body",))
    body = ctx.child(name, formals)
    graph = body.finish(body.inline(f, formals + list(pos_args)))
    outputs = ctx.op.Scan(*xs, body=graph, num_scan_inputs=len(xs), _outputs=len(graph.outputs))
    return outputs if isinstance(outputs, tuple) else (outputs,)


# -- helpers -------------------------------------------------------------------------------------


def _graph_names(ctx: Ctx, indices: Sequence[int], defaults: Sequence[str]) -> list[str]:
    """The get_attr names of the node's subgraph arguments (``while_loop_body_graph_0``)."""
    if ctx.node is None:
        return list(defaults)
    args = ctx.node.args
    return [
        str(args[i].target) if i < len(args) and isinstance(args[i], torch.fx.Node) else d
        for i, d in zip(indices, defaults)
    ]


def _placeholders(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "placeholder"]


def _formal_like(ctx: Ctx, placeholder: torch.fx.Node) -> ir.Value:
    """A formal input typed after a torch subgraph placeholder (sizes and ints become int64 scalars)."""
    value = ctx.formal(placeholder.name, placeholder.meta.get("val"))
    if value.dtype is None:
        raise TranslationError(f"cannot type loop input {placeholder.name}: no tensor metadata", node=placeholder.name,
                               fix=BUG_FIX)
    return value


def _value(ctx: Ctx, x: Any, placeholder: torch.fx.Node) -> ir.Value:
    """``x`` as a value of the placeholder's type: Python ints carried by a loop become int64 constants."""
    if isinstance(x, ir.Value):
        return x
    val = placeholder.meta.get("val")
    if isinstance(val, torch.Tensor):
        return ctx.const(x, val.dtype)
    dtype = ir.DataType.BOOL if isinstance(x, bool) else ir.DataType.FLOAT if isinstance(x, float) else ir.DataType.INT64
    return ctx.const(x, dtype)


def _as_bool(ctx: Ctx, x: Any) -> ir.Value:
    """A Loop condition: a bool scalar."""
    x = ctx.as_value(x, dtype=ir.DataType.BOOL)
    if x.shape is not None and len(x.shape) != 0:
        x = ctx.op.Reshape(x, ctx.const([], ir.DataType.INT64))
    return x
