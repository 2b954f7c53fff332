"""Random small ``torch.nn.Module`` programs over onnxport's op families, for the fuzz test.

``make_program(seed)`` draws one program from ``random.Random(seed)``: a start (a vector, a sequence, a
1-d or 2-d image, token ids, a tensor of any rank) and two to six blocks, each one op family applied to
the running tensor ``h``: elementwise ops and activations, reductions, matrix products, convolutions and
pooling, normalisations, reshapes and permutations, squeeze/unsqueeze, slicing and indexing,
cat/stack/split, softmax, where/masked_fill, cumsum, pad, attention, RNN/LSTM/GRU layers, dtype casts,
and Python code on sizes (``if h.shape[0] == 1:``, ``squeeze()`` without dims, ``max(n - 1, 1)``).

The program is Python source (``Program.source``, a class with ``__init__`` and ``forward``), executed
here, so a failing seed can be read and pasted. The generator tracks the shape of ``h`` with the batch
as a symbol ``B`` (possibly times a static factor, after a flatten or a cat), so that no weight is sized
by the batch and the program stays valid at other batch sizes. Every input has the batch in dim 0; a
dynamic program declares dim 0 of every input ``Dim.DYNAMIC``. Odd seeds are dynamic, even ones static.

Deterministic: the same seed gives the same source, weights and inputs (torch's generator is seeded
from the seed before the module is built). A drawn program that eager PyTorch refuses at its example, or
whose outputs are not finite there, is drawn again from the same ``random.Random`` (``Program.attempt``
counts the draws).
"""

from __future__ import annotations

import dataclasses
import linecache
import math
import random
import warnings
from collections.abc import Callable

import torch

__all__ = ["Program", "make_program"]

_DTYPES = [(torch.float32, 0.70), (torch.float16, 0.12), (torch.float64, 0.10), (torch.bfloat16, 0.08)]
_SHORT = {torch.float32: "f32", torch.float16: "f16", torch.float64: "f64", torch.bfloat16: "bf16",
          torch.bool: "bool", torch.int64: "i64"}
_MAX_NUMEL = 3000  # at the example batch: keeps eager and onnxruntime runs short
_MAX_DRAWS = 40


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


# -- elementwise -----------------------------------------------------------------------------------

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
_CONSTS = ["0.5", "1.5", "-2.0", "3.0", "0.25", "-0.75"]


def b_unary(g: _Gen) -> bool:
    label, code = g.unary()
    g.emit(f"h = {code}")
    g.labels.append(label)
    return True


def b_scalar(g: _Gen) -> bool:
    c, c2 = g.rng.choice(_CONSTS), g.rng.choice(_CONSTS)
    forms = [("mul", f"h * {c}"), ("add", f"h + {c}"), ("rsub", f"{c} - h"), ("div", f"h / {c}"),
             ("muladd", f"h * {c} + {c2}")]
    if g.rank and not g.fragile:
        i = g.rng.randrange(g.rank)
        forms.append((f"div_size{i}", f"h / h.shape[{i}]"))
    label, code = g.rng.choice(forms)
    g.emit(f"h = {code}")
    g.labels.append(label)
    return True


def b_param(g: _Gen) -> bool:
    """h op a parameter over its trailing static dims."""
    trailing = 0
    for d in reversed(g.shape):
        if not isinstance(d, int):
            break
        trailing += 1
    if trailing == 0:
        return False
    k = 1 if g.fragile else g.rng.randint(1, trailing)
    shape = [d if g.rng.random() < 0.8 else 1 for d in g.shape[g.rank - k:]]
    p = g.param(shape)
    op = g.rng.choice(["h * {p}", "h + {p}", "torch.maximum(h, {p})", "torch.addcmul(h, h, {p}, value=0.5)"])
    g.emit(f"h = {op.format(p=p)}")
    g.cur = torch.promote_types(g.cur, g.dtype)
    g.labels.append(f"param{shape}")
    return True


def b_input_binary(g: _Gen) -> bool:
    if g.fragile or not g.batch_exact_at0() or len(g.inputs) >= 3:
        return False
    shape = [g.shape[0]] + [d if g.rng.random() < 0.75 else 1 for d in g.shape[1:]]
    x = g.floating_input(shape)
    op = g.rng.choice(["h + {x}", "h * {x}", "h - {x}", "torch.maximum(h, {x})", "torch.minimum({x}, h)",
                       "torch.lerp(h, {x}, 0.3)"])
    g.emit(f"h = {op.format(x=x)}")
    g.labels.append(f"binary_input{shape}")
    return True


def b_where(g: _Gen) -> bool:
    if g.fragile:
        return False
    c = g.rng.choice(_CONSTS)
    forms = ["torch.where({m}, h, {c})", "torch.where({m}, h, -h)", "h.masked_fill({m}, {c})",
             "h.masked_fill(~{m}, 0.0)", "h * {m}.to(h.dtype)"]
    form = g.rng.choice(forms)
    raw = [name for name, shape, kind, _ in g.inputs
           if kind == "float" and len(shape) == g.rank and g.batch_exact_at0()
           and all(a == b or (_is_b(a) and _is_b(b)) for a, b in zip(shape, g.shape))]
    choice = g.rng.random()
    if raw and choice < 0.3:
        m = f"({g.rng.choice(raw)} > 0)"
        label = "where_raw"
    elif g.batch_exact_at0() and len(g.inputs) < 3 and choice < 0.75:
        shape = [g.shape[0]] + [d if g.rng.random() < 0.75 else 1 for d in g.shape[1:]]
        m = g.add_input("m", shape, "bool")
        label = f"where_mask{shape}"
    else:
        trailing = []
        for d in reversed(g.shape):
            if not isinstance(d, int) or len(trailing) == 2:
                break
            trailing.insert(0, d)
        if not trailing:
            return False
        dims = ", ".join(map(str, trailing))
        m = g.buffer("mask", f"torch.rand({dims}) > 0.5")
        label = f"where_buffer{trailing}"
    g.emit("h = " + form.format(m=m, c=c))
    g.labels.append(label)
    return True


# -- reductions ------------------------------------------------------------------------------------


