"""Factorizations, solves, eigen/singular decompositions and diagonals against eager PyTorch.

Inputs are well conditioned (random matrices plus n*I, SPD matrices for Cholesky) so that float32
results of different algorithms agree to the default tolerance. Eigenvectors and singular vectors are
unique only up to sign, so their cases compare sign-free functions of them (absolute values,
reconstructions).
"""

import pytest
import torch
from torch import randn

import onnxport
from onnxport.translate.registry import ops
from tests.ops._runner import OpCase, params, run_case

aten = ops.aten  # an op this torch lacks is an AbsentOp: its cases are skipped
L = torch.linalg
f32, f64 = torch.float32, torch.float64
Dim = torch.export.Dim
BATCH = Dim("batch", min=2)


def wc(*shape: int) -> torch.Tensor:
    """A well-conditioned square matrix (stack): random plus n * I."""
    return randn(*shape) + shape[-1] * torch.eye(shape[-1])


def spd(*shape: int) -> torch.Tensor:
    """A symmetric positive definite matrix (stack)."""
    x = randn(*shape)
    return x @ x.mT + shape[-1] * torch.eye(shape[-1])


def sym(*shape: int) -> torch.Tensor:
    """A symmetric indefinite matrix (stack): Bunch-Kaufman takes 2x2 pivots on some of them."""
    x = randn(*shape)
    return x + x.mT


def lower(*shape: int) -> torch.Tensor:
    return torch.tril(wc(*shape))


def lu_args(*shape: int) -> tuple[torch.Tensor, torch.Tensor]:
    return L.lu_factor(randn(*shape))


def lu_solve_args() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return (*L.lu_factor(randn(2, 4, 4)), randn(2, 4, 3))


def ldl_solve_args() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return (*L.ldl_factor(sym(40, 4, 4)), randn(40, 4, 2))


