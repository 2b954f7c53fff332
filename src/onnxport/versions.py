"""The releases onnxport is tested with, and what differs between torch releases: the one place that knows.

``TESTED`` gives, per package, the oldest and newest release CI runs the suite at (torch: the oldest and the
newest release of the last year, pyproject.toml's floor being the oldest; transformers: the two pinned
suites). An older torch than the floor is refused by pip; a newer one imports with one warning naming the
range (``check_torch``), never a failure. ``OPS_NOT_IN_EVERY_TORCH`` lists the ops onnxport translates
that some supported torch lacks (torch removes and adds operators): their translators register where the
op exists, and ``onnxport doctor`` lists them where it does not; a test holds every other registration to
resolve, so a misspelt op name still fails.

Code that must behave differently on another torch release asks here (``torch_at_least``) rather than
comparing ``torch.__version__`` itself.
"""

from __future__ import annotations

import functools
import importlib.metadata
import platform
import re
import sys
import warnings

import torch

__version__ = "0.1.0"  # onnxport's own (pyproject.toml's); ``onnxport.__version__``

__all__ = ["OPS_NOT_IN_EVERY_TORCH", "TESTED", "UntestedTorchWarning", "check_torch", "conv_backend_guards_sizes",
           "environment", "in_tested_range", "map_traces_every_row", "pooling_size_guards_remainder",
           "repeat_interleave_guards_output_size", "sdpa_choice_guards_mask_batch", "solve_factors_transpose",
           "symint_hint", "torch_at_least", "version_tuple"]

# package: (oldest, newest) release the whole suite runs at in CI; tests/test_versions.py checks these
# against the pins (requirements-test.txt, requirements-torch-oldest.txt, requirements-transformers-newest.txt)
TESTED: dict[str, tuple[str, str]] = {
    "torch": ("2.10.0", "2.15.0"),
    "onnx": ("1.23.2", "1.23.2"),
    "onnx-ir": ("1.1.0", "1.1.0"),
    "onnxruntime": ("1.32.0", "1.32.0"),
    "numpy": ("2.4.6", "2.4.6"),
    "transformers": ("5.23.0", "5.24.0"),
}

OPS_NOT_IN_EVERY_TORCH: dict[str, str] = {
    "aten::cholesky.default": "removed in torch 2.14 (torch.cholesky is gone; torch.linalg.cholesky remains)",
    "aten::linalg_matrix_sqrth.default": "added in torch 2.14 (torch.linalg.matrix_sqrth)",
    "aten::linalg_polar.default": "added in torch 2.14 (torch.linalg.polar)",
}


class UntestedTorchWarning(UserWarning):
    """The installed torch is outside the releases onnxport's tests run at."""


def version_tuple(version: str) -> tuple[int, ...]:
    """``(2, 15, 0)`` for ``"2.15.0+cu132"`` or ``"2.16.0.dev20261201"``: the release, without local or dev parts."""
    release = re.match(r"\d+(\.\d+)*", version)
    return tuple(int(p) for p in release.group(0).split(".")) if release else ()


def torch_at_least(version: str) -> bool:
    """Whether the installed torch is ``version`` or newer (a dev build of a release counts as that release)."""
    return version_tuple(torch.__version__) >= version_tuple(version)


def symint_hint(value: torch.SymInt, fallback: int) -> int:
    """A symbolic size's example value, or ``fallback`` where it has none (``optimization_hint`` from torch
    2.11 on; ``hint_int`` in 2.10)."""
    from torch.fx.experimental import symbolic_shapes

    hint = getattr(symbolic_shapes, "optimization_hint", None) or symbolic_shapes.hint_int
    return hint(value, fallback=fallback)


# Where torch 2.10 guards on a dynamic size and torch 2.14 no longer does (capture/_older_torch.py puts the
# guard-free computation in its place, as 2.14 computes it). Releases 2.11 to 2.13 were not checked; the
# replacements also hold where a release already computes without the guard (the suite passes with them
# forced on at torch 2.14 and 2.15).
def pooling_size_guards_remainder() -> bool:
    """Whether the shape functions of pooling round an output size down with a remainder test (``div_rtn``)
    that guards a dynamic size modulo the stride (``(h - 1) % 2 == 0``): torch 2.10; plain ``//`` by 2.14."""
    return not torch_at_least("2.14")


def conv_backend_guards_sizes() -> bool:
    """Whether a fake convolution's choice of backend (for its output's memory format) guards the input's and
    output's sizes against 32-bit indexing (``4*l <= 2147483647``), a bound torch 2.10's solver for dynamic
    dims fails on; chosen without that guard by 2.14."""
    return not torch_at_least("2.14")


