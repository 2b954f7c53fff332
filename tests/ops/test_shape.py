"""Shape and layout ops against eager PyTorch, with static and symbolic sizes."""

import sys

import pytest
import torch
import torch.nn.functional as F
from torch import randn
from torch.export import Dim

from onnxport.translate.registry import ops
from tests.ops._runner import OpCase, check_case, params, run_case

aten = ops.aten  # an op this torch lacks is an AbsentOp: its cases are skipped
f32, f16, bf16 = torch.float32, torch.float16, torch.bfloat16


def dyn(*specs):
    """A dynamic_shapes spec for the runner's wrapper, whose forward takes ``*args``."""
    return (specs,)


N0 = dyn({0: Dim("n", min=2, max=64)})       # dynamic dim 0 of the only input
N01 = dyn({0: Dim("n", min=2, max=64), 1: Dim("m", min=2, max=64)})


def view_flat(x): return x.view(-1)
def view_n_rest(x): return x.view(x.shape[0], -1)
def reshape_sym(x): return x.reshape(x.shape[0] * x.shape[1], x.shape[2])
def view_as_fn(x, y): return x.view_as(y)
def reshape_as_fn(x, y): return x.reshape_as(y)
def getitem_none(x): return x[None]
def getitem_ellipsis(x): return x[..., 1:3]
def getitem_mixed(x): return x[:, None, 1:]
def getitem_drop_last(x): return x[:, : x.shape[1] - 1]
def getitem_neg_step(x): return x[-3:, ::2]
def getitem_select(x): return x[:, 0]
def getitem_select_sym(x): return x[x.shape[0] - 1]
def t_prop(x): return x.T  # 2-D: x.T on other ranks is deprecated
def mT_fn(x): return x.mT
def expand_sym(x): return x[:, :1].expand(x.shape[0], 5)
def expand_as_fn(x, y): return x.expand_as(y)
def cat_empty(x, y): return torch.cat([x, torch.empty(0), y], 0)
def cat_mixed(x, y): return torch.cat([x, y], 1)
def split_sym(x): return x.split(3)
def chunk_sym(x): return x.chunk(3)
def unbind_fn(x): return x.unbind(1)
def squeeze_fn(x): return x.squeeze()
def flatten_sym(x): return x.flatten(1)
def unflatten_sym(x): return x.unflatten(0, (-1, 2))
def narrow_sym(x): return x.narrow(0, 1, x.shape[0] - 1)
def tile_fn(x): return x.tile(2)
def repeat_interleave_dim(x): return x.repeat_interleave(3, dim=1)
def repeat_interleave_sym(x): return x.repeat_interleave(x.shape[0], dim=-1)
def repeat_interleave_flat(x): return x.repeat_interleave(2)
def repeat_interleave_counts(r): return torch.repeat_interleave(r)
def repeat_interleave_by(x, r): return x.repeat_interleave(r, dim=0) * 2
def diff_twice(x): return torch.diff(x, n=2, dim=0)
def diff_pre_app(x, p, a): return torch.diff(x, dim=-1, prepend=p, append=a)
def repeat_sym(x): return x.repeat(2, 1, 1)
def roll_sym(x): return torch.roll(x, 1, 0)
def pad_fn(x): return F.pad(x, (1, 2))
def pad_2d(x): return F.pad(x, (1, 0, -1, 2), value=3.5)
def pad_reflect(x): return F.pad(x, (2, 1), mode="reflect")
def pad_replicate(x): return F.pad(x, (1, 2, 2, 1), mode="replicate")
def pad_circular(x): return F.pad(x, (1, 2), mode="circular")
def pad_circular_2d(x): return F.pad(x, (1, 2, 2, 0), mode="circular")
def pad_sym(x): return F.pad(x, (1, 1, 0, 2))
def pad_replicate_crop(x): return F.pad(x, (-4, 5, 2, -4), mode="replicate")  # crops to nothing, still reads edges
def pad_replicate_crop_1d(x): return F.pad(x, (2, -1), mode="replicate")
def pad_circular_crop(x): return F.pad(x, (-1, 1, -2, 1), mode="circular")
def pad_circular_sym(x): return F.pad(x, (1, x.shape[1] - 1), mode="circular")
def movedim_fn(x): return x.movedim(0, -1)
def movedim_list(x): return torch.movedim(x, [0, 1], [2, 0])
def clone_fn(x): return x.clone() + 1
def contiguous_fn(x): return x.transpose(0, 1).contiguous()
def detach_fn(x): return x.detach()
def lifted_const(x): return x + torch.tensor([1.0, 2.0, 3.0])
def to_f16(x): return x.to(torch.float16)
def to_bool(x): return x.to(torch.bool)
def to_int(x): return x.int()
def to_long(x): return x.long()
def to_float(x): return x.float()
def to_kw(x): return x.to(dtype=torch.float16, device="cpu")
def to_copy(x): return x.to(torch.float32, copy=True)
def to_bf16_and_back(x): return x.to(torch.bfloat16).float()  # no bf16 output: the runner cannot read one
def type_as_fn(x, y): return x.type_as(y)
class InplaceAssign(torch.nn.Module):
    def forward(self, x, y):
        x = x.clone()
        x[:, 0] = y
        x[1:, 2:3] = 5.0
        x[:, -1:] += 1
        return x


