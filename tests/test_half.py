"""Half precision: ``export(..., dtype=torch.float16)`` and float16 models, against eager float32.

Each case exports a small real model (random weights, no downloads) to float16 and checks the file (float16
weights, inputs and outputs; the islands' ops in float32), the verification (against eager float32) and the
outputs at the example's and at another size. onnxruntime's CPU provider computes most float16 ops in
float32 itself, so where an island's effect on the numbers is tested, onnx's reference evaluator (float16
rounding after every op, as a float16-native runtime) runs the model.
"""

from __future__ import annotations

import copy
import dataclasses
import textwrap
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
import pytest
import torch

import onnxport
from onnxport.cli import main
from onnxport.errors import InvalidInputError
from tests import tiny_models

transformers = pytest.importorskip("transformers")

F16, F32 = ir.DataType.FLOAT16, ir.DataType.FLOAT
ATOL = RTOL = 1e-2  # onnxport.verify.tolerance(torch.float16): a float16 export against eager float32
DYN = torch.export.Dim.DYNAMIC


def _ids(vocab: int, batch: int, seq: int, pad_from: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    if pad_from is not None:
        mask[-1, pad_from:] = 0
    return ids, mask


def _llama_inputs(batch: int, seq: int) -> tuple[tuple, dict[str, Any]]:
    ids, mask = _ids(100, batch, seq, pad_from=seq - 3)
    return (ids,), {"attention_mask": mask, "use_cache": False}


def _bert() -> torch.nn.Module:
    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=64)
    return transformers.BertModel(config).eval()


def _bert_inputs(batch: int, seq: int) -> tuple[tuple, dict[str, Any]]:
    ids, mask = _ids(100, batch, seq, pad_from=seq - 3)
    return (ids,), {"attention_mask": mask}


def _vit() -> torch.nn.Module:
    config = transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                    image_size=32, patch_size=8)
    return transformers.ViTModel(config).eval()