def sdpa_choice_guards_mask_batch() -> bool:
    """Whether ``scaled_dot_product_attention``'s choice of a CPU kernel tests a 4-d mask's batch against 1 with
    a guard (``sdp::check_attn_mask_shape``), which fixes a batch-1 example's batch even in size-oblivious
    capture: torch 2.10; without a guard by 2.14."""
    return not torch_at_least("2.14")


def repeat_interleave_guards_output_size() -> bool:
    """Whether ``repeat_interleave`` of a number of repeats reads a symbolic ``output_size`` as an int, fixing
    the sizes it is made of (``2*batch == 4``): torch 2.10; kept symbolic by 2.14."""
    return not torch_at_least("2.14")


def map_traces_every_row() -> bool:
    """Whether ``torch._higher_order_ops.map`` traces its body and computes its fake output by iterating over
    every row of the mapped inputs, which fixes their dynamic leading dim: torch 2.10; from the first row by
    2.14."""
    return not torch_at_least("2.14")


@functools.cache
def solve_factors_transpose() -> bool:
    """Whether this torch's ``_linalg_solve_ex`` factors A^T where A is real and row-major, returning that LU
    and solving the adjoint system with it (sparing LAPACK a column-major copy of A): torch 2.10 does; 2.13 and
    later factor A itself. 2.11 and 2.12 were not checked, so torch is asked, once: the LU of [[1, 2], [3, 4]]
    differs from its transpose's."""
    a = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    with torch.no_grad():
        lu = torch.ops.aten._linalg_solve_ex.default(a, torch.ones(2, 1))[1]
    return not torch.equal(lu, torch.linalg.lu_factor(a)[0])


def in_tested_range(package: str, version: str) -> bool:
    """Whether ``version`` of ``package`` is within ``TESTED`` (for torch, by minor release: 2.15.1 is tested
    as 2.15.0 is, a bug-fix release changing no interface onnxport uses)."""
    oldest, newest = TESTED[package]
    width = 2 if package == "torch" else 3
    v = version_tuple(version)[:width]
    return version_tuple(oldest)[:width] <= v <= version_tuple(newest)[:width]


def check_torch() -> None:
    """One warning (on import of onnxport) when the installed torch is outside ``TESTED``."""
    if in_tested_range("torch", torch.__version__):
        return
    oldest, newest = TESTED["torch"]
    if version_tuple(torch.__version__) > version_tuple(newest):
        what = ("newer than the newest onnxport is tested with: exports should work; `onnxport doctor` prints "
                "the environment for a report of what does not")
    else:
        what = f"older than the oldest onnxport supports: install torch>={oldest}"
    warnings.warn(f"onnxport is tested with torch {oldest} to {newest}; torch {torch.__version__} is {what}",
                  UntestedTorchWarning, stacklevel=3)


def _installed(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def environment() -> str:
    """The environment as ``onnxport doctor`` prints it: each package onnxport runs on, its version, and
    whether that is a tested one; the ops this torch lacks; where verification runs its session."""
    from onnxport.translate import ops as _ops  # noqa: F401  (registers the translators)
    from onnxport.translate.registry import absent_ops, builtin_count
    from onnxport.verify.child import no_fork_reason

    lines = [f"onnxport {__version__}, Python {platform.python_version()} on {sys.platform}"]
    for package, (oldest, newest) in TESTED.items():
        version = _installed(package)
        tested = oldest if oldest == newest else f"{oldest} to {newest}"
        if version is None:
            state = "not installed" + (" (optional: export-hf and caches)" if package == "transformers" else "")
        elif in_tested_range(package, version):
            state = "tested"
        else:
            state = "NOT TESTED (may work; report what does not)"
        lines.append(f"  {package:<13} {version or '-':<14} tested: {tested:<18} {state}")
    absent = absent_ops()
    lines.append(f"translators: {builtin_count()} ops" + (f"; {len(absent)} op(s) torch {torch.__version__} does not "
                                                         "have, left out:" if absent else ""))
    for name in absent:
        lines.append(f"  {name}: {OPS_NOT_IN_EVERY_TORCH.get(name, 'not a known difference between torch releases')}")
    reason = no_fork_reason()
    lines.append("verification: onnxruntime " + ("in a child process" if reason is None else f"in this process "
                                                  f"({reason})"))
    return "\n".join(lines)
