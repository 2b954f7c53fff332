"""Tensor factories against eager PyTorch, with static and symbolic sizes."""

import pytest
import torch
from torch import randn
from torch.export import Dim

from onnxport.translate.registry import ops
from tests.ops._runner import OpCase, params, run_case

aten = ops.aten  # an op this torch lacks is an AbsentOp: its cases are skipped
f32, f16 = torch.float32, torch.float16


def dyn(*specs):
    """A dynamic_shapes spec for the runner's wrapper, whose forward takes ``*args``."""
    return (specs,)


N0 = dyn({0: Dim("n", min=2, max=64)})

# factories take no tensor input; add x so the output depends on the model input
def zeros_n4(x): return torch.zeros(x.shape[0], 4) + x[:, :1]
def zeros_n3_int(x): return torch.zeros(x.shape[0], 3, dtype=torch.int64)
def ones_bool(x): return torch.ones(x.shape[0], 2, dtype=torch.bool) & (x[:, :2] > 0)
def ones_f16(x): return torch.ones(2, 3, dtype=torch.float16) + x.half()
def full_fn(x): return torch.full((2, 3), 7.5) * x
def full_int(x): return torch.full((2, 3), 7) + x.long()
def full_sym(x): return torch.full((x.shape[0], 2), -1.0)
def empty_fn(x): return torch.empty(x.shape[0], 3).zero_() + x
def empty_shape(x): return torch.empty(2, 3).shape[0] * x
def arange_n(x): return torch.arange(x.shape[0])
def arange_n_float(x): return torch.arange(x.shape[0], dtype=torch.float32) * 0.5 + x[:, 0]
def arange_start_step(x): return torch.arange(x.shape[0] - 1, -2, -1) + x[0, 0].long()
def arange_const(x): return torch.arange(2, 11, 3) + x[0]
def arange_float(x): return torch.arange(-1.0, 1.3, 0.1) + x[0, 0]
def arange_f16(x): return torch.arange(0, 10, 2, dtype=torch.float16)
def arange_bools(x): return torch.arange(False, True, True, dtype=torch.float32) + x  # bools are 0 and 1
def full_like_fn(x): return torch.full_like(x, 3)
def full_like_bool(x): return torch.full_like(x, True, dtype=torch.bool)
def zeros_like_fn(x): return torch.zeros_like(x)
def ones_like_int(x): return torch.ones_like(x, dtype=torch.int32)
def empty_like_fn(x): return torch.empty_like(x).fill_(2.0)
def new_zeros_fn(x): return x.new_zeros(x.shape[0], 2)
def new_ones_fn(x): return x.new_ones((3,), dtype=torch.int64)
def new_full_fn(x): return x.new_full((2, x.shape[1]), 4.25)
def new_empty_fn(x): return x.new_empty(2, 3).fill_(1.0)
def scalar_tensor_fn(x): return x + torch.scalar_tensor(2, dtype=torch.float32)
def eye_fn(x): return torch.eye(3) + x
def eye_rect(x): return torch.eye(2, 4, dtype=torch.int64) + x.long()
def eye_sym(x): return torch.eye(x.shape[0])
def linspace_fn(x): return torch.linspace(0, 1, 7) + x[0, 0]
def linspace_int(x): return torch.linspace(-3, 10, 5, dtype=torch.int64)
def fill_fn(x): return x.clone().fill_(x[0, 0])


def tril_idx(x): return x + torch.tril_indices(4, 3, -1)[:, :1]
def triu_idx(x): return x + torch.triu_indices(3, 5, 1)
def window_times(x): return x * torch.kaiser_window(8) + torch.hann_window(8, dtype=torch.float64)


