"""Views over memory (as_strided, resize_), unfold, tensor_split and friends against eager PyTorch, with
static and symbolic sizes; symbolic cases are also run at sizes other than the example's."""

import pytest
import torch
from torch import randn
from torch.export import Dim

import onnxport
from onnxport.translate.registry import ops
from tests.ops._runner import OpCase, params, run_case

aten = ops.aten  # an op this torch lacks is an AbsentOp: its cases are skipped
f32, f16 = torch.float32, torch.float16


def dyn(*specs):
    """A dynamic_shapes spec for the runner's wrapper, whose forward takes ``*args``."""
    return (specs,)


N0 = dyn({0: Dim("n", min=2, max=64)})
N01 = dyn({0: Dim("n", min=2, max=64), 1: Dim("m", min=2, max=64)})
THIRDS = dyn({0: 3 * Dim("k", min=2, max=21) - 1})  # tensor_split(x, 3) guards on size % 3


def strided_of_transpose(x): return x.t().as_strided((2, 3), (1, 2))
def strided_of_slice(x): return x[1:].as_strided((2, 2), (1, 3))
def strided_of_slice_offset(x): return x[1:].as_strided((2, 2), (1, 3), 5)
def strided_of_transpose_sym(x): return x.t().as_strided((2, x.shape[0]), (1, x.shape[1]))
def strided_sym(x): return x.as_strided((x.shape[0] - 1, 2), (x.shape[1], 1), 1)
def strided_windows(x): return x.as_strided((x.shape[0] - 2, 3), (1, 1))
def scatter_transposed(x, src): return torch.as_strided_scatter(x.t(), src, (2, 2), (1, 3), 1)
def scatter_sym(x, src): return torch.as_strided_scatter(x, src, (2, 2), (x.shape[1], 1))
def unfold_sym(x): return x.unfold(0, 3, 2)
def unfold_last_sym(x): return x.unfold(-1, 2, 1)
def split_sections_sym(x): return torch.tensor_split(x, 3)
def split_indices_sym(x): return torch.tensor_split(x, (1, x.shape[0] - 1))
def split_by_tensor(x, i): return torch.tensor_split(x, i, 1)
def hsplit_fn(x): return torch.hsplit(x, 2)
def vsplit_fn(x): return torch.vsplit(x, [1, 3])
def dsplit_fn(x): return torch.dsplit(x, 3)
def atleast_all(x, y, z): return torch.atleast_3d(x, y, z)
def ravel_t(x): return x.t().ravel()
def ravel_sym(x): return torch.ravel(x)
def resize_shrink(x): return x.clone().resize_(2, 5)
def resize_same(x): return x.t().clone().resize_(4, 3)  # the clone keeps the transposed strides
def resize_sym(x): return x.clone().resize_(x.shape[0] * 2)
def resize_as_fn(x, y): return x.clone().resize_as_(y)
def broadcast_to_sym(x): return x.broadcast_to(2, x.shape[0], 3)
def unsafe_chunk_fn(x): return x.unsafe_chunk(3, 1)
def unsafe_split_fn(x): return x.unsafe_split(2)