def functionalized(module: torch.nn.Module, *args) -> torch.nn.Module:
    """The module as functionalization rewrites it: copy_ on views becomes select_scatter/slice_scatter."""
    return torch.export.export(module, args).run_decompositions({}).module()


def _bool(*shape): return lambda: (randn(*shape) > 0,)
def _long(*shape): return lambda: (torch.randint(-5, 5, shape),)


CASES = [
    # views and reshapes
    OpCase(aten.view.default, args=lambda: (randn(2, 3, 4), [6, -1]), expect_ops=["Reshape"], dtypes=(f32, f16)),
    OpCase(aten.reshape.default, args=lambda: (randn(2, 3), [3, 2])),
    OpCase(aten.view.default, args=lambda: (randn(0, 3), [3, 0]), name="zero"),
    OpCase(aten._unsafe_view.default, args=lambda: (randn(4, 3), [2, 6])),
    OpCase(view_flat, args=lambda: (randn(2, 3),)),
    OpCase(view_flat, args=lambda: (randn(3, 4),), name="dyn", dynamic_shapes=N0),
    OpCase(view_n_rest, args=lambda: (randn(3, 4, 5),), name="dyn", dynamic_shapes=N0),
    OpCase(reshape_sym, args=lambda: (randn(3, 4, 5),), name="dyn", dynamic_shapes=N01),
    OpCase(view_as_fn, args=lambda: (randn(2, 6), randn(3, 4))),
    OpCase(reshape_as_fn, args=lambda: (randn(3, 4), randn(3, 2, 2)), name="dyn",
           dynamic_shapes=dyn({0: Dim("a", min=2)}, {0: Dim("a", min=2)})),
    OpCase(aten.permute.default, args=lambda: (randn(2, 3, 4), [2, 0, -2]), expect_ops=["Transpose"]),
    OpCase(aten.transpose.int, args=lambda: (randn(2, 3, 4), 0, -1)),
    OpCase(aten.t.default, args=lambda: (randn(2, 3),)),
    OpCase(aten.t.default, args=lambda: (randn(3),), name="1d"),
    OpCase(t_prop, args=lambda: (randn(2, 3),)),
    OpCase(mT_fn, args=lambda: (randn(2, 3, 4),)),
    OpCase(movedim_fn, args=lambda: (randn(2, 3, 4),)),
    OpCase(movedim_list, args=lambda: (randn(2, 3, 4),)),
    OpCase(aten.expand.default, args=lambda: (randn(3, 1), [2, -1, 4]), expect_ops=["Expand"]),
    OpCase(expand_sym, args=lambda: (randn(3, 4),), name="dyn", dynamic_shapes=N0),
    OpCase(expand_as_fn, args=lambda: (randn(1, 4), randn(3, 4))),
    OpCase(expand_as_fn, args=lambda: (randn(1, 4), randn(3, 4)), name="dyn",
           dynamic_shapes=dyn(None, {0: Dim("n", min=2)})),
    # concatenation and splitting
    OpCase(aten.cat.default, args=lambda: ([randn(2, 3), randn(1, 3)],), expect_ops=["Concat"], dtypes=(f32, f16)),
    OpCase(aten.cat.default, args=lambda: ([randn(2, 3), randn(2, 2)], -1), name="neg_dim"),
    OpCase(cat_empty, args=lambda: (randn(2, 3), randn(1, 3))),
    OpCase(cat_mixed, args=lambda: (randn(2, 3), torch.arange(4).reshape(2, 2))),
    OpCase(cat_mixed, args=lambda: (randn(2, 3).half(), randn(2, 2)), name="f16_f32"),
    OpCase(cat_mixed, args=lambda: (randn(3, 3), randn(3, 2)), name="dyn",
           dynamic_shapes=dyn({0: Dim("n", min=2)}, {0: Dim("n", min=2)})),
    OpCase(aten.stack.default, args=lambda: ([randn(2, 3), randn(2, 3)], 1)),
    OpCase(aten.stack.default, args=lambda: ([randn(2, 3), randn(2, 3)], -1), name="neg"),
    OpCase(aten.split.Tensor, args=lambda: (randn(7, 3), 3), expect_ops=["Split"]),
    OpCase(aten.split.Tensor, args=lambda: (randn(6, 3), 4)),
    OpCase(aten.split.Tensor, args=lambda: (randn(2, 6), 2, -1), name="dim"),
    OpCase(aten.split_with_sizes.default, args=lambda: (randn(2, 6), [1, 2, 3], 1)),
    OpCase(aten.chunk.default, args=lambda: (randn(6, 3), 4)),
    OpCase(aten.chunk.default, args=lambda: (randn(5, 3), 2, 0), name="odd"),
    OpCase(chunk_sym, args=lambda: (randn(8, 2),), name="dyn", dynamic_shapes=dyn({0: Dim("n", min=7, max=9)})),
    OpCase(unbind_fn, args=lambda: (randn(2, 3, 4),)),
    # slicing
    OpCase(aten.slice.Tensor, args=lambda: (randn(5, 4), 0, 1, 3), expect_ops=["Slice"], dtypes=(f32, f16)),
    OpCase(aten.slice.Tensor, args=lambda: (randn(5, 4), 1, None, None, 2), name="none_step"),
    OpCase(aten.slice.Tensor, args=lambda: (randn(5, 4), 0, -3, -1), name="negative"),
    OpCase(aten.slice.Tensor, args=lambda: (randn(5, 4), 0, 2, sys.maxsize), name="maxsize"),
    OpCase(aten.slice.Tensor, args=lambda: (randn(5, 4), 1, 1, 100), name="huge_end"),
    OpCase(getitem_none, args=lambda: (randn(2, 3),)),
    OpCase(getitem_ellipsis, args=lambda: (randn(2, 3, 4),)),
    OpCase(getitem_mixed, args=lambda: (randn(2, 3),)),
    OpCase(getitem_neg_step, args=lambda: (randn(5, 5),)),
    OpCase(getitem_drop_last, args=lambda: (randn(3, 5),), name="dyn", dynamic_shapes=N01),
    OpCase(getitem_select, args=lambda: (randn(3, 5),)),
    OpCase(getitem_select_sym, args=lambda: (randn(3, 5),), name="dyn", dynamic_shapes=N0),
    OpCase(aten.select.int, args=lambda: (randn(3, 4), 1, -1), expect_ops=["Gather"]),
    OpCase(aten.narrow.default, args=lambda: (randn(5, 4), 0, 1, 3)),
    OpCase(aten.narrow.default, args=lambda: (randn(5, 4), 1, -2, 2), name="neg_start"),
    OpCase(narrow_sym, args=lambda: (randn(5, 4),), name="dyn", dynamic_shapes=N0),
    # squeeze / unsqueeze / flatten
    OpCase(squeeze_fn, args=lambda: (randn(1, 3, 1, 2),)),
    OpCase(aten.squeeze.dim, args=lambda: (randn(1, 3, 1), -1)),
    OpCase(aten.squeeze.dim, args=lambda: (randn(2, 3), 0), name="noop"),
    OpCase(aten.squeeze.dims, args=lambda: (randn(1, 3, 1, 1), [0, 2])),
    OpCase(aten.unsqueeze.default, args=lambda: (randn(2, 3), -1), expect_ops=["Unsqueeze"]),
    OpCase(aten.unsqueeze.default, args=lambda: (randn(()), 0), name="scalar"),
    OpCase(aten.flatten.using_ints, args=lambda: (randn(2, 3, 4, 5), 1, 2)),
    OpCase(aten.flatten.using_ints, args=lambda: (randn(()),), name="scalar"),
    OpCase(flatten_sym, args=lambda: (randn(3, 4, 5),), name="dyn", dynamic_shapes=N01),
    OpCase(aten.unflatten.int, args=lambda: (randn(2, 12), 1, [3, -1])),
    OpCase(unflatten_sym, args=lambda: (randn(6, 4),), name="dyn",
           dynamic_shapes=dyn({0: 2 * Dim("h", min=1, max=32)})),
    # repeat, tile, flip, roll
    OpCase(aten.repeat.default, args=lambda: (randn(2, 3), [2, 1, 3]), expect_ops=["Tile"]),
    OpCase(repeat_sym, args=lambda: (randn(3, 2),), name="dyn", dynamic_shapes=N0),
    OpCase(tile_fn, args=lambda: (randn(2, 3),)),
    OpCase(repeat_interleave_dim, args=lambda: (randn(2, 3, 4),), expect_ops=["Tile"], dtypes=(f32, f16)),
    OpCase(repeat_interleave_dim, args=lambda: (randn(3, 4, 2),), name="dyn",
           dynamic_shapes=dyn({0: Dim("n", min=2), 2: Dim("m", min=2)})),
    OpCase(repeat_interleave_sym, args=lambda: (randn(3, 4),), name="sym_repeats", dynamic_shapes=N0),
    OpCase(repeat_interleave_flat, args=lambda: (randn(2, 3),)),
    # counts known at run time only (packed sequences' lengths); zero counts first, between and last
    OpCase(repeat_interleave_counts, args=lambda: (torch.tensor([0, 2, 0, 3, 1, 0, 0]),), name="counts"),
    OpCase(repeat_interleave_counts, args=lambda: (torch.tensor([0, 0], dtype=torch.int32),), name="all_zero"),
    OpCase(repeat_interleave_by, args=lambda: (randn(4, 3), torch.tensor([1, 3, 0, 2])), name="by_tensor",
           dynamic_shapes=dyn({0: Dim("n", min=2, max=64)}, {0: Dim("n", min=2, max=64)})),
    OpCase(diff_twice, args=lambda: (randn(5, 3),)),
    OpCase(torch.diff, args=lambda: (randn(5, 3),), kwargs={"dim": 0}, name="dyn",
           dynamic_shapes=dyn({0: Dim("n", min=3, max=64), 1: Dim("m", min=2)})),
    OpCase(torch.diff, args=lambda: (torch.tensor([True, False, False, True]),), name="bool"),
    OpCase(diff_pre_app, args=lambda: (randn(2, 4), randn(2, 1), randn(2, 2))),
    OpCase(aten.tile.default, args=lambda: (randn(3,), [2, 2]), name="more_dims"),
    OpCase(aten.flip.default, args=lambda: (randn(3, 4, 2), [0, -1]), dtypes=(f32, f16)),
    OpCase(aten.roll.default, args=lambda: (randn(4, 5), [1, -7], [0, 1])),
    OpCase(aten.roll.default, args=lambda: (randn(3, 4), [5]), name="flat"),
    OpCase(roll_sym, args=lambda: (randn(4, 3),), name="dyn", dynamic_shapes=N0),
    # padding
    OpCase(aten.constant_pad_nd.default, args=lambda: (randn(2, 3), [1, 2], 0.5), expect_ops=["Pad"]),
    OpCase(pad_fn, args=lambda: (randn(2, 3),), dtypes=(f32, f16)),
    OpCase(pad_2d, args=lambda: (randn(2, 3, 4),)),
    OpCase(pad_reflect, args=lambda: (randn(1, 2, 5),)),
    OpCase(pad_replicate, args=lambda: (randn(1, 2, 3, 4),)),
    OpCase(pad_circular, args=lambda: (randn(1, 2, 5),)),
    OpCase(pad_sym, args=lambda: (randn(3, 4),), name="dyn", dynamic_shapes=N01),
    OpCase(pad_replicate_crop, args=lambda: (randn(2, 3, 4, 4),), expect_ops=["Gather"]),
    OpCase(pad_replicate_crop, args=lambda: (randn(2, 3, 4, 4),), name="dyn",
           dynamic_shapes=dyn({0: Dim("n", min=2), 2: Dim("h", min=4), 3: Dim("w", min=4)})),
    OpCase(pad_replicate_crop_1d, args=lambda: (randn(2, 3, 5),), dtypes=(f32, f16)),
    OpCase(pad_circular, args=lambda: (randn(0, 3, 3),), name="empty"),
    OpCase(pad_circular_crop, args=lambda: (randn(1, 3, 4, 4),)),
    OpCase(pad_circular_sym, args=lambda: (randn(3, 4),), name="dyn", dynamic_shapes=dyn({1: Dim("m", min=3)}),
           expect_ops=["Pad"]),
    # identities and casts
    OpCase(clone_fn, args=lambda: (randn(2, 3),)),
    OpCase(contiguous_fn, args=lambda: (randn(2, 3),)),
    OpCase(detach_fn, args=lambda: (randn(2, 3),)),
    OpCase(lifted_const, args=lambda: (randn(2, 3),)),
    OpCase(to_f16, args=lambda: (randn(2, 3),), expect_ops=["Cast"]),
    OpCase(to_bool, args=lambda: (torch.tensor([0.0, 1.5, -2.0, 0.0]),)),
    OpCase(to_bool, args=_long(3, 4), name="int"),
    OpCase(to_int, args=lambda: (randn(3, 4) * 10,)),
    OpCase(to_long, args=_bool(3, 4), name="bool"),
    OpCase(to_float, args=_long(3, 4), name="int"),
    OpCase(to_float, args=lambda: (randn(3, 4).to(bf16),), name="bf16"),
    OpCase(to_kw, args=lambda: (randn(3, 4),)),
    OpCase(to_copy, args=lambda: (randn(3, 4),)),
    OpCase(aten._to_copy.default, args=lambda: (randn(3, 4),), kwargs={"dtype": torch.int32}),
    OpCase(to_bf16_and_back, args=lambda: (randn(3, 4),)),
    OpCase(type_as_fn, args=lambda: (randn(3, 4) * 5, torch.tensor([1, 2]))),
    OpCase(functionalized(InplaceAssign(), randn(3, 4), randn(3)), args=lambda: (randn(3, 4), randn(3)),
           name="inplace_assign", expect_ops=["ScatterElements"]),
    OpCase(aten.copy.default, args=lambda: (randn(3, 4), torch.arange(4))),
]