def b_reduce(g: _Gen) -> bool:
    if g.rank == 0:
        return False
    op = g.rng.choice(["sum", "mean", "amax", "amin", "logsumexp", "var", "std", "norm"])
    keep = g.rng.random() < 0.5
    if g.fragile:
        if not keep or op in ("var", "std"):
            keep, op = True, g.rng.choice(["sum", "mean", "amax"])
        dims = [g.rank - 1]
    else:
        candidates = [i for i in range(g.rank) if g.static(i)]
        b = g.bdim()
        if b is not None and g.rng.random() < 0.12:
            candidates = [b]  # over the batch
        if not candidates:
            return False
        k = 1 if len(candidates) == 1 or g.rng.random() < 0.6 else 2
        dims = sorted(g.rng.sample(candidates, k))
        if not keep and len(dims) == g.rank and g.rng.random() < 0.7:
            keep = True  # mostly keep a dim to work on
        if op in ("var", "std") and any(g.size(g.shape[i]) < 2 for i in dims) and not any(
                _is_b(g.shape[i]) for i in dims):
            op = "mean"
    ds = ["-1"] if g.fragile else [g.dim(i) for i in dims]
    dimarg = ds[0] if len(ds) == 1 else "(" + ", ".join(ds) + ")"
    if op == "logsumexp":
        code = f"torch.logsumexp(h, dim={dimarg}, keepdim={keep})"
    elif op == "norm":
        code = f"torch.linalg.vector_norm(h, dim={dimarg}, keepdim={keep})"
    elif op in ("var", "std"):
        code = f"h.{op}(dim={dimarg}, keepdim={keep})"
        if any(_is_b(g.shape[i]) for i in dims):
            g.hazards.append(f"{op} over the batch (NaN at size 1)")
    else:
        code = f"h.{op}(dim={dimarg}, keepdim={keep})"
    g.emit(f"h = {code}")
    g.shape = [1 if i in dims else d for i, d in enumerate(g.shape)] if keep else \
        [d for i, d in enumerate(g.shape) if i not in dims]
    g.labels.append(f"{op}({dimarg}{', keep' if keep else ''})")
    return True


# -- matrix products -------------------------------------------------------------------------------


def b_linear(g: _Gen) -> bool:
    if g.rank == 0 or not g.static(-1):
        return False
    n, out = g.shape[-1], g.rng.randint(2, 12)
    g.model_dtype()
    form = g.rng.random()
    if form < 0.6:
        bias = g.rng.random() < 0.8
        lin = g.module("lin", f"torch.nn.Linear({n}, {out}, bias={bias})")
        g.emit(f"h = {lin}(h)")
        label = f"linear({n}->{out})"
    elif form < 0.8:
        w = g.param([out, n], round(1 / math.sqrt(n), 3))
        g.emit(f"h = F.linear(h, {w})")
        label = f"F.linear({n}->{out})"
    elif form < 0.9 or g.fragile:
        w = g.param([n, out], round(1 / math.sqrt(n), 3))
        g.emit(f"h = h @ {w}")
        label = f"matmul_param({n}->{out})"
    else:
        w = g.param([n, out], round(1 / math.sqrt(n), 3))
        g.emit(f"h = torch.einsum('...i,ij->...j', h, {w})")
        label = f"einsum({n}->{out})"
    g.shape = g.shape[:-1] + [out]
    g.labels.append(label)
    return True


def b_matmul(g: _Gen) -> bool:
    if g.fragile or g.rank < 2 or not g.static(-1):
        return False
    forms = []
    n, m = g.shape[-2], g.shape[-1]
    if isinstance(n, int) and g.numel(g.shape[:-1] + [n]) <= _MAX_NUMEL:
        forms.append("hhT")
        if g.rank == 3:
            forms.append("bmm")
    if g.numel(g.shape[:-2] + [m, m]) <= _MAX_NUMEL:
        forms.append("hTh")
    if g.batch_exact_at0() and g.rank == 3 and len(g.inputs) < 3:
        forms.append("input")
    if not forms:
        return False
    form = g.rng.choice(forms)
    scale = round(1 / m, 4)
    if form == "hhT":
        g.emit(f"h = torch.matmul(h, h.transpose(-1, -2)) * {scale}")
        g.shape = g.shape[:-1] + [n]
    elif form == "bmm":
        g.emit(f"h = torch.bmm(h, h.transpose(1, 2)) * {scale}")
        g.shape = g.shape[:-1] + [n]
    elif form == "hTh":
        scale = round(1 / g.size(n), 4)
        g.emit(f"h = (h.mT @ h) * {scale}" if not _is_b(n) else "h = (h.mT @ h) / h.shape[-2]")
        g.shape = g.shape[:-2] + [m, m]
    else:
        k = g.rng.randint(2, 8)
        x = g.floating_input([g.shape[0], m, k])
        g.emit(f"h = torch.bmm(h, {x})" if g.rng.random() < 0.5 else f"h = h @ {x}")
        g.shape = g.shape[:-1] + [k]
    g.labels.append(f"matmul_{form}")
    return True


# -- convolutions, pooling, batch norm --------------------------------------------------------------


def _conv_out(n: int, k: int, s: int, p: int, d: int) -> int:
    return (n + 2 * p - d * (k - 1) - 1) // s + 1


