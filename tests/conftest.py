"""Session-wide test configuration.

With pytest-xdist (``make test`` runs ``-n auto --dist loadfile``) each worker runs whole files, so the
per-file caches of exported models hold, and torch uses one thread per worker. The OpInfo coverage line
is assembled from what every worker counted.
"""

import json
import os
import sys

import torch

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)  # the workers share the cores

_WORKER_RESULTS: dict[str, str] = {}


def _opinfo_results() -> dict[str, str]:
    module = sys.modules.get("tests.test_opinfo")
    return dict(module.RESULTS) if module is not None else {}


def pytest_sessionfinish(session) -> None:
    """On a worker, hand the OpInfo results to the controller."""
    if hasattr(session.config, "workeroutput"):
        session.config.workeroutput["opinfo"] = json.dumps(_opinfo_results())


def pytest_testnodedown(node, error) -> None:
    """On the controller, gather each worker's OpInfo results."""
    _WORKER_RESULTS.update(json.loads(getattr(node, "workeroutput", {}).get("opinfo", "{}")))


def pytest_terminal_summary(terminalreporter) -> None:
    """Print the OpInfo coverage number when the OpInfo tests ran."""
    results = {**_WORKER_RESULTS, **_opinfo_results()}
    if results:
        from tests.test_opinfo import coverage_line

        terminalreporter.write_line(coverage_line(results))
