"""Run exported case directories in the ONNX reference evaluator (``onnx.reference``, the specification's own
implementation in numpy); print one JSON line per input set (``caseio`` gives the formats). A file it cannot
load names the op it lacks (onnxruntime's own ``com.microsoft`` ops, which the specification does not define).

One kernel of it is replaced: its ``GatherElements`` gathers with ``np.choose``, which takes at most 64 choices,
and its fallback for more reads one index per row, so it fails on any gather along a dim longer than 64 (BERT's
token types gathered by position from a buffer of 128); ``GatherElements`` below computes the op as the
specification defines it.

    python run_reference.py CASE_DIR [CASE_DIR ...]
"""

from __future__ import annotations

import sys

import numpy as np
import onnx
from caseio import main
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun


class GatherElements(OpRun):
    """output[i][j][k] = data[index[i][j][k]][j][k] (axis 0; alike along the others), negative indices
    counting from the end."""

    def _run(self, data: np.ndarray, indices: np.ndarray, axis: int = 0) -> tuple[np.ndarray]:
        indices = np.where(indices < 0, indices + data.shape[axis], indices)
        return (np.take_along_axis(data, indices.astype(np.int64), axis=axis),)


def load(path: str) -> ReferenceEvaluator:
    return ReferenceEvaluator(onnx.load(path), new_ops=[GatherElements])


def run(evaluator: ReferenceEvaluator, names: list[str], feed: dict) -> list:
    return evaluator.run(names, feed)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], f"onnx-reference {onnx.__version__}", load, run))
