"""Which outputs of a captured program are row-wise in a group of dynamic dims (the batch, usually).

An output is *row-wise* along axis ``k`` when its row ``i`` along ``k`` depends on row ``i`` of the
inputs alone (and on the weights), never on other rows nor on how many rows there are: what a batch
means. Where every output of the program is row-wise (or does not depend on the rows at all), the
example's eager outputs, their rows cut or repeated as the inputs were, are what the captured program
computes on the example resized along that group, so verification checks such a set in onnxruntime
without running eager PyTorch again (on R3D-18 that saves a 0.2 s forward).

The walk goes over the program's ATen graph with a rule per op it knows, each a check that the op
cannot mix rows (a reduction or a softmax over other dims, a matmul that does not contract over them, a
view that keeps them a dim of their own); an output that has rows among its inputs must keep them as
exactly one dim. Any other op, an op that writes into its inputs, control flow, the group's size used
as a number (other than as a size of a new or reshaped tensor), or an output that drops the rows ends
the walk with ``None``, and verification runs eager PyTorch as for any set.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import sympy
import torch
from torch.export.graph_signature import InputKind, OutputKind

__all__ = ["row_axes"]

aten = torch.ops.aten
FREE = None  # a value that does not depend on the rows (weights, constants, sizes of other dims)
SIZE = "size"  # a SymInt equal to the group's size


class _Mixed(Exception):
    """Some value may depend on other rows, or on the number of rows."""


def row_axes(ep: torch.export.ExportedProgram, symbols: Sequence[Any]) -> list[int | None] | None:
    """Per user output of ``ep`` (its pytree leaves, in order), the axis holding the rows of ``symbols``
    (None for an output that does not depend on them); None when some output is not row-wise."""
    try:
        return _Walk(ep, {str(s) for s in symbols}).run()
    except Exception:  # noqa: BLE001 - _Mixed, or a graph the rules did not foresee: eager PyTorch runs instead
        return None


class _Walk:
    def __init__(self, ep: torch.export.ExportedProgram, symbols: set[str]):
        self.ep, self.symbols = ep, symbols
        self.state: dict[torch.fx.Node, Any] = {}

    def run(self) -> list[int | None]:
        signature = self.ep.graph_signature
        if any(s.kind != OutputKind.USER_OUTPUT for s in signature.output_specs):
            raise _Mixed  # buffers written: not a function of the inputs alone
        user_inputs = {s.arg.name for s in signature.input_specs if s.kind == InputKind.USER_INPUT}
        for node in self.ep.graph.nodes:
            if node.op == "placeholder":
                self.state[node] = self.axes(node) if node.name in user_inputs else FREE
            elif node.op == "call_function":
                self.state[node] = self._call(node)
            elif node.op == "output":
                leaves = [self.get(leaf) for leaf in node.args[0]]
                if len(leaves) != self.ep.call_spec.out_spec.num_leaves or any(v is SIZE for v in leaves):
                    raise _Mixed
                return leaves
            else:
                raise _Mixed
        raise _Mixed

    def get(self, arg: Any) -> Any:
        """The state of an argument: an axis, FREE, SIZE, or a list of them for a multi-output op."""
        return self.state.get(arg, FREE) if isinstance(arg, torch.fx.Node) else FREE

    def axes(self, node: torch.fx.Node) -> Any:
        """From the node's shapes: the axis of each tensor output that is the group's size."""
        val = node.meta.get("val")
        if isinstance(val, (tuple, list)):
            return [self._axis(v) for v in val]
        return self._axis(val)

    def _axis(self, val: Any) -> Any:
        if isinstance(val, torch.SymInt):
            return SIZE if self._is_rows(val) else FREE
        if not isinstance(val, torch.Tensor):
            return FREE
        found = [k for k, size in enumerate(val.shape) if self._is_rows(size)]
        if len(found) > 1:
            raise _Mixed
        return found[0] if found else FREE

    def _is_rows(self, size: Any) -> bool:
        """Whether a size is the group's; an expression of it (2 * batch, batch * heads) ends the walk."""
        expr = size.node.expr if isinstance(size, torch.SymInt) else None
        if expr is None or not {str(s) for s in expr.free_symbols} & self.symbols:
            return False
        if isinstance(expr, sympy.Symbol):
            return True
        raise _Mixed

    def _call(self, node: torch.fx.Node) -> Any:
        target = node.target
        if target is operator.getitem:
            held = self.get(node.args[0])
            if held is FREE:
                return FREE
            if not isinstance(held, list):
                raise _Mixed
            return held[node.args[1]]
        inputs = [self.get(a) for a in flat_args(node)]
        if not isinstance(target, torch._ops.OpOverload):  # size arithmetic (operator.mul, ...) or control flow
            if any(v is not FREE for v in inputs) or not isinstance(node.meta.get("val"), (int, torch.SymInt)):
                raise _Mixed
            return self.axes(node)
        if target is aten.sym_size.int:
            return self.axes(node)
        if target._schema.is_mutable or (SIZE in inputs and target not in _SIZED):
            raise _Mixed
        out = self.axes(node)
        if all(v is FREE for v in inputs):
            if any(v is not FREE for v in (out if isinstance(out, list) else [out])):
                raise _Mixed
            return out
        rule = _RULES.get(target) or (_broadcast if torch.Tag.pointwise in target.tags else None)
        if rule is None or not rule(self, node):
            raise _Mixed
        for axis, val in zip(out if isinstance(out, list) else [out], _out_vals(node)):
            if axis is FREE and isinstance(val, torch.Tensor) and val.numel() != 0:  # rows went in, none came out
                raise _Mixed
        return out

    def rows(self, arg: Any) -> int | None:
        """The row axis of a tensor argument, normalised to be >= 0 (None: FREE)."""
        axis = self.get(arg)
        return axis if isinstance(axis, int) else None

    def rank(self, arg: Any) -> int:
        return arg.meta["val"].dim()


