"""Where the model fixed a dim asked dynamic: the user's line that made torch.export replace a size
symbol by a constant (``for i in range(seq_len)``, ``if x.shape[1] == 8``, ``torch.zeros(8)[: x.shape[1]]``).

torch.export's own error says only which dim and which value ("You marked input_ids.shape[1] as dynamic
but your code specialized it to be a constant (8)"). During each capture, :func:`recording` watches the
shape environment's replacements; a symbol replaced by an integer gets the innermost frame of the user's
code, or of the model's own files in a library, on the stack at that moment, under the name of each input
dim it stands for (``L['input_ids'].size()[1]``, as torch's errors write it). :func:`last` gives those of
the captures since the last :func:`reset` (a strict attempt, traced by TorchDynamo, finds no user frame
on the stack; the non-strict one before it does).
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Collection, Iterator

import sympy
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from onnxport.errors import SourceLocation, pick_frame

__all__ = ["last", "recording", "reset"]

_last: dict[str, SourceLocation] = {}


def last() -> dict[str, SourceLocation]:
    """``{torch's name of an input dim: the line that fixed it}`` from the captures since ``reset()``."""
    return dict(_last)


def reset() -> None:
    """Forget what earlier captures recorded."""
    _last.clear()


@contextlib.contextmanager
def recording(files: Collection[str] = ()) -> Iterator[None]:
    """Record, during the block, the line that fixes each input dim (see the module docstring)."""
    original = ShapeEnv._set_replacement

    def set_replacement(self: ShapeEnv, a: sympy.Symbol, tgt: sympy.Expr, msg: str) -> None:
        if isinstance(tgt, sympy.Integer):
            sources = self.var_to_sources.get(a) or []
            names = [name for s in sources if (name := _name(s)) and name not in _last]
            if names:
                frames = [SourceLocation(f.filename, f.lineno or 0, f.name, (f.line or "").strip())
                          for f in traceback.extract_stack()[:-1]]
                where = pick_frame(frames, files)
                if where is not None:
                    _last.update(dict.fromkeys(names, where))
        return original(self, a, tgt, msg)

    ShapeEnv._set_replacement = set_replacement
    try:
        yield
    finally:
        ShapeEnv._set_replacement = original


def _name(source: object) -> str | None:
    """torch's name of a source (``L['x'].size()[1]``); ``name`` is a method or, in newer torch, a property."""
    try:
        name = getattr(source, "name", None)
        name = name() if callable(name) else name
    except Exception:  # noqa: BLE001 - a source that cannot name itself names no dim
        return None
    return name if isinstance(name, str) else None
