"""The layout of complex tensors in the graph (a real tensor with a trailing dim of 2: real, imaginary part)
and the lifts that run real translators on such values: ``_LAYOUT`` ops once on the ``[..., 2]`` value with
their dim arguments moved off the trailing dim, ``_PARTS`` ops on each part, ``_BILINEAR`` ops (products) on
the four pairs of parts. ``ops/complex.py`` holds the translators written for complex values."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import onnx_ir as ir
import torch

from onnxport.translate.builder import Ctx
from onnxport.translate.ops._common import FLOAT_TYPES, norm_axis
from onnxport.translate.registry import lookup, ops

aten_ = ops.aten
INT64 = ir.DataType.INT64


def is_complex(val: Any) -> bool:
    """Whether an FX ``meta["val"]`` (or a Python number) is complex."""
    return (isinstance(val, torch.Tensor) and val.is_complex()) or isinstance(val, complex)


# -- the layout ------------------------------------------------------------------------------------------


def part(ctx: Ctx, z: ir.Value, index: int) -> ir.Value:
    """The real (0) or imaginary (1) part of complex ``z``."""
    out = ctx.op.Gather(z, ctx.const(index, INT64), axis=-1)
    if z.shape is not None:  # real translators read the rank of what they are given
        out.shape = ir.Shape(list(z.shape)[:-1])
    return out


def join(ctx: Ctx, re: ir.Value, im: ir.Value) -> ir.Value:
    """The complex value with parts ``re`` and ``im`` (broadcast against each other)."""
    same = re.shape is not None and im.shape is not None and list(re.shape) == list(im.shape)
    if not same:
        re = ctx.op.Expand(re, ctx.op.Shape(im))  # Expand broadcasts both ways: the common shape
        im = ctx.op.Expand(im, ctx.op.Shape(re))
    last = ctx.const([-1], INT64)
    out = ctx.op.Concat(ctx.op.Unsqueeze(re, last), ctx.op.Unsqueeze(im, last), axis=-1)
    if same:
        out.shape = ir.Shape([*re.shape, 2])
    return out


def to_complex(ctx: Ctx, x: ir.Value | complex | float, dtype: ir.DataType, *, complex_: bool) -> ir.Value:
    """``x`` as a complex value whose parts are ``dtype``: a real tensor gets a zero imaginary part
    (a pad, not a product, so that inf stays inf and NaN stays in its part)."""
    if not isinstance(x, ir.Value):
        return ctx.const(complex(x), dtype)
    x = ctx.cast(x, dtype)
    if complex_:
        return x
    last = ctx.const([-1], INT64)
    return ctx.op.Pad(ctx.op.Unsqueeze(x, last), ctx.const([0, 1], INT64), None, last)


def conjugate(ctx: Ctx, z: ir.Value) -> ir.Value:
    return ctx.op.Mul(z, ctx.const([1, -1], z.dtype))


def times_i(ctx: Ctx, z: ir.Value) -> ir.Value:
    """``i * z``: (-im, re)."""
    return ctx.op.Mul(ctx.op.Gather(z, ctx.const([1, 0], INT64), axis=-1), ctx.const([-1, 1], z.dtype))


def keep_part(ctx: Ctx, z: ir.Value, index: int) -> ir.Value:
    """Part ``index`` of ``z`` keeping the trailing dim (size 1), to broadcast against complex values."""
    return ctx.op.Slice(z, ctx.const([index], INT64), ctx.const([index + 1], INT64), ctx.const([-1], INT64))


def abs2(ctx: Ctx, z: ir.Value, *, keepdims: bool) -> ir.Value:
    return ctx.op.ReduceSumSquare(z, ctx.const([-1], INT64), keepdims=int(keepdims))


def arg_vals(ctx: Ctx) -> list[Any]:
    """The FX ``meta["val"]`` of each positional argument of the node (None for non-nodes)."""
    return [a.meta.get("val") if isinstance(a, torch.fx.Node) else a for a in ctx.node.args]


def operands(ctx: Ctx, x: Any, other: Any) -> tuple[ir.DataType, bool, bool]:
    """The output's part dtype and whether each operand of a binary node is complex."""
    vals = arg_vals(ctx)
    return ctx.out_dtype(), is_complex(vals[0]), is_complex(vals[1])


# -- lifts of real translators -------------------------------------------------------------------------------


