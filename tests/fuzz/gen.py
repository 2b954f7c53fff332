"""The fuzz generator's state: ``Program`` (what a seed makes), ``Bd`` (the batch in a shape) and ``_Gen``,
which tracks the running tensor ``h`` while the op families (``families``) write source for it."""

from __future__ import annotations

import dataclasses
import math
import random

import torch


__all__ = ["Bd", "Program"]

_DTYPES = [(torch.float32, 0.70), (torch.float16, 0.12), (torch.float64, 0.10), (torch.bfloat16, 0.08)]
_SHORT = {torch.float32: "f32", torch.float16: "f16", torch.float64: "f64", torch.bfloat16: "bf16",
          torch.bool: "bool", torch.int64: "i64"}
_MAX_NUMEL = 3000  # at the example batch: keeps eager and onnxruntime runs short
_MAX_DRAWS = 40


# the unary ops (name, source with {h}) that families draw from, through _Gen.unary
_UNARY = [
    ("relu", "torch.relu({h})"), ("gelu", "F.gelu({h})"), ("gelu_tanh", "F.gelu({h}, approximate='tanh')"),
    ("silu", "F.silu({h})"), ("sigmoid", "torch.sigmoid({h})"), ("tanh", "torch.tanh({h})"),
    ("softplus", "F.softplus({h})"), ("elu", "F.elu({h})"), ("leaky_relu", "F.leaky_relu({h}, 0.1)"),
    ("hardswish", "F.hardswish({h})"), ("hardsigmoid", "F.hardsigmoid({h})"), ("abs", "{h}.abs()"), ("neg", "-{h}"),
    ("sin", "torch.sin({h})"), ("cos", "{h}.cos()"), ("exp_tanh", "torch.exp(torch.tanh({h}))"),
    ("sqrt", "torch.sqrt({h}.abs() + 0.5)"), ("rsqrt", "torch.rsqrt({h} * {h} + 1.0)"),
    ("log1p", "torch.log1p({h}.abs())"), ("clamp", "torch.clamp({h}, -1.5, 1.5)"),
    ("clamp_min", "{h}.clamp(min=-0.5)"), ("erf", "torch.erf({h})"), ("relu6", "F.relu6({h} * 3.0)"),
    ("mish", "F.mish({h})"), ("square", "torch.square({h}) * 0.5"), ("logsigmoid", "F.logsigmoid({h})"),
    ("atan", "torch.atan({h})"), ("selu", "F.selu({h})"), ("celu", "F.celu({h})"), ("softsign", "F.softsign({h})"),
    ("tanhshrink", "F.tanhshrink({h})"), ("reciprocal", "torch.reciprocal({h} * {h} + 1.0)"),
    ("pow", "torch.pow({h}.abs() + 0.1, 1.5)"), ("hardtanh", "F.hardtanh({h})"),
    ("dropout_eval", "F.dropout({h}, 0.3, training=self.training)"),
]


@dataclasses.dataclass
class Program:
    """One random program with its example inputs.

    ``float_dtypes`` are the floating dtypes the program computes in (the check holds the outputs to
    the loosest of their tolerances); ``hazards`` name its Python paths on a size of 1; ``families``
    the op families of its blocks."""

    seed: int
    source: str
    description: str
    model: torch.nn.Module
    args: tuple[torch.Tensor, ...]
    input_names: tuple[str, ...]
    dynamic: bool
    batch: int
    dtype: torch.dtype
    float_dtypes: tuple[torch.dtype, ...]
    hazards: tuple[str, ...]
    families: tuple[str, ...]
    attempt: int

    @property
    def dynamic_shapes(self) -> tuple[dict[int, object], ...] | None:
        if not self.dynamic:
            return None
        return tuple({0: torch.export.Dim.DYNAMIC} for _ in self.args)

    def inputs_at(self, n: int) -> tuple[torch.Tensor, ...]:
        """The example inputs with dim 0 resized to ``n``: rows of the example repeated or cut."""
        rows = torch.arange(n) % self.batch
        return tuple(a.index_select(0, rows) for a in self.args)


class Bd:
    """The batch dim of ``h``: ``f`` times the batch. ``exact`` is False once the batch was sliced
    (``h[:2]``): the dim still varies with the batch, but is not a multiple of it."""

    __slots__ = ("f", "exact")

    def __init__(self, f: int = 1, exact: bool = True):
        self.f, self.exact = f, exact

    def __repr__(self) -> str:
        return ("B" if self.f == 1 else f"{self.f}B") + ("" if self.exact else "'")