def flat_args(node: torch.fx.Node) -> list[Any]:
    flat: list[Any] = []
    for a in (*node.args, *node.kwargs.values()):
        flat.extend(a if isinstance(a, (list, tuple)) else [a])
    return flat


def _out_vals(node: torch.fx.Node) -> list[Any]:
    val = node.meta.get("val")
    return list(val) if isinstance(val, (tuple, list)) else [val]


# -- the rules: each says whether the op keeps rows apart (the output axes come from the shapes) ------

Rule = Callable[[_Walk, torch.fx.Node], bool]


def _broadcast(walk: _Walk, node: torch.fx.Node) -> bool:
    """Elementwise with broadcasting: every row-wise input's axis lands on the output's row axis."""
    if not isinstance(node.meta.get("val"), torch.Tensor):
        return False
    rank = node.meta["val"].dim()
    landed = {rank - walk.rank(a) + walk.rows(a) for a in flat_args(node) if walk.rows(a) is not None}
    return landed == {walk.axes(node)}


def _args_free(walk: _Walk, node: torch.fx.Node, start: int) -> bool:
    """The arguments from ``start`` on have no rows (weights, options); a list of sizes may hold the
    group's size where the op makes or reshapes a tensor with it."""
    for arg in (*node.args[start:], *node.kwargs.values()):
        sizes = isinstance(arg, (list, tuple))
        allowed = (FREE, SIZE) if sizes and node.target in _SIZED else (FREE,)
        if any(walk.get(a) not in allowed for a in (arg if sizes else [arg])):
            return False
    return True


def _first_only(walk: _Walk, node: torch.fx.Node) -> bool:
    """Only the first argument has rows."""
    return walk.rows(node.args[0]) is not None and _args_free(walk, node, 1)


def _view(walk: _Walk, node: torch.fx.Node) -> bool:
    """A reshape keeps rows apart when the dims before the row axis hold as many elements as before."""
    if not _first_only(walk, node):
        return False
    before = node.args[0].meta["val"].shape[: walk.rows(node.args[0])]
    after = node.meta["val"].shape[: walk.axes(node)]
    return all(isinstance(d, int) for d in (*before, *after)) and math.prod(before) == math.prod(after)


def _batch_first(rank: int | None = None) -> Rule:
    """Convolutions, pools, norms over (N, C, ...) inputs of ``rank`` dims (the weight's for None): rows
    in N only (an unbatched input, one dim less, has channels first)."""

    def rule(walk: _Walk, node: torch.fx.Node) -> bool:
        batched = rank if rank is not None else walk.rank(node.args[1])
        return _first_only(walk, node) and walk.rows(node.args[0]) == 0 and walk.rank(node.args[0]) == batched

    return rule


