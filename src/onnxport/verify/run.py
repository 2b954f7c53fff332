"""Verification of an exported program against eager PyTorch on the example inputs."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import torch
from torch.utils import _pytree as pytree

from onnxport.errors import VerificationError
from onnxport.verify.compare import OutputCheck, Verification, compare

__all__ = ["eager_outputs", "verify_program"]


def eager_outputs(model: torch.nn.Module, args: tuple, kwargs: dict[str, Any]) -> Any:
    """Run the model eagerly on copies of the inputs (a model may modify its inputs in place)."""
    args_c, kwargs_c = pytree.tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, (args, kwargs))
    with torch.no_grad():
        return model(*args_c, **kwargs_c)


def verify_program(
    program: Any,
    model: torch.nn.Module,
    input_sets: Sequence[tuple[tuple, dict[str, Any]]],
    *,
    label: str = "onnxruntime vs eager PyTorch",
    raise_on_mismatch: bool = True,
    generated: int = 0,
    labels: Sequence[str] = (),
) -> Verification:
    """Compare ``program`` (onnxruntime) with ``model`` (eager) on each ``(args, kwargs)`` input set.

    Each output keeps its worst error over all sets; the result is stored in the program's report.
    The last ``generated`` sets were made up by onnxport (other sizes): one that eager PyTorch itself
    refuses (a size the model cannot take) is skipped and noted, not counted against the model.
    ``labels[i]`` says how set i was made; the report lists it with the set's shapes.
    """
    result = Verification(label, [])
    program.report.verification = result
    try:
        program.run_flat(program.flatten_inputs(*input_sets[0]))
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own exception types
        if "NOT_IMPLEMENTED" not in str(exc):
            raise
        # e.g. bfloat16 kernels missing on the CPU provider: the model is valid ONNX, but unverifiable here
        result.skipped = "onnxruntime cannot run it here: " + str(exc).split(":")[-1].strip()
        warnings.warn(f"onnxport: verification {result.status}", stacklevel=3)
        program.report.warn(f"not verified: {result.skipped}")
        return result
    for index, (args, kwargs) in enumerate(input_sets):
        flat_inputs = program.flatten_inputs(args, kwargs)
        described = ", ".join(f"{n}={_describe(t)}" for n, t in zip(program.input_names, flat_inputs))
        if index < len(labels):
            described = f"{labels[index]}: {described}"
        try:
            expected = eager_outputs(model, args, kwargs)
        except Exception as exc:  # noqa: BLE001 - the model's own error on a made-up size
            if index < len(input_sets) - generated:
                raise
            result.runs.append(f"{described} (skipped: eager PyTorch refuses it: {_first_line(exc)})")
            continue
        try:
            checks = compare(program.output_names, program.onnx_leaves(expected), program.run_flat(flat_inputs),
                             random=program.random_outputs)
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own exception types
            checks = [OutputCheck(name, "", (), 0, 0, 0, 0, False, f"onnxruntime failed on {described}: "
                                  f"{_first_line(exc)}") for name in program.output_names]
        result.outputs = checks if not result.outputs else [_worst(a, b) for a, b in zip(result.outputs, checks)]
        result.runs.append(described)
    if not result.ok:
        if raise_on_mismatch:
            raise VerificationError(
                "the ONNX model does not match eager PyTorch:\n" + str(result),
                verification=result,
                fix="pass verify_mode='warn' to keep the model anyway, and report the model to onnxport",
            )
        warnings.warn(f"onnxport: the ONNX model does not match eager PyTorch\n{result}", stacklevel=3)
        program.report.warn("verification failed: " + "; ".join(o.name for o in result.outputs if not o.ok))
    return result


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:240]


def _worst(a: OutputCheck, b: OutputCheck) -> OutputCheck:
    if not b.ok and a.ok:
        return b
    if not a.ok:
        return a
    return b if b.max_abs > a.max_abs else a


def _describe(t: Any) -> str:
    if isinstance(t, torch.Tensor):
        return f"{str(t.dtype).replace('torch.', '')}{list(t.shape)}"
    return repr(t)
