"""Checkpoints whose linear layers were quantized with GPTQ or AWQ (``quantization_config`` in config.json):
their packed tensors decoded into onnxport's layout, so that ``export_hf`` keeps the checkpoint's own codes.

Each quantized linear layer ``P`` (``out = x @ W^T``, ``W`` ``[N, K]``) is stored as ``P.qweight``,
``P.qzeros`` and ``P.scales`` (GPTQ also ``P.g_idx``; ``P.bias`` as usual), its inputs cut into groups
of ``group_size``; a weight is ``(code - zero) * scale`` of its group. The integers are packed into int32
words, ``32 / bits`` to a word, the first in the lowest bits:

- GPTQ (``quant_method: "gptq"``, 4 or 8 bits): ``qweight`` ``[K * bits / 32, N]``, packed along K;
  ``qzeros`` ``[groups, N * bits / 32]``, packed along N; ``scales`` ``[groups, N]``; ``g_idx`` ``[K]``,
  the group of each input: ``k // group_size``, or a permuted grouping where the columns were quantized in
  order of activation size (act-order, ``desc_act``). The original format (``checkpoint_format``/``format``
  ``"gptq"``, v1) stores the zero points minus one, subtracted from each packed word as a whole (a zero of
  0 borrows from the next one), so reading adds ``0x11111111`` (``0x01010101`` for 8 bits) to each word
  back; ``"gptq_v2"`` stores them as they are.
- AWQ (``quant_method: "awq"``, ``version``/``format`` ``"gemm"``, 4 bits, zero points): ``qweight``
  ``[K, N / 8]``, packed along N, the eight codes of a word being those of columns 0, 2, 4, 6, 1, 3, 5, 7
  of its eight, in that order from the lowest bits; ``qzeros`` ``[groups, N / 8]`` packed likewise;
  ``scales`` ``[groups, N]``; groups of consecutive inputs.

``Layer`` holds a layer decoded as ``onnxport.quantize.quantize_model``'s ``codes=`` takes it (an act-order
layer's inputs are read in the order that makes its groups runs of consecutive inputs). What the
``MatMulNBits`` blocks cannot hold, or this module does not read, is refused naming the cause: other
widths, group sizes outside 16-256 (a power of two), other packings (AWQ ``gemv``, Marlin, ...), and
per-layer settings (GPTQModel's ``dynamic``).
"""

from __future__ import annotations

import copy
import dataclasses
import os
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import numpy as np
import torch

from onnxport.errors import InvalidInputError
from onnxport.weights.files import safetensors_files

__all__ = ["Checkpoint", "Layer", "Scheme", "decode_awq", "decode_gptq", "dequantize", "load", "scheme_of"]

_PACKED = ("qweight", "qzeros", "scales", "g_idx")
_AWQ_ORDER = np.array([0, 2, 4, 6, 1, 3, 5, 7])  # the column of each 4-bit field of an AWQ word, lowest first
_GPTQ_FORMATS = ("gptq", "gptq_v2")


@dataclasses.dataclass(frozen=True)
class Scheme:
    """How a checkpoint's layers are quantized: ``method`` ``"gptq"`` or ``"awq"``, ``bits``, ``group_size``,
    ``v1`` (GPTQ zero points stored minus one) and ``symmetric`` (the config's ``sym``; AWQ's are not)."""

    method: str
    bits: int
    group_size: int
    v1: bool = False
    symmetric: bool = False

    def __str__(self) -> str:
        return f"{self.method.upper()} int{self.bits}, groups of {self.group_size}"


class Layer(NamedTuple):
    """A quantized layer in onnxport's layout: ``codes`` uint8 ``[N, blocks, block_size]`` (K padded),
    ``scales`` ``[N, blocks]``, ``zeros`` uint8 ``[N, blocks]`` (None: all ``2**(bits-1)``) and ``g_idx``
    int32 ``[K]``, the block of each input (None: ``k // block_size``)."""

    codes: np.ndarray
    scales: np.ndarray
    zeros: np.ndarray | None
    g_idx: np.ndarray | None


