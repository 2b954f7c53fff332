"""Dynamic shapes read back from an ExportedProgram: ONNX names for torch's shape symbols,
dims that were asked dynamic but specialised, and input sets at other sizes for verification.

The public functions are re-exported by :mod:`onnxport.capture.dynamic`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import sympy
import torch
from torch.export import Dim
from torch.export.dynamic_shapes import _DerivedDim, _DimHint, _DimHintType, _StaticDim
from torch.export.graph_signature import InputKind
from torch.utils._sympy.numbers import IntInfinity, NegativeIntInfinity

from onnxport.errors import CaptureError, InvalidInputError

__all__ = ["SampleSets", "check_specialization", "dim_names", "rename_expr", "sample_inputs"]


# ---------------------------------------------------------------------------------------------
# 4. symbol names


def _tensor_placeholders(ep: torch.export.ExportedProgram) -> list[tuple[str, Any]]:
    """``(name, fake tensor)`` of the user's tensor inputs, in order."""
    nodes = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    found = []
    for spec in ep.graph_signature.input_specs:
        if spec.kind == InputKind.USER_INPUT and spec.arg.name in nodes:
            val = nodes[spec.arg.name].meta.get("val")
            if isinstance(val, torch.Tensor):
                found.append((spec.arg.name, val))
    return found


def _expr(size: Any) -> sympy.Expr | None:
    """The symbolic expression of a size; None for a static one (a SymInt may hold a constant)."""
    expr = size.node.expr if isinstance(size, torch.SymInt) else None
    return expr if expr is not None and expr.free_symbols else None


def _is_named(spec: Any) -> bool:
    return isinstance(spec, Dim) and not isinstance(spec, (_StaticDim, _DerivedDim))


def dim_names(ep: torch.export.ExportedProgram, specs: list[dict[int, Any]], input_names: Sequence[str] | None = None
              ) -> dict[str, str]:
    """Map each shape symbol of the graph's inputs (``"s17"``) to an ONNX dim name.

    The user's Dim name where one was given (the root's name for the root of a derived Dim),
    else ``<input>_dim<k>`` of the first input dim where the symbol appears. Names stay unique.
    """
    phs = _tensor_placeholders(ep)
    onnx = list(input_names or [])[: len(phs)] + [n for n, _ in phs][len(input_names or []) :]
    names: dict[str, str] = {}
    taken: set[str] = set()

    def assign(symbol: Any, name: str) -> None:
        if str(symbol) in names:
            return
        unique, n = name, 2
        while unique in taken:
            unique, n = f"{name}_{n}", n + 1
        names[str(symbol)] = unique
        taken.add(unique)

    for i, (_, val) in enumerate(phs):  # the user's names first, wherever they appear
        for k, size in enumerate(val.shape):
            expr, spec = _expr(size), (specs[i] if i < len(specs) else {}).get(k)
            if expr is None:
                continue
            if _is_named(spec) and isinstance(expr, sympy.Symbol):
                assign(expr, getattr(spec, "_onnx_name", spec.__name__))
            elif isinstance(spec, _DerivedDim) and len(expr.free_symbols) == 1:
                root = spec.root
                assign(next(iter(expr.free_symbols)), getattr(root, "_onnx_name", root.__name__))
    for i, (_, val) in enumerate(phs):
        for k, size in enumerate(val.shape):
            expr = _expr(size)
            for symbol in sorted(expr.free_symbols, key=str) if expr is not None else ():
                assign(symbol, f"{onnx[i]}_dim{k}")
    return names


def rename_expr(expr: Any, names: Mapping[str, str]) -> str:
    """``"2*s17"`` -> ``"2*batch"``: torch's symbols replaced by ONNX dim names, printed by sympy."""
    if not isinstance(expr, sympy.Basic):
        from sympy.parsing.sympy_parser import parse_expr
        from torch.utils._sympy import functions

        local = {n: getattr(functions, n) for n in dir(functions) if n[:1].isupper()}
        local.update({w: sympy.Symbol(w, integer=True) for w in re.findall(r"[A-Za-z_]\w*", str(expr))
                      if w not in local})
        expr = parse_expr(str(expr), local_dict=local, evaluate=False)
    subs = {s: sympy.Symbol(names[str(s)], integer=True) for s in expr.free_symbols if str(s) in names}
    return str(expr.xreplace(subs)) if subs else str(expr)


