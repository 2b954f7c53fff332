"""safetensors files read by their header alone: each tensor's dtype, shape and byte range, no data.

A safetensors file is an 8-byte little-endian header length, a JSON header ``{name: {"dtype", "shape",
"data_offsets": [begin, end]}}`` and the tensors' bytes, little-endian and packed: exactly the layout of
ONNX external data, so a tensor can be copied to the model's data file as a byte range.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import struct
from collections.abc import Iterable

import torch

from onnxport.errors import InvalidInputError

__all__ = ["FileRange", "read_header", "safetensors_files"]

# The header's dtype names (safetensors' Dtype enum) as torch dtypes.
DTYPES = {
    "BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16, "U16": torch.uint16,
    "I32": torch.int32, "U32": torch.uint32, "I64": torch.int64, "U64": torch.uint64, "F16": torch.float16,
    "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64, "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
}
_MAX_HEADER = 100 * 2**20  # safetensors' own limit
INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"


@dataclasses.dataclass(frozen=True)
class FileRange:
    """Where one tensor's bytes are: ``length`` bytes at ``offset`` in ``path`` (an absolute path)."""

    path: str
    offset: int
    length: int
    dtype: torch.dtype | None  # None: a dtype torch has no name for (refused when the tensor is used)
    shape: tuple[int, ...]
    dtype_name: str = ""


def read_header(path: str) -> dict[str, FileRange]:
    """Every tensor of the safetensors file ``path``, by name, read from its header (the data is not read)."""
    path = os.path.abspath(path)
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        length = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
        if not 0 < length <= min(_MAX_HEADER, size - 8):
            raise InvalidInputError(f"{path} is not a safetensors file (no valid header)",
                                    fix="pass .safetensors files as written by safetensors or save_pretrained")
        try:
            header = json.loads(f.read(length))
        except ValueError as exc:
            raise InvalidInputError(f"{path} has a corrupt safetensors header: {exc}",
                                    fix="write the file again with safetensors") from None
    start = 8 + length
    ranges = {}
    if not isinstance(header, dict):
        raise InvalidInputError(f"{path} has a corrupt safetensors header: not a table of tensors",
                                fix="write the file again with safetensors")
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            begin, end = (int(v) for v in info["data_offsets"])
            dtype, shape = info["dtype"], tuple(int(d) for d in info["shape"])
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInputError(f"{path} has a corrupt safetensors header: tensor {name!r} has no valid "
                                    f"dtype, shape and data_offsets ({type(exc).__name__}: {exc})",
                                    fix="write the file again with safetensors") from None
        if not 0 <= begin <= end <= size - start:
            raise InvalidInputError(f"{path}: tensor {name} lies past the end of the file (truncated?)",
                                    fix="download or write the checkpoint again")
        ranges[name] = FileRange(path, start + begin, end - begin, DTYPES.get(dtype), shape, dtype)
    return ranges


def safetensors_files(where: str | os.PathLike | Iterable[str | os.PathLike]) -> list[str]:
    """The safetensors files of a checkpoint: a file, a list of files, or a directory (with a sharded
    checkpoint's ``model.safetensors.index.json``, a ``model.safetensors``, or else every ``*.safetensors``)."""
    if not isinstance(where, (str, os.PathLike)):
        files = [os.fspath(p) for p in where]
        missing = [p for p in files if not os.path.isfile(p)]
        if not files or missing:
            raise InvalidInputError(f"no such safetensors file: {missing[0] if missing else '(an empty list)'}",
                                    fix="pass existing .safetensors files, or the directory that holds them")
        return files
    where = os.fspath(where)
    if os.path.isfile(where):
        return [where]
    if not os.path.isdir(where):
        raise InvalidInputError(f"{where} does not exist", fix="pass a .safetensors file or a model directory")
    index = os.path.join(where, INDEX)
    if os.path.isfile(index):
        try:
            with open(index, encoding="utf-8") as f:
                shards = sorted(set(json.load(f)["weight_map"].values()))
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise InvalidInputError(f"{index} is not a checkpoint index ({type(exc).__name__}: {exc})",
                                    fix="write it again (save_pretrained), or remove it to read every *.safetensors "
                                    "file in the folder") from None
        if not all(isinstance(s, str) for s in shards):
            raise InvalidInputError(f"{index} maps tensors to something other than file names",
                                    fix="write it again with save_pretrained")
        return safetensors_files([os.path.join(where, s) for s in shards])
    if os.path.isfile(os.path.join(where, SINGLE)):
        return [os.path.join(where, SINGLE)]
    found = sorted(glob.glob(os.path.join(where, "*.safetensors")))
    if not found:
        raise InvalidInputError(
            f"{where} holds no safetensors weights (only safetensors files can be read without loading them)",
            fix="convert the checkpoint to safetensors (save_pretrained(..., safe_serialization=True)), "
            "or load the model and export it in memory",
        )
    return found
