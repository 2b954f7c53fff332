"""Capture with ``torch.export.export``: non-strict first, then strict; never a specialised fallback."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import inspect
import io
import itertools
import linecache
import logging
import re
import warnings
from collections.abc import Iterator
from typing import Any

import torch

from onnxport.capture import _data_watch, _dim_constraints, _older_torch, _runtime, _specialised, dynamic, integrations
from onnxport.capture import _deferred as _deferred_guards
from onnxport.capture import quantized, rewrite_data, rewrite_len, rewrite_loop, size_branches
from onnxport.capture._data_watch import reads_data
from onnxport.capture.patch import ControlFlowRewriter, model_files
from onnxport.capture.rewrite import RewriteRefused
from onnxport.errors import (
    CaptureError,
    InvalidInputError,
    OnnxportError,
    SourceLocation,
    exception_chain,
    location_from_exception,
    location_from_stack_trace,
    user_frame_here,
)
from onnxport.report import Attempt, Report

__all__ = ["Captured", "capture", "check_inputs", "is_data_dependent", "refuse_state_updates", "resolve_dynamic_shapes"]

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
    # An argument known by two names (transformers' cache) goes in under the one forward takes.
    kwargs = integrations.renamed(model, dict(kwargs or {}))
    try:
        inspect.signature(model.forward).bind(*args, **kwargs)
    except TypeError as exc:
        raise InvalidInputError(
            f"the example inputs do not match {type(model).__name__}.forward{inspect.signature(model.forward)}: {exc}",
            location=user_frame_here(),
            fix="pass args as a tuple in the order of forward's parameters, and keyword arguments as kwargs",
        ) from None
    _check_leaves(args, kwargs)
    return model, args, kwargs


# What torch.export takes as an input leaf: tensors, and constants it bakes in.
_LEAVES = (torch.Tensor, int, float, bool, complex, str, type(None), torch.dtype, torch.device, torch.memory_format)


def _check_leaves(args: tuple, kwargs: dict[str, Any]) -> None:
    """Every input is a tensor, a constant, or a container of those (a registered pytree node)."""
    for path, leaf in torch.utils._pytree.tree_flatten_with_path((args, kwargs))[0]:
        if isinstance(leaf, _LEAVES):
            continue
        where = f"args[{path[1].idx}]" if path[0].idx == 0 else str(path[1].key)
        where += torch.utils._pytree.keystr(path[2:])
        kind = type(leaf)
        fix = integrations.input_fix(kind) or (
            "pass tensors, Python numbers, or tuples, lists and dicts of them; for a class of your own, "
            "register it with torch.export.register_dataclass or torch.utils._pytree.register_pytree_node")
        raise InvalidInputError(f"the input {where} is a {kind.__module__}.{kind.__qualname__}, which onnxport cannot "
                                "pass to an ONNX model", location=user_frame_here(), fix=fix)


@dataclasses.dataclass
class Captured:
    """The exported program; the rewriter whose patches produced it (None when no ``if`` or ``while``
    was rewritten: verification explores the branches of its rewrites); per tensor input, the dynamic
    dims asked for; and the ONNX names of torch's shape symbols."""

    program: torch.export.ExportedProgram
    rewriter: ControlFlowRewriter | None = None
    specs: list[dict[int, Any]] = dataclasses.field(default_factory=list)
    dim_names: dict[str, str] = dataclasses.field(default_factory=dict)
    size_oblivious: list[str] = dataclasses.field(default_factory=list)  # dims captured so (example size 0/1)
    narrowed: list[str] = dataclasses.field(default_factory=list)  # dims torch.export bounded above so
    size_branches: list[Any] = dataclasses.field(default_factory=list)  # guards of ifs on sizes made torch.cond


def resolve_dynamic_shapes(
    model: torch.nn.Module,
    args: tuple,
    kwargs: dict[str, Any],
    dynamic_shapes: Any,
    dynamic_axes: Any,
    input_names: Any = None,
    output_names: Any = None,
) -> Any:
    """torch.export's ``dynamic_shapes`` from what the user gave: itself, ``"auto"``, or ``dynamic_axes``."""
    if dynamic_axes is not None:
        if dynamic_shapes is not None:
            raise InvalidInputError(
                "both dynamic_shapes and dynamic_axes were given",
                location=user_frame_here(),
                fix="give one of them: dynamic_shapes (torch.export's form) or dynamic_axes (torch.onnx's)",
            )
        return dynamic.dynamic_shapes_from_axes(model, args, kwargs, dynamic_axes, input_names, output_names)
    if isinstance(dynamic_shapes, dict):  # keyed as the example inputs are (check_inputs renamed them)
        dynamic_shapes = integrations.renamed(model, dynamic_shapes)
    if isinstance(dynamic_shapes, str):
        if dynamic_shapes != "auto":
            raise InvalidInputError(
                f"dynamic_shapes={dynamic_shapes!r} is not understood",
                location=user_frame_here(),
                fix='pass "auto", a torch.export dynamic_shapes spec, or use onnxport.infer_dynamic_shapes(...)',
            )
        return dynamic.auto_dynamic_shapes(model, args, kwargs)
    return dynamic.complete_dynamic_shapes(model, args, kwargs, dynamic_shapes)