# ---------------------------------------------------------------------------------------------
# 5. specialisations


def _asked_dynamic(spec: Any) -> str | None:
    if isinstance(spec, _DimHint):
        return {_DimHintType.AUTO: "Dim.AUTO", _DimHintType.DYNAMIC: "Dim.DYNAMIC"}.get(spec.type)
    if isinstance(spec, _DerivedDim) or _is_named(spec):
        return f"Dim({spec.__name__!r})"
    return None


def check_specialization(
    ep: torch.export.ExportedProgram, specs: list[dict[int, Any]], input_names: Sequence[str] | None = None
) -> list[str]:
    """Warnings for dims asked dynamic with ``Dim.AUTO`` that torch.export made constant.

    The same for a named Dim or ``Dim.DYNAMIC`` raises ``CaptureError`` (torch usually raises first).
    """
    phs = _tensor_placeholders(ep)
    onnx = list(input_names or [])[: len(phs)] + [n for n, _ in phs][len(input_names or []) :]
    warnings, hard = [], []
    for i, (_, val) in enumerate(phs):
        for k, size in enumerate(val.shape):
            asked = _asked_dynamic((specs[i] if i < len(specs) else {}).get(k))
            if asked is None or _expr(size) is not None:
                continue
            text = f"{onnx[i]}.shape[{k}] was given {asked} but torch.export fixed it to {int(size)}: "
            if int(size) in (0, 1):
                text += ("torch.export specialises sizes 0 and 1; give an example with size >= 2 "
                         "(or a Dim with min=0 or min=1 and such an example) to keep it dynamic")
            else:
                text += ("a guard in the model fixed it (e.g. a comparison or a view that needs that exact size); "
                         f"mark it static ({int(size)} or Dim.STATIC), or change the model so it accepts other sizes")
            (warnings if asked == "Dim.AUTO" else hard).append(text)
    if hard:
        raise CaptureError(
            "dims asked dynamic were specialised:\n  " + "\n  ".join(hard),
            fix="use Dim.AUTO to let torch.export decide, or give those dims as ints",
        )
    return warnings


# ---------------------------------------------------------------------------------------------
# 7. inputs at other sizes


class SampleSets(list):
    """Input sets (flat, like the example); ``descriptions[i]`` says the sizes of set i (``batch=3, seq=5``)."""

    descriptions: list[str]


def sample_inputs(
    ep: torch.export.ExportedProgram,
    example_flat_inputs: Sequence[Any],
    specs: list[dict[int, Any]],
    count: int = 3,
    seed: int = 0,
    input_names: Sequence[str] | None = None,
) -> SampleSets:
    """Up to ``count`` input sets at sizes other than the example's, valid for ``ep``.

    Each root symbol takes a value near its example value (-1, +1, +3, ...) within
    ``ep.range_constraints`` (which hold the user's min/max), avoiding 0 and 1; shared symbols take
    one value and derived dims are computed from their roots. Non-tensor leaves are passed through.
    Returns an empty list when no input dim is symbolic.
    """
    phs = _tensor_placeholders(ep)
    flat = list(example_flat_inputs)
    where = [i for i, v in enumerate(flat) if isinstance(v, torch.Tensor)]
    if len(where) != len(phs):
        raise InvalidInputError(
            f"sample_inputs got {len(where)} example tensors for a program with {len(phs)} tensor inputs",
            fix="pass tree_leaves((args, kwargs)) of the inputs the program was exported with",
        )
    exprs = [[_expr(s) for s in val.shape] for _, val in phs]
    # Roots in order of first appearance (then by name within one dim): the descriptions read like the inputs.
    roots = list(dict.fromkeys(s for row in exprs for e in row if e is not None
                               for s in sorted(e.free_symbols, key=str)))
    result = SampleSets()
    result.descriptions = []
    if not roots:
        return result
    example = _root_values(roots, phs, [flat[i] for i in where], exprs)
    bounds = {r: _bounds(ep, r) for r in roots}
    names = dim_names(ep, specs, input_names)
    gen = torch.Generator().manual_seed(seed)
    seen = {tuple(example[r] for r in roots)}
    for attempt in range(8 * count):
        if len(result) == count:
            break
        values = {r: _pick(example[r], bounds[r], _OFFSETS[(attempt + n) % len(_OFFSETS)]) for n, r in enumerate(roots)}
        key = tuple(values[r] for r in roots)
        if key in seen or not _fits(ep, values):
            continue
        seen.add(key)
        new = list(flat)
        for pos, (_, val), row in zip(where, phs, exprs):
            shape = [int(e.xreplace({r: sympy.Integer(values[r]) for r in e.free_symbols})) if e is not None else int(s)
                     for e, s in zip(row, val.shape)]
            new[pos] = _like(flat[pos], shape, gen)
        result.append(new)
        result.descriptions.append(", ".join(f"{names.get(str(r), str(r))}={values[r]}" for r in roots))
    return result


