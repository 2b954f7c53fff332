"""Gathers and scatters against eager PyTorch."""

import pytest
import torch
import torch.nn.functional as F
from torch import randn
from torch.export import Dim

from onnxport.translate.registry import ops
from tests.ops._runner import OpCase, params, run_case

aten = ops.aten  # an op this torch lacks is an AbsentOp: its cases are skipped
f32, f16 = torch.float32, torch.float16


def dyn(*specs):
    """A dynamic_shapes spec for the runner's wrapper, whose forward takes ``*args``."""
    return (specs,)


def idx(*shape, high=3): return torch.randint(0, high, shape)
def neg_idx(*shape, high=3): return torch.randint(-high, high, shape)


def index_first(x, i): return x[i]
def index_second(x, i): return x[:, i]
def index_two_adjacent(x, i, j): return x[:, i, j]
def index_two_apart(x, i, j): return x[i, :, j]
def index_broadcast(x, i, j): return x[i[:, None], j]
def index_ellipsis(x, i): return x[..., i]
def take_flat(x, i): return torch.take(x, i)
def take_along(x, i): return torch.take_along_dim(x, i, 1)
def take_along_flat(x, i): return torch.take_along_dim(x, i)
def embed(i, w): return F.embedding(i, w, padding_idx=0)


def put_rows(x, i, v):
    x = x.clone()
    x[i] = v
    return x


def put_cols_scalar(x, i):
    x = x.clone()
    x[:, i] = 0.0
    return x


def put_accumulate(x, i, v):
    return x.index_put((i,), v, accumulate=True)


def put_two_apart(x, i, j, v):
    return torch.ops.aten.index_put(x, [i, None, j], v)


def put_mask(x):
    x = x.clone()
    x[x > 0] = 0.0
    return x


def put_mask_rows(x, m):
    x = x.clone()
    x[m] = -1.0
    return x


def put_mask_values(x, m, v):
    x = x.clone()
    x[m] = v  # v holds one row per True element of m
    return x


def put_mask_from_self(x):
    x = x.clone()
    x[x > 0] = x[x > 0] * 2
    return x


def put_mask_accumulate(x, m, v):
    return x.index_put((m,), v, accumulate=True)


def put_grid(x, i, j, v):
    x = x.clone()
    x[i, j] = v  # i, j: 2-D index tensors, broadcast against each other
    return x


def put_grid_apart(x, i, j, v):
    x = x.clone()
    x[i, :, j] = v  # tensor indices not next to each other: their broadcast dims go first
    return x


def put_grid_accumulate(x, i, j, v):
    return x.index_put((i, j), v, accumulate=True)


def get_grid_apart(x, i, j): return x[i, :, j]
def get_grid_middle(x, i, j): return x[:, i, j]


def put_mask_many(x, y, m):
    x = x.clone()
    x[m] = y[m]  # one value per True element: hundreds of them
    return x


def put_mask_many_middle(x, y, m):
    x = x.clone()
    x[:, m] = y[:, m]
    return x


def get_mask(x, m): return x[m]
def get_mask_middle(x, m): return x[:, m]


def scatter_reduce_fn(x, i, s, *, reduce, include_self):
    return x.scatter_reduce(1, i, s, reduce, include_self=include_self)


MASK = torch.tensor([[True, False, True], [False, False, True]])
MASK_DYN = dyn({0: Dim("n", min=2)}, {0: Dim("n", min=2)})


class SliceAssign(torch.nn.Module):
    def forward(self, x, y, z):
        x = x.clone()
        x[:, 0] = y
        x[:, 1:3] = z
        x[-1] = 0.5
        return x


def functionalized(module, *args, dynamic_shapes=None):
    """The module as functionalization rewrites it (in-place view writes become *_scatter ops)."""
    return torch.export.export(module, args, dynamic_shapes=dynamic_shapes).run_decompositions({}).module()


