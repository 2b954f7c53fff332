"""Every zoo model exports with default arguments, autograd on and off, and matches eager at two sizes."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.utils import _pytree as pytree

import onnxport
from tests.zoo.cases import ZOO, ZooCase

# Most of the zoo is transformers' architectures: it runs on the second pinned transformers too.
pytestmark = pytest.mark.transformers

pytest.importorskip("transformers")
pytest.importorskip("diffusers")


def export_case(case: ZooCase, grad: bool, target: str | None = None) -> tuple[torch.nn.Module, onnxport.OnnxProgram]:
    """Build the case's model and export it from its example inputs, autograd on (as most users call an
    exporter) or off, for ``target`` (default: the default target)."""
    torch.manual_seed(0)
    model = case.build().eval()
    inputs = case.inputs(*case.example)
    with torch.set_grad_enabled(grad):
        prog = onnxport.export(model, (), inputs, dynamic_shapes=case.dynamic, target=target)
    return model, prog


def check_other_size(case: ZooCase, model: torch.nn.Module, prog: onnxport.OnnxProgram) -> None:
    """Fresh realistic inputs at the case's other (batch, size): onnxruntime matches eager PyTorch."""
    inputs = case.inputs(*case.other)
    with torch.no_grad():
        expected = model(**inputs)
    actual = prog(**inputs)
    exp = [t for t in pytree.tree_leaves(expected) if isinstance(t, torch.Tensor)]
    act = [t for t in pytree.tree_leaves(actual) if isinstance(t, torch.Tensor)]
    assert len(exp) == len(act) > 0
    for e, a in zip(exp, act):
        torch.testing.assert_close(a, e, atol=case.tol, rtol=case.tol)


# The cases make test exports elsewhere, whose run with autograd on is a sweep too: T5 (test_seq2seq_cache,
# test_export_hf), mBART, Pegasus and Marian (BART's architecture, which stays), the diffusers VAE and UNet
# (test_export_hf_diffusion's pipelines).
SWEPT = ("t5", "mbart", "pegasus", "marian", "vae", "unet")


def _params() -> list:
    """Each case with autograd on and off; autograd off is a ``sweep`` (``make test-sweep``, once per CI) for the
    first case of each family and ``slow`` for the others (``make test-slow``): users call an exporter with autograd
    on, and whether it is on does not depend on the versions installed; autograd on is in ``make test`` for the
    first case of each family, a ``sweep`` for the others and for the cases of ``SWEPT``."""
    firsts = {id(case) for case in _firsts()}
    return [
        pytest.param(case, grad, id=f"{case.name}-{'grad' if grad else 'no_grad'}",
                     marks=[*([pytest.mark.slow] if case.slow or not (grad or id(case) in firsts) else []),
                            *([] if grad and id(case) in firsts and case.name not in SWEPT else [pytest.mark.sweep])])
        for case in ZOO for grad in (True, False)
    ]


def _firsts() -> list[ZooCase]:
    """The first case of each family."""
    firsts: dict[str, ZooCase] = {}
    for case in ZOO:
        firsts.setdefault(case.family, case)
    return list(firsts.values())


@pytest.mark.parametrize(("case", "grad"), _params())
def test_zoo(case: ZooCase, grad: bool) -> None:
    model, prog = export_case(case, grad)
    verification = prog.report.verification
    assert verification.ok, str(verification)
    assert prog.report.sizes_verified, "the dynamic dims were not verified at other sizes"
    check_other_size(case, model, prog)


def test_zoo_covers_the_families() -> None:
    families = {case.family for case in ZOO}
    assert len(ZOO) >= 30
    assert {"text encoder", "decoder", "seq2seq", "vision", "audio", "multimodal", "diffusion"} <= families
    assert {"unet", "vae", "dit"} <= {case.name for case in ZOO}


def _one_per_family() -> list:
    """The first case of each family; those past the text encoder's and the decoder's are a ``sweep``."""
    return [pytest.param(case, id=case.name, marks=[] if case.family in ("text encoder", "decoder") else
                         [pytest.mark.sweep]) for case in _firsts()]


@pytest.mark.parametrize("case", _one_per_family())
def test_batch_one_example_is_right_at_other_batches(case: ZooCase) -> None:
    """Most users export with batch 1: the declared-dynamic batch stays dynamic and is right at batch 3."""
    torch.manual_seed(0)
    model = case.build().eval()
    prog = onnxport.export(model, (), case.inputs(1, case.example[1]), dynamic_shapes=case.dynamic)
    assert prog.report.verification.ok, str(prog.report.verification)
    check_other_size(dataclasses.replace(case, other=(3, case.other[1])), model, prog)
