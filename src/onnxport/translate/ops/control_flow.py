"""Higher-order control-flow operators: ``torch.cond`` -> ``If``."""

from __future__ import annotations

from collections.abc import Sequence

import onnx_ir as ir
import torch

from onnxport.translate.builder import Ctx
from onnxport.translate.registry import aten


@aten(torch.ops.higher_order.cond)
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
    names = [n.target for n in ctx.node.args[1:3]] if ctx.node is not None else ["then_branch", "else_branch"]
    operands = list(operands)
    then_graph = ctx.subgraph(true_fn, names[0], operands)
    else_graph = ctx.subgraph(false_fn, names[1], operands)
    outputs = ctx.op.If(pred, then_branch=then_graph, else_branch=else_graph, _outputs=len(then_graph.outputs))
    return outputs if isinstance(outputs, tuple) else (outputs,)
