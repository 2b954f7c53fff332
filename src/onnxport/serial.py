"""One export at a time in a process: a lock around every public entry that captures a model.

torch.export keeps its tracing state in process-wide globals (the active proxy and fake-tensor modes, the
dispatch-mode stack, dynamo's configuration), and capture swaps attributes of the model's library for its
own while it runs; two captures in two threads at once pop each other's modes ("Trying to pop ...") or
read each other's patches. So ``export``, ``export_hf`` and the other entries that capture take this
lock: calls from several threads run one after another, each as it would alone. The lock is reentrant
(``export_hf`` calls ``export``).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["serialized"]

_LOCK = threading.RLock()

F = TypeVar("F", bound=Callable[..., Any])


def serialized(fn: F) -> F:
    """``fn`` holding the process-wide export lock for its whole call."""

    @functools.wraps(fn)
    def locked(*args: Any, **kwargs: Any) -> Any:
        with _LOCK:
            return fn(*args, **kwargs)

    return locked  # type: ignore[return-value]
