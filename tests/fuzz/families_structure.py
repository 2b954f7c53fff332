"""Op families of the fuzz generator that move, cut, join and carry: reshapes and permutes,
squeeze/unsqueeze, slicing and indexing, cat/stack/split, softmax, cumsum and pad, attention, recurrent
layers, casts, and Python code on sizes. Same contract as ``families_compute``."""


from __future__ import annotations

import math

import torch


from tests.fuzz.gen import _MAX_NUMEL, _SHORT, Bd, _dt, _Gen, _is_b, _weighted

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
