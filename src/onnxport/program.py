"""``OnnxProgram``: the exported ONNX model with its report; saves atomically and runs in onnxruntime."""

from __future__ import annotations

import copy
import functools
import os
import re
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
import torch
from onnx_ir.tensor_adapters import TorchTensor
from torch.utils import _pytree as pytree

from onnxport import metadata
from onnxport.arguments import as_path
from onnxport.capture.integrations import registered_types
from onnxport.errors import InvalidInputError, OnnxportError
from onnxport.optimize.conv_bn_fold import COMPUTED_WHEN_READ
from onnxport.quantize.options import QuantizeOptions
from onnxport.report import Report
from onnxport.saving import save_atomically
from onnxport.verify.session import initializer_bytes

_UNBACKED = re.compile(r"\bu\d+\b")  # a size torch.export knows only at run time (u0, 256*u0)

__all__ = ["OnnxProgram"]

_TWO_GB = 2**31
_OTHER = "weights other than those it was exported and verified with"


def _copy_fields(src: Any, dst: Any, *, skip: str) -> None:
    """Copy the set fields of a protobuf message but one, without touching the skipped field's data."""
    for field, value in src.ListFields():
        if field.name == skip:
            continue
        if hasattr(value, "extend"):  # a repeated field
            getattr(dst, field.name).extend(value)
        elif field.message_type is not None:
            getattr(dst, field.name).CopyFrom(value)
        else:
            setattr(dst, field.name, value)


def _elided(tensor: onnx.TensorProto) -> onnx.TensorProto:
    """The tensor itself when small, else its name, type and shape with the data left out."""
    if int(np.prod(tensor.dims, dtype=np.int64)) <= 16:
        return tensor
    stub = onnx.TensorProto(name=tensor.name, data_type=tensor.data_type, dims=tensor.dims)
    stub.data_location = onnx.TensorProto.EXTERNAL
    stub.external_data.add(key="elided", value=f"{int(np.prod(tensor.dims, dtype=np.int64))} elements")
    return stub


def _as_pairs(value: Any) -> Any:
    """A complex tensor as the real one the ONNX model holds (trailing dim of 2); anything else as it is."""
    if isinstance(value, torch.Tensor) and value.is_complex():
        return torch.view_as_real(value.resolve_conj())
    return value


def _from_pairs(value: torch.Tensor) -> torch.Tensor:
    """The complex tensor a real one with a trailing dim of 2 holds (a view where it can be)."""
    if value.numel() == 0:  # empty arrays come with zero strides, which view_as_complex refuses
        return torch.complex(value[..., 0], value[..., 1])
    return torch.view_as_complex(value.contiguous())


def _streamed(model: ir.Model) -> bool:
    """Whether some initializer is read from a file only when written (weights streamed by ``export(weights=)``)."""
    return any(isinstance(v.const_value, ir.LazyTensor) and not v.const_value.meta.get(COMPUTED_WHEN_READ)
               for v in model.graph.initializers.values())


def _version(tensor: torch.Tensor) -> int | None:
    """The tensor's version counter (bumped by every in-place write); None for a tensor without one (meta,
    inference-mode and some subclass tensors)."""
    if tensor.is_meta:
        return None
    try:
        return tensor._version
    except Exception:  # noqa: BLE001 - inference tensors raise RuntimeError, subclasses their own types
        return None


def _wrapped(tensor: Any) -> list[torch.Tensor]:
    """The torch tensors whose memory an initializer's tensor wraps, or reads when it is written (a weight
    given in a state dict to ``export(weights=...)``, read at ``save``)."""
    if isinstance(tensor, TorchTensor):
        return [tensor.raw]
    thunk = tensor.raw if isinstance(tensor, ir.LazyTensor) else None
    if isinstance(thunk, functools.partial):  # computed from tensors when read: a weight stored transposed...
        return [t for arg in thunk.args
                for t in ([arg] if isinstance(arg, torch.Tensor) else _wrapped(arg) if isinstance(arg, ir.TensorProtocol)
                          else [])]
    return []


