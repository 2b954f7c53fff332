"""Distances and products of several operands (translate/ops/distance.py) against eager PyTorch: cdist, pdist,
dist, bilinear (_trilinear), addbmm, cartesian_prod."""

import pytest
import torch
import torch.nn.functional as F
from torch import randn
from torch.export import Dim

from onnxport.translate.registry import ops
from tests.ops._runner import OpCase, params, run_case

aten = ops.aten  # an op this torch lacks is an AbsentOp: its cases are skipped


def dyn(*specs):
    """A dynamic_shapes spec for the runner's wrapper, whose forward takes ``*args``."""
    return (specs,)


def cdist(a, b, **kwargs): return torch.cdist(a, b, **kwargs)
def pdist(x, **kwargs): return F.pdist(x, **kwargs)
def bilinear(a, b, w, bias=None): return F.bilinear(a, b, w, bias)
def addbmm(x, a, b, **kwargs): return torch.addbmm(x, a, b, **kwargs)
def cartesian(*ts): return torch.cartesian_prod(*ts)


CASES = [
    *[
        OpCase(cdist, args=lambda: (randn(2, 4, 3), randn(2, 5, 3)), kwargs={"p": p}, name=f"p{p}")
        for p in (0.0, 1.0, 2.0, 3.5, float("inf"))
    ],
    OpCase(cdist, args=lambda: (randn(30, 4), randn(6, 4)), name="matmul_form", expect_ops=["MatMul"]),
    OpCase(cdist, args=lambda: (randn(3, 1, 4, 2), randn(2, 5, 2)),
           kwargs={"compute_mode": "use_mm_for_euclid_dist"}, name="matmul_broadcast"),
    OpCase(cdist, args=lambda: (randn(30, 4), randn(6, 4)), kwargs={"compute_mode": "donot_use_mm_for_euclid_dist"},
           name="direct"),
    *[OpCase(pdist, args=lambda: (randn(5, 3),), kwargs={"p": p}, name=f"p{p}") for p in (0.0, 1.0, 2.0, float("inf"))],
    OpCase(pdist, args=lambda: (randn(6, 3),), name="dyn", dynamic_shapes=dyn({0: Dim("n", min=2)})),
    OpCase(aten.dist.default, args=lambda: (randn(3, 4), randn(4)), expect_ops=["Sqrt"]),
    *[OpCase(aten.dist.default, args=lambda: (randn(3, 4), randn(3, 1), p), name=f"p{p}")
      for p in (0, 1, 3, float("inf"), float("-inf"))],
    # products
    OpCase(bilinear, args=lambda: (randn(4, 3), randn(4, 2), randn(5, 3, 2), randn(5)), expect_ops=["Einsum"]),
    OpCase(bilinear, args=lambda: (randn(2, 4, 3), randn(2, 4, 2), randn(5, 3, 2)), name="batched"),
    OpCase(aten._trilinear.default, args=lambda: (randn(2, 3), randn(3, 4), randn(2, 4), [2], [0], [1], [1]),
           name="generic"),
    OpCase(addbmm, args=lambda: (randn(3, 5), randn(4, 3, 2), randn(4, 2, 5)), expect_ops=["MatMul"]),
    OpCase(addbmm, args=lambda: (randn(5), randn(4, 3, 2), randn(4, 2, 5)), kwargs={"beta": 0.5, "alpha": 2.0},
           name="scaled"),
    OpCase(addbmm, args=lambda: (torch.full((3, 5), float("nan")), randn(4, 3, 2), randn(4, 2, 5)),
           kwargs={"beta": 0}, name="beta0"),
    OpCase(cartesian, args=lambda: (randn(2), randn(3), randn(4))),
    OpCase(cartesian, args=lambda: (torch.arange(3),), name="one"),
]


@pytest.mark.parametrize(("case", "dtype"), params(CASES))
def test_op(case: OpCase, dtype: torch.dtype | None) -> None:
    run_case(case, dtype)