def capture(
    model: torch.nn.Module,
    args: tuple,
    kwargs: dict[str, Any],
    *,
    dynamic_shapes: Any = None,
    input_names: Any = None,
    rewrite_control_flow: bool = True,
    report: Report,
    blocks: Any = None,
) -> Captured:
    """Export ``model`` with each strategy in turn; the first that works wins.

    When non-strict export fails on a data-dependent ``if`` or ``while``, that statement is rewritten
    into ``torch.cond`` or ``while_loop``; when it fails on ``.data``, the lines using it read it as
    ``.detach()``; then the strategies run again (unless ``rewrite_control_flow`` is False). A capture
    holding tensors torch could not trace (strict export freezes ``.data`` so) counts as failed.
    ``blocks`` (an ``onnxport.blocks.BlockReuse``) captures repeated layers once for the non-strict
    attempts; an attempt that fails so runs again without it.
    """
    _warn_training(model, report)
    _specialised.reset()
    rewriter = ControlFlowRewriter(model) if rewrite_control_flow else None
    # Malformed dynamic_shapes fail here, once, rather than once per strategy inside torch.export.
    specs = dynamic.input_dim_specs(model, args, kwargs, dynamic_shapes) if dynamic_shapes is not None else []
    small = dynamic.small_dynamic_dims(model, args, kwargs, specs)
    widened = integrations.widened_example(model, args, kwargs, small)
    if widened is not None:
        args, kwargs = widened
        small = dynamic.small_dynamic_dims(model, args, kwargs, specs)
        report.notes.append("captured from the one-token step widened to two tokens (torch fixes a one-token "
                            "length in attention); verified on the example itself")
    if blocks is not None:
        def trace() -> None:
            with _capturing(model, small, rewriter):
                torch.export.export(model, args, kwargs, dynamic_shapes=dynamic_shapes, strict=False)

        blocks.prepare(trace, lambda: _capturing(model, small, None))
    while True:
        if blocks is not None and not blocks.traced and rewriter is not None and rewriter.all_rewrites:
            blocks.prepare(trace, lambda: _capturing(model, small, rewriter))
        errors: list[tuple[str, BaseException]] = []
        for name, strict in STRATEGIES:
            label = _label(strict, rewriter, small)
            try:
                ep = _export_once(model, args, kwargs, dynamic_shapes, strict, small, rewriter, blocks)
            except Exception as exc:  # torch.export raises many unrelated types
                ep = _deferred(exc, strict, report, lambda **options: _export_once(
                    model, args, kwargs, dynamic_shapes, strict, small, rewriter, blocks, **options))
            if isinstance(ep, BaseException):
                exc = ep
                report.attempts.append(Attempt(label, False, _first_line(exc)))
                errors.append((name, exc))
                _raise_if_loop_refused(model, exc, errors, rewriter)
                if rewriter is not None and not strict and (is_data_dependent(exc) or reads_data(exc)
                                                            or rewrite_len.is_dynamic_length(exc)):
                    break  # rewrite the if, while, .data or len(), then start again from non-strict
                continue
            report.attempts.append(Attempt(label, True))
            branches: list[Any] = []
            if rewriter is not None and not strict:  # ifs comparing sizes: into torch.cond, captured again
                ep, branches = size_branches.rewritten(ep, rewriter, lambda: _export_once(
                    model, args, kwargs, dynamic_shapes, False, small, rewriter, blocks))
                if branches:
                    report.attempts.append(Attempt(_label(False, rewriter, small), True))
            ep = quantized.prepare_program(ep)  # subclass weights in parts, quantized linears as matmuls
            _refuse_state_writes(model, ep, rewriter)
            report.rewrites = rewriter.all_rewrites if rewriter is not None else []
            control_flow = rewriter if rewriter is not None and rewriter.rewrites else None
            captured = Captured(ep, control_flow, size_oblivious=small,
                                size_branches=size_branches.in_program(ep, branches))
            return _with_dims(captured, model, args, kwargs, dynamic_shapes, input_names, report)
        _, last = errors[-1]
        for _, exc in errors:
            explained = (dynamic.explain_constraint_violation(exc, model, dynamic_shapes, _specialised.last())
                         if dynamic_shapes else None)
            if explained is not None:
                raise explained from None
        if any(reads_data(e) for _, e in errors):
            sites = _data_sites(model, args, kwargs, dynamic_shapes, small, rewriter)
            if sites and rewriter is None:
                raise _data_error(model, sites, errors) from None
            if rewriter is not None and _rewrite_data(model, rewriter, sites, errors):
                report.rewrites = rewriter.all_rewrites
                continue
        if rewriter is not None and rewrite_len.is_dynamic_length(last):
            _rewrite_len_or_raise(model, rewriter, last)
            report.rewrites = rewriter.all_rewrites
            continue
        if rewriter is None or not is_data_dependent(last):
            _raise_if_eager_refuses(model, args, kwargs)
            raise _capture_error(model, errors, rewriter) from None
        report.rewrites = rewriter.all_rewrites
        _rewrite_or_raise(model, rewriter, last)