_OFFSETS = (-1, 1, 3, 2, -2, 5, 4, 7, -3, 9)


def _root_values(roots: list, phs: list, tensors: list[torch.Tensor], exprs: list[list[Any]]) -> dict[Any, int]:
    """The example's value of each symbol: torch's own record, else solved from a dim that uses it alone."""
    values: dict[Any, int] = {}
    for (_, val), tensor, row in zip(phs, tensors, exprs):
        for size, expr, actual in zip(val.shape, row, tensor.shape):
            if expr is None:
                continue
            env = getattr(size.node, "shape_env", None)
            known = getattr(env, "backed_var_to_val", None)  # var_to_val before torch 2.10; deprecated since
            known = known if known is not None else getattr(env, "var_to_val", {})
            for symbol in expr.free_symbols:
                if symbol in known:
                    values.setdefault(symbol, int(known[symbol]))
            if len(expr.free_symbols) == 1:
                symbol = next(iter(expr.free_symbols))
                if symbol not in values:
                    solved = sympy.solve(sympy.Eq(expr, actual), symbol)
                    if solved and solved[0].is_integer:
                        values[symbol] = int(solved[0])
    missing = [str(r) for r in roots if r not in values]
    if missing:
        raise InvalidInputError(f"cannot tell the example's value of {', '.join(missing)}",
                                fix="pass the example inputs the program was exported with")
    return values


def _bounds(ep: torch.export.ExportedProgram, symbol: Any) -> tuple[int, int]:
    vr = ep.range_constraints.get(symbol)
    if vr is None:
        return 0, 1 << 30
    return _finite_or(vr.lower, 0), _finite_or(vr.upper, 1 << 30)


def _finite_or(value: Any, default: int) -> int:
    # torch's int_oo is a sympy object whose is_finite sends sympy into float arithmetic; compare instead
    if isinstance(value, (IntInfinity, NegativeIntInfinity)) or value in (sympy.oo, -sympy.oo):
        return default
    return int(value)


def _pick(example: int, bounds: tuple[int, int], offset: int) -> int:
    lower, upper = bounds
    if upper >= 2:  # sizes 0 and 1 behave differently (broadcasting, empty tensors); only where forced
        lower = max(lower, 2)
    return min(max(example + offset, lower), upper)


def _fits(ep: torch.export.ExportedProgram, values: dict[Any, int]) -> bool:
    """Whether every range torch.export recorded (derived ones included) holds at ``values``."""
    for expr, vr in ep.range_constraints.items():
        if not expr.free_symbols <= set(values):
            continue
        value = expr.xreplace({s: sympy.Integer(values[s]) for s in expr.free_symbols})
        if not (vr.lower <= value <= vr.upper):
            return False
    return True


def _like(example: torch.Tensor, shape: list[int], gen: torch.Generator) -> torch.Tensor:
    """A tensor of ``shape`` and ``example``'s dtype; integers stay within the example's values."""
    dtype = example.dtype
    if dtype.is_floating_point or dtype.is_complex:
        out = torch.randn(shape, generator=gen, dtype=dtype)
    elif dtype == torch.bool:
        out = torch.randint(0, 2, shape, generator=gen).bool()
    else:
        low, high = (int(example.min()), int(example.max())) if example.numel() else (0, 0)
        out = torch.randint(low, high + 1, shape, generator=gen, dtype=torch.int64).to(dtype)
    return out.to(example.device)