class SmallCNN(torch.nn.Module):
    """Convolutions, batch norm, pooling, a mean over the channels and a softmax head."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.bn1 = torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16)
        self.conv2 = torch.nn.Conv2d(16, 32, 3, stride=2)
        self.head = torch.nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(self.conv2(torch.nn.functional.max_pool2d(x, 2)))
        pooled = x.mean(dim=(2, 3))
        return self.head(pooled).softmax(-1), x.mean(dim=1)


def _cnn() -> torch.nn.Module:
    torch.manual_seed(0)
    model = SmallCNN().eval()
    with torch.no_grad():  # running statistics that are not the identity
        model.bn1.running_mean.uniform_(-0.5, 0.5)
        model.bn1.running_var.uniform_(0.5, 2.0)
    return model


@dataclasses.dataclass
class HalfCase:
    name: str
    build: Callable[[], torch.nn.Module]
    inputs: Callable[[int, int], tuple[tuple, dict[str, Any]]]  # (batch, size) -> args, kwargs
    dynamic: Any
    islands: dict[str, int]  # op -> at least this many nodes computing in float32
    float32_softmax_in: tuple[str, ...] = ("Attention",)  # fused ops whose softmax_precision must be float32
    sizes: tuple[tuple[int, int], tuple[int, int]] = ((2, 8), (3, 5))


CASES = [
    HalfCase("llama", lambda: tiny_models.llama(seed=None, max_position_embeddings=64), _llama_inputs,
             {"input_ids": {0: DYN, 1: DYN}, "attention_mask": {0: DYN, 1: DYN}, "use_cache": None},
             {"RMSNormalization": 5, "Cos": 1, "Sin": 1}),
    HalfCase("bert", _bert, _bert_inputs, {"input_ids": {0: DYN, 1: DYN}, "attention_mask": {0: DYN, 1: DYN}},
             {"LayerNormalization": 5}),
    HalfCase("vit", _vit, lambda b, s: ((torch.randn(b, 3, 32, 32, generator=torch.Generator().manual_seed(s)),), {}),
             {"pixel_values": {0: DYN}}, {"LayerNormalization": 5}, sizes=((2, 0), (3, 1))),
    HalfCase("cnn", _cnn, lambda b, s: ((torch.randn(b, 3, s, s, generator=torch.Generator().manual_seed(s)),), {}),
             {"x": {0: DYN, 2: DYN, 3: DYN}}, {"Softmax": 1, "ReduceMean": 2}, float32_softmax_in=(),
             sizes=((2, 16), (3, 20))),
]


def _float32_ops(model: ir.Model) -> dict[str, int]:
    """Op -> nodes whose floating inputs are all float32, in a graph whose floats are float16 elsewhere."""
    counts: dict[str, int] = {}
    for node in model.graph:
        floats = [v.dtype for v in node.inputs if v is not None and v.dtype in (F16, F32)]
        if floats and all(d == F32 for d in floats):
            counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts


def _check_file(prog: onnxport.OnnxProgram, model: torch.nn.Module, tmp_path: Any) -> None:
    """In the saved file: every parameter is float16, floating inputs and outputs are float16."""
    path = tmp_path / "model.onnx"
    prog.save(path)
    saved = onnx.load(str(path))
    params = {name for name, _ in model.named_parameters()}
    dtypes = {t.name: t.data_type for t in saved.graph.initializer}
    assert params & set(dtypes), "the parameters should be initializers named after them"
    assert {n: onnx.TensorProto.DataType.Name(dtypes[n]) for n in params & set(dtypes)
            if dtypes[n] != onnx.TensorProto.FLOAT16} == {}
    for value in [*saved.graph.input, *saved.graph.output]:
        assert value.type.tensor_type.elem_type != onnx.TensorProto.FLOAT, value.name


def _close(actual: Any, expected: Any, prog: onnxport.OnnxProgram) -> None:
    for a, e in zip(prog.onnx_leaves(actual), prog.onnx_leaves(expected)):
        if isinstance(e, torch.Tensor) and e.is_floating_point():
            assert a.dtype == torch.float16
            torch.testing.assert_close(a.float(), e.float(), atol=ATOL, rtol=RTOL)


def _half_inputs(args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
    def half(t: Any) -> Any:
        return t.half() if isinstance(t, torch.Tensor) and t.is_floating_point() else t

    return tuple(map(half, args)), {k: half(v) for k, v in kwargs.items()}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_float16_export_matches_eager_float32(case: HalfCase, tmp_path: Any) -> None:
    model = case.build()
    args, kwargs = case.inputs(*case.sizes[0])
    # The target with every fused op (Attention with grouped heads in float16, RMSNormalization): the
    # islands must hold there; the default target's plain ops are checked in tests/test_targets.py.
    prog = onnxport.export(model, args, kwargs, dynamic_shapes=case.dynamic, dtype=torch.float16,
                           target="onnxruntime>=1.26")
    verification = prog.report.verification
    assert verification.ok and prog.report.sizes_verified, str(verification)
    assert all(o.dtype == "float16" for o in verification.outputs if o.dtype.startswith("float"))
    islands = _float32_ops(prog.model)
    assert {op: islands.get(op, 0) for op in case.islands} == {op: max(n, islands.get(op, 0))
                                                               for op, n in case.islands.items()}, islands
    for node in prog.model.graph:
        if node.op_type in case.float32_softmax_in:
            assert node.attributes["softmax_precision"].value == F32
    assert "MatMul" not in islands and "Conv" not in islands  # the heavy ops stay float16
    _check_file(prog, model, tmp_path)
    for batch, size in case.sizes:  # the example's size and another one
        args, kwargs = case.inputs(batch, size)
        with torch.no_grad():
            expected = model(*args, **kwargs)
        half_args, half_kwargs = _half_inputs(args, kwargs)
        _close(prog(*half_args, **half_kwargs), expected, prog)


def test_float16_model_exports_with_islands_and_matches_float32() -> None:
    """``model.half()`` exports as it is, verified against itself; it also stays close to eager float32."""
    model = tiny_models.llama(seed=None, max_position_embeddings=64)
    args, kwargs = _llama_inputs(2, 8)
    half = copy.deepcopy(model).half()
    prog = onnxport.export(half, args, kwargs)
    assert prog.report.verification.ok
    assert all(v.dtype == F16 for v in prog.model.graph.initializers.values() if v.dtype in (F16, F32)
               and "inv_freq" not in v.name)
    with torch.no_grad():
        _close(prog(*args, **kwargs), model(*args, **kwargs), prog)


class DecomposedRMSNorm(torch.nn.Module):
    """An RMS norm written out (no fusion applies: ``x / sqrt(...)``), then a linear layer."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(64) + 0.1 * torch.randn(64, generator=torch.Generator().manual_seed(1)))
        self.lin = torch.nn.Linear(64, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-12) * self.weight)


def _reference(prog: onnxport.OnnxProgram, x: torch.Tensor) -> np.ndarray:
    reference = pytest.importorskip("onnx.reference")
    return reference.ReferenceEvaluator(prog.model_proto).run(None, {prog.input_names[0]: x.numpy()})[0]


