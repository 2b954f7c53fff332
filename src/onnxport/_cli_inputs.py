"""What the command line exports: the target (``FILE.py:NAME`` or a saved ``.pt2`` program), its weights,
and its example inputs with their dynamic dims, read from ``--input`` specs such as ``x=float32[batch,3]``."""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import logging
import math
import os
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch.utils import _pytree as pytree

from onnxport.errors import InvalidInputError, location_from_exception

DTYPES = {
    "float32": torch.float32, "float": torch.float32, "float16": torch.float16, "half": torch.float16,
    "bfloat16": torch.bfloat16, "float64": torch.float64, "int64": torch.int64, "long": torch.int64,
    "int32": torch.int32, "int": torch.int32, "bool": torch.bool,
}
_INPUT_RE = re.compile(
    r"^(?:(?P<name>[A-Za-z_]\w*)=)?(?P<dtype>\w+)\[(?P<dims>[\w=,\s]*)\](?:~(?P<lo>-?\d+):(?P<hi>-?\d+))?$"
)
_DIM_RE = re.compile(r"^(?:(?P<size>\d+)|(?P<name>[A-Za-z_]\w*)(?:=(?P<example>\d+))?)$")
_INPUT_FIX = (
    "write NAME=DTYPE[D0,D1,...] with sizes or dim names, e.g. x=float32[batch,3,224,224], "
    "x=float32[batch=1,3,224,224] (example size 1) or ids=int64[1,16]~0:30522; dtypes: " + ", ".join(sorted(DTYPES))
)
# Named dims without an example size get distinct sizes of 2 and more: torch.export would fix 0 and 1, and
# distinct sizes keep two dims from being mistaken for one.
_FIRST_EXAMPLE_SIZE = 2


@dataclasses.dataclass
class Target:
    """A model to export and what it carries: example args/kwargs and dynamic shapes (from a ``.pt2``)."""

    model: torch.nn.Module
    args: tuple | None = None
    kwargs: dict[str, Any] | None = None
    dynamic_shapes: Any = None


@dataclasses.dataclass
class Inputs:
    """Example inputs for ``onnxport.export`` and the options that go with them."""

    args: tuple
    kwargs: dict[str, Any]
    input_names: list[str] | None
    dynamic_shapes: Any


@dataclasses.dataclass
class _Spec:
    name: str | None
    dtype: torch.dtype
    dims: list[int | str]
    low: int
    high: int


def load_target(spec: str) -> Target:
    """``FILE.py:NAME`` (see ``_load_python``) or ``FILE.pt2``, a program saved by ``torch.export.save``."""
    if spec.endswith(".pt2"):
        return _load_program(spec)
    return _load_python(spec)


def _load_python(spec: str) -> Target:
    """``NAME`` is a module class (built with no arguments), an instance, or a function returning a model or
    ``(model, example_args)``."""
    path, sep, name = spec.rpartition(":")
    if not sep or not path.endswith(".py") or not name:
        raise InvalidInputError(f"cannot read {spec!r}", fix="write FILE.py:NAME (e.g. models/net.py:Net) or FILE.pt2")
    _check_file(path)
    module_name = f"_onnxport_user_{os.path.splitext(os.path.basename(path))[0]}"
    loader_spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(loader_spec)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    sys.modules[module_name] = module
    _call_user(f"importing {path}", loader_spec.loader.exec_module, module)
    if not hasattr(module, name):
        names = ", ".join(n for n in dir(module) if not n.startswith("_"))
        raise InvalidInputError(f"{path} has no {name!r}", fix=f"pick one of: {names}")
    obj = getattr(module, name)
    if not isinstance(obj, torch.nn.Module) and callable(obj):  # a module class, or a factory
        obj = _call_user(f"calling {name}()", obj)
    example = None
    if isinstance(obj, tuple) and len(obj) == 2 and isinstance(obj[0], torch.nn.Module):
        obj, example = obj
    if not isinstance(obj, torch.nn.Module):
        raise InvalidInputError(f"{spec} gave a {type(obj).__name__}, not a torch.nn.Module",
                                fix="point NAME at a module class, instance, or a function returning one")
    if example is not None and not isinstance(example, tuple):
        example = (example,)
    return Target(obj.eval(), example)


def _load_program(path: str) -> Target:
    """``ep.module()`` with the program's example inputs and, per symbolic dim, a ``Dim`` with its range."""
    _check_file(path)
    # torch >= 2.15 logs the whole traceback of a file it cannot read before raising; the error below says it
    logger = logging.getLogger("torch.export")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        ep = torch.export.load(path)
    except Exception as exc:  # noqa: BLE001 - torch raises zipfile, pickle and runtime errors here
        raise InvalidInputError(f"{path} is not a saved torch.export program: {_first_line(exc)}",
                                fix="save one with torch.export.save(ep, 'model.pt2')") from None
    finally:
        logger.setLevel(level)
    args, kwargs = ep.example_inputs or (None, None)
    module = ep.module()
    return Target(module, args, kwargs, _program_dynamic_shapes(ep, module, args, kwargs))


