"""Bind ``Weights`` to a model for the length of an export: the model's tensors that the weights name are
replaced by theirs (memory-mapped, never read), and put back afterwards."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import onnx_ir as ir
import torch

from onnxport.errors import InvalidInputError
from onnxport.weights.source import Weights

__all__ = ["Binding", "bind"]

_Place = tuple[torch.nn.Module, str, str, str]  # module, "_parameters" or "_buffers", attribute, state-dict key


class Binding:
    """Which weight each tensor the model holds during the export came from."""

    def __init__(self, weights: Weights):
        self.weights = weights
        self._keys: dict[tuple[int, torch.dtype, tuple[int, ...]], str] = {}

    def add(self, tensor: torch.Tensor, key: str) -> None:
        self._keys[_identity(tensor)] = key

    def initializers(self, ep: torch.export.ExportedProgram) -> dict[str, ir.TensorProtocol]:
        """The ONNX tensor of each state-dict entry (and lifted constant) of ``ep`` that came from a weight."""
        found = {}
        for target, tensor in [*ep.state_dict.items(), *ep.constants.items()]:
            key = self._keys.get(_identity(tensor)) if isinstance(tensor, torch.Tensor) else None
            if key is not None:
                found[target] = self.weights.initializer(key, tensor.dtype)
        return found


def _identity(tensor: torch.Tensor) -> tuple[int, torch.dtype, tuple[int, ...]]:
    # torch.export may hand back other tensor objects over the same memory, so memory is what is compared.
    return tensor.data_ptr(), tensor.dtype, tuple(tensor.shape)


def _places(model: torch.nn.Module) -> dict[int, tuple[torch.Tensor, list[_Place]]]:
    """Every parameter and buffer of ``model`` with each place that holds it (tied weights have several)."""
    found: dict[int, tuple[torch.Tensor, list[_Place]]] = {}
    seen: set[tuple[int, str, str]] = set()
    for prefix, module in model.named_modules(remove_duplicate=False):
        for kind in ("_parameters", "_buffers"):
            for attr, tensor in getattr(module, kind).items():
                if tensor is None or (id(module), kind, attr) in seen:
                    continue
                seen.add((id(module), kind, attr))
                key = f"{prefix}.{attr}" if prefix else attr
                found.setdefault(id(tensor), (tensor, []))[1].append((module, kind, attr, key))
    return found


@contextlib.contextmanager
def bind(model: Any, weights: Weights | None) -> Iterator[Binding | None]:
    """Give ``model`` the tensors of ``weights`` (matched by state-dict name) until the block ends."""
    if weights is None:
        yield None
        return
    if not isinstance(model, torch.nn.Module):
        raise InvalidInputError(f"weights= needs an nn.Module to hold them, not a {type(model).__name__}",
                                fix="wrap the function in an nn.Module whose parameters the weights name")
    binding = Binding(weights)
    swapped: list[tuple[dict[str, Any], str, torch.Tensor]] = []
    try:
        missing = []
        for tensor, places in _places(model).values():
            key = next((k for *_, k in places if k in weights), None)
            if key is None:
                if tensor.is_meta:
                    missing.append(places[0][3])
                continue
            new = weights.tensor(key, like=tensor)
            if isinstance(tensor, torch.nn.Parameter):
                new = torch.nn.Parameter(new, requires_grad=tensor.requires_grad)
            binding.add(new, key)
            for module, kind, attr, _ in places:
                swapped.append((getattr(module, kind), attr, tensor))
                getattr(module, kind)[attr] = new
        if missing:
            raise InvalidInputError(
                f"{len(missing)} tensors of the model are on the meta device and not in weights: "
                f"{', '.join(missing[:5])}{', ...' if len(missing) > 5 else ''} (weights hold {len(weights)}, "
                f"e.g. {', '.join(list(weights)[:3])})",
                fix="name each tensor as model.state_dict() does, or give the model real values for those it "
                "computes itself (buffers made in __init__)",
            )
        yield binding
    finally:
        for slots, attr, tensor in reversed(swapped):
            slots[attr] = tensor