def proxy_node(node: torch.fx.Node, view: Callable[[torch.Tensor], torch.Tensor]) -> torch.fx.Node:
    """A copy of ``node`` in a scratch graph whose complex metadata went through ``view``: what the real
    translator reads (``ctx.out_dtype()``, argument shapes) then describes the values it is given."""

    def convert(val: Any) -> Any:
        return torch.utils._pytree.tree_map(lambda v: view(v) if is_complex(v) and isinstance(v, torch.Tensor)
                                            else v, val)

    graph = torch.fx.Graph()
    placeholders: dict[torch.fx.Node, torch.fx.Node] = {}

    def placeholder(n: torch.fx.Node) -> torch.fx.Node:
        if n not in placeholders:
            placeholders[n] = graph.placeholder(n.name)
            placeholders[n].meta = {**n.meta, "val": convert(n.meta.get("val"))}
        return placeholders[n]

    args = torch.fx.node.map_arg(node.args, placeholder)
    kwargs = torch.fx.node.map_arg(node.kwargs, placeholder)
    proxy = graph.call_function(node.target, args, kwargs)
    proxy.name = node.name
    proxy.meta = {**node.meta, "val": convert(node.meta.get("val"))}
    return proxy


def _zip_map(fn: Callable[[Any, Any], Any], fx: Any, value: Any) -> Any:
    """``fn(fx argument, translated argument)`` over the leaves of a node's arguments."""
    if isinstance(fx, (list, tuple)) and isinstance(value, (list, tuple)) and len(fx) == len(value):
        return type(value)(_zip_map(fn, f, v) for f, v in zip(fx, value))
    return fn(fx, value)


def run_real(ctx: Ctx, proxy: torch.fx.Node, choose: Callable[[Any, Any], Any] | None, args: Any,
              kwargs: Any) -> Any:
    """The real translator of the node on the arguments ``choose(fx argument, value)`` picks."""
    node = ctx.node
    if choose is not None:
        args, kwargs = _zip_map(choose, (node.args, node.kwargs), (args, kwargs))
    ctx.node = proxy
    try:
        result = lookup(node.target)(ctx, *args, **kwargs)
    finally:
        ctx.node = node
    _zip_map(lambda val, v: ctx.set_type(v, val) if isinstance(v, ir.Value) else None, proxy.meta.get("val"), result)
    return result


def _parts_of(ctx: Ctx) -> Callable[[ir.Value, int], ir.Value]:
    cache: dict[tuple[int, int], ir.Value] = {}

    def get(z: ir.Value, index: int) -> ir.Value:
        if (id(z), index) not in cache:
            cache[id(z), index] = part(ctx, z, index)
        return cache[id(z), index]

    return get


def _lift_parts(ctx: Ctx, target: Any, args: Any, kwargs: Any) -> Any:
    """The real translator on the real parts, then on the imaginary parts (a real operand's are zero)."""
    node = ctx.node
    if target in _BILINEAR:
        return _lift_bilinear(ctx, args, kwargs)
    proxy, parts = proxy_node(node, lambda v: v.real), _parts_of(ctx)

    def choose(index: int) -> Callable[[Any, Any], Any]:
        def pick(fx: Any, value: Any) -> Any:
            val = fx.meta.get("val") if isinstance(fx, torch.fx.Node) else fx
            if isinstance(value, ir.Value) and is_complex(val):
                return parts(value, index)
            if isinstance(value, complex):
                return value.imag if index else value.real
            if index == 0:
                return value
            if isinstance(value, float):
                return 0.0
            if isinstance(value, ir.Value) and value.dtype in FLOAT_TYPES:
                return _zeros_like(ctx, value)
            return value

        return pick

    re = run_real(ctx, proxy, choose(0), args, kwargs)
    if not any(is_complex(v) for v in torch.utils._pytree.tree_leaves(node.meta.get("val"))):
        return re  # a real result (x.expand_as(z)): the complex operands gave only their shape
    if target in _REAL_ONLY:  # ones(dtype=complex): 1 + 0i
        im = torch.utils._pytree.tree_map(lambda v: _zeros_like(ctx, v), re)
    else:
        im = run_real(ctx, proxy, choose(1), args, kwargs)
    return _join_tree(ctx, re, im)