def scheme_of(config: Any) -> Scheme | None:
    """The quantization of a checkpoint from its config's ``quantization_config``: None when it has none;
    refuses one whose codes onnxport cannot keep."""
    settings = getattr(config, "quantization_config", None)
    if settings is None:
        return None
    settings = settings if isinstance(settings, Mapping) else settings.to_dict()
    method = str(settings.get("quant_method", "")).lower()
    if method not in ("gptq", "awq"):
        raise InvalidInputError(
            f"the checkpoint is quantized with {method or 'an unnamed method'} (config.json's quantization_config), "
            "whose weights onnxport does not read", fix="export the float checkpoint it was made from; onnxport keeps "
            "the codes of GPTQ and AWQ checkpoints, and quantizes float ones itself (quantize='int4')")
    bits = settings.get("bits", settings.get("w_bit"))
    group = settings.get("group_size", settings.get("q_group_size"))
    name = f"this {method.upper()} checkpoint"
    if method == "gptq":
        form = str(settings.get("checkpoint_format") or settings.get("format") or "gptq").lower()
        if form not in _GPTQ_FORMATS:
            raise InvalidInputError(f"{name} is in the {form!r} format; onnxport reads the 'gptq' and 'gptq_v2' ones",
                                    fix="convert it to the gptq format (GPTQModel saves it with format='gptq')")
        if settings.get("dynamic"):
            raise InvalidInputError(f"{name} quantizes some layers with their own settings (quantization_config's "
                                    "'dynamic'), which onnxport does not read", fix="use a checkpoint quantized "
                                    "with one setting for every layer")
        allowed = (4, 8)
    else:
        form = str(settings.get("version") or settings.get("format") or "gemm").lower()
        if form != "gemm":
            raise InvalidInputError(f"{name} is packed for AWQ's {form!r} kernels; onnxport reads the 'gemm' packing",
                                    fix="quantize or save the model with AWQ's GEMM version (version='gemm')")
        if settings.get("zero_point") is False:
            raise InvalidInputError(f"{name} has no zero points (zero_point: false), which AWQ's GEMM packing always "
                                    "holds", fix="use a checkpoint saved with zero_point=True")
        allowed = (4,)
    if bits not in allowed:
        raise InvalidInputError(f"{name} has {bits}-bit weights; onnxport keeps {' and '.join(map(str, allowed))}-bit "
                                f"{method.upper()} codes", fix="use a 4-bit checkpoint, or export the float model "
                                "and quantize it with onnxport (quantize='int4' or 'int8')")
    if not isinstance(group, int) or isinstance(group, bool) or not 16 <= group <= 256 or group & (group - 1):
        raise InvalidInputError(f"{name} has groups of {group} inputs; onnxport keeps groups of 16 to 256 (a power "
                                "of two), the block sizes of MatMulNBits", fix="use a checkpoint quantized with "
                                "group_size 32, 64 or 128 (the usual ones)")
    return Scheme(method, bits, group, v1=method == "gptq" and form == "gptq",
                  symmetric=method == "gptq" and bool(settings.get("sym", True)))


def _unsigned(words: np.ndarray) -> np.ndarray:
    if words.dtype != np.int32 and words.dtype != np.uint32:
        raise InvalidInputError(f"packed weights are {words.dtype}; GPTQ and AWQ pack them in int32",
                                fix="use a checkpoint packed in int32 words (GPTQModel's default pack_dtype)")
    return words.view(np.uint32)


def _fields(words: np.ndarray, bits: int) -> np.ndarray:
    """The ``32 / bits`` fields of each word, lowest first, as a last axis: ``[..., 32 / bits]``."""
    shifts = np.arange(0, 32, bits, dtype=np.uint32)
    return ((words[..., None] >> shifts) & np.uint32((1 << bits) - 1)).astype(np.uint8)


