#!/usr/bin/env bash
# Install the side runtimes that tests/runtimes runs exported files in, from pinned versions, into
# $1 (default .runtimes/): a venv per line of python.txt (numpy + onnxruntime only) and of openvino.txt
# (numpy + openvino), and an npm folder per
# node-*/ (onnxruntime-node + onnxruntime-web, `npm ci` from the committed lock file). Each one is stamped
# with the pins it was built from, so a rerun skips what is already there and rebuilds what changed.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="${1:-.runtimes}"
python="${PYTHON:-python3}"
mkdir -p "$root"

# Python: one venv per onnxruntime wheel.
grep -v '^#' "$here/python.txt" | while read -r ort numpy; do
    [ -n "$ort" ] || continue
    dir="$root/ort-$ort"
    want="onnxruntime==$ort numpy==$numpy $("$python" -c 'import sys; print(sys.version.split()[0])')"
    if [ "$(cat "$dir/.stamp" 2>/dev/null)" = "$want" ]; then continue; fi
    echo "runtimes: onnxruntime $ort (numpy $numpy) -> $dir"
    rm -rf "$dir"
    "$python" -m venv "$dir"
    # --no-deps: onnxruntime's other requirements (protobuf, sympy, ...) serve its tools, not InferenceSession.
    "$dir/bin/python" -m pip install -q --disable-pip-version-check --no-deps "onnxruntime==$ort" "numpy==$numpy"
    "$dir/bin/python" -c "import onnxruntime, numpy; assert onnxruntime.__version__ == '$ort', onnxruntime.__version__"
    echo "$want" > "$dir/.stamp"
done

# Python: one venv per OpenVINO release (openvino imports its telemetry package, nothing else beside numpy).
grep -v '^#' "$here/openvino.txt" | while read -r ov numpy telemetry; do
    [ -n "$ov" ] || continue
    dir="$root/openvino-$ov"
    want="openvino==$ov numpy==$numpy openvino-telemetry==$telemetry $("$python" -c 'import sys; print(sys.version.split()[0])')"
    if [ "$(cat "$dir/.stamp" 2>/dev/null)" = "$want" ]; then continue; fi
    echo "runtimes: openvino $ov (numpy $numpy) -> $dir"
    rm -rf "$dir"
    "$python" -m venv "$dir"
    "$dir/bin/python" -m pip install -q --disable-pip-version-check --no-deps "openvino==$ov" "numpy==$numpy" \
        "openvino-telemetry==$telemetry"
    "$dir/bin/python" -c "import openvino; assert openvino.__version__.startswith('$ov'), openvino.__version__"
    echo "$want" > "$dir/.stamp"
done

# npm: onnxruntime-node and onnxruntime-web per pinned lock file.
for src in "$here"/node-*/; do
    name="$(basename "$src")"
    dir="$root/$name"
    want="$(cat "$src/package.json" "$src/package-lock.json" | sha256sum | cut -d' ' -f1) $(node --version)"
    if [ "$(cat "$dir/.stamp" 2>/dev/null)" = "$want" ]; then continue; fi
    echo "runtimes: $(grep -o '"onnxruntime-node": "[^"]*"' "$src/package.json") and onnxruntime-web -> $dir"
    rm -rf "$dir"
    mkdir -p "$dir"
    cp "$src/package.json" "$src/package-lock.json" "$dir/"
    # The CPU binaries ship in the package; its install script would fetch CUDA ones from nuget.org.
    (cd "$dir" && ONNXRUNTIME_NODE_INSTALL=skip npm ci --silent --no-audit --no-fund)
    echo "$want" > "$dir/.stamp"
done
