"""Inputs shared by the linear-algebra op tests (test_linalg_*.py): well-conditioned, symmetric positive
definite and structured matrices, and the sign-free functions of decompositions that are unique only up to
sign."""

import torch
from torch import randn

from onnxport.translate.registry import ops

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
