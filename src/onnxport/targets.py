"""Targets: the runtime a file is written for decides its form.

A target names a runtime and the oldest release of it the file must run in: ``"onnxruntime>=1.18"`` (the
default), ``"onnxruntime>=1.24"``, ``"onnxruntime-web>=1.22"``. It picks the opset: the newest that release
loads, up to 23 (the first with the fused ops; onnxruntime's own graph optimisations know opset 23's ops,
and ran the same fused file 1.4x slower at opset 26). Then the rule: every release that loads the file
computes what eager PyTorch computes. A fused op goes into a file only where the releases that would load it
and compute it wrong can be made to refuse it: the file's IR version is raised past what they read (a
fence), up to what the target's oldest release reads. The tables below say from which release each form is
right, as found by ``tests/runtimes`` (``bench/runtimes.md``), which runs every target's files in those
releases. So ``target="onnxruntime>=1.24"`` writes opset 23 at IR 12, which 1.23 (whose Attention is wrong
on padded rows) refuses; grouped float16 attention, wrong until 1.26, has no fence at opset 23 (1.24 reads
IR 13 as 1.26 does) and keeps its heads repeated unless the opset is 26 (``opset=26``).

onnxruntime's Python wheels, its C/C++ packages and onnxruntime-node share one core and one version
number, so ``"onnxruntime"`` covers them all; onnxruntime-web's wasm backend is the same core built for
the browser, released under the same numbers, and is tested on its own.

The IR version of a file is not the target's: it is the lowest that the file's opsets and element types
allow (:func:`ir_version_for`), so that a runtime that loads the opset also loads the file.
"""

from __future__ import annotations

import dataclasses
import re

import onnx
import onnx_ir as ir

from onnxport.errors import InvalidInputError

__all__ = ["DEFAULT_TARGET", "OFF_DEVICE", "QUANTIZED_SINCE", "TARGETS", "Forms", "Target", "ir_version_for", "resolve"]

MIN_OPSET = 18  # the oldest opset onnxport writes
FUSED_OPSET = 23  # the first opset with Attention, RMSNormalization and RotaryEmbedding; the newest a target picks
_FORM_OPSET = {"LayerNormalization.no_bias": 17, "MatMulInteger": 10}  # forms of older ops: the opset that has them (else FUSED_OPSET)

# The newest ai.onnx opset each runtime release loads, from that release on: probed with onnxruntime's
# wheels from 1.18 (tests/runtimes), earlier ones from its release notes. onnxruntime-web is the same core
# under the same release numbers.
_ORT_OPSETS = (((1, 14), 18), ((1, 15), 19), ((1, 17), 20), ((1, 18), 21), ((1, 22), 22), ((1, 23), 23),
               ((1, 24), 25), ((1, 26), 26), ((1, 32), 28))
_OPSETS: dict[str, tuple[tuple[tuple[int, int], int], ...]] = {
    "onnxruntime": _ORT_OPSETS,
    "onnxruntime-web": _ORT_OPSETS,
}
# The newest IR version each release reads, from that release on (probed likewise).
_ORT_IR = (((1, 14), 8), ((1, 15), 9), ((1, 18), 10), ((1, 23), 11), ((1, 24), 13), ((1, 32), 14))
_IRS: dict[str, tuple[tuple[tuple[int, int], int], ...]] = {"onnxruntime": _ORT_IR, "onnxruntime-web": _ORT_IR,
                                                           "tensorrt": (((10, 0), 10), ((11, 0), 11))}
# TensorRT's ONNX parser: opset 20 in 10.x, 25 in 11.x (its support matrix). onnxport's tests cannot run
# TensorRT (it needs a GPU), so its target holds no fused op; its files are the plain ops of that opset.
_OPSETS["tensorrt"] = (((10, 0), 20), ((11, 0), 25))

