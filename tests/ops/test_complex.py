"""Complex tensors against eager PyTorch: in the graph a real tensor with a trailing (real, imaginary) dim."""

from __future__ import annotations

import json

import onnx
import pytest
import torch
from torch import randn

import onnxport
from onnxport.translate.registry import ops
from tests.ops._runner import OpCase, params, run_case

aten = ops.aten  # an op this torch lacks is an AbsentOp: its cases are skipped
f32, f64 = torch.float32, torch.float64
c64, c128 = torch.complex64, torch.complex128
Dim = torch.export.Dim
TOL = {c64: (1e-4, 1e-4), c128: (1e-7, 1e-7)}
FP = (f32, f64)


def crandn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=c64)


def freqs_cis(dim: int, end: int, theta: float = 10000.0) -> torch.Tensor:
    """Llama's rotary frequencies: unit complex numbers."""
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: dim // 2].float() / dim))
    return torch.polar(torch.ones(end, dim // 2), torch.outer(torch.arange(end).float(), freqs))


def apply_rotary(xq: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """Llama's apply_rotary_emb: pairs of features as complex numbers, turned by the frequencies."""
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    shape = [d if i in (1, xq_.ndim - 1) else 1 for i, d in enumerate(xq_.shape)]
    return torch.view_as_real(xq_ * freqs.view(*shape)).flatten(3).type_as(xq)


class Rotary(torch.nn.Module):
    """Rotary embedding with the frequencies as a complex buffer, sliced to the sequence."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("freqs", freqs_cis(16, 64), persistent=False)

    def forward(self, xq: torch.Tensor) -> torch.Tensor:
        return apply_rotary(xq, self.freqs[: xq.shape[1]])


rotary = Rotary()
rotary.__name__ = "rotary_buffer"


def rotary_from_angles(xq: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    return apply_rotary(xq, torch.polar(torch.ones_like(angles), angles))


# arithmetic, each written as models do
def mixed_arith(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    a, b = torch.complex(x, y), torch.polar(y.abs() + 0.5, x)
    return (a * b + a / b - b.conj() * 2 + 1.5j - a * 0.5 + x) / (y.abs() + 1) - 2 * a


def mul_op(a, b):  # noqa: ANN001, ANN201
    return a * b


def div_op(a, b):  # noqa: ANN001, ANN201
    return a / b


def add_alpha(a, b):  # noqa: ANN001, ANN201
    return torch.add(a, b, alpha=2)


def sub_op(a, b):  # noqa: ANN001, ANN201
    return a - b


def rsub_scalar(a):  # noqa: ANN001, ANN201
    return 1 - a


def times_i(x):  # noqa: ANN001, ANN201
    return x * 1j


def by_complex_scalar(a):  # noqa: ANN001, ANN201
    return a / (2 - 1j)


def unary_chain(z):  # noqa: ANN001, ANN201
    return (-z).exp() + z.log() + z.reciprocal() + z.sgn() + z.square()


def parts(z):  # noqa: ANN001, ANN201
    return z.real, z.imag, z.abs(), z.angle()


def to_complex128(z, x):  # noqa: ANN001, ANN201
    return z.to(c128) + x.to(c64).to(c128), z.to(f32)


# lifts of real translators
def layout_ops(z):  # noqa: ANN001, ANN201
    w = z.view(2, 3, 4).permute(2, 0, 1).transpose(-1, -2)[1:, :, -1].unsqueeze(-1)
    w = torch.cat([w, w.flip(-2)], dim=-1).flatten(-2).expand(2, -1, -1)
    return torch.stack([w, w.sum(-1, keepdim=True).expand_as(w)], dim=-1).roll(1, -2)


def parts_ops(z, x):  # noqa: ANN001, ANN201
    w = torch.where(x > 0, z, x).masked_fill(x < -1, 0.5j).t()
    return w.sum(), w.mean(0), torch.nn.functional.pad(w, (1, 1)), torch.zeros_like(w) + torch.ones(3, 4, dtype=c64)


def index_ops(z, idx):  # noqa: ANN001, ANN201
    out = z.clone()
    out[:, idx] = z[:, idx] * 2j
    return out, z[:, idx].gather(1, (idx % 2).expand(2, -1)), torch.cat([z, z[:1]], 0)


def complex_matmul(a, b):  # noqa: ANN001, ANN201
    three = torch.einsum("ij,jk,kl->il", a, b, b.mT)
    return a @ b, torch.einsum("ij,jk->ki", a, b), torch.bmm(a[None], b[None]), a.mv(b[:, 0]), three


def norms(z):  # noqa: ANN001, ANN201
    return torch.linalg.vector_norm(z), torch.linalg.vector_norm(z, ord=1, dim=-1, keepdim=True), z.numel() * z


def mH_op(a):  # noqa: ANN001, ANN201
    return a.mH, a.H if a.dim() == 2 else a.adjoint()


CASES = [
    # conversions and parts
    OpCase(torch.view_as_complex, args=lambda: (randn(3, 4, 2),), tol=TOL),
    OpCase(torch.view_as_real, args=lambda: (crandn(3, 4),)),
    OpCase(torch.complex, args=lambda: (randn(3, 4), randn(3, 4)), dtypes=FP, tol=TOL),
    OpCase(torch.complex, args=lambda: (randn(3, 1), randn(4)), name="broadcast", tol=TOL),
    OpCase(torch.polar, args=lambda: (randn(3, 4).abs(), randn(3, 4)), dtypes=FP, tol=TOL),
    OpCase(parts, args=lambda: (crandn(3, 4),)),
    OpCase(torch.angle, args=lambda: (torch.tensor([1.0, -2.0, 0.0, -0.0, float("nan"), float("-inf")]),),
           name="real", equal_nan=True),
    OpCase(torch.real, args=lambda: (randn(3),), name="real_input"),
    OpCase(torch.conj_physical, args=lambda: (crandn(3, 4),), tol=TOL),
    OpCase(torch.conj_physical, args=lambda: (randn(3, 4),), name="real_input"),
    OpCase(torch.resolve_conj, args=lambda: (crandn(3, 4).conj(),), name="lazy_conj_input", tol=TOL),
    OpCase(mH_op, args=lambda: (crandn(3, 4),), tol=TOL),
    OpCase(mH_op, args=lambda: (crandn(2, 3, 4),), name="batched", tol=TOL),
    OpCase(mH_op, args=lambda: (randn(3, 4),), name="real_input"),
    OpCase(to_complex128, args=lambda: (crandn(3), randn(3)), tol=TOL),
    OpCase(norms, args=lambda: (crandn(3, 4),), tol=TOL),
    OpCase(norms, args=lambda: (crandn(3, 4),), name="dynamic", tol=TOL, dynamic_shapes=(({0: Dim("n")},),)),
    # arithmetic
    OpCase(mul_op, args=lambda: (crandn(3, 4), crandn(4)), name="broadcast", tol=TOL),
    OpCase(mul_op, args=lambda: (randn(3, 1), crandn(3, 4)), name="real_complex", tol=TOL),
    OpCase(times_i, args=lambda: (randn(3, 4),), dtypes=FP, tol=TOL),
    OpCase(div_op, args=lambda: (crandn(3, 4), crandn(3, 4)), tol=TOL),
    OpCase(div_op, args=lambda: (crandn(3, 4) * 1e20, crandn(3, 4) * 1e20), name="large", tol=TOL),
    OpCase(div_op, args=lambda: (randn(3, 4), crandn(4)), name="real_by_complex", tol=TOL),
    OpCase(div_op, args=lambda: (crandn(3, 4), randn(3, 4)), name="by_real", tol=TOL),
    OpCase(by_complex_scalar, args=lambda: (crandn(5),), tol=TOL),
    OpCase(add_alpha, args=lambda: (crandn(3, 4), randn(3, 4)), tol=TOL),
    OpCase(sub_op, args=lambda: (randn(4), crandn(3, 4)), tol=TOL),
    OpCase(rsub_scalar, args=lambda: (crandn(3),), tol=TOL),
    OpCase(mixed_arith, args=lambda: (randn(3, 4), randn(3, 4)), dtypes=FP, tol=TOL),
    OpCase(unary_chain, args=lambda: (crandn(3, 4),), tol=TOL),
    # real translators lifted to complex values
    OpCase(layout_ops, args=lambda: (crandn(6, 4),), tol=TOL),
    OpCase(parts_ops, args=lambda: (crandn(4, 3), randn(4, 3)), tol=TOL),
    OpCase(index_ops, args=lambda: (crandn(2, 5), torch.tensor([0, 3])), tol=TOL),
    OpCase(complex_matmul, args=lambda: (crandn(3, 4), crandn(4, 2)), expect_ops=["MatMul"], tol=TOL),
    # whole patterns
    OpCase(rotary, args=lambda: (randn(2, 10, 4, 16),), expect_ops=["Mul"]),
    OpCase(rotary, args=lambda: (randn(2, 10, 4, 16),), name="dynamic",
           dynamic_shapes=(({0: Dim("b"), 1: Dim("s", max=64)},),)),
    OpCase(apply_rotary, args=lambda: (randn(2, 10, 4, 16), freqs_cis(16, 10)), name="complex_input"),
    OpCase(rotary_from_angles, args=lambda: (randn(2, 10, 4, 16), randn(10, 8)), dtypes=FP),
    OpCase(mixed_arith, args=lambda: (randn(3, 4), randn(3, 4)), name="dynamic", tol=TOL,
           dynamic_shapes=(({0: Dim("n")}, {0: Dim("n")}),)),
]


@pytest.mark.parametrize(("case", "dtype"), params(CASES))
def test_complex(case: OpCase, dtype: torch.dtype | None) -> None:
    run_case(case, dtype)


class InOut(torch.nn.Module):
    def forward(self, z: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return z * x, z.abs(), z.mH @ z


def test_complex_inputs_and_outputs_are_pairs_named_in_metadata() -> None:
    z, x = crandn(3, 4), randn(3, 4)
    prog = onnxport.export(InOut(), (z, x), input_names=["z", "x"], output_names=["zx", "size", "gram"])
    graph = prog.model.graph
    assert [list(v.shape) for v in graph.inputs] == [[3, 4, 2], [3, 4]]
    assert [v.dtype for v in graph.inputs] == [onnx.TensorProto.FLOAT] * 2
    assert json.loads(prog.model.metadata_props["onnxport.complex_inputs"]) == ["z"]
    assert json.loads(prog.model.metadata_props["onnxport.complex_outputs"]) == ["zx", "gram"]
    assert prog.report.verification.ok
    expected = InOut()(z, x)
    for got, want in zip(prog(z, x), expected):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    # other runtimes feed and read the pairs: run_flat is the ONNX model's own view
    pairs = prog.run_flat([torch.view_as_real(z), x])
    torch.testing.assert_close(pairs[0], torch.view_as_real(expected[0]), atol=1e-5, rtol=1e-5)


def test_complex_metadata_survives_save(tmp_path) -> None:  # noqa: ANN001
    prog = onnxport.export(InOut(), (crandn(3, 4), randn(3, 4)), verify=False)
    prog.save(tmp_path / "m.onnx")
    props = {p.key: p.value for p in onnx.load(tmp_path / "m.onnx").metadata_props}
    assert json.loads(props["onnxport.complex_outputs"]) == prog.complex_outputs == ["output_0", "output_2"]


def test_complex_input_of_the_wrong_dtype_is_refused() -> None:
    prog = onnxport.export(InOut(), (crandn(3, 4), randn(3, 4)), verify=False)
    with pytest.raises(onnxport.OnnxportError, match="input x is torch.complex64"):
        prog(crandn(3, 4), crandn(3, 4))


def test_complex_op_without_translation_names_the_op() -> None:
    class Sin(torch.nn.Module):
        def forward(self, z: torch.Tensor) -> torch.Tensor:
            return torch.sin(z) if z.is_complex() else z

    with pytest.raises(onnxport.UnsupportedOpError, match="aten::sin"):
        onnxport.export(Sin(), (crandn(3),), verify=False)


def test_complex_constant_becomes_pairs() -> None:
    class Const(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(crandn(4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.view_as_real(self.w * x)

    prog = onnxport.export(Const(), (randn(3, 4),))
    init = next(iter(prog.model.graph.initializers.values()))
    assert list(init.shape) == [4, 2] and init.dtype == onnx.TensorProto.FLOAT
    assert prog.report.verification.ok
