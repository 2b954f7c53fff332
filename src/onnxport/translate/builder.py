"""The translation context handed to every translator: ``ctx.op.Add(a, b)`` appends an ONNX node.

A ``Ctx`` owns one ONNX graph under construction (the main graph or a subgraph of ``If``/``Loop``/
``Scan``). Translators read the FX node being translated (``ctx.node``) for output dtypes and shapes,
make constants with ``ctx.const``, and build int64 size vectors that may mix Python ints with values
computed in the graph (symbolic sizes) with ``ctx.sizes``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx_ir as ir
import torch
from onnx_ir import convenience as _conv
from onnx_ir.tensor_adapters import from_torch_dtype

from onnxport.errors import TranslationError, location_from_stack_trace
from onnxport.targets import DEFAULT_TARGET, Forms, parse
from onnxport.translate.registry import target_name

__all__ = ["COMPLEX_PARTS", "Ctx", "OpBuilder", "graph_dtype", "onnx_dtype", "set_type"]

_BOOL_OUT = frozenset(
    "Equal Greater GreaterOrEqual Less LessOrEqual Not And Or Xor IsNaN IsInf".split()
)
_INT64_OUT = frozenset("Shape Size ArgMax ArgMin NonZero".split())
_SAME_SHAPE = frozenset(
    "Cast CastLike Identity Neg Abs Relu Sigmoid Tanh Exp Log Sqrt Reciprocal Not Floor Ceil Round Erf Sin Cos "
    "Softmax LogSoftmax IsNaN IsInf Sign".split()
)
# Element type of the outputs past the first of multi-output ops (``None``: as the first).
_SECOND_OUTPUT = {"TopK": ir.DataType.INT64, "Dropout": ir.DataType.BOOL, "Unique": ir.DataType.INT64}


def onnx_dtype(dtype: torch.dtype) -> ir.DataType:
    """The ONNX element type of a torch dtype; a ``TranslationError`` for dtypes ONNX lacks (complex32)."""
    try:
        return from_torch_dtype(dtype)
    except TypeError:
        raise TranslationError(
            f"{dtype} has no ONNX element type",
            fix="convert the tensor to a dtype ONNX has (float16, float32, complex64, ...) before this line",
        ) from None


# A complex tensor lives in the graph as a real one with a trailing dim of 2 (real, imaginary part): onnxruntime
# has hardly any complex kernels, and this is the layout of ONNX DFT and STFT.
COMPLEX_PARTS = {torch.complex32: torch.float16, torch.complex64: torch.float32, torch.complex128: torch.float64}


def graph_dtype(dtype: torch.dtype) -> ir.DataType:
    """The element type a tensor of ``dtype`` has in the graph: ``onnx_dtype``, the part's for complex dtypes."""
    return onnx_dtype(COMPLEX_PARTS.get(dtype, dtype))


class Names:
    """Unique names across a model and all its subgraphs (ONNX wants them unique in the whole scope)."""

    def __init__(self) -> None:
        self._used: dict[str, int] = {}

    def unique(self, base: str) -> str:
        count = self._used.get(base)
        if count is None:
            self._used[base] = 0
            return base
        while True:
            count += 1
            candidate = f"{base}_{count}"
            if candidate not in self._used:
                self._used[base] = count
                self._used[candidate] = 0
                return candidate

    def reserve(self, name: str) -> None:
        self._used.setdefault(name, 0)


class OpBuilder:
    """``ctx.op.OpType(*inputs, attr=value, _outputs=n, _domain="")`` appends a node; returns its output(s).

    Inputs are ``ir.Value`` or ``None`` for an omitted optional input. With ``_outputs`` > 1 a tuple
    of values is returned.
    """

    def __init__(self, ctx: Ctx):
        self._ctx = ctx

    def __getattr__(self, op_type: str) -> Callable[..., Any]:
        if op_type.startswith("_"):
            raise AttributeError(op_type)

        def emit(*inputs: ir.Value | None, _outputs: int = 1, _domain: str = "", **attributes: Any) -> Any:
            return self._ctx.emit(op_type, inputs, attributes, num_outputs=_outputs, domain=_domain)

        emit.__name__ = op_type
        return emit


