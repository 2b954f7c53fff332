"""The runtimes tests/runtimes runs files in, found where ``make runtimes`` installs them, and how to run one.

Each runtime is a command (a side venv's Python with ``run_ort.py`` or ``run_openvino.py``, Node with
``run_node.mjs`` and an npm folder, or the main environment's Python with ``run_reference.py``) that takes case
directories and prints one JSON result per input set. The newest onnxruntime and the ONNX reference evaluator
are the main environment's own (``requirements-test.txt`` pins them); the others come from ``python.txt``,
``openvino.txt`` and ``node-*/`` under .runtimes/ (``tests/runtimes/setup.sh``).
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("ONNXPORT_RUNTIMES", os.path.join(os.path.dirname(os.path.dirname(HERE)), ".runtimes"))
SETUP_HINT = "run `make runtimes` (tests/runtimes/setup.sh) to install the side runtimes into .runtimes/"


@dataclasses.dataclass(frozen=True)
class Runtime:
    """``family`` ("onnxruntime", "onnxruntime-node", "onnxruntime-web", "openvino", "onnx-reference") at
    ``version`` (major, minor, patch), run by ``command`` followed by case directories."""

    family: str
    version: tuple[int, ...]
    command: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.family} {'.'.join(map(str, self.version))}"

    def run(self, case_dirs: Sequence[str], timeout: float = 600) -> list[dict]:
        """One result per input set of each case directory (a crash of the runtime itself, e.g. a segfault in a
        kernel, gives a failed result for every set of the directory it was on)."""
        results: list[dict] = []
        for group in _chunks(case_dirs, 64):
            proc = subprocess.run([*self.command, *group], capture_output=True, text=True, timeout=timeout)
            done = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
            results += done
            if proc.returncode != 0:  # the rest of the group, one directory at a time, to find the one it died on
                seen = {r["case"] for r in done}
                rest = [d for d in group if os.path.basename(os.path.normpath(d)) not in seen]
                results += [r for d in rest for r in self._run_one(d, timeout)]
        return results

    def _run_one(self, case_dir: str, timeout: float) -> list[dict]:
        proc = subprocess.run([*self.command, case_dir], capture_output=True, text=True, timeout=timeout)
        done = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        if proc.returncode == 0:
            return done
        with open(os.path.join(case_dir, "case.json")) as f:
            sets = [s["name"] for s in json.load(f)["sets"]]
        error = f"the runtime died (exit {proc.returncode}): {proc.stderr.strip()[-300:]}"
        finished = {r["set"] for r in done}
        loaded = bool(done)
        return done + [{"runtime": self.name, "case": os.path.basename(os.path.normpath(case_dir)), "set": s,
                        "loaded": loaded, "load_error": None if loaded else error, "ran": False,
                        "run_error": error if loaded else None, "outputs": {}, "ok": False, "crashed": True}
                       for s in sets if s not in finished]


def _chunks(items: Sequence[str], size: int) -> list[list[str]]:
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])


def _pinned(listing: str) -> list[str]:
    """The versions a pin file (``python.txt``, ``openvino.txt``) lists, first column."""
    with open(os.path.join(HERE, listing)) as f:
        return [line.split()[0] for line in f if line.strip() and not line.startswith("#")]


def _side_venvs(root: str, family: str, listing: str, folder: str, runner: str) -> list[Runtime]:
    """The side venvs ``listing`` pins that are installed (``<root>/<folder>-<version>``), run by ``runner``."""
    found = []
    for version in _pinned(listing):
        venv = os.path.join(root, f"{folder}-{version}")
        if os.path.exists(os.path.join(venv, ".stamp")):
            found.append(Runtime(family, _version(version), (os.path.join(venv, "bin", "python"), os.path.join(HERE, runner))))
    return found


def python_runtimes(root: str = ROOT) -> list[Runtime]:
    """The onnxruntime side venvs python.txt lists that are installed, and the main environment's onnxruntime."""
    import onnxruntime

    main = Runtime("onnxruntime", _version(onnxruntime.__version__), (sys.executable, os.path.join(HERE, "run_ort.py")))
    return [*_side_venvs(root, "onnxruntime", "python.txt", "ort", "run_ort.py"), main]


