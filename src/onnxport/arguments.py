"""The arguments of ``export`` and the paths of the command line, checked before any work starts: each wrong
one is an ``InvalidInputError`` naming the argument, what it got and what it takes (never a TypeError from deep
inside a stage, nor a file that fails later).

``check_arguments`` takes the plain arguments; ``check_example`` what needs the example inputs as well (weights
on the meta device, ``input_names`` past what there is to name, ``verify_inputs`` sets that do not fit the
example); ``check_output_file``/``check_output_folder`` where the result is to be written.
"""

from __future__ import annotations

import inspect
import itertools
import math
import numbers
import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from onnxport.errors import InvalidInputError

__all__ = ["as_path", "check_arguments", "check_example", "check_output_file", "check_output_folder"]


def check_arguments(*, input_names: Any, output_names: Any, custom_translations: Any, custom_opsets: Any,
                    verify_inputs: Any, flags: Mapping[str, Any], dynamic_axes: Any = None) -> None:
    """Raise ``InvalidInputError`` for the first argument that is not of the form ``export`` takes."""
    for label, names in (("input_names", input_names), ("output_names", output_names)):
        _check_names(label, names)
    _check_dynamic_axes(dynamic_axes)
    both = set(input_names or ()) & set(output_names or ())
    if both:
        raise InvalidInputError(f"{sorted(both)[0]!r} is both an input and an output name; ONNX values need "
                                "distinct names", fix="rename the output (e.g. 'y') or the input")
    if custom_translations is not None and not isinstance(custom_translations, Mapping):
        raise InvalidInputError(
            f"custom_translations must be a dict {{op: translator}}, not {_what(custom_translations)}",
            fix="pass e.g. custom_translations={'mylib::op': my_translator} (docs/custom-ops.md)",
        )
    if custom_translations:
        bad = [key for key, fn in custom_translations.items() if not callable(fn)]
        if bad:
            raise InvalidInputError(f"custom_translations[{bad[0]!r}] is not a function",
                                    fix="map each op to a function (ctx, *inputs) -> ONNX value(s)")
    if custom_opsets is not None and not (
        isinstance(custom_opsets, Mapping)
        and all(isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in custom_opsets.items())
    ):
        raise InvalidInputError(f"custom_opsets must be a dict {{domain: version}}, not {_what(custom_opsets)}",
                                fix="pass e.g. custom_opsets={'com.example': 1}")
    if isinstance(verify_inputs, (str, bytes)) or not isinstance(verify_inputs, Sequence):
        raise InvalidInputError(
            f"verify_inputs must be a list of input sets, not {_what(verify_inputs)}",
            fix="pass e.g. verify_inputs=[(x2,), ((x3,), {'mask': m3})]: each an args tuple or (args, kwargs)",
        )
    for label, value in flags.items():
        if not isinstance(value, bool):
            raise InvalidInputError(f"{label} must be True or False, not {_what(value)}", fix=f"pass {label}=True or False")


def _check_names(label: str, names: Any) -> None:
    if names is None:
        return
    if isinstance(names, (str, bytes)) or not isinstance(names, Sequence):
        raise InvalidInputError(f"{label} must be a list of strings, not {_what(names)}",
                                fix=f"pass e.g. {label}=['x']")
    odd = [n for n in names if not isinstance(n, str) or not n]
    if odd:
        raise InvalidInputError(f"{label} holds {odd[0]!r}, which is not a name", fix=f"give {label} non-empty strings")
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise InvalidInputError(f"{label} names {name!r} twice; ONNX values need distinct names",
                                    fix=f"give each entry of {label} its own name")
        seen.add(name)


_AXES_FIX = ("pass a dict {input or output name: {axis: dim name}} or {name: [axes]}, as torch.onnx takes it, "
             "e.g. dynamic_axes={'x': {0: 'batch'}}")


def _check_dynamic_axes(dynamic_axes: Any) -> None:
    """``dynamic_axes`` is None or torch.onnx's form: names to ``{axis: name}`` or to a list of axes, axes ints."""
    if dynamic_axes is None:
        return
    if not isinstance(dynamic_axes, Mapping):
        raise InvalidInputError(f"dynamic_axes must be a dict, not {_what(dynamic_axes)}", fix=_AXES_FIX)
    for name, axes in dynamic_axes.items():
        if not isinstance(name, str):
            raise InvalidInputError(f"dynamic_axes is keyed by {_what(name)}; its keys are input and output names",
                                    fix=_AXES_FIX)
        if isinstance(axes, Mapping):
            listed, names = list(axes), list(axes.values())
        elif isinstance(axes, (list, tuple)):
            listed, names = list(axes), []
        else:
            raise InvalidInputError(f"dynamic_axes[{name!r}] is {_what(axes)}, not a dict of axes or a list of them",
                                    fix=_AXES_FIX)
        bad = next((a for a in listed if not isinstance(a, numbers.Integral) or isinstance(a, bool)), None)
        if bad is not None:
            raise InvalidInputError(f"dynamic_axes[{name!r}] names the axis {bad!r}, which is not an int",
                                    fix=_AXES_FIX)
        if any(n is None or n == "" for n in names):
            raise InvalidInputError(f"dynamic_axes[{name!r}] leaves an axis unnamed ({axes!r})", fix=_AXES_FIX)