class Ctx:
    """Translation context of one ONNX graph; see the module docstring."""

    def __init__(
        self,
        graph: ir.Graph,
        *,
        opset: int,
        names: Names | None = None,
        parent: Ctx | None = None,
        inline_fn: Callable[..., list[Any]] | None = None,
        custom: Mapping[Any, Callable[..., Any]] | None = None,
        dim_name: Callable[[Any], str] | None = None,
        forms: Forms | None = None,
    ):
        self.graph = graph
        self.opset = opset
        # Which fused ops the export's target computes right (onnxport.targets); none unless told.
        self.forms: Forms = forms or (parent.forms if parent else Forms(parse(DEFAULT_TARGET), opset))
        self.names = names or Names()
        self.parent = parent
        self.node: torch.fx.Node | None = None
        self.domains: dict[str, int] = parent.domains if parent else {}
        self.op = OpBuilder(self)
        self._inline_fn = inline_fn or (parent._inline_fn if parent else None)
        self.custom: Mapping[Any, Callable[..., Any]] = parent.custom if parent else dict(custom or {})
        # Names a symbolic size (a sympy expression of torch's shape symbols) as an ONNX dim.
        self.dim_name: Callable[[Any], str] = dim_name or (parent.dim_name if parent else str)
        self._consts: dict[tuple[Any, ...], ir.Value] = {}
        self._step: list[ir.Node] = []

    # -- emitting nodes ------------------------------------------------------------------------

    @property
    def _prefix(self) -> str:
        return self.node.name if self.node is not None else "v"

    def emit(
        self,
        op_type: str,
        inputs: Sequence[ir.Value | None],
        attributes: dict[str, Any],
        *,
        num_outputs: int = 1,
        domain: str = "",
    ) -> Any:
        """Append one node; see ``OpBuilder``."""
        for i, value in enumerate(inputs):
            if value is not None and not isinstance(value, ir.Value):
                raise TypeError(f"{op_type} input {i} is {type(value).__name__}, not an ir.Value; use ctx.const")
        attrs = [_attribute(k, v) for k, v in attributes.items() if v is not None]
        prefix = self._prefix
        node = ir.Node(
            domain,
            op_type,
            inputs,
            attrs,
            num_outputs=num_outputs,
            name=self.names.unique(f"node_{prefix}_{op_type}"),
        )
        if domain and domain not in self.domains:
            self.domains[domain] = 1
        for out in node.outputs:
            out.name = self.names.unique(f"{prefix}__{op_type.lower()}")
        self._infer_dtype(node)
        self._infer_shape(node)
        self.graph.append(node)
        self._step.append(node)
        return node.outputs[0] if num_outputs == 1 else tuple(node.outputs)

    @staticmethod
    def _infer_dtype(node: ir.Node) -> None:  # noqa: C901 - one flat table of cases
        """Cheap element-type propagation so translators can read ``value.dtype`` of what they built."""
        op = node.op_type
        if node.domain:
            return
        dtype: ir.DataType | None
        if op in _BOOL_OUT:
            dtype = ir.DataType.BOOL
        elif op in _INT64_OUT:
            dtype = ir.DataType.INT64
        elif op == "Cast":
            dtype = ir.DataType(node.attributes["to"].as_int())
        elif op == "CastLike":
            dtype = node.inputs[1].dtype if node.inputs[1] is not None else None
        elif op == "Constant":
            dtype = node.attributes["value"].value.dtype  # the tensor builder.const set (as_tensor: a protocol check)
        elif op == "Where":
            dtype = node.inputs[1].dtype if node.inputs[1] is not None else None
        elif op == "ConstantOfShape":
            value = node.attributes.get("value")
            dtype = value.value.dtype if value is not None else ir.DataType.FLOAT
        elif op in ("Loop", "Scan", "If"):
            # Outputs follow the body's: Loop's body returns its condition first; If takes then_branch's.
            body = node.attributes["then_branch" if op == "If" else "body"].as_graph()
            skip = 1 if op == "Loop" else 0
            for out, source in zip(node.outputs, list(body.outputs)[skip:]):
                out.dtype = source.dtype
            return
        elif op in ("TopK", "Split", "Dropout", "Unique"):
            dtype = node.inputs[0].dtype
            for i, out in enumerate(node.outputs):
                out.dtype = _SECOND_OUTPUT.get(op, dtype) if i > 0 else dtype
        else:
            first = node.inputs[0] if node.inputs else None
            dtype = first.dtype if first is not None else None
        if dtype is not None:
            node.outputs[0].dtype = dtype

    @staticmethod
    def _infer_shape(node: ir.Node) -> None:
        """Shapes that cost nothing to know: shape-preserving unary ops, Shape and Size."""
        op, first = node.op_type, (node.inputs[0] if node.inputs else None)
        if node.domain or first is None:
            return
        if op in _SAME_SHAPE:
            node.outputs[0].shape = first.shape
        elif op == "Size":
            node.outputs[0].shape = ir.Shape([])
        elif op == "Shape" and first.shape is not None:
            rank = len(first.shape)
            start, end = node.attributes.get("start"), node.attributes.get("end")
            lo = start.as_int() if start is not None else 0
            hi = end.as_int() if end is not None else rank
            lo, hi = (lo + rank if lo < 0 else lo), (hi + rank if hi < 0 else hi)
            node.outputs[0].shape = ir.Shape([max(0, min(hi, rank) - min(max(lo, 0), rank))])

    # -- constants and sizes ---------------------------------------------------------------------

    def const(self, value: Any, dtype: ir.DataType | torch.dtype | None = None, *, like: ir.Value | None = None) -> ir.Value:
        """A constant value (a ``Constant`` node, shared within this graph).

        ``dtype`` defaults to ``like.dtype``, then to the dtype numpy gives the value (int -> int64,
        float -> float32, bool -> bool). A complex value becomes a real constant with a trailing dim of 2
        (see ``COMPLEX_PARTS``).
        """
        if isinstance(dtype, torch.dtype):
            dtype = self._onnx_dtype(dtype)
        if dtype is None and like is not None:
            dtype = like.dtype
        if isinstance(value, torch.Tensor):
            array = value.detach().cpu().resolve_conj()
            array = torch.view_as_real(array) if array.is_complex() else array
            array = array.float().numpy().astype(ir.DataType.BFLOAT16.numpy()) if array.dtype == torch.bfloat16 else array.numpy()
        else:
            array = np.asarray(value)
        if np.iscomplexobj(array):  # the graph's complex layout: a trailing (real, imaginary) dim
            array = np.stack([array.real, array.imag], axis=-1)
        if dtype is not None:
            array = array.astype(dtype.numpy())
        elif array.dtype == np.float64:
            array = array.astype(np.float32)
        key = (array.dtype.str, array.shape, array.tobytes())
        cached = self._consts.get(key)
        if cached is not None:
            return cached
        saved, self.node = self.node, None
        try:
            out = self.op.Constant(value=ir.Tensor(array, dtype=dtype))  # ir.tensor's protocol checks cost more
        finally:
            self.node = saved
        out.name = self.names.unique("const")
        out.shape = ir.Shape(array.shape)
        self._consts[key] = out
        return out

    def as_value(self, x: Any, *, like: ir.Value | None = None, dtype: ir.DataType | torch.dtype | None = None) -> ir.Value:
        """``x`` itself when it is already a value (cast to ``dtype`` if asked), else a constant."""
        if isinstance(x, ir.Value):
            if dtype is not None:
                return self.cast(x, dtype)
            return x
        return self.const(x, dtype, like=like)

    def cast(self, x: ir.Value, dtype: ir.DataType | torch.dtype) -> ir.Value:
        """``x`` as ``dtype`` (no node when it already is)."""
        if isinstance(dtype, torch.dtype):
            dtype = self._onnx_dtype(dtype)
        if x.dtype == dtype:
            return x
        return self.op.Cast(x, to=int(dtype))

    def sizes(self, items: Sequence[int | ir.Value]) -> ir.Value:
        """A 1-D int64 value from ints and scalar int values (symbolic sizes; 1-D values are spliced in)."""
        if all(isinstance(i, int) for i in items):
            return self.const(list(items), ir.DataType.INT64) if items else self.const(np.zeros((0,), np.int64))
        parts = []
        axes0 = self.const([0], ir.DataType.INT64)
        for item in items:
            if isinstance(item, ir.Value):
                item = self.cast(item, ir.DataType.INT64)
                parts.append(item if _rank(item) == 1 else self.op.Unsqueeze(item, axes0))
            else:
                parts.append(self.const([int(item)], ir.DataType.INT64))
        return parts[0] if len(parts) == 1 else self.op.Concat(*parts, axis=0)

    # -- reading the FX node -----------------------------------------------------------------------

    def _out_val(self, index: int) -> Any:
        val = self.node.meta.get("val") if self.node is not None else None
        if isinstance(val, (list, tuple)):
            return val[index]
        return val

    def out_dtype(self, index: int = 0) -> ir.DataType | None:
        """The ONNX dtype of output ``index`` of the node being translated, from torch's metadata."""
        val = self._out_val(index)
        if isinstance(val, torch.Tensor):
            return self._onnx_dtype(val.dtype)
        if isinstance(val, (torch.SymInt, int)) and not isinstance(val, bool):
            return ir.DataType.INT64
        if isinstance(val, (torch.SymBool, bool)):
            return ir.DataType.BOOL
        if isinstance(val, (torch.SymFloat, float)):
            return ir.DataType.FLOAT
        return None

    def out_shape(self, index: int = 0) -> tuple[int | torch.SymInt, ...] | None:
        """The output's sizes: ints where static, ``torch.SymInt`` where symbolic."""
        val = self._out_val(index)
        return tuple(val.shape) if isinstance(val, torch.Tensor) else None

    def static_out_shape(self, index: int = 0) -> list[int] | None:
        """The output's sizes when all are static ints, else None."""
        shape = self.out_shape(index)
        if shape is None or not all(isinstance(d, int) for d in shape):
            return None
        return [int(d) for d in shape]

    def _onnx_dtype(self, dtype: torch.dtype) -> ir.DataType:
        """``graph_dtype``, its error naming the node being translated."""
        try:
            return graph_dtype(dtype)
        except TranslationError as exc:
            raise self.unsupported(exc.message, fix=exc.fix or "") from None

    # -- refusing -------------------------------------------------------------------------------------

    def unsupported(self, what: str, *, fix: str) -> TranslationError:
        """The error for an argument combination ONNX cannot express: ``raise ctx.unsupported(what, fix=...)``.

        It names the node being translated, its op and the user's source line; ``fix`` says what the
        user can change (the line, static sizes, an opset). Overriding the op is always offered too.
        """
        node = self.node
        if node is None:
            return TranslationError(f"cannot translate: {what}", fix=fix)
        target = target_name(node.target)
        python = _python_name(node.target)
        override = (f"or translate it yourself: custom_translations={{{python}: fn}} (docs/custom-ops.md)")
        return TranslationError(
            f"cannot translate {node.name} = {target}: {what}",
            node=node.name,
            target=target,
            location=location_from_stack_trace(node.meta.get("stack_trace")),
            fix=f"{fix};\n{override}",
        )

    # -- subgraphs ----------------------------------------------------------------------------------

    def child(self, name: str, inputs: Sequence[ir.Value] = ()) -> Ctx:
        """The context of a new, empty ONNX subgraph (a branch or loop body) with formal ``inputs``."""
        return Ctx(ir.Graph(list(inputs), [], nodes=[], name=name), opset=self.opset, names=self.names, parent=self)

    def formal(self, name: str, val: Any) -> ir.Value:
        """A formal input for a subgraph, named uniquely in the model and typed from an FX ``meta["val"]``."""
        value = ir.Value(name=self.names.unique(name))
        self.set_type(value, val)
        return value

    def set_type(self, value: ir.Value, val: Any) -> None:
        """Type ``value`` from an FX ``meta["val"]``, naming symbolic dims the model's way."""
        set_type(value, val, self.dim_name)

    def inline(self, gm: torch.fx.GraphModule, bind: Sequence[Any]) -> list[Any]:
        """Translate the torch graph ``gm`` into this context's graph; its placeholders read ``bind`` in
        order (values of this graph or enclosing ones). Returns its flattened outputs."""
        assert self._inline_fn is not None, "graph translation needs the driver"
        saved = self.node
        try:
            return self._inline_fn(self, gm, list(bind))
        finally:
            self.node = saved

    def finish(self, outputs: Sequence[Any]) -> ir.Graph:
        """Make ``outputs`` the outputs of this context's graph and return it.

        ONNX wants each output produced in its own graph, once: a formal input, a value of an
        enclosing graph or a repeated value gets an Identity of its own.
        """
        seen: set[int] = set()
        for out in outputs:
            if not isinstance(out, ir.Value):
                raise TypeError(f"graph {self.graph.name} returns a non-tensor {out!r}")
            self.graph.outputs.append(self.output_value(out, seen))
        return self.graph

    def output_value(self, value: ir.Value, seen: set[int]) -> ir.Value:
        """``value`` itself, or an Identity of it when it cannot be an output of this graph as it is."""
        producer = value.producer()
        if producer is None or producer.graph is not self.graph or id(value) in seen:
            saved, self.node = self.node, None
            out = self.op.Identity(value)
            self.node = saved
            out.dtype, out.shape = value.dtype, value.shape
            value = out
        seen.add(id(value))
        return value

    def subgraph(
        self,
        gm: torch.fx.GraphModule,
        name: str,
        bind: Sequence[ir.Value],
        graph_inputs: Sequence[ir.Value] = (),
    ) -> ir.Graph:
        """Translate ``gm`` into a new ONNX subgraph named ``name``; see ``child``, ``inline``, ``finish``.

        ``bind`` may hold values of enclosing graphs (``If`` branches read outer values) or values in
        ``graph_inputs`` (the formal inputs of a ``Loop``/``Scan`` body).
        """
        body = self.child(name, graph_inputs)
        return body.finish(body.inline(gm, bind))


