"""Op families of the fuzz generator that compute: elementwise ops and activations, reductions, matrix
products, convolutions, pooling and batch norm, normalisations. Each ``b_<family>(g)`` appends Python
source applying its op family to the running tensor ``h`` of a ``gen._Gen`` and updates its tracked
shape; False when it does not apply to ``h`` as it is (another family is drawn)."""


from __future__ import annotations

import math

import torch


from tests.fuzz.gen import _MAX_NUMEL, _Gen, _is_b

# -- elementwise -----------------------------------------------------------------------------------

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
