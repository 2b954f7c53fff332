"""Dynamic shapes read back from an ExportedProgram: ONNX names for torch's shape symbols,
dims that were asked dynamic but specialised, and input sets at other sizes for verification.

The public functions are re-exported by :mod:`onnxport.capture.dynamic`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import sympy
from torch.utils._sympy.numbers import IntInfinity
import torch
from torch.export import Dim
from torch.export.dynamic_shapes import _DerivedDim, _DimHint, _DimHintType, _StaticDim
from torch.export.graph_signature import InputKind

from onnxport.capture import integrations
from onnxport.errors import CaptureError, InvalidInputError

__all__ = [
    "check_specialization",
    "declared_maximums",
    "declared_minimums",
    "dim_names",
    "example_symbol_values",
    "rename_expr",
    "tensor_input_shapes",
    "user_named_symbols",
]


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

    for symbol, name in user_named_symbols(ep, specs).items():  # the user's names first, wherever they appear
        assign(symbol, name)
    for (_, val), conventional in zip(phs, integrations.conventional_dim_names(onnx)):  # then an LLM's
        for k, name in conventional.items():
            expr = _expr(val.shape[k]) if k < val.dim() else None
            if isinstance(expr, sympy.Symbol):
                assign(expr, name)
    for i, (_, val) in enumerate(phs):
        for k, size in enumerate(val.shape):
            expr = _expr(size)
            for symbol in sorted(expr.free_symbols, key=str) if expr is not None else ():
                assign(symbol, f"{onnx[i]}_dim{k}")
    return names


def user_named_symbols(ep: torch.export.ExportedProgram, specs: list[dict[int, Any]]) -> dict[str, str]:
    """``{symbol: name}`` for the shape symbols the user named with a ``Dim`` (a derived Dim names its root)."""
    named: dict[str, str] = {}
    for i, (_, val) in enumerate(_tensor_placeholders(ep)):
        for k, size in enumerate(val.shape):
            expr, spec = _expr(size), (specs[i] if i < len(specs) else {}).get(k)
            if expr is None:
                continue
            if _is_named(spec) and isinstance(expr, sympy.Symbol):
                named.setdefault(str(expr), getattr(spec, "_onnx_name", spec.__name__))
            elif isinstance(spec, _DerivedDim) and len(expr.free_symbols) == 1:
                root = spec.root
                named.setdefault(str(next(iter(expr.free_symbols))), getattr(root, "_onnx_name", root.__name__))
    return named


def _declared(ep: torch.export.ExportedProgram, specs: list[dict[int, Any]]) -> dict[str, list[Any]]:
    """``{symbol: the user's specs of the dims that hold it}`` for the symbols that every input dim holds
    alone, each given a named ``Dim`` or ``Dim.AUTO``/``DYNAMIC``; a symbol that some dim holds in an
    expression (a derived ``Dim``), or that a spec does not declare, is left out."""
    found: dict[str, list[Any]] = {}
    excluded: set[str] = set()
    for i, (_, val) in enumerate(_tensor_placeholders(ep)):
        for k, size in enumerate(val.shape):
            expr, spec = _expr(size), (specs[i] if i < len(specs) else {}).get(k)
            if expr is None:
                continue
            hint = isinstance(spec, _DimHint) and spec.type != _DimHintType.STATIC
            if isinstance(expr, sympy.Symbol) and (_is_named(spec) or hint):
                found.setdefault(str(expr), []).append(spec)
            else:
                excluded.update(str(s) for s in expr.free_symbols)
    return {symbol: given for symbol, given in found.items() if symbol not in excluded}


def declared_minimums(ep: torch.export.ExportedProgram, specs: list[dict[int, Any]]) -> dict[str, int]:
    """``{symbol: the smallest size the user's specs allow}`` (see ``_declared``): a ``Dim``'s ``min`` (0 by
    default), that of ``Dim.AUTO``/``DYNAMIC`` (``Dim.DYNAMIC(min=2)``), else 0. torch.export's own lower bound
    is 2 for most of them (it takes sizes 0 and 1 apart)."""
    def lowest(spec: Any) -> int:
        return int(spec.min) if isinstance(getattr(spec, "min", None), int) else 0

    return {symbol: min(map(lowest, given)) for symbol, given in _declared(ep, specs).items()}


def declared_maximums(ep: torch.export.ExportedProgram, specs: list[dict[int, Any]]) -> dict[str, int | None]:
    """``{symbol: the largest size the user's specs allow}`` (see ``_declared``; None: no limit): the smallest
    ``max`` of a ``Dim`` (or of ``Dim.AUTO``/``DYNAMIC`` given one) that holds it."""
    def largest(spec: Any) -> int | None:
        bounded = isinstance(getattr(spec, "max", None), int) and spec.max < (1 << 62)
        return int(spec.max) if bounded else None

    return {symbol: min((m for m in map(largest, given) if m is not None), default=None)
            for symbol, given in _declared(ep, specs).items()}


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
            text += ("a guard in the model fixed it (e.g. a comparison or a view that needs that exact size; "
                     "sizes 0 and 1 are captured like any other, so the model itself asks for it); "
                     f"mark it static ({int(size)} or Dim.STATIC), or change the model so it accepts other sizes")
            (warnings if asked == "Dim.AUTO" else hard).append(text)
    if hard:
        raise CaptureError(
            "dims asked dynamic were specialised:\n  " + "\n  ".join(hard),
            fix="use Dim.AUTO to let torch.export decide, or give those dims as ints",
        )
    return warnings


def narrowed_dims(
    ep: torch.export.ExportedProgram, specs: list[dict[int, Any]], input_names: Sequence[str] | None = None
) -> list[str]:
    """``x.shape[0] (sizes 1 to 2)`` for each dim asked dynamic, its own symbol, whose range torch.export
    bounded above below what the spec allows (a ``Dim``'s ``max``, unbounded otherwise)."""
    phs = _tensor_placeholders(ep)
    onnx = list(input_names or [])[: len(phs)] + [n for n, _ in phs][len(input_names or []) :]
    found = []
    for i, (_, val) in enumerate(phs):
        for k, size in enumerate(val.shape):
            spec = (specs[i] if i < len(specs) else {}).get(k)
            expr = _expr(size)
            if _asked_dynamic(spec) is None or not isinstance(expr, sympy.Symbol):
                continue
            vr = ep.range_constraints.get(expr)
            upper = getattr(vr, "upper", None)
            # torch's int_oo: compared by type (its is_finite sends sympy into float arithmetic)
            if upper is None or isinstance(upper, IntInfinity) or upper == sympy.oo:
                continue
            allowed = getattr(spec, "max", None) if _is_named(spec) else None
            if not isinstance(allowed, int) or int(upper) < allowed:
                found.append(f"{onnx[i]}.shape[{k}] (sizes {int(vr.lower)} to {int(upper)})")
    return found


# ---------------------------------------------------------------------------------------------
# 7. what verification needs to make inputs at other sizes


def tensor_input_shapes(ep: torch.export.ExportedProgram) -> list[list[sympy.Expr | None]]:
    """Per tensor input of the user, the symbolic expression of each dim (None where static)."""
    return [[_expr(s) for s in val.shape] for _, val in _tensor_placeholders(ep)]


def example_symbol_values(
    ep: torch.export.ExportedProgram, roots: Sequence[Any], tensors: Sequence[torch.Tensor]
) -> dict[Any, int]:
    """The example's value of each symbol: torch's own record, else solved from a dim that uses it alone."""
    values: dict[Any, int] = {}
    for (_, val), tensor in zip(_tensor_placeholders(ep), tensors):
        for size, actual in zip(val.shape, tensor.shape):
            expr = _expr(size)
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