@pytest.mark.parametrize(("case", "dtype"), params(CASES))
def test_op(case: OpCase, dtype: torch.dtype | None) -> None:
    run_case(case, dtype)


@pytest.mark.parametrize("fn", [split_sym])
def test_split_into_a_size_dependent_number_of_pieces_is_not_silently_specialised(fn) -> None:
    """The number of outputs depends on the size, so torch.export fixes it: onnxport says so."""
    import onnxport

    with pytest.raises(onnxport.CaptureError, match=r"args_0.shape\[0\] was given Dim\('n'\) but torch.export fixed it"):
        onnxport.export(fn, (randn(7, 2),), dynamic_shapes=dyn({0: Dim("n", min=7, max=9)}))


def test_inplace_slice_assignment_is_functionalized() -> None:
    """``x[:, 0] = y`` writes through a view: the pipeline functionalizes it into a scatter."""
    prog = run_case(OpCase(InplaceAssign(), args=lambda: (randn(3, 4), randn(3))))
    assert any("functionalized" in w for w in prog.report.warnings)


def test_inplace_write_through_view_of_intermediate() -> None:
    class M(torch.nn.Module):
        def forward(self, x):
            y = x * 2
            y[:, 1:].add_(1)
            y.relu_()
            return y

    run_case(OpCase(M(), args=lambda: (randn(3, 4),)))


