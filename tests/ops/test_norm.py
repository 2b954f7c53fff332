"""Normalisation: batch, layer, group, instance and RMS norm, as aten overloads and nn modules."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn, rand, randn

import onnxport
from onnxport.translate.registry import ops
from tests.ops._runner import OpCase, params, run_case

aten = ops.aten  # an op this torch lacks is an AbsentOp: its cases are skipped
f32, f16 = torch.float32, torch.float16
Dim = torch.export.Dim
F16_TOL = {f16: (2e-2, 2e-2)}


def _named(module: nn.Module, name: str) -> nn.Module:
    module.__name__ = name
    return module


def _bn(module: nn.Module, name: str, train: bool = False) -> nn.Module:
    """A batch/instance norm module with non-trivial affine parameters and running statistics."""
    torch.manual_seed(2)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(randn(p.shape))
        if getattr(module, "running_mean", None) is not None:
            module.running_mean.copy_(randn(module.running_mean.shape))
            module.running_var.copy_(rand(module.running_var.shape) + 0.5)
    return _named(module.train(train), name)


def _affine(module: nn.Module, name: str) -> nn.Module:
    torch.manual_seed(3)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(randn(p.shape))
    return _named(module, name)


def layer_norm_last_dim(x: torch.Tensor) -> torch.Tensor:
    """normalized_shape read from a (possibly symbolic) size, no weight."""
    return F.layer_norm(x, x.shape[-1:])


def rms_norm_last_dim(x: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, x.shape[-1:])


def stats(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    return randn(n), rand(n) + 0.5


CASES = [
    # batch norm
    OpCase(aten.batch_norm.default, args=lambda: (randn(2, 3, 4, 5), randn(3), randn(3), *stats(3), False, 0.1, 1e-5, False),
           name="eval", expect_ops=["BatchNormalization"], dtypes=(f32, f16), tol=F16_TOL),
    OpCase(aten.batch_norm.default, args=lambda: (randn(4, 3), None, None, *stats(3), False, 0.1, 1e-3, False),
           name="eval_2d_noaffine"),
    OpCase(aten.batch_norm.default, args=lambda: (randn(4, 3, 6), randn(3), randn(3), None, None, True, 0.1, 1e-5, False),
           name="batch_stats", dtypes=(f32, f16), tol=F16_TOL),
    OpCase(aten._native_batch_norm_legit_no_training.default,
           args=lambda: (randn(2, 3, 4, 5), randn(3), None, *stats(3), 0.1, 1e-5), dtypes=(f32, f16), tol=F16_TOL),
    OpCase(aten.native_batch_norm.default, args=lambda: (randn(2, 3, 5), None, randn(3), None, None, True, 0.1, 1e-5),
           name="train"),
    OpCase(aten.native_batch_norm.default, args=lambda: (randn(2, 3, 5), randn(3), randn(3), *stats(3), False, 0.1, 1e-5),
           name="eval"),
    OpCase(aten._native_batch_norm_legit.no_stats, args=lambda: (randn(2, 3, 4, 4), randn(3), randn(3), True, 0.1, 1e-5)),
    OpCase(aten._native_batch_norm_legit_functional.default,
           args=lambda: (randn(2, 3, 4, 4), randn(3), randn(3), *stats(3), True, 0.1, 1e-5), name="train"),
    OpCase(aten._native_batch_norm_legit_functional.default,
           args=lambda: (randn(2, 3, 4, 4), None, None, *stats(3), False, 0.1, 1e-5), name="eval"),
    OpCase(aten._batch_norm_with_update_functional.default,
           args=lambda: (randn(3, 2, 4), randn(2), randn(2), *stats(2), -1.2, 1e-5)),
    OpCase(aten._batch_norm_with_update_functional.default,
           args=lambda: (randn(3, 1), randn(1), randn(1), *stats(1), 0.5, 0.6), name="2d"),
    OpCase(aten._batch_norm_no_update.default, args=lambda: (randn(3, 2, 4), randn(2), randn(2), *stats(2), 0.1, 1e-5)),
    OpCase(aten.batch_norm.default, args=lambda: (torch.zeros(0), None, None, torch.zeros(0), torch.zeros(0), False,
                                                  0.1, 1e-5, False), name="empty_1d"),
    OpCase(_bn(nn.BatchNorm2d(4), "BatchNorm2d"), args=lambda: (randn(2, 4, 5, 5),), name="eval",
           expect_ops=["BatchNormalization"]),
    OpCase(_bn(nn.BatchNorm1d(4), "BatchNorm1d"), args=lambda: (randn(3, 4),), name="eval_2d"),
    OpCase(_bn(nn.BatchNorm1d(4, affine=False), "BatchNorm1d"), args=lambda: (randn(3, 4, 7),), name="dynamic",
           dynamic_shapes=(({0: Dim("n", min=2), 2: Dim("l", min=2)},),)),
    OpCase(_bn(nn.BatchNorm3d(2, track_running_stats=False), "BatchNorm3d"), args=lambda: (randn(2, 2, 3, 4, 5),),
           name="no_running_stats"),
    # layer norm
    OpCase(aten.layer_norm.default, args=lambda: (randn(2, 3, 8), [8], randn(8), randn(8), 1e-5),
           expect_ops=["LayerNormalization"], dtypes=(f32, f16), tol=F16_TOL),
    OpCase(aten.layer_norm.default, args=lambda: (randn(2, 3, 4, 5), [4, 5]), name="no_affine_2dims", dtypes=(f32, f16),
           tol=F16_TOL),
    OpCase(aten.native_layer_norm.default, args=lambda: (randn(2, 3, 6), [6], randn(6), None, 1e-4), dtypes=(f32, f16),
           tol=F16_TOL),
    OpCase(layer_norm_last_dim, args=lambda: (randn(2, 3, 6),), name="dynamic",
           dynamic_shapes=(({0: Dim("n", min=2), 2: Dim("d", min=2)},),)),
    OpCase(_affine(nn.LayerNorm([3, 4]), "LayerNorm"), args=lambda: (randn(2, 5, 3, 4),), name="module"),
    OpCase(_named(nn.LayerNorm(6, bias=False), "LayerNorm"), args=lambda: (randn(2, 5, 6),), name="no_bias",
           dynamic_shapes=(({0: Dim("n", min=2), 1: Dim("s", min=2)},),)),
    OpCase(_named(nn.LayerNorm(6, elementwise_affine=False), "LayerNorm"), args=lambda: (randn(2, 6),), name="no_affine"),
    # group norm
    OpCase(aten.group_norm.default, args=lambda: (randn(2, 6, 4, 5), 3, randn(6), randn(6), 1e-5),
           dtypes=(f32, f16), tol=F16_TOL),
    OpCase(aten.group_norm.default, args=lambda: (randn(3, 4), 2), name="2d_noaffine"),
    OpCase(aten.native_group_norm.default, args=lambda: (randn(2, 6, 10), randn(6), None, 2, 6, 10, 3, 1e-5),
           dtypes=(f32, f16), tol=F16_TOL),
    OpCase(_affine(nn.GroupNorm(2, 4), "GroupNorm"), args=lambda: (randn(2, 4, 8),), name="module",
           expect_ops=["ReduceMean"]),
    OpCase(_affine(nn.GroupNorm(4, 8), "GroupNorm"), args=lambda: (randn(3, 8, 5, 6),), name="dynamic",
           dynamic_shapes=(({0: Dim("n", min=2), 2: Dim("h", min=2), 3: Dim("w", min=2)},),)),
    # instance norm
    OpCase(aten.instance_norm.default, args=lambda: (randn(2, 3, 4, 5), randn(3), randn(3), None, None, True, 0.1, 1e-5,
           False), expect_ops=["InstanceNormalization"], dtypes=(f32, f16), tol=F16_TOL),
    OpCase(_named(nn.InstanceNorm2d(3), "InstanceNorm2d"), args=lambda: (randn(2, 3, 6, 5),), name="dynamic",
           dynamic_shapes=(({0: Dim("n", min=2), 2: Dim("h", min=2)},),)),
    OpCase(_bn(nn.InstanceNorm1d(3, affine=True, track_running_stats=True), "InstanceNorm1d"),
           args=lambda: (randn(2, 3, 6),), name="running_stats"),
    OpCase(_bn(nn.InstanceNorm1d(3, affine=True), "InstanceNorm1d"), args=lambda: (randn(3, 6),), name="unbatched"),
    # rms norm (opset >= 23: RMSNormalization)
    OpCase(aten.rms_norm.default, args=lambda: (randn(2, 3, 8), [8], randn(8), 1e-6), expect_ops=["RMSNormalization"],
           dtypes=(f32, f16), tol=F16_TOL),
    OpCase(aten.rms_norm.default, args=lambda: (randn(2, 3, 4, 5), [4, 5]), name="eps_none_2dims", dtypes=(f32, f16),
           tol=F16_TOL),
    OpCase(rms_norm_last_dim, args=lambda: (randn(2, 3, 6),), name="dynamic",
           dynamic_shapes=(({0: Dim("n", min=2), 2: Dim("d", min=2)},),)),
    OpCase(_affine(nn.RMSNorm(6), "RMSNorm"), args=lambda: (randn(2, 5, 6),), name="module"),
]


@pytest.mark.parametrize(("case", "dtype"), params(CASES))
def test_op(case: OpCase, dtype: torch.dtype | None) -> None:
    run_case(case, dtype)


@pytest.mark.parametrize("dtype", [f32, f16])
@pytest.mark.parametrize("weight", [True, False])
def test_rms_norm_opset18_formula(dtype: torch.dtype, weight: bool) -> None:
    """Below opset 23 there is no RMSNormalization: the formula must match eager."""
    torch.manual_seed(0)
    module = nn.RMSNorm(8, elementwise_affine=weight).to(dtype)
    if weight:
        with torch.no_grad():
            module.weight.copy_(randn(8))
    x = randn(2, 3, 8, dtype=dtype)
    prog = onnxport.export(module, (x,), opset=18, verify=False)
    assert "RMSNormalization" not in {n.op_type for n in prog.model.graph.all_nodes()}
    tol = 1e-2 if dtype == f16 else 1e-5
    torch.testing.assert_close(prog(x), module(x), atol=tol, rtol=tol)


def test_exported_targets() -> None:
    """The overloads torch.export emits for norm modules are the ones translated here."""
    from onnxport.translate.registry import lookup

    cases = [(nn.BatchNorm2d(3).eval(), (2, 3, 4, 4)), (nn.LayerNorm(4), (2, 3, 4)), (nn.GroupNorm(1, 3), (2, 3, 4)),
             (nn.InstanceNorm2d(3), (2, 3, 4, 4)), (nn.RMSNorm(4), (2, 3, 4))]
    for module, shape in cases:
        ep = torch.export.export(module, (randn(*shape),))
        targets = [n.target for n in ep.graph.nodes if n.op == "call_function"]
        assert targets and all(lookup(t) is not None for t in targets), targets
