"""An onnxruntime session that takes and returns torch tensors (bfloat16 included).

The session gets only the graph's structure as protobuf bytes, never the weights: no serialisation of
them and no protobuf size limit. The large initializers reach onnxruntime as values over the weights'
own memory, in one of two ways. As initializers (``SessionOptions.add_external_initializers``),
which onnxruntime copies into memory of its own while it builds the session (on ViT-B/16, 348 MB and
0.2 to 0.9 s), and which its graph optimisations, constant folding and weight prepacking need. Or,
with ``weights_as_inputs=True``, as graph inputs fed with every run: nothing is copied (the session
builds in about 0.01 s), for a session that runs without graph optimisations (verification's).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence

import numpy as np
import onnx
import onnx_ir as ir
import torch

__all__ = ["OPTIMIZATION_LEVELS", "OrtRunner", "initializer_bytes"]

_PROTOBUF_LIMIT = 2**31 - 1
_IN_MEMORY_MIN_BYTES = 1024  # smaller initializers stay in the protobuf
_IN_MEMORY_LOCATION = "onnxport-in-memory"  # never read: onnxruntime takes the values given by name
# numpy dtypes onnxruntime builds values from directly (bfloat16, float8, int4 ... stay in the protobuf)
_NUMPY_NATIVE = {
    ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16, ir.DataType.INT8, ir.DataType.INT16,
    ir.DataType.INT32, ir.DataType.INT64, ir.DataType.UINT8, ir.DataType.UINT16, ir.DataType.UINT32,
    ir.DataType.UINT64, ir.DataType.BOOL,
}
OPTIMIZATION_LEVELS = ("none", "basic", "extended", "all")


class OrtRunner:
    """Owns one ``onnxruntime.InferenceSession`` for an ``ir.Model``.

    ``optimization`` is onnxruntime's graph optimisation level: ``"all"`` (its default, for running the
    model) down to ``"none"``. ``prepack=False`` leaves the weights of MatMul and Conv as they are instead
    of repacking them at load (which pays off over many runs, not a few). ``spinning=False`` lets
    onnxruntime's worker threads sleep as soon as a run ends instead of spinning for the next one, which
    pays off in a loop of runs and slows whatever runs in between (eager PyTorch, in verification: on
    R3D-18 its forward after an onnxruntime run took 0.26 s instead of 0.20 s). ``constructed`` counts
    the sessions built in this process (tests use it).
    """

    constructed = 0

    def __init__(
        self,
        model: ir.Model,
        *,
        threads: int | None = None,
        model_bytes: bytes | None = None,
        optimization: str = "all",
        prepack: bool = True,
        spinning: bool = True,
        weights_as_inputs: bool = False,
    ):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 3
        options.graph_optimization_level = _level(ort, optimization)
        if not prepack:
            options.add_session_config_entry("session.disable_prepacking", "1")
        if not spinning:
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        if threads is not None:
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
        providers = ["CPUExecutionProvider"]
        self._weights: list[np.ndarray] = []  # the memory the session reads the in-memory initializers from
        self._weight_feeds: dict[str, object] = {}  # weights fed as inputs with every run
        if model_bytes is None:
            structure, names, self._weights = _structure_and_weights(model, as_inputs=weights_as_inputs)
            if structure.ByteSize() < _PROTOBUF_LIMIT:
                values = [ort.OrtValue.ortvalue_from_numpy(w) for w in self._weights]
                if weights_as_inputs:
                    self._weight_feeds = dict(zip(names, values))
                elif names:
                    options.add_external_initializers(names, values)
                model_bytes = structure.SerializeToString()
        if model_bytes is not None:
            self.session = ort.InferenceSession(model_bytes, options, providers=providers)
        else:
            self._weights = []
            with tempfile.TemporaryDirectory(prefix="onnxport-") as tmp:
                path = os.path.join(tmp, "model.onnx")
                ir.save(ir.Model(model.graph, ir_version=model.ir_version), path, external_data="model.onnx.data")
                self.session = ort.InferenceSession(path, options, providers=providers)
        OrtRunner.constructed += 1
        self.input_names = [i.name for i in self.session.get_inputs() if i.name not in self._weight_feeds]
        self.output_names = [o.name for o in self.session.get_outputs()]
        # numpy has no bfloat16: such outputs come back as OrtValues, read through DLPack.
        self._bfloat16_outputs = any(o.type == "tensor(bfloat16)" for o in self.session.get_outputs())

    def run(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Run on torch tensors (one per ONNX input, in order); return torch tensors."""
        import onnxruntime as ort

        if len(inputs) != len(self.input_names):
            raise ValueError(f"the ONNX model takes {len(self.input_names)} inputs, got {len(inputs)}")
        if not self._bfloat16_outputs and not any(t.dtype == torch.bfloat16 for t in inputs):
            feeds = {name: _to_numpy(t) for name, t in zip(self.input_names, inputs)}
            outputs = self.session.run(None, {**feeds, **self._weight_feeds})
            return [torch.from_numpy(np.asarray(o)) if isinstance(o, np.ndarray) else torch.tensor(o) for o in outputs]
        feeds_ov = {name: _to_ortvalue(ort, t) for name, t in zip(self.input_names, inputs)}
        return [_from_ortvalue(o) for o in self.session.run_with_ort_values(None, {**feeds_ov, **self._weight_feeds})]