def as_path(value: Any, what: str, fix: str) -> str:
    """``value`` as a path string, or an ``InvalidInputError`` naming ``what`` it was meant to be."""
    if isinstance(value, (str, os.PathLike)) and not isinstance(value, bytes):
        path = os.fspath(value)
        if isinstance(path, str) and path:
            return path
    raise InvalidInputError(f"{what} must be a path (a str or os.PathLike), not {_what(value)}", fix=fix)


def _what(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


# ---------------------------------------------------------------------------------------------
# What needs the example: called once the example is normalised and dynamic_shapes resolved, before capture.


_WEIGHTS_FIX = (
    "pass weights= (a safetensors file, a list or folder of them, or a state dict, named as model.state_dict() "
    "names them), or load real weights first: "
    "model.to_empty(device='cpu') then model.load_state_dict(...), or build the model outside torch.device('meta')"
)


def check_example(model: Any, args: tuple, kwargs: Mapping[str, Any], *, dynamic_shapes: Any, input_names: Any,
                  verify_inputs: Sequence[Any]) -> None:
    """Raise ``InvalidInputError`` for what the example shows wrong before capture runs the model: weights or
    inputs on the meta device, more ``input_names`` than tensors to name, and ``verify_inputs`` sets whose
    tensors differ from the example's in number, rank, dtype or a static size (``dynamic_shapes``, resolved,
    says which dims may vary)."""
    from onnxport.capture import dynamic

    leaves = dynamic.tensor_leaves(model, args, kwargs)
    _check_not_meta(model, leaves)
    _check_name_count(model, leaves, input_names)
    if not verify_inputs:
        return
    specs = dynamic.input_dim_specs(model, args, kwargs, dynamic_shapes) if dynamic_shapes is not None else []
    specs = specs or [{} for _ in leaves]
    for i, extra in enumerate(verify_inputs):
        _check_input_set(model, f"verify_inputs[{i}]", extra, leaves, specs)


def _check_not_meta(model: Any, leaves: list[tuple[int, str, torch.Tensor]]) -> None:
    if isinstance(model, torch.nn.Module):
        meta = [name for name, t in itertools.chain(model.named_parameters(), model.named_buffers()) if t.is_meta]
        if meta:
            shown = ", ".join(meta[:3]) + (", ..." if len(meta) > 3 else "")
            raise InvalidInputError(
                f"{len(meta)} weights of {type(model).__name__} are on the meta device ({shown}): they have no "
                "values to export", fix=_WEIGHTS_FIX)
    for _, label, tensor in leaves:
        if tensor.is_meta:
            raise InvalidInputError(f"the example input {label} is on the meta device: it has no values to run the "
                                    "model on", fix=f"pass a real tensor for {label}, e.g. torch.randn(...) of "
                                    f"shape {list(tensor.shape)} and dtype {tensor.dtype}")


def _check_name_count(model: Any, leaves: list[tuple[int, str, torch.Tensor]], input_names: Any) -> None:
    if not input_names:
        return
    # Names past the inputs name the parameters (those the graph uses; translation checks that exactly).
    params = len(list(model.parameters())) if isinstance(model, torch.nn.Module) else 0
    if len(input_names) > len(leaves) + params:
        raise InvalidInputError(
            f"input_names has {len(input_names)} names but the model takes {len(leaves)} tensor inputs "
            f"({', '.join(label for _, label, _ in leaves) or 'none'}) and has {params} parameters",
            fix=f"give at most one name per tensor of the flattened (args, kwargs): drop "
            f"{', '.join(map(repr, input_names[len(leaves) + params:]))}",
        )


def _check_input_set(model: Any, where: str, extra: Any, leaves: list[tuple[int, str, torch.Tensor]],
                     specs: list[dict[int, Any]]) -> None:
    """One ``verify_inputs`` set against the example: the same tensors, each of the example's rank and dtype,
    and of its size at every dim that is not declared dynamic."""
    from onnxport.capture import check_inputs, dynamic, integrations

    if isinstance(extra, tuple) and len(extra) == 2 and isinstance(extra[0], tuple) and isinstance(extra[1], dict):
        args, kwargs = extra
    else:
        args, kwargs = extra, {}
    args = tuple(args) if isinstance(args, (tuple, list)) else (args,)
    signature = inspect.signature(model.forward)
    try:
        signature.bind(*args, **integrations.renamed(model, dict(kwargs)))
    except TypeError as exc:
        raise InvalidInputError(f"{where} does not fit {type(model).__name__}.forward{signature}: {exc}",
                                fix="give each set as an args tuple, or (args, kwargs), like the example") from None
    try:
        _, args, kwargs = check_inputs(model, args, kwargs)
    except InvalidInputError as exc:
        raise InvalidInputError(f"{where}: {exc.message}", fix=exc.fix) from None
    given = {label: tensor for _, label, tensor in dynamic.tensor_leaves(model, args, kwargs)}
    expected = [label for _, label, _ in leaves]
    missing = [label for label in expected if label not in given]
    unknown = [label for label in given if label not in expected]
    if missing or unknown:
        said = "; ".join(part for part in (
            f"it has no tensor {', '.join(missing)}" if missing else "",
            f"it has tensor {', '.join(unknown)}, which the example has not" if unknown else "") if part)
        raise InvalidInputError(
            f"{where} passes {len(given)} tensors, the example {len(expected)} ({', '.join(expected) or 'none'}): "
            f"{said}", fix="give each verify_inputs set the tensors the example passes, under the same names")
    for (_, label, example), spec in zip(leaves, specs):
        _check_tensor(where, label, given[label], example, spec)


def _check_tensor(where: str, label: str, tensor: torch.Tensor, example: torch.Tensor, spec: Mapping[int, Any]) -> None:
    from torch.export import Dim
    from torch.export.dynamic_shapes import _DerivedDim, _DimHint

    from onnxport.capture.dynamic import dim_range

    described = f"the example's is {_describe(example)}"
    if tensor.dtype != example.dtype:
        raise InvalidInputError(f"{where}: {label} is {_describe(tensor)}, {described}",
                                fix=f"give {label} the example's dtype ({_dtype(example)}): the model takes only that")
    if tensor.dim() != example.dim():
        raise InvalidInputError(f"{where}: {label} has {tensor.dim()} dims ({_describe(tensor)}), {described}",
                                fix=f"give {label} {example.dim()} dims, as in the example")
    for k, (size, base) in enumerate(zip(tensor.shape, example.shape)):
        hint = spec.get(k)
        dynamic = isinstance(hint, Dim) or (isinstance(hint, _DimHint) and hint != Dim.STATIC)
        if not dynamic and size != base:
            raise InvalidInputError(
                f"{where}: {label}.shape[{k}] is {size}, but that dim is static (size {base} in the example)",
                fix=f"give {label}.shape[{k}] the size {base}, or declare the dim dynamic in dynamic_shapes "
                f"(e.g. {k}: Dim('n') for {label})")
        if isinstance(hint, Dim) and not isinstance(hint, _DerivedDim):
            if size < hint.min or (math.isfinite(float(hint.max)) and size > hint.max):
                raise InvalidInputError(
                    f"{where}: {label}.shape[{k}] is {size}, outside the range {dim_range(hint)} of its Dim "
                    f"{hint.__name__!r}", fix=f"give {label}.shape[{k}] a size in {dim_range(hint)}, or widen the Dim")


def _describe(tensor: torch.Tensor) -> str:
    return f"{_dtype(tensor)}{list(tensor.shape)}"


def _dtype(tensor: torch.Tensor) -> str:
    return str(tensor.dtype).replace("torch.", "")


# ---------------------------------------------------------------------------------------------
# Output paths: refused before the export, not after it.


def check_output_file(path: str | os.PathLike[str]) -> None:
    """``path`` can take a file: not a folder, in a folder that exists and is writable."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise InvalidInputError(f"cannot write {path}: it is a folder",
                                fix=f"give a file name, e.g. {os.path.join(path, 'model.onnx')}")
    if not os.path.isdir(folder):
        what = "is a file" if os.path.exists(folder) else "does not exist"
        raise InvalidInputError(f"cannot write {path}: the folder {folder} {what}",
                                fix="create the folder first, or give a path in an existing one")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InvalidInputError(f"cannot write {path}: the folder {folder} is not writable",
                                fix="give a path in a folder you can write to, or change the folder's permissions")


def check_output_folder(path: str | os.PathLike[str], files: Sequence[str] = ()) -> None:
    """``path`` can take the ``files``: a writable folder, or a path the first existing parent of which is a
    writable folder (it is created then); none of ``files`` is a folder there."""
    path = os.fspath(path)
    if os.path.exists(path) and not os.path.isdir(path):
        raise InvalidInputError(f"cannot write into {path}: it is a file, not a folder",
                                fix="give a folder (new or existing) for the output, or move the file away")
    existing = os.path.abspath(path)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise InvalidInputError(f"cannot create the folder {path}: {existing} is a file",
                                fix="give a folder path whose parents are folders")
    if not os.access(existing, os.W_OK | os.X_OK):
        what = "the folder" if existing == os.path.abspath(path) else f"{path} cannot be created: its parent"
        raise InvalidInputError(f"cannot write into {path}: {what} {existing} is not writable",
                                fix="give a folder you can write to, or change its permissions")
    for name in files:
        if os.path.isdir(os.path.join(path, name)):
            raise InvalidInputError(f"cannot write {os.path.join(path, name)}: it is a folder",
                                    fix="remove or rename that folder, or give another output folder")
