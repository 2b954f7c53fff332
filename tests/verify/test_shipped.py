"""Verification checks the model as it ships: onnxruntime's default level, in a child process that may
crash without ending the caller's; a failure there fails the export, and says whether a lower level
runs the model right."""

from __future__ import annotations

import gc
import os
import signal

import pytest
import torch
import torch.nn.functional as F
from torch.export import Dim

import onnxport
from onnxport.verify import child
from onnxport.verify.child import Crashed, SessionProcess
from onnxport.verify.session import OrtRunner

pytestmark = pytest.mark.skipif(not child.forking_available(), reason="the child process is forked")


class _CrashesAtAll(OrtRunner):
    """An onnxruntime whose default level kills its process, as a segfaulting fusion would."""

    def run(self, inputs):
        if self._level == "all":
            os.kill(os.getpid(), signal.SIGSEGV)
        return super().run(inputs)

    def __init__(self, model, **kwargs):
        self._level = kwargs.get("optimization", "all")
        super().__init__(model, **kwargs)


class _FailsAtAll(_CrashesAtAll):
    def run(self, inputs):
        if self._level == "all":
            raise RuntimeError("[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : a Gather out of bounds")
        return OrtRunner.run(self, inputs)


def test_an_onnxruntime_crash_fails_the_export_and_spares_the_process(monkeypatch) -> None:
    monkeypatch.setattr(child, "OrtRunner", _CrashesAtAll)
    model = torch.nn.Linear(4, 3).eval()
    with pytest.raises(onnxport.VerificationError) as info:
        onnxport.export(model, (torch.randn(2, 4),), dynamic_shapes=({0: Dim("batch")},))
    verification = info.value.verification
    assert not verification.ok and "crashed" in str(verification) and "SIGSEGV" in str(verification)
    assert any("not run: onnxruntime crashed on an earlier set" in r for r in verification.runs)
    fix = info.value.fix
    assert "crashes this model at its default graph optimisation level" in fix
    assert "runs it right at level 'basic'" in fix and "ORT_ENABLE_BASIC" in fix


def test_an_onnxruntime_error_at_its_default_level_fails_the_export(monkeypatch) -> None:
    """Before, verification ran at level none and passed such a model; users' sessions then failed."""
    monkeypatch.setattr(child, "OrtRunner", _FailsAtAll)
    with pytest.raises(onnxport.VerificationError) as info:
        onnxport.export(torch.nn.Linear(4, 3).eval(), (torch.randn(2, 4),))
    assert "a Gather out of bounds" in str(info.value.verification)
    assert "fails on this model at its default graph optimisation level" in info.value.fix