def b_conv(g: _Gen) -> bool:
    if g.fragile or g.rank not in (3, 4) or not all(g.static(i) for i in range(1, g.rank)):
        return False
    nd = g.rank - 2
    c = g.shape[1]
    spatial = g.shape[2:]
    groups = g.rng.choice([d for d in (1, 1, 2, 3) if c % d == 0])
    cout = groups * g.rng.randint(1, max(1, 8 // groups))
    k = g.rng.choice([1, 2, 3, 3, 5])
    stride = g.rng.choice([1, 1, 2])
    dil = g.rng.choice([1, 1, 2])
    padding: object = g.rng.choice([0, 1, 2, "same", "valid"])
    if padding == "same" and stride != 1:
        padding = 1
    mode = "zeros"
    if isinstance(padding, int) and padding > 0 and g.rng.random() < 0.3:
        mode = g.rng.choice(["reflect", "replicate", "circular"])
        if mode in ("reflect", "circular") and any(padding >= n for n in spatial):
            mode = "zeros"
    if padding == "same":
        out = list(spatial)
    else:
        p = 0 if padding == "valid" else padding
        out = [_conv_out(n, k, stride, p, dil) for n in spatial]
    if any(o < 1 for o in out):
        return False
    g.model_dtype()
    cls = "Conv1d" if nd == 1 else "Conv2d"
    bias = g.rng.random() < 0.8
    conv = g.module("conv", f"torch.nn.{cls}({c}, {cout}, {k}, stride={stride}, padding={padding!r}, "
                            f"dilation={dil}, groups={groups}, bias={bias}, padding_mode={mode!r})")
    g.emit(f"h = {conv}(h)")
    g.shape = [g.shape[0], cout] + out
    g.labels.append(f"{cls.lower()}({c}->{cout}, k{k} s{stride} p{padding!r} d{dil} g{groups}"
                    f"{'' if mode == 'zeros' else ' ' + mode})")
    return True


def _pool_out(n: int, k: int, s: int, p: int, ceil: bool) -> int:
    out = (n + 2 * p - k + ((s - 1) if ceil else 0)) // s + 1
    if ceil and (out - 1) * s >= n + p:
        out -= 1
    return out


def b_pool(g: _Gen) -> bool:
    if g.fragile or g.rank not in (3, 4) or not all(g.static(i) for i in range(2, g.rank)):
        return False
    nd = g.rank - 2
    spatial = g.shape[2:]
    kind = g.rng.choice(["max", "avg", "adaptive_avg", "adaptive_max"])
    if kind.startswith("adaptive"):
        out = [g.rng.choice([1, 2, max(1, n // 2), n]) for n in spatial]
        arg = out[0] if nd == 1 else tuple(out)
        g.emit(f"h = F.{kind}_pool{nd}d(h, {arg})")
        label = f"{kind}_pool{nd}d({arg})"
    else:
        k = g.rng.choice([2, 3])
        s = g.rng.choice([1, 2, k])
        p = g.rng.choice([0, 0, k // 2])
        ceil = g.rng.random() < 0.25
        if any(n + 2 * p < k for n in spatial):
            return False
        out = [_pool_out(n, k, s, p, ceil) for n in spatial]
        if any(o < 1 for o in out):
            return False
        extra = f", ceil_mode={ceil}"
        if kind == "avg":
            extra += f", count_include_pad={g.rng.random() < 0.5}"
        g.emit(f"h = F.{kind}_pool{nd}d(h, {k}, stride={s}, padding={p}{extra})")
        label = f"{kind}_pool{nd}d(k{k} s{s} p{p}{' ceil' if ceil else ''})"
    g.shape = g.shape[:2] + out
    g.labels.append(label)
    return True


def b_batchnorm(g: _Gen) -> bool:
    if g.fragile or g.rank not in (2, 3, 4) or not g.static(1):
        return False
    c = g.shape[1]
    cls = "BatchNorm2d" if g.rank == 4 else "BatchNorm1d"
    g.model_dtype()
    affine = g.rng.random() < 0.8
    bn = g.module("bn", f"torch.nn.{cls}({c}, affine={affine})")
    g.init.append(f"{bn}.running_mean.uniform_(-0.5, 0.5)")
    g.init.append(f"{bn}.running_var.uniform_(0.5, 1.5)")
    if affine:
        g.init.append(f"{bn}.weight.data.uniform_(0.5, 1.5)")
        g.init.append(f"{bn}.bias.data.uniform_(-0.5, 0.5)")
    g.emit(f"h = {bn}(h)")
    g.labels.append(f"{cls.lower()}({c})")
    return True


# -- normalisations --------------------------------------------------------------------------------


def b_norm(g: _Gen) -> bool:
    if g.rank == 0 or not g.static(-1):
        return False
    forms = ["layer", "layer", "rms", "functional"]
    if not g.fragile and g.rank >= 2 and g.static(1):
        forms += ["group", "group"]
        if g.rank in (3, 4) and all(g.static(i) for i in range(2, g.rank)) and g.numel(g.shape[2:]) > 1:
            forms.append("instance")
    form = g.rng.choice(forms)
    g.model_dtype()
    if form in ("layer", "rms"):
        k = 2 if not g.fragile and g.rank >= 2 and g.static(-2) and g.rng.random() < 0.3 else 1
        shape = tuple(g.shape[g.rank - k:])
        if form == "layer":
            affine = g.rng.random() < 0.8
            bias = g.rng.random() < 0.8
            mod = g.module("ln", f"torch.nn.LayerNorm({shape}, elementwise_affine={affine}, bias={bias})")
            if affine:
                g.init.append(f"{mod}.weight.data.uniform_(0.5, 1.5)")
        else:
            eps = g.rng.choice([None, 1e-6])
            mod = g.module("rms", f"torch.nn.RMSNorm({shape}, eps={eps})")
        g.emit(f"h = {mod}(h)")
        label = f"{form}_norm{list(shape)}"
    elif form == "functional":
        g.emit(f"h = F.layer_norm(h, ({g.shape[-1]},))")
        label = "F.layer_norm"
    elif form == "group":
        c = g.shape[1]
        groups = g.rng.choice([d for d in range(1, c + 1) if c % d == 0])
        affine = g.rng.random() < 0.7
        mod = g.module("gn", f"torch.nn.GroupNorm({groups}, {c}, affine={affine})")
        g.emit(f"h = {mod}(h)")
        label = f"group_norm({groups}, {c})"
    else:
        g.emit("h = F.instance_norm(h)")
        label = "instance_norm"
    g.labels.append(label)
    return True


# -- shapes ----------------------------------------------------------------------------------------


def b_reshape(g: _Gen) -> bool:
    if g.fragile or g.rank == 0:
        return False
    forms = []
    if g.rank >= 2:
        forms += ["flatten", "merge"]
    splittable = [i for i in range(g.rank) if g.static(i) and any(g.shape[i] % p == 0 for p in range(2, g.shape[i]))]
    if splittable:
        forms += ["split", "unflatten"]
    if g.rank >= 3 and _is_b(g.shape[0]):
        forms.append("view_b")
    if g.rank >= 2:
        forms.append("flatten_all")
    if not forms:
        return False
    form = g.rng.choice(forms)
    reshape = "reshape" if not g.contiguous or g.rng.random() < 0.5 else "view"
    if form in ("flatten", "merge", "view_b", "flatten_all"):
        if form == "view_b":
            a, b = 1, g.rank - 1
        elif form == "flatten_all":
            a, b = 0, g.rank - 1
        else:
            a = g.rng.randrange(g.rank - 1)
            b = a + 1 if form == "merge" else g.rng.randrange(a + 1, g.rank)
        group = g.shape[a:b + 1]
        bs = [d for d in group if _is_b(d)]
        prod = math.prod(d for d in group if isinstance(d, int))
        merged = Bd(bs[0].f * prod, bs[0].exact) if bs else prod
        new = g.shape[:a] + [merged] + g.shape[b + 1:]
        if form == "flatten" or form == "flatten_all" and g.rng.random() < 0.5:
            code = f"h.flatten({a}, {b})" if form == "flatten" else "h.flatten()"
        elif form == "view_b":
            code = f"h.{reshape}(h.shape[0], -1)"
        else:
            code = f"h.{reshape}({g.sizes_code(new)})"
            if form == "flatten_all" and isinstance(merged, int):
                code = f"h.{reshape}(-1)"
    else:
        i = g.rng.choice(splittable)
        n = g.shape[i]
        p = g.rng.choice([p for p in range(2, n) if n % p == 0])
        new = g.shape[:i] + [p, n // p] + g.shape[i + 1:]
        if form == "unflatten":
            code = f"h.unflatten({g.dim(i)}, ({p}, {n // p}))"
        else:
            code = f"h.{reshape}({g.sizes_code(new)})"
    if "view" in code and not g.contiguous:
        code = code.replace(".view(", ".reshape(")
    g.emit(f"h = {code}")
    g.shape = new
    g.contiguous = True
    g.labels.append(f"{form}->{g.shape}")
    return True


def b_permute(g: _Gen) -> bool:
    if g.fragile or g.rank < 2:
        return False
    if g.rng.random() < 0.5:
        i, j = g.rng.sample(range(g.rank), 2)
        code = f"h.transpose({g.dim(i)}, {g.dim(j)})"
        if g.rank == 2 and g.rng.random() < 0.3:
            code = "h.t()"
        elif sorted((i, j)) == [g.rank - 2, g.rank - 1] and g.rng.random() < 0.3:
            code = "h.mT"
        perm = list(range(g.rank))
        perm[i], perm[j] = perm[j], perm[i]
    else:
        perm = list(range(g.rank))
        while perm == sorted(perm):
            g.rng.shuffle(perm)
        code = f"h.permute({', '.join(map(str, perm))})"
    g.emit(f"h = {code}")
    g.shape = [g.shape[p] for p in perm]
    g.contiguous = g.rng.random() < 0.3
    if g.contiguous:
        g.emit("h = h.contiguous()")
    g.labels.append(f"permute{perm}")
    return True


def b_unsqueeze(g: _Gen) -> bool:
    if g.fragile:
        return False
    ones = [i for i in range(g.rank) if g.shape[i] == 1 and isinstance(g.shape[i], int)]
    if ones and g.rng.random() < 0.5:
        i = g.rng.choice(ones)
        g.emit(f"h = h.squeeze({g.dim(i)})")
        g.shape = g.shape[:i] + g.shape[i + 1:]
        g.labels.append(f"squeeze({i})")
        return True
    if g.rank >= 5:
        return False
    i = g.rng.randint(0, g.rank)
    code = f"h.unsqueeze({g.dim(i, g.rank + 1)})"
    if i == g.rank and g.rng.random() < 0.3:
        code = "h[..., None]"
    g.emit(f"h = {code}")
    g.shape = g.shape[:i] + [1] + g.shape[i:]
    g.labels.append(f"unsqueeze({i})")
    return True


# -- slicing and indexing --------------------------------------------------------------------------


def _index(g: _Gen, i: int, item: str) -> str:
    if i == g.rank - 1 and g.rank > 1 and g.rng.random() < 0.5:
        return f"h[..., {item}]"
    return "h[" + ", ".join([":"] * i + [item]) + "]"


def b_slice(g: _Gen) -> bool:
    if g.fragile or g.rank == 0:
        return False
    dims = [i for i in range(g.rank) if g.static(i) and g.shape[i] >= 2]
    b = g.bdim()
    form = g.rng.choice(["slice", "slice", "narrow", "select", "list", "index_select", "gather", "batch"])
    if form == "batch":
        if b is None or g.rng.random() < 0.5:  # rare: slicing the batch itself
            return False
        item = g.rng.choice([":2", "1:", "-2:", "::2"])
        g.emit(f"h = {_index(g, b, item)}")
        g.shape = list(g.shape)
        g.shape[b] = Bd(g.shape[b].f, exact=False)
        g.labels.append(f"batch[{item}]")
        return True
    if not dims:
        return False
    i = g.rng.choice(dims)
    n = g.shape[i]
    if form == "slice":
        while True:
            start = g.rng.choice([None, 0, 1, -2, -n, n // 2])
            stop = g.rng.choice([None, n, n - 1, -1, 2 * n])
            step = g.rng.choice([1, 1, 1, 2, 3])
            length = len(range(n)[slice(start, stop, step)])
            if length >= 1:
                break
        item = f"{'' if start is None else start}:{'' if stop is None else stop}" + ("" if step == 1 else f":{step}")
        g.emit(f"h = {_index(g, i, item)}")
        g.shape = g.shape[:i] + [length] + g.shape[i + 1:]
        g.labels.append(f"slice{i}[{item}]")
    elif form == "narrow":
        start = g.rng.randrange(n)
        length = g.rng.randint(1, n - start)
        g.emit(f"h = h.narrow({g.dim(i)}, {start}, {length})")
        g.shape = g.shape[:i] + [length] + g.shape[i + 1:]
        g.labels.append(f"narrow{i}({start}, {length})")
    elif form == "select":
        j = g.rng.choice([0, n - 1, -1, -n, n // 2])
        g.emit(f"h = {_index(g, i, str(j))}" if g.rng.random() < 0.5 else f"h = h.select({g.dim(i)}, {j})")
        g.shape = g.shape[:i] + g.shape[i + 1:]
        g.labels.append(f"select{i}({j})")
    elif form == "list":
        idx = [g.rng.randrange(-n, n) for _ in range(g.rng.randint(1, 4))]
        g.emit(f"h = {_index(g, i, str(idx))}")
        g.shape = g.shape[:i] + [len(idx)] + g.shape[i + 1:]
        g.labels.append(f"index{i}{idx}")
    elif form == "index_select":
        idx = [g.rng.randrange(n) for _ in range(g.rng.randint(1, 4))]
        buf = g.buffer("idx", f"torch.tensor({idx})")
        g.emit(f"h = torch.index_select(h, {g.dim(i)}, {buf})" if g.rng.random() < 0.5 else
               f"h = {_index(g, i, buf)}")
        g.shape = g.shape[:i] + [len(idx)] + g.shape[i + 1:]
        g.labels.append(f"index_select{i}{idx}")
    else:  # gather along a static dim, with an index input of the batch
        if not g.batch_exact_at0() or i == 0 or len(g.inputs) >= 3:
            return False
        k = g.rng.randint(1, n)
        shape = g.shape[:i] + [k] + g.shape[i + 1:]
        idx = g.add_input("i", shape, "index", high=n)
        g.emit(f"h = torch.gather(h, {g.dim(i)}, {idx})")
        g.shape = shape
        g.labels.append(f"gather{i}")
    return True


# -- cat, stack, split -----------------------------------------------------------------------------


def b_cat(g: _Gen) -> bool:
    if g.fragile or g.rank == 0:
        return False
    forms = ["cat", "stack", "split", "chunk"]
    if g.bdim() is not None and g.shape[g.bdim()].exact:
        forms.append("cat_param")
    if g.batch_exact_at0() and g.rank >= 2 and len(g.inputs) < 3:
        forms.append("cat_input")
    form = g.rng.choice(forms)
    label, other = g.unary()
    if form == "cat":
        i = g.rng.randrange(g.rank)
        new = list(g.shape)
        new[i] = Bd(new[i].f * 2, new[i].exact) if _is_b(new[i]) else new[i] * 2
        if g.numel(new) > _MAX_NUMEL:
            return False
        g.emit(f"h = torch.cat([h, {other}], dim={g.dim(i)})")
        g.shape = new
        g.labels.append(f"cat{i}(h, {label})")
    elif form == "stack":
        i = g.rng.randint(0, g.rank)
        new = g.shape[:i] + [2] + g.shape[i:]
        if g.numel(new) > _MAX_NUMEL or g.rank >= 5:
            return False
        g.emit(f"h = torch.stack([{other}, h], dim={g.dim(i, g.rank + 1)})")
        g.shape = new
        g.labels.append(f"stack{i}({label}, h)")
    elif form == "cat_param":
        b = g.bdim()
        dims = [i for i in range(g.rank) if i != b]
        if not dims:
            return False
        i = g.rng.choice(dims)
        k = g.rng.randint(1, 3)
        shape = [1 if j == b else (k if j == i else d) for j, d in enumerate(g.shape)]
        p = g.param(shape)
        expand = ", ".join(f"h.shape[{b}]" if j == b else "-1" for j in range(g.rank))
        g.emit(f"h = torch.cat([{p}.expand({expand}), h], dim={g.dim(i)})")
        g.shape = [d + k if j == i else d for j, d in enumerate(g.shape)]
        g.cur = torch.promote_types(g.cur, g.dtype)
        g.labels.append(f"cat{i}(param.expand, h)")
    elif form == "cat_input":
        i = g.rng.randrange(1, g.rank)
        k = g.rng.randint(1, 3)
        shape = [k if j == i else d for j, d in enumerate(g.shape)]
        x = g.floating_input(shape)
        g.emit(f"h = torch.cat([h, {x}], dim={g.dim(i)})")
        g.shape = [d + k if j == i else d for j, d in enumerate(g.shape)]
        g.labels.append(f"cat{i}(h, input)")
    else:
        dims = [i for i in range(g.rank) if g.static(i) and g.shape[i] >= 2]
        if not dims:
            return False
        i = g.rng.choice(dims)
        n = g.shape[i]
        d = g.dim(i)
        if form == "chunk" and n % 2 == 0:
            how = g.rng.choice(["glu", "chunk", "F.glu"])
            if how == "F.glu":
                g.emit(f"h = F.glu(h, dim={d})")
            else:
                g.emit(f"a, b = h.chunk(2, dim={d})" if how == "chunk" else f"a, b = torch.split(h, {n // 2}, dim={d})")
                g.emit("h = a * torch.sigmoid(b)")
            g.shape = g.shape[:i] + [n // 2] + g.shape[i + 1:]
            g.labels.append(f"glu{i}")
        else:
            s1 = g.rng.randint(1, n - 1)
            g.emit(f"a, b = h.split([{s1}, {n - s1}], dim={d})")
            if g.rng.random() < 0.6:
                g.emit(f"h = torch.cat([b, {g.unary('a')[1]}], dim={d})")
                g.labels.append(f"split{i}+cat")
            else:
                g.emit("h = a")
                if len(g.stash) < 2:
                    rest = g.name("s")
                    g.emit(f"{rest} = b")
                    g.stash.append(rest)
                g.shape = g.shape[:i] + [s1] + g.shape[i + 1:]
                g.labels.append(f"split{i}")
    return True


# -- softmax, cumsum, pad ---------------------------------------------------------------------------


def b_softmax(g: _Gen) -> bool:
    if g.rank == 0:
        return False
    i = g.rank - 1 if g.fragile or g.rng.random() < 0.6 else g.rng.randrange(g.rank)
    d = "-1" if g.fragile else g.dim(i)
    op = g.rng.choice(["F.softmax(h, dim={d})", "torch.log_softmax(h, {d})", "h.softmax({d})",
                       "F.log_softmax(h, dim={d})", "F.softmin(h, dim={d})"])
    g.emit(f"h = {op.format(d=d)}")
    g.labels.append(f"{op.split('(')[0]}({i})")
    return True


def b_cumsum(g: _Gen) -> bool:
    if g.rank == 0:
        return False
    i = g.rank - 1 if g.fragile or g.rng.random() < 0.5 else g.rng.randrange(g.rank)
    d = "-1" if g.fragile else g.dim(i)
    g.emit(f"h = torch.cumsum(h, dim={d})" if g.rng.random() < 0.5 else f"h = h.cumsum({d})")
    g.labels.append(f"cumsum({i})")
    return True


def b_pad(g: _Gen) -> bool:
    if g.fragile or g.rank == 0:
        return False
    mode = g.rng.choice(["constant", "constant", "reflect", "replicate", "circular"])
    if mode == "constant":
        k = g.rng.randint(1, min(3, g.rank))
    else:
        ks = [k for k in (1, 2, 3) if k + 1 <= g.rank <= k + 2]
        if not ks:
            return False
        k = g.rng.choice(ks)
    dims = list(range(g.rank - k, g.rank))
    if not all(g.static(i) for i in dims):
        return False
    pads, new = [], list(g.shape)
    for i in reversed(dims):
        n = g.shape[i]
        for _ in range(2):
            if mode == "reflect":
                p = g.rng.randint(0, min(2, n - 1))
            elif mode == "circular":
                p = g.rng.randint(0, min(2, n))
            elif mode == "constant" and n > 1 and g.rng.random() < 0.1:
                p = -1
            else:
                p = g.rng.randint(0, 2)
            pads.append(p)
            new[i] += p
    if any(isinstance(d, int) and d < 1 for d in new) or g.numel(new) > _MAX_NUMEL:
        return False
    if mode == "constant":
        v = g.rng.choice(["0.0", "1.0", "-0.5"])
        g.emit(f"h = F.pad(h, {tuple(pads)}, value={v})")
    else:
        g.emit(f"h = F.pad(h, {tuple(pads)}, mode={mode!r})")
    g.shape = new
    g.labels.append(f"pad_{mode}{tuple(pads)}")
    return True


# -- attention -------------------------------------------------------------------------------------


def b_attention(g: _Gen) -> bool:
    if g.fragile:
        return False
    if g.rank == 4 and all(g.static(i) for i in (1, 2, 3)) and g.rng.random() < 0.3:
        causal = g.rng.random() < 0.5
        g.emit(f"h = F.scaled_dot_product_attention(h, h * 0.5, h, is_causal={causal})")
        g.labels.append(f"sdpa_4d({'causal' if causal else 'full'})")
        return True
    if g.rank != 3 or not g.static(2):
        return False
    d = g.shape[2]
    heads = g.rng.choice([h for h in (1, 2, 4) if d % h == 0])
    if g.rng.random() < 0.35:
        return _mha(g, d, heads)
    if not g.static(1):
        return False
    seq = g.shape[1]
    e = d // heads
    g.model_dtype()
    qkv = g.module("qkv", f"torch.nn.Linear({d}, {3 * d})")
    g.emit(f"q, k, v = {qkv}(h).chunk(3, dim=-1)")
    lead = "h.shape[0]" if g.rng.random() < 0.5 else "-1"
    for t in "qkv":
        g.emit(f"{t} = {t}.reshape({lead}, {seq}, {heads}, {e}).transpose(1, 2)")
    mask = g.rng.choice(["none", "causal", "causal", "bool", "float", "input"])
    scale = g.rng.choice(["", "", ", scale=0.5"])
    if mask == "input" and not (g.batch_exact_at0() and len(g.inputs) < 3):
        mask = "bool"
    extra = ""
    if mask == "causal":
        extra = ", is_causal=True"
    elif mask == "bool":
        buf = g.buffer("amask", f"(torch.rand({seq}, {seq}) > 0.4) | torch.eye({seq}, dtype=torch.bool)")
        extra = f", attn_mask={buf}"
    elif mask == "float":
        buf = g.buffer("abias", f"torch.randn({seq}, {seq}) * 0.5")
        extra = f", attn_mask={buf}"
    elif mask == "input":
        m = g.add_input("m", [Bd(), 1, 1, seq], "bool", keep_first=True)
        extra = f", attn_mask={m}"
    g.emit(f"h = F.scaled_dot_product_attention(q, k, v{extra}{scale})")
    g.emit(f"h = h.transpose(1, 2).reshape({lead}, {seq}, {d})")
    if g.rng.random() < 0.5:
        out = g.module("out", f"torch.nn.Linear({d}, {d})")
        g.emit(f"h = {out}(h)")
    g.labels.append(f"sdpa(heads={heads}, mask={mask}{scale.replace(', ', ' ')})")
    return True


def _mha(g: _Gen, d: int, heads: int) -> bool:
    batch_first = g.rng.random() < 0.7
    seq_dim = 1 if batch_first else 0
    g.model_dtype()
    mha = g.module("mha", f"torch.nn.MultiheadAttention({d}, {heads}, batch_first={batch_first})")
    need = g.rng.random() < 0.3
    extra = ""
    mask = "none"
    if g.static(seq_dim) and g.rng.random() < 0.4:
        seq = g.shape[seq_dim]
        buf = g.buffer("causal", f"torch.ones({seq}, {seq}, dtype=torch.bool).triu(1)")
        extra += f", attn_mask={buf}"
        mask = "causal"
    elif batch_first and g.batch_exact_at0() and len(g.inputs) < 3 and g.rng.random() < 0.4:
        m = g.add_input("m", [Bd(), g.shape[1]], "bool", key_padding=True)
        extra += f", key_padding_mask={m}"
        mask = "key_padding"
    w = g.name("w")
    g.emit(f"h, {w} = {mha}(h, h, h{extra}, need_weights={need})")
    if need and len(g.stash) < 2:
        g.stash.append(w)
    g.labels.append(f"mha(heads={heads}, batch_first={batch_first}, mask={mask}, weights={need})")
    return True


# -- recurrent layers ------------------------------------------------------------------------------


def b_rnn(g: _Gen) -> bool:
    if g.fragile or g.rank not in (2, 3) or not g.static(-1):
        return False
    cls = g.rng.choice(["RNN", "LSTM", "GRU"])
    feat, hidden = g.shape[-1], g.rng.randint(2, 8)
    layers = g.rng.choice([1, 1, 2])
    bidir = g.rng.random() < 0.3
    batch_first = g.rng.random() < 0.5
    bias = g.rng.random() < 0.85
    extra = f", nonlinearity={g.rng.choice(['tanh', 'relu'])!r}" if cls == "RNN" else ""
    g.model_dtype()
    rnn = g.module("rnn", f"torch.nn.{cls}({feat}, {hidden}, num_layers={layers}, bias={bias}, "
                          f"batch_first={batch_first}, bidirectional={bidir}{extra})")
    init = ""
    if g.rng.random() < 0.3:
        n_dim = (0 if batch_first else 1) if g.rank == 3 else None
        size = f"{layers * (2 if bidir else 1)}, " + (f"h.shape[{n_dim}], " if n_dim is not None else "") + f"{hidden}"
        zeros = f"torch.zeros({size}, dtype=h.dtype)"
        init = f", ({zeros}, {zeros})" if cls == "LSTM" else f", {zeros}"
    if g.rng.random() < 0.25 and len(g.stash) < 2:
        hn = g.name("hn")
        g.emit(f"h, {hn} = {rnn}(h{init})")
        if cls == "LSTM":
            g.emit(f"{hn} = {hn}[0]")
        g.stash.append(hn)
    else:
        g.emit(f"h = {rnn}(h{init})[0]")
    g.shape = g.shape[:-1] + [hidden * (2 if bidir else 1)]
    g.labels.append(f"{cls.lower()}({feat}->{hidden}, layers={layers}{', bidir' if bidir else ''}"
                    f"{', batch_first' if batch_first else ''}{', h0' if init else ''})")
    return True


# -- casts -----------------------------------------------------------------------------------------


def b_cast(g: _Gen) -> bool:
    targets = [t for t in (torch.float32, torch.float64, torch.float16, torch.bfloat16) if t != g.cur]
    weights = {torch.float32: 3, torch.float64: 3, torch.float16: 1.5, torch.bfloat16: 1}
    target = _weighted(g.rng, [(t, weights[t]) for t in targets])
    form = g.rng.random()
    if form < 0.5:
        code = f"h.to({_dt(target)})"
    elif form < 0.8:
        code = {torch.float32: "h.float()", torch.float64: "h.double()", torch.float16: "h.half()",
                torch.bfloat16: "h.bfloat16()"}[target]
    else:
        code = f"h.type({_dt(target)})"
    g.emit(f"h = {code}")
    g.cur = target
    g.touched.add(target)
    g.labels.append(f"cast({_SHORT[target]})")
    return True


# -- Python on sizes -------------------------------------------------------------------------------


def b_size(g: _Gen) -> bool:
    """Python code on sizes, the paths where size 1 differs (hazards) and plain size arithmetic."""
    if g.fragile or g.rank == 0:
        return False
    b = g.bdim()
    forms = ["arange"]
    if b is not None:
        forms += ["ones"]
        if g.shape[b].exact and g.shape[b].f == 1:
            forms += ["if1", "if1", "if_gt1", "max_n"]
        non_b_gt1 = [i for i in range(g.rank) if i != b and g.size(g.shape[i]) > 1]
        if b != g.rank - 1 and g.size(g.shape[-1]) > 1 and non_b_gt1:
            forms += ["squeeze_all", "squeeze_all"]
            if b == 0:
                forms.append("squeeze0")
    form = g.rng.choice(forms)
    if form in ("if1", "if_gt1", "max_n"):
        size = f"h.shape[{b}]"
        if g.inputs and g.inputs[0][2] != "tokens" and g.rng.random() < 0.3:
            size = f"{g.inputs[0][0]}.shape[0]"  # every input has the batch in dim 0
    if form == "if1":
        la, a = g.unary()
        lb, bcode = g.unary()
        while lb == la:
            lb, bcode = g.unary()
        g.emit(f"if {size} == 1:")
        g.emit(f"    h = {a}")
        g.emit("else:")
        g.emit(f"    h = {bcode}")
        g.labels.append(f"if B==1: {la} else {lb}")
        g.hazards.append("if h.shape[b] == 1")
    elif form == "if_gt1":
        g.emit(f"if {size} > 1:")
        g.emit(f"    h = h - h.mean({b}, keepdim=True)")
        g.labels.append("if B>1: center over batch")
        g.hazards.append("if h.shape[b] > 1")
    elif form == "max_n":
        g.emit(f"h = h * (1.0 / max({size} - 1, 1))")
        g.labels.append("h / max(B-1, 1)")
        g.hazards.append("max(n - 1, 1)")
    elif form == "squeeze_all":
        g.emit("h = h.squeeze()")
        g.shape = [d for d in g.shape if _is_b(d) or d != 1]
        g.fragile = True
        g.labels.append("squeeze()")
        g.hazards.append("squeeze()")
    elif form == "squeeze0":
        g.emit("h = h.squeeze(0)")
        g.fragile = True
        g.labels.append("squeeze(0)")
        g.hazards.append("squeeze(0)")
    elif form == "arange":
        i = g.rng.randrange(g.rank)
        view = ", ".join("-1" if j == i else "1" for j in range(g.rank))
        g.emit(f"h = h + torch.arange(h.shape[{i}], dtype=h.dtype).view({view}) * 0.1")
        g.labels.append(f"arange(size{i})")
    else:  # ones
        others = [i for i in range(g.rank) if i != b]
        if not others:
            return False
        i = g.rng.choice(others)
        sizes = ", ".join(f"h.shape[{j}]" if j == b else ("1" if j == i else str(g.shape[j])) for j in range(g.rank))
        g.emit(f"h = torch.cat([h, h.new_ones({sizes})], dim={g.dim(i)})")
        g.shape = [d + 1 if j == i else d for j, d in enumerate(g.shape)]
        g.labels.append(f"cat{i}(h, new_ones)")
    return True


def b_data_branch(g: _Gen) -> bool:
    """A branch on the data: onnxport rewrites it into torch.cond."""
    if g.fragile:
        return False
    la, a = g.unary()
    lb, bcode = g.unary()
    g.emit("if h.sum() > 0:")
    g.emit(f"    h = {a}")
    g.emit("else:")
    g.emit(f"    h = {bcode}")
    g.labels.append(f"if h.sum() > 0: {la} else {lb}")
    return True


# -- the program -----------------------------------------------------------------------------------

_FAMILIES: dict[str, tuple[float, Callable[[_Gen], bool]]] = {
    "unary": (10, b_unary), "scalar": (4, b_scalar), "param": (3, b_param), "binary_input": (3, b_input_binary),
    "where": (4, b_where), "reduce": (6, b_reduce), "linear": (7, b_linear), "matmul": (3, b_matmul),
    "conv": (5, b_conv), "pool": (3, b_pool), "batchnorm": (2, b_batchnorm), "norm": (5, b_norm),
    "reshape": (6, b_reshape), "permute": (4, b_permute), "unsqueeze": (3, b_unsqueeze), "slice": (6, b_slice),
    "cat": (5, b_cat), "softmax": (4, b_softmax), "cumsum": (2, b_cumsum), "pad": (3, b_pad),
    "attention": (4, b_attention), "rnn": (3, b_rnn), "cast": (3, b_cast), "size": (4, b_size),
    "data_branch": (0.5, b_data_branch),
}
_THEME_BOOST = {
    "conv1d": {"conv": 4, "pool": 3, "batchnorm": 3},
    "conv2d": {"conv": 4, "pool": 3, "batchnorm": 3},
    "seq": {"attention": 3, "rnn": 3, "norm": 2},
    "tokens": {"attention": 3, "rnn": 2, "norm": 2},
}
_FRAGILE_OK = ("unary", "scalar", "param", "reduce", "linear", "norm", "softmax", "cumsum", "cast")


def _start(g: _Gen) -> str:
    rng = g.rng
    theme = _weighted(rng, [("vec", 0.15), ("seq", 0.25), ("conv1d", 0.15), ("conv2d", 0.12), ("tokens", 0.1),
                            ("misc", 0.23)])
    if theme == "tokens":
        vocab, seq, dim = rng.randint(5, 20), rng.randint(2, 6), rng.choice([4, 6, 8, 12])
        t = g.add_input("t", [Bd(), seq], "tokens", high=vocab)
        if rng.random() < 0.8:
            pad = rng.choice([None, 0])
            emb = g.module("emb", f"torch.nn.Embedding({vocab}, {dim}, padding_idx={pad})")
            g.emit(f"h = {emb}({t})")
            g.labels.append(f"embedding({vocab}, {dim})")
        else:
            dim = vocab
            g.emit(f"h = F.one_hot({t}, {vocab}).to({_dt(g.dtype)})")
            g.labels.append(f"one_hot({vocab})")
        g.shape = [Bd(), seq, dim]
        return theme
    if theme == "vec":
        shape = [Bd(), rng.randint(2, 12)]
    elif theme == "seq":
        shape = [Bd(), rng.randint(2, 6), rng.choice([4, 6, 8, 12, 16])]
    elif theme == "conv1d":
        shape = [Bd(), rng.randint(1, 6), rng.randint(5, 16)]
    elif theme == "conv2d":
        shape = [Bd(), rng.randint(1, 4), rng.randint(3, 8), rng.randint(3, 8)]
    else:
        shape = [Bd()] + [rng.choice([1, 2, 3, 4, 5, 6]) for _ in range(rng.randint(0, 3))]
    x = g.add_input("x", shape, "float")
    g.emit(f"h = {x}")
    g.shape = shape
    return theme


def _draw(seed: int, rng: random.Random) -> _Gen:
    g = _Gen(seed, rng)
    theme = _start(g)
    boost = _THEME_BOOST.get(theme, {})
    for _ in range(rng.randint(2, 6)):
        for _try in range(30):
            pool = [(name, w * boost.get(name, 1)) for name, (w, _) in _FAMILIES.items()
                    if not g.fragile or name in _FRAGILE_OK]
            family = _weighted(rng, pool)
            if _FAMILIES[family][1](g):
                g.families.append(family)
                if g.numel() > _MAX_NUMEL:
                    raise _Redraw("too large")
                if rng.random() < 0.1:
                    g.stash_h()
                break
    return g


class _Redraw(Exception):
    pass


def _source(g: _Gen) -> str:
    args = ", ".join(name for name, *_ in g.inputs)
    outs = ["h", *g.stash]
    if len(outs) == 1:
        ret = "h"
    else:
        style = g.rng.random()
        if style < 0.6:
            ret = ", ".join(outs)
        elif style < 0.8:
            ret = "[" + ", ".join(outs) + "]"
        else:
            ret = "{" + ", ".join(f"{o!r}: {o}" for o in outs) + "}"
    lines = [f"class Program{g.seed}(torch.nn.Module):", "    def __init__(self):", "        super().__init__()"]
    lines += [f"        {line}" for line in g.init]
    lines += [f"    def forward(self, {args}):"]
    lines += [f"        {line}" for line in g.fwd]
    lines += [f"        return {ret}", ""]
    return "\n".join(lines)


def _inputs(g: _Gen, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    out = []
    for _name, shape, kind, options in g.inputs:
        sizes = [g.size(d) for d in shape]
        if kind == "float":
            out.append(torch.randn(sizes, generator=gen).to(g.dtype))
        elif kind == "bool":
            m = torch.rand(sizes, generator=gen) > 0.4
            if options.get("keep_first"):
                m[..., 0] = True  # every query sees a key
            if options.get("key_padding"):
                m[..., 0] = False  # the first key is never padding
            out.append(m)
        else:
            out.append(torch.randint(0, options["high"], sizes, generator=gen))
    return tuple(out)


def _describe(g: _Gen) -> str:
    ins = ", ".join(f"{name}:{_SHORT[g.dtype] if kind == 'float' else ('bool' if kind == 'bool' else 'i64')}"
                    f"[{','.join(str(d) for d in shape)}]" for name, shape, kind, _ in g.inputs)
    head = f"{_SHORT[g.dtype]} {'dynamic' if g.dynamic else 'static'} B={g.batch} ({ins})"
    return f"{head}: " + " > ".join(g.labels) + (f" -> +{len(g.stash)} outputs" if g.stash else "")


def build(source: str, seed: int) -> type[torch.nn.Module]:
    """Execute a program's source; its lines are registered with linecache so tracebacks and
    ``inspect.getsource`` (onnxport's rewrite of a data-dependent ``if``) read them."""
    filename = f"<fuzz program {seed}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict[str, object] = {"torch": torch, "F": torch.nn.functional, "__name__": f"fuzz_program_{seed}"}
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - our own generated code
    return namespace[f"Program{seed}"]  # type: ignore[return-value]


def _finite(out: object) -> bool:
    leaves = torch.utils._pytree.tree_leaves(out)
    return all(bool(torch.isfinite(t).all()) for t in leaves if isinstance(t, torch.Tensor) and t.is_floating_point())


def make_program(seed: int) -> Program:
    """The random program of ``seed`` (see the module's docstring)."""
    rng = random.Random(seed)
    last_error = ""
    for attempt in range(1, _MAX_DRAWS + 1):
        try:
            g = _draw(seed, rng)
        except _Redraw as e:
            last_error = str(e)
            continue
        source = _source(g)
        cls = build(source, seed)
        torch.manual_seed(seed)
        with torch.no_grad():
            model = cls()
        model = model.to(g.dtype).eval()
        gen = torch.Generator().manual_seed(seed)
        args = _inputs(g, gen)
        try:
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out = model(*args)
        except Exception as e:  # noqa: BLE001 - an invalid draw: draw again
            last_error = f"{type(e).__name__}: {e}"
            continue
        if not _finite(out):
            last_error = "outputs not finite"
            continue
        return Program(
            seed=seed, source=source, description=_describe(g), model=model, args=args,
            input_names=tuple(name for name, *_ in g.inputs), dynamic=g.dynamic, batch=g.batch, dtype=g.dtype,
            float_dtypes=tuple(sorted(g.touched, key=str)), hazards=tuple(g.hazards), families=tuple(g.families),
            attempt=attempt)
    raise RuntimeError(f"seed {seed}: no valid program in {_MAX_DRAWS} draws (last: {last_error})")