CASES = [
    OpCase(aten.zeros.default, args=lambda: ([2, 3],)),
    OpCase(aten.ones.default, args=lambda: ([2, 3],), kwargs={"dtype": torch.int32}),
    OpCase(aten.full.default, args=lambda: ([2, 3], 1.5), kwargs={"dtype": torch.float16}),
    OpCase(aten.full.default, args=lambda: ([3], True), name="bool"),
    OpCase(aten.scalar_tensor.default, args=lambda: (4.0,)),
    OpCase(zeros_n4, args=lambda: (randn(3, 2),), name="dyn", dynamic_shapes=N0, expect_ops=["ConstantOfShape"]),
    OpCase(zeros_n3_int, args=lambda: (randn(3, 2),), name="dyn", dynamic_shapes=N0),
    OpCase(ones_bool, args=lambda: (randn(3, 2),), name="dyn", dynamic_shapes=N0),
    OpCase(ones_f16, args=lambda: (randn(2, 3),)),
    OpCase(full_fn, args=lambda: (randn(2, 3),)),
    OpCase(full_int, args=lambda: (randn(2, 3) * 4,)),
    OpCase(full_sym, args=lambda: (randn(3, 2),), name="dyn", dynamic_shapes=N0),
    OpCase(empty_fn, args=lambda: (randn(3, 3),), name="dyn", dynamic_shapes=N0),
    OpCase(empty_shape, args=lambda: (randn(3, 3),)),
    OpCase(arange_n, args=lambda: (randn(5, 2),), name="dyn", dynamic_shapes=N0, expect_ops=["Range"]),
    OpCase(arange_n_float, args=lambda: (randn(5, 2),), name="dyn", dynamic_shapes=N0),
    OpCase(arange_start_step, args=lambda: (randn(5, 2),), name="dyn", dynamic_shapes=N0),
    OpCase(arange_const, args=lambda: (randn(2, 3),)),
    OpCase(arange_float, args=lambda: (randn(2, 3),)),
    OpCase(arange_f16, args=lambda: (randn(2, 3),)),
    OpCase(arange_bools, args=lambda: (randn(2, 3),)),
    OpCase(full_like_fn, args=lambda: (randn(2, 3),), dtypes=(f32, f16)),
    OpCase(full_like_fn, args=lambda: (randn(3, 2),), name="dyn", dynamic_shapes=N0),
    OpCase(full_like_bool, args=lambda: (randn(2, 3),)),
    OpCase(zeros_like_fn, args=lambda: (torch.arange(6).reshape(2, 3),)),
    OpCase(ones_like_int, args=lambda: (randn(3, 2),), name="dyn", dynamic_shapes=N0),
    OpCase(empty_like_fn, args=lambda: (randn(2, 3),)),
    OpCase(new_zeros_fn, args=lambda: (randn(3, 2),), name="dyn", dynamic_shapes=N0),
    OpCase(new_ones_fn, args=lambda: (randn(3, 2),)),
    OpCase(new_full_fn, args=lambda: (randn(3, 2).half(),)),
    OpCase(new_empty_fn, args=lambda: (randn(3, 2),)),
    OpCase(scalar_tensor_fn, args=lambda: (randn(3, 2),)),
    OpCase(eye_fn, args=lambda: (randn(3, 3),)),
    OpCase(eye_rect, args=lambda: (randn(2, 4) * 3,)),
    OpCase(eye_sym, args=lambda: (randn(3, 3),), name="dyn", dynamic_shapes=N0, expect_ops=["EyeLike"]),
    OpCase(linspace_fn, args=lambda: (randn(2, 3),)),
    OpCase(linspace_int, args=lambda: (randn(2, 3),)),
    OpCase(fill_fn, args=lambda: (randn(2, 3),)),
    OpCase(aten.tril.default, args=lambda: (randn(4, 5),), expect_ops=["Trilu"], dtypes=(f32, f16)),
    OpCase(aten.tril.default, args=lambda: (randn(2, 4, 5), -1), name="batched_neg"),
    OpCase(aten.triu.default, args=lambda: (randn(4, 5), 2)),
    OpCase(aten.triu.default, args=lambda: (torch.arange(12).reshape(3, 4),), name="int"),
    OpCase(aten.tril.default, args=lambda: (randn(4, 4) > 0,), name="bool"),
    OpCase(tril_idx, args=lambda: (torch.zeros(2, 1, dtype=torch.int64),), name="tril_indices"),
    OpCase(triu_idx, args=lambda: (torch.zeros(2, 1, dtype=torch.int64),), name="triu_indices"),
    # window functions: constants of torch's own values (torch 2.10 keeps hann_window in the graph)
    OpCase(aten.hann_window.default, args=lambda: (16,)),
    OpCase(aten.hann_window.periodic, args=lambda: (9, False), kwargs={"dtype": torch.float64}),
    OpCase(aten.hamming_window.default, args=lambda: (12,)),
    OpCase(aten.hamming_window.periodic_alpha_beta, args=lambda: (10, True, 0.5, 0.3), kwargs={"dtype": torch.float16}),
    OpCase(aten.blackman_window.periodic, args=lambda: (11, False)),
    OpCase(aten.bartlett_window.default, args=lambda: (7,)),
    OpCase(aten.bartlett_window.default, args=lambda: (1,), name="one"),
    OpCase(aten.kaiser_window.beta, args=lambda: (10, False, 5.0)),
    OpCase(window_times, args=lambda: (randn(2, 8),)),
]


@pytest.mark.parametrize(("case", "dtype"), params(CASES))
def test_op(case: OpCase, dtype: torch.dtype | None) -> None:
    run_case(case, dtype)


def test_arange_dynamic_other_size() -> None:
    """arange(n) exported at one size answers like eager at another."""
    import onnxport

    class M(torch.nn.Module):
        def forward(self, x):
            return torch.arange(x.shape[0]) * 2 + torch.zeros(x.shape[0], 3, dtype=torch.int64).sum(1)

    prog = onnxport.export(M(), (randn(4, 2),), dynamic_shapes=N0[0], verify=False)
    x = randn(9, 2)
    torch.testing.assert_close(prog(x), M()(x))
