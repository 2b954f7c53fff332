"""Dynamic shapes on the input side: turning what the user said into torch.export's ``dynamic_shapes``,
and reading back what torch.export made of it (names, specialisations, sizes to verify with).

Specs everywhere are torch's own objects: a named ``Dim``, a derived ``Dim`` (``2*dx``), a hint
(``Dim.AUTO``/``DYNAMIC``/``STATIC``), an int, or None.
"""

from __future__ import annotations

import inspect
import math
import numbers
import re
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch.export import Dim
from torch.export.dynamic_shapes import _DerivedDim, _DimHint
from torch.utils import _pytree as pytree

from onnxport.capture._dynamic_ep import (
    check_specialization,
    declared_maximums,
    declared_minimums,
    dim_names,
    example_symbol_values,
    narrowed_dims,
    rename_expr,
    tensor_input_shapes,
    user_named_symbols,
)
from onnxport.capture import integrations
from onnxport.capture._dynamic_explain import explain_constraint_violation
from onnxport.errors import InvalidInputError

__all__ = [
    "auto_dynamic_shapes",
    "check_example_sizes",
    "check_specialization",
    "complete_dynamic_shapes",
    "declared_maximums",
    "declared_minimums",
    "dim_names",
    "dim_range",
    "dynamic_shapes_from_axes",
    "example_symbol_values",
    "explain_constraint_violation",
    "infer_dynamic_shapes",
    "input_dim_specs",
    "narrowed_dims",
    "output_dynamic_axes",
    "rename_expr",
    "small_dynamic_dims",
    "tensor_leaves",
    "tensor_input_shapes",
    "user_named_symbols",
]

_P = inspect.Parameter


# ---------------------------------------------------------------------------------------------
# Binding inputs to forward's parameters.


def _signature(model: Any) -> inspect.Signature:
    return inspect.signature(model.forward if isinstance(model, torch.nn.Module) else model)


def _slots(model: Any, args: Sequence[Any], kwargs: Mapping[str, Any] | None) -> list[tuple[str, Any, Any]]:
    """``(parameter, key, value)`` per argument, in the order of ``(args, kwargs)``.

    ``key`` indexes into a ``*args`` tuple or a ``**kwargs`` dict; it is None for named parameters.
    This is the order of ``tree_leaves((args, kwargs))``, which is the order of the graph's inputs.
    """
    sig = _signature(model)
    args, kwargs = tuple(args), dict(kwargs or {})
    try:
        sig.bind(*args, **kwargs)
    except TypeError as exc:
        raise InvalidInputError(
            f"the inputs do not match forward{sig}: {exc}",
            fix="pass args in the order of forward's parameters and keyword arguments as kwargs",
        ) from None
    slots: list[tuple[str, Any, Any]] = []
    rest = list(args)
    for p in sig.parameters.values():
        if not rest:
            break
        if p.kind in (_P.POSITIONAL_ONLY, _P.POSITIONAL_OR_KEYWORD):
            slots.append((p.name, None, rest.pop(0)))
        elif p.kind == _P.VAR_POSITIONAL:
            slots += [(p.name, j, a) for j, a in enumerate(rest)]
            rest = []
    var_kw = next((p.name for p in sig.parameters.values() if p.kind == _P.VAR_KEYWORD), None)
    for key, value in kwargs.items():
        named = key in sig.parameters and sig.parameters[key].kind != _P.VAR_KEYWORD
        slots.append((key, None, value) if named else (str(var_kw), key, value))
    return slots


def _kinds(model: Any) -> dict[str, Any]:
    return {p.name: p.kind for p in _signature(model).parameters.values()}


def _assemble(model: Any, slots: list[tuple[str, Any, Any]], specs: list[Any]) -> dict[str, Any]:
    """Per-slot specs -> torch's dict form, in signature order (``*args`` as a tuple, ``**kwargs`` a dict)."""
    kinds, out = _kinds(model), {}
    for (name, key, _), spec in zip(slots, specs):
        if kinds.get(name) == _P.VAR_POSITIONAL:
            out[name] = (*out.get(name, ()), spec)
        elif kinds.get(name) == _P.VAR_KEYWORD:
            out.setdefault(name, {})[key] = spec
        else:
            out[name] = spec
    order = list(kinds)
    return {name: out[name] for name in sorted(out, key=order.index)}


