"""What a model requires of its dynamic dims beyond their ranges: a size that must be a multiple of a
chunk length (``x.view(b, s // 64, 64, d)``), or one more than a multiple (``(s - 1) % 4 == 0``).

Under ``Dim.DYNAMIC`` or ``Dim.AUTO`` torch.export keeps such a dim dynamic and writes the requirement
nowhere but in the guards of its shape environment (``Eq(Mod(s, 64), 0)``, or the same said through
floor divisions). The ONNX model is then right at the sizes the model takes and fails, as eager PyTorch
does, at the others. onnxport says so in the report (``x.shape[1] takes multiples of 64``, with the user's
line that requires it), and verification resizes such a dim only to sizes that keep every guard, so it
checks the dim at another size instead of trying sizes the model refuses.

Only guards with a ``Mod`` or a floor division are read: ranges and equalities torch.export already keeps
in the program (``range_constraints``, one symbol for equal dims). A size is checked against the guards
whose symbols it sets, the others taking the example's values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import sympy
import torch
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
from torch.utils._sympy.functions import FloorDiv, Mod, PythonMod

from onnxport.capture._evaluate import Evaluated
from onnxport.errors import SourceLocation, location_from_stack_trace

__all__ = ["data_bound", "guard_symbols", "guards_hold", "modular_guards", "recorded_values", "relational_guard_sites",
           "relational_guards", "size_step", "source_names", "step_notes"]

_SCAN = 512  # sizes scanned above the example's to find the step of a dim (a chunk of up to 256 shows twice)
_MAX_GUARDS = 2000


def modular_guards(ep: torch.export.ExportedProgram) -> list[sympy.Expr]:
    """The guards of the program's shape environment that hold a ``Mod`` or a floor division, each once."""
    env = _shape_env(ep)
    if env is None:
        return []
    found: dict[sympy.Expr, None] = {}
    for guard in getattr(env, "guards", [])[:_MAX_GUARDS * 10]:
        expr = getattr(guard, "expr", None)
        if isinstance(expr, sympy.Basic) and expr.free_symbols and expr.has(FloorDiv, Mod, PythonMod):
            found.setdefault(expr, None)
            if len(found) == _MAX_GUARDS:
                break
    return list(found)


def relational_guards(ep: torch.export.ExportedProgram) -> list[sympy.Expr]:
    """The guards of the program's shape environment that compare sizes of two or more dims (``Ne(s0, s1)``,
    ``s0 < s1``) without a ``Mod`` or a floor division: a Python ``if`` on sizes, whose other branch the
    program does not hold (torch.export checks the guard when its program is called; an ONNX graph cannot)."""
    return list(dict.fromkeys(expr for expr, _ in relational_guard_sites(ep)))


def relational_guard_sites(ep: torch.export.ExportedProgram, remainders: bool = False
                           ) -> list[tuple[sympy.Expr, Any]]:
    """``relational_guards`` with the frame that made each (a ``traceback.FrameSummary``: the model's line, or
    None when torch recorded none). ``remainders``: with the guards on sizes' remainders (``Mod(s, 2) == 0``), of
    one size too (an ``if s % 2`` kept the example's branch as such a guard; so does a reshape into pairs)."""
    env = _shape_env(ep)
    if env is None:
        return []
    found = []
    for guard in getattr(env, "guards", [])[:_MAX_GUARDS * 10]:
        expr = getattr(guard, "expr", None)
        if not isinstance(expr, sympy.Rel) or not expr.free_symbols or free_unbacked_symbols(expr):
            continue  # sizes of inputs, not values read from data
        modular = expr.has(FloorDiv, Mod, PythonMod)
        if (remainders and expr.has(Mod, PythonMod)) or (len(expr.free_symbols) >= 2 and not modular):
            sloc = getattr(guard, "sloc", None)
            frame = getattr(sloc, "maybe_user_loc", None) or getattr(sloc, "framework_loc", None)
            found.append((expr, frame if hasattr(frame, "lineno") else None))
    return found


