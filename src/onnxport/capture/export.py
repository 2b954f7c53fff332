"""Capture with ``torch.export.export``: non-strict first, then strict; never a specialised fallback."""

from __future__ import annotations

import inspect
import warnings
from typing import Any

import torch

from onnxport.errors import CaptureError, InvalidInputError, location_from_exception, user_frame_here
from onnxport.report import Attempt, Report

__all__ = ["capture", "check_inputs"]

STRATEGIES = (("non-strict", False), ("strict", True))
_TRAIN_SENSITIVE = (torch.nn.modules.dropout._DropoutNd, torch.nn.modules.batchnorm._BatchNorm)


class _FunctionModule(torch.nn.Module):
    """Wraps a plain function so torch.export can take it."""

    def __init__(self, fn: Any):
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


def check_inputs(model: Any, args: Any, kwargs: dict[str, Any] | None) -> tuple[torch.nn.Module, tuple, dict]:
    """Validate and normalise ``model``, ``args`` and ``kwargs`` the way ``torch.onnx.export`` accepts them."""
    if isinstance(model, torch.export.ExportedProgram):
        raise InvalidInputError(
            "export() takes the model itself, not an ExportedProgram",
            location=user_frame_here(),
            fix="pass ep.module() or the original nn.Module",
        )
    if not isinstance(model, torch.nn.Module):
        if not callable(model):
            raise InvalidInputError(
                f"model must be a torch.nn.Module or a function, not {type(model).__name__}",
                location=user_frame_here(),
                fix="pass the nn.Module instance (e.g. MyModel()), not its class or its output",
            )
        if isinstance(model, type):
            raise InvalidInputError(
                f"model is the class {model.__name__}, not an instance of it",
                location=user_frame_here(),
                fix=f"pass {model.__name__}(...) instead",
            )
        model = _FunctionModule(model)
    if isinstance(args, (torch.Tensor, dict)) or not isinstance(args, (tuple, list)):
        args = (args,)
    args = tuple(args)
    kwargs = dict(kwargs or {})
    try:
        inspect.signature(model.forward).bind(*args, **kwargs)
    except TypeError as exc:
        raise InvalidInputError(
            f"the example inputs do not match {type(model).__name__}.forward{inspect.signature(model.forward)}: {exc}",
            location=user_frame_here(),
            fix="pass args as a tuple in the order of forward's parameters, and keyword arguments as kwargs",
        ) from None
    return model, args, kwargs


def capture(
    model: torch.nn.Module,
    args: tuple,
    kwargs: dict[str, Any],
    *,
    dynamic_shapes: Any = None,
    report: Report,
) -> torch.export.ExportedProgram:
    """Export ``model`` with each strategy in turn; the first that works wins."""
    training = sorted({type(m).__name__ for m in model.modules() if m.training and isinstance(m, _TRAIN_SENSITIVE)})
    if training:
        message = (
            f"the model is in training mode ({', '.join(training)} behave as in training: random dropout, "
            "batch statistics); call model.eval() before export for an inference model"
        )
        report.warn(message)
        warnings.warn(f"onnxport: {message}", stacklevel=3)
    errors: list[tuple[str, BaseException]] = []
    for name, strict in STRATEGIES:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                ep = torch.export.export(model, args, kwargs, dynamic_shapes=dynamic_shapes, strict=strict)
        except Exception as exc:  # torch.export raises many unrelated types
            report.attempts.append(Attempt(f"torch.export.export(strict={strict})", False, _first_line(exc)))
            errors.append((name, exc))
            continue
        report.attempts.append(Attempt(f"torch.export.export(strict={strict})", True))
        return ep
    raise _capture_error(model, errors) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def _capture_error(model: torch.nn.Module, errors: list[tuple[str, BaseException]]) -> CaptureError:
    location = next((loc for loc in (location_from_exception(e) for _, e in errors) if loc), None)
    text = " ".join(str(e) for _, e in errors)
    if "data-dependent" in text or "GuardOnDataDependentSymNode" in text or "Dynamic control flow" in text:
        cause = "the model branches on the value of a tensor (data-dependent control flow)"
        fix = (
            "write the branch with torch.cond(pred, true_fn, false_fn, (operands,)), or keep the decision "
            "out of forward; see README 'Control flow'"
        )
    elif "Constraints violated" in text or "specializ" in text:
        cause = "the dynamic shapes asked for cannot hold for this model"
        fix = "follow torch's suggested dynamic_shapes in the error below, or relax the Dim ranges"
    else:
        cause = "torch.export could not capture the model"
        fix = "simplify the line shown (Python side effects, unsupported builtins), or export a submodule"
    tried = "; ".join(f"{name}: {_first_line(e)}" for name, e in errors)
    return CaptureError(
        f"cannot capture {type(model).__name__}: {cause}.\n  tried: {tried}",
        attempts=[(name, str(e)) for name, e in errors],
        location=location,
        fix=fix,
    )
