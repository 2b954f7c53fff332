"""What every Python runner of tests/runtimes shares: reading a case directory, comparing outputs, printing
one JSON line per input set. Needs numpy only, so the side venvs import it next to their runtime.

A case directory (written by ``tests/runtimes/cases.py``) holds ``model.onnx`` (and its external data, if any)
and ``case.json``: ``{"sets": [{"name", "inputs": [tensor], "outputs": [tensor + "atol", "rtol"]}]}``, where a
tensor is ``{"name", "dtype", "shape", "file"}`` and the file its raw little-endian bytes. An expected value
that is NaN is not compared (outputs at padding positions, which no caller reads).

Each line: ``{"runtime", "case", "set", "loaded", "load_error", "ran", "run_error", "outputs": {name:
{"max_abs_err", "nan", "ok"}}, "ok"}``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

# numpy has no bool-as-bytes ambiguity here: one byte per element, 0 or 1, as ONNX stores it.
DTYPES = {"float32": np.float32, "float16": np.float16, "float64": np.float64, "int64": np.int64,
          "int32": np.int32, "bool": np.bool_, "uint8": np.uint8, "int8": np.int8}

# load(model_path) -> a session; run(session, output_names, feed) -> the outputs in that order
Load = Callable[[str], Any]
Run = Callable[[Any, list[str], dict[str, np.ndarray]], Sequence[np.ndarray]]


def read_tensor(case_dir: str, spec: dict) -> np.ndarray:
    """The tensor ``spec`` names, from its raw little-endian file."""
    dtype = np.dtype(DTYPES[spec["dtype"]]).newbyteorder("<")
    data = np.fromfile(os.path.join(case_dir, spec["file"]), dtype=dtype)
    return data.reshape(spec["shape"]).astype(dtype.newbyteorder("="))


def compare(got: np.ndarray, want: np.ndarray, atol: float, rtol: float) -> dict:
    """max abs error where ``want`` is not NaN, NaNs anywhere in ``got``, and whether ``got`` has none and is
    within ``atol + rtol * |want|`` where ``want`` is not NaN."""
    if tuple(got.shape) != tuple(want.shape):
        return {"max_abs_err": None, "nan": None, "ok": False, "error": f"shape {list(got.shape)} != {list(want.shape)}"}
    got, want = got.astype(np.float64), want.astype(np.float64)
    nan = int(np.isnan(got).sum())
    cared = ~np.isnan(want)
    got, want = got[cared], want[cared]
    err = np.abs(got - want)
    finite = err[~np.isnan(err)]
    max_err = float(finite.max()) if finite.size else 0.0
    ok = nan == 0 and bool(np.all(err <= atol + rtol * np.abs(want)))
    return {"max_abs_err": max_err, "nan": nan, "ok": ok}


def run_case(case_dir: str, runtime: str, load: Load, run: Run) -> list[dict]:
    """One result per input set of ``case_dir``; a model refused at load gives that for every set."""
    with open(os.path.join(case_dir, "case.json")) as f:
        case = json.load(f)
    base = {"runtime": runtime, "case": os.path.basename(os.path.normpath(case_dir))}
    try:
        session = load(os.path.join(case_dir, "model.onnx"))
    except Exception as e:  # noqa: BLE001 - any refusal at load is an outcome to report
        return [{**base, "set": s["name"], "loaded": False, "load_error": short(e), "ran": False, "run_error": None,
                 "outputs": {}, "ok": False} for s in case["sets"]]
    results = []
    for s in case["sets"]:
        result = {**base, "set": s["name"], "loaded": True, "load_error": None, "ran": False, "run_error": None,
                  "outputs": {}, "ok": False}
        feed = {t["name"]: read_tensor(case_dir, t) for t in s["inputs"]}
        names = [t["name"] for t in s["outputs"]]
        try:
            got = run(session, names, feed)
        except Exception as e:  # noqa: BLE001 - a run error is an outcome to report
            result["run_error"] = short(e)
            results.append(result)
            continue
        result["ran"] = True
        for spec, value in zip(s["outputs"], got):
            result["outputs"][spec["name"]] = compare(np.asarray(value), read_tensor(case_dir, spec), spec["atol"],
                                                      spec["rtol"])
        result["ok"] = all(o["ok"] for o in result["outputs"].values())
        results.append(result)
    return results


def short(error: Exception, head: int = 100, tail: int = 300) -> str:
    """The error's start and end: runtimes put their message after a long C++ signature."""
    text = " ".join(f"{type(error).__name__}: {error}".split())
    return text if len(text) <= head + tail else f"{text[:head]} ... {text[-tail:]}"


def main(case_dirs: Sequence[str], runtime: str, load: Load, run: Run) -> int:
    """Print every input set's result of every case directory, one JSON line each."""
    for case_dir in case_dirs:
        for result in run_case(case_dir, runtime, load, run):
            print(json.dumps(result), flush=True)
    return 0