def _label(name: str, path: tuple) -> str:
    """``inputs`` + ``['ids']`` -> ``inputs_ids``: a readable identifier for a nested leaf."""
    parts = [name] + [str(getattr(k, "key", getattr(k, "idx", getattr(k, "name", k)))) for k in path]
    text = re.sub(r"\W", "_", "_".join(parts))
    return text if text.isidentifier() else f"_{text}"


def tensor_leaves(model: Any, args: Sequence[Any], kwargs: Mapping[str, Any] | None) -> list[tuple[int, str, torch.Tensor]]:
    """``(slot index, label, tensor)`` for every tensor input, labelled by forward's parameter names."""
    return _tensor_leaves(_slots(model, args, kwargs))


def _tensor_leaves(slots: list[tuple[str, Any, Any]]) -> list[tuple[int, str, torch.Tensor]]:
    """``(slot index, label, tensor)`` for every tensor leaf, in graph-input order."""
    found = []
    for i, (name, key, value) in enumerate(slots):
        base = name if key is None else _label(name, (key,))
        for path, leaf in pytree.tree_flatten_with_path(value)[0]:
            if isinstance(leaf, torch.Tensor):
                found.append((i, _label(base, path), leaf))
    return found


def _spec_tree(value: Any, leaf_spec: Any) -> Any:
    """A spec shaped like ``value``: ``leaf_spec(tensor)`` at tensors, None elsewhere."""
    if isinstance(value, torch.Tensor):
        return leaf_spec(value)
    return pytree.tree_map(lambda x: leaf_spec(x) if isinstance(x, torch.Tensor) else None, _spec_view(value))


def _spec_view(value: Any) -> Any:
    """``value`` as torch.export reads a spec for it: a registered non-builtin pytree node (a KV cache, a
    model output) as the list of its children, recursively; containers and leaves as they are."""
    kind = pytree._get_node_type(value)
    node = pytree.SUPPORTED_NODES.get(kind)
    if node is None:
        return value
    children, context = node.flatten_fn(value)
    children = [_spec_view(c) for c in children]
    return children if kind not in pytree.BUILTIN_TYPES else node.unflatten_fn(children, context)


# ---------------------------------------------------------------------------------------------
# 1. dynamic_axes -> dynamic_shapes