@pytest.mark.parametrize("half_model", [False, True], ids=["dtype", "model.half()"])
def test_decomposed_norm_island_keeps_large_activations_finite(half_model: bool) -> None:
    """|x| ~ 400: ``x * x`` overflows float16 (65,504), so the squares and their mean are float32."""
    model = DecomposedRMSNorm().eval()
    x = 400 * torch.randn(2, 5, 64, generator=torch.Generator().manual_seed(0))
    if half_model:
        prog = onnxport.export(copy.deepcopy(model).half(), (x.half(),), verify=False)
    else:
        prog = onnxport.export(model, (x,), dtype=torch.float16)
    islands = _float32_ops(prog.model)
    assert islands.get("ReduceMean") == 1 and islands.get("Mul", 0) >= 1 and islands.get("Sqrt") == 1, islands
    assert "Gemm" not in islands and "MatMul" not in islands
    out = _reference(prog, x.half())
    with torch.no_grad():
        expected = model(x).numpy()
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out.astype(np.float32), expected, atol=ATOL, rtol=RTOL)


def test_positions_and_rotary_angles_stay_float32() -> None:
    """Positions past 2,048 are not integers in float16: the rotary angles are computed in float32."""
    model = tiny_models.llama(seed=None, max_position_embeddings=64)
    ids, _ = _ids(100, 1, 8)
    positions = torch.arange(3000, 3008)[None]
    prog = onnxport.export(model, (ids,), {"position_ids": positions, "use_cache": False},
                           dynamic_shapes={"input_ids": {1: DYN}, "position_ids": {1: DYN}, "use_cache": None},
                           dtype=torch.float16, verify=False)
    cos = [n for n in prog.model.graph if n.op_type in ("Cos", "Sin")]
    assert cos and all(n.inputs[0].dtype == F32 for n in cos)
    with torch.no_grad():
        expected = model(ids, position_ids=positions, use_cache=False).logits
    torch.testing.assert_close(prog(ids, position_ids=positions, use_cache=False)["logits"].float(), expected,
                               atol=ATOL, rtol=RTOL)


def test_small_constants_of_islands_stay_float32() -> None:
    """An epsilon of 1e-12 is 0 in float16; read only inside an island, it stays float32."""
    prog = onnxport.export(DecomposedRMSNorm().eval(), (torch.randn(2, 64),), dtype=torch.float16)
    assert prog.report.verification.ok
    adds = [n for n in prog.model.graph if n.op_type == "Add" and n.inputs[0].dtype == F32]
    assert adds and all(v.dtype == F32 for n in adds for v in n.inputs)


def test_other_dtypes_are_refused() -> None:
    with pytest.raises(InvalidInputError, match="dtype=torch.bfloat16"):
        onnxport.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),), dtype=torch.bfloat16)


def test_float32_dtype_changes_nothing() -> None:
    prog = onnxport.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),), dtype=torch.float32)
    assert {v.dtype for v in prog.model.graph.initializers.values()} == {F32}


def test_cli_dtype_float16(tmp_path: Any, capsys: Any) -> None:
    path = tmp_path / "net.py"
    path.write_text(textwrap.dedent("""
        import torch
        net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.LayerNorm(8), torch.nn.Softmax(-1))
    """))
    out = tmp_path / "net.onnx"
    assert main(["export", f"{path}:net", "--input", "x=float32[2,4]", "--dtype", "float16", "-o", str(out)]) == 0
    # the bias Add joins the norm's island (it feeds only the norm): the product's output is cast up
    assert "float32 islands (Add 1, LayerNormalization 1, Softmax 1)" in capsys.readouterr().out
    saved = onnx.load(str(out))
    assert saved.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16
    assert {t.data_type for t in saved.graph.initializer} == {onnx.TensorProto.FLOAT16}


def test_streamed_weights_are_converted_when_saved(tmp_path: Any) -> None:
    """``weights=`` (a meta model): the weights become float16 as they are written, never loaded before."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.LayerNorm(8)).eval()
    with torch.device("meta"):
        meta = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.LayerNorm(8)).eval()
    x = torch.randn(2, 4)
    prog = onnxport.export(meta, (x,), weights=dict(model.state_dict()), dtype=torch.float16)
    assert all(isinstance(v.const_value, ir.LazyTensor) for v in prog.model.graph.initializers.values())
    path = tmp_path / "model.onnx"
    prog.save(path)
    saved = onnx.load(str(path))
    assert {t.data_type for t in saved.graph.initializer} == {onnx.TensorProto.FLOAT16}
    out = onnxport.verify.OrtRunner(ir.serde.deserialize_model(saved)).run([x.half()])[0]
    with torch.no_grad():
        torch.testing.assert_close(out.float(), model(x), atol=ATOL, rtol=RTOL)