def _deferred(exc: BaseException, strict: bool, report: Report, export: Any) -> Any:
    """The capture with guards torch could not prove deferred (``onnxport.capture._deferred``), where ``exc`` is
    a non-strict capture refused over such guards and every one of them holds at every size checked; else
    ``exc``."""
    if strict or not _deferred_guards.unproven_guards(exc):
        return exc
    taken = _deferred_guards.capture_deferred(export)
    if taken is None:
        return exc
    ep, held = taken
    if held:
        report.notes.append(f"{len(held)} size check(s) torch could not prove held at every size checked, up to "
                            f"{_deferred_guards.FARTHEST}: {'; '.join(held[:2])}")
    return ep


def _export_once(
    model: torch.nn.Module, args: tuple, kwargs: dict[str, Any], dynamic_shapes: Any, strict: bool,
    small: list[str], rewriter: ControlFlowRewriter | None, blocks: Any, **options: Any,
) -> torch.export.ExportedProgram:
    """One ``torch.export.export`` call (``options`` are its own); non-strict with repeated blocks captured once
    when there are any, and again without them when that fails where the plain capture works."""
    reuse = blocks is not None and blocks.active and blocks.kinds and not strict
    if reuse:
        try:
            with _capturing(model, small, rewriter), blocks.applied():
                ep = torch.export.export(model, args, kwargs, dynamic_shapes=dynamic_shapes, strict=strict,
                                         **options)
            _check_constants(ep)
            _check_pinned_sizes(ep)
            return ep
        except _PinnedSize:
            raise  # the model's own reading of a size: the plain capture pins it too
        except Exception as exc:  # noqa: BLE001 - whatever it was, the plain capture decides
            reused = exc
    with _capturing(model, small, rewriter):
        ep = torch.export.export(model, args, kwargs, dynamic_shapes=dynamic_shapes, strict=strict, **options)
    _check_constants(ep)
    _check_pinned_sizes(ep)  # strict export may keep the size symbolic where non-strict pinned it
    if reuse:
        blocks.active = False
        blocks.notes.append(f"repeated blocks traced layer by layer: capturing them once failed ({_first_line(reused)})")
    return ep


def _label(strict: bool, rewriter: ControlFlowRewriter | None, small: list[str]) -> str:
    label = f"torch.export.export(strict={strict})"
    if rewriter is not None and rewriter.all_rewrites:
        counts = collections.Counter(r.kind for r in rewriter.all_rewrites)
        label += " with " + ", ".join(f"{n} {_KIND_NAMES[k]}" for k, n in counts.items()) + " rewritten"
    if small:
        label += f", size-oblivious for {', '.join(small)} (size 0 or 1 in the example)"
    return label


_KIND_NAMES = {"if": "if(s)", "size": "if(s) on sizes", "while": "while(s)", "data": ".data line(s)",
               "len": "len() line(s)"}


def _capturing(model: torch.nn.Module, small: list[str], rewriter: ControlFlowRewriter | None) -> contextlib.ExitStack:
    """Everything a capture attempt runs under: quiet logs, size-obliviousness, an older torch's shape functions
    made guard-free as newer torch has them, library patches, rewrites."""
    stack = contextlib.ExitStack()
    stack.enter_context(_quiet())
    stack.enter_context(_size_oblivious(bool(small)))
    stack.enter_context(_older_torch.patched())
    stack.enter_context(_deferred_guards.reported_violations())
    stack.enter_context(integrations.patched(model))
    stack.enter_context(_specialised.recording(model_files(model)))
    if rewriter is not None:
        stack.enter_context(rewriter.applied())
    return stack


class _UntracedConstant(RuntimeError):
    """A capture that "worked" but holds tensors torch could not trace (strict export freezes ``.data`` so)."""


