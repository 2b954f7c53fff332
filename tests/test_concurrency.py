"""Exports where users call them: in a multiprocessing.Pool worker (fork and spawn), which may not start child
processes, so verification runs in the worker itself and says so; and from eight threads at once, which
onnxport serializes around torch.export's process-wide tracing state."""

from __future__ import annotations

import multiprocessing
import threading

import pytest
import torch

import onnxport
from tests import concurrency_workers as workers

# A pool worker that has not answered by then is stuck (a forked worker once waited forever on a lock a thread of
# the parent held at the fork): the test fails, with the pool terminated, instead of holding the suite.
_PATIENCE_S = 600


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_export_in_a_pool_worker(method):
    with multiprocessing.get_context(method).Pool(1) as pool:
        result = pool.apply_async(workers.export_mlp, (3,)).get(timeout=_PATIENCE_S)
    assert result["status"] == "passed"
    assert "in this process (this process is a daemonic worker" in result["cost"]
    torch.testing.assert_close(torch.tensor(result["onnx"]), torch.tensor(result["eager"]), atol=1e-5, rtol=1e-5)


@pytest.mark.transformers
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_export_hf_in_a_pool_worker(method, tmp_path):
    from tests.hf_dirs import write_llama

    write_llama(str(tmp_path / "model"))
    with multiprocessing.get_context(method).Pool(1) as pool:
        written = pool.apply_async(workers.export_hf_folder,
                                   (str(tmp_path / "model"), str(tmp_path / "out"))).get(timeout=_PATIENCE_S)
    assert "model.onnx" in written and "genai_config.json" in written


def test_eight_threads_export_at_once():
    """Each thread exports its own model with a data-dependent if (rewritten into torch.cond) and dynamic
    batch; all eight succeed and match eager, as one thread alone would."""
    results: dict[int, object] = {}
    start = threading.Barrier(8)

    def run(i: int) -> None:
        start.wait()
        try:
            results[i] = workers.export_branchy(i)
        except BaseException as exc:  # noqa: BLE001 - recorded, asserted below
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    failures = {i: r for i, r in results.items() if isinstance(r, BaseException)}
    assert not failures, failures
    assert sorted(results) == list(range(8))
    for onnx_out, eager_out in results.values():
        torch.testing.assert_close(onnx_out, eager_out, atol=1e-5, rtol=1e-5)


def test_export_is_serialized_and_reentrant():
    """The lock is reentrant (export_hf calls export) and held for the call: an export from another thread
    waits for it instead of running beside it."""
    from onnxport.serial import _LOCK

    with _LOCK:
        inner = onnxport.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),), verify=False)
        assert inner.model.graph is not None
        done = threading.Event()
        other = threading.Thread(target=lambda: (workers.export_branchy(0), done.set()))
        other.start()
        assert not done.wait(timeout=1.0)
    other.join(timeout=120)
    assert done.is_set()
