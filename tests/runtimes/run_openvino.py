"""Run exported case directories in OpenVINO's CPU plugin, which reads ``.onnx`` files directly; print one JSON
line per input set (``caseio`` gives the formats). Needs numpy and openvino only, so it runs in the side venv
``tests/runtimes/setup.sh`` makes.

    python run_openvino.py [--default-precision] CASE_DIR [CASE_DIR ...]

Models are compiled at f32 inference precision and without dynamic quantization: on a CPU with bfloat16 units
(AMX), OpenVINO's default is to compute in bfloat16, which no float32 tolerance holds, and on one with int8
dot products (VNNI) it quantizes the activations of the products with int4/int8 weights (MatMulNBits) to int8
in groups of 32 (the int4 Llama's logits 2.8e-3 off where they are exact without). ``--default-precision`` compiles them as OpenVINO does
by default instead, reported as the runtime ``openvino-default`` (bench/runtimes.py measures what it does to
the zoo's outputs; docs/targets.md says it).
"""

from __future__ import annotations

import sys

import openvino as ov
from caseio import main

CORE = ov.Core()


def load(path: str) -> ov.CompiledModel:
    return CORE.compile_model(path, "CPU", {"INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"})


def load_default(path: str) -> ov.CompiledModel:
    return CORE.compile_model(path, "CPU")


def run(compiled: ov.CompiledModel, names: list[str], feed: dict) -> list:
    request = compiled.create_infer_request()
    request.infer(feed)
    by_name = {name: request.get_tensor(port).data.copy() for port in compiled.outputs for name in port.names}
    return [by_name[name] for name in names]


if __name__ == "__main__":
    version = ov.__version__.split("-")[0]
    if sys.argv[1:2] == ["--default-precision"]:
        sys.exit(main(sys.argv[2:], f"openvino-default {version}", load_default, run))
    sys.exit(main(sys.argv[1:], f"openvino {version}", load, run))
