"""The examples of README.md and the guides in docs/ run.

Every ```python block is written to a file in a temporary folder and run there as ``python example.py`` runs
it, in a process of its own (forked from tests/docs_runner.py once torch is imported, on Linux), so an example
only sees what it defines and writes only into that folder. A block that cannot run here (weights to
download, a GPU, a long run) carries an HTML comment on the line right before its fence,
``<!-- not run: why -->``, and is skipped with that reason (``pytest -rs`` lists them). Every guide must
hold at least one block that runs, and the README must link every guide.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
GUIDES = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *GUIDES]
NOT_RUN = re.compile(r"<!--\s*not run:\s*(?P<why>.*?)\s*-->")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<ticks>`{3,})(?P<info>.*)$")
LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
TIMEOUT_S = 300


@dataclasses.dataclass
class Block:
    """One fenced code block of a page."""

    page: Path
    line: int  # of the opening fence, 1-based
    info: str  # the fence's info string: "python", "bash", ...
    code: str
    not_run: str | None  # the reason given in a <!-- not run: ... --> comment right before the fence

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def parse(page: Path) -> tuple[list[Block], list[str]]:
    """The fenced blocks of ``page``, and what is malformed about its markers."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks, problems = [], []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            marker = NOT_RUN.fullmatch(lines[i].strip())
            following = FENCE.match(lines[i + 1]) if i + 1 < len(lines) else None
            if marker and (following is None or following["info"].strip() != "python"):
                problems.append(f"{page.name}:{i + 1}: a 'not run' comment must come right before a ```python fence")
            i += 1
            continue
        ticks, info = opening["ticks"], opening["info"].strip()
        body, j = [], i + 1
        while j < len(lines) and not re.match(rf"^\s*{ticks}\s*$", lines[j]):
            body.append(lines[j])
            j += 1
        if j == len(lines):
            problems.append(f"{page.name}:{i + 1}: the code block is never closed")
        marker = NOT_RUN.fullmatch(lines[i - 1].strip()) if i > 0 else None
        if info.startswith(("py", "Py")) and info != "python":
            problems.append(f"{page.name}:{i + 1}: write ```python (run) or put <!-- not run: why --> before it, "
                            f"not ```{info}")
        blocks.append(Block(page, i + 1, info, "\n".join(body) + "\n", marker["why"] if marker else None))
        i = j + 1
    return blocks, problems


def python_blocks(page: Path) -> list[Block]:
    return [b for b in parse(page)[0] if b.info == "python"]


EXAMPLES = [b for page in PAGES for b in python_blocks(page)]


def _example_params() -> list:
    """Every example; those of a guide past its first runnable one are a ``sweep`` (``make test-sweep``, once per
    CI): ``make test`` runs the README's examples and the first of each guide."""
    firsts = {next((b.where for b in python_blocks(page) if b.not_run is None), None) for page in GUIDES}
    return [pytest.param(b, id=b.where, marks=[] if b.page == README or b.where in firsts else [pytest.mark.sweep])
            for b in EXAMPLES]


def _env() -> dict[str, str]:
    path = [str(ROOT / "src"), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    return dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONDONTWRITEBYTECODE="1",
                PYTHONPATH=os.pathsep.join(path))


class Runner:
    """tests/docs_runner.py: one process holding the imports, forking one process per example (Linux)."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "docs_runner.py")], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=log.open("w"), env=_env(), cwd=log.parent)
        self.pending = b""

    def _answer(self, timeout: float) -> dict | None:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.pending:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
                return None
            chunk = os.read(self.proc.stdout.fileno(), 4096)
            if not chunk:
                raise RuntimeError(f"tests/docs_runner.py ended:\n{self.log.read_text()[-4000:]}")
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return json.loads(line)

    def run(self, script: Path) -> tuple[int | None, str, str]:
        """The example's exit status (None past the time limit), stdout and stderr."""
        self.proc.stdin.write(f"{script}\n".encode())
        self.proc.stdin.flush()
        started = self._answer(60)
        if started is None:
            raise RuntimeError(f"tests/docs_runner.py does not answer:\n{self.log.read_text()[-4000:]}")
        ended = self._answer(TIMEOUT_S)
        if ended is None:
            os.killpg(started["pid"], signal.SIGKILL)  # the example's own process group
            self._answer(60)
        status = None if ended is None else ended["status"]
        out, err = (script.parent / name for name in ("stdout.txt", "stderr.txt"))
        return status, out.read_text(errors="replace"), err.read_text(errors="replace")

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runner | None]:
    if not sys.platform.startswith("linux"):  # fork after importing torch: Linux only; elsewhere one python each
        yield None
        return
    started = Runner(tmp_path_factory.mktemp("docs_runner") / "runner.log")
    yield started
    started.close()