CASES = [
    # as_strided reads memory in the order the strides give
    OpCase(aten.as_strided.default, args=lambda: (randn(3, 3), [2, 2], [1, 2], 1), expect_ops=["Gather"],
           dtypes=(f32, f16)),
    OpCase(aten.as_strided.default, args=lambda: (randn(16), [2, 2, 2, 2], [1, 1, 1, 1]), name="overlapping"),
    OpCase(aten.as_strided.default, args=lambda: (randn(4), [], []), name="scalar"),
    OpCase(aten.as_strided_copy.default, args=lambda: (randn(16), [2, 1, 1, 2], [1, 7, 7, 1])),
    OpCase(strided_of_transpose, args=lambda: (randn(3, 4),)),
    OpCase(strided_of_slice, args=lambda: (randn(4, 3),)),
    OpCase(strided_of_slice_offset, args=lambda: (randn(4, 3),)),
    OpCase(strided_sym, args=lambda: (randn(4, 3),), name="dyn", dynamic_shapes=N01),
    OpCase(strided_of_transpose_sym, args=lambda: (randn(4, 3),), name="dyn", dynamic_shapes=N01),
    OpCase(strided_windows, args=lambda: (randn(6),), name="dyn", dynamic_shapes=dyn({0: Dim("n", min=3)})),
    OpCase(aten.as_strided_scatter.default, args=lambda: (randn(3, 3), randn(2, 2), [2, 2], [1, 2], 1),
           expect_ops=["ScatterND"]),
    OpCase(aten.as_strided_scatter.default, args=lambda: (randn(16), randn(2, 1, 1, 2), [2, 1, 1, 2], [1, 2, 4, 8]),
           name="inverted"),
    OpCase(aten.as_strided_scatter.default, args=lambda: (randn(1), randn(()), [], []), name="scalar"),
    OpCase(scatter_transposed, args=lambda: (randn(3, 4), randn(2, 2))),
    OpCase(scatter_sym, args=lambda: (randn(3, 4), randn(2, 2)), name="dyn",
           dynamic_shapes=dyn({0: Dim("n", min=2, max=64)}, None)),
    # unfold
    OpCase(aten.unfold.default, args=lambda: (randn(5, 5, 5), 1, 3, 2), expect_ops=["Gather"], dtypes=(f32, f16)),
    OpCase(aten.unfold.default, args=lambda: (randn(10,), 0, 3, 3), name="last"),
    OpCase(aten.unfold.default, args=lambda: (randn(()), 0, 1, 1), name="scalar"),
    OpCase(aten.unfold_copy.default, args=lambda: (randn(4, 6), -1, 2, 5)),
    OpCase(unfold_sym, args=lambda: (randn(9, 2),), name="dyn", dynamic_shapes=dyn({0: Dim("n", min=3, max=64)})),
    OpCase(unfold_last_sym, args=lambda: (randn(2, 5),), name="dyn", dynamic_shapes=N01),
    # tensor_split and h/v/dsplit
    OpCase(aten.tensor_split.sections, args=lambda: (randn(7, 2), 3), expect_ops=["Split"]),
    OpCase(aten.tensor_split.sections, args=lambda: (randn(2, 2), 3, 0), name="more_than_size"),
    OpCase(aten.tensor_split.indices, args=lambda: (randn(2, 7), [1, -2, 5, 3], 1), name="unordered"),
    OpCase(aten.tensor_split.indices, args=lambda: (randn(4, 3), [2, 9]), name="past_end"),
    OpCase(split_sections_sym, args=lambda: (randn(8, 2),), name="dyn", dynamic_shapes=THIRDS),
    OpCase(split_indices_sym, args=lambda: (randn(5, 2),), name="dyn", dynamic_shapes=N0),
    OpCase(split_by_tensor, args=lambda: (randn(3, 6), torch.tensor([1, 4]))),
    OpCase(split_by_tensor, args=lambda: (randn(3, 6), torch.tensor([5, -2, 2])), name="unordered"),
    OpCase(split_by_tensor, args=lambda: (randn(3, 6), torch.tensor([2])), name="one"),
    OpCase(split_by_tensor, args=lambda: (randn(3, 6), torch.tensor([], dtype=torch.long)), name="none"),
    OpCase(split_by_tensor, args=lambda: (randn(3, 6), torch.tensor([2, 3])), name="dyn",
           dynamic_shapes=dyn({1: Dim("m", min=2, max=64)}, None)),
    OpCase(hsplit_fn, args=lambda: (randn(6),), name="1d"),
    OpCase(hsplit_fn, args=lambda: (randn(3, 4, 2),)),
    OpCase(vsplit_fn, args=lambda: (randn(5, 2),)),
    OpCase(dsplit_fn, args=lambda: (randn(2, 2, 6),)),
    # shape fixes
    OpCase(aten.atleast_1d.default, args=lambda: (randn(()),), expect_ops=["Unsqueeze"]),
    OpCase(aten.atleast_2d.default, args=lambda: (randn(3),)),
    OpCase(aten.atleast_3d.default, args=lambda: (randn(3),), name="1d"),
    OpCase(aten.atleast_3d.default, args=lambda: (randn(2, 3),), name="2d"),
    OpCase(aten.atleast_3d.default, args=lambda: (randn(2, 3, 4, 5),), name="4d"),
    OpCase(atleast_all, args=lambda: (randn(()), randn(2), randn(2, 3))),
    OpCase(aten.ravel.default, args=lambda: (randn(()),), name="scalar"),
    OpCase(ravel_t, args=lambda: (randn(3, 4),)),
    OpCase(ravel_sym, args=lambda: (randn(3, 4),), name="dyn", dynamic_shapes=N01),
    OpCase(aten.broadcast_to.default, args=lambda: (randn(3, 1), [2, -1, 4]), expect_ops=["Expand"]),
    OpCase(broadcast_to_sym, args=lambda: (randn(4, 1),), name="dyn", dynamic_shapes=N0),
    OpCase(aten.narrow_copy.default, args=lambda: (randn(5, 4), 0, -2, 2)),
    OpCase(aten.unbind_copy.int, args=lambda: (randn(2, 3, 4), 1)),
    OpCase(unsafe_chunk_fn, args=lambda: (randn(2, 7),)),
    OpCase(unsafe_split_fn, args=lambda: (randn(5, 2),)),
    OpCase(aten.unsafe_split_with_sizes.default, args=lambda: (randn(5, 2), [2, 3])),
    # resize_ keeps the first elements of memory
    OpCase(resize_shrink, args=lambda: (randn(3, 4),), expect_ops=["Slice"]),
    OpCase(resize_same, args=lambda: (randn(3, 4),)),
    OpCase(resize_sym, args=lambda: (randn(3, 4),), name="dyn", dynamic_shapes=N0),
    OpCase(resize_as_fn, args=lambda: (randn(3, 4), randn(2, 5))),
    OpCase(resize_as_fn, args=lambda: (randn(()), randn(1, 1, 1)), name="scalar"),
]