def _norm_over_channels(walk: _Walk, node: torch.fx.Node) -> bool:
    """Batch, group and instance norms: rows in N of a batched (N, C, ...) input; batch norm in eval only."""
    if node.target in _TRAINING_FLAG:
        position = _TRAINING_FLAG[node.target]
        if (node.args[position] if len(node.args) > position else node.kwargs.get("training", True)) is not False:
            return False
    return _first_only(walk, node) and walk.rows(node.args[0]) == 0 and walk.rank(node.args[0]) >= 2


def _over_dims(position: int, *, last: bool = False) -> Rule:
    """A reduction or normalisation over the dims in argument ``position`` (the last ``len`` dims with
    ``last``): the row axis must not be one of them; none given (all of them) mixes rows."""

    def rule(walk: _Walk, node: torch.fx.Node) -> bool:
        if not _first_only(walk, node):
            return False
        dims = node.args[position] if len(node.args) > position else node.kwargs.get("dim")
        if dims is None or (isinstance(dims, (list, tuple)) and not dims):
            return False
        rank = walk.rank(node.args[0])
        if last:
            dims = range(rank - len(dims), rank)
        dims = [dims] if isinstance(dims, int) else list(dims)
        return walk.rows(node.args[0]) not in {d % max(rank, 1) for d in dims}

    return rule


def _dropout(walk: _Walk, node: torch.fx.Node) -> bool:
    train = node.args[2] if len(node.args) > 2 else node.kwargs.get("train", False)
    return train is False and _first_only(walk, node)


def _matmul(walk: _Walk, node: torch.fx.Node) -> bool:
    """``a @ b``: rows of a in its batch dims or its rows (not the contracted last dim), rows of b in its
    batch dims or its columns (not the contracted dim); both with rows only at the same batch position."""
    a, b = node.args[0], node.args[1]
    ra, rb = walk.rows(a), walk.rows(b)
    na, nb = walk.rank(a), walk.rank(b)
    if ra is not None and (na == 1 or ra == na - 1):
        return False
    if rb is not None and (nb == 1 or rb == nb - 2):
        return False
    if ra is not None and rb is not None and not (ra < na - 2 and rb < nb - 2 and na - ra == nb - rb):
        return False
    return all(walk.get(x) is FREE for x in flat_args(node)[2:])


def _linear(walk: _Walk, node: torch.fx.Node) -> bool:
    """``x @ w.T + b``: rows of x anywhere but the contracted last dim; weight and bias without rows."""
    return _first_only(walk, node) and walk.rows(node.args[0]) != walk.rank(node.args[0]) - 1


def _addmm(walk: _Walk, node: torch.fx.Node) -> bool:
    """``bias + a @ b`` on 2-D ``a``: rows in a's first dim only."""
    return walk.get(node.args[0]) is FREE and walk.rows(node.args[1]) == 0 and walk.get(node.args[2]) is FREE


def _attention(walk: _Walk, node: torch.fx.Node) -> bool:
    """Scaled dot-product attention: rows in the same leading (batch) dim of q, k, v and the mask."""
    q, k, v = node.args[:3]
    mask = node.args[3] if len(node.args) > 3 else node.kwargs.get("attn_mask")
    rank = walk.rank(q)
    axes = {walk.rows(x) for x in (q, k, v)}
    if len(axes) != 1 or None in axes or walk.rank(k) != rank or walk.rank(v) != rank:
        return False
    axis = axes.pop()
    if axis >= rank - 2:
        return False
    if isinstance(mask, torch.fx.Node) and walk.rows(mask) is not None:
        return rank - walk.rank(mask) + walk.rows(mask) == axis
    return True


def _concat(walk: _Walk, node: torch.fx.Node) -> bool:
    """cat/stack of tensors that all have rows at the same axis (along it, the size would not be the
    group's, which the shapes catch)."""
    axes = {walk.rows(t) for t in node.args[0]}
    return len(axes) == 1 and None not in axes


