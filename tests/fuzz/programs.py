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

The generator's state is in ``gen``, the op families in ``families_compute`` and ``families_structure``;
this module draws the start and the blocks and builds the program.
"""

from __future__ import annotations

import linecache
import random
import warnings
from collections.abc import Callable

import torch


from tests.fuzz.families_compute import (
    b_batchnorm, b_conv, b_input_binary, b_linear, b_matmul, b_norm, b_param, b_pool, b_reduce, b_scalar,
    b_unary, b_where,
)
from tests.fuzz.families_structure import (
    b_attention, b_cast, b_cat, b_cumsum, b_data_branch, b_pad, b_permute, b_reshape, b_rnn, b_size, b_slice,
    b_softmax, b_unsqueeze,
)
from tests.fuzz.gen import _MAX_DRAWS, _MAX_NUMEL, _SHORT, Bd, Program, _dt, _Gen, _weighted

__all__ = ["Program", "make_program"]

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


def build(source: str, seed: int, named: bool | None = None) -> type[torch.nn.Module]:
    """Execute a program's source; its lines are registered with linecache so tracebacks and
    ``inspect.getsource`` (onnxport's rewrite of a data-dependent ``if``) read them. A third of the programs
    (seeds divisible by 3; ``named`` overrides) are executed without a ``__name__``, as code generators and
    notebooks' ``exec`` run code: their functions' ``__module__`` is None and their classes' ``builtins``."""
    filename = f"<fuzz program {seed}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict[str, object] = {"torch": torch, "F": torch.nn.functional}
    if named if named is not None else seed % 3:
        namespace["__name__"] = f"fuzz_program_{seed}"
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - our own generated code
    return namespace[f"Program{seed}"]  # type: ignore[return-value]


def _finite(out: object) -> bool:
    leaves = torch.utils._pytree.tree_leaves(out)
    return all(bool(torch.isfinite(t).all()) for t in leaves if isinstance(t, torch.Tensor) and t.is_floating_point())


def make_program(seed: int, named: bool | None = None) -> Program:
    """The random program of ``seed`` (see the module's docstring); ``named`` as :func:`build` takes it."""
    rng = random.Random(seed)
    last_error = ""
    for attempt in range(1, _MAX_DRAWS + 1):
        try:
            g = _draw(seed, rng)
        except _Redraw as e:
            last_error = str(e)
            continue
        source = _source(g)
        cls = build(source, seed, named)
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
