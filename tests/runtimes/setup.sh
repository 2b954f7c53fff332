#!/usr/bin/env bash
# Install the side runtimes that tests/runtimes runs exported files in, from pinned versions, into
# $1 (default .runtimes/): a venv per line of python.txt (numpy + onnxruntime only) and of openvino.txt
# (numpy + openvino), an npm folder per
# node-*/ (onnxruntime-node + onnxruntime-web, `npm ci` from the committed lock file) and one for
# transformers-js/ (transformers.js, which brings its own onnxruntime-node and -web). Each one is stamped
# with the pins it was built from, so a rerun skips what is already there and rebuilds what changed.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="${1:-.runtimes}"
python="${PYTHON:-python3}"
mkdir -p "$root"

pyversion="$("$python" -c 'import sys; print(sys.version.split()[0])')"

# side_venv DIR MODULE VERSION PIN...: a venv at DIR holding exactly the pinned packages (--no-deps: a
# runtime's other requirements serve its tools, not running a model), whose MODULE reports VERSION.
side_venv() {
    local dir="$1" module="$2" version="$3"
    shift 3
    local want="$* $pyversion"
    if [ "$(cat "$dir/.stamp" 2>/dev/null)" = "$want" ]; then return; fi
    echo "runtimes: $* -> $dir"
    rm -rf "$dir"
    "$python" -m venv "$dir"
    "$dir/bin/python" -m pip install -q --disable-pip-version-check --no-deps "$@"
    "$dir/bin/python" -c "import $module; assert $module.__version__.startswith('$version'), $module.__version__"
    echo "$want" > "$dir/.stamp"
}

# Each runtime installs in a job of its own, all at once (most of the time is spent waiting on files and
# venv creation); the script fails if any job does.
jobs=()
launch() { "$@" & jobs+=("$!"); }

# Python: one venv per onnxruntime wheel.
while read -r ort numpy; do
    [ -n "$ort" ] || continue
    launch side_venv "$root/ort-$ort" onnxruntime "$ort" "onnxruntime==$ort" "numpy==$numpy"
done < <(grep -v '^#' "$here/python.txt")

# Python: one venv per OpenVINO release (openvino imports its telemetry package, nothing else beside numpy).
while read -r ov numpy telemetry; do
    [ -n "$ov" ] || continue
    launch side_venv "$root/openvino-$ov" openvino "$ov" "openvino==$ov" "numpy==$numpy" "openvino-telemetry==$telemetry"
done < <(grep -v '^#' "$here/openvino.txt")

# npm: onnxruntime-node and onnxruntime-web per pinned lock file, and transformers.js.
npm_folder() {
    local src="$1" name dir want
    name="$(basename "$src")"
    dir="$root/$name"
    want="$(cat "$src/package.json" "$src/package-lock.json" | sha256sum | cut -d' ' -f1) $(node --version)"
    if [ "$(cat "$dir/.stamp" 2>/dev/null)" = "$want" ]; then return; fi
    echo "runtimes: $(grep -o '"[a-z@/-]*": "[0-9][^"]*"' "$src/package.json" | tr '\n' ' ')-> $dir"
    rm -rf "$dir"
    mkdir -p "$dir"
    cp "$src/package.json" "$src/package-lock.json" "$dir/"
    # The CPU binaries ship in the package; its install script would fetch CUDA ones from nuget.org.
    (cd "$dir" && ONNXRUNTIME_NODE_INSTALL=skip ONNXRUNTIME_NODE_INSTALL_CUDA=skip npm ci --silent --no-audit --no-fund)
    echo "$want" > "$dir/.stamp"
}
for src in "$here"/node-*/ "$here"/transformers-js/; do
    launch npm_folder "$src"
done

failed=0
for job in "${jobs[@]}"; do
    wait "$job" || failed=1
done
[ "$failed" = 0 ] || { echo "runtimes: an install failed (see above)" >&2; exit 1; }

# Chromium for the browser test (tests/test_transformers_js.py): Debian's package at the pinned version, where
# apt-get runs as root; elsewhere the test is skipped (and fails under CI). A pin Debian no longer serves is said,
# not fatal here: the rest of the suite still runs.
chromium_pin="$(grep -v '^#' "$here/chromium.txt" | head -n 1)"
if [ -n "$chromium_pin" ] && command -v apt-get > /dev/null && [ "$(id -u)" = 0 ]; then
    if [ "$(dpkg-query -W -f='${Status} ${Version}' chromium 2> /dev/null || true)" != "install ok installed $chromium_pin" ]; then
        echo "runtimes: chromium=$chromium_pin (apt)"
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -q "chromium=$chromium_pin" > /dev/null 2>&1 \
            || { apt-get update -q > /dev/null 2>&1 && apt-get install -y -q "chromium=$chromium_pin" > /dev/null 2>&1; } \
            || echo "runtimes: could not install chromium=$chromium_pin; bump tests/runtimes/chromium.txt" >&2
    fi
fi