def source_names(ep: torch.export.ExportedProgram) -> dict[Any, str]:
    """Each shape symbol of the program's inputs by the name torch gives its first source (``L['x'].size()[0]``),
    which another capture of the same inputs gives the same dim."""
    env = _shape_env(ep)
    names = {}
    for symbol, sources in (getattr(env, "var_to_sources", None) or {}).items():
        for source in sources:
            name = getattr(source, "name", None)
            try:
                name = name() if callable(name) else name
            except Exception:  # noqa: BLE001 - a source that cannot name itself names nothing
                name = None
            if isinstance(name, str):
                names[symbol] = name
                break
    return names


def data_bound(ep: torch.export.ExportedProgram) -> dict[Any, sympy.Expr]:
    """The input dims tied to input values by a requirement of the model, each with the requirement:
    ``Eq(s0, u0*u1 + u2*u3)`` where a vision tower's patch count (``s0``) must be the sum over its
    ``grid_thw`` rows of ``t*h*w``. torch.export checks it at run time (a deferred assertion). Tied are the
    dims in it (the patch count) and the dims of the inputs whose values set its sizes taken from data
    (the number of ``grid_thw`` rows, any input read as sizes): no size of one of them alone, the values kept, is an input the model
    takes."""
    env = _shape_env(ep)
    found: dict[Any, sympy.Expr] = {}
    read_as_sizes: set[Any] | None = None  # one walk of the graph, at the first such requirement
    for asserts in getattr(env, "deferred_runtime_asserts", {}).values():
        for item in asserts:
            expr = getattr(item, "expr", None)
            if not isinstance(expr, sympy.Eq):
                continue
            unbacked = free_unbacked_symbols(expr)
            if not unbacked:
                continue
            if read_as_sizes is None:
                read_as_sizes = _input_dims_read_as_sizes(ep)
            tied = set(expr.free_symbols - unbacked) | read_as_sizes
            for symbol in sorted(tied, key=str):
                found.setdefault(symbol, expr)
    return found


# ops whose output sizes are values of their inputs
_READ_AS_SIZES = {torch.ops.aten.item, torch.ops.aten._local_scalar_dense, torch.ops.aten.repeat_interleave.Tensor,
                  torch.ops.aten.repeat_interleave.self_Tensor, torch.ops.aten.nonzero, torch.ops.aten.masked_select,
                  torch.ops.aten.bincount}


def _input_dims_read_as_sizes(ep: torch.export.ExportedProgram) -> set[Any]:
    """The shape symbols of the user inputs whose values the graph reads as sizes (``.item()``, ``.tolist()``,
    ``repeat_interleave`` by counts: its nodes that bind sizes known only at run time). Which input a given
    such size comes from is not kept: torch replaces a size it finds equal to an input dim by that dim, in
    the nodes' records too, so the ops that read values as sizes are looked for by kind as well."""
    defining = [node for node in ep.graph.nodes if node.target is not torch.ops.higher_order.cond and (
                node.meta.get("unbacked_bindings") or node.target in _READ_AS_SIZES
                or getattr(node.target, "overloadpacket", None) in _READ_AS_SIZES)]  # (a cond's outputs' sizes are
    # its branches', computed from sizes: an if on a size's remainder, one branch padding)
    users = {spec.arg.name for spec in ep.graph_signature.input_specs
             if spec.kind == torch.export.graph_signature.InputKind.USER_INPUT and hasattr(spec.arg, "name")}
    seen: set[Any] = set()
    dims: set[Any] = set()
    stack = list(defining)
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if node.op == "placeholder" and node.name in users:
            for size in getattr(node.meta.get("val"), "shape", ()):
                if isinstance(size, torch.SymInt):
                    dims |= size.node.expr.free_symbols
        stack.extend(node.all_input_nodes)
    return dims


def guards_hold(guards: Sequence[sympy.Expr], values: Mapping[Any, int]) -> bool:
    """Whether every guard whose symbols ``values`` all set holds at those sizes (each guard compiled once:
    ``_evaluate``)."""
    for expr in guards:
        evaluated = _evaluated(expr)
        if not evaluated.symbol_set <= values.keys():
            continue
        if not evaluated(tuple(values[s] for s in evaluated.symbols)):
            return False
    return True


def guard_symbols(expr: sympy.Expr) -> frozenset[Any]:
    """The symbols of a guard (sympy walks the whole expression for ``free_symbols`` at every call)."""
    return _evaluated(expr).symbol_set