def _storage(tensor: torch.Tensor) -> int:
    """Where the tensor's memory starts; 0 for none (empty, meta or storage-less tensors)."""
    try:
        return tensor.untyped_storage().data_ptr()
    except Exception:  # noqa: BLE001 - tensor subclasses without storage
        return 0


class OnnxProgram:
    """An exported model. ``prog(*args)`` runs it in onnxruntime; ``prog.save(path)`` writes it.

    A complex input or output is a real tensor in the ONNX model with a trailing dim of 2 (real, imaginary
    part), named in the metadata ``onnxport.complex_inputs``/``onnxport.complex_outputs``; ``prog(*args)``
    takes and returns complex tensors there, ``run_flat`` the ONNX model's real ones.
    """

    def __init__(
        self,
        model: ir.Model,
        *,
        report: Report,
        in_spec: pytree.TreeSpec,
        out_spec: pytree.TreeSpec,
        input_used: Sequence[bool],
        output_slots: Sequence[Any],
        aliases: Mapping[str, str] | None = None,
    ):
        self.model = model
        # {another name: the name the model's forward takes} for keyword inputs (transformers' cache argument)
        self._aliases = dict(aliases or {})
        self.report = report
        self._in_spec = in_spec
        self._out_spec = out_spec
        self._input_used = list(input_used)
        self._output_slots = list(output_slots)
        self._proto: onnx.ModelProto | None = None
        self._runner: Any = None
        # (name, tensor, its version counter when verified, whether an initializer wraps its memory)
        self._watched: list[tuple[str, weakref.ref, int, bool]] = []

    # -- the weights it was verified with -----------------------------------------------------------

    def _watch(self, model: Any, *, skip: Sequence[str] = ()) -> None:
        """Remember the version counter of each tensor the export was verified with: the model's parameters
        and buffers, and whatever tensor an initializer wraps (the same memory, or a tensor constant, or a
        weight given with ``weights=``). An in-place write bumps it (a training step, ``load_state_dict``,
        ``add_`` under ``torch.no_grad()``), and ``save`` and calls refuse from then on.

        ``skip`` names buffers forward itself updates at every call (BatchNorm's statistics in training
        mode), which the outputs do not depend on. Meta tensors (``weights=`` exports) hold nothing.
        """
        skipped: set[int] = set()
        found: list[tuple[str, torch.Tensor, bool]] = []
        if isinstance(model, torch.nn.Module):
            for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
                if name in skip:
                    skipped.add(_storage(tensor) or -1)
                else:
                    found.append((name, tensor, False))
        for graph in self.model.graphs():
            for value in graph.initializers.values():
                for tensor in _wrapped(value.const_value):
                    if _storage(tensor) not in skipped:
                        found.append((value.name or "?", tensor, True))
        self._watched = [(name, weakref.ref(t), v, shared)
                         for name, t, shared in found if (v := _version(t)) is not None]

    def _check_unchanged(self, doing: str, result: str) -> None:
        """Refuse to ``doing`` when a tensor the export was verified with changed in place since; ``result``
        says what would come of it if the program shares that tensor's memory."""
        changed: dict[str, bool] = {}
        for name, ref, version, shared in self._watched:
            tensor = ref()
            if tensor is not None and tensor._version != version:
                changed[name] = changed.get(name, False) or shared
        if not changed:
            return
        names = list(changed)
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        why = (f"the program's weights share the model's memory, so {result}" if any(changed.values())
               else "the program no longer matches the model it was verified against")
        raise OnnxportError(
            f"cannot {doing}: {shown} changed in place after export (a training step, load_state_dict, a write "
            f"under torch.no_grad(), ...); {why}",
            fix="export the model again after changing it and use that program; or save and run this one before "
            "changing the model",
        )

    # -- views -------------------------------------------------------------------------------------

    @property
    def model_proto(self) -> onnx.ModelProto:
        """The model as an ``onnx.ModelProto`` (built once, on first access; it copies the weights)."""
        if self._proto is None:
            self._check_unchanged("build the ModelProto", f"it would hold {_OTHER}")
            self._proto = ir.serde.serialize_model(self.model)
        return self._proto

    @property
    def input_names(self) -> list[str]:
        return [v.name for v in self.model.graph.inputs]

    @property
    def output_names(self) -> list[str]:
        return [v.name for v in self.model.graph.outputs]

    def text(self, *, weights: bool = False) -> str:
        """The model in ONNX's textual syntax (``onnx.printer.to_text``).

        Initializers of more than 16 elements show as ``["elided": ...]`` unless ``weights`` is True.
        """
        proto = self.model_proto
        if weights:
            return onnx.printer.to_text(proto)
        shown = onnx.ModelProto()
        _copy_fields(proto, shown, skip="graph")
        _copy_fields(proto.graph, shown.graph, skip="initializer")
        for init in proto.graph.initializer:
            shown.graph.initializer.append(_elided(init))
        return onnx.printer.to_text(shown)

    def __repr__(self) -> str:
        return f"OnnxProgram(inputs={self.input_names}, outputs={self.output_names}, nodes={len(self.model.graph)})"

    # -- running -------------------------------------------------------------------------------------

    def flatten_inputs(self, args: Any = (), kwargs: dict[str, Any] | None = None) -> list[torch.Tensor]:
        """The ONNX inputs for user-level ``args`` and ``kwargs`` (same structure as at export)."""
        if isinstance(args, torch.Tensor) or not isinstance(args, (tuple, list)):
            args = (args,)
        kwargs = dict(kwargs or {})
        order = self._in_spec.child(1).context if self._in_spec.num_children == 2 else None
        if order is not None and set(order) != set(kwargs):
            kwargs = {self._aliases[k] if self._aliases.get(k) in order else k: v for k, v in kwargs.items()}
        if order is not None and set(order) == set(kwargs):
            kwargs = {k: kwargs[k] for k in order}
        with registered_types():  # a KV cache among the inputs flattens as it did at export
            leaves, spec = pytree.tree_flatten((tuple(args), kwargs))
        if spec != self._in_spec:
            raise InvalidInputError(
                "the inputs do not have the structure the model was exported with",
                fix=f"pass inputs shaped like {self._in_spec}",
            )
        flat = [leaf for leaf, used in zip(leaves, self._input_used) if used]
        complex_ = set(self.complex_inputs)
        return [_as_pairs(t) if name in complex_ else t for t, name in zip(flat, self.input_names)]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the model in onnxruntime on torch tensors; returns the outputs in the model's structure."""
        self._check_unchanged("run the program", f"it would compute with {_OTHER}")
        flat = self.flatten_inputs(args, kwargs)
        self._check_inputs(flat)
        try:
            outputs = self._run(flat)
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own exception types
            lines = str(exc).strip().splitlines()
            raise OnnxportError(
                f"onnxruntime failed to run the model: {type(exc).__name__}: {lines[0] if lines else ''}",
                fix="check the inputs against prog.model.graph.inputs; if they fit, report the model to onnxport",
            ) from None
        return self.unflatten_outputs(outputs)

    def _check_inputs(self, flat: Sequence[Any]) -> None:
        """Each input's dtype and static sizes against the model's, named in the error."""
        for value, given in zip(self.model.graph.inputs, flat):
            if not isinstance(given, torch.Tensor):
                continue
            expected = value.dtype.numpy() if value.dtype is not None else None
            got = torch.empty((), dtype=given.dtype).numpy().dtype if given.dtype != torch.bfloat16 else None
            if expected is not None and got is not None and np.dtype(expected) != got:
                raise InvalidInputError(f"input {value.name} is {given.dtype}, the model takes {value.dtype.name.lower()}",
                                        fix=f"pass {value.name} as the dtype it was exported with")
            dims = list(value.shape) if value.shape is not None else None
            if dims is None:
                continue
            wrong = len(dims) != given.dim() or any(isinstance(d, int) and d != n for d, n in zip(dims, given.shape))
            if wrong:
                shown = ", ".join(str(d) for d in dims)
                raise InvalidInputError(
                    f"input {value.name} has shape {list(given.shape)}, the model takes [{shown}]",
                    fix="static sizes must match the example's; export with dynamic_shapes for the dims that vary",
                )

    def run_flat(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Run on the flat ONNX inputs; returns the flat ONNX outputs."""
        self._check_unchanged("run the program", f"it would compute with {_OTHER}")
        return self._run(inputs)

    def _run(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        if self._runner is None:
            from onnxport.verify import OrtRunner

            self._runner = OrtRunner(self.model)  # the weights are read in place, never serialised
        return self._runner.run([torch.as_tensor(t) for t in inputs])

    def unflatten_outputs(self, flat: Sequence[torch.Tensor]) -> Any:
        """The user-level output (complex tensors where the model returns them) from the flat ONNX outputs."""
        complex_ = {i for i, name in enumerate(self.output_names) if name in set(self.complex_outputs)}
        flat = [_from_pairs(t) if i in complex_ else t for i, t in enumerate(flat)]
        leaves = [flat[s] if isinstance(s, int) else s[1] for s in self._output_slots]
        with registered_types():
            return pytree.tree_unflatten(leaves, self._out_spec)

    def onnx_leaves(self, outputs: Any) -> list[Any]:
        """The leaves of a user-level output (eager PyTorch's, say) that the ONNX outputs hold, in their
        order: tensors and symbolic numbers (an ONNX 0-d output), not the numbers baked in as constants."""
        with registered_types():
            leaves = pytree.tree_leaves(outputs)
        if len(leaves) != len(self._output_slots):  # another structure: its tensors, in order
            return [_as_pairs(leaf) for leaf in leaves if isinstance(leaf, torch.Tensor)]
        chosen: list[Any] = [None] * len(self.model.graph.outputs)
        for leaf, slot in zip(leaves, self._output_slots):
            if isinstance(slot, int):
                chosen[slot] = leaf
        return [_as_pairs(leaf) for leaf in chosen]

    @property
    def complex_inputs(self) -> list[str]:
        """Names of the inputs that are complex tensors in PyTorch (``[..., 2]`` real ones in the model)."""
        return metadata.names(self.model, metadata.COMPLEX_INPUTS)

    @property
    def complex_outputs(self) -> list[str]:
        """Names of the outputs that are complex tensors in PyTorch (``[..., 2]`` real ones in the model)."""
        return metadata.names(self.model, metadata.COMPLEX_OUTPUTS)

    @property
    def random_outputs(self) -> list[str]:
        """Names of the outputs that depend on random ops: verification compares only their shape and dtype."""
        return metadata.names(self.model, metadata.RANDOM_OUTPUTS)

    @property
    def random_sizes(self) -> dict[str, list[int]]:
        """Per output that random ops feed, the axes whose size depends on data (a length drawn at random: a
        speech model's noisy durations), where eager PyTorch and the ONNX model may differ."""
        found = {}
        for value in self.model.graph.outputs:
            if value.name in self.random_outputs and value.shape is not None:
                axes = [i for i, d in enumerate(value.shape) if _UNBACKED.search(str(getattr(d, "value", d) or ""))]
                if axes:
                    found[value.name] = axes
        return found

    @property
    def float64_as_float32(self) -> list[str]:
        """Op types whose float64 nodes compute in float32, for want of an onnxruntime kernel: float64
        outputs are then as precise as float32 and verified with float32's tolerances."""
        return metadata.names(self.model, metadata.FLOAT64_AS_FLOAT32)

    # -- saving --------------------------------------------------------------------------------------

    def quantize(self, options: QuantizeOptions | None = None, /, **changes: Any) -> OnnxProgram:
        """A new program with quantized weights; this one is left as it is.

        ``options`` (``onnxport.QuantizeOptions``; the defaults when None) with ``changes``, any of its fields
        by name: ``prog.quantize(bits=8)``, ``prog.quantize(options)``, ``prog.quantize(options, skip=["head"])``.
        Weight-only by default (int4 blocks of 32, in the target's form); ``activations="dynamic"`` or
        ``"static"`` quantizes activations too. What was done is in the new program's
        ``report.quantization``."""
        from onnxport import quantize as _quantize

        chosen = QuantizeOptions.of(True if options is None else options)  # also "int8" or a dict of the fields
        if chosen is None:
            raise InvalidInputError(f"quantize's options must be a QuantizeOptions, not {options!r}",
                                    fix="pass options such as QuantizeOptions(bits=8), or the fields by name: "
                                    "prog.quantize(bits=8)")
        options = chosen.changed(**changes)
        self._check_unchanged("quantize the program", f"its weights would be {_OTHER}")
        target = metadata.text(self.model, metadata.TARGET)
        feeds = self._feeds(options.calibration) if options.calibration is not None else None
        model = self.model.clone()
        if options.activations == "dynamic":
            result = _quantize.quantize_dynamic_model(model, skip=options.skip, per_channel=options.per_channel,
                                                      reduce_range=options.reduce_range)
        elif options.activations == "static":
            result = _quantize.quantize_static_model(model, feeds, skip=options.skip, per_channel=options.per_channel,
                                                     reduce_range=options.reduce_range)
        else:
            result = _quantize.quantize_model(model, options.changed(calibration=feeds), target=target)
        report = copy.copy(self.report)
        report.quantization = result
        program = OnnxProgram(model, report=report, in_spec=self._in_spec, out_spec=self._out_spec,
                              input_used=self._input_used, output_slots=self._output_slots, aliases=self._aliases)
        program._watched = list(self._watched)
        return program

    def _feeds(self, inputs: Sequence[Any]) -> list[dict[str, np.ndarray]]:
        """Calibration inputs (each a tuple of arguments or a dict of keyword arguments) as onnxruntime feeds."""
        feeds = []
        for item in inputs:
            args, kwargs = ((), item) if isinstance(item, dict) else (item if isinstance(item, tuple) else (item,), {})
            flat = self.flatten_inputs(args, kwargs)
            feeds.append({name: t.detach().cpu().numpy() for name, t in zip(self.input_names, flat)})
        return feeds

    def save(self, path: str | os.PathLike[str], *, external_data: bool | None = None) -> None:
        """Write the model to ``path`` atomically.

        Weights go to a data file beside it, ``<path>.<digest>.data`` (named after its content), when
        ``external_data`` is True, or when it is None and they exceed 2 GB (the protobuf limit) or were
        streamed from files (``export(weights=...)``: each is then copied file to file, never held in
        memory). The model and its data change together: a failure or a kill leaves the previous pair as it
        was, and the next save removes what it left (see ``onnxport.saving``).
        """
        path = as_path(path, "the path to save to", "pass a file name such as 'model.onnx'")
        self._check_unchanged(f"save to {path}", f"the file would hold {_OTHER}")
        directory = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(directory):
            raise InvalidInputError(f"cannot save to {path}: the folder {directory} does not exist", fix="create it first")
        if not os.access(directory, os.W_OK):
            raise InvalidInputError(f"cannot save to {path}: the folder {directory} is not writable", fix="choose another path")
        if os.path.isdir(path):
            raise InvalidInputError(f"cannot save to {path}: it is a folder", fix="give a file name such as model.onnx")
        if external_data is None:
            external_data = initializer_bytes(self.model) >= _TWO_GB or _streamed(self.model)

        def write_plain(staged: str) -> None:
            with open(staged, "wb") as f:
                f.write(self.model_proto.SerializeToString())

        try:
            save_atomically(path, write_plain, self.model if external_data else None)
        except OSError as exc:
            raise InvalidInputError(f"cannot save to {path}: {exc}", fix="check the path and free disk space") from exc