def _program_dynamic_shapes(ep: torch.export.ExportedProgram, module: torch.nn.Module, args: Any, kwargs: Any) -> Any:
    """Dims named ``<input>_dim<k>`` (the names given at export are not saved), one ``Dim`` per symbol so
    that shared dims stay shared; a derived size (``2*s0``) is left to ``Dim.AUTO``."""
    if args is None:
        return None
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    dims: dict[Any, torch.export.Dim] = {}
    specs = []
    for name in ep.graph_signature.user_inputs:
        val = placeholders[name].meta.get("val")
        spec = {}
        for k, size in enumerate(getattr(val, "shape", ())):
            if isinstance(size, torch.SymInt):
                expr = size.node.expr
                if expr.is_Symbol and expr not in dims:
                    dims[expr] = _dim(f"{name}_dim{k}", ep.range_constraints.get(expr))
                spec[k] = dims[expr] if expr.is_Symbol else torch.export.Dim.AUTO
        specs.append(spec or None)
    if not dims and not any(specs):
        return None
    leaves, tree = pytree.tree_flatten((tuple(args), dict(kwargs or {})))
    if len(leaves) != len(specs):
        return None
    arg_specs, kwarg_specs = pytree.tree_unflatten(specs, tree)
    if not kwarg_specs:
        return tuple(arg_specs)
    bound = inspect.signature(module.forward).bind(*arg_specs, **kwarg_specs)
    return dict(bound.arguments)


def _dim(name: str, bounds: Any) -> torch.export.Dim:
    # Sizes 0 and 1 are specialised by torch.export; a range starting there is the default range.
    low = int(bounds.lower) if bounds is not None and bounds.lower >= 2 else None
    high = int(bounds.upper) if bounds is not None and math.isfinite(float(bounds.upper)) else None
    return torch.export.Dim(name, min=low, max=high)


def load_weights(model: torch.nn.Module, path: str) -> None:
    """Load a state dict (``torch.save``, read with ``weights_only=True``) or a ``.safetensors`` file."""
    _check_file(path)
    if path.endswith(".safetensors"):
        try:
            from safetensors.torch import load_file
        except ImportError:
            raise InvalidInputError(f"reading {path} needs the safetensors package",
                                    fix="pip install safetensors") from None
        reader = lambda: load_file(path, device="cpu")  # noqa: E731
    else:
        reader = lambda: torch.load(path, map_location="cpu", weights_only=True)  # noqa: E731
    try:
        state = reader()
    except Exception as exc:  # noqa: BLE001 - pickle, zipfile and safetensors raise their own types
        raise InvalidInputError(
            f"cannot read the weights in {path}: {_first_line(exc)}",
            fix="give a state dict saved with torch.save(model.state_dict(), FILE) or a .safetensors file",
        ) from None
    if isinstance(state, Mapping) and isinstance(state.get("state_dict"), Mapping):
        state = state["state_dict"]  # a training checkpoint (Lightning and others) keeps it under this key
    if not isinstance(state, Mapping) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise InvalidInputError(f"{path} holds a {type(state).__name__}, not a state dict of tensors",
                                fix="save model.state_dict(), not the model or an optimizer")
    try:
        result = model.load_state_dict(state, strict=False)
    except RuntimeError as exc:
        raise InvalidInputError(f"the weights in {path} do not fit {type(model).__name__}: {_first_line(exc, skip=1)}",
                                fix="check that the file was saved from the same model configuration") from None
    problems = [f"{what} keys ({len(keys)}): {', '.join(keys[:5])}{', ...' if len(keys) > 5 else ''}"
                for what, keys in (("missing", result.missing_keys), ("unexpected", result.unexpected_keys)) if keys]
    if problems:
        raise InvalidInputError(
            f"the weights in {path} do not match {type(model).__name__}:\n  " + "\n  ".join(problems),
            fix="check that the file was saved from the same model (and without a wrapper's 'module.' prefix)",
        )