CASES = [
    OpCase(aten.gather.default, args=lambda: (randn(3, 4), 1, idx(3, 2, high=4)), expect_ops=["GatherElements"],
           dtypes=(f32, f16)),
    OpCase(aten.gather.default, args=lambda: (randn(3, 4), 0, idx(2, 4)), name="dim0"),
    OpCase(aten.gather.default, args=lambda: (torch.arange(12).reshape(3, 4), -1, idx(3, 5, high=4)), name="int"),
    OpCase(aten.index_select.default, args=lambda: (randn(5, 4), 0, idx(7, high=5)), expect_ops=["Gather"]),
    OpCase(aten.index_select.default, args=lambda: (randn(5, 4), 1, torch.tensor(2)), name="scalar_index"),
    OpCase(aten.index_select.default, args=lambda: (randn(5, 4), -1, idx(3).int()), name="int32"),
    OpCase(embed, args=lambda: (idx(2, 3, high=10), randn(10, 4)), dtypes=(f32, f16)),
    OpCase(index_first, args=lambda: (randn(5, 4), idx(3, high=5))),
    OpCase(index_first, args=lambda: (randn(5, 4), neg_idx(2, 3, high=5)), name="negative_2d"),
    OpCase(index_second, args=lambda: (randn(5, 4, 2), idx(3, high=4))),
    OpCase(index_ellipsis, args=lambda: (randn(2, 3, 4), idx(5, high=4))),
    OpCase(index_two_adjacent, args=lambda: (randn(2, 3, 4, 5), idx(6), idx(6, high=4)), expect_ops=["GatherND"]),
    OpCase(index_two_apart, args=lambda: (randn(3, 2, 4, 5), idx(6), neg_idx(6, high=4))),
    OpCase(index_broadcast, args=lambda: (randn(4, 5), idx(3, high=4), idx(2, high=5))),
    OpCase(index_second, args=lambda: (randn(3, 4, 2), idx(3, high=4)), name="dyn",
           dynamic_shapes=dyn({0: Dim("n", min=2)}, {0: Dim("k", min=1)})),
    OpCase(take_along, args=lambda: (randn(3, 4), idx(3, 2, high=4))),
    OpCase(take_along, args=lambda: (randn(3, 4), idx(1, 6, high=4)), name="broadcast"),
    OpCase(take_along_flat, args=lambda: (randn(3, 4), idx(5, high=12))),
    # index_put
    OpCase(put_rows, args=lambda: (randn(5, 3), torch.tensor([0, 3]), randn(2, 3)), expect_ops=["ScatterND"]),
    OpCase(put_rows, args=lambda: (randn(5, 3), torch.tensor([4, -4]), randn(3)), name="broadcast_values"),
    OpCase(put_cols_scalar, args=lambda: (randn(2, 5, 3), torch.tensor([1, 4]))),
    OpCase(put_accumulate, args=lambda: (randn(5, 3), torch.tensor([0, 2, 0, 0]), randn(4, 3)), dtypes=(f32, f16)),
    OpCase(put_accumulate, args=lambda: (randn(5, 3) > 0, torch.tensor([0, 2, 0, 0]), randn(4, 3) > 0), name="bool"),
    OpCase(put_two_apart, args=lambda: (randn(3, 2, 4), torch.tensor([0, 2]), torch.tensor([1, 3]), randn(2, 2))),
    OpCase(put_mask, args=lambda: (randn(4, 5),), expect_ops=["Where"]),
    OpCase(put_mask_rows, args=lambda: (randn(4, 5), torch.tensor([True, False, True, False]))),
    # boolean masks: NonZero turns the mask into integer indices (a size known only at run time)
    OpCase(put_mask_values, args=lambda: (randn(2, 3, 4), MASK, randn(3, 4)), name="rows", expect_ops=["NonZero"],
           dtypes=(f32, f16)),
    OpCase(put_mask_values, args=lambda: (randn(2, 3), MASK, randn(3)), name="elements"),
    OpCase(put_mask_values, args=lambda: (randn(2, 3, 4), MASK, randn(4)), name="broadcast_row"),
    OpCase(put_mask_from_self, args=lambda: (randn(4, 5),), name="dyn", dynamic_shapes=dyn({0: Dim("n", min=2)})),
    OpCase(put_mask_accumulate, args=lambda: (randn(2, 3), MASK, randn(3))),
    OpCase(get_mask, args=lambda: (randn(2, 3, 4), MASK), expect_ops=["NonZero"]),
    OpCase(get_mask, args=lambda: (randn(4, 3), torch.rand(4, 3) > 0.5), name="dyn", dynamic_shapes=MASK_DYN),
    OpCase(get_mask_middle, args=lambda: (randn(2, 3, 4), torch.tensor([True, False, True]))),
    # index_put with several index tensors of rank >= 2, negative indices, broadcast values
    OpCase(put_grid, args=lambda: (randn(4, 5, 6), neg_idx(2, 3, high=4), neg_idx(2, 3, high=5), randn(2, 3, 6)),
           name="rank2_negative", expect_ops=["ScatterND"]),
    OpCase(put_grid, args=lambda: (randn(4, 5, 6), idx(3, 1, high=4), neg_idx(1, 2, high=5), randn(6)),
           name="broadcast_indices_values"),
    OpCase(put_grid, args=lambda: (randn(4, 5), neg_idx(2, 2, high=4), neg_idx(2, 2, high=5), torch.tensor(7.0)),
           name="scalar_value"),
    OpCase(put_grid_apart, args=lambda: (randn(3, 4, 5), neg_idx(2, 2, high=3), neg_idx(2, high=5), randn(4)),
           name="rank2_broadcast_row"),
    OpCase(put_grid_apart, args=lambda: (randn(3, 4, 5), idx(2, 3, high=3), idx(2, 3, high=5), randn(2, 3, 1)),
           name="values_broadcast_inside"),
    OpCase(put_grid_accumulate, args=lambda: (randn(4, 5), torch.tensor([[0, -4], [1, 0]]),
                                              torch.tensor([[2, 2], [-1, 2]]), randn(2, 2)), name="duplicates"),
    OpCase(put_grid_accumulate, args=lambda: (torch.zeros(3, 4, dtype=torch.int64), idx(4, 5, high=3),
                                              idx(4, 5, high=4), torch.ones(4, 5, dtype=torch.int64)),
           name="int_count"),
    OpCase(get_grid_apart, args=lambda: (randn(3, 4, 5), neg_idx(2, 3, high=3), neg_idx(3, high=5))),
    OpCase(get_grid_middle, args=lambda: (randn(2, 3, 4, 5), neg_idx(2, 1, high=3), neg_idx(1, 4, high=4))),
    OpCase(put_mask_many, args=lambda: (randn(40, 30), randn(40, 30), torch.rand(40, 30) > 0.3), name="many"),
    OpCase(put_mask_many_middle, args=lambda: (randn(2, 40, 30), randn(2, 40, 30), torch.rand(40, 30) > 0.3)),
    # scatter
    OpCase(aten.scatter.src, args=lambda: (randn(3, 5), 1, torch.tensor([[0, 1], [2, 3], [4, 0]]), randn(3, 2)),
           expect_ops=["ScatterElements"], dtypes=(f32, f16)),
    OpCase(aten.scatter.src, args=lambda: (randn(3, 5), 0, torch.tensor([[0, 1], [2, 0]]), randn(3, 4)),
           name="larger_src"),
    OpCase(aten.scatter.value, args=lambda: (randn(3, 5), 1, torch.tensor([[0, 4], [2, 3], [1, 0]]), 2.5)),
    OpCase(aten.scatter.reduce, args=lambda: (randn(3, 5), 1, torch.tensor([[0, 0], [2, 2], [1, 1]]), randn(3, 2)),
           kwargs={"reduce": "add"}),
    OpCase(aten.scatter_add.default, args=lambda: (randn(3, 5), 1, idx(3, 6, high=5), randn(3, 6))),
    OpCase(aten.scatter_add.default, args=lambda: (torch.zeros(4, dtype=torch.int64), 0, idx(9, high=4),
                                                   torch.ones(9, dtype=torch.int64)), name="int_count"),
    OpCase(aten.scatter_reduce.two, args=lambda: (randn(4), 0, idx(6, high=4), randn(6), "amax")),
    *[
        # float16 reduces in float32 (onnxruntime's ScatterElements has no float16 reductions)
        OpCase(scatter_reduce_fn, args=lambda: (randn(3, 5), idx(3, 6, high=4), randn(3, 6)),
               kwargs={"reduce": reduce, "include_self": include}, name=f"{reduce}_self{int(include)}",
               dtypes=(f32, f16))
        for reduce in ("sum", "prod", "mean", "amax", "amin") for include in (True, False)
    ],
    *[
        OpCase(scatter_reduce_fn, args=lambda: (torch.randint(-9, 9, (3, 5)), idx(3, 6, high=4),
                                                torch.randint(-9, 9, (3, 6))),
               kwargs={"reduce": reduce, "include_self": include}, name=f"int_{reduce}_self{int(include)}")
        for reduce in ("mean", "amax", "amin") for include in (True, False)
    ],
    *[
        OpCase(aten.scatter_reduce.two, args=lambda: (randn(4, 2, 3), 0, idx(5, 2, 3, high=4), randn(5, 2, 3), reduce),
               kwargs={"include_self": include}, name=f"dim0_{reduce}_self{int(include)}")
        for reduce in ("sum", "prod", "mean", "amax", "amin") for include in (True, False)
    ],
    *[
        OpCase(scatter_reduce_fn, args=lambda: (torch.randint(-9, 9, (3, 5)), idx(3, 6, high=4),
                                                torch.randint(-9, 9, (3, 6))),
               kwargs={"reduce": reduce, "include_self": include}, name=f"int_{reduce}_self{int(include)}")
        for reduce in ("sum", "prod") for include in (True, False)
    ],
    OpCase(aten.scatter_reduce.two, args=lambda: (torch.tensor(1.5), 0, torch.tensor(0), torch.tensor(-2.0), "amax"),
           kwargs={"include_self": False}, name="scalar"),
    *[
        OpCase(aten.scatter_reduce.two, args=lambda: (randn(3, 4) > 0, 1, idx(3, 5, high=4), randn(3, 5) > 0, reduce),
               name=f"bool_{reduce}")
        for reduce in ("sum", "prod", "amax", "amin")
    ],
    OpCase(aten.select_scatter.default, args=lambda: (randn(3, 4), randn(3), 1, 2)),
    OpCase(aten.select_scatter.default, args=lambda: (randn(3, 4), randn(4), 0, -1), name="negative"),
    OpCase(aten.slice_scatter.default, args=lambda: (randn(6, 4), randn(2, 4), 0, 1, 5, 2)),
    OpCase(aten.slice_scatter.default, args=lambda: (randn(3, 6), randn(3, 3), 1, -3), name="negative"),
    OpCase(aten.slice_scatter.default, args=lambda: (randn(3, 6), randn(3, 6)), kwargs={"dim": 1}, name="all"),
    OpCase(functionalized(SliceAssign(), randn(3, 4), randn(3), randn(3, 2)),
           args=lambda: (randn(3, 4), randn(3), randn(3, 2)), name="slice_assign"),
    OpCase(functionalized(SliceAssign(), randn(3, 4), randn(3), randn(3, 2),
                          dynamic_shapes=({0: Dim("n", min=2)}, {0: Dim("n", min=2)}, {0: Dim("n", min=2)})),
           args=lambda: (randn(3, 4), randn(3), randn(3, 2)), name="slice_assign_dyn",
           dynamic_shapes=dyn({0: Dim("n", min=2)}, {0: Dim("n", min=2)}, {0: Dim("n", min=2)})),
    OpCase(take_flat, args=lambda: (randn(3, 4), neg_idx(2, 5, high=12)), name="negative", expect_ops=["Gather"]),
    OpCase(F.one_hot, args=lambda: (idx(4, 3, high=5),), kwargs={"num_classes": 5}, name="checked_range"),
]


@pytest.mark.parametrize(("case", "dtype"), params(CASES))
def test_op(case: OpCase, dtype: torch.dtype | None) -> None:
    run_case(case, dtype)


def test_masked_assignment_at_other_sizes() -> None:
    """x[mask] = values[mask] exported once runs at other sizes and other numbers of True elements."""
    import onnxport

    class Doubled(torch.nn.Module):
        def forward(self, x, m):
            x = x.clone()
            x[m] = x[m] * 2 + 1
            return x[m], x

    model = Doubled()
    spec = ({0: Dim("n", min=2)}, {0: Dim("n", min=2)})
    prog = onnxport.export(model, (randn(4, 3), torch.rand(4, 3) > 0.5), dynamic_shapes=spec, verify=False)
    for n in (2, 7):
        args = (randn(n, 3), torch.rand(n, 3) > 0.5)
        for actual, expected in zip(prog(*args), model(*args)):
            torch.testing.assert_close(actual, expected)

