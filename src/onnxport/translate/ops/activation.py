"""Activation functions."""

from __future__ import annotations

import onnx_ir as ir
import torch

from onnxport.translate.builder import Ctx
from onnxport.translate.registry import aten

aten_ = torch.ops.aten


@aten(aten_.relu.default)
def relu(ctx: Ctx, x: ir.Value) -> ir.Value:
    """relu(Tensor self) -> Tensor"""
    return ctx.op.Relu(x)
