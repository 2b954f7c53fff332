"""The default optimization pipeline: a list of onnx_ir passes run in order."""

from __future__ import annotations

import onnx_ir as ir
from onnx_ir.passes import common as common_passes

from onnxport.optimize.activation_fuse import ActivationFusePass
from onnxport.optimize.attention_cache_fuse import AttentionCacheFusePass
from onnxport.optimize.attention_heads_fuse import AttentionHeadsFusePass
from onnxport.optimize.attention_layout_fuse import AttentionLayoutFusePass
from onnxport.optimize.constant_fold import ConstantFoldPass
from onnxport.optimize.conv_bn_fold import ConvBatchNormFoldPass
from onnxport.optimize.identity import MainIdentityPass
from onnxport.optimize.integer_matmul import IntegerMatMulPass
from onnxport.optimize.linear_layout import LinearWeightLayoutPass
from onnxport.optimize.rms_norm_fuse import RmsNormFusePass
from onnxport.optimize.rotary_fuse import RotaryFusePass
from onnxport.optimize.same_shape import SameShapePass
from onnxport.targets import DEFAULT_TARGET, Forms, parse

__all__ = ["default_passes", "optimize"]


def default_passes(forms: Forms) -> list[ir.passes.PassBase]:
    """Passes run by ``optimize=True``, in order. The fusions run after CSE, which merges the copies of
    shared subexpressions (the rotary tables each layer unsqueezes) that they match on; ``forms`` says which
    fused ops the export's target computes right."""
    return [
        ConstantFoldPass(),
        ConvBatchNormFoldPass(),
        LinearWeightLayoutPass(),
        IntegerMatMulPass(forms),
        MainIdentityPass(),
        SameShapePass(),
        common_passes.CommonSubexpressionEliminationPass(),
        AttentionHeadsFusePass(forms),
        AttentionCacheFusePass(),
        RmsNormFusePass(forms),
        RotaryFusePass(forms),
        ActivationFusePass(),
        common_passes.RemoveUnusedNodesPass(),  # the layout fusion counts readers: dead ones first
        AttentionLayoutFusePass(),
        common_passes.RemoveUnusedNodesPass(),
        common_passes.RemoveUnusedOpsetsPass(),
    ]


def optimize(model: ir.Model, forms: Forms | None = None) -> ir.Model:
    """Run the default passes in place (fusing what ``forms`` allows: default, the default target's at the
    model's opset); returns the model."""
    forms = forms or Forms(parse(DEFAULT_TARGET), model.opset_imports.get("", 0))
    result = ir.passes.PassManager(default_passes(forms))(model)
    return result.model