def _lift_bilinear(ctx: Ctx, args: Any, kwargs: Any) -> Any:
    """f(a + bi, c + di) = f(a, c) - f(b, d) + (f(a, d) + f(b, c)) i, and so on for more complex operands:
    the term taking k imaginary parts carries i^k."""
    node = ctx.node
    proxy, parts = proxy_node(node, lambda v: v.real), _parts_of(ctx)

    def choose(bits: int) -> Callable[[Any, Any], Any]:
        operand = itertools.count()

        def pick(fx: Any, value: Any) -> Any:  # bit k of ``bits``: the part of the k-th complex operand
            if isinstance(value, ir.Value) and isinstance(fx, torch.fx.Node) and is_complex(fx.meta.get("val")):
                return parts(value, (bits >> next(operand)) & 1)
            return value

        return pick

    count = sum(is_complex(a.meta.get("val")) for a in torch.utils._pytree.tree_leaves((node.args, node.kwargs))
                if isinstance(a, torch.fx.Node))
    results = [run_real(ctx, proxy, choose(bits), args, kwargs) for bits in range(2**count)]
    sums: list[ir.Value | None] = [None, None]  # real, imaginary
    for bits, term in enumerate(results):
        k = bin(bits).count("1")
        total = sums[k % 2]
        sums[k % 2] = term if total is None else (ctx.op.Add if k % 4 < 2 else ctx.op.Sub)(total, term)
    return join(ctx, sums[0], sums[1])


def _zeros_like(ctx: Ctx, value: ir.Value) -> ir.Value:
    out = ctx.op.Expand(ctx.const(0, like=value), ctx.op.Shape(value))
    out.shape = value.shape
    return out


def _join_tree(ctx: Ctx, re: Any, im: Any) -> Any:
    if isinstance(re, (list, tuple)):
        return type(re)(_join_tree(ctx, r, i) for r, i in zip(re, im))
    return join(ctx, re, im) if isinstance(re, ir.Value) else re


def _lift_layout(ctx: Ctx, target: Any, args: Any, kwargs: Any) -> Any:
    """The real translator once on the ``[..., 2]`` values, its dim arguments moved off the trailing dim."""
    node = ctx.node
    values = [n.meta.get("val") for n in node.all_input_nodes]
    rewritten = None
    first = next((v for v in values if is_complex(v)), None)
    if first is not None and not any(isinstance(v, torch.Tensor) and v.is_floating_point() for v in values):
        rewritten = _LAYOUT[target](first.dim(), list(args))
    if rewritten is None:  # a real operand (it gets a zero imaginary part) or a fill value: per part
        return _lift_parts(ctx, target, args, kwargs)
    proxy = proxy_node(node, lambda v: torch.view_as_real(v.resolve_conj()))
    return run_real(ctx, proxy, None, tuple(rewritten), kwargs)


def _dims_at(*positions: tuple[int, Any, int]) -> Callable[[int, list[Any]], list[Any]]:
    """A rewrite making the dim arguments at ``positions`` ((index, default, rank offset)) non-negative."""

    def rewrite(r: int, args: list[Any]) -> list[Any] | None:
        for index, default, offset in positions:
            while len(args) <= index:
                args.append(default)
            dims = args[index]
            if isinstance(dims, int):
                args[index] = norm_axis(dims, r + offset)
            elif isinstance(dims, (list, tuple)) and dims:
                args[index] = [norm_axis(d, r + offset) for d in dims]
            else:
                return None  # no dims: all of them, the trailing one included
        return args

    return rewrite


def _append_size(r: int, args: list[Any]) -> list[Any]:
    return [args[0], [*args[1], 2], *args[2:]]


def _permute(r: int, args: list[Any]) -> list[Any]:
    return [args[0], [norm_axis(d, r) for d in args[1]] + [r]]


def _pad(r: int, args: list[Any]) -> list[Any] | None:
    if len(args) > 2 and args[2] != 0:
        return None  # a fill value v means v + 0i: per part
    return [args[0], [0, 0, *args[1]]]  # torch lists pads from the last dim backwards


def _same(r: int, args: list[Any]) -> list[Any]:
    return args