def set_type(value: ir.Value, val: Any, dim_name: Callable[[Any], str] = str) -> None:
    """Set an ONNX value's element type and shape from an FX ``meta["val"]`` (tensor or symbolic scalar).

    A symbolic size becomes a named ONNX dim, ``dim_name(sympy expression)`` (e.g. ``2*batch``); a complex
    tensor gets its parts' element type and a trailing dim of 2 (see ``COMPLEX_PARTS``).
    """
    if isinstance(val, torch.Tensor):
        value.dtype = graph_dtype(val.dtype)
        parts = [2] if val.dtype in COMPLEX_PARTS else []
        value.shape = ir.Shape([_dim(d, dim_name) for d in val.shape] + parts)
    elif isinstance(val, (torch.SymBool, bool)):
        value.dtype, value.shape = ir.DataType.BOOL, ir.Shape([])
    elif isinstance(val, (torch.SymInt, int)):
        value.dtype, value.shape = ir.DataType.INT64, ir.Shape([])
    elif isinstance(val, (torch.SymFloat, float)):
        value.dtype, value.shape = ir.DataType.FLOAT, ir.Shape([])


def _dim(size: int | torch.SymInt, dim_name: Callable[[Any], str]) -> int | ir.SymbolicDim:
    if isinstance(size, int):
        return size
    static = size.node.maybe_as_int()
    return static if static is not None else ir.SymbolicDim(dim_name(size.node.expr))


def _python_name(target: Any) -> str:
    """How the user spells ``target`` in ``custom_translations`` (``torch.ops.aten.pad.default``)."""
    if isinstance(target, torch._ops.OpOverload):
        return f"torch.ops.{target.namespace}.{target._opname}.{target._overloadname}"
    return repr(target_name(target))


def _rank(value: ir.Value) -> int | None:
    return len(value.shape) if value.shape is not None else None


def _attribute(name: str, value: Any) -> ir.Attr:
    """One node attribute; a tensor directly (``convert_attribute`` first checks it against the graph
    protocol, a runtime protocol check that costs more than the rest of emitting a node)."""
    if isinstance(value, ir.Tensor):
        return ir.AttrTensor(name, value)
    return _conv.convert_attribute(name, value)