def dynamic_shapes_from_axes(
    model: Any,
    args: Sequence[Any],
    kwargs: Mapping[str, Any] | None,
    dynamic_axes: Mapping[str, Any],
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Translate torch.onnx's ``dynamic_axes`` into torch.export's ``dynamic_shapes`` (dict by parameter name).

    Keys are ONNX input names: ``input_names`` in the order of the flattened tensor inputs, else the
    parameter names (``inputs_ids`` for ``inputs["ids"]``). ``{0: "batch"}`` gives ``Dim("batch")``, one
    object per distinct name so that inputs naming the same axis share it; ``[0]`` gives ``Dim.DYNAMIC``.
    A Dim whose axis name is not an identifier is renamed and keeps the name in ``_onnx_name``, which
    :func:`dim_names` uses. Keys naming outputs are skipped (see :func:`output_dynamic_axes`); with
    ``output_names`` given, keys naming neither an input nor an output raise ``InvalidInputError``.
    """
    slots = _slots(model, args, kwargs)
    leaves = _tensor_leaves(slots)
    names = _onnx_input_names(leaves, input_names)
    unknown = sorted(str(k) for k in dynamic_axes if k not in names and output_names is not None
                     and k not in output_names)
    if unknown:
        raise InvalidInputError(
            f"dynamic_axes names {', '.join(unknown)}, which is neither an input nor an output; "
            f"inputs are {', '.join(names) or '(none)'}, outputs are {', '.join(output_names or []) or '(none)'}",
            fix="key dynamic_axes by the ONNX names of inputs (input_names, else forward's parameter names) and outputs",
        )
    dims: dict[str, Dim] = {}
    per_leaf = [_axes_to_spec(dynamic_axes.get(n), n, leaf, dims) for n, (_, _, leaf) in zip(names, leaves)]
    by_leaf = {id(leaf): spec for (_, _, leaf), spec in zip(leaves, per_leaf)}
    specs = [_spec_tree(value, lambda t: by_leaf.get(id(t))) for _, _, value in slots]
    return _assemble(model, slots, specs)


def output_dynamic_axes(
    model: Any,
    args: Sequence[Any],
    kwargs: Mapping[str, Any] | None,
    dynamic_axes: Mapping[str, Any],
    input_names: Sequence[str] | None = None,
) -> dict[str, dict[int, str]]:
    """The entries of ``dynamic_axes`` that name outputs, as ``{output: {axis: dim name}}``.

    Unnamed axes (list form) are called ``<output>_dim<axis>``.
    """
    names = _onnx_input_names(_tensor_leaves(_slots(model, args, kwargs)), input_names)
    return {str(k): _axis_names(v, str(k)) for k, v in dynamic_axes.items() if k not in names}


def _onnx_input_names(leaves: list[tuple[int, str, torch.Tensor]], input_names: Sequence[str] | None) -> list[str]:
    given = list(input_names or [])[: len(leaves)]
    return given + [label for _, label, _ in leaves[len(given) :]]


def _axis_names(axes: Any, owner: str) -> dict[int, str]:
    if isinstance(axes, Mapping):
        return {int(a): str(n) for a, n in axes.items()}
    if isinstance(axes, (list, tuple)):
        return {int(a): f"{owner}_dim{int(a)}" for a in axes}
    raise InvalidInputError(
        f"dynamic_axes[{owner!r}] is a {type(axes).__name__}",
        fix='give a dict {axis: "name"} or a list of axes, e.g. {"x": {0: "batch"}} or {"x": [0]}',
    )


def _axes_to_spec(axes: Any, owner: str, leaf: torch.Tensor, dims: dict[str, Dim]) -> dict[int, Any] | None:
    if axes is None:
        return None
    named = isinstance(axes, Mapping)
    spec: dict[int, Any] = {}
    for axis, name in _axis_names(axes, owner).items():
        if not -leaf.dim() <= axis < leaf.dim():
            raise InvalidInputError(
                f"dynamic_axes[{owner!r}] names axis {axis}, but {owner} has {leaf.dim()} dims",
                fix=f"use axes 0..{leaf.dim() - 1}",
            )
        spec[axis % leaf.dim()] = _named_dim(name, dims) if named else Dim.DYNAMIC
    return spec


def _named_dim(name: str, dims: dict[str, Dim]) -> Dim:
    if name not in dims:
        ident = re.sub(r"\W", "_", name)
        dim = Dim(ident if ident.isidentifier() else f"_{ident}")
        dim._onnx_name = name  # type: ignore[attr-defined]  # Dim names must be identifiers; ONNX's need not
        dims[name] = dim
    return dims[name]


# ---------------------------------------------------------------------------------------------
# 2. dynamic_shapes from several input sets, and "auto"


def _as_set(entry: Any) -> tuple[tuple, dict[str, Any]]:
    if isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], tuple) and isinstance(entry[1], dict):
        return entry[0], dict(entry[1])
    if isinstance(entry, (tuple, list)):
        return tuple(entry), {}
    return (entry,), {}


def infer_dynamic_shapes(input_sets: Sequence[Any], model: Any = None) -> Any:
    """``dynamic_shapes`` from two or more example input sets (each an args tuple, or ``(args, kwargs)``).

    A dim whose size differs across the sets becomes a ``Dim`` named ``<arg>_dim<k>`` after the first
    place it appears; dims whose sizes agree in every set share that Dim (so give independent dims
    different sizes). Without ``model`` the result is a tuple by position (args only), with it a dict
    by parameter name. Tensors without a varying dim and non-tensor leaves get None.
    """
    sets = [_as_set(s) for s in input_sets]
    if len(sets) < 2:
        raise InvalidInputError(
            f"infer_dynamic_shapes needs two or more input sets, got {len(sets)}",
            fix="pass example inputs at two different sizes, e.g. [(torch.randn(2, 8),), (torch.randn(3, 8),)]",
        )
    if model is None and any(kw for _, kw in sets):
        raise InvalidInputError("input sets with keyword arguments need model=", fix="pass model= as well")
    slot_sets = [_slots(model, a, k) if model is not None else [(f"arg{i}", None, v) for i, v in enumerate(a)]
                 for a, k in sets]
    first = slot_sets[0]
    for j, other in enumerate(slot_sets[1:], start=1):
        if [(n, k) for n, k, _ in other] != [(n, k) for n, k, _ in first]:
            raise InvalidInputError(
                f"input set {j} passes {[n for n, _, _ in other]}, input set 0 passes {[n for n, _, _ in first]}",
                fix="give every input set the same arguments",
            )
    shared: dict[tuple[int, ...], Dim] = {}
    specs = [_infer_slot(i, first, slot_sets, shared) for i in range(len(first))]
    if model is None:
        return tuple(specs)
    return _assemble(model, first, specs)


def _infer_slot(i: int, first: list, slot_sets: list[list], shared: dict[tuple[int, ...], Dim]) -> Any:
    name, key, value = first[i]
    base = name if key is None else _label(name, (key,))
    flat0, tree0 = pytree.tree_flatten_with_path(value)
    columns = []
    for j, slots in enumerate(slot_sets):
        flat, tree = pytree.tree_flatten_with_path(slots[i][2])
        if tree != tree0:
            raise InvalidInputError(
                f"input {base} has a different structure in input set {j} than in input set 0",
                fix="give every input set the same nesting of lists, tuples and dicts",
            )
        columns.append([leaf for _, leaf in flat])
    leaf_specs = []
    for n, (path, leaf) in enumerate(flat0):
        leaf_specs.append(_infer_leaf(_label(base, path), [col[n] for col in columns], shared))
    return pytree.tree_unflatten(leaf_specs, tree0)


def _infer_leaf(label: str, values: list[Any], shared: dict[tuple[int, ...], Dim]) -> dict[int, Dim] | None:
    if not any(isinstance(v, torch.Tensor) for v in values):
        return None
    shapes = [tuple(v.shape) if isinstance(v, torch.Tensor) else None for v in values]
    if any(s is None or len(s) != len(shapes[0]) for s in shapes):
        raise InvalidInputError(
            f"input {label} has shapes {shapes} across the input sets: a tensor in every set, of one rank",
            fix="give each input the same number of dims in every input set",
        )
    spec: dict[int, Dim] = {}
    for k, sizes in enumerate(zip(*shapes)):
        if len(set(sizes)) > 1:
            spec[k] = shared.setdefault(sizes, Dim(f"{label}_dim{k}"))
    # Only varying dims are listed: a dict leaves the others static without torch's None deprecation warning.
    return spec or None


def auto_dynamic_shapes(model: Any, args: Sequence[Any], kwargs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``dynamic_shapes`` with ``Dim.AUTO`` at every dim of every tensor input (what ``"auto"`` means)."""
    slots = _slots(model, args, kwargs)
    auto = lambda t: tuple(Dim.AUTO for _ in t.shape) if t.dim() else None  # noqa: E731
    specs = [integrations.auto_spec(value) or _spec_tree(value, auto) for _, _, value in slots]
    return _assemble(model, slots, specs)


# ---------------------------------------------------------------------------------------------
# 3. every accepted form -> one {dim: spec} per tensor input


def input_dim_specs(
    model: Any, args: Sequence[Any], kwargs: Mapping[str, Any] | None, dynamic_shapes: Any
) -> list[dict[int, Any]]:
    """One ``{dim index: spec}`` per tensor leaf of ``tree_leaves((args, kwargs))``.

    Accepts what torch.export accepts: a dict by parameter name, a tuple/list by position over the
    bound arguments, nested specs for nested inputs, per tensor a ``{dim: spec}`` dict or a tuple/list
    of specs, and ``ShapesCollection``/``AdditionalInputs``. Dims left out are absent; an explicit None stays.
    """
    slots = _slots(model, args, kwargs)
    if dynamic_shapes is not None and hasattr(dynamic_shapes, "dynamic_shapes"):
        dynamic_shapes = dynamic_shapes.dynamic_shapes(model, tuple(args), dict(kwargs or {}))
    top = _per_parameter(model, slots, dynamic_shapes)
    out: list[dict[int, Any]] = []
    for name, key, value in slots:
        spec = top.get(name)
        if key is not None and spec is not None:
            spec = spec[key] if not isinstance(spec, Mapping) or key in spec else None
        where = name if key is None else f"{name}[{key!r}]"
        out += _leaf_specs(value, spec, where)
    return out


def complete_dynamic_shapes(model: Any, args: Sequence[Any], kwargs: Mapping[str, Any] | None, dynamic_shapes: Any) -> Any:
    """A dict ``dynamic_shapes`` with ``None`` for every passed argument it leaves out.

    torch.export wants a key for every argument, even a ``use_cache=False``; a user naming only the
    tensors that vary means the others are static.
    A malformed spec, or one the example does not satisfy (an int other than its size, a ``Dim`` whose range
    leaves it out), is an ``InvalidInputError`` here, before capture.
    """
    if dynamic_shapes is not None:
        check_example_sizes(model, args, kwargs, input_dim_specs(model, args, kwargs, dynamic_shapes))
    if not isinstance(dynamic_shapes, Mapping) or not dynamic_shapes:
        return dynamic_shapes
    names = dict.fromkeys(name for name, _, _ in _slots(model, args, kwargs))
    if set(map(str, dynamic_shapes)) - set(names) or set(names) <= set(map(str, dynamic_shapes)):
        return dynamic_shapes  # unknown keys are reported by input_dim_specs; complete ones need nothing
    return {name: dynamic_shapes.get(name) for name in names}


def check_example_sizes(model: Any, args: Sequence[Any], kwargs: Mapping[str, Any] | None,
                        specs: list[dict[int, Any]]) -> None:
    """Each spec the example satisfies: an int is its size, a ``Dim`` with a range holds its size (sizes 0 and 1
    below the range are left to size-oblivious capture)."""
    for (_, label, tensor), spec in zip(_tensor_leaves(_slots(model, args, kwargs)), specs):
        for k, hint in spec.items():
            size = tensor.shape[k]
            if isinstance(hint, int) and hint != size:
                raise InvalidInputError(
                    f"dynamic_shapes gives {label}.shape[{k}] the static size {hint}, but the example's is {size}",
                    fix=f"give {size} (or None: static at the example's size), or Dim('n') to make it dynamic",
                )
            if isinstance(hint, Dim) and not isinstance(hint, _DerivedDim):
                low, high = int(hint.min), hint.max if math.isfinite(float(hint.max)) else None
                if (size < low and size > 1) or (high is not None and size > high):
                    widened = f"min={min(low, size)}" + (f", max={max(int(high), size)}" if high is not None else "")
                    raise InvalidInputError(
                        f"dynamic_shapes gives {label}.shape[{k}] the Dim {hint.__name__!r} of range "
                        f"{dim_range(hint)}, but the example's size is {size}, outside it",
                        fix=f"give an example of a size in {dim_range(hint)}, or widen the range: "
                        f"Dim({hint.__name__!r}, {widened})",
                    )


def dim_range(dim: Dim) -> str:
    """``[2, 64]``, or ``[2, inf)`` for a Dim without a maximum."""
    high = float(dim.max)
    return f"[{int(dim.min)}, {int(high)}]" if math.isfinite(high) else f"[{int(dim.min)}, inf)"


def small_dynamic_dims(model: Any, args: Sequence[Any], kwargs: Mapping[str, Any] | None, specs: list[dict[int, Any]]) -> list[str]:
    """The dims asked to be dynamic (a ``Dim`` or a hint other than STATIC) whose example size is 0 or 1,
    as ``name.shape[i]``: torch.export would specialise them unless it captures size-obliviously."""
    leaves = _tensor_leaves(_slots(model, args, kwargs))
    small = []
    for (_, label, tensor), spec in zip(leaves, specs):
        for dim, hint in spec.items():
            dynamic_hint = isinstance(hint, Dim) or (isinstance(hint, _DimHint) and hint != Dim.STATIC)
            if dynamic_hint and tensor.shape[dim] <= 1:
                small.append(f"{label}.shape[{dim}]")
    return small


def _per_parameter(model: Any, slots: list, dynamic_shapes: Any) -> dict[str, Any]:
    order = list(_kinds(model))  # torch's tuple form follows the signature, not the order kwargs were given
    names = sorted(dict.fromkeys(name for name, _, _ in slots), key=order.index)
    if dynamic_shapes is None:
        return {}
    if isinstance(dynamic_shapes, Mapping):
        extra = sorted(set(map(str, dynamic_shapes)) - set(names))
        if extra:
            raise InvalidInputError(
                f"dynamic_shapes names {', '.join(extra)}, which forward does not receive; it receives {', '.join(names)}",
                fix="key dynamic_shapes by the names of forward's parameters that are passed",
            )
        return dict(dynamic_shapes)
    if isinstance(dynamic_shapes, (tuple, list)) and len(dynamic_shapes) == len(names):
        return dict(zip(names, dynamic_shapes))
    raise InvalidInputError(
        f"dynamic_shapes is a {type(dynamic_shapes).__name__} that does not match the {len(names)} inputs {names}",
        fix="give a dict keyed by parameter name, or a tuple with one entry per argument",
    )


def _leaf_specs(value: Any, spec: Any, where: str) -> list[dict[int, Any]]:
    value = _spec_view(value)
    if isinstance(value, torch.Tensor):
        return [_tensor_spec(value, spec, where)]
    if spec is None or isinstance(spec, (int, _DimHint)):
        return [{} for leaf in pytree.tree_leaves(value) if isinstance(leaf, torch.Tensor)]
    if isinstance(value, (list, tuple)) and isinstance(spec, (list, tuple)) and len(spec) == len(value):
        return [d for i, (v, s) in enumerate(zip(value, spec)) for d in _leaf_specs(v, s, f"{where}[{i}]")]
    if isinstance(value, Mapping) and isinstance(spec, Mapping) and set(spec) <= set(value):
        return [d for k, v in value.items() for d in _leaf_specs(v, spec.get(k), f"{where}[{k!r}]")]
    raise InvalidInputError(
        f"dynamic_shapes for {where} is {spec!r}, which does not match the input's structure "
        f"({type(value).__name__})",
        fix="mirror the input's nesting: a list/tuple of specs for a list/tuple, a dict for a dict",
    )


def _tensor_spec(value: torch.Tensor, spec: Any, where: str) -> dict[int, Any]:
    if spec is None:
        return {}
    if isinstance(spec, Mapping):
        keys = [k for k in spec if not isinstance(k, numbers.Integral) or isinstance(k, bool)]
        if keys:
            raise InvalidInputError(
                f"dynamic_shapes for {where} has the key {keys[0]!r}: the keys of a tensor's spec are dim indices",
                fix=f"key it by dim, e.g. {{0: Dim('batch')}} (dims 0..{value.dim() - 1})",
            )
        items = {int(k): v for k, v in spec.items()}
    elif isinstance(spec, (tuple, list)) and len(spec) == value.dim():
        items = dict(enumerate(spec))
    else:
        raise InvalidInputError(
            f"dynamic_shapes for {where} is {spec!r}, but {where} is a tensor of shape {tuple(value.shape)}",
            fix=f"give {{dim: spec}} or a tuple of {value.dim()} specs, e.g. {{0: Dim('batch')}}; " + _DIM_FORMS,
        )
    bad = [k for k in items if not 0 <= k < value.dim()]
    if bad:
        raise InvalidInputError(
            f"dynamic_shapes for {where} names dims {bad}, but it has {value.dim()} dims",
            fix=f"use dims 0..{value.dim() - 1}",
        )
    for k, hint in items.items():
        if not (hint is None or isinstance(hint, (Dim, _DimHint)) or (type(hint) is not bool and isinstance(hint, int))):
            named = f"; for a dim named {hint!r} write Dim({hint!r})" if isinstance(hint, str) else ""
            raise InvalidInputError(
                f"dynamic_shapes for {where}.shape[{k}] is {hint!r} ({type(hint).__name__}), which is not a dim spec",
                fix=_DIM_FORMS + named,
            )
    return items


_DIM_FORMS = (
    "a dim spec is Dim('batch') (dynamic, named; one Dim on several inputs makes them equal), Dim('n', min=1, "
    "max=64), Dim.DYNAMIC or Dim.AUTO (dynamic), Dim.STATIC, None or an int (static at the example's size)"
)