def _check_constants(ep: torch.export.ExportedProgram) -> None:
    fake = [name for name, value in ep.constants.items() if isinstance(value, torch._subclasses.FakeTensor)]
    if fake:
        raise _UntracedConstant(
            f"found a {_data_watch.MARKER}s ({', '.join(fake)}): values torch.export could not trace, such as "
            "tensors read through .data, frozen into the program"
        )


class _PinnedSize(RuntimeError):
    """A capture that "worked" but holds a dynamic size as a constant: torch.export keeps it as a guard of its
    program (checked when the program is called), which the ONNX graph has no place for."""


# A guard holding an expression of input sizes equal to a number: ``(14*(L['x'].size()[2] // 14)) == 84``.
_PINNED_GUARD = re.compile(r"^(?P<expr>.*\.size\(\)\[\d+\].*?)\s*==\s*(?P<value>-?\d+)$")
_SIZE = re.compile(r"L(?:\[[^\]]+\])+\.size\(\)\[\d+\]")
_BARE_SIZE = re.compile(r"\(*L(\[[^\]]+\])+\.size\(\)\[\d+\]\)*")


def pinned_size_guards(ep: torch.export.ExportedProgram) -> list[str]:
    """The guards of ``ep`` that pin an expression of dynamic input sizes to one value for a bounded set of sizes:
    the model read sizes as Python numbers and computed the rest from the example's, so the graph answers for a
    few sizes only. One size rounded (``14*(h // 14) == 84``: every height from 84 to 97, ``int(h // 14 * 14)``),
    or several combined (``w*h == 24``: ``math.sqrt(w * h)``, which non-strict export evaluates as a float).
    A divisibility guard (``x.size()[1] % 2 == 0``) holds for many sizes, one that leaves a single size
    (``4*b == 4``) is a size the model requires (``dynamic`` says so), one relating sizes that grow together
    (``8*m // t == 8``) holds for large sizes too, and an intermediate size of 0 or 1 is torch's own
    specialisation of those sizes, not the model's reading: none is one."""
    pinned = []
    for guard in getattr(ep, "_guards_code", None) or ():
        match = _PINNED_GUARD.match(guard.strip()) if isinstance(guard, str) else None
        if match is None or "%" in match["expr"] or _BARE_SIZE.fullmatch(match["expr"].strip()):
            continue  # a size itself equal to a number is a static dim of the program, which ONNX holds too
        sizes = sorted(set(_SIZE.findall(match["expr"])))
        if len(sizes) == 1 and "//" not in match["expr"]:
            continue  # one size required (4*b == 4: said elsewhere)
        if int(match["value"]) in (0, 1):
            continue  # an intermediate size of 0 or 1 (a ResNet's last map of a 32-pixel image: ceil(w / 32) == 1),
            # which torch guards on for strides and broadcasting, where the graph stays right for other sizes
        if _holds_for_large_sizes(match["expr"], sizes, int(match["value"])):
            continue  # x // (x // 2) == 2, 8*m // t == 8: true of sizes without end, not a set the example fell in
        pinned.append(re.sub(r"L\['([^']+)'\]", r"\1", guard.strip()))
    return pinned


# Large sizes at which a guard that pins sizes to a bounded set fails (every ninth of them, for several sizes).
_LARGE = range(1000, 1100)


def _holds_for_large_sizes(expr: str, sizes: list[str], value: int) -> bool:
    """Whether ``expr == value``, an expression of the input ``sizes``, holds for some sizes of 1000 or more (a
    guard that pins sizes holds for a bounded set alone: ``14*(h // 14) == 84`` for 84 to 97, ``w*h == 24`` for
    six pairs). An expression this cannot evaluate, or of more than three sizes, counts as holding: the capture is
    left as it was."""
    names = {size: f"n{i}" for i, size in enumerate(sizes)}
    code = _SIZE.sub(lambda m: names[m.group(0)], expr)
    if len(names) > 3 or not re.fullmatch(r"[\sn0-9()+\-*/%]*", code):
        return True
    grid = _LARGE if len(names) == 1 else _LARGE[::9]
    try:
        compiled = compile(code, "<guard>", "eval")
        return any(eval(compiled, {"__builtins__": {}}, dict(zip(names.values(), values))) == value  # noqa: S307
                   for values in itertools.product(grid, repeat=len(names)))
    except (ArithmeticError, SyntaxError, TypeError, NameError):
        return True


def _check_pinned_sizes(ep: torch.export.ExportedProgram) -> None:
    pinned = pinned_size_guards(ep)
    if pinned:
        raise _PinnedSize(
            f"a dynamic size was fixed at the example's: {'; '.join(pinned[:3])} (the model reads a size as a Python "
            "number, int(size) say; torch.export checks that when its program is called, an ONNX graph cannot)"
        )


