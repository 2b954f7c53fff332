"""Run exported case directories in the onnxruntime of the Python running this script; print one JSON line per
input set (``caseio`` gives the formats). Needs numpy and onnxruntime only (no torch, no onnxport), so it runs
in the side venvs that ``tests/runtimes/setup.sh`` makes for older wheels.

    python run_ort.py CASE_DIR [CASE_DIR ...]

The session uses onnxruntime's default options (its default graph optimisation level), as users run it.
"""

from __future__ import annotations

import sys

import onnxruntime as ort
from caseio import main


def load(path: str) -> ort.InferenceSession:
    return ort.InferenceSession(path, providers=["CPUExecutionProvider"])


def run(session: ort.InferenceSession, names: list[str], feed: dict) -> list:
    return session.run(names, feed)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], f"onnxruntime {ort.__version__}", load, run))
