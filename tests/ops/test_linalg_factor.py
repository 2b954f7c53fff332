"""QR, Householder products, eigen and singular value decompositions, the Hermitian square root, polar
decomposition and matrix exponential (translate/ops/linalg_factor.py) against eager PyTorch. Eigenvectors and
singular vectors are unique only up to sign, so their cases compare sign-free functions of them (absolute values,
reconstructions)."""

import pytest
import torch
from torch import randn

from tests.ops._linalg_inputs import (
    BATCH,
    L,
    aten,
    eigh_abs,
    eigh_reconstruct,
    f32,
    f64,
    geqrf_args,
    spd,
    svd_abs,
    svd_full_orthonormal,
    sym,
    wc,
)
from tests.ops._runner import OpCase, params, run_case

CASES = [
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
]


@pytest.mark.parametrize(("case", "dtype"), params(CASES))
def test_op(case: OpCase, dtype: torch.dtype | None) -> None:
    run_case(case, dtype)