@pytest.mark.parametrize(("case", "dtype"), params(CASES))
def test_op(case: OpCase, dtype: torch.dtype | None) -> None:
    run_case(case, dtype)


AT_OTHER_SIZES = [
    (strided_sym, [(4, 3)], N01, [[(6, 5)], [(2, 2)]]),
    (strided_of_transpose_sym, [(4, 3)], N01, [[(6, 5)], [(2, 2)]]),
    (strided_windows, [(6,)], dyn({0: Dim("n", min=3)}), [[(9,)], [(3,)]]),
    (scatter_sym, [(3, 4), (2, 2)], dyn({0: Dim("n", min=2, max=64)}, None), [[(7, 4), (2, 2)]]),
    (unfold_sym, [(9, 2)], dyn({0: Dim("n", min=3, max=64)}), [[(3, 2)], [(4, 2)], [(12, 2)]]),
    (unfold_last_sym, [(2, 5)], N01, [[(3, 2)], [(4, 9)]]),
    (split_sections_sym, [(8, 2)], THIRDS, [[(5, 2)], [(11, 2)]]),
    (split_indices_sym, [(5, 2)], N0, [[(2, 2)], [(9, 2)]]),
    (ravel_sym, [(3, 4)], N01, [[(5, 2)]]),
    (broadcast_to_sym, [(4, 1)], N0, [[(7, 1)]]),
    (resize_sym, [(3, 4)], N0, [[(6, 4)], [(2, 4)]]),
]


@pytest.mark.parametrize(("fn", "shapes", "dynamic_shapes", "others"), AT_OTHER_SIZES,
                         ids=[c[0].__name__ for c in AT_OTHER_SIZES])
def test_symbolic_sizes_hold_at_other_sizes(fn, shapes, dynamic_shapes, others) -> None:
    """One export serves every size the dynamic dims allow."""
    torch.manual_seed(0)

    class M(torch.nn.Module):
        def forward(self, *args):
            return fn(*args)

    prog = onnxport.export(M(), tuple(randn(*s) for s in shapes), dynamic_shapes=dynamic_shapes, verify=False)
    for other in others:
        args = [randn(*s) for s in other]
        torch.testing.assert_close(prog(*args), M()(*args))


def test_tensor_split_by_tensor_reads_the_indices_at_run_time() -> None:
    prog = onnxport.export(split_by_tensor, (randn(3, 6), torch.tensor([1, 4])), verify=False)
    x = randn(3, 6)
    for cuts in ([0, 6], [3, 2], [-1, 5]):
        i = torch.tensor(cuts)
        for got, want in zip(prog(x, i), split_by_tensor(x, i)):
            torch.testing.assert_close(got, want)


def test_empty_permuted_has_the_logical_shape() -> None:
    def fn(x):
        return torch.empty_permuted((x.shape[0], 3, 2), (2, 0, 1)), x + 1

    prog = onnxport.export(fn, (randn(4),), dynamic_shapes=N0, verify=False)
    out, _ = prog(randn(5))
    assert out.shape == (5, 3, 2) and out.dtype == torch.float32


def _refused(fn, *args, match: str) -> None:
    with pytest.raises(onnxport.TranslationError, match=match):
        onnxport.export(fn, args, verify=False)


def test_as_strided_of_memory_with_gaps_is_refused() -> None:
    _refused(lambda x: x[:, ::2].as_strided((2, 2), (1, 2)), randn(3, 4), match=r"has gaps or overlaps")


def test_as_strided_outside_the_tensor_is_refused() -> None:
    """Memory before a view's first element (or past its last) is not in its ONNX value."""
    _refused(lambda x: x[1:].as_strided((2, 2), (1, 2), 0), randn(4, 3), match=r"outside the tensor's own 9 elements")
    _refused(lambda x: x.as_strided((3, 3), (3, 1), 1), randn(3, 3), match=r"outside the tensor's own 9 elements")


def test_as_strided_scatter_writing_twice_is_refused() -> None:
    _refused(lambda x, s: torch.as_strided_scatter(x, s, (2, 2), (1, 1)), randn(4), randn(2, 2),
             match=r"writes some elements more than once")


def test_resize_that_grows_is_refused() -> None:
    _refused(lambda x: x.clone().resize_(5, 5), randn(3, 4), match=r"uninitialised memory")


def test_broadcast_shapes_of_symbolic_sizes_exports() -> None:
    class Shapes(torch.nn.Module):
        def forward(self, x, y):
            return torch.broadcast_shapes(x.shape, y.shape)

    prog = onnxport.export(Shapes(), (randn(3, 1), randn(4)), dynamic_shapes=({0: Dim("n")}, {0: Dim("m")}),
                           verify=False)
    assert [int(s) for s in prog(randn(5, 1), randn(7))] == [5, 7]


def test_broadcast_shapes_of_static_sizes_says_nothing_is_computed() -> None:
    with pytest.raises(onnxport.InvalidInputError, match=r"only constants \(\[3, 4\]\).*\n.*dynamic_shapes"):
        onnxport.export(lambda x, y: torch.broadcast_shapes(x.shape, y.shape), (randn(3, 1), randn(4)), verify=False)