def geqrf_args(*shape: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.geqrf(randn(*shape))


def eigh_abs(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    values, vectors = L.eigh(a, UPLO="U")
    return values, vectors.abs()


def eigh_reconstruct(a: torch.Tensor) -> torch.Tensor:
    values, vectors = L.eigh(a)
    return vectors @ torch.diag_embed(values) @ vectors.mT


def svd_abs(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    u, s, vh = L.svd(a, full_matrices=False)
    return u.abs(), s, vh.abs()


def svd_full_orthonormal(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    u, s, vh = L.svd(a, full_matrices=True)
    return u.mT @ u, s, (u[..., : s.shape[-1]] * s.unsqueeze(-2)) @ vh[..., : s.shape[-1], :]


def tensorinv(a: torch.Tensor) -> torch.Tensor:
    return L.tensorinv(a, ind=2)


def solve_ex_column_major(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """A not row-major: torch 2.10 factors A itself then, A^T otherwise (the LU outputs show which)."""
    return torch.ops.aten._linalg_solve_ex.default(a.mT, b)


def trace(a: torch.Tensor) -> torch.Tensor:
    return torch.trace(a)


def diagonal_dynamic(a: torch.Tensor) -> torch.Tensor:
    return torch.diagonal(a, offset=1, dim1=-1, dim2=-2)


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
    # LDL (Bunch-Kaufman)
    OpCase(aten.linalg_ldl_factor_ex.default, args=lambda: (sym(40, 5, 5),), name="indefinite"),
    OpCase(aten.linalg_ldl_factor.default, args=lambda: (spd(5, 5),)),
    OpCase(aten.linalg_ldl_solve.default, args=ldl_solve_args),
    OpCase(L.ldl_factor, args=lambda: (sym(8, 4, 4),), name="dynamic", dynamic_shapes=(({0: BATCH},),)),
    # QR and Householder products
    OpCase(aten.geqrf.default, args=lambda: (randn(2, 5, 3),)),
    OpCase(aten.linalg_qr.default, args=lambda: (randn(2, 5, 3),), dtypes=(f32, f64)),
    OpCase(aten.linalg_qr.default, args=lambda: (randn(3, 5),), kwargs={"mode": "complete"}, name="complete"),
    OpCase(aten.linalg_qr.default, args=lambda: (randn(5, 3),), kwargs={"mode": "r"}, name="r"),
    OpCase(L.qr, args=lambda: (randn(3, 4, 4),), name="dynamic", dynamic_shapes=(({0: BATCH},),)),
    OpCase(aten.linalg_householder_product.default, args=lambda: geqrf_args(2, 5, 3)),
    OpCase(aten.ormqr.default, args=lambda: (*geqrf_args(4, 4), randn(4, 2))),
    OpCase(aten.ormqr.default, args=lambda: (*geqrf_args(4, 3), randn(2, 4)), kwargs={"left": False, "transpose": True},
           name="right_transpose"),
    # symmetric eigendecomposition
    OpCase(eigh_abs, args=lambda: (randn(2, 5, 5),), expect_ops=["Loop"]),
    OpCase(eigh_reconstruct, args=lambda: (sym(5, 5),)),
    OpCase(L.eigvalsh, args=lambda: (sym(3, 4, 4),), name="dynamic", dynamic_shapes=(({0: BATCH},),)),
    OpCase(aten._linalg_eigh.default, args=lambda: (sym(6, 6),), kwargs={"compute_v": False}, name="values",
           dtypes=(f32, f64)),
    # SVD and what is built on it
    OpCase(svd_abs, args=lambda: (randn(2, 5, 3),)),
    OpCase(svd_abs, args=lambda: (randn(3, 6),), name="wide"),
    OpCase(svd_full_orthonormal, args=lambda: (randn(2, 5, 3),)),
    OpCase(L.svdvals, args=lambda: (randn(3, 4, 6),), dtypes=(f32, f64)),
    OpCase(L.svdvals, args=lambda: (randn(3, 5, 4),), name="dynamic", dynamic_shapes=(({0: BATCH},),)),
    OpCase(L.pinv, args=lambda: (randn(2, 5, 3),)),
    OpCase(L.pinv, args=lambda: (randn(4, 2) @ randn(2, 5),), name="rank_deficient"),
    OpCase(L.pinv, args=lambda: (sym(5, 5),), kwargs={"hermitian": True}, name="hermitian"),
    OpCase(L.matrix_rank, args=lambda: (randn(3, 5, 2) @ randn(3, 2, 4),)),
    OpCase(L.cond, args=lambda: (wc(2, 4, 4),)),
    # Hermitian square root and polar decomposition (torch 2.14 and newer)
    OpCase(aten.linalg_matrix_sqrth.default, args=lambda: (spd(2, 5, 5),), expect_ops=["Loop"], dtypes=(f32, f64)),
    OpCase(aten.linalg_matrix_sqrth.default, args=lambda: (sym(4, 4),), name="indefinite"),
    OpCase(aten.linalg_matrix_sqrth.default, args=lambda: (spd(4, 4) + torch.triu(randn(4, 4), 1),), name="lower_only"),
    OpCase(aten.linalg_matrix_sqrth.default, args=lambda: (spd(3, 4, 4),), name="dynamic",
           dynamic_shapes=(({0: BATCH},),)),
    OpCase(aten.linalg_polar.default, args=lambda: (randn(2, 4, 4),), dtypes=(f32, f64)),
    OpCase(aten.linalg_polar.default, args=lambda: (randn(2, 1, 6, 3),), name="tall"),
    OpCase(aten.linalg_polar.default, args=lambda: (randn(3, 5, 4),), name="dynamic", dynamic_shapes=(({0: BATCH},),)),
    # matrix exponential
    OpCase(aten.linalg_matrix_exp.default, args=lambda: (randn(2, 4, 4),), expect_ops=["Loop"]),
    OpCase(aten.linalg_matrix_exp.default, args=lambda: (torch.zeros(3, 3),), name="zero"),
    # diagonals
    OpCase(aten.diagonal.default, args=lambda: (randn(3, 4, 5), 1, 2, 0), expect_ops=["Gather"]),
    OpCase(aten.linalg_diagonal.default, args=lambda: (randn(2, 5, 4),), kwargs={"offset": -2}),
    OpCase(trace, args=lambda: (randn(4, 6),)),
    OpCase(aten.diagonal_scatter.default, args=lambda: (randn(2, 4, 5), randn(2, 3), -1, 1, 2),
           expect_ops=["ScatterElements"]),
    OpCase(diagonal_dynamic, args=lambda: (randn(2, 5, 4),), name="symbolic_sizes",
           dynamic_shapes=(({0: BATCH, 1: Dim("rows", min=3), 2: Dim("cols", min=3)},),)),
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