def _evaluated(expr: sympy.Expr) -> Evaluated:
    evaluated = _EVALUATED.get(expr)
    if evaluated is None:
        if len(_EVALUATED) > _MAX_EVALUATED:  # another program's guards
            _EVALUATED.clear()
        evaluated = _EVALUATED[expr] = Evaluated(expr)
    return evaluated


_EVALUATED: dict[sympy.Expr, Evaluated] = {}  # by guard: the guards of one program, evaluated at many sizes
_MAX_EVALUATED = 4 * _MAX_GUARDS


def size_step(guards: Sequence[sympy.Expr], symbols: Sequence[Any], example: Mapping[Any, int]) -> tuple[int, int] | None:
    """``(step, residue)`` when the guards let the ``symbols`` (moving together, the rest at the example's
    sizes) take only sizes ``step * k + residue`` above the example's, step >= 2; None when any size goes
    (two sizes in a row keep the guards) or no pattern shows in the sizes scanned."""
    own = [g for g in guards if guard_symbols(g) & set(symbols)]
    if not own:
        return None
    start = example[symbols[0]]

    def holds(size: int) -> bool:
        return guards_hold(own, {**example, **dict.fromkeys(symbols, size)})

    if holds(start + 1) and holds(start + 2):
        return None
    hits = [n for n in range(start + 1, start + 1 + _SCAN) if holds(n)]
    if len(hits) < 2:
        return None
    step = math.gcd(*(b - a for a, b in zip(hits, hits[1:])))
    residue = hits[0] % step
    if step < 2 or any(holds(n) != (n % step == residue) for n in range(hits[0], start + 1 + _SCAN)):
        return None
    return step, residue


def step_notes(
    ep: torch.export.ExportedProgram, groups: Sequence[tuple[str, Sequence[Any]]], example: Mapping[Any, int]
) -> list[str]:
    """One line per group of dims (``(name, symbols)``) that the model lets take only some sizes: which,
    and the user's line that requires it when the graph shows it."""
    guards = modular_guards(ep)
    if not guards:
        return []
    notes = []
    for name, symbols in groups:
        found = size_step(guards, symbols, example)
        if found is None:
            continue
        step, residue = found
        which = f"multiples of {step}" if residue == 0 else f"sizes {step}*k + {residue}"
        where = _first_use(ep, symbols)
        notes.append(f"{name} takes {which} only (the ONNX model keeps it dynamic and, like eager PyTorch, fails "
                     f"at other sizes){f'; required at {where}' if where else ''}")
    return notes


def _first_use(ep: torch.export.ExportedProgram, symbols: Sequence[Any]) -> SourceLocation | None:
    """The user's line of the first node with a size that divides one of ``symbols`` (a floor division or a ``Mod``)."""
    wanted = set(symbols)
    for node in ep.graph.nodes:
        if node.op != "call_function":
            continue
        val = node.meta.get("val")
        sizes = [val] if isinstance(val, torch.SymInt) else list(val.shape) if isinstance(val, torch.Tensor) else []
        for size in sizes:
            expr = size.node.expr if isinstance(size, torch.SymInt) else None
            if expr is not None and expr.has(FloorDiv, Mod, PythonMod) and expr.free_symbols & wanted:
                where = location_from_stack_trace(node.meta.get("stack_trace"))
                if where is not None:
                    return where
    return None


def _shape_env(ep: torch.export.ExportedProgram) -> Any:
    for node in ep.graph.nodes:
        if node.op != "placeholder":
            continue
        val = node.meta.get("val")
        for size in getattr(val, "shape", ()):
            if isinstance(size, torch.SymInt):
                return getattr(size.node, "shape_env", None)
    return None


def recorded_values(ep: torch.export.ExportedProgram) -> dict[Any, int]:
    """torch's record of each shape symbol's value in the example."""
    env = _shape_env(ep)
    known = getattr(env, "backed_var_to_val", None)  # var_to_val before torch 2.10; deprecated since
    known = known if known is not None else getattr(env, "var_to_val", {})
    return {symbol: int(value) for symbol, value in (known or {}).items() if getattr(value, "is_integer", False)}