_LAYOUT: dict[Any, Callable[[int, list[Any]], list[Any] | None]] = {
    **dict.fromkeys([aten_.view.default, aten_.reshape.default, aten_._unsafe_view.default, aten_.view_copy.default,
                     aten_.expand.default, aten_.expand_copy.default], _append_size),
    **dict.fromkeys([aten_.permute.default, aten_.permute_copy.default], _permute),
    **dict.fromkeys([aten_.transpose.int, aten_.transpose_copy.int, aten_.swapaxes.default, aten_.swapdims.default],
                    _dims_at((1, 0, 0), (2, 0, 0))),
    **dict.fromkeys([aten_.unsqueeze.default, aten_.unsqueeze_copy.default], _dims_at((1, 0, 1))),
    **dict.fromkeys([aten_.squeeze.dim, aten_.squeeze.dims, aten_.squeeze_copy.dim, aten_.squeeze_copy.dims],
                    _dims_at((1, 0, 0))),
    **dict.fromkeys([aten_.slice.Tensor, aten_.slice_copy.Tensor, aten_.select.int, aten_.select_copy.int,
                     aten_.narrow.default, aten_.index_select.default, aten_.unbind.int, aten_.sym_size.int,
                     aten_.unflatten.int, aten_.flip.default, aten_.cat.default, aten_.concat.default,
                     aten_.cumsum.default], _dims_at((1, 0, 0))),
    **dict.fromkeys([aten_.sum.dim_IntList, aten_.mean.dim], _dims_at((1, None, 0))),
    **dict.fromkeys([aten_.split.Tensor, aten_.split_with_sizes.default, aten_.chunk.default], _dims_at((2, 0, 0))),
    aten_.roll.default: _dims_at((2, (), 0)),
    aten_.stack.default: _dims_at((1, 0, 1)),
    aten_.flatten.using_ints: _dims_at((1, 0, 0), (2, -1, 0)),
    aten_.movedim.int: _dims_at((1, 0, 0), (2, 0, 0)),
    aten_.movedim.intlist: _dims_at((1, 0, 0), (2, 0, 0)),
    aten_.repeat.default: lambda r, args: [args[0], [*args[1], 1]],
    aten_.constant_pad_nd.default: _pad,
    **dict.fromkeys([aten_.clone.default, aten_.contiguous.default, aten_.alias.default, aten_.detach.default,
                     aten_.lift_fresh_copy.default, aten_.index.Tensor, aten_._unsafe_index.Tensor,
                     aten_._assert_tensor_metadata.default, aten_.expand_as.default, aten_.view_as.default,
                     aten_.reshape_as.default, aten_.index_put.default, aten_._unsafe_index_put.default,
                     aten_.squeeze.default, aten_.squeeze_copy.default], _same),
    **dict.fromkeys([aten_.select_scatter.default, aten_.slice_scatter.default], _dims_at((2, 0, 0))),
}
# Linear in the values, which ops read part by part: a real float operand is a value with zero imaginary part
# (every ``_LAYOUT`` op is one too, run this way when a real float operand or a fill value needs it).
_PARTS = frozenset([
    aten_.sum.default, aten_.mean.default, aten_.t.default, aten_.numpy_T.default, aten_.mT.default,
    aten_.where.self, aten_.where.ScalarSelf, aten_.where.ScalarOther, aten_.masked_fill.Scalar,
    aten_.masked_fill.Tensor, aten_.scatter.src, aten_.scatter.value, aten_.scatter_add.default,
    aten_.gather.default, aten_.take_along_dim.default, aten_.tile.default, aten_.pad.default,
    aten_.repeat_interleave.self_int, aten_.diff.default, aten_.copy.default, aten_.fill.Scalar,
    aten_.full.default, aten_.full_like.default, aten_.zeros.default, aten_.zeros_like.default,
    aten_.new_zeros.default, aten_.new_full.default, aten_.scalar_tensor.default, aten_.empty.memory_format,
    aten_.empty_like.default, aten_.ones.default, aten_.ones_like.default, aten_.new_ones.default,
])
_REAL_ONLY = frozenset([aten_.ones.default, aten_.ones_like.default, aten_.new_ones.default])
# Products: linear in each of two complex operands.
_BILINEAR = frozenset([aten_.matmul.default, aten_.mm.default, aten_.bmm.default, aten_.mv.default,
                       aten_.dot.default, aten_.einsum.default, aten_.outer.default])


def lift_for(target: Any) -> Callable[[Ctx, Any, Any, Any], Any] | None:
    """The lift that runs ``target``'s real translator on complex values, or None when there is none."""
    if target in _LAYOUT:
        return _lift_layout
    if target in _PARTS or target in _BILINEAR:
        return _lift_parts
    return None