def _level(ort: object, optimization: str) -> object:
    levels = ort.GraphOptimizationLevel
    by_name = {"none": levels.ORT_DISABLE_ALL, "basic": levels.ORT_ENABLE_BASIC,
               "extended": levels.ORT_ENABLE_EXTENDED, "all": levels.ORT_ENABLE_ALL}
    if optimization not in by_name:
        raise ValueError(f"optimization must be one of {', '.join(OPTIMIZATION_LEVELS)}, not {optimization!r}")
    return by_name[optimization]


def _structure_and_weights(model: ir.Model, *, as_inputs: bool = False
                           ) -> tuple[onnx.ModelProto, list[str], list[np.ndarray]]:
    """The model as protobuf with its large main-graph initializers left as named external stubs (or,
    ``as_inputs``, as graph inputs), and those initializers' names and arrays (views of the tensors'
    memory where the tensors allow). A linear weight stored transposed (``LinearWeightLayoutPass``) goes
    in as the parameter it is computed from, under ``<name>.untransposed``, and a ``Transpose`` node
    computes the weight: onnxruntime folds it into memory of its own when it builds the session (levels
    basic and up), and this process holds no transposed copy while the session lives."""
    graph = model.graph
    initializers, names, weights, inputs = [], [], [], list(graph.inputs)
    transposes: list[ir.Node] = []
    for value in graph.initializers.values():
        tensor = value.const_value
        if (tensor is None or tensor.dtype not in _NUMPY_NATIVE or tensor.nbytes < _IN_MEMORY_MIN_BYTES
                or value in graph.inputs):
            initializers.append(value)
            continue
        name, shape, array = value.name, value.shape, None
        source = _transposed_source(tensor)
        if source is not None:  # a linear weight stored transposed: given as it is in memory, transposed in-graph
            name, shape, array = f"{value.name}.untransposed", source.shape, source.numpy()
            transposes.append(ir.Node("", "Transpose", [ir.Value(name=name, type=value.type, shape=shape)],
                                      attributes=[ir.AttrInt64s("perm", [1, 0])],
                                      outputs=[ir.Value(name=value.name, type=value.type, shape=value.shape)]))
        if as_inputs:
            inputs.append(ir.Value(name=name, type=value.type, shape=shape))
        else:
            stub = ir.ExternalTensor(_IN_MEMORY_LOCATION, 0, tensor.nbytes, tensor.dtype, shape=shape, name=name)
            initializers.append(ir.Value(name=name, type=value.type, shape=shape, const_value=stub))
        names.append(name)
        weights.append(np.ascontiguousarray(tensor.numpy() if array is None else array))
    view = ir.GraphView(inputs, graph.outputs, nodes=[*transposes, *graph], initializers=initializers,
                        doc_string=graph.doc_string, opset_imports=graph.opset_imports, name=graph.name,
                        metadata_props=graph.metadata_props)
    shell = ir.Model(ir.Graph([], [], nodes=[], opset_imports=graph.opset_imports), ir_version=model.ir_version,
                     producer_name=model.producer_name, producer_version=model.producer_version,
                     functions=list(model.functions.values()), metadata_props=model.metadata_props)
    proto = ir.serde.serialize_model(shell)
    proto.graph.Clear()
    ir.serde.serialize_graph_into(proto.graph, view)
    return proto, names, weights


def _transposed_source(tensor: ir.TensorProtocol) -> ir.TensorProtocol | None:
    """The in-memory weight a linear layer's transposed one is computed from (``LinearWeightLayoutPass``),
    when it is one: fed as it is, it costs no copy."""
    from onnxport.optimize.conv_bn_fold import COMPUTED_WHEN_READ
    from onnxport.optimize.linear_layout import source_of

    if not isinstance(tensor, ir.LazyTensor) or not tensor.meta.get(COMPUTED_WHEN_READ):
        return None
    source = source_of(tensor)
    return source if source is not None and source.dtype in _NUMPY_NATIVE else None


def initializer_bytes(model: ir.Model) -> int:
    """Bytes held by the model's initializers (what decides between one file and external data)."""
    return sum(v.const_value.nbytes for v in model.graph.initializers.values() if v.const_value is not None)


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    if not isinstance(t, torch.Tensor):
        return np.asarray(t)
    return t.detach().cpu().contiguous().numpy()


def _to_ortvalue(ort: object, t: torch.Tensor) -> object:
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(t.view(torch.uint16).numpy(), int(ir.DataType.BFLOAT16))
    return ort.OrtValue.ortvalue_from_numpy(t.numpy())


def _from_ortvalue(value: object) -> torch.Tensor:
    if value.data_type() == "tensor(bfloat16)":
        return torch.from_dlpack(value)
    return torch.from_numpy(value.numpy())