# Fused forms and the first release of each runtime that computes them right in every case onnxport
# emits them (None: never emitted for that runtime). Found by tests/runtimes, see bench/runtimes.md:
# - Attention: onnxruntime 1.23 lets the NaN at a left-padded row's masked positions spread to its real
#   tokens (and onnxruntime-node 1.23 is reported to fail a prefill from an empty cache); right from 1.24.
# - Attention with grouped key/value heads in float16: NaN or wrong in 1.23 and 1.24 in the (batch, seq,
#   heads * embed) form the layout fusion writes (the 4-D form was right in 1.24); right from 1.26.
# - LayerNormalization without its optional bias input: onnxruntime 1.18's AttentionFusion (at its default
#   optimisation level) reads the missing bias and aborts the process at load (OLMo, ModernBERT); 1.20 loads
#   it (1.19 was not measured). Before that, the bias is written as zeros.
# - MatMulInteger (a quantized linear layer with a float output, see optimize/integer_matmul.py): in every
#   release's CPU kernels (uint8 and int8 operands, kernels-onnxruntime-1.18.1.json), and computed right by
#   onnxruntime-web 1.22 and 1.30's wasm; TensorRT reads quantized products only as Q/DQ.
FUSED_SINCE: dict[str, dict[str, tuple[int, int] | None]] = {
    "MatMulInteger": {"onnxruntime": (1, 14), "onnxruntime-web": (1, 14), "tensorrt": None},
    "LayerNormalization.no_bias": {"onnxruntime": (1, 20), "onnxruntime-web": (1, 20), "tensorrt": None},
    "Attention": {"onnxruntime": (1, 24), "onnxruntime-web": (1, 24), "tensorrt": None},
    "Attention.float16_grouped": {"onnxruntime": (1, 26), "onnxruntime-web": (1, 26), "tensorrt": None},
    "RMSNormalization": {"onnxruntime": (1, 23), "onnxruntime-web": (1, 23), "tensorrt": None},
    "RotaryEmbedding": {"onnxruntime": (1, 23), "onnxruntime-web": (1, 23), "tensorrt": None},
}

# Fused forms that a runtime computes right but runs off its accelerator, so its files keep them written out. A file
# for onnxruntime-web is for both its backends: its WebGPU provider (1.31, transformers.js 4.3's) has no kernel for
# opset 23's Attention, and places each one on the CPU with copies to and from the GPU around it (its session log,
# logSeverityLevel 0); attention written out (MatMul, Softmax, as in the files transformers.js users load today)
# runs on WebGPU and on wasm.
OFF_DEVICE: dict[str, tuple[str, ...]] = {"onnxruntime-web": ("Attention",)}

# The first onnxruntime release that loads and computes each quantized form right, measured with
# onnxruntime's wheels 1.18-1.32 (tests/runtimes' side environments): MatMulNBits of 4 bits loads in every
# one; of 8 bits from 1.23; GatherBlockQuantized from 1.23, but with 4-bit zero points wrong up to 1.26
# (right in 1.32; the releases between were not measured); blocked DequantizeLinear (opset 21) from 1.20.
QUANTIZED_SINCE = {("matmulnbits", 4): (1, 18), ("matmulnbits", 8): (1, 23), ("gather", 4): (1, 23),
                   ("gather", 8): (1, 23), ("gather", "4-asymmetric"): (1, 32), ("dequantize", 4): (1, 20),
                   ("dequantize", 8): (1, 20)}


# The runtimes whose releases tests/runtimes runs: a fused form must be right in each that loads the file.
_MEASURED = ("onnxruntime", "onnxruntime-web")

DEFAULT_TARGET = "onnxruntime>=1.18"
# The named targets: docs/targets.md's table, and what tests/runtimes exports and runs.
TARGETS = ("onnxruntime>=1.18", "onnxruntime>=1.24", "onnxruntime>=1.26", "onnxruntime-web>=1.22",
           "onnxruntime-web>=1.26", "tensorrt>=10.0")

_SPEC = re.compile(r"^\s*([a-z][a-z-]*)\s*(?:>=\s*(\d+)(?:\.(\d+))?(?:\.\d+)?)?\s*$")


@dataclasses.dataclass(frozen=True)
class Target:
    """A runtime (``"onnxruntime"``, ``"onnxruntime-web"``, ``"tensorrt"``) and its oldest release."""

    runtime: str
    version: tuple[int, int]

    def __str__(self) -> str:
        return f"{self.runtime}>={self.version[0]}.{self.version[1]}"

    @property
    def max_opset(self) -> int:
        """The newest opset the target's oldest release loads."""
        return max(opset for since, opset in _OPSETS[self.runtime] if since <= self.version)

    @property
    def opset(self) -> int:
        """The opset files for this target are written in: the newest its oldest release loads, up to 23."""
        return min(self.max_opset, FUSED_OPSET)

    @property
    def max_ir(self) -> int:
        """The newest IR version the target's oldest release reads: how high a fence may go."""
        return max(ir for since, ir in _IRS[self.runtime] if since <= self.version)