def other_runtimes(root: str = ROOT) -> list[Runtime]:
    """Runtimes that are not onnxruntime: OpenVINO (its side venvs, openvino.txt) and the ONNX reference
    evaluator (the main environment's onnx)."""
    import onnx

    reference = Runtime("onnx-reference", _version(onnx.__version__), (sys.executable, os.path.join(HERE, "run_reference.py")))
    return [*_side_venvs(root, "openvino", "openvino.txt", "openvino", "run_openvino.py"), reference]


def node_runtimes(root: str = ROOT) -> list[Runtime]:
    """onnxruntime-node and onnxruntime-web (wasm, under Node) for each installed npm folder."""
    node = shutil.which("node")
    found = []
    for src in sorted(glob.glob(os.path.join(HERE, "node-*", "package.json"))):
        folder = os.path.join(root, os.path.basename(os.path.dirname(src)))
        if node is None or not os.path.exists(os.path.join(folder, ".stamp")):
            continue
        with open(src) as f:
            pins = json.load(f)["dependencies"]
        for backend in ("node", "web"):
            family = f"onnxruntime-{backend}"
            command = (node, os.path.join(HERE, "run_node.mjs"), "--modules", folder, "--backend", backend)
            found.append(Runtime(family, _version(pins[family]), command))
    return found


def expected_runtimes() -> list[str]:
    """What ``make runtimes`` installs, by name: to tell a missing one from one that is not wanted."""
    names = [f"onnxruntime {v}" for v in _pinned("python.txt")] + [f"openvino {v}" for v in _pinned("openvino.txt")]
    for src in sorted(glob.glob(os.path.join(HERE, "node-*", "package.json"))):
        with open(src) as f:
            pins = json.load(f)["dependencies"]
        names += [f"{family} {pins[family]}" for family in ("onnxruntime-node", "onnxruntime-web")]
    return names


def installed() -> list[Runtime]:
    """Every runtime found, oldest Python wheel first, then node and web, OpenVINO and the reference."""
    return python_runtimes() + node_runtimes() + other_runtimes()


def missing() -> list[str]:
    """The runtimes ``make runtimes`` installs that are not there."""
    have = {r.name for r in installed()}
    return [name for name in expected_runtimes() if name not in have]


def run_all(runtimes: Sequence[Runtime], case_dirs: Sequence[str], workers: int = 2) -> list[dict]:
    """Every runtime on every case directory, ``workers`` runtimes at a time; results in runtime order."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return [r for results in pool.map(lambda rt: rt.run(case_dirs), runtimes) for r in results]


def outcome(result: dict) -> str:
    """``crash`` (the runtime's process died: no refusal a user can catch), ``refused`` (at load), ``error``
    (loaded, failed to run), ``nan``, ``wrong`` (mismatch) or ``ok``."""
    if result.get("crashed"):
        return "crash"
    if not result["loaded"]:
        return "refused"
    if not result["ran"]:
        return "error"
    if result["ok"]:
        return "ok"
    return "nan" if any(o.get("nan") for o in result["outputs"].values()) else "wrong"


TRANSFORMERS_JS = os.path.join(ROOT, "transformers-js")  # the npm folder of transformers.js (`make runtimes`)


def run_transformers_js(runner: str, jobs: object, scratch: str, timeout: float = 900) -> object:
    """``jobs`` (JSON) run by the transformers.js script ``runner`` (a path, or a file name under tests/runtimes/)
    in one Node process over the transformers.js ``make runtimes`` installs: what it wrote. The script takes
    ``--modules FOLDER JOBS.json RESULTS.json``; the two files go to ``scratch``. A machine without it fails the test
    that asks, saying how to install it."""
    import pytest

    node = shutil.which("node")
    if node is None or not os.path.isfile(os.path.join(TRANSFORMERS_JS, ".stamp")):
        pytest.fail(f"transformers.js is not installed in {TRANSFORMERS_JS}: {SETUP_HINT}")
    paths = [os.path.join(str(scratch), name) for name in ("jobs.json", "results.json")]
    with open(paths[0], "w", encoding="utf-8") as f:
        json.dump(jobs, f)
    subprocess.run([node, os.path.join(HERE, runner), "--modules", TRANSFORMERS_JS, *paths], check=True,
                   timeout=timeout)
    with open(paths[1], encoding="utf-8") as f:
        return json.load(f)
