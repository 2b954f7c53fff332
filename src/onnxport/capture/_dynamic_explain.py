"""Constraint violations of torch.export, explained in the user's own ``dynamic_shapes``.

torch.export checks the given ``dynamic_shapes`` against the guards tracing emitted and prints
"Suggested fixes:" (``dy = dx``, ``d1 = 4``, ``n = Dim('n', max=16)``). This module applies them to
the user's specification and writes the corrected ``dynamic_shapes=`` argument back out.
The public function is re-exported by :mod:`onnxport.capture.dynamic`.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys
from collections.abc import Callable, Mapping
from typing import Any

import sympy
import torch
from torch.export import Dim
from torch.export.dynamic_shapes import _DerivedDim, _DimHint, _StaticDim
from torch.utils._sympy.numbers import IntInfinity, NegativeIntInfinity

from onnxport.errors import CaptureError, SourceLocation, exception_chain, location_from_exception

__all__ = ["explain_constraint_violation"]

_MARKERS = ("Constraints violated", "user-specified ranges and inferred ranges", "not in range [")
_RANGE_RE = re.compile(r"^(\d+) not in range \[(-?\w+), (-?\w+)\]", re.M)
_MARKED_RE = re.compile(r"You marked (L\[[^ ]*?\])\.size\(\)\[(\d+)\] as dynamic but your code specialized it "
                        r"to be a constant \((\d+)\)")
_HINT01_RE = re.compile(r"dim hint (Dim\.\w+)(?:\([^)]*\))?,? but export 0/1 specialized due to hint of (\d+) "
                        r"for dimension inputs(\[.*?\])\.shape\[(\d+)\]")
_NE_RE = re.compile(r"values of (\w+) = \S+ in the specified range.*? satisfy the generated guard \S+ != (\d+)\.")
_KEY_RE = re.compile(r"\['([^']*)'\]|\[(\d+)\]")


@dataclasses.dataclass(frozen=True)
class _Expr:
    """A relation torch suggested (``dx + 1``), rendered as written."""

    text: str


def explain_constraint_violation(
    exc: BaseException, model: Any, dynamic_shapes: Any, fixed_at: Mapping[str, SourceLocation] | None = None
) -> CaptureError | None:
    """A ``CaptureError`` for torch.export's constraint violation ``exc``, or None for any other error.

    The message lists the conflicting dims, each fixed one with the line that fixed it where ``fixed_at``
    (torch's name of the dim, ``L['x'].size()[1]``: the line) knows it; ``fix`` is the corrected
    ``dynamic_shapes=`` argument in the user's own form (dict or tuple, dict or tuple per tensor), with the
    Dims it uses defined.
    """
    text = _violation_text(exc)
    if text is None:
        return None
    names = _param_names(model)
    fixes, paths, notes = _fixes(text, names, dynamic_shapes)
    where = {_clean(name): line for name, line in (fixed_at or {}).items()}
    lines = [_fixed_where(_clean(b), where) for b in re.findall(r"^\s+- (.*)$", text, re.M)]
    problems = _merge_guards(list(dict.fromkeys(lines))) or notes
    located = next((where[m.group(1)] for p in problems if (m := _FIXED_RE.match(p)) and m.group(1) in where), None)
    if not (fixes or paths):
        return CaptureError(
            f"torch.export rejected the dynamic_shapes given for {type(model).__name__}:\n  - "
            + "\n  - ".join(problems or [_clean(text.splitlines()[0])]),
            location=located or location_from_exception(exc),
            fix="make dynamic_shapes agree with what the model requires (see above), or use Dim.AUTO "
            "to let torch.export work it out",
        )
    code = _render_fix(dynamic_shapes, fixes, paths, names)
    fix = "dynamic_shapes the model accepts:\n" + code
    return CaptureError(
        f"the dynamic_shapes given for {type(model).__name__} conflict with what the model requires:\n  - "
        + "\n  - ".join(problems),
        location=located or location_from_exception(exc),
        fix=fix,
    )


def _violation_text(exc: BaseException) -> str | None:
    for chain in exception_chain(exc):
        text = str(chain)
        if any(marker in text for marker in _MARKERS) or type(chain).__name__ == "ConstraintViolationError":
            return text.split("\n\nThe error above occurred")[0]
    return None


def _param_names(model: Any) -> list[str]:
    try:
        fn = model.forward if isinstance(model, torch.nn.Module) else model
        return list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return []


_FIXED_RE = re.compile(r"^You marked (\S+) as dynamic but your code specialized it to be a constant")


def _fixed_where(line: str, where: Mapping[str, SourceLocation]) -> str:
    """``line`` saying which line of the model fixed the dim it names, when that is known."""
    m = _FIXED_RE.match(line)
    at = where.get(m.group(1)) if m else None
    if at is None:
        return line
    code = f": {at.code}" if at.code else ""
    loop = (" (a Python loop over a size runs once per step while torch.export traces it, so the graph holds "
            "the example's count)") if re.match(r"(async\s+)?for\b.*\brange\(", at.code or "") else ""
    return f"{line.rstrip('.')}, at {at.file}:{at.line} in {at.function}{code}{loop}"


_GUARD_RE = re.compile(r"^Not all values of (\w+ = \S+) in the specified range satisfy the generated guard (.*?)\.?$")


def _merge_guards(problems: list[str]) -> list[str]:
    """torch's one line per guard a dim's range breaks (a reshape by 4 gives a dozen) as one line per dim."""
    guards: dict[str, list[str]] = {}
    for line in problems:
        if m := _GUARD_RE.match(line):
            guards.setdefault(m.group(1), []).append(m.group(2))
    merged, done = [], set()
    for line in problems:
        m = _GUARD_RE.match(line)
        if m is None:
            merged.append(line)
        elif m.group(1) not in done:
            done.add(m.group(1))
            found = guards[m.group(1)]
            more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
            merged.append(f"not all values of {m.group(1)} in the range given satisfy what the model requires: "
                          f"{found[0]}{more}")
    return merged


def _clean(line: str) -> str:
    """torch's sources (``L['y'].size()[0]``) as the user writes them (``y.shape[0]``)."""
    line = re.sub(r" If you're using mark_dynamic.*$", "", line)
    line = re.sub(r"L\['(\w+)'\]", r"\1", line)
    line = re.sub(r"\['([^']*)'\]", r'["\1"]', line)
    line = line.replace(".size()", ".shape")
    return re.sub(r"IntInfinity\(\)|int_oo|9223372036854775806", "inf", line)


def _path(source: str, names: list[str], top: Any) -> tuple:
    keys = tuple(int(n) if n else s for s, n in _KEY_RE.findall(source))
    if keys and isinstance(top, (tuple, list)) and keys[0] in names:  # tuple form: by position
        keys = (names.index(keys[0]), *keys[1:])
    return keys


def _fixes(text: str, names: list[str], top: Any) -> tuple[dict[str, Any], dict[tuple, int], list[str]]:
    """torch's suggestions: by Dim name, by input path (for hints), and notes for the message."""
    fixes: dict[str, Any] = {}
    for line in text.split("Suggested fixes:", 1)[1].splitlines() if "Suggested fixes:" in text else ():
        match = re.match(r"\s*(\w+) = (.+?)\s*(#.*)?$", line)
        if not match:
            if fixes:
                break
            continue
        name, value = match.group(1), match.group(2)
        if value.startswith("Dim("):
            fixes[name] = ("dim", _bound(value, "min"), _bound(value, "max"))
        else:
            fixes[name] = int(value) if re.fullmatch(r"-?\d+", value) else _Expr(value)
    # torch suggests min=16 for a guard "!= 16" (DynamicShapesExample3); the bound must step past the value.
    for name, value in _NE_RE.findall(text):
        fix = fixes.get(name)
        if isinstance(fix, tuple) and int(value) in (fix[1], fix[2]):
            fixes[name] = ("dim", fix[1] + (fix[1] == int(value)) if fix[1] is not None else None,
                           fix[2] - (fix[2] == int(value)) if fix[2] is not None else None)
    paths: dict[tuple, int] = {}
    notes: list[str] = []
    for source, dim, value in _MARKED_RE.findall(text):
        paths[(*_path(source, names, top), int(dim))] = int(value)
    for hint, value, source, dim in _HINT01_RE.findall(text):
        paths[(*_path(source, names, top), int(dim))] = int(value)
        notes.append(f"{_clean(source[2:-2])}.shape[{dim}] was given {hint}, but the model fixes it to {value}")
    match = _RANGE_RE.search(text)
    if match:
        notes.append(f"an example input has size {match.group(1)}, outside the range [{match.group(2)}, "
                     f"{_clean(match.group(3))}] its Dim allows")
        fixes.update(_widen(top, int(match.group(1)), match.group(2), match.group(3)))
    return fixes, paths, notes


def _bound(text: str, which: str) -> int | None:
    match = re.search(which + r"=(\d+)", text)
    value = int(match.group(1)) if match else None
    return None if value is not None and value >= sys.maxsize - 1 else value


def _widen(top: Any, size: int, lower: str, upper: str) -> dict[str, Any]:
    """The Dims whose range is [lower, upper], widened to admit ``size`` (torch does not say which Dim)."""
    lo, hi = int(lower), (int(upper) if upper.isdigit() else None)
    out = {}
    for dim in _user_dims(top).values():
        low, high = _user_bounds(dim)
        if lo not in (low or 0, max(low or 0, 2)) or hi != high:  # torch raises unset minimums to 2
            continue
        out[dim.__name__] = ("dim", size if size < lo else low, size if hi is not None and size > hi else high)
    return out


def _walk(spec: Any, fn: Callable[[tuple, Any], Any], path: tuple = ()) -> Any:
    if isinstance(spec, Mapping):
        return {k: _walk(v, fn, (*path, k)) for k, v in spec.items()}
    if isinstance(spec, (list, tuple)):
        return type(spec)(_walk(v, fn, (*path, i)) for i, v in enumerate(spec))
    return fn(path, spec)


def _user_dims(top: Any) -> dict[str, Dim]:
    """Every named Dim (roots of derived Dims included) in the user's specification, by name."""
    found: dict[str, Dim] = {}

    def visit(_: tuple, spec: Any) -> Any:
        root = spec.root if isinstance(spec, _DerivedDim) else spec
        if isinstance(root, Dim) and not isinstance(root, (_StaticDim, _DerivedDim)):
            found.setdefault(root.__name__, root)
        return spec

    _walk(top, visit)
    return found


def _apply(path: tuple, spec: Any, fixes: dict[str, Any], paths: dict[tuple, int]) -> Any:
    if path in paths:
        return paths[path]
    if isinstance(spec, _DerivedDim) and spec.root.__name__ in fixes:
        root_fix = fixes[spec.root.__name__]
        if isinstance(root_fix, int):
            return int(spec.fn(root_fix))
        if isinstance(root_fix, _Expr):
            root = sympy.Symbol(spec.root.__name__)
            expr = sympy.sympify(spec.__name__, locals={spec.root.__name__: root})
            return _Expr(str(expr.xreplace({root: sympy.sympify(root_fix.text)})))
        return spec
    if isinstance(spec, Dim) and not isinstance(spec, _DerivedDim) and spec.__name__ in fixes:
        fix = fixes[spec.__name__]
        return spec if isinstance(fix, tuple) else fix
    return spec


def _render_fix(top: Any, fixes: dict[str, Any], paths: dict[tuple, int], names: list[str]) -> str:
    fixed = _walk(top, lambda p, s: _apply(p, s, fixes, paths))
    used: list[str] = []
    body = _src(fixed, used)
    user = _user_dims(top)
    lines = []
    for name in dict.fromkeys(used):
        fix = fixes.get(name)
        low, high = (fix[1], fix[2]) if isinstance(fix, tuple) else _user_bounds(user.get(name))
        bounds = (f", min={low}" if low is not None else "") + (f", max={high}" if high is not None else "")
        lines.append(f'{name} = Dim("{name}"{bounds})')
    return "\n".join(lines + [f"dynamic_shapes={body}"])


def _user_bounds(dim: Dim | None) -> tuple[int | None, int | None]:
    if dim is None:
        return None, None
    return _finite(dim.min) or None, _finite(dim.max)


def _finite(value: Any) -> int | None:
    """``value`` as an int, or None for torch's infinities and its ``sys.maxsize - 1`` stand-in."""
    if value is None or isinstance(value, (IntInfinity, NegativeIntInfinity)) or value in (sympy.oo, -sympy.oo):
        return None  # int() on torch's infinities goes through sympy floats and fails
    number = int(value)
    return number if abs(number) < sys.maxsize - 1 else None


def _src(spec: Any, used: list[str]) -> str:
    """Python source for a dynamic_shapes value; ``used`` collects the Dim names it refers to."""
    if isinstance(spec, Mapping):
        keys = [f'"{k}"' if isinstance(k, str) else repr(k) for k in spec]
        return "{" + ", ".join(f"{k}: {_src(v, used)}" for k, v in zip(keys, spec.values())) + "}"
    if isinstance(spec, (list, tuple)):
        inner = ", ".join(_src(v, used) for v in spec)
        if isinstance(spec, list):
            return f"[{inner}]"
        return f"({inner},)" if len(spec) == 1 else f"({inner})"
    if isinstance(spec, _DimHint):
        return f"Dim.{spec.type.name}" + (f"(min={spec.min}, max={spec.max})" if spec.min or spec.max else "")
    if isinstance(spec, _Expr):
        used += re.findall(r"[A-Za-z_]\w*", spec.text)
        return spec.text
    if isinstance(spec, _DerivedDim):
        used.append(spec.root.__name__)
        return spec.__name__
    if isinstance(spec, Dim) and not isinstance(spec, _StaticDim):
        used.append(spec.__name__)
        return spec.__name__
    return repr(spec)