def test_dynamic_model_runs_at_other_sizes() -> None:
    """A symbolic view/slice/expand chain exported once gives eager's answer at a different size."""
    import onnxport

    class M(torch.nn.Module):
        def forward(self, x):
            y = x.view(x.shape[0], -1)[:, : x.shape[1] - 1]
            return y.unsqueeze(1).expand(-1, 2, -1).flatten(1)

    prog = onnxport.export(M(), (randn(3, 4, 2),), dynamic_shapes=({0: Dim("n", min=2), 1: Dim("m", min=3)},), verify=False)
    for shape in [(5, 3, 2), (2, 6, 2)]:
        x = randn(*shape)
        torch.testing.assert_close(prog(x), M()(x))


@pytest.mark.parametrize(("fn", "shape", "dims", "others"), [
    (pad_replicate_crop, (2, 3, 4, 4), {0: Dim("n", min=2), 2: Dim("h", min=4), 3: Dim("w", min=4)},
     [(3, 3, 6, 5), (2, 3, 4, 9)]),
    (pad_circular_sym, (3, 4), {1: Dim("m", min=3)}, [(3, 3), (3, 7)]),
])
def test_pads_hold_at_other_sizes(fn, shape, dims, others) -> None:
    """Pads computed from symbolic sizes (gathered edge positions, wrap amounts) follow the input's size."""
    import onnxport

    prog = onnxport.export(fn, (randn(*shape),), dynamic_shapes=dyn(dims), verify=False)
    for other in others:
        x = randn(*other)
        torch.testing.assert_close(prog(x), fn(x))


