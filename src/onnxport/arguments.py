"""The plain arguments of ``export``, checked before any work starts: each wrong one is an
``InvalidInputError`` naming the argument, what it got and what it takes (never a TypeError from deep inside
a stage, nor a file that fails later)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from onnxport.errors import InvalidInputError

__all__ = ["check_arguments"]


def check_arguments(*, input_names: Any, output_names: Any, custom_translations: Any, custom_opsets: Any,
                    verify_inputs: Any, flags: Mapping[str, Any]) -> None:
    """Raise ``InvalidInputError`` for the first argument that is not of the form ``export`` takes."""
    for label, names in (("input_names", input_names), ("output_names", output_names)):
        _check_names(label, names)
    both = set(input_names or ()) & set(output_names or ())
    if both:
        raise InvalidInputError(f"{sorted(both)[0]!r} is both an input and an output name; ONNX values need "
                                "distinct names", fix="rename the output (e.g. 'y') or the input")
    if custom_translations is not None and not isinstance(custom_translations, Mapping):
        raise InvalidInputError(
            f"custom_translations must be a dict {{op: translator}}, not {_what(custom_translations)}",
            fix="pass e.g. custom_translations={'mylib::op': my_translator} (README 'Custom operators')",
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


def _what(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"
