"""Runs the examples of tests/test_docs.py, each in its own process forked from this one once the heavy
imports (torch, onnxport, transformers) are done, so that an example costs its own work, not the imports.

One request per line on stdin, the path of an example script; for each, one line on stdout when the
example's process starts (``{"pid": n}``) and one when it ends (``{"status": code}``). The example runs as
``python script`` would: in the script's folder, as ``__main__``, with ``sys.argv = [script]``, its stdout
and stderr written to ``stdout.txt`` and ``stderr.txt`` there, and the exit status of ``python script``.

    python tests/docs_runner.py      # started by tests/test_docs.py, one per test process
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import sys
import threading
import traceback
from typing import NoReturn, TextIO


def preload() -> None:
    import torch  # noqa: F401
    import onnxport  # noqa: F401

    try:
        import transformers  # noqa: F401
    except ImportError:
        pass


def run(script: str) -> int:
    """Run ``script`` in this (forked) process, as ``python script`` does; its exit status."""
    folder = os.path.dirname(script)
    os.setsid()  # its own process group, so that a timeout ends whatever it started too
    os.chdir(folder)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, name in ((1, "stdout.txt"), (2, "stderr.txt")):
        os.dup2(os.open(os.path.join(folder, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
    sys.argv = [script]
    sys.path[0] = folder
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    except BaseException:  # noqa: BLE001 - reported as python reports it
        traceback.print_exc()
        return 1
    return 0


def finish(code: int) -> NoReturn:
    """Exit as python does after a script (wait for its threads, run its atexit functions), without tearing
    down every module the imports loaded, which takes a second and checks nothing of the example's."""
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def serve(answers: TextIO) -> int | None:
    """Answer requests until stdin closes; in a forked child, the example's exit status."""
    for line in sys.stdin:
        script = line.strip()
        if not script:
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            answers.close()
            return run(script)
        print(json.dumps({"pid": pid}), file=answers, flush=True)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        print(json.dumps({"status": code}), file=answers, flush=True)
    return None


if __name__ == "__main__":
    channel = os.fdopen(os.dup(1), "w")  # the answers; what the imports print goes to stderr with the rest
    os.dup2(2, 1)
    preload()
    exit_code = serve(channel)
    if exit_code is not None:  # the example's process: end as python ends after a script, less the teardown
        finish(exit_code)