def _size_oblivious(on: bool) -> contextlib.AbstractContextManager:
    """Capture treating sizes 0 and 1 like any other size, as torch.onnx does for batch-1 examples.

    torch.export specialises a dim whose example size is 0 or 1; a user who declares it dynamic
    wants a model right at every size. Size-oblivious capture takes the general branch of shape
    checks (``x.shape[0] == 1`` is False); verification then runs the example itself and other sizes.
    """
    if not on:
        return contextlib.nullcontext()
    return torch.fx.experimental._config.patch(backed_size_oblivious=True)


def _with_dims(
    captured: Captured, model: Any, args: tuple, kwargs: dict[str, Any], dynamic_shapes: Any, input_names: Any, report: Report
) -> Captured:
    """Read back what torch.export made of the dynamic dims: names, and dims it made static."""
    if dynamic_shapes is None:
        return captured
    ep = captured.program
    captured.specs = dynamic.input_dim_specs(model, args, kwargs, dynamic_shapes)
    for message in dynamic.check_specialization(ep, captured.specs, input_names):
        report.warn(message)
        warnings.warn(f"onnxport: {message}", stacklevel=4)
    if captured.size_oblivious:  # what verification's error says, should the capture not hold at other sizes
        captured.narrowed = dynamic.narrowed_dims(ep, captured.specs, input_names)
    captured.dim_names = dynamic.dim_names(ep, captured.specs, input_names)
    report.notes.extend(_dim_constraints.step_notes(ep, *_symbol_groups(ep, captured.dim_names)))
    return captured


def _symbol_groups(ep: torch.export.ExportedProgram, names: dict[str, str]) -> tuple[list[tuple[str, list[Any]]], dict[Any, int]]:
    """Each shape symbol of the inputs as its own group, named as the ONNX model names it, and the
    example's value of each (torch's record of it)."""
    groups, example, recorded = [], {}, _dim_constraints.recorded_values(ep)
    for row in dynamic.tensor_input_shapes(ep):
        for expr in row:
            for symbol in sorted(expr.free_symbols, key=str) if expr is not None else ():
                value = recorded.get(symbol)
                if value is not None and symbol not in example:
                    example[symbol] = value
                    groups.append((names.get(str(symbol), str(symbol)), [symbol]))
    return groups, example


def is_data_dependent(exc: BaseException) -> bool:
    """Whether ``exc`` is torch.export failing on a decision that depends on tensor values."""
    text = f"{type(exc).__name__} {exc}"
    return any(marker in text for marker in _DATA_DEPENDENT)


_DATA_DEPENDENT = (
    "GuardOnDataDependentSymNode",
    "data-dependent",
    "Data-dependent",
    "Dynamic control flow is not supported",
    "generic_jump",
)


def _rewrite_or_raise(model: torch.nn.Module, rewriter: ControlFlowRewriter, exc: BaseException) -> None:
    location = location_from_exception(exc, rewriter.source_files())  # transformers' own code is the model's too
    if location is None:
        raise _capture_error(model, [("non-strict", exc)], rewriter) from None
    try:
        rewriter.rewrite(location)
    except RewriteRefused as refused:
        code = linecache.getline(location.file, refused.line).strip()
        where = SourceLocation(location.file, refused.line, location.function, code)
        if refused.kind == "while":
            what, form, fix = "loops on", "while_loop", rewrite_loop.FIX
        else:
            what, form = "branches on", "torch.cond"
            fix = ("write it as torch.cond(pred, true_fn, false_fn, (tensors,)) with both functions returning "
                   "tensors of the same shapes and dtypes, e.g.\n"
                   "    y = torch.cond(x.sum() > 0, lambda x: x * 2, lambda x: -x, (x,))")
        raise CaptureError(
            f"cannot capture {type(model).__name__}: the model {what} a tensor value at "
            f"{where.file}:{where.line}, and onnxport cannot rewrite it into {form}: {refused.reason}",
            attempts=[("non-strict", str(exc))],
            location=where,
            fix=(refused.suggestion + "; " if refused.suggestion else "") + fix,
        ) from None


def _rewrite_len_or_raise(model: torch.nn.Module, rewriter: ControlFlowRewriter, exc: BaseException) -> None:
    """``len(t)`` of a dynamic first dim, at the model's line ``exc`` names, read as ``t.shape[0]``; else refused."""
    location = location_from_exception(exc, rewriter.source_files())
    try:
        if location is None:
            raise RewriteRefused("no line of the model's code is in the error's traceback", 0, kind="len")
        rewriter.rewrite_len(location)
    except RewriteRefused as refused:
        where = f" at {location.file}:{refused.line}" if location is not None else ""
        raise CaptureError(
            f"cannot capture {type(model).__name__}: the model takes len() of a tensor whose first dim is dynamic"
            f"{where}, and onnxport cannot read it as t.shape[0]: {refused.reason}",
            attempts=[("non-strict", str(exc))], location=location, fix=rewrite_len.FIX,
        ) from None


