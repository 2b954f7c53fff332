"""No exception but an ``OnnxportError`` leaves ``onnxport.export``, over torch's OpInfo samples.

Every OpInfo of ``op_db`` runs its first samples (float32, else int64, else bool; CPU) that eager
accepts: each is exported with ``verify=False``. Samples that dispatch ops without a built-in translation
go through torch's decompositions first, which cost ~0.15 s a sample, so only the first of those runs
per OpInfo. Refusals are fine (an op without a translation, a capture torch.export declines, an argument ONNX
cannot express) as long as they are ``OnnxportError``s; a ``TranslationError`` that calls itself "an
onnxport bug" (a translator crashed) fails the test. Numerical agreement is test_opinfo.py's job.
"""

from __future__ import annotations

import functools
import itertools
import warnings

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import onnxport
from onnxport.translate.registry import lookup

pytest.importorskip("expecttest")
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402

from tests.test_opinfo import sample_model  # noqa: E402

SAMPLES_PER_OP = 3
BUG = "this is an onnxport bug"

# OpInfos whose samples still crash a translator, each with its reason: none today.
KNOWN_BUGS: dict[str, str] = {}


def _key(info) -> str:
    return f"{info.name}.{info.variant_test_name}" if info.variant_test_name else info.name


def _dtype(info) -> torch.dtype | None:
    supported = info.supported_dtypes("cpu")
    return next((d for d in (torch.float32, torch.int64, torch.bool) if d in supported), None)


class _Dispatched(TorchDispatchMode):
    """Records the ATen ops an eager call dispatches."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: set[torch._ops.OpOverload] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.add(func)
        return func(*args, **(kwargs or {}))


@functools.lru_cache(maxsize=None)
def _translated(op: torch._ops.OpOverload) -> bool:
    """onnxport translates ``op`` or its functional form (export removes in-place ops)."""
    functional = getattr(torch.ops.aten, op.overloadpacket.__name__.rstrip("_"), None)
    forms = [op] + ([getattr(functional, o) for o in functional.overloads()] if functional is not None else [])
    return any(lookup(form) is not None for form in forms)


def _samples(info):
    """The first samples that eager accepts, as (model, tensors); of those that dispatch an op without a
    translation (decomposed first, which is slow), only the first."""
    dtype = _dtype(info)
    if dtype is None:
        return []
    chosen, any_decomposed = [], False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for sample in itertools.islice(info.sample_inputs("cpu", dtype, requires_grad=False), SAMPLES_PER_OP):
            model, tensors = sample_model(info, sample)
            recorder = _Dispatched()
            try:
                with recorder:
                    model(*tensors)
            except Exception:  # noqa: BLE001 - eager refuses the sample: nothing to export
                continue
            ops = [op for op in recorder.ops if isinstance(op, torch._ops.OpOverload)]
            decomposed = not all(_translated(op) for op in ops)
            if decomposed and any_decomposed:
                continue
            any_decomposed |= decomposed
            chosen.append((model, tensors))
    return chosen


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # generators closed early
@pytest.mark.parametrize("info", op_db, ids=_key)
def test_only_onnxport_errors_escape(info) -> None:
    samples = _samples(info)
    if not samples:
        pytest.skip("eager refuses its first samples, or it has none in float32, int64 or bool")
    problems = []
    for i, (model, tensors) in enumerate(samples):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                onnxport.export(model, tensors, verify=False)
        except onnxport.OnnxportError as exc:
            if isinstance(exc, onnxport.TranslationError) and BUG in str(exc):
                problems.append(f"sample {i}: translator crashed: {exc.message.splitlines()[0][:300]}")
        except Exception as exc:  # noqa: BLE001 - the point of the test
            problems.append(f"sample {i}: {type(exc).__module__}.{type(exc).__name__} escaped: {str(exc)[:300]}")
    if problems and _key(info) in KNOWN_BUGS:
        pytest.xfail(KNOWN_BUGS[_key(info)])
    assert not problems, "\n".join(problems)
