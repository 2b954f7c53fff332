"""Attributes set for the duration of a capture and put back on every path, an error included."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["swapped"]

_ABSENT = object()


@contextlib.contextmanager
def swapped(changes: Iterable[tuple[Any, str, Any]]) -> Iterator[None]:
    """Set ``setattr(obj, name, value)`` for each ``(obj, name, value)`` inside the context; on exit each
    attribute gets back the value it had, or is deleted where the object had none of its own."""
    changes = list(changes)
    saved = [(obj, name, vars(obj).get(name, _ABSENT) if hasattr(obj, "__dict__") else getattr(obj, name))
             for obj, name, _ in changes]
    try:
        for obj, name, value in changes:
            setattr(obj, name, value)
        yield
    finally:
        for obj, name, old in reversed(saved):
            if old is _ABSENT:
                delattr(obj, name)
            else:
                setattr(obj, name, old)