def _raise_if_loop_refused(
    model: torch.nn.Module, exc: BaseException, errors: list[tuple[str, BaseException]], rewriter: Any
) -> None:
    """A rewritten ``while`` that torch traced and ``while_loop`` cannot hold (a carried shape changes)."""
    chain = next((each for each in exception_chain(exc) if isinstance(each, _runtime.Refused)), None)
    if chain is None:
        return
    file, _, line = chain.site.rpartition(":")
    rewrites = rewriter.all_rewrites if rewriter is not None else []
    function = next((r.function for r in rewrites if (r.file, r.line) == (file, int(line))), "")
    where = SourceLocation(file, int(line), function, linecache.getline(file, int(line)).strip())
    raise CaptureError(
        f"cannot capture {type(model).__name__}: the while at {chain.site}, rewritten into while_loop, cannot be "
        f"one: {chain.reason}",
        attempts=[(name, str(e)) for name, e in errors],
        location=where,
        fix="keep every variable the loop updates at one shape and dtype (pad to a maximum size), or "
        + rewrite_loop.FIX,
    ) from None


def _data_sites(
    model: torch.nn.Module, args: tuple, kwargs: dict[str, Any], dynamic_shapes: Any, small: list[str],
    rewriter: ControlFlowRewriter | None,
) -> list[SourceLocation]:
    """The user's lines that use ``.data``, from one more non-strict capture under ``DataWatcher``."""
    watcher = _data_watch.DataWatcher()
    with contextlib.suppress(Exception):  # it fails again; only the lines it passed matter
        with _capturing(model, small, rewriter), watcher:
            torch.export.export(model, args, kwargs, dynamic_shapes=dynamic_shapes, strict=False)
    return watcher.sites


def _rewrite_data(
    model: torch.nn.Module, rewriter: ControlFlowRewriter, sites: list[SourceLocation],
    errors: list[tuple[str, BaseException]],
) -> bool:
    """Rewrite ``.data`` on each line not rewritten yet; False when there was none."""
    done = {(r.file, r.line) for r in rewriter.all_rewrites if r.kind == "data"}
    new = [site for site in sites if (site.file, site.line) not in done]
    for site in new:
        try:
            rewriter.rewrite_data(site)
        except RewriteRefused as refused:
            raise CaptureError(
                f"cannot capture {type(model).__name__}: it uses .data at {site.file}:{site.line}, which torch.export "
                f"cannot trace, and onnxport cannot read it as .detach(): {refused.reason}",
                attempts=[(name, str(e)) for name, e in errors],
                location=site,
                fix=refused.suggestion or rewrite_data.FIX,
            ) from None
    return bool(new)


def _refuse_state_writes(model: torch.nn.Module, ep: torch.export.ExportedProgram, rewriter: Any) -> None:
    """After ``.data`` was read as ``.detach()``: an in-place write through it into a parameter or buffer
    would change the model at every call, which an ONNX model cannot do."""
    data = [r for r in (rewriter.all_rewrites if rewriter is not None else []) if r.kind == "data"]
    writes = _data_watch.state_writes(ep) if data else []
    if not writes:
        return
    name, where = writes[0]
    lines = ", ".join(f"{r.file}:{r.line}" for r in data)
    raise CaptureError(
        f"cannot capture {type(model).__name__}: it writes in place into its {name!r}"
        f"{f' at {where.file}:{where.line}' if where else ''} through a tensor read with .data ({lines}); that "
        "changes the model's own state at every call, and an ONNX model has no state to change",
        location=where,
        fix="compute a new tensor instead (w = self.w * 2) and use it, or make the change once, before export",
    )