def decode_gptq(qweight: np.ndarray, qzeros: np.ndarray, scales: np.ndarray, g_idx: np.ndarray | None,
                scheme: Scheme, name: str = "layer") -> Layer:
    """A GPTQ layer's tensors (see the module's docstring) as a ``Layer``."""
    bits, group = scheme.bits, scheme.group_size
    per = 32 // bits
    words = _unsigned(qweight)
    k = words.shape[0] * per if g_idx is None else int(g_idx.shape[0])
    n = int(scales.shape[-1])
    groups = -(-k // group)
    _check_shapes(name, {"qweight": (words.shape, (-(-k // per), n)), "qzeros": (qzeros.shape, (groups, -(-n // per))),
                         "scales": (scales.shape, (groups, n)),
                         **({"g_idx": (g_idx.shape, (k,))} if g_idx is not None else {})})
    codes = _fields(words, bits).transpose(1, 0, 2).reshape(n, -1)[:, :k]  # [N, K]
    zero_words = _unsigned(qzeros)
    if scheme.v1:  # the zero points were stored minus one, word by word
        zero_words = zero_words + np.uint32(sum(1 << (bits * i) for i in range(per)))
    zeros = _fields(zero_words, bits).reshape(groups, -1)[:, :n].T
    if g_idx is not None:
        g_idx = np.asarray(g_idx).astype(np.int64)
        if g_idx.min(initial=0) < 0 or g_idx.max(initial=0) >= groups:
            raise InvalidInputError(f"{name}.g_idx names groups outside 0..{groups - 1}",
                                    fix="check that the checkpoint's files are whole and match its config.json")
        if np.array_equal(g_idx, np.arange(k) // group):
            g_idx = None
    return _layer(codes, scales.T, zeros, g_idx, bits, group)


def decode_awq(qweight: np.ndarray, qzeros: np.ndarray, scales: np.ndarray, scheme: Scheme,
               name: str = "layer") -> Layer:
    """An AWQ (GEMM packing) layer's tensors (see the module's docstring) as a ``Layer``."""
    words = _unsigned(qweight)
    k, n = int(words.shape[0]), int(scales.shape[-1])
    groups = -(-k // scheme.group_size)
    _check_shapes(name, {"qweight": (words.shape, (k, -(-n // 8))), "qzeros": (qzeros.shape, (groups, -(-n // 8))),
                         "scales": (scales.shape, (groups, n))})

    def columns(packed: np.ndarray) -> np.ndarray:  # [rows, N / 8] words -> [rows, N] in column order
        fields = _fields(packed, 4)
        ordered = np.empty_like(fields)
        ordered[..., _AWQ_ORDER] = fields
        return ordered.reshape(packed.shape[0], -1)[:, :n]

    return _layer(columns(words).T, scales.T, columns(_unsigned(qzeros)).T, None, 4, scheme.group_size)


def _check_shapes(name: str, shapes: dict[str, tuple[tuple[int, ...], tuple[int, ...]]]) -> None:
    for tensor, (shape, wanted) in shapes.items():
        if tuple(shape) != tuple(wanted):
            raise InvalidInputError(f"{name}.{tensor} has shape {list(shape)}, not the {list(wanted)} its other "
                                    "tensors and config.json's quantization_config imply", fix="check that the "
                                    "checkpoint's files are whole and that quantization_config is the one it was "
                                    "saved with")


def _layer(codes: np.ndarray, scales: np.ndarray, zeros: np.ndarray, g_idx: np.ndarray | None, bits: int,
           block: int) -> Layer:
    """``[N, K]`` codes and ``[N, groups]`` scales and zeros as a ``Layer`` (K padded to whole blocks)."""
    n, k = codes.shape
    blocks = scales.shape[1]
    padded = np.zeros((n, blocks * block), dtype=np.uint8)
    padded[:, :k] = codes
    middle = 1 << (bits - 1)
    kept = None if np.all(zeros == middle) else np.ascontiguousarray(zeros, dtype=np.uint8)
    return Layer(padded.reshape(n, blocks, block), np.ascontiguousarray(scales),
                 kept, None if g_idx is None else g_idx.astype(np.int32))


def dequantize(layer: Layer, bits: int, k: int) -> np.ndarray:
    """The ``[N, K]`` float64 weight a layer's codes stand for."""
    n, blocks, block = layer.codes.shape
    groups = np.arange(k) // block if layer.g_idx is None else layer.g_idx.astype(np.int64)
    zeros = np.full((n, blocks), 1 << (bits - 1)) if layer.zeros is None else layer.zeros
    codes = layer.codes.reshape(n, -1)[:, :k].astype(np.float64)
    return (codes - zeros[:, groups]) * layer.scales.astype(np.float64)[:, groups]


class Checkpoint:
    """A GPTQ or AWQ checkpoint's tensors: ``layers`` are the prefixes of its quantized linear layers,
    ``layer(prefix)`` decodes one (read from the files each time: nothing is kept in memory)."""

    def __init__(self, directory: str, scheme: Scheme):
        from safetensors import safe_open

        self.scheme = scheme
        self._where: dict[str, str] = {}
        for path in safetensors_files(directory):
            with safe_open(path, framework="pt") as f:
                self._where.update((key, path) for key in f.keys())
        self.layers = sorted(key[: -len(".qweight")] for key in self._where if key.endswith(".qweight"))
        if not self.layers:
            raise InvalidInputError(f"config.json says the checkpoint is {scheme.method.upper()}-quantized, but its "
                                    "files hold no quantized layer (no *.qweight tensor)",
                                    fix="remove quantization_config from config.json if the weights are float")
        missing = [f"{p}.{t}" for p in self.layers for t in ("qzeros", "scales") if f"{p}.{t}" not in self._where]
        if missing:
            raise InvalidInputError(f"the checkpoint lacks {', '.join(missing[:3])}",
                                    fix="check that its files are whole")

    def _read(self, key: str) -> torch.Tensor:
        from safetensors import safe_open

        with safe_open(self._where[key], framework="pt") as f:
            return f.get_tensor(key)

    def layer(self, prefix: str) -> Layer:
        return self._decoded(prefix)[0]

    def _decoded(self, prefix: str) -> tuple[Layer, int]:
        """The layer ``prefix`` decoded, and its number of inputs K."""
        packed = {t: self._read(f"{prefix}.{t}") for t in _PACKED if f"{prefix}.{t}" in self._where}
        arrays = {t: v.float().numpy() if t == "scales" else v.numpy() for t, v in packed.items()}
        rows = int(arrays["qweight"].shape[0])
        if self.scheme.method == "awq":
            return decode_awq(arrays["qweight"], arrays["qzeros"], arrays["scales"], self.scheme, prefix), rows
        g_idx = arrays.get("g_idx")
        k = rows * (32 // self.scheme.bits) if g_idx is None else int(g_idx.shape[0])
        return decode_gptq(arrays["qweight"], arrays["qzeros"], arrays["scales"], g_idx, self.scheme, prefix), k

    def state_dict(self, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        """Every tensor of the checkpoint as a float model holds it: each quantized layer's weight dequantized
        (in ``dtype``), the others as they are."""
        from safetensors import safe_open

        quantized = {f"{p}.{t}" for p in self.layers for t in _PACKED}
        tensors = {}
        for path in sorted(set(self._where.values())):
            with safe_open(path, framework="pt") as f:
                tensors.update((key, f.get_tensor(key)) for key in f.keys() if key not in quantized)
        for prefix in self.layers:
            layer, k = self._decoded(prefix)
            tensors[f"{prefix}.weight"] = torch.from_numpy(dequantize(layer, self.scheme.bits, k)).to(dtype)
        return tensors

    def dtype(self) -> torch.dtype:
        """The checkpoint's float dtype: that of its scales."""
        return self._read(f"{self.layers[0]}.scales").dtype


class _Codes(Mapping):
    """The model's weight name of each quantized layer -> its ``Layer``, decoded from the files when asked."""

    def __init__(self, checkpoint: Checkpoint, names: dict[str, str]):
        self._checkpoint, self._names = checkpoint, names

    def __getitem__(self, name: str) -> Layer:
        return self._checkpoint.layer(self._names[name])

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def load(directory: str, auto: str, config: Any, scheme: Scheme) -> tuple[torch.nn.Module, Mapping[str, Layer]]:
    """The model of ``directory`` for the auto class ``auto``, with the quantized layers' weights dequantized
    (in memory), and the codes of those layers by the model's weight names."""
    import transformers

    checkpoint = Checkpoint(directory, scheme)
    dtype = getattr(config, "dtype", None)
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    dtype = dtype if isinstance(dtype, torch.dtype) else checkpoint.dtype()
    float_config = copy.deepcopy(config)
    del float_config.quantization_config  # a float model: transformers must not quantize it again
    auto_class = getattr(transformers, auto)
    try:
        model_class = auto_class._model_mapping[type(float_config)]
    except KeyError:
        raise InvalidInputError(f"transformers has no {auto} for {config.model_type} models",
                                fix="check the task: the directory's model may be for another one") from None
    model, info = model_class.from_pretrained(None, config=float_config, state_dict=checkpoint.state_dict(dtype),
                                              dtype=dtype, output_loading_info=True)
    missing = sorted(info.get("missing_keys") or ())
    if missing:  # transformers would have initialised them at random
        raise InvalidInputError(f"the checkpoint lacks {len(missing)} weights of {type(model).__name__} "
                                f"({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''})",
                                fix="check that the directory holds this task's model (its head included)")
    scaled = sorted(key for key in info.get("unexpected_keys") or () if key.endswith(".scales"))
    if scaled:  # the model ignores them (another task's head, say), but not these
        raise InvalidInputError(f"the checkpoint scales activations ({', '.join(scaled[:3])}), as AWQ does for some "
                                "architectures, which onnxport does not apply",
                                fix="use a checkpoint without scaled activations")
    model.eval()
    generation = os.path.join(directory, "generation_config.json")
    if os.path.isfile(generation) and getattr(model, "generation_config", None) is not None:
        model.generation_config = transformers.GenerationConfig.from_pretrained(directory)
    expected = set(model.state_dict())
    prefix = getattr(model, "base_model_prefix", "") or ""
    names = {}
    for layer in checkpoint.layers:
        key = f"{layer}.weight"
        for name in (key, key[len(prefix) + 1:] if prefix and key.startswith(f"{prefix}.") else "", f"{prefix}.{key}"):
            if name in expected:
                names[name] = layer
                break
    return model, _Codes(checkpoint, names)