@pytest.mark.parametrize(("fn", "shape"), [(pad_circular, (1, 2, 5)), (pad_circular_2d, (1, 2, 4, 5)),
                                           (pad_circular_crop, (1, 3, 4, 4))])
def test_circular_pad_before_opset_19(fn, shape) -> None:
    """Opset 18 has no Pad mode 'wrap': the wrap-around is sliced from the other end and concatenated."""
    prog = check_case(OpCase(fn, args=lambda: (randn(*shape),)), None, 18)
    assert "Pad" not in {n.op_type for n in prog.model.graph}


class _NeedsNoDecomposition(torch.nn.Module):
    """Ops that once went through torch's decompositions (seconds of re-tracing) and now translate directly."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.utils.weight_norm(torch.nn.Conv1d(4, 4, 3))  # as wav2vec2's positional conv

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x).repeat_interleave(2, dim=1)
        return torch.min(y, torch.diff(y, dim=-1, append=y[..., -1:]))


def test_common_ops_translate_without_decomposition() -> None:
    prog = run_case(OpCase(_NeedsNoDecomposition(), args=lambda: (randn(2, 4, 7),)))
    assert prog.report.decomposed == {}


@pytest.mark.parametrize("dynamic", [False, True])
def test_a_view_to_the_sizes_it_has_is_no_reshape(dynamic: bool) -> None:
    """A view to the sizes the tensor already has (attention's output in a BERT layer, static or symbolic)
    writes no Reshape; one that changes them still does."""
    import onnxport

    class M(torch.nn.Module):
        def forward(self, x):
            same = (x * 2).view(x.shape[0], x.shape[1], 4)
            return same + 1, (x + 1).view(-1)

    dims = ({0: Dim("n", min=2), 1: Dim("m", min=2)},) if dynamic else None
    prog = onnxport.export(M(), (randn(3, 5, 4),), dynamic_shapes=dims, verify=False)
    assert [n.op_type for n in prog.model_proto.graph.node].count("Reshape") == 1
    for shape in [(3, 5, 4), (2, 7, 4)] if dynamic else [(3, 5, 4)]:
        x = randn(*shape)
        for got, want in zip(prog(x), M()(x)):
            torch.testing.assert_close(got, want)
