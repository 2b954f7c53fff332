"""Session-wide test configuration.

With pytest-xdist (``make test`` runs ``-n auto --dist loadfile``) each worker runs whole files, so the
per-file caches of exported models hold, and torch uses one thread per worker. The files are handed out in
collection order, so the longest go first (``LONG_FIRST``): the zoo, collected last by name, took its four
minutes on one worker while the other sat idle. The OpInfo coverage line is assembled from what every
worker counted.
"""

import json
import os
import sys

import torch

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)  # the workers share the cores

_WORKER_RESULTS: dict[str, str] = {}

# The longest test files of `make test`, longest first (alone on one core the zoo takes about four minutes,
# the docs' examples about 100 s); the rest keep their order after them.
LONG_FIRST = ("tests/zoo/", "tests/fuzz/", "tests/test_docs.py", "tests/test_opinfo.py", "tests/runtimes/")


def pytest_collection_modifyitems(config, items) -> None:
    """Collect the longest files first (a stable sort: tests keep their order within a file)."""

    def rank(item) -> int:
        return next((i for i, prefix in enumerate(LONG_FIRST) if item.nodeid.startswith(prefix)), len(LONG_FIRST))

    items.sort(key=rank)


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
