"""One generic runner for op tests given as data.

An ``OpCase`` names an op, a function building its inputs, and quirks as fields; the runner wraps the
op in a module, exports it through the real pipeline (verification off), runs onnxruntime, compares
with eager PyTorch, and checks the emitted op types. Each case runs at the default target's opset and at
the newest this onnxruntime loads (whose target, the releases loading it, has every fused op); expected
fused ops (``FUSED``) are checked where the target has them.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import Any

import onnx
import torch

import onnxport
from onnxport.targets import Forms, resolve
from onnxport.translate.registry import AbsentOp
from onnxport.translate.opset import DEFAULT_OPSET, newest_opset

FUSED = ("Attention", "RMSNormalization", "RotaryEmbedding")  # ops only some targets emit

DEFAULT_TOL = {
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (3e-2, 3e-2),
    torch.float64: (1e-7, 1e-7),
}


@dataclasses.dataclass
class OpCase:
    """One op test: ``fn(*args(), **kwargs)`` exported and compared with eager."""

    fn: Callable[..., Any]
    args: Callable[[], Sequence[Any]]
    name: str = ""
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    expect_ops: Sequence[str] = ()
    dtypes: Sequence[torch.dtype] | None = None   # re-run with float inputs cast to each dtype
    tol: dict[torch.dtype, tuple[float, float]] = dataclasses.field(default_factory=dict)
    dynamic_shapes: Any = None
    equal_nan: bool = False
    others: Callable[[], Sequence[Sequence[Any]]] | None = None  # more inputs (other sizes) for the same program

    @property
    def id(self) -> str:
        if isinstance(self.fn, AbsentOp):
            base = self.fn.name.replace("aten::", "").removesuffix(".default")
            return f"{base}-{self.name}" if self.name else base
        base = getattr(self.fn, "__name__", None) or str(self.fn)
        if isinstance(self.fn, torch._ops.OpOverload):
            base = self.fn.name().replace("aten::", "")
        return f"{base}-{self.name}" if self.name else base

    def variants(self) -> list[tuple[str, torch.dtype | None]]:
        return [(self.id, None)] if not self.dtypes else [(f"{self.id}-{str(d)[6:]}", d) for d in self.dtypes]


class _Wrap(torch.nn.Module):
    def __init__(self, fn: Callable[..., Any], kwargs: dict[str, Any]):
        super().__init__()
        self.fn, self.kwargs = fn, kwargs

    def forward(self, *args: Any) -> Any:
        return self.fn(*args, **self.kwargs)


def params(cases: Sequence[OpCase]) -> list[Any]:
    """pytest parameters: one per case and dtype, with readable ids. A case of an op the installed torch
    does not have (an ``AbsentOp``; ``versions.OPS_NOT_IN_EVERY_TORCH`` lists those) is skipped, saying so."""
    import pytest

    return [pytest.param(case, dtype, id=ident, marks=_absent_mark(case)) for case in cases
            for ident, dtype in case.variants()]


def _absent_mark(case: OpCase) -> Any:
    import pytest

    if not isinstance(case.fn, AbsentOp):
        return ()
    return pytest.mark.skip(reason=f"torch {torch.__version__} has no {case.fn.name}")


def opsets_under_test() -> list[int]:
    """The opsets every case runs at: the default, and the newest the installed onnxruntime runs; the default
    alone where ``ONNXPORT_TEST_OPSETS=default`` (``make test-torch-oldest``: what an op's translation does at
    each opset does not depend on the torch that captured it, and the newest torch's run checks both)."""
    if os.environ.get("ONNXPORT_TEST_OPSETS") == "default":
        return [DEFAULT_OPSET]
    return sorted({DEFAULT_OPSET, newest_opset()})


def run_case(case: OpCase, dtype: torch.dtype | None = None) -> onnxport.OnnxProgram:
    """``check_case`` at the default opset and at the newest, from one capture (``onnxport.export_each``);
    returns the program at the default."""
    return _check(case, dtype, opsets_under_test())[0]


def check_case(case: OpCase, dtype: torch.dtype | None, opset: int) -> onnxport.OnnxProgram:
    """Export the case at ``opset``, compare onnxruntime with eager, check the op types; returns the program."""
    return _check(case, dtype, [opset])[0]


def _check(case: OpCase, dtype: torch.dtype | None, opsets: list[int]) -> list[onnxport.OnnxProgram]:
    torch.manual_seed(0)
    args = list(case.args())
    if dtype is not None:
        args = [a.to(dtype) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
    model = _Wrap(case.fn, case.kwargs)
    expected = model(*args)
    progs = onnxport.export_each(model, tuple(args), variants=[{"opset": opset} for opset in opsets],
                                 dynamic_shapes=case.dynamic_shapes, verify=False)
    for opset, prog in zip(opsets, progs):
        _compare(case, prog, opset, args, expected)
    for other in case.others() if case.others is not None else ():
        other = [a.to(dtype) if dtype is not None and isinstance(a, torch.Tensor) and a.is_floating_point() else a
                 for a in other]
        sizes = [tuple(a.shape) for a in other if isinstance(a, torch.Tensor)]
        for opset, prog in zip(opsets, progs):
            _compare(case, prog, opset, other, model(*other), f", inputs of sizes {sizes}")
    return progs


def _compare(case: OpCase, prog: onnxport.OnnxProgram, opset: int, args: list[Any], expected: Any,
             where: str = "") -> None:
    assert prog.model.opset_imports[""] == opset
    if not where:  # the example's inputs (``where`` names others)
        onnx.checker.check_model(prog.model_proto, full_check=True)
    actual = prog(*args)
    exp_flat = [t for t in torch.utils._pytree.tree_leaves(expected) if isinstance(t, torch.Tensor)]
    act_flat = [t for t in torch.utils._pytree.tree_leaves(actual) if isinstance(t, torch.Tensor)]
    assert len(exp_flat) == len(act_flat)
    for exp, act in zip(exp_flat, act_flat):
        atol, rtol = case.tol.get(exp.dtype, DEFAULT_TOL.get(exp.dtype, (0, 0)))
        torch.testing.assert_close(
            act, exp, atol=atol, rtol=rtol, equal_nan=case.equal_nan, msg=lambda m: f"at opset {opset}{where}: {m}"
        )
    if case.expect_ops and not where:
        emitted = {n.op_type for n in prog.model.graph.all_nodes()}
        forms = Forms(*resolve(None, opset, newest_opset()))
        missing = [op for op in case.expect_ops if op not in emitted and (op not in FUSED or _fused_here(op, forms))]
        assert not missing, f"expected ONNX ops {missing} at opset {opset} in {sorted(emitted)}"


def _fused_here(op: str, forms: Forms) -> bool:
    """Whether the export's target emits the fused ``op`` at all (Attention in the general case)."""
    return forms.attention(None, grouped=True) if op == "Attention" else forms.allows(op)
