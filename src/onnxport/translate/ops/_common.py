"""Helpers shared by several op families."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import onnx_ir as ir
import torch

from onnxport.translate.builder import Ctx, onnx_dtype

FLOAT_TYPES = frozenset(
    {ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16, ir.DataType.DOUBLE}
)


def rank(x: ir.Value) -> int:
    """The rank of ``x``; every FX-node value carries its shape."""
    if x.shape is None:
        raise ValueError(f"the rank of {x.name} is unknown")
    return len(x.shape)


def norm_axis(axis: int, r: int) -> int:
    """``axis`` in ``[0, r)``; rank-0 tensors accept 0 and -1."""
    return axis + max(r, 1) if axis < 0 else axis


def axes(ctx: Ctx, dims: int | Sequence[int], r: int | None = None) -> ir.Value:
    """A 1-D int64 constant of axes, normalised when the rank ``r`` is given."""
    dims = [dims] if isinstance(dims, int) else list(dims)
    if r is not None:
        dims = [norm_axis(d, r) for d in dims]
    return ctx.const(dims, ir.DataType.INT64)


def arg_meta(ctx: Ctx, index: int) -> Any:
    """``meta["val"]`` of the node's argument ``index`` (a FakeTensor), or the Python value itself."""
    arg = ctx.node.args[index] if ctx.node is not None and index < len(ctx.node.args) else None
    return arg.meta.get("val") if isinstance(arg, torch.fx.Node) else arg


def same_size(a: int | torch.SymInt, b: int | torch.SymInt) -> bool:
    """Whether two sizes from torch's metadata are the same int or the same symbolic expression (compared as
    written: asking torch to decide would add a guard)."""
    if isinstance(a, int) or isinstance(b, int):
        return isinstance(a, int) and isinstance(b, int) and a == b
    return a.node.expr == b.node.expr


def retype_outputs(ctx: Ctx, dtypes: dict[int, torch.dtype]) -> None:
    """Give outputs of the node being translated (index: dtype) the dtype eager gives them where torch's fake
    kernel records another: the driver types a translator's results from ``meta["val"]``. torch 2.10's fake
    ``_unique2``, ``unique_dim``, ``unique_consecutive`` and ``bincount`` give their integer results the input's
    dtype; later releases record eager's, and this changes nothing there. Nodes that read those outputs keep
    the dtypes torch traced them with."""
    val = ctx.node.meta.get("val")
    vals = list(val) if isinstance(val, (tuple, list)) else [val]
    if not any(isinstance(vals[i], torch.Tensor) and vals[i].dtype != d for i, d in dtypes.items()):
        return
    for i, dtype in dtypes.items():
        if isinstance(vals[i], torch.Tensor):
            vals[i] = vals[i].to(dtype)
    ctx.node.meta["val"] = type(val)(vals) if isinstance(val, (tuple, list)) else vals[0]


def compute_dtype(ctx: Ctx, *indices: int) -> ir.DataType:
    """The dtype torch promotes the node's arguments ``indices`` to (tensors and Python scalars)."""
    metas = [arg_meta(ctx, i) for i in indices]
    metas = [m for m in metas if m is not None]
    result = metas[0] if len(metas) == 1 and isinstance(metas[0], torch.Tensor) else None
    if result is not None:
        return onnx_dtype(result.dtype)
    dtype = metas[0] if len(metas) == 1 else torch.result_type(*metas[:2])
    for extra in metas[2:]:
        dtype = torch.promote_types(dtype, torch.result_type(extra, extra))
    return onnx_dtype(dtype if isinstance(dtype, torch.dtype) else torch.tensor(dtype).dtype)


def promote(ctx: Ctx, dtype: ir.DataType, *xs: Any) -> list[ir.Value]:
    """Each of ``xs`` (values or Python scalars) as a value of ``dtype``."""
    return [ctx.as_value(x, dtype=dtype) for x in xs]


# ``step(body ctx, iteration, carried values) -> (new values, go on?)`` of :func:`loop`.
LoopStep = Callable[[Ctx, ir.Value, list[ir.Value]], tuple[list[ir.Value], ir.Value | None]]


def loop(ctx: Ctx, name: str, trips: ir.Value | None, carried: Sequence[ir.Value], step: LoopStep, *,
         fixed_shapes: bool = True) -> list[ir.Value]:
    """An ONNX ``Loop`` over ``carried`` values: ``step(body, i, values) -> (new values, go on?)``, where
    ``go on`` is a bool scalar or None (run all ``trips``).

    ``i`` is the int64 iteration number (0, 1, ...); ``trips`` an int64 scalar bound or None. The body
    may read any value of the enclosing graph. With ``fixed_shapes`` the body sees each carried value with
    its initial shape (translators read ranks); otherwise shapes are left unknown. Returns the final values.
    """
    body_name = ctx.names.unique(name)
    iteration = _formal(ctx, f"{body_name}_i", ir.DataType.INT64, ir.Shape([]))
    cond_in = _formal(ctx, f"{body_name}_cond", ir.DataType.BOOL, ir.Shape([]))
    formals = [_formal(ctx, f"{body_name}_{k}", v.dtype, v.shape if fixed_shapes else None)
               for k, v in enumerate(carried)]
    body = ctx.child(body_name, [iteration, cond_in, *formals])
    body.node = ctx.node
    new, again = step(body, iteration, formals)
    if again is None:
        again = body.op.Identity(cond_in)
    graph = body.finish([again, *new])
    outs = ctx.op.Loop(trips, ctx.const(True, ir.DataType.BOOL), *carried, body=graph, _outputs=len(carried))
    outs = list(outs) if isinstance(outs, tuple) else [outs]
    for out, init in zip(outs, carried):
        out.dtype, out.shape = init.dtype, init.shape if fixed_shapes else None
    return outs


def _formal(ctx: Ctx, name: str, dtype: ir.DataType | None, shape: ir.Shape | None) -> ir.Value:
    value = ir.Value(name=ctx.names.unique(name))
    value.dtype = dtype
    value.shape = shape
    return value
