"""Explain every graph break of a model in one pass: what breaks, on which line of the user's code, and the fix.

``torch.export`` stops at the first problem, so fixing a model one error at a time takes as many export runs
as there are problems. ``diagnose`` gathers evidence from four probes that each see a different class of
problem, and merges them:

* ``torch._dynamo.explain``: every graph break TorchDynamo meets, each with its reason and user stack;
* ``torch.export.export`` non-strict and strict, once each: the first error of each (non-strict sees
  data-dependent guards from ``.item()`` decisions; strict sees builtins such as ``id()`` that non-strict
  silently bakes in as constants);
* an eager run under a ``TorchFunctionMode``: ``.data`` accesses and tensor -> numpy conversions, which
  recent TorchDynamo traces through without a graph break but non-strict export cannot capture;
* a look at the source of every user ``forward``: ``id()`` calls and ``try``/``except`` blocks, which trace
  "successfully" but freeze the path taken by the example inputs into the graph.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import inspect
import io
import linecache
import logging
import re
import sys
import textwrap
import types
import warnings
from collections.abc import Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

from onnxport.capture.strategies import check_inputs
from onnxport.capture.patch import ControlFlowRewriter
from onnxport.capture.rewrite import FunctionRewrite, RewriteRefused
from onnxport.errors import SourceLocation, is_user_file, location_from_exception
from onnxport.serial import serialized

__all__ = ["Diagnosis", "Issue", "diagnose"]

# ---------------------------------------------------------------------------------------------
# What onnxport knows about each kind of problem.

_NON_STRICT = "non-strict export (torch.export.export(strict=False))"
_STRICT = "strict export (torch.export.export(strict=True), TorchDynamo)"
_REWRITE = "automatic rewrite of the `if` into torch.cond (export(rewrite_control_flow=True), the default)"
_WHILE_REWRITE = "automatic rewrite of the `while` into while_loop (export(rewrite_control_flow=True), the default)"
_DATA_REWRITE = (
    "automatic reading of `t.data` as `t.detach()` during export (export(rewrite_control_flow=True), the default)"
)

CONTROL_FLOW = "data-dependent control flow"
SCALAR = "tensor to Python scalar"
DATA = ".data access"
BUILTIN = "untraceable builtin"
NUMPY = "numpy on tensor"
SIDE_EFFECT = "side effect (print/logging)"
EXCEPTION = "exception handling"
OTHER = "other"


@dataclasses.dataclass(frozen=True)
class _Rule:
    """One kind of problem: how torch words it, how bad it is, and what to do about it."""

    category: str
    patterns: tuple[str, ...]  # regexes searched in "ExceptionType: message" or a graph-break reason
    severity: str
    fix: str
    strategies: tuple[str, ...] = (_NON_STRICT, _STRICT)
    # True when a capture that "works" still computes the wrong thing (a constant baked in), so the
    # problem stays an error even though some export strategy succeeds.
    wrong_when_captured: bool = False


# Order matters: the first rule whose pattern matches wins, so the specific ones come first.
RULES: tuple[_Rule, ...] = (
    _Rule(
        SCALAR,
        (r"Tensor\.item\(\)", r"Tensor\.tolist", r"_local_scalar_dense"),
        "error",
        "keep the value a tensor; use torch.cond, or torch._check to bound it",
    ),
    _Rule(
        CONTROL_FLOW,
        (r"generic_jump", r"[Dd]ata-dependent (jump|branching)", r"Dynamic control flow",
         r"GuardOnDataDependentSymNode", r"guard on data-dependent"),
        "error",
        "write it with torch.cond(pred, true_fn, false_fn, operands) — onnxport does this rewrite automatically",
        (_REWRITE, _NON_STRICT, _STRICT),
    ),
    _Rule(
        BUILTIN,
        (r"FakeIdVariable", r"builtin `?id`?\b", r"\bid\(\)"),
        "error",
        "do not branch on object identity in forward; move it to __init__",
        wrong_when_captured=True,
    ),
    _Rule(
        DATA,
        (r"\.data\b", r"fake tensor in the exported program constant"),
        "error",
        "use x.detach() or operate on x directly; .data bypasses tracing (onnxport reads it as .detach() during "
        "export, except an assignment to .data or a write through it into the model's parameters)",
        (_DATA_REWRITE, _NON_STRICT, _STRICT),
    ),
    _Rule(
        NUMPY,
        (r"\.numpy\(\)", r"__array__", r"\bnumpy\b", r"\bnp\."),
        "error",
        "use the torch equivalent (torch.sin, ...)",
    ),
    _Rule(
        SIDE_EFFECT,
        (r"`print`", r"\bprint\(", r"[Ll]ogging", r"LoggerVariable"),
        "warning",
        "remove print/logging from forward (or guard it with `if not torch.compiler.is_exporting():`)",
    ),
    _Rule(
        EXCEPTION,
        (r"\braise\b", r"try/except", r"[Ee]xception handling", r"Observed exception",
         r"RERAISE|PUSH_EXC_INFO|CHECK_EXC_MATCH|SETUP_FINALLY"),
        "warning",
        "move validation out of forward, or use torch._check(cond, msg)",
    ),
)
_OTHER_RULE = _Rule(OTHER, (), "error", "see the reason; simplify that line or export a submodule")
_BY_CATEGORY = {rule.category: rule for rule in (*RULES, _OTHER_RULE)}
_LOOP_FIX = (
    "only an `if` can become torch.cond: write a loop on a tensor value with "
    "torch._higher_order_ops.while_loop(cond_fn, body_fn, carried_inputs), or keep the decision out of forward"
)
_WHILE_FIX = (
    "onnxport rewrites the `while` into torch._higher_order_ops.while_loop, which needs every variable the loop "
    "updates to keep its shape and dtype; or write the while_loop(cond_fn, body_fn, carried_inputs) yourself"
)


def _classify(text: str) -> _Rule:
    """The first rule whose pattern occurs in ``text`` (only its head: torch's hints mention everything)."""
    head = text[:600]
    return next((r for r in RULES if any(re.search(p, head) for p in r.patterns)), _OTHER_RULE)


# ---------------------------------------------------------------------------------------------
# Results.


@dataclasses.dataclass(frozen=True)
class Issue:
    """One problem on one line of the user's code."""

    category: str
    severity: str  # "error" or "warning"
    location: SourceLocation | None
    reason: str  # torch's words (first line), or what the probe saw
    strategies: tuple[str, ...]  # what onnxport tries for it on its own
    fix: str

    def __str__(self) -> str:
        where = "(location unknown)"
        if self.location is not None:
            where = f"{self.location.file}:{self.location.line}"
            where += f" in {self.location.function}" if self.location.function else ""
        lines = [f"{self.severity}: {self.category}", f"  at {where}"]
        if self.location is not None and self.location.code:
            lines.append(f"      {self.location.code}")
        lines.append(f"  reason: {self.reason}")
        lines.append(f"  onnxport tries: {'; '.join(self.strategies)}")
        lines.append(f"  fix: {self.fix}")
        return "\n".join(lines)


@dataclasses.dataclass
class Diagnosis:
    """Every issue found, and whether ``torch.export`` captures the model as it is."""

    issues: list[Issue]
    capturable: bool  # torch.export.export(strict=False) succeeded
    attempts: dict[str, str | None] = dataclasses.field(default_factory=dict)  # strategy -> first error

    @property
    def ok(self) -> bool:
        """No error-severity issue (warnings may remain)."""
        return not any(i.severity == "error" for i in self.issues)

    def __str__(self) -> str:
        blocks = [str(issue) for issue in self.issues]
        status = [f"{name}: {'captures the model' if err is None else 'fails: ' + err}"
                  for name, err in self.attempts.items()]
        return "\n\n".join([*blocks, "\n".join([*status, self.summary()])])

    def summary(self) -> str:
        """One line: how many issues of each severity."""
        if not self.issues:
            return "no graph breaks found"
        errors = sum(i.severity == "error" for i in self.issues)
        warns = len(self.issues) - errors
        return (f"{_plural(len(self.issues), 'graph break')}: "
                f"{_plural(errors, 'error')}, {_plural(warns, 'warning')}")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


# ---------------------------------------------------------------------------------------------
# The driver.


@dataclasses.dataclass(frozen=True)
class _Finding:
    """Raw evidence from a probe; ``category`` is set when the probe already knows it."""

    reason: str
    location: SourceLocation | None
    category: str | None = None


@serialized
def diagnose(model: Any, args: Any = (), kwargs: dict[str, Any] | None = None) -> Diagnosis:
    """Find every graph break of ``model`` on ``args``/``kwargs`` at once and say how to fix each.

    Runs TorchDynamo's explain, torch.export non-strict and strict once each, an eager run that watches for
    ``.data`` and numpy conversions, and a look at the source of each user ``forward``. The exported programs
    are thrown away and the example inputs are copied for each probe, so neither the model's result nor the
    inputs change.
    """
    model, args, kwargs = check_inputs(model, args, kwargs)
    findings: list[_Finding] = []
    attempts: dict[str, str | None] = {}
    with _quiet():
        findings += _explain_findings(model, args, kwargs)
        for name, strict in (("non-strict export", False), ("strict export", True)):
            error = _export_error(model, args, kwargs, strict)
            attempts[name] = None if error is None else _first_line(error)
            if error is not None:
                category = _classify(_head(error)).category
                findings.append(_Finding(_first_line(error), _exception_location(error), category))
        findings += _runtime_findings(model, args, kwargs)
    findings += _source_findings(model)
    captured = any(err is None for err in attempts.values())
    issues = _dedupe([_issue(f, captured, model) for f in findings])
    return Diagnosis(issues, capturable=attempts["non-strict export"] is None, attempts=attempts)


def _issue(finding: _Finding, captured: bool, model: torch.nn.Module) -> Issue:
    """Turn a finding into an issue: look up its rule, then settle severity and fix for this line."""
    rule = _BY_CATEGORY[finding.category] if finding.category else _classify(finding.reason)
    if rule.category == CONTROL_FLOW:
        return _control_flow_issue(finding, rule, model)
    # When some export strategy already captures the model, the problem no longer blocks the export.
    severity = "warning" if captured and not rule.wrong_when_captured else rule.severity
    return Issue(rule.category, severity, finding.location, finding.reason, rule.strategies, rule.fix)


def _control_flow_issue(finding: _Finding, rule: _Rule, model: torch.nn.Module) -> Issue:
    """A data-dependent decision: its fix depends on the statement that makes it."""
    kind = _if_kind(finding.location) if finding.location is not None else None
    if kind == "raise":
        # `if bad(x): raise ...` is validation, not a branch: torch.cond branches cannot raise.
        check = _BY_CATEGORY[EXCEPTION]
        return Issue(check.category, "error", finding.location, finding.reason, check.strategies, check.fix)
    if kind == "if":
        return Issue(rule.category, "warning", finding.location, finding.reason, rule.strategies, rule.fix)
    if kind == "while":
        refused = _while_refusal(model, finding.location)
        if refused is None:
            strategies = (_WHILE_REWRITE, *rule.strategies[1:])
            return Issue(rule.category, "warning", finding.location, finding.reason, strategies, _WHILE_FIX)
        reason = f"{finding.reason}; onnxport cannot rewrite the while into while_loop: {refused}"
        return Issue(rule.category, "error", finding.location, reason, rule.strategies[1:], _LOOP_FIX)
    # Comprehensions and other loops: no rewrite applies, the export strategies still run.
    return Issue(rule.category, "error", finding.location, finding.reason, rule.strategies[1:], _LOOP_FIX)


def _while_refusal(model: torch.nn.Module, location: SourceLocation) -> str | None:
    """Why the export's rewrite would refuse the ``while`` at ``location`` (None when it takes it), tried on
    a copy of the function's syntax tree: nothing is patched."""
    try:
        fn = ControlFlowRewriter(model).function_at(location)
        if fn is None:
            return "onnxport does not find the function that holds it"
        FunctionRewrite(fn).rewrite_at(location.line)
    except RewriteRefused as refused:
        return refused.reason
    return None


def _dedupe(issues: list[Issue]) -> list[Issue]:
    """One issue per (category, file, line); drop location-less ones that a located one explains."""
    seen: dict[tuple[str, str, int], Issue] = {}
    for issue in issues:
        loc = issue.location
        seen.setdefault((issue.category, loc.file if loc else "", loc.line if loc else 0), issue)
    located = {cat for cat, file, _ in seen if file}
    kept = [i for (cat, file, _), i in seen.items() if file or cat not in located]
    return sorted(kept, key=lambda i: (i.location is None, i.location.file if i.location else "",
                                       i.location.line if i.location else 0))


# ---------------------------------------------------------------------------------------------
# Probes.


def _explain_findings(model: torch.nn.Module, args: tuple, kwargs: dict) -> list[_Finding]:
    """Every graph break TorchDynamo reports, at the innermost user frame of its stack."""
    torch._dynamo.reset()
    try:
        with torch.no_grad():
            explained = torch._dynamo.explain(model)(*_clone(args), **_clone(kwargs))
    except Exception as exc:  # noqa: BLE001 - explain re-raises whatever the model or dynamo raised
        return [_Finding(_first_line(exc), _exception_location(exc), _classify(_head(exc)).category)]
    finally:
        torch._dynamo.reset()
    findings = []
    for brk in explained.break_reasons:
        frames = [_frame_location(f.filename, f.lineno, f.name, f.line) for f in brk.user_stack]
        user = [f for f in frames if is_user_file(f.file)]
        findings.append(_Finding(brk.reason.strip().splitlines()[0], user[-1] if user else None,
                                 _classify(brk.reason).category))
    return findings


def _export_error(model: torch.nn.Module, args: tuple, kwargs: dict, strict: bool) -> BaseException | None:
    """The error of one torch.export attempt, or None when it captures the model."""
    try:
        torch.export.export(model, _clone(args), _clone(kwargs), strict=strict)
    except Exception as exc:  # noqa: BLE001 - torch.export raises many unrelated types
        return exc
    finally:
        torch._dynamo.reset()
    return None


_PLUMBING = frozenset({__file__, torch._tensor.__file__, torch.overrides.__file__})
# The getset descriptor behind ``Tensor.data``: a TorchFunctionMode sees its __get__/__set__ method-wrappers.
_DATA_DESCRIPTOR = torch._C.TensorBase.__dict__["data"]


class _Watcher(TorchFunctionMode):
    """Records user lines that read ``.data`` or turn a tensor into a numpy array."""

    _NUMPY = {torch.Tensor.__array__: "tensor converted by numpy (np.* on a tensor)",
              torch._C.TensorBase.numpy: "Tensor.numpy() call"}

    def __init__(self) -> None:
        super().__init__()
        self.findings: list[_Finding] = []

    def __torch_function__(self, func: Any, types_: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        found = self._what(func)
        if found is not None:
            location = _caller_location(sys._getframe(1))
            if location is not None:
                self.findings.append(_Finding(found[1], location, found[0]))
        return func(*args, **(kwargs or {}))

    def _what(self, func: Any) -> tuple[str, str] | None:
        if getattr(func, "__self__", None) is _DATA_DESCRIPTOR:
            return DATA, "Tensor.data accessed in forward"
        reason = self._NUMPY.get(func)
        return (NUMPY, reason) if reason else None


def _runtime_findings(model: torch.nn.Module, args: tuple, kwargs: dict) -> list[_Finding]:
    """Run the model eagerly once and collect what ``_Watcher`` saw."""
    watcher = _Watcher()
    try:
        with torch.no_grad(), watcher:
            model(*_clone(args), **_clone(kwargs))
    except Exception as exc:  # noqa: BLE001 - the user's model may raise anything
        reason = f"the model fails in eager mode: {_first_line(exc)}"
        return [*watcher.findings, _Finding(reason, _exception_location(exc), OTHER)]
    return watcher.findings


def _source_findings(model: torch.nn.Module) -> list[_Finding]:
    """``id()`` calls and ``try`` blocks in the source of every user ``forward`` (they trace, but freeze)."""
    findings = []
    for fn in _user_functions(model):
        try:
            lines, start = inspect.getsourcelines(fn)
            tree = ast.parse(textwrap.dedent("".join(lines)))
        except (OSError, TypeError, SyntaxError):
            continue  # no source (built in a REPL, compiled): the other probes still run
        file = fn.__code__.co_filename
        for node, category, reason in _suspicious_nodes(tree, fn.__globals__):
            line = start + node.lineno - 1
            findings.append(_Finding(reason, _frame_location(file, line, fn.__name__, None), category))
    return findings


def _suspicious_nodes(tree: ast.AST, globals_: dict[str, Any]) -> Iterator[tuple[ast.AST, str, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            yield node, EXCEPTION, "try/except in forward: only the path taken by the example inputs is captured"
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "id"
              and "id" not in globals_):
            yield node, BUILTIN, "builtin id() in forward: its value is baked into the graph as a constant"


def _user_functions(model: torch.nn.Module) -> list[types.FunctionType]:
    """The ``forward`` of every submodule (or the wrapped function) whose code lives in the user's files."""
    seen: set[types.CodeType] = set()
    functions = []
    for module in model.modules():
        fn = inspect.unwrap(getattr(module, "fn", None) or type(module).forward)
        code = getattr(fn, "__code__", None)
        if code is None or code in seen or not is_user_file(code.co_filename):
            continue
        seen.add(code)
        functions.append(fn)
    return functions


# ---------------------------------------------------------------------------------------------
# Helpers.


def _if_kind(location: SourceLocation) -> str | None:
    """What tests on ``location``'s line: "raise" (an ``if`` whose body raises), "if" (an ``if`` statement or
    conditional expression, which the rewrite turns into torch.cond), "while" (a ``while`` statement, which
    it turns into while_loop), or None (a ``for`` loop, a comprehension)."""
    try:
        tree = ast.parse("".join(linecache.getlines(location.file)))
    except (SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.IfExp)) and node.test.lineno <= location.line <= (node.test.end_lineno or 0):
            raises = isinstance(node, ast.If) and any(isinstance(stmt, ast.Raise) for stmt in node.body)
            return "raise" if raises else "if"
        if isinstance(node, ast.While) and node.test.lineno <= location.line <= (node.test.end_lineno or 0):
            return "while"
    return None


def _frame_location(file: str, line: int | None, function: str, code: str | None) -> SourceLocation:
    """A SourceLocation, reading the code line from the file when the frame lacks it."""
    line = line or 0
    code = (code or linecache.getline(file, line)).strip()
    # Dynamo names the code after a graph break "torch_dynamo_resume_in_forward_at_30"; say "forward".
    match = re.fullmatch(r"torch_dynamo_resume_in_(\w+?)_at_\d+", function)
    return SourceLocation(file, line, match.group(1) if match else function, code)


def _exception_location(exc: BaseException) -> SourceLocation | None:
    """The user's line behind ``exc``, its code read from the file (torch's quoted frames may lack it)."""
    loc = location_from_exception(exc)
    if loc is None:
        return None
    return _frame_location(loc.file, loc.line, loc.function, linecache.getline(loc.file, loc.line) or loc.code)


def _caller_location(frame: types.FrameType | None) -> SourceLocation | None:
    """The frame that called into torch, if it is the user's; torch's own ``.data`` uses are not reported."""
    # Tensor.__array__ is Python code that forwards to handle_torch_function: step over that plumbing.
    while frame is not None and frame.f_code.co_filename in _PLUMBING:
        frame = frame.f_back
    if frame is None or not is_user_file(frame.f_code.co_filename):
        return None
    return _frame_location(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name, None)


def _clone(tree: Any) -> Any:
    """Fresh copies of the example tensors: probes run the model, which may mutate its inputs."""
    return pytree.tree_map(lambda v: v.clone() if isinstance(v, torch.Tensor) else v, tree)


def _head(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence the probes: failed exports print graphs, dynamo logs each graph break, the model may print."""
    previous = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(previous)