@dataclasses.dataclass(frozen=True)
class Forms:
    """Which fused ops one export emits: those that every release loading its opset computes right, in
    the target's runtime and in each runtime whose releases are measured; and whether it ends in float16
    (an export with ``dtype=torch.float16`` is translated in float32 and narrowed afterwards)."""

    target: Target
    opset: int
    half: bool = False

    def allows(self, form: str) -> bool:
        """Whether ``form`` (a key of ``FUSED_SINCE``) is right wherever a file of this opset loads, with the
        highest fence the target's oldest release still reads, and runs where the target runs the rest
        (:data:`OFF_DEVICE`)."""
        if self.opset < _FORM_OPSET.get(form, FUSED_OPSET) or form.split(".")[0] in OFF_DEVICE.get(
                self.target.runtime, ()):
            return False
        return _fenced(form, self.opset, self.target.max_ir, self.target.runtime)

    def attention(self, dtype: ir.DataType | None, grouped: bool) -> bool:
        """Whether an ``Attention`` node of this element type, with grouped key/value heads or not, is right."""
        if not self.allows("Attention"):
            return False
        float16 = self.half or dtype == ir.DataType.FLOAT16
        return not (grouped and float16) or self.allows("Attention.float16_grouped")


def resolve(target: str | Target | None, opset: int | None, newest_here: int) -> tuple[Target, int]:
    """The target and the opset of an export: ``opset`` when given (checked against the target and this
    machine's onnxruntime, ``newest_here``), else the target's own."""
    if target is None and opset is not None and isinstance(opset, int) and not isinstance(opset, bool):
        # opset= alone: a file for every onnxruntime release that loads that opset.
        target = _oldest_loading("onnxruntime", opset)
    target = parse(DEFAULT_TARGET if target is None else target)
    if opset is None:
        if target.opset > newest_here:
            raise InvalidInputError(
                f"{target} files are opset {target.opset}, newer than the installed onnx and onnxruntime run "
                f"({newest_here}), and verification runs them here",
                fix=f"upgrade onnx and onnxruntime, or pass opset={newest_here} (its fused ops are then those "
                "right in every release that loads that opset)",
            )
        return target, target.opset
    if isinstance(opset, bool) or not isinstance(opset, int) or not MIN_OPSET <= opset <= newest_here:
        raise InvalidInputError(
            f"opset {opset!r} is outside what onnxport emits and onnxruntime runs here ({MIN_OPSET}..{newest_here})",
            fix=f"pass an opset between {MIN_OPSET} and {newest_here}, or leave it out for {target}'s {target.opset}",
        )
    if opset > target.max_opset:
        newer = _oldest_loading(target.runtime, opset)
        raise InvalidInputError(
            f"opset {opset} is newer than {target} loads (its oldest release reads up to opset {target.max_opset})",
            fix=f"pass opset={target.max_opset} or lower"
            + (f", or target={newer!r}, whose releases all load opset {opset}" if newer else ""),
        )
    return target, opset


def parse(spec: str | Target) -> Target:
    """``"onnxruntime>=1.18"`` -> Target; a bare runtime name means its oldest supported release."""
    if isinstance(spec, Target):
        return spec
    match = _SPEC.match(spec) if isinstance(spec, str) else None
    runtime = match.group(1) if match else None
    if runtime == "onnxruntime-node":  # the same core and releases as the Python wheels
        runtime = "onnxruntime"
    if match is None or runtime not in _OPSETS:
        raise InvalidInputError(
            f"target {spec!r} is not a runtime onnxport writes for",
            fix="name one as RUNTIME>=VERSION, RUNTIME one of " + ", ".join(sorted(_OPSETS))
            + f" (e.g. {DEFAULT_TARGET!r}, the default); docs/targets.md lists the tested ones",
        )
    oldest = _OPSETS[runtime][0][0]
    version = (int(match.group(2)), int(match.group(3) or 0)) if match.group(2) else oldest
    if version < oldest:
        raise InvalidInputError(
            f"target {spec!r} is older than onnxport writes for: {runtime} {oldest[0]}.{oldest[1]} is the oldest",
            fix=f"name {runtime}>={oldest[0]}.{oldest[1]} or newer",
        )
    return Target(runtime, version)


