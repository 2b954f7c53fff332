"""``onnxport.export``: one call per stage of the pipeline."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import torch

from onnxport import blocks as _blocks
from onnxport import capture as _capture
from onnxport import decompose as _decompose
from onnxport import half as _half
from onnxport import metadata
from onnxport import optimize as _optimize
from onnxport import quantize as _quantize_mod
from onnxport import targets as _targets
from onnxport import translate as _translate
from onnxport import verify as _verify
from onnxport import weights as _weights
from onnxport.arguments import check_arguments, check_example
from onnxport.capture.strategies import refuse_state_updates
from onnxport.errors import InvalidInputError
from onnxport.program import OnnxProgram
from onnxport.quantize.options import QuantizeOptions
from onnxport.report import Report
from onnxport.serial import serialized
from onnxport.translate.opset import default_opset, newest_opset
from onnxport.translate.registry import normalise_custom_translations

__all__ = ["export", "export_each", "unsupported_ops"]


@serialized
def export(
    model: torch.nn.Module | Any,
    args: Any = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    dynamic_shapes: Any = None,
    dynamic_axes: Mapping[str, Any] | None = None,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    opset: int | None = None,
    target: str | _targets.Target | None = None,
    custom_translations: Mapping[Any, Any] | None = None,
    custom_opsets: Mapping[str, int] | None = None,
    rewrite_control_flow: bool = True,
    reuse_blocks: bool = True,
    optimize: bool = True,
    verify: bool = True,
    verify_mode: str = "raise",
    verify_inputs: Sequence[Any] = (),
    verify_budget: float | None = _verify.DEFAULT_BUDGET,
    progress: bool = False,
    weights: Any = None,
    dtype: torch.dtype | None = None,
    quantize: bool | str | QuantizeOptions | Mapping[str, Any] | None = None,
) -> OnnxProgram:
    """Export ``model`` called on ``args``/``kwargs`` to ONNX.

    Args follow ``torch.onnx.export``: ``args`` is a tuple (a single tensor is accepted), inputs and
    outputs may be nested tuples, lists and dicts of tensors, flattened in order and named by
    ``input_names``/``output_names``. Dynamic sizes: ``dynamic_shapes`` in any torch.export form,
    ``"auto"`` (every dim may vary), or ``onnxport.infer_dynamic_shapes([...])``; or torch.onnx's
    ``dynamic_axes``. Symbolic dims keep the user's names in the ONNX model.
    ``target`` names the runtime the file is for and its oldest release (``"onnxruntime>=1.18"``, the
    default; ``"onnxruntime>=1.26"``, ``"onnxruntime-web>=1.22"``, ...; see ``onnxport.targets``): it picks
    the opset and which fused ops (``Attention``, ``RMSNormalization``, ...) the file holds, only those that
    every release of the target computes right. ``opset`` overrides the target's opset (up to the newest its
    oldest release loads); given alone, it means every onnxruntime release that loads that opset.
    ``custom_translations`` maps an op (``OpOverload`` or ``"ns::op"``) to a translator;
    ``custom_opsets`` gives the versions of the custom domains its nodes use (default 1).
    ``reuse_blocks`` captures and translates each kind of repeated layer (the blocks of a transformer or a
    ResNet stage) once instead of once per layer; the ONNX model is the same (``onnxport.blocks``).
    ``verify`` runs the model in onnxruntime against eager PyTorch on the example inputs; a mismatch
    raises ``VerificationError``, or only warns with ``verify_mode="warn"``; ``verify_inputs`` adds
    input sets to check (each an args tuple, or ``(args, kwargs)``). Verification also checks inputs it
    makes up: ones taking the other branch of each rewritten ``if``, and, per group of dynamic dims, the
    example resized to another size; those may take up to ``verify_budget`` times the export so far
    (default 2; None for no limit), and the report lists any left out. The example and ``verify_inputs``
    are always checked. ``progress`` prints one line per stage to stderr.

    transformers' KV caches (``DynamicCache``) are accepted as inputs and outputs: each layer becomes
    ``past_key_values.{i}.key``/``.value`` in and ``present.{i}.key``/``.value`` out.

    ``weights`` exports a model whose weights are not loaded (built on the meta device, e.g. under
    ``with torch.device("meta"):``): a safetensors file, a list of them, a directory of them (a sharded
    checkpoint's index is followed), or a state dict ``{name: tensor}``, named as ``model.state_dict()``
    names them. They give every parameter and buffer they name; the model's other tensors must hold real
    values. The files are memory-mapped and never read during the export; the ONNX weights keep their
    dtype (converted only where the model's differs) and are copied into the external data when the
    program is saved (``prog.save`` writes external data for such a model), so memory stays far below the
    weights' size. The model cannot run in eager PyTorch, so ``verify`` is skipped; the report says so.

    ``dtype=torch.float16`` exports a float32 model as a float16 one: float16 weights, float16 floating
    inputs and outputs (call it with ``x.half()``), float16 arithmetic, and float32 islands where float16
    is not safe (softmax, normalisations, summing reductions, rotary angles; see ``onnxport.half``). It is
    verified against the model in eager float32 on the float32 examples, within float16's tolerance. A
    model that is already float16 (``model.half()``) gets the same islands with or without ``dtype``.

    ``quantize=True`` or ``"int4"`` (int4 weights, blocks of 32, symmetric), ``"int8"``, a
    ``QuantizeOptions`` or a dict of its fields quantizes the linear layers' weights after the float export is
    verified, and measures the quantized model against eager PyTorch on the example: per output, cosine
    similarity, largest absolute difference and top-1 agreement, in ``report.quantization``.
    """
    return _export_variants(
        model, args, kwargs, [{"target": target, "opset": opset}], dynamic_shapes=dynamic_shapes,
        dynamic_axes=dynamic_axes, input_names=input_names, output_names=output_names,
        custom_translations=custom_translations, custom_opsets=custom_opsets,
        rewrite_control_flow=rewrite_control_flow, reuse_blocks=reuse_blocks, optimize=optimize, verify=verify,
        verify_mode=verify_mode, verify_inputs=verify_inputs, verify_budget=verify_budget, progress=progress,
        weights=weights, dtype=dtype, quantize=quantize,
    )[0]


@serialized
def export_each(
    model: torch.nn.Module | Any, args: Any = (), kwargs: Mapping[str, Any] | None = None, *,
    variants: Sequence[Mapping[str, Any]], **options: Any,
) -> list[OnnxProgram]:
    """One program per variant from one capture: ``export(model, args, kwargs, **variant, **options)`` for
    each variant (a dict of ``target=`` and/or ``opset=``), capturing the model once. The capture is most
    of an export's cost, so a file per target runtime (``[{"target": "onnxruntime>=1.18"}, {"target":
    "tensorrt>=10"}]``) costs little more than one. ``options`` are ``export``'s other keyword arguments."""
    parameters = inspect.signature(export).parameters
    known = set(parameters) - {"model", "args", "kwargs", "target", "opset"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise InvalidInputError(f"export_each got unknown options {', '.join(unknown)}",
                                fix=f"pass export's keyword arguments ({', '.join(sorted(known))}); target= "
                                "and opset= go in each variant")
    if (isinstance(variants, (str, Mapping)) or not isinstance(variants, Sequence) or not variants
            or not all(isinstance(v, Mapping) and set(v) <= {"target", "opset"} for v in variants)):
        raise InvalidInputError(f"variants must be a non-empty list of dicts of target= and opset=, not {variants!r}",
                                fix='pass variants=[{"target": "onnxruntime>=1.18"}, {"opset": 23}]')
    defaults = {name: p.default for name, p in parameters.items() if name in known}
    return _export_variants(model, args, kwargs, [dict(v) for v in variants], **{**defaults, **options})


def _export_variants(model: Any, args: Any, kwargs: Any, variants: list[dict[str, Any]], *, weights: Any,
                     **options: Any) -> list[OnnxProgram]:
    """``export`` (one variant) and ``export_each``: the weights bound, then ``_export``."""
    source = _weights.Weights.open(weights) if weights is not None else None
    # The caches are pytree nodes for the whole export (capture and verification flatten them), not after.
    with _capture.integration_types(), _weights.bind(model, source) as bound:
        return _export(model, args, kwargs, variants, bound, **options)


class Variant(NamedTuple):
    """One program of an export: its target, opset and the fused forms they allow."""

    target: _targets.Target
    opset: int
    forms: _targets.Forms


@dataclasses.dataclass(frozen=True)
class ExportOptions:
    """``export``'s options once checked, built once per export and read by every stage: the dynamic shapes
    resolved (``dynamic_axes`` kept for naming the outputs' dims), the custom translations normalised, the
    dtype and quantization options checked, and the weights bound from files (``bound``), if any."""

    dynamic_shapes: Any
    dynamic_axes: Any
    input_names: Any
    output_names: Any
    custom: dict[Any, Any]
    custom_opsets: Any
    rewrite_control_flow: bool
    reuse_blocks: bool
    optimize: bool
    verify: bool
    verify_mode: str
    verify_inputs: Sequence[Any]
    verify_budget: float | None
    progress: bool
    dtype: torch.dtype | None
    quantize: QuantizeOptions | None
    bound: _weights.Binding | None


def _export(model: Any, args: Any, kwargs: Any, variants: list[dict[str, Any]], bound: _weights.Binding | None, *,
            dynamic_shapes: Any, dynamic_axes: Any, input_names: Any, output_names: Any, custom_translations: Any,
            custom_opsets: Any, rewrite_control_flow: bool, reuse_blocks: bool, optimize: bool, verify: bool,
            verify_mode: str, verify_inputs: Sequence[Any], verify_budget: float | None, progress: bool,
            dtype: torch.dtype | None, quantize: Any) -> list[OnnxProgram]:
    """Check every option (before any work), build the ``ExportOptions``, then run the stages."""
    dtype, quantize = _half.check_dtype(dtype), QuantizeOptions.of(quantize)
    check_arguments(input_names=input_names, output_names=output_names, custom_translations=custom_translations,
                    custom_opsets=custom_opsets, verify_inputs=verify_inputs, dynamic_axes=dynamic_axes,
                    flags={"rewrite_control_flow": rewrite_control_flow, "reuse_blocks": reuse_blocks,
                           "optimize": optimize, "verify": verify, "progress": progress})
    model, args, kwargs = _capture.check_inputs(model, args, kwargs)
    resolved = []
    for variant in variants:
        target, opset = _targets.resolve(variant.get("target"), variant.get("opset"), newest_opset())
        resolved.append(Variant(target, opset, _targets.Forms(target, opset, half=dtype is not None)))
    if verify_mode not in ("raise", "warn"):
        raise InvalidInputError(f"verify_mode must be 'raise' or 'warn', not {verify_mode!r}",
                                fix="pass verify_mode='warn' to export despite a mismatch, or leave it out")
    verify_budget = _verify.check_budget(verify_budget)
    custom = normalise_custom_translations(custom_translations)
    dynamic_shapes = _capture.resolve_dynamic_shapes(
        model, args, kwargs, dynamic_shapes, dynamic_axes, input_names, output_names
    )
    check_example(model, args, kwargs, dynamic_shapes=dynamic_shapes, input_names=input_names,
                  verify_inputs=verify_inputs)
    options = ExportOptions(
        dynamic_shapes=dynamic_shapes, dynamic_axes=dynamic_axes, input_names=input_names, output_names=output_names,
        custom=custom, custom_opsets=custom_opsets, rewrite_control_flow=rewrite_control_flow,
        reuse_blocks=reuse_blocks, optimize=optimize, verify=verify, verify_mode=verify_mode,
        verify_inputs=verify_inputs, verify_budget=verify_budget, progress=progress, dtype=dtype, quantize=quantize,
        bound=bound)
    report = Report(progress=progress)
    # verification's eager runs of the example (and its size-1 guesses), beside the capture (see verify/ahead.py)
    ahead = _verify.EagerAhead.start(model, args, kwargs, dynamic_shapes) if verify and bound is None else None
    try:
        return _stages(model, args, kwargs, options, resolved, report, ahead)
    finally:
        if ahead is not None:
            ahead.close()


def _stages(model: Any, args: Any, kwargs: Any, options: ExportOptions, variants: list[Variant], report: Report,
            ahead: _verify.EagerAhead | None) -> list[OnnxProgram]:
    """Capture once; then decompose, translate, optimize and verify for each variant (target, opset, forms)."""
    first = variants[0]
    blocks = (_blocks.BlockReuse(model, _block_translator(first.opset, first.forms, options))
              if options.reuse_blocks else None)
    try:
        with report.stage("capture") as stage:
            captured = _capture.capture(
                model, args, kwargs, dynamic_shapes=options.dynamic_shapes, input_names=options.input_names,
                rewrite_control_flow=options.rewrite_control_flow, report=report, blocks=blocks,
            )
            stage.detail = report.attempts[-1].strategy
            if blocks is not None:
                report.blocks = blocks.summary()
        reports = [report, *(report.branch() for _ in variants[1:])]
        translated = []
        for i, (variant, record) in enumerate(zip(variants, reports)):
            if i and blocks is not None:
                blocks.retranslate(_block_translator(variant.opset, variant.forms, options))
            translated.append(_translated(model, args, kwargs, captured, variant, options, blocks, record))
    finally:
        if blocks is not None:
            blocks.close()
    return [
        _finished(model, args, kwargs, captured, ep, onnx_model, updated, variant, options, record,
                  ahead if i == 0 else None)
        for i, (variant, record, (ep, onnx_model, updated)) in enumerate(zip(variants, reports, translated))
    ]


def _translated(model: Any, args: Any, kwargs: Any, captured: Any, variant: Variant, options: ExportOptions,
                blocks: _blocks.BlockReuse | None, report: Report) -> tuple[torch.export.ExportedProgram, Any, Any]:
    """The captured program decomposed and translated for one variant: (the decomposed program, the
    translation, the state it updates)."""
    custom = {**options.custom, **blocks.translators()} if blocks is not None else options.custom
    with report.stage("decompose") as stage:
        ep = _decompose.decompose(captured.program, custom=custom, opset=variant.opset, report=report)
        stage.detail = f"{sum(report.decomposed.values())} nodes decomposed"
    # Functionalized now, the program's signature lists the buffers and parameters forward updates.
    updated = refuse_state_updates(model, ep, captured.program)
    bound = options.bound
    with report.stage("translate") as stage:
        translated = _translate.translate(
            ep, opset=variant.opset, input_names=options.input_names, output_names=options.output_names,
            custom=custom, custom_opsets=options.custom_opsets, dim_names=captured.dim_names,
            weights=bound.initializers(ep) if bound is not None else None, forms=variant.forms,
        )
        if blocks is not None:
            blocks.inline(translated.model)
        if options.dynamic_axes is not None:
            _translate.name_output_dims(translated.model, _capture.output_dynamic_axes(
                model, args, kwargs, options.dynamic_axes, options.input_names))
        stage.detail = f"{len(translated.model.graph)} nodes, opset {variant.opset} for {variant.target}"
    return ep, translated, updated


def _finished(model: Any, args: Any, kwargs: Any, captured: Any, ep: torch.export.ExportedProgram, translated: Any,
              updated: Any, variant: Variant, options: ExportOptions, report: Report,
              ahead: _verify.EagerAhead | None) -> OnnxProgram:
    """One translation optimized, made half precision where asked, verified and quantized: the program."""
    if options.optimize:
        with report.stage("optimize") as stage:
            _optimize.optimize(translated.model, variant.forms)
            stage.detail = f"{len(translated.model.graph)} nodes"
    narrowed = options.dtype is not None and not _half.is_half(translated.model)
    if narrowed or _half.is_half(translated.model):
        with report.stage("half") as stage:
            stage.detail = str(_half.to_half(translated.model, variant.opset, from_float32=narrowed,
                                             weights=ep.graph_signature.parameters))
    translated.model.ir_version = _targets.ir_version_for(translated.model, variant.target.runtime)
    translated.model.metadata_props[metadata.TARGET] = str(variant.target)
    program = OnnxProgram(
        translated.model,
        report=report,
        in_spec=ep.call_spec.in_spec,
        out_spec=ep.call_spec.out_spec,
        input_used=translated.input_used,
        output_slots=translated.output_slots,
        aliases=_capture.argument_aliases(model),
    )
    if options.bound is not None:
        report.unverified = ("the weights were streamed from files, never loaded: load the model and export it "
                             "without weights= to verify")
    elif not options.verify:
        report.unverified = "verify=False"
    else:
        with report.stage("verify") as stage:
            given = [(args, kwargs)] + [_input_set(model, extra) for extra in options.verify_inputs]
            result = _verify.verify_export(
                _half.HalfView(program) if narrowed else program, model, given, captured, options.input_names,
                raise_on_mismatch=options.verify_mode == "raise", budget=options.verify_budget, ahead=ahead,
            )
            stage.detail = result.status
    # From here on, a change to the weights the program was verified with refuses prog.save and prog(...).
    program._watch(model, skip=updated)
    if options.quantize is not None:
        with report.stage("quantize") as stage:
            program = program.quantize(options.quantize)
            reference = getattr(report.verification, "reference", None)
            if reference is not None:  # the quantized model against eager PyTorch on the example
                flat = program.flatten_inputs(args, kwargs)
                result = program.report.quantization
                result.checks = _quantize_mod.measure(program.output_names, program.onnx_leaves(reference),
                                                      program.run_flat(flat), _quantize_mod.tolerance_for(result))
                for check in result.checks:
                    if not check.ok:  # the quantization's error, not the export's: a warning, not a failure
                        program.report.warn(
                            f"quantized output {check.name}: cosine similarity to eager PyTorch {check.cosine:.4f}, "
                            f"below the {check.tolerance} stated for this quantization; try method='gptq' with "
                            "calibration inputs, lm_head=8, a smaller block_size, or bits=8")
            stage.detail = f"{len(program.report.quantization.quantized)} linear layers"
    return program


def _block_translator(opset: int, forms: _targets.Forms, options: ExportOptions) -> Any:
    """How one kind of repeated block becomes ONNX: the export's own decomposition and translation."""

    def translate_block(ep: torch.export.ExportedProgram, dim_names: dict[str, str]) -> Any:
        ep = _decompose.decompose(ep, custom=options.custom, opset=opset, report=Report())
        return _translate.translate(ep, opset=opset, custom=options.custom, custom_opsets=options.custom_opsets,
                                    dim_names=dim_names, forms=forms).model

    return translate_block


@serialized
def unsupported_ops(
    model: torch.nn.Module | Any,
    args: Any = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    dynamic_shapes: Any = None,
    custom_translations: Mapping[Any, Any] | None = None,
) -> dict[str, list[Any]]:
    """Every op of ``model`` without a translation (after selective decomposition), found in one pass.

    Returns ``{op name: [user source location of each occurrence]}``; empty when all translate.
    """
    model, args, kwargs = _capture.check_inputs(model, args, kwargs)
    custom = normalise_custom_translations(custom_translations)
    report = Report()
    ep = _capture.capture(model, args, kwargs, dynamic_shapes=dynamic_shapes, report=report).program
    try:
        _decompose.decompose(ep, custom=custom, opset=default_opset(), report=report)
    except _decompose.UnsupportedOpError as exc:
        return exc.ops
    return {}


def _input_set(model: torch.nn.Module, extra: Any) -> tuple[tuple, dict[str, Any]]:
    if isinstance(extra, tuple) and len(extra) == 2 and isinstance(extra[0], tuple) and isinstance(extra[1], dict):
        _, args, kwargs = _capture.check_inputs(model, extra[0], extra[1])
    else:
        _, args, kwargs = _capture.check_inputs(model, extra, None)
    return args, kwargs