def refuse_state_updates(
    model: torch.nn.Module, ep: torch.export.ExportedProgram, captured: torch.export.ExportedProgram
) -> list[str]:
    """Refuse a model whose forward updates its own buffers or parameters (``self.steps.add_(1)``,
    ``self.total = self.total + x``): an ONNX model has no state, so it would read the value they had at
    export at every call and drop the update. ``ep`` is the functionalized program (its signature lists the
    updates; torch.export's training IR lists none before), ``captured`` the program as captured, whose
    in-place ops give the user's lines.

    BatchNorm's running statistics in training mode are let through (``_warn_training`` warns about the mode;
    the outputs use the batch's statistics, not them): returns the names of those updated so.
    """
    signature = ep.graph_signature
    kept = _written_back_unchanged(ep)
    buffers = [b for b in dict.fromkeys(signature.buffers_to_mutate.values()) if b not in kept]
    updated = buffers + [p for p in dict.fromkeys(signature.parameters_to_mutate.values())
                         if p not in buffers and p not in kept]
    allowed = [name for name in buffers if _train_statistic(model, name)]
    refused = [name for name in updated if name not in allowed]
    if not refused:
        return allowed
    sites: dict[str, SourceLocation] = {}
    for name, where in _data_watch.state_writes(captured, through_data=False):
        if where is not None:
            sites.setdefault(name, where)
    output = next(n for n in reversed(ep.graph.nodes) if n.op == "output")
    for value, spec in zip(output.args[0], signature.output_specs):
        where = location_from_stack_trace(value.meta.get("stack_trace")) if isinstance(value, torch.fx.Node) else None
        if spec.target is not None and where is not None:
            sites.setdefault(spec.target, where)  # the functional form of the write: ``self.total = ...``
    groups: dict[tuple[str, int] | None, list[str]] = {}  # the names written on each line, in order
    for name in refused:
        where = sites.get(name)
        groups.setdefault((where.file, where.line) if where else None, []).append(repr(name))
    one_line = len(groups) == 1  # the location says where
    if one_line:
        shown = _listed(next(iter(groups.values())))
    else:
        shown = _listed([", ".join(names) + (f" (at {at[0]}:{at[1]})" if at else "") for at, names in groups.items()])
    counts = collections.Counter("buffer" if name in buffers else "parameter" for name in refused)
    what = "the " + " and ".join(f"{kind}{'s' if counts[kind] > 1 else ''}" for kind in ("buffer", "parameter")
                                 if counts[kind])
    raise CaptureError(
        f"cannot export {type(model).__name__}: its forward updates {what} {shown}; an ONNX model has no state, "
        "so it would read the value at export on every call and drop the update, where eager PyTorch keeps it "
        "(the two part ways from the second call on)",
        location=next((sites[name] for name in refused if name in sites), None),
        fix="pass the state as an input and return its new value as an output (forward(self, x, steps) returning "
        "(y, steps + 1)), and carry it from call to call yourself; or, if the update need not repeat, make it "
        "once before export and leave it out of forward",
    )


# Ops whose result holds the values of their input, as a write-back of a buffer to itself passes through them.
_SAME_VALUES = ("aten::alias", "aten::clone", "aten::detach", "aten::lift_fresh_copy", "aten::_to_copy",
                "aten::to")


def _written_back_unchanged(ep: torch.export.ExportedProgram) -> set[str]:
    """The buffers and parameters forward "updates" with their own value (``self.table = self.table.to(device,
    dtype)`` of the dtype it has, as some transformers models do at every call): no state changes, and the ONNX
    model reading them as constants computes what eager does."""
    signature = ep.graph_signature
    sources = {**signature.inputs_to_buffers, **signature.inputs_to_parameters}  # placeholder -> its name
    output = next(n for n in reversed(ep.graph.nodes) if n.op == "output")
    kept = set()
    for value, spec in zip(output.args[0], signature.output_specs):
        if spec.target is None or not isinstance(value, torch.fx.Node):
            continue
        node = value
        while node.op == "call_function" and getattr(node.target, "name", lambda: "")().split(".")[0] in _SAME_VALUES \
                and node.args and isinstance(node.args[0], torch.fx.Node) \
                and node.meta.get("val") is not None and node.args[0].meta.get("val") is not None \
                and node.meta["val"].dtype == node.args[0].meta["val"].dtype:
            node = node.args[0]
        if node.op == "placeholder" and sources.get(node.name) == spec.target:
            kept.add(spec.target)
    return kept


def _train_statistic(model: torch.nn.Module, name: str) -> bool:
    """Whether buffer ``name`` belongs to a module in training mode of a kind that updates its statistics
    at every call (BatchNorm's running mean, variance and batch count)."""
    prefix, _, attr = name.rpartition(".")
    try:
        module = model.get_submodule(prefix)
    except AttributeError:
        return False
    return module.training and isinstance(module, _TRAIN_SENSITIVE) and attr in module._buffers


