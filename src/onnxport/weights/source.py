"""``Weights``: named tensors that an export reads from safetensors files (or a state dict) without loading them."""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import onnx_ir as ir
import torch
from onnx_ir.tensor_adapters import TorchTensor, from_torch_dtype

from onnxport.errors import InvalidInputError
from onnxport.weights.files import FileRange, read_header, safetensors_files

__all__ = ["Derived", "Weights"]


@dataclasses.dataclass(frozen=True)
class Derived:
    """A weight computed from others when it is read (experts merged into one tensor, a fused projection split):
    its ``shape`` and ``dtype``, and ``compute()`` giving its values."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    compute: Callable[[], torch.Tensor]


class Weights:
    """Named tensors for an export: byte ranges of safetensors files, or the tensors of a state dict.

    ``tensor(key, like)`` is what capture sees: the file memory-mapped and never read (untouched memory
    where the model wants another dtype than the file's). ``initializer(key, dtype)`` is what the ONNX
    model holds: read only when the model is serialised, and copied file to file (``copy_file_range``)
    when ``OnnxProgram.save`` writes its external data.
    """

    def __init__(self, entries: Mapping[str, FileRange | torch.Tensor | Derived]):
        self._entries = dict(entries)
        self._maps: dict[str, torch.UntypedStorage] = {}

    @classmethod
    def open(cls, weights: Any) -> Weights:
        """``weights`` as ``export(weights=...)`` takes it: a safetensors file, a list of them, a model
        directory (sharded or not), a state-dict mapping of tensors, or a ``Weights``."""
        if isinstance(weights, Weights):
            return weights
        if isinstance(weights, Mapping):
            wrong = [k for k, v in weights.items() if not isinstance(k, str) or not isinstance(v, torch.Tensor)]
            if wrong:
                raise InvalidInputError(f"weights maps {wrong[0]!r} to a {type(weights[wrong[0]]).__name__}",
                                        fix="pass a state dict {name: tensor}, or safetensors files")
            return cls(weights)
        if not isinstance(weights, (str, os.PathLike, Iterable)):
            raise InvalidInputError(f"weights cannot be a {type(weights).__name__}",
                                    fix="pass a .safetensors file, a list of them, a model directory or a state dict")
        entries: dict[str, FileRange] = {}
        for path in safetensors_files(weights):
            for name, where in read_header(path).items():
                if name in entries:
                    raise InvalidInputError(f"tensor {name} is in both {entries[name].path} and {path}",
                                            fix="pass each checkpoint's files once")
                entries[name] = where
        return cls(entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def dtype(self, key: str) -> torch.dtype | None:
        """The dtype ``key`` is stored in (None: one torch has no name for)."""
        return self._entries[key].dtype

    def nbytes(self, dtype: torch.dtype | None = None) -> int:
        """Bytes these weights take in memory, their floating-point ones (but 8-bit floats) in ``dtype`` when
        given, else as stored."""
        total = 0
        for entry in self._entries.values():
            shape, stored = tuple(entry.shape), entry.dtype
            if stored is None:
                total += entry.length
                continue
            keep = dtype is None or not stored.is_floating_point or stored.itemsize == 1
            total += math.prod(shape) * (stored if keep else dtype).itemsize
        return total

    def load(self, key: str) -> torch.Tensor:
        """``key``'s values, read into memory in the dtype they are stored in."""
        entry = self._entries[key]
        if isinstance(entry, Derived):
            return entry.compute()
        if isinstance(entry, torch.Tensor):
            return entry.detach()
        return _converted(entry, entry.dtype).raw

    def with_derived(self, derived: Mapping[str, Derived]) -> Weights:
        """These weights and the ``derived`` ones, computed from them when read."""
        extended = Weights({**self._entries, **derived})
        extended._maps = self._maps
        return extended

    def renamed(self, names: Mapping[str, str]) -> Weights:
        """These weights under other names: ``names`` maps each new name to an existing one."""
        renamed = Weights({new: self._entries[old] for new, old in names.items()})
        renamed._maps = self._maps
        return renamed

    def check(self, key: str, like: torch.Tensor) -> None:
        """Refuse a weight the model's tensor ``like`` cannot take (another shape, an unknown dtype)."""
        entry = self._entries[key]
        if entry.dtype is None:
            raise InvalidInputError(f"weight {key} has dtype {entry.dtype_name}, which torch does not know",
                                    fix="convert the checkpoint to a torch dtype")
        if tuple(entry.shape) != tuple(like.shape):
            raise InvalidInputError(f"weight {key} has shape {list(entry.shape)}, the model's is {list(like.shape)}",
                                    fix="build the model with the configuration the weights were saved from")
        if isinstance(entry, torch.Tensor) and entry.device.type == "meta":
            raise InvalidInputError(f"weights[{key!r}] is on the meta device: it holds no values",
                                    fix="pass tensors with data (on the cpu), or safetensors files")

    def tensor(self, key: str, like: torch.Tensor) -> torch.Tensor:
        """The tensor capture sees for ``key``, in the dtype of ``like``; its data is never read."""
        self.check(key, like)
        entry = self._entries[key]
        if isinstance(entry, Derived):
            return torch.empty(like.shape, dtype=like.dtype)  # pages never touched: no memory used
        if isinstance(entry, torch.Tensor):
            if entry.dtype == like.dtype and entry.device.type == "cpu":
                return entry.detach()
            return torch.empty(like.shape, dtype=like.dtype)
        size = like.element_size()
        if entry.dtype != like.dtype or entry.length == 0 or entry.offset % size:
            return torch.empty(like.shape, dtype=like.dtype)  # pages never touched: no memory used
        storage = self._maps.get(entry.path)
        if storage is None:  # the whole file mapped once, copy-on-write: nothing is read until touched
            storage = torch.UntypedStorage.from_file(entry.path, shared=False, nbytes=os.path.getsize(entry.path))
            self._maps[entry.path] = storage
        return torch.empty(0, dtype=like.dtype).set_(storage, entry.offset // size, entry.shape)

    def initializer(self, key: str, dtype: torch.dtype) -> ir.TensorProtocol:
        """The ONNX tensor of ``key`` in ``dtype``: the file's bytes, read only when serialised or saved."""
        entry = self._entries[key]
        shape = ir.Shape(entry.shape)
        if isinstance(entry, Derived):
            return ir.LazyTensor(functools.partial(_computed, entry, dtype), _onnx_dtype(dtype), shape)
        if isinstance(entry, torch.Tensor):
            return ir.LazyTensor(functools.partial(_from_tensor, entry, dtype), _onnx_dtype(dtype), _onnx_shape(entry, dtype))
        if entry.dtype == dtype:
            return ir.LazyTensor(functools.partial(_external, entry), _onnx_dtype(dtype), shape)
        return ir.LazyTensor(functools.partial(_converted, entry, dtype), _onnx_dtype(dtype), shape)


def _onnx_dtype(dtype: torch.dtype) -> ir.DataType:
    parts = {torch.complex64: torch.float32, torch.complex128: torch.float64, torch.complex32: torch.float16}
    return from_torch_dtype(parts.get(dtype, dtype))


def _onnx_shape(tensor: torch.Tensor, dtype: torch.dtype) -> ir.Shape:
    # A complex tensor is a real one with a trailing dim of 2 in the graph (see translate/ops/complex.py).
    return ir.Shape((*tensor.shape, 2) if dtype.is_complex else tensor.shape)


def _external(entry: FileRange) -> ir.ExternalTensor:
    # A fresh one per read, so that no memory map outlives the read; ``tofile`` copies file to file.
    return ir.ExternalTensor(entry.path, entry.offset, entry.length, from_torch_dtype(entry.dtype),
                             shape=ir.Shape(entry.shape), name=os.path.basename(entry.path))


def _converted(entry: FileRange, dtype: torch.dtype) -> TorchTensor:
    """The tensor read into memory and converted, as transformers converts a weight to its parameter's dtype."""
    if entry.length == 0:
        return TorchTensor(torch.empty(entry.shape, dtype=dtype))
    data = bytearray(entry.length)
    with open(entry.path, "rb") as f:
        f.seek(entry.offset)
        f.readinto(data)
    return TorchTensor(torch.frombuffer(data, dtype=entry.dtype).reshape(entry.shape).to(dtype))


def _computed(entry: Derived, dtype: torch.dtype) -> TorchTensor:
    return TorchTensor(entry.compute().detach().to(dtype).contiguous())


def _from_tensor(tensor: torch.Tensor, dtype: torch.dtype) -> TorchTensor:
    tensor = tensor.detach().to(dtype)
    if tensor.is_complex():
        tensor = torch.view_as_real(tensor.resolve_conj())
    return TorchTensor(tensor.contiguous())