@pytest.mark.parametrize("block", _example_params())
def test_example_runs(block: Block, tmp_path: Path, runner: Runner | None) -> None:
    if block.not_run is not None:
        pytest.skip(f"{block.where} not run: {block.not_run}")
    script = tmp_path / "example.py"
    script.write_text(block.code, encoding="utf-8")
    if runner is not None:
        status, out, err = runner.run(script)
    else:
        try:
            done = subprocess.run([sys.executable, script.name], cwd=tmp_path, env=_env(), capture_output=True,
                                  text=True, timeout=TIMEOUT_S)
            status, out, err = done.returncode, done.stdout, done.stderr
        except subprocess.TimeoutExpired:
            status, out, err = None, "", ""
    if status is None:
        pytest.fail(f"{block.where}: the example ran past {TIMEOUT_S} s", pytrace=False)
    if status != 0:
        pytest.fail(f"{block.where}: the example exited with {status}\n--- code\n{block.code}"
                    f"--- stdout\n{out[-4000:]}\n--- stderr\n{err[-8000:]}", pytrace=False)


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_page_has_a_runnable_example(page: Path) -> None:
    blocks, problems = parse(page)
    assert not problems, "\n".join(problems)
    runnable = [b for b in blocks if b.info == "python" and b.not_run is None]
    assert runnable, f"{page.relative_to(ROOT)} has no ```python example that runs"


def test_guides_exist_and_the_readme_links_each() -> None:
    assert len(GUIDES) >= 10, "the guides are docs/*.md"
    readme = README.read_text(encoding="utf-8")
    linked = {m["target"].split("#")[0] for m in LINK.finditer(readme)}
    missing = [g.name for g in GUIDES if f"docs/{g.name}" not in linked]
    assert not missing, f"README.md does not link {missing}"


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_relative_links_resolve(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    anchors = {_anchor(h) for h in re.findall(r"^#+\s+(.*)$", text, flags=re.M)}
    broken = []
    for match in LINK.finditer(text):
        target = match["target"]
        if re.match(r"^[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(target)
        elif anchor and resolved.suffix == ".md":
            heads = anchors if resolved == page else {
                _anchor(h) for h in re.findall(r"^#+\s+(.*)$", resolved.read_text(encoding="utf-8"), flags=re.M)}
            if anchor not in heads:
                broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)}: broken links {broken}"


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_pages_are_short_enough() -> None:
    assert len(README.read_bytes()) < 14_000, "README.md is the ten-minute read; move details into docs/"
    long = [p.name for p in PAGES if len(p.read_text(encoding="utf-8").splitlines()) >= 800]
    assert not long, f"split these pages: {long}"


def test_the_task_tables_list_export_hfs_tasks() -> None:
    from onnxport.hf.examples import TASKS

    text = (ROOT / "docs" / "tasks.md").read_text(encoding="utf-8")
    table = text[text.index("| task |"):].split("\n\n")[0]
    listed = {m for row in table.splitlines()[2:] for m in re.findall(r"^\| `([a-z0-9-]+)`", row)}
    assert listed == set(TASKS), "docs/tasks.md's table of tasks differs from onnxport.hf.examples.TASKS"
    readme = README.read_text(encoding="utf-8")
    assert not [t for t in TASKS if f"`{t}`" not in readme], "README.md's task table misses a task"


def test_the_command_line_guide_names_every_subcommand() -> None:
    import argparse

    from onnxport.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    text = (ROOT / "docs" / "command-line.md").read_text(encoding="utf-8")
    assert not [c for c in sub.choices if f"onnxport {c}" not in text]


def test_the_make_targets_named_exist() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    defined = set(re.findall(r"^([A-Za-z0-9_.-]+):", makefile, flags=re.M))
    pattern = re.compile(r"`make ([a-z][a-z0-9-]*)`|^make ([a-z][a-z0-9-]*)", flags=re.M)  # in text, in a shell block
    named = {a or b for page in PAGES for a, b in pattern.findall(page.read_text(encoding="utf-8"))}
    assert {"demo", "test"} <= named, "the README's two commands are make demo and make test"
    assert not named - defined, f"the guides name make targets the Makefile lacks: {sorted(named - defined)}"


def test_how_it_works_names_every_optimization_pass_in_order() -> None:
    """docs/how-it-works.md's picture lists the passes of ``optimize=True`` as the pipeline runs them."""
    from onnxport.optimize.pipeline import default_passes
    from onnxport.targets import DEFAULT_TARGET, Forms, parse

    names = [type(p).__name__.removesuffix("Pass") for p in default_passes(Forms(parse(DEFAULT_TARGET), 21))]
    text = (ROOT / "docs" / "how-it-works.md").read_text(encoding="utf-8")
    picture = text[text.index("└─ optimize/"):text.index("└─ half/")]
    found = re.findall(r"\b([A-Z][A-Za-z]+?)(?:Pass)?\b", picture)
    listed = [name for name in found if name in set(names)]
    assert listed == names, f"docs/how-it-works.md lists {listed}, the pipeline runs {names}"
