"""Factorizations and solves (translate/ops/linalg_solve.py: LU, determinants, inverse and solve, triangular
systems, Cholesky) against eager PyTorch. Inputs are well conditioned (random matrices plus n*I, SPD matrices for
Cholesky) so that float32 results of different algorithms agree to the default tolerance."""

import pytest
import torch
from torch import randn

import onnxport
from tests.ops._linalg_inputs import (
    BATCH,
    Dim,
    L,
    aten,
    f32,
    f64,
    lower,
    lu_args,
    lu_solve_args,
    solve_ex_column_major,
    spd,
    tensorinv,
    wc,
)
from tests.ops._runner import OpCase, params, run_case

CASES = [
    # LU family
    OpCase(aten.linalg_lu_factor_ex.default, args=lambda: (randn(2, 5, 5),), expect_ops=["ArgMax"]),
    OpCase(aten.linalg_lu_factor_ex.default, args=lambda: (randn(3, 5),), name="wide"),
    OpCase(aten.linalg_lu_factor.default, args=lambda: (randn(6, 4),), name="tall"),
    OpCase(aten.linalg_lu_factor_ex.default, args=lambda: (torch.tensor([[0.0, 1.0], [0.0, 2.0]]),), name="singular"),
    OpCase(aten.linalg_lu.default, args=lambda: (randn(2, 4, 6),)),
    OpCase(aten.lu_unpack.default, args=lambda: lu_args(2, 5, 3)),
    OpCase(aten.linalg_lu_solve.default, args=lu_solve_args),
    OpCase(aten.linalg_lu_solve.default, args=lu_solve_args, kwargs={"adjoint": True}, name="adjoint"),
    OpCase(aten.linalg_lu_solve.default, args=lambda: (*L.lu_factor(randn(4, 4)), randn(3, 4)),
           kwargs={"left": False}, name="right"),
    # determinants
    OpCase(aten._linalg_det.default, args=lambda: (wc(3, 4, 4),), expect_ops=["Det"]),
    OpCase(aten._linalg_det.default, args=lambda: (wc(3, 4, 4),), dtypes=(f64,), name="lu"),
    OpCase(L.det, args=lambda: (randn(0, 0),), name="empty"),
    OpCase(aten._linalg_slogdet.default, args=lambda: (randn(3, 5, 5),), dtypes=(f32, f64)),
    OpCase(torch.logdet, args=lambda: (spd(4, 4),)),
    # inverse and solve
    OpCase(aten.linalg_inv.default, args=lambda: (wc(2, 5, 5),), dtypes=(f32, f64)),
    OpCase(aten.linalg_inv_ex.default, args=lambda: (wc(4, 4),)),
    OpCase(L.inv, args=lambda: (wc(3, 4, 4),), name="dynamic", dynamic_shapes=(({0: BATCH},),)),
    OpCase(tensorinv, args=lambda: (wc(6, 6).reshape(2, 3, 6),), expect_ops=["MatMul"]),
    OpCase(aten.linalg_solve.default, args=lambda: (wc(2, 4, 4), randn(2, 4, 3))),
    OpCase(aten.linalg_solve.default, args=lambda: (wc(4, 4), randn(4)), name="vector"),
    OpCase(aten.linalg_solve.default, args=lambda: (wc(4, 4), randn(2, 3, 4)), kwargs={"left": False}, name="right"),
    OpCase(aten._linalg_solve_ex.default, args=lambda: (wc(3, 4, 4), randn(4, 2)), name="broadcast"),
    OpCase(aten._linalg_solve_ex.default, args=lambda: (wc(4, 4), randn(2, 3, 4)), kwargs={"left": False},
           name="right"),
    OpCase(solve_ex_column_major, args=lambda: (wc(2, 4, 4), randn(2, 4, 3))),
    OpCase(L.solve, args=lambda: (wc(3, 4, 4), randn(3, 4, 2)), name="dynamic",
           dynamic_shapes=(({0: BATCH}, {0: BATCH}),)),
    # triangular systems
    OpCase(aten.linalg_solve_triangular.default, args=lambda: (lower(2, 4, 4), randn(2, 4, 3)),
           kwargs={"upper": False}),
    OpCase(aten.linalg_solve_triangular.default, args=lambda: (lower(4, 4).mT, randn(3, 4)),
           kwargs={"upper": True, "left": False, "unitriangular": True}, name="right_unit"),
    OpCase(aten.triangular_solve.default, args=lambda: (randn(2, 4, 2), lower(4, 4).mT)),
    OpCase(aten.triangular_solve.default, args=lambda: (randn(4, 2), lower(4, 4)), kwargs={"upper": False,
           "transpose": True}, name="transpose"),
    # Cholesky
    OpCase(aten.linalg_cholesky_ex.default, args=lambda: (spd(2, 5, 5),)),
    OpCase(aten.linalg_cholesky.default, args=lambda: (spd(4, 4),), kwargs={"upper": True}, name="upper"),
    OpCase(aten.cholesky.default, args=lambda: (spd(4, 4),)),
    OpCase(aten.cholesky_solve.default, args=lambda: (randn(2, 4, 3), L.cholesky(spd(2, 4, 4)))),
    OpCase(aten.cholesky_solve.default, args=lambda: (randn(4, 2), L.cholesky(spd(4, 4), upper=True)),
           kwargs={"upper": True}, name="upper"),
    OpCase(aten.cholesky_inverse.default, args=lambda: (L.cholesky(spd(2, 4, 4)),)),
    OpCase(aten.cholesky_inverse.default, args=lambda: (L.cholesky(spd(4, 4), upper=True),), kwargs={"upper": True},
           name="upper"),
    OpCase(L.cholesky, args=lambda: (spd(3, 4, 4),), name="dynamic", dynamic_shapes=(({0: BATCH},),)),
]


@pytest.mark.parametrize(("case", "dtype"), params(CASES))
def test_op(case: OpCase, dtype: torch.dtype | None) -> None:
    run_case(case, dtype)


class _Inverse(torch.nn.Module):
    def forward(self, a: torch.Tensor) -> torch.Tensor:
        return torch.linalg.inv(a)


def test_symbolic_matrix_size_is_refused() -> None:
    a = wc(4, 4)
    with pytest.raises(onnxport.TranslationError, match="static matrix size") as info:
        onnxport.export(_Inverse(), (a,), dynamic_shapes=({0: Dim("n", min=2), 1: Dim("n", min=2)},), verify=False)
    assert "static sizes for the last two dims" in str(info.value)
