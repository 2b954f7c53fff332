"""The one error hierarchy of onnxport.

Every error says what went wrong, where in the user's code when that is known, and what to do next.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import sys
import traceback
from collections.abc import Collection, Iterable, Iterator

__all__ = [
    "BUG_FIX",
    "CaptureError",
    "InvalidInputError",
    "OnnxportError",
    "SourceLocation",
    "TranslationError",
    "UnsupportedOpError",
    "VerificationError",
    "exception_chain",
    "location_from_exception",
    "location_from_stack_trace",
]


# The next step of an error no input of the user's should cause: an internal invariant broken.
BUG_FIX = ("this is an onnxport bug: please report it with the model (or a smaller one that fails alike) and the "
           "versions of onnxport and torch")


@dataclasses.dataclass(frozen=True)
class SourceLocation:
    """A line of the user's code."""

    file: str
    line: int
    function: str = ""
    code: str = ""

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}"
        if self.function:
            where += f" in {self.function}"
        return where + (f"\n      {self.code}" if self.code else "")


class OnnxportError(Exception):
    """Base class of every error onnxport raises on purpose."""

    category = "error"

    def __init__(self, message: str, *, location: SourceLocation | None = None, fix: str | None = None):
        self.message = message
        self.location = location
        self.fix = fix
        super().__init__(self._format())

    def _format(self) -> str:
        text = self.message
        if self.location is not None:
            text += f"\n  at {self.location}"
        if self.fix:
            text += "\n  fix: " + self.fix.replace("\n", "\n       ")
        return text


class InvalidInputError(OnnxportError, ValueError):
    """The caller passed something onnxport cannot use (a non-module, mismatched args, a bad path)."""

    category = "invalid-input"


class CaptureError(OnnxportError):
    """torch.export could not capture the model with any strategy."""

    category = "capture"

    def __init__(self, message: str, *, attempts: Iterable[tuple[str, str]] = (), **kwargs):
        self.attempts = list(attempts)
        super().__init__(message, **kwargs)


class UnsupportedOpError(OnnxportError):
    """The graph holds operators without a translation; ``ops`` lists all of them at once."""

    category = "unsupported-op"

    def __init__(self, message: str, *, ops: dict[str, list[SourceLocation | None]] | None = None, **kwargs):
        self.ops = dict(ops or {})
        super().__init__(message, **kwargs)


class TranslationError(OnnxportError):
    """A translator failed on one node of the graph."""

    category = "translation"

    def __init__(self, message: str, *, node: str = "", target: str = "", **kwargs):
        self.node = node
        self.target = target
        super().__init__(message, **kwargs)


class VerificationError(OnnxportError):
    """The ONNX model does not compute what eager PyTorch computes on the same inputs."""

    category = "verification"

    def __init__(self, message: str, *, verification: object = None, **kwargs):
        self.verification = verification
        super().__init__(message, **kwargs)


# ---------------------------------------------------------------------------------------------
# Locating the user's line.

_FRAME_RE = re.compile(
    r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>[^\n]+)(?:\n(?!\s*File ")(?P<code>[^\n]*))?'
)


@functools.lru_cache(maxsize=1)
def _library_dirs() -> tuple[str, ...]:
    import sysconfig

    import torch

    paths = sysconfig.get_paths()
    dirs = {paths["stdlib"], paths["platstdlib"], paths["purelib"], paths["platlib"]}
    dirs |= {os.path.dirname(torch.__file__), os.path.dirname(os.path.abspath(__file__))}
    return tuple(os.path.realpath(d) + os.sep for d in dirs)


def is_user_file(path: str) -> bool:
    if path.startswith("<"):  # torch generates code under "<string>" and "<eval_with_key>"
        return path == "<stdin>" or path.startswith("<ipython")
    real = os.path.realpath(path)
    if real == _DEMO_FILE:  # the bundled demo models are user code, though they ship inside onnxport
        return True
    if "site-packages" in real or "dist-packages" in real:
        return False
    return not real.startswith(_library_dirs())


_DEMO_FILE = os.path.join(os.path.dirname(os.path.realpath(__file__)), "demo.py")


def pick_frame(frames: list[SourceLocation], files: Collection[str] = ()) -> SourceLocation | None:
    """The innermost frame in the user's code, or in one of ``files`` (a model's own source files, in a
    library: transformers' modeling files); None if no frame is."""
    for frame in reversed(frames):
        if is_user_file(frame.file) or frame.file in files:
            return frame
    return None


def location_from_stack_trace(stack_trace: str | None) -> SourceLocation | None:
    """The user's line from an FX node's ``meta["stack_trace"]``."""
    return pick_frame(_message_frames(stack_trace or ""))


def _message_frames(text: str) -> list[SourceLocation]:
    """The frames a text quotes as Python prints them (``File "...", line N, in f``), outermost first."""
    return [SourceLocation(m["file"], int(m["line"]), m["func"].strip(), (m["code"] or "").strip())
            for m in _FRAME_RE.finditer(text)]


def exception_chain(exc: BaseException | None) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from or during (``__cause__``, else ``__context__``), each once."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def location_from_exception(exc: BaseException, files: Collection[str] = ()) -> SourceLocation | None:
    """The user's line that led to ``exc``: from its message (torch.export quotes it), else its traceback.
    A line of one of ``files`` counts as the user's too (see ``pick_frame``)."""
    frames = [SourceLocation(fs.filename, fs.lineno or 0, fs.name, (fs.line or "").strip())
              for chain in exception_chain(exc) for fs in traceback.extract_tb(chain.__traceback__)]
    from_message = pick_frame(_message_frames(str(exc)), files)
    return from_message or pick_frame(frames, files)


def user_frame_here() -> SourceLocation | None:
    """The innermost user frame of the current call stack (used for argument errors)."""
    frames = [
        SourceLocation(f.filename, f.lineno or 0, f.name, (f.line or "").strip())
        for f in traceback.extract_stack(sys._getframe(1))
    ]
    return pick_frame(frames)
