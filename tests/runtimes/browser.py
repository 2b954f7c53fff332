"""The example page (examples/transformers-js/index.html) served from 127.0.0.1 and opened in headless Chromium,
driven by puppeteer-core (run_browser.mjs): what each page leaves in ``window.onnxportResult``."""

from __future__ import annotations

import functools
import http.server
import json
import os
import pathlib
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


def open_pages(root: pathlib.Path, queries: list[dict[str, str]]) -> list[dict]:
    """Serve ``root`` (the page, transformers.js's bundle as ``lib/`` and onnxruntime-web's as ``ort/`` are linked
    into it) and open the page once per query (``model``, ``task``, ``dtype``, ``input``, ``options``: the page's
    query parameters, paths relative to ``root``) in headless Chromium; each page's result, in order."""
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
            {"lib": "lib/transformers.js", "wasm": "ort/", "run": "1", **query}) for query in queries]
        with open(root / "urls.json", "w", encoding="utf-8") as f:
            json.dump(urls, f)
        subprocess.run([shutil.which("node"), os.path.join(HERE, "run_browser.mjs"), "--modules", MODULES,
                        "--chromium", browser, str(root / "urls.json"), str(root / "results.json")],
                       check=True, timeout=900)
    finally:
        server.shutdown()
    with open(root / "results.json", encoding="utf-8") as f:
        return json.load(f)
