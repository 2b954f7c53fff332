"""Size expressions of torch's shape environment evaluated fast at many integer sizes.

Capture and verification evaluate guards and runtime assertions (``Eq(Mod(3 + 2*((s - 1)//4), 8), 0)``) at
hundreds or thousands of candidate sizes. sympy's own evaluation (``xreplace`` with integers) walks the whole
expression at each point: Swin2SR's padded windows give guards of thousands of nodes, and verification spent
minutes there. :class:`Evaluated` compiles an expression once (``sympy.lambdify``, torch's functions as Python
computes them on integers) and checks each of its first :data:`CONFIRMED` answers against sympy's own; on a
disagreement (or where the expression does not compile) sympy's evaluation alone answers, as before.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["CONFIRMED", "Evaluated"]

# torch's sympy functions, as Python computes them on integers
_PYTHON = {"FloorDiv": lambda a, b: a // b, "PythonMod": lambda a, b: a % b, "Mod": lambda a, b: a % b,
           "CleanDiv": lambda a, b: a // b, "CeilDiv": lambda a, b: -(-a // b), "IntTrueDiv": lambda a, b: a / b,
           "FloatTrueDiv": lambda a, b: a / b, "TruncToInt": math.trunc, "FloorToInt": math.floor,
           "CeilToInt": math.ceil, "Identity": lambda a: a, "ToFloat": float, "Max": max, "Min": min}
CONFIRMED = 32  # answers of the compiled expression checked against sympy's before it answers alone


class Evaluated:
    """``expr`` (a sympy boolean of size symbols) as a function of its symbols: ``evaluated(point)`` is True, False,
    or None where it cannot be evaluated there (a division by zero, an expression that is not a truth)."""

    def __init__(self, expr: Any) -> None:
        self.expr = expr
        self.symbols: tuple[Any, ...] = tuple(sorted(expr.free_symbols, key=str))
        self.symbol_set = frozenset(self.symbols)
        self._confirmed = 0
        try:
            import sympy

            self._compiled: Any = sympy.lambdify(self.symbols, expr, modules=[_PYTHON, "math"])
        except Exception:  # noqa: BLE001 - a function Python does not compute here: sympy's evaluation alone
            self._compiled = None

    def __call__(self, point: Sequence[int]) -> bool | None:
        if self._compiled is None:
            return self._exact(point)
        fast = _truth(lambda: self._compiled(*point))
        if self._confirmed < CONFIRMED:
            if fast != self._exact(point):
                self._compiled = None
                return self._exact(point)
            self._confirmed += 1
        return fast

    def _exact(self, point: Sequence[int]) -> bool | None:
        import sympy

        return _truth(lambda: self.expr.xreplace(dict(zip(self.symbols, map(sympy.Integer, point)))))


def _truth(evaluate: Any) -> bool | None:
    import sympy

    try:
        result = evaluate()
    except (ZeroDivisionError, TypeError, ValueError, OverflowError):
        return None
    if result is sympy.true or result is True:
        return True
    if result is sympy.false or result is False:
        return False
    try:
        return bool(result)
    except TypeError:  # a relational sympy cannot decide: not a truth
        return None
