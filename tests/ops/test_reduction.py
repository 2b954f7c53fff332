"""Reductions, softmax, scans and sorting against eager PyTorch."""

import pytest
import torch
from torch import randn

import onnxport
from onnxport.translate.registry import ops
from tests.ops._runner import OpCase, params, run_case

aten = ops.aten  # an op this torch lacks is an AbsentOp: its cases are skipped
F = torch.nn.functional
f32, f16 = torch.float32, torch.float16
Dim = torch.export.Dim


def ints() -> torch.Tensor:
    return torch.randint(-5, 6, (3, 4))


def bools() -> torch.Tensor:
    return randn(3, 4) > 0


def distinct(*shape: int) -> torch.Tensor:
    """Values without ties, so indices of max/sort/topk are unambiguous."""
    n = 1
    for s in shape:
        n *= s
    return (torch.randperm(n).float() - n / 2).reshape(shape) / 4


def var_mean(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.var_mean(x, dim=1)


def std_mean_keep(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.std_mean(x, dim=(0, 2), keepdim=True, correction=0)


def topk_unsorted(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    values, indices = torch.topk(x, 3, sorted=False)
    # Order is unspecified for sorted=False: compare as sets by sorting both results.
    order = values.argsort(dim=-1)
    return values.gather(-1, order), indices.gather(-1, order)


def sort_desc_ties(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.sort(x, dim=0, descending=True, stable=True)


def argsort_stable(x: torch.Tensor) -> torch.Tensor:
    return torch.argsort(x, dim=-1, stable=True)


def max_dim_tuple(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    values, indices = x.max(dim=1)
    return values, indices


def min_dim_keep(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.min(x, dim=-1, keepdim=True)


def softmax_to_f32(x: torch.Tensor) -> torch.Tensor:
    return F.softmax(x, dim=1, dtype=torch.float32)


def log_softmax_f64(x: torch.Tensor) -> torch.Tensor:
    return F.log_softmax(x, dim=-1, dtype=torch.float64)


def norm_fro(x: torch.Tensor) -> torch.Tensor:
    return x.norm()


def vector_norm(x: torch.Tensor, ord: float, dim: tuple[int, ...] | None = None, keepdim: bool = False) -> torch.Tensor:
    return torch.linalg.vector_norm(x, ord=ord, dim=dim, keepdim=keepdim)


def big_logsumexp(x: torch.Tensor) -> torch.Tensor:
    return torch.logsumexp(x * 1000.0, dim=1)


def big_log_softmax(x: torch.Tensor) -> torch.Tensor:
    return F.log_softmax(x * 1000.0, dim=1)


def inf_logsumexp(x: torch.Tensor) -> torch.Tensor:
    """Rows of -inf (a fully masked row) and a +inf entry: torch gives -inf and inf, not NaN."""
    return torch.logsumexp(x, dim=-1)


CASES = [
    # sum
    OpCase(aten.sum.default, args=lambda: (bools(),), name="bool", expect_ops=["ReduceSum"]),
    OpCase(aten.sum.default, args=lambda: (ints(),), name="int"),
    OpCase(aten.sum.dim_IntList, args=lambda: (randn(3, 4), [1]), kwargs={"dtype": torch.float64}, name="dtype"),
    OpCase(aten.sum.dim_IntList, args=lambda: (randn(3, 4, 5), [0, 2]), name="dims", dtypes=(f32, f16)),
    OpCase(aten.sum.dim_IntList, args=lambda: (randn(3, 4), []), name="empty_dims"),
    OpCase(aten.sum.dim_IntList, args=lambda: (randn(()), [0]), name="rank0"),
    OpCase(torch.sum, args=lambda: (randn(3, 5),), kwargs={"dim": -1}, name="dynamic",
           dynamic_shapes=(({0: Dim("n", min=2), 1: Dim("m", min=2)},),)),
    # mean
    OpCase(aten.mean.default, args=lambda: (randn(3, 4),), expect_ops=["ReduceMean"], dtypes=(f32, f16)),
    OpCase(aten.mean.dim, args=lambda: (randn(3, 4, 5), [0, -1], True), name="keepdim"),
    OpCase(aten.mean.dim, args=lambda: (ints(), [1]), kwargs={"dtype": torch.float32}, name="int_dtype"),
    OpCase(torch.mean, args=lambda: (randn(2, 3, 4),), kwargs={"dim": (1, 2)}, name="torch"),
    # prod
    OpCase(aten.prod.default, args=lambda: (randn(2, 3),), expect_ops=["ReduceProd"], dtypes=(f32, f16)),
    OpCase(aten.prod.default, args=lambda: (bools(),), name="bool"),
    OpCase(aten.prod.dim_int, args=lambda: (ints(), 0), name="int"),
    OpCase(aten.prod.dim_int, args=lambda: (randn(2, 3, 4), -1, True), name="keepdim"),
    # amax / amin / max / min
    OpCase(aten.amax.default, args=lambda: (randn(3, 4, 5), [0, 2]), expect_ops=["ReduceMax"], dtypes=(f32, f16)),
    OpCase(aten.amax.default, args=lambda: (randn(3, 4),), name="all"),
    OpCase(aten.amin.default, args=lambda: (ints(), [1], True), name="int_keepdim", expect_ops=["ReduceMin"]),
    OpCase(aten.amax.default, args=lambda: (bools(), [1]), name="bool"),
    OpCase(aten.max.default, args=lambda: (randn(3, 4),), dtypes=(f32, f16)),
    OpCase(aten.min.default, args=lambda: (ints(),), name="int"),
    OpCase(aten.max.dim, args=lambda: (distinct(3, 4), 1), expect_ops=["ReduceMax", "ArgMax"], dtypes=(f32, f16)),
    OpCase(aten.min.dim, args=lambda: (distinct(3, 4), 0, True), name="keepdim", expect_ops=["ArgMin"]),
    OpCase(aten.max.dim, args=lambda: (torch.tensor([[1, 3, 3, 0], [2, 2, 1, 2]]), 1), name="ties_first"),
    OpCase(max_dim_tuple, args=lambda: (distinct(2, 5),)),
    OpCase(min_dim_keep, args=lambda: (distinct(2, 3, 4),)),
    OpCase(torch.aminmax, args=lambda: (randn(3, 4),), kwargs={"dim": 1}),
    OpCase(torch.aminmax, args=lambda: (ints(),), name="all"),
    # argmax / argmin
    OpCase(aten.argmax.default, args=lambda: (distinct(3, 4),), name="flat", expect_ops=["ArgMax"]),
    OpCase(aten.argmax.default, args=lambda: (distinct(3, 4), None, True), name="flat_keepdim"),
    OpCase(aten.argmax.default, args=lambda: (distinct(3, 4), -1), name="dim", dtypes=(f32, f16)),
    OpCase(aten.argmin.default, args=lambda: (distinct(3, 4), 0, True), name="keepdim", expect_ops=["ArgMin"]),
    OpCase(aten.argmin.default, args=lambda: (ints(),), name="int_flat"),
    # var / std
    OpCase(aten.var.correction, args=lambda: (randn(3, 4),), name="default", dtypes=(f32, f16)),
    OpCase(aten.var.correction, args=lambda: (randn(3, 4, 5), [0, 2]), kwargs={"correction": 0, "keepdim": True},
           name="corr0_keepdim"),
    OpCase(aten.var.correction, args=lambda: (randn(3, 4, 5), [1]), kwargs={"correction": 2}, name="corr2"),
    OpCase(aten.var.dim, args=lambda: (randn(3, 4), [1], False), name="biased"),
    OpCase(aten.var.default, args=lambda: (randn(3, 4),)),
    OpCase(aten.std.correction, args=lambda: (randn(3, 4), [0]), name="dim", expect_ops=["Sqrt"], dtypes=(f32, f16)),
    OpCase(aten.std.dim, args=lambda: (randn(3, 4), [-1], True, True), name="keepdim"),
    OpCase(aten.std.default, args=lambda: (randn(5,), False), name="biased"),
    OpCase(torch.var, args=lambda: (randn(4, 6),), kwargs={"dim": 1}, name="dynamic",
           dynamic_shapes=(({0: Dim("n", min=2), 1: Dim("m", min=2)},),)),
    OpCase(torch.std, args=lambda: (randn(4, 6),), kwargs={"unbiased": False}, name="dynamic_all",
           dynamic_shapes=(({0: Dim("n", min=2), 1: Dim("m", min=2)},),)),
    OpCase(var_mean, args=lambda: (randn(3, 4),), dtypes=(f32, f16)),
    OpCase(std_mean_keep, args=lambda: (randn(3, 4, 5),)),
    OpCase(aten.var_mean.correction, args=lambda: (randn(3, 4),), name="all"),
    OpCase(aten.std_mean.default, args=lambda: (randn(3, 4),)),
    # any / all
    OpCase(aten.any.default, args=lambda: (bools(),), expect_ops=["ReduceSum"]),
    OpCase(aten.any.dim, args=lambda: (randn(3, 4) > 1, 1), name="dim"),
    OpCase(aten.any.dims, args=lambda: (ints(), [0, 1], True), name="dims_int"),
    OpCase(aten.any.dims, args=lambda: (randn(3, 4) > 0, []), name="dims_empty"),
    OpCase(aten.all.default, args=lambda: (randn(3, 4),), name="float", expect_ops=["ReduceSum", "Not"]),
    OpCase(aten.all.dim, args=lambda: (randn(3, 4) > -1, 0, True), name="dim"),
    OpCase(aten.all.dims, args=lambda: (randn(2, 3, 4) > -1, [0, 2]), name="dims"),
    OpCase(aten._is_all_true.default, args=lambda: (randn(3, 4) > -1,), name="bool"),
    OpCase(aten._is_all_true.default, args=lambda: (torch.ones(3, 4, dtype=torch.bool),), name="true"),
    OpCase(aten._is_any_true.default, args=lambda: (randn(3, 4) > 1,), name="bool"),
    OpCase(aten._is_any_true.default, args=lambda: (torch.zeros(0, 4, dtype=torch.bool),), name="empty"),
    OpCase(aten.all.default, args=lambda: (torch.zeros(0, 4, dtype=torch.bool),), name="empty"),
    OpCase(aten.any.dim, args=lambda: (torch.zeros(3, 0), 1), name="empty_dim"),
    OpCase(aten.any.default, args=lambda: (torch.tensor([0, 3, 0], dtype=torch.uint8),), name="uint8"),
    # logsumexp
    OpCase(aten.logsumexp.default, args=lambda: (randn(3, 4), [1]), expect_ops=["ReduceMax"], dtypes=(f32, f16)),
    OpCase(aten.logsumexp.default, args=lambda: (randn(3, 4, 2), [0, 2], True), name="keepdim"),
    OpCase(aten.logsumexp.default, args=lambda: (ints(), [0]), name="int"),
    OpCase(big_logsumexp, args=lambda: (randn(3, 4),), tol={f32: (1e-2, 1e-4)}),
    OpCase(aten.logsumexp.default, args=lambda: (randn(2, 3, 4), [0, 1, 2]), name="all_dims"),
    OpCase(aten.logsumexp.default, args=lambda: (randn(()), [-1]), name="rank0"),
    OpCase(inf_logsumexp, args=lambda: (torch.tensor([[float("-inf")] * 3, [1.0, float("inf"), 2.0], [1.0, 2.0, 3.0]]),)),
    # linalg_vector_norm
    OpCase(norm_fro, args=lambda: (randn(3, 4),), dtypes=(f32, f16)),
    OpCase(vector_norm, args=lambda: (randn(3, 4), 1, (1,)), name="l1"),
    OpCase(vector_norm, args=lambda: (randn(3, 4), float("inf"), (0,), True), name="inf"),
    OpCase(vector_norm, args=lambda: (randn(3, 4), float("-inf")), name="neg_inf"),
    OpCase(vector_norm, args=lambda: (torch.tensor([[0.0, 1.5, 0.0], [2.0, 0.0, 3.0]]), 0, (1,)), name="l0"),
    OpCase(vector_norm, args=lambda: (randn(3, 4), 3, (1,)), name="p3"),
    OpCase(torch.linalg.norm, args=lambda: (randn(3, 4),), kwargs={"dim": 1}, name="linalg_norm"),
    # softmax / log_softmax
    OpCase(aten.softmax.int, args=lambda: (randn(3, 4), 1), expect_ops=["Softmax"], dtypes=(f32, f16)),
    OpCase(aten.softmax.int, args=lambda: (randn(2, 3, 4), 0), name="dim0"),
    OpCase(aten._softmax.default, args=lambda: (randn(3, 4), -1, False), dtypes=(f32, f16)),
    OpCase(softmax_to_f32, args=lambda: (randn(3, 4),), dtypes=(f16,)),
    OpCase(aten.softmax.int, args=lambda: (randn(()), 0), name="rank0"),
    OpCase(aten.log_softmax.int, args=lambda: (randn(3, 4), 1), expect_ops=["ReduceMax"], dtypes=(f32, f16)),
    OpCase(big_log_softmax, args=lambda: (randn(3, 4),), tol={f32: (1e-2, 1e-4)}),
    OpCase(aten.log_softmax.int, args=lambda: (randn(()), 0), name="rank0"),
    OpCase(aten._log_softmax.default, args=lambda: (randn(3, 4), 0, False)),
    OpCase(log_softmax_f64, args=lambda: (randn(3, 4),)),
    OpCase(F.softmax, args=lambda: (randn(2, 7),), kwargs={"dim": -1}, name="dynamic",
           dynamic_shapes=(({0: Dim("n", min=2), 1: Dim("m", min=2)},),)),
    # cumsum / cumprod
    OpCase(aten.cumsum.default, args=lambda: (randn(3, 4), 1), expect_ops=["CumSum"], dtypes=(f32, f16)),
    OpCase(aten.cumsum.default, args=lambda: (bools(), 0), name="bool"),
    OpCase(aten.cumsum.default, args=lambda: (ints(), -1), kwargs={"dtype": torch.float32}, name="dtype"),
    OpCase(aten.cumprod.default, args=lambda: (randn(3, 4), 1), expect_ops=["ReduceProd"], dtypes=(f32, f16)),
    OpCase(aten.cumprod.default, args=lambda: (torch.tensor([[1.0, 2.0, 0.0, -3.0], [-1.0, 0.5, 2.0, 4.0]]), -1),
           name="zero_sign"),
    OpCase(aten.cumprod.default, args=lambda: (ints(), 0), name="int_dim0"),
    OpCase(aten.cumprod.default, args=lambda: (randn(2, 3, 4), 1), name="middle"),
    OpCase(torch.cumprod, args=lambda: (randn(2, 5),), kwargs={"dim": 1}, name="dynamic",
           dynamic_shapes=(({0: Dim("n", min=2), 1: Dim("m", min=2)},),)),
    # topk / sort / argsort
    OpCase(aten.topk.default, args=lambda: (distinct(3, 6), 2), expect_ops=["TopK"], dtypes=(f32, f16)),
    OpCase(aten.topk.default, args=lambda: (distinct(5, 3), 2, 0, False), name="smallest_dim0"),
    OpCase(aten.topk.default, args=lambda: (torch.randperm(10).reshape(2, 5), 3), name="int"),
    OpCase(topk_unsorted, args=lambda: (distinct(2, 6),)),
    OpCase(torch.topk, args=lambda: (distinct(3, 6),), kwargs={"k": 3}, name="dynamic",
           dynamic_shapes=(({0: Dim("n", min=2), 1: Dim("m", min=4)},),)),
    OpCase(aten.sort.default, args=lambda: (distinct(3, 5),), expect_ops=["TopK"], dtypes=(f32, f16)),
    OpCase(aten.sort.default, args=lambda: (distinct(3, 5), 0, True), name="desc_dim0"),
    OpCase(aten.sort.stable, args=lambda: (torch.tensor([[1, 3, 1, 2, 3, 1]]),), kwargs={"stable": True}, name="ties"),
    OpCase(aten.sort.stable, args=lambda: (torch.tensor([[1, 3, 1, 2, 3, 1]]),),
           kwargs={"stable": True, "descending": True}, name="ties_desc"),
    OpCase(sort_desc_ties, args=lambda: (torch.randint(0, 3, (8, 3)),)),
    OpCase(aten.sort.default, args=lambda: (bools(),), name="bool"),
    OpCase(torch.sort, args=lambda: (distinct(2, 7),), name="dynamic",
           dynamic_shapes=(({0: Dim("n", min=2), 1: Dim("m", min=2)},),)),
    OpCase(aten.argsort.default, args=lambda: (distinct(3, 5), 1, True)),
    OpCase(argsort_stable, args=lambda: (torch.randint(0, 3, (4, 9)),)),
    # median (lower median, like torch)
    OpCase(aten.median.default, args=lambda: (distinct(3, 4),), expect_ops=["TopK"], dtypes=(f32, f16)),
    OpCase(aten.median.default, args=lambda: (distinct(5,),), name="odd"),
    OpCase(aten.median.dim, args=lambda: (distinct(3, 6), 1), dtypes=(f32, f16)),
    OpCase(aten.median.dim, args=lambda: (distinct(5, 3), 0, True), name="keepdim"),
    OpCase(torch.median, args=lambda: (distinct(3, 6),), kwargs={"dim": -1}, name="dynamic",
           dynamic_shapes=(({0: Dim("n", min=2), 1: Dim("m", min=2)},),)),
    OpCase(torch.median, args=lambda: (distinct(3, 5),), name="dynamic_flat",
           dynamic_shapes=(({0: Dim("n", min=2), 1: Dim("m", min=2)},),)),
    OpCase(torch.mean, args=lambda: (torch.zeros(0, 3),), kwargs={"dim": 0}, name="empty_is_nan", equal_nan=True),
    OpCase(torch.var_mean, args=lambda: (torch.zeros(0),), name="empty_is_nan", equal_nan=True),
]


@pytest.mark.parametrize(("case", "dtype"), params(CASES))
def test_op(case: OpCase, dtype: torch.dtype | None) -> None:
    run_case(case, dtype)


def test_dynamic_var_runs_at_other_sizes() -> None:
    """The element count of var comes from Shape when the reduced dim is symbolic."""
    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.var(x, dim=1) + torch.cumprod(x, dim=1).sum(1)

    x = randn(3, 4)
    prog = onnxport.export(M(), (x,), dynamic_shapes=({0: Dim("n", min=2), 1: Dim("m", min=2)},), verify=False)
    other = randn(5, 7) / 2
    torch.testing.assert_close(prog(other), M()(other), atol=1e-4, rtol=1e-4)