def example_inputs(texts: Sequence[str], seed: int, dynamic: str | None, target: Target) -> Inputs:
    """The example inputs from ``--input`` (named when all are named), else the target's own; with the
    dynamic shapes the dim names, ``--dynamic`` or the ``.pt2`` program ask for."""
    if texts:
        specs = [_parse(text) for text in texts]
        sizes = _example_sizes(specs)
        generator = torch.Generator().manual_seed(seed)
        args = tuple(_tensor(spec, sizes, generator) for spec in specs)
        names = [spec.name for spec in specs]
        return Inputs(args, {}, names if all(names) else None, _input_dynamic_shapes(specs, dynamic))
    if target.args is None:
        raise InvalidInputError("no example inputs", fix="give --input NAME=DTYPE[DIMS] for each input of forward")
    shapes = {"auto": "auto", "static": None}.get(dynamic or "", target.dynamic_shapes)
    return Inputs(target.args, dict(target.kwargs or {}), None, shapes)


def _parse(text: str) -> _Spec:
    m = _INPUT_RE.match(text.strip())
    if m is None or m["dtype"] not in DTYPES:
        raise InvalidInputError(f"cannot read --input {text!r}", fix=_INPUT_FIX)
    dims: list[int | str] = []
    for token in (t.strip() for t in m["dims"].split(",") if t.strip()):
        d = _DIM_RE.match(token)
        if d is None:
            raise InvalidInputError(f"cannot read the dim {token!r} of --input {text!r}", fix=_INPUT_FIX)
        dims.append(int(d["size"]) if d["size"] else token)
    low, high = int(m["lo"] or 0), int(m["hi"] or 10)
    if m["lo"] is not None and low >= high:
        raise InvalidInputError(f"empty range ~{low}:{high} in --input {text!r}",
                                fix="write ~LOW:HIGH with LOW < HIGH (HIGH excluded)")
    return _Spec(m["name"], DTYPES[m["dtype"]], dims, low, high)


def _example_sizes(specs: Sequence[_Spec]) -> dict[str, int]:
    """Example size of each dim name: the one written (``batch=4``), else 2, 3, ... by first appearance."""
    sizes: dict[str, int] = {}
    for dim in (d for spec in specs for d in spec.dims if isinstance(d, str) and "=" in d):
        name, size = dim.split("=")
        if sizes.setdefault(name, int(size)) != int(size):
            raise InvalidInputError(f"dim {name!r} has two example sizes, {sizes[name]} and {size}",
                                    fix=f"write {name}=SIZE once (the other uses of {name} follow it)")
    following = _FIRST_EXAMPLE_SIZE
    for name in (_dim_name(d) for spec in specs for d in spec.dims if isinstance(d, str)):
        if name not in sizes:
            sizes[name] = following
            following += 1
    return sizes


def _dim_name(dim: str) -> str:
    return dim.split("=")[0]


def _tensor(spec: _Spec, sizes: Mapping[str, int], generator: torch.Generator) -> torch.Tensor:
    shape = [d if isinstance(d, int) else sizes[_dim_name(d)] for d in spec.dims]
    if spec.dtype.is_floating_point:
        return torch.randn(shape, generator=generator).to(spec.dtype)
    if spec.dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=generator).bool()
    return torch.randint(spec.low, spec.high, shape, generator=generator, dtype=spec.dtype)


def _input_dynamic_shapes(specs: Sequence[_Spec], dynamic: str | None) -> Any:
    """By position: one ``Dim`` per dim name (shared across inputs); with ``--dynamic auto`` every other dim
    is ``Dim.AUTO``."""
    named = {_dim_name(d) for spec in specs for d in spec.dims if isinstance(d, str)}
    if not named:
        return "auto" if dynamic == "auto" else None
    if dynamic == "static":
        raise InvalidInputError(f"--dynamic static contradicts the dim names {', '.join(sorted(named))} in --input",
                                fix="write sizes instead of names, or leave out --dynamic static")
    dims = {name: torch.export.Dim(name) for name in sorted(named)}
    other = torch.export.Dim.AUTO if dynamic == "auto" else None
    shapes = [
        {k: dims[_dim_name(d)] if isinstance(d, str) else other for k, d in enumerate(spec.dims)} for spec in specs
    ]
    return tuple({k: v for k, v in s.items() if v is not None} or None for s in shapes)


def _check_file(path: str) -> None:
    if not os.path.isfile(path):
        raise InvalidInputError(f"{path} does not exist", fix="check the path (relative to the current folder)")


def _call_user(what: str, fn: Any, *args: Any) -> Any:
    """Run the user's code; its exceptions become an ``InvalidInputError`` at the user's line."""
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - any error of the user's code
        raise InvalidInputError(f"{what} failed: {type(exc).__name__}: {_first_line(exc)}",
                                location=location_from_exception(exc),
                                fix="fix the line shown: onnxport imports the file and builds NAME as plain Python "
                                "does") from None


def _first_line(exc: BaseException, skip: int = 0) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return (lines[skip:] or lines or [type(exc).__name__])[0]