def _is_b(d: object) -> bool:
    return isinstance(d, Bd)


def _dt(dtype: torch.dtype) -> str:
    return str(dtype)  # "torch.float32"


class _Gen:
    def __init__(self, seed: int, rng: random.Random):
        self.seed, self.rng = seed, rng
        self.dtype = _weighted(rng, _DTYPES)
        self.dynamic = seed % 2 == 1
        self.batch = rng.choice([1, 2, 3, 4])
        self.inputs: list[tuple[str, list, str, dict]] = []  # name, shape (Bd(1) in dim 0), kind, options
        self.init: list[str] = []
        self.fwd: list[str] = []
        self.labels: list[str] = []
        self.families: list[str] = []
        self.hazards: list[str] = []
        self.shape: list = []
        self.cur = self.dtype
        self.touched = {self.dtype}
        self.fragile = False  # after a squeeze() that drops the batch at size 1: only ops on the last dim
        self.contiguous = True
        self.stash: list[str] = []
        self.count = 0

    # -- helpers -------------------------------------------------------------------------------------

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def emit(self, line: str) -> None:
        self.fwd.append(line)

    def module(self, prefix: str, ctor: str) -> str:
        name = self.name(prefix)
        self.init.append(f"self.{name} = {ctor}")
        return f"self.{name}"

    def param(self, shape: list[int], scale: float = 0.5) -> str:
        dims = ", ".join(str(s) for s in shape)
        return self.module("p", f"torch.nn.Parameter(torch.randn({dims}) * {scale})")

    def buffer(self, prefix: str, value: str) -> str:
        name = self.name(prefix)
        self.init.append(f"self.register_buffer({name!r}, {value})")
        return f"self.{name}"

    def add_input(self, prefix: str, shape: list, kind: str, **options) -> str:
        name = f"{prefix}{len(self.inputs)}"
        self.inputs.append((name, list(shape), kind, options))
        return name

    @property
    def rank(self) -> int:
        return len(self.shape)

    def bdim(self) -> int | None:
        for i, d in enumerate(self.shape):
            if _is_b(d):
                return i
        return None

    def batch_exact_at0(self) -> bool:
        """h is [B, static...]: a new input of the batch can be combined with it."""
        return (self.rank >= 1 and _is_b(self.shape[0]) and self.shape[0].f == 1 and self.shape[0].exact
                and all(isinstance(d, int) for d in self.shape[1:]))

    def size(self, d: object) -> int:
        return d.f * self.batch if _is_b(d) else d

    def numel(self, shape: list | None = None) -> int:
        return math.prod(self.size(d) for d in (self.shape if shape is None else shape))

    def static(self, i: int) -> bool:
        return isinstance(self.shape[i], int)

    def dim(self, i: int, rank: int | None = None) -> str:
        """Dim ``i`` written positive or negative."""
        rank = self.rank if rank is None else rank
        return str(i - rank) if self.rng.random() < 0.4 else str(i)

    def model_dtype(self) -> None:
        """Parameters are in the model's dtype: cast ``h`` back before a block that uses them."""
        if self.cur != self.dtype:
            self.emit(f"h = h.to({_dt(self.dtype)})")
            self.cur = self.dtype

    def floating_input(self, shape: list) -> str:
        name = self.add_input("x", shape, "float")
        self.cur = torch.promote_types(self.cur, self.dtype)
        return name

    def sizes_code(self, shape: list, minus_one: bool = True) -> str:
        """A reshape target for ``shape``: the batch entry as -1 or from ``h.shape``."""
        b = self.bdim()
        parts = []
        for d in shape:
            if _is_b(d):
                if b is not None and self.shape[b].f == d.f and self.rng.random() < 0.5:
                    parts.append(f"h.shape[{b}]")
                else:
                    parts.append("-1")
            else:
                parts.append(str(d))
        return ", ".join(parts)

    def unary(self, var: str = "h") -> tuple[str, str]:
        label, code = self.rng.choice(_UNARY)
        return label, code.format(h=var)

    def stash_h(self) -> None:
        if len(self.stash) < 2:
            name = self.name("s")
            self.emit(f"{name} = h")
            self.stash.append(name)


def _weighted(rng: random.Random, items: list[tuple[object, float]]) -> object:
    total = sum(w for _, w in items)
    x = rng.random() * total
    for item, w in items:
        x -= w
        if x < 0:
            return item
    return items[-1][0]