def _listed(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _data_error(
    model: torch.nn.Module, sites: list[SourceLocation], errors: list[tuple[str, BaseException]]
) -> CaptureError:
    """``.data`` with the rewrite turned off (``rewrite_control_flow=False``)."""
    tried = "; ".join(f"{name}: {_first_line(e)}" for name, e in errors)
    return CaptureError(
        f"cannot capture {type(model).__name__}: it uses .data at {sites[0].file}:{sites[0].line}, which torch.export "
        "cannot trace (the tensor it returns is invisible to the tracer, so its value would be frozen into the "
        f"program).\n  tried: {tried}",
        attempts=[(name, str(e)) for name, e in errors],
        location=sites[0],
        fix=rewrite_data.FIX
        + "; or leave rewrite_control_flow on, and onnxport reads .data as .detach() during export",
    )


def _warn_training(model: torch.nn.Module, report: Report) -> None:
    training = sorted({type(m).__name__ for m in model.modules() if m.training and isinstance(m, _TRAIN_SENSITIVE)})
    if training:
        message = (
            f"the model is in training mode ({', '.join(training)} behave as in training: random dropout, "
            "batch statistics); call model.eval() before export for an inference model"
        )
        report.warn(message)
        warnings.warn(f"onnxport: {message}", stacklevel=4)


_NOISY_LOGGERS = (
    "torch.fx.experimental.symbolic_shapes", "torch._dynamo", "torch.export", "torch._export", "torch._guards",
    "torch._subclasses.fake_tensor",
)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """torch logs warnings and whole graphs while failing; the error onnxport raises says it better."""
    loggers = [logging.getLogger(name) for name in _NOISY_LOGGERS]
    levels = [logger.level for logger in loggers]
    try:
        for logger in loggers:
            logger.setLevel(logging.CRITICAL)
        # torch.export also prints the partial graph of a failure straight to stderr.
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore", FutureWarning)
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def _raise_if_eager_refuses(model: torch.nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
    """When capture failed, check the example itself: a model that refuses it in eager gets that said."""
    try:
        with torch.no_grad(), _quiet():
            model(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the model's own error, whatever its type
        shapes = ", ".join(
            f"{label}={str(t.dtype).replace('torch.', '')}{list(t.shape)}"
            for _, label, t in dynamic.tensor_leaves(model, args, kwargs)
        )
        raise InvalidInputError(
            f"{type(model).__name__} refuses the example inputs in eager PyTorch, before any export: "
            f"{_first_line(exc)}\n  inputs: {shapes}",
            location=location_from_exception(exc),
            fix="pass example inputs the model accepts: check that model(*args, **kwargs) runs in eager PyTorch",
        ) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def _capture_error(
    model: torch.nn.Module, errors: list[tuple[str, BaseException]], rewriter: ControlFlowRewriter | None = None
) -> CaptureError:
    files = model_files(model)  # a library's modeling file (transformers') is the model's own code too
    location = next((loc for loc in (location_from_exception(e, files) for _, e in errors) if loc), None)
    text = " ".join(str(e) for _, e in errors)
    rewrites = rewriter.rewrites if rewriter is not None else []
    if rewrites and "cond" in text:
        last = rewrites[-1]
        cause = (
            f"the if at {last.file}:{last.line}, rewritten into torch.cond, has branches torch.cond refuses "
            "(they must return tensors of the same shapes and dtypes, and not change their inputs)"
        )
        fix = "make both branches return tensors of the same shapes and dtypes, then torch.cond can hold them"
        location = SourceLocation(last.file, last.line, last.function, linecache.getline(last.file, last.line).strip())
    elif any(is_data_dependent(e) for _, e in errors):
        cause = "the model branches on the value of a tensor (data-dependent control flow)"
        fix = (
            "write the branch with torch.cond(pred, true_fn, false_fn, (operands,)), or keep the decision "
            "out of forward; see docs/control-flow.md"
        )
    elif any(rewrite_len.is_dynamic_length(e) for _, e in errors):  # with rewrite_control_flow=False
        cause = "the model takes len() of a tensor whose first dim is dynamic, which must be a Python int"
        fix = rewrite_len.FIX + "; or leave rewrite_control_flow on, and onnxport reads it so during export"
    elif "Constraints violated" in text or "specializ" in text:
        cause = "the dynamic shapes asked for cannot hold for this model"
        fix = "follow torch's suggested dynamic_shapes in the error below, or relax the Dim ranges"
    elif location is not None:
        cause = "torch.export could not capture the model"
        fix = "simplify the line shown (Python side effects, unsupported builtins), or export a submodule"
    elif (ours := next((e for _, e in errors if isinstance(e, OnnxportError)), None)) is not None:
        cause = "torch.export could not capture the model, onnxport stopping it (below)"  # not torch's own failure
        fix = getattr(ours, "fix", None) or "see the error of the first attempt below"
    else:  # torch failed in its own code: its traceback names no line of the model
        cause = "torch.export could not capture the model, failing in its own code at no line of the model's"
        fix = ("export the model's submodules one at a time to find the one torch fails on, and report the model to "
               "onnxport")
    tried = "; ".join(f"{name}: {_first_line(e)}" for name, e in errors)
    return CaptureError(
        f"cannot capture {type(model).__name__}: {cause}.\n  tried: {tried}",
        attempts=[(name, str(e)) for name, e in errors],
        location=location,
        fix=fix,
    )
