"""The example page (examples/transformers-js/index.html) served from 127.0.0.1 and opened in headless Chromium,
driven by puppeteer-core (run_browser.mjs): what each page leaves in ``window.onnxportResult``."""

from __future__ import annotations

import collections
import functools
import http.server
import json
import os
import pathlib
import re
import shutil
import subprocess
import threading
import urllib.parse

import pytest

from tests.runtimes.runtimes import HERE, ROOT

MODULES = os.path.join(ROOT, "transformers-js")
PAGE = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples", "transformers-js", "index.html")


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def need_chromium() -> str:
    """Chromium's path; a failure under CI and a skip elsewhere where it is not installed."""
    found = chromium()
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("Chromium is not installed: run `make runtimes` (it installs tests/runtimes/chromium.txt)")
        pytest.skip("Chromium is not installed (make runtimes installs it where apt-get runs as root)")
    return found


def open_pages(root: pathlib.Path, queries: list[dict[str, str]], webgpu: bool = False) -> list[dict]:
    """Serve ``root`` (the page, transformers.js's bundle as ``lib/`` and onnxruntime-web's as ``ort/`` are linked
    into it) and open the page once per query (``model``, ``task``, ``dtype``, ``input``, ``options``, ``log``: the
    page's query parameters, paths relative to ``root``) in headless Chromium, on wasm, or with ``webgpu`` on
    SwiftShader's WebGPU adapter; each page's result, in order (with its console's lines where ``log`` is 1)."""
    browser = need_chromium()
    modules = os.path.join(MODULES, "node_modules")
    for name, target in (("index.html", PAGE), ("lib", os.path.join(modules, "@huggingface", "transformers", "dist")),
                         ("ort", os.path.join(modules, "onnxruntime-web", "dist"))):
        if not (root / name).exists():
            os.symlink(target, root / name)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, ".mjs": "text/javascript",
                              ".wasm": "application/wasm", ".onnx": "application/octet-stream"}
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        urls = [f"http://127.0.0.1:{server.server_port}/index.html?" + urllib.parse.urlencode(
            {"lib": "lib/transformers.js", "wasm": "ort/", "run": "1", "device": "webgpu" if webgpu else "wasm",
             **query}) for query in queries]
        with open(root / "urls.json", "w", encoding="utf-8") as f:
            json.dump(urls, f)
        subprocess.run([shutil.which("node"), os.path.join(HERE, "run_browser.mjs"), "--modules", MODULES,
                        "--chromium", browser, *(["--webgpu"] if webgpu else []), str(root / "urls.json"),
                        str(root / "results.json")], check=True, timeout=1800)
    finally:
        server.shutdown()
    with open(root / "results.json", encoding="utf-8") as f:
        return json.load(f)


_PLACED = re.compile(r"Node\(s\) placed on \[(\w+)ExecutionProvider\]")
_NODE = re.compile(r"VerifyEachNodeIsAssignedToAnEp\]\s{3}(\w+) \(")


def placements(logs: list[str]) -> list[dict[str, collections.Counter]]:
    """Per session a page created, in order: execution provider (``WebGpu``, ``CPU``) -> op type -> how many of the
    session's nodes onnxruntime placed there, read from its session log (the page opened with ``log=1``: the lines
    under "Node placements", copies between devices among them as ``MemcpyToHost``/``MemcpyFromHost``)."""
    sessions: list[dict[str, collections.Counter]] = []
    provider = None
    for line in logs:
        if "Node placements" in line:
            sessions.append({})
            provider = None
        elif sessions and (found := _PLACED.search(line)):
            provider = found.group(1)
            sessions[-1][provider] = collections.Counter()
        elif sessions and provider and (found := _NODE.search(line)):
            sessions[-1][provider][found.group(1)] += 1
        elif "VerifyEachNodeIsAssignedToAnEp" not in line:
            provider = None
    return sessions