class ReflectBetweenTransposes(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.pad(x.transpose(1, 2), (1, 1), mode="reflect").transpose(1, 2).unsqueeze(1)
        return F.scaled_dot_product_attention(y, y, y, is_causal=True)


def test_pads_take_a_form_onnxruntimes_default_level_computes() -> None:
    """A Pad with an ``axes`` input between transposes sent onnxruntime's transpose optimiser out of
    bounds at its default level (a Gather error on the example); pads are spelled for every dim."""
    x = torch.randn(2, 6, 4, dtype=torch.float64)
    prog = onnxport.export(ReflectBetweenTransposes(), (x,), dynamic_shapes=({0: Dim("batch")},))
    assert prog.report.verification.ok and prog.report.verification.optimization == "all"
    pads = [n for n in prog.model.graph if n.op_type == "Pad"]
    assert pads and all(len([v for v in n.inputs if v is not None]) <= 3 for n in pads)
    torch.testing.assert_close(prog(x[:1]), ReflectBetweenTransposes()(x[:1]))


def test_eager_failing_on_the_example_is_an_onnxport_error() -> None:
    """An example the model cannot take (int32 for a float Linear) fails in eager PyTorch: said so."""
    class IntoLinear(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(3, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x.float()) if x.dtype == torch.float64 else self.lin(x)

    try:
        onnxport.export(IntoLinear(), (torch.ones(2, 3, dtype=torch.int32),))
    except onnxport.OnnxportError as exc:
        assert exc.fix
    else:
        pytest.fail("an int32 example for a float Linear exported")


def test_the_session_process_round_trips_bfloat16_and_reports_onnxruntime_errors() -> None:
    prog = onnxport.export(torch.nn.Linear(4, 4).to(torch.bfloat16).eval(), (torch.randn(2, 4, dtype=torch.bfloat16),),
                           verify=False)
    session = SessionProcess(prog.model)
    assert session.isolated
    x = torch.randn(2, 4, dtype=torch.bfloat16)
    out = session.run([x])
    assert out[0].dtype == torch.bfloat16 and out[0].shape == (2, 4)
    with pytest.raises(RuntimeError, match="INVALID_ARGUMENT|Invalid|invalid"):  # a wrong width: refused
        session.run([torch.randn(2, 5, dtype=torch.bfloat16)])
    torch.testing.assert_close(session.run([x])[0], out[0])  # the session lives on after an error
    process = session._process
    session.close()
    process.join(timeout=10)  # it ends on its own once told to
    assert not process.is_alive() and process.exitcode == 0


def test_a_crashed_session_says_what_killed_it(monkeypatch) -> None:
    monkeypatch.setattr(child, "OrtRunner", _CrashesAtAll)
    prog = onnxport.export(torch.nn.Linear(4, 4).eval(), (torch.randn(2, 4),), verify=False)
    session = SessionProcess(prog.model)
    with pytest.raises(Crashed, match="SIGSEGV") as info:
        session.run([torch.randn(2, 4)])
    assert info.value.stage == "running the model"
    session.close()


class SoftmaxInBfloat16(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.glu(F.softmax(x, 1).float(), dim=-1)


def test_an_output_computed_in_a_lower_precision_gets_that_precisions_tolerance() -> None:
    """A float32 output computed through bfloat16 was held to float32's tolerance: a false alarm."""
    from onnxport.verify.checker import computed_precisions

    x = torch.randn(2, 6, 12, dtype=torch.bfloat16)
    prog = onnxport.export(SoftmaxInBfloat16(), (x,))
    assert prog.report.verification.ok
    assert set(computed_precisions(prog.model).values()) == {torch.bfloat16}
    plain = onnxport.export(torch.nn.Linear(3, 2), (torch.randn(2, 3),), verify=False)
    assert set(computed_precisions(plain.model).values()) == {torch.float32}


class CentersAboveOne(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > 1:
            x = x - x.mean(0, keepdim=True)
        return x.relu()


def test_a_capture_from_a_batch_of_one_is_checked_by_eager_at_other_sizes() -> None:
    """Captured from size 1, the program holds that size's path; its rows must not stand for eager
    PyTorch at 2, where the model centres over the batch."""
    with pytest.raises(onnxport.VerificationError) as info:
        onnxport.export(CentersAboveOne(), (torch.rand(1, 2) + 1,), dynamic_shapes={"x": {0: Dim.DYNAMIC}})
    assert "rows resized" not in str(info.value.verification)


class _CollectsFirst(OrtRunner):
    """A child whose garbage collector runs before it builds its session, as allocations may make it do."""

    def __init__(self, model, **kwargs):
        gc.collect()
        super().__init__(model, **kwargs)


def test_garbage_of_this_process_is_not_destroyed_in_the_child(monkeypatch) -> None:
    """A cycle holding an onnxruntime session, not yet collected here when the session process forks, is left
    alone in the child: destroyed there, the session waited forever for its thread pool, which only this
    process has (an export hung in verification)."""
    ort = pytest.importorskip("onnxruntime")
    import numpy as np

    monkeypatch.setattr(child, "OrtRunner", _CollectsFirst)
    prog = onnxport.export(torch.nn.Linear(64, 64).eval(), (torch.randn(8, 64),), verify=False)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    gc.disable()
    try:
        session = ort.InferenceSession(prog.model_proto.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        session.run(None, {session.get_inputs()[0].name: np.ones((8, 64), np.float32)})
        garbage = [session]
        garbage.append(garbage)
        del session, garbage
        process = SessionProcess(prog.model)
    finally:
        gc.enable()
    try:
        assert process._conn.poll(60), "the child hung building its session"
        torch.testing.assert_close(process.run([torch.ones(8, 64)])[0], prog(torch.ones(8, 64)))
    finally:
        process.close()
