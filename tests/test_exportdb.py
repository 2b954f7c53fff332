"""ExportDB parity: every program of torch's ExportDB that torch.export captures exports with onnxport
(default arguments, plus the example's own dynamic_shapes), passes verification, and matches eager PyTorch."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch._export.db.case import ExportCase, SupportLevel
from torch._export.db.examples import all_examples
from torch.utils import _pytree as pytree

import onnxport

EXAMPLES: dict[str, ExportCase] = all_examples()


def _clone(tree: Any) -> Any:
    return pytree.tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, tree)


def _captures(case: ExportCase) -> str:
    """Why torch.export itself does not capture ``case`` ("" when it does and ExportDB says it should)."""
    try:
        torch.export.export(
            copy.deepcopy(case.model), _clone(case.example_args), _clone(case.example_kwargs),
            dynamic_shapes=case.dynamic_shapes,
        )
    except Exception as exc:  # noqa: BLE001 - whatever torch.export raises, it is torch's own limit
        return f"torch.export fails: {type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
    if case.support_level != SupportLevel.SUPPORTED:
        return f"ExportDB marks it {case.support_level.name}"
    return ""


def _assert_matches(prog: onnxport.OnnxProgram, actual: Any, expected: Any) -> None:
    """Same structure; tensors and numbers equal, but only shape and dtype for outputs fed by random ops."""
    assert pytree.tree_structure(actual) == pytree.tree_structure(expected)
    onnx_outputs = zip(prog.output_names, prog.onnx_leaves(actual))
    random = {id(leaf) for name, leaf in onnx_outputs if name in prog.random_outputs}
    for act, exp in zip(pytree.tree_leaves(actual), pytree.tree_leaves(expected)):
        if isinstance(exp, torch.Tensor) and id(act) in random:
            assert (act.shape, act.dtype) == (exp.shape, exp.dtype)
        elif isinstance(exp, torch.Tensor):
            torch.testing.assert_close(act, exp, atol=1e-5, rtol=1e-4)
        else:  # a Python number (a symbolic size the model returns): a 0-d tensor from onnxruntime
            assert torch.as_tensor(act).item() == pytest.approx(exp)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_exportdb_example(name: str) -> None:
    case = EXAMPLES[name]
    reason = _captures(case)
    if reason:
        pytest.skip(reason)
    args, kwargs = _clone(case.example_args), _clone(case.example_kwargs)
    prog = onnxport.export(copy.deepcopy(case.model), args, kwargs, dynamic_shapes=case.dynamic_shapes)
    assert prog.report.verification.ok
    expected = copy.deepcopy(case.model)(*_clone(args), **_clone(kwargs))
    _assert_matches(prog, prog(*_clone(args), **_clone(kwargs)), expected)