def _embedding(walk: _Walk, node: torch.fx.Node) -> bool:
    return walk.get(node.args[0]) is FREE and walk.rows(node.args[1]) is not None and all(
        walk.get(a) is FREE for a in flat_args(node)[2:])


def _filled(walk: _Walk, node: torch.fx.Node) -> bool:
    """A new or broadcast tensor, shaped by sizes or from its first argument: rows of that argument are
    kept, and one without rows gives the same values in every row."""
    return _args_free(walk, node, 0 if isinstance(node.args[0], (list, tuple)) else 1)


def _ops(*names: str) -> list[Any]:
    """The overloads named ``packet.overload`` that this torch has."""
    found = []
    for name in names:
        packet, _, overload = name.partition(".")
        op = getattr(getattr(aten, packet, None), overload or "default", None)
        if op is not None:
            found.append(op)
    return found


def _table() -> dict[Any, Rule]:
    rules: dict[Any, Rule] = {}

    def add(rule: Rule, *names: str) -> None:
        rules.update(dict.fromkeys(_ops(*names), rule))

    # moves, casts and copies: every element keeps its row (the shapes say where the rows went; a
    # slice, narrow or split along them changes their size, which the shapes catch)
    add(_first_only, "clone", "contiguous", "alias", "detach", "_to_copy", "to.dtype", "to.dtype_layout",
        "to.device", "type_as", "lift_fresh_copy", "transpose.int", "permute", "t", "unsqueeze", "squeeze.dim",
        "squeeze.dims", "select.int", "slice.Tensor", "movedim.int", "split.Tensor", "split_with_sizes",
        "chunk", "unbind.int")
    add(_view, "view", "reshape", "_unsafe_view", "flatten.using_ints", "unflatten.int")
    add(_filled, "expand")
    for dims in (1, 2, 3):
        add(_batch_first(dims + 2), f"max_pool{dims}d", f"avg_pool{dims}d", f"adaptive_avg_pool{dims}d",
            f"adaptive_max_pool{dims}d", f"upsample_nearest{dims}d.vec", f"_adaptive_avg_pool{dims}d",
            f"max_pool{dims}d_with_indices")
    add(_batch_first(4), "upsample_bilinear2d.vec", "upsample_bicubic2d.vec")
    add(_batch_first(), "conv1d", "conv2d", "conv3d", "convolution", "_convolution", "conv_transpose1d",
        "conv_transpose2d.input", "conv_transpose3d.input")
    add(_norm_over_channels, "batch_norm", "_native_batch_norm_legit_no_training", "native_batch_norm",
        "_native_batch_norm_legit_functional", "group_norm", "native_group_norm", "instance_norm")
    add(_over_dims(1), "sum.dim_IntList", "mean.dim", "amax", "amin", "argmax", "argmin", "prod.dim_int",
        "var.correction", "std.correction", "logsumexp", "any.dim", "any.dims", "all.dim", "max.dim", "min.dim",
        "cumsum", "cumprod", "softmax.int", "_softmax", "log_softmax.int", "_log_softmax")
    add(_over_dims(2), "topk", "linalg_vector_norm")
    add(_over_dims(1, last=True), "layer_norm", "native_layer_norm", "rms_norm")
    add(_dropout, "dropout", "native_dropout", "feature_dropout")
    add(_matmul, "matmul", "bmm", "mm")
    add(_linear, "linear")
    add(_addmm, "addmm")
    add(_attention, "scaled_dot_product_attention")
    add(_concat, "cat", "stack")
    add(_embedding, "embedding")
    add(_filled, "full", "zeros", "ones", "empty.memory_format", "new_zeros", "new_ones", "new_full", "new_empty",
        "zeros_like", "ones_like", "full_like", "empty_like")
    return rules


# The batch norms whose ``training`` flag decides whether they mix rows (its position).
_TRAINING_FLAG = {op: 5 for op in _ops("batch_norm", "native_batch_norm", "_native_batch_norm_legit_functional")}
# Ops that may take the group's size as an argument: as a size of the tensor they make or reshape.
_SIZED = set(_ops("view", "reshape", "_unsafe_view", "expand", "unflatten.int", "full", "zeros", "ones",
                  "empty.memory_format", "new_zeros", "new_ones", "new_full", "new_empty"))
_RULES = _table()

