"""Files onnxport writes, run in the runtimes people deploy on: older onnxruntime wheels, onnxruntime-node and
onnxruntime-web (wasm, under Node), OpenVINO (at f32), installed by ``make runtimes``, and the ONNX reference
evaluator (the specification's own implementation).

The rule (issue 17, DESIGN.md "Targets"): in every runtime, each file is refused at load or loads and computes
what eager PyTorch computes; never loads and fails to run, never runs and computes something else. And a
target's files load and match in every installed release of that target; the default target's in all of them.
Each model is captured once and translated per target (``onnxport.targets.TARGETS``, the default first;
``onnxport.export_each``) and every runtime runs all of them in one process; ``bench/runtimes.py`` runs the same cases over every opset and fused form.
"""

from __future__ import annotations

import os
import re

import pytest
import torch

from tests.runtimes import cases, runtimes

try:
    from onnxport import targets as _targets
except ImportError:  # before export(target=...): the default export settings only
    _targets = None

# The default export settings first: the default target, or no target= at all before targets existed.
DEFAULT = _targets.DEFAULT_TARGET if _targets is not None else "default"
TARGETS = (DEFAULT, *(t for t in (_targets.TARGETS if _targets is not None else ()) if t != DEFAULT))
# The models and dtypes this test runs (bench/runtimes.py runs every model in both).
MODELS = [(case, torch.float32) for case in cases.CASES] + [
    (c, torch.float16) for c in cases.CASES if c.name in ("cnn", "llama", "llama_kv", "llama_int4")
]


def _installed() -> list[runtimes.Runtime]:
    missing = runtimes.missing()
    if missing:
        message = f"side runtimes missing: {', '.join(missing)}; {runtimes.SETUP_HINT}"
        if os.environ.get("CI"):
            pytest.fail(message)  # CI must run them: a skip would hide the check
        pytest.skip(message)
    return runtimes.installed()


def _results(tmp: str) -> dict[str, list[dict]]:
    """Every model exported for every target, run in every runtime; target -> results."""
    dirs: dict[str, str] = {}
    for case, dtype in MODELS:
        built = case.build()
        # TensorRT's opset (20) has no blocked DequantizeLinear, nor MatMulNBits
        targets = [t for t in TARGETS if not (case.quantize and t.startswith("tensorrt"))]
        variants = [{} if t == DEFAULT else {"target": t} for t in targets]  # the default as users get it
        for target, prog in zip(targets, cases.export_each(case, built, variants, dtype=dtype)):
            name = f"{_slug(target)}.{case.name}.{str(dtype)[6:]}"
            dirs[name] = cases.write_case(case, built, prog, os.path.join(tmp, name), dtype=dtype)
    results = runtimes.run_all(_installed(), list(dirs.values()))
    by_target: dict[str, list[dict]] = {t: [] for t in TARGETS}
    for r in results:
        by_target[_unslug(r["case"].split(".")[0])].append(r)
    return by_target


def _slug(target: str) -> str:
    return re.sub(r"[^A-Za-z0-9-]+", "_", target)


def _unslug(slug: str) -> str:
    return next(t for t in TARGETS if _slug(t) == slug)


def _covers(target: str, runtime: str) -> bool:
    """Whether ``runtime`` ("onnxruntime-web 1.22.0") is a release the target promises to run in: all of them
    for the default (onnxruntime 1.18 and later, node and web included, and OpenVINO), but the reference
    evaluator, which lacks onnxruntime's own ops (``test_the_reference_evaluator_runs_every_file``)."""
    family, version = runtime.split()
    if target == DEFAULT:
        return family != "onnx-reference"
    spec = _targets.parse(target)
    family = {"onnxruntime-node": "onnxruntime"}.get(family, family)
    return family == spec.runtime and tuple(int(p) for p in version.split(".")[:2]) >= spec.version


def _describe(r: dict) -> str:
    outcome = runtimes.outcome(r)
    detail = (r["load_error"] or r["run_error"]) if outcome in ("refused", "crash") else r["run_error"] if outcome == "error" else {
        name: (o.get("max_abs_err"), o.get("nan")) for name, o in r["outputs"].items() if not o["ok"]}
    return f"{r['runtime']}: {r['case']} {r['set']}: {outcome} {str(detail)[:200]}"


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, list[dict]]:
    _installed()  # skip or fail before exporting anything
    return _results(str(tmp_path_factory.mktemp("runtimes")))


@pytest.mark.parametrize("target", TARGETS)
def test_refused_or_right_in_every_runtime(results, target: str) -> None:
    """No runtime loads a file and then fails to run it or computes something else, or dies on it."""
    broken = [_describe(r) for r in results[target] if runtimes.outcome(r) in ("crash", "error", "nan", "wrong")]
    assert not broken, f"{len(broken)} input sets load and go wrong:\n" + "\n".join(broken)


@pytest.mark.parametrize("target", TARGETS)
def test_loads_and_matches_in_every_release_of_its_target(results, target: str) -> None:
    """The default target's files in every runtime installed; a named target's in each release it names."""
    failed = [_describe(r) for r in results[target] if _covers(target, r["runtime"]) and runtimes.outcome(r) != "ok"]
    assert not failed, f"{len(failed)} input sets fail in releases of {target}:\n" + "\n".join(failed)


# What the reference evaluator refuses a file for when the file is right: an op of a domain the ONNX
# specification does not define (onnxruntime's com.microsoft kernels, which the default target's int4 files use).
_LACKS_OP = re.compile(r"Node type '(?P<op>\w+)' from domain '(?P<domain>[\w.]+)' is unknown")


@pytest.mark.parametrize("target", TARGETS)
def test_the_reference_evaluator_runs_every_file(results, target: str) -> None:
    """The specification's own implementation runs every file and matches eager PyTorch, or names the
    onnxruntime op it lacks: never a file it finds against the spec."""
    failed = []
    for r in results[target]:
        if not r["runtime"].startswith("onnx-reference") or runtimes.outcome(r) == "ok":
            continue
        lacks = _LACKS_OP.search(r["load_error"] or "") if runtimes.outcome(r) == "refused" else None
        if lacks is None or lacks["domain"] in ("", "ai.onnx", "ai.onnx.ml"):
            failed.append(_describe(r))
    assert not failed, f"{len(failed)} input sets the reference evaluator does not run:\n" + "\n".join(failed)