def _oldest_release(runtime: str, opset: int) -> tuple[int, int] | None:
    """The oldest release of ``runtime`` that loads ``opset`` (None if none in the table)."""
    return next((since for since, newest in _OPSETS[runtime] if newest >= opset), None)


def _oldest_loading(runtime: str, opset: int) -> str | None:
    """``_oldest_release`` as a target spec."""
    since = _oldest_release(runtime, opset)
    return None if since is None else f"{runtime}>={since[0]}.{since[1]}"


# Element types newer than the IR version their opset implies, and the IR version that added each.
_TYPE_IR = {
    ir.DataType.FLOAT8E4M3FN: 9, ir.DataType.FLOAT8E4M3FNUZ: 9, ir.DataType.FLOAT8E5M2: 9,
    ir.DataType.FLOAT8E5M2FNUZ: 9, ir.DataType.UINT4: 10, ir.DataType.INT4: 10, ir.DataType.FLOAT4E2M1: 11,
}


def _fenced(form: str, opset: int, ir_version: int, runtime: str) -> bool:
    """Whether, in the target's runtime and each measured one, no release older than the one that computes
    ``form`` right reads a file of this opset and IR version."""
    for name in {runtime, *_MEASURED}:
        oldest = _oldest_reading(name, opset, ir_version)
        since = FUSED_SINCE[form].get(name)
        if oldest is not None and (since is None or oldest < since):
            return False
    return True


def _oldest_reading(runtime: str, opset: int, ir_version: int) -> tuple[int, int] | None:
    """The oldest release of ``runtime`` that reads both ``opset`` and ``ir_version`` (None if none does)."""
    by_opset, by_ir = _oldest_release(runtime, opset), next(
        (since for since, newest in _IRS[runtime] if newest >= ir_version), None)
    return None if by_opset is None or by_ir is None else max(by_opset, by_ir)


def ir_version_for(model: ir.Model, runtime: str = "onnxruntime") -> int:
    """The lowest IR version that holds ``model``: the one its ai.onnx opset came with (custom domains
    carry no IR version), raised by element types added since (float8: 9, int4: 10, float4: 11), and raised
    further as a fence where the model holds a form that older releases reading that version compute wrong
    (``Forms.allows`` made sure the target's oldest release reads the result)."""
    opset = model.opset_imports.get("", model.opset_imports.get("ai.onnx", 1))
    version = onnx.helper.find_min_ir_version_for([onnx.helper.make_opsetid("", opset)], ignore_unknown=True)
    used: set[str] = set()
    for value in [*model.graph.inputs, *model.graph.initializers.values()]:
        version = max(version, _TYPE_IR.get(value.dtype, 0))
    for node in ir.traversal.RecursiveGraphIterator(model.graph):  # one walk: element types and forms
        for value in node.outputs:
            version = max(version, _TYPE_IR.get(value.dtype, 0))
        used |= _forms_of(node)
    for form in used:
        while not _fenced(form, opset, version, runtime) and version < onnx.IR_VERSION:
            version += 1
    return version


def forms_used(model: ir.Model) -> set[str]:
    """The forms of ``FUSED_SINCE`` that ``model`` holds."""
    return set().union(*(_forms_of(node) for node in ir.traversal.RecursiveGraphIterator(model.graph)))


def _forms_of(node: ir.Node) -> set[str]:
    if node.domain:
        return set()
    if node.op_type == "Attention":
        grouped16 = node.inputs[0].dtype == ir.DataType.FLOAT16 and _grouped(node)
        return {"Attention", "Attention.float16_grouped"} if grouped16 else {"Attention"}
    if node.op_type in ("RMSNormalization", "RotaryEmbedding"):
        return {node.op_type}
    if node.op_type == "LayerNormalization" and len(node.inputs) < 3:
        return {"LayerNormalization.no_bias"}
    return set()


def _grouped(attention: ir.Node) -> bool:
    q_heads, kv_heads = attention.attributes.get("q_num_heads"), attention.attributes.get("kv_num_heads")
    if q_heads is not None and kv_heads is not None:
        return kv_heads.as_int() != q_heads.as_int()
    q, k = attention.inputs[0].shape, attention.inputs[1].shape
    return q is None or k is None or len(q) != 4 or len(k) != 4 or q[1] != k[1]
