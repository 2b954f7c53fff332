"""``export_hf`` of GPTQ and AWQ checkpoints: each quantized layer a ``MatMulNBits`` holding the checkpoint's codes.

The checkpoints are tiny random Llamas whose linear layers get codes, scales and zero points drawn here, packed by
this file's own packers (written from the formats' descriptions: GPTQ's int32 words along the input dim, v1 zero
points stored minus one; AWQ's GEMM words along the output dim in the column order 0 2 4 6 1 3 5 7). The eager model
they are compared with holds the weights those codes stand for.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import onnx
import pytest
import torch

import onnxport
from onnxport.cli import main
from onnxport.hf import export_hf
from tests.hf_dirs import PROMPT, eager_greedy as eager, genai_greedy as genai, write_llama

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.transformers

GROUP = 16
SUBLAYERS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
             "mlp.up_proj", "mlp.down_proj")
LINEAR_LAYERS = 2 * len(SUBLAYERS)
EXACT = {"accuracy_level": 0, "lm_head": 0}  # MatMulNBits in float, the LM head left as the checkpoint has it


# -- packers, from the formats' descriptions --------------------------------------------------------------------

def _words(fields: np.ndarray, bits: int) -> np.ndarray:
    """Fields ``[..., 32 / bits]`` (the first in the lowest bits) as 32-bit words ``[...]`` (uint64 values)."""
    word = np.zeros(fields.shape[:-1], dtype=np.uint64)
    for i in range(fields.shape[-1]):
        word += fields[..., i].astype(np.uint64) << np.uint64(bits * i)
    return word


def _int32(words: np.ndarray) -> torch.Tensor:
    return torch.from_numpy((words % (1 << 32)).astype(np.uint32).view(np.int32).copy())


def pack_gptq(codes: np.ndarray, zeros: np.ndarray, bits: int, v1: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``codes`` ``[N, K]`` and ``zeros`` ``[N, groups]`` as GPTQ's ``qweight`` ``[K * bits / 32, N]`` (packed along
    K) and ``qzeros`` ``[groups, N * bits / 32]`` (along N); v1 subtracts one from every zero point of a word,
    as one subtraction of the word (a zero of 0 borrows from the next field)."""
    per = 32 // bits
    n, k = codes.shape
    qweight = _words(codes.T.reshape(k // per, per, n).transpose(0, 2, 1), bits)
    qzeros = _words(zeros.T.reshape(zeros.shape[1], n // per, per), bits).astype(np.int64)
    if v1:
        qzeros -= sum(1 << (bits * i) for i in range(per))
    return _int32(qweight), _int32(qzeros % (1 << 32))


def pack_awq(codes: np.ndarray, zeros: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """``codes`` ``[N, K]`` and ``zeros`` ``[N, groups]`` as AWQ GEMM's ``qweight`` ``[K, N / 8]`` and ``qzeros``
    ``[groups, N / 8]``: field i of word j holds column ``8 j + (0, 2, 4, 6, 1, 3, 5, 7)[i]``."""
    order = [0, 2, 4, 6, 1, 3, 5, 7]

    def pack(rows: np.ndarray) -> torch.Tensor:  # [R, N] -> [R, N / 8]
        return _int32(_words(rows.reshape(rows.shape[0], -1, 8)[:, :, order], 4))

    return pack(codes.T), pack(zeros.T)


def write_checkpoint(directory: str, method: str = "gptq", *, bits: int = 4, sym: bool = True, v1: bool = True,
                     desc_act: bool = False, seed: int = 0) -> tuple[torch.nn.Module, dict[str, tuple]]:
    """A tiny Llama saved as a GPTQ (``v1``: checkpoint_format gptq, else gptq_v2) or AWQ checkpoint whose
    linear layers (all but the LM head) hold random codes; returns the eager model with the weights they stand
    for, and per weight name (codes ``[N, K]``, scales ``[N, groups]`` float32, zeros ``[N, groups]``, g_idx)."""
    model = write_llama(directory, seed=seed)
    rng = np.random.default_rng(seed)
    orders = {}  # act-order: the layers that read the same input share its order (as GPTQ's act-order gives them)
    state = {key: value.contiguous() for key, value in model.state_dict().items()}
    expected = {}
    top = 1 << bits
    for i in range(model.config.num_hidden_layers):
        for sub in SUBLAYERS:
            prefix = f"model.layers.{i}.{sub}"
            linear = model.get_submodule(prefix)
            n, k = linear.weight.shape
            groups = k // GROUP
            codes = rng.integers(0, top, (n, k))
            scales = (rng.uniform(0.003, 0.007, (n, groups)) * 16 / top).astype(np.float16)
            if sym:
                zeros = np.full((n, groups), top // 2)
            else:
                zeros = rng.integers(0, top, (n, groups))
                zeros[0, 0], zeros[1, :2], zeros[2, 1] = 0, 0, top - 1  # borrows in v1, the extremes
            g_idx = np.arange(k) // GROUP
            if desc_act:
                short = sub.split(".")[1]
                reads = {"k_proj": "q_proj", "v_proj": "q_proj", "up_proj": "gate_proj"}.get(short, short)
                g_idx[orders.setdefault((i, reads), rng.permutation(k))] = np.arange(k) // GROUP
            weight = (codes - zeros[:, g_idx]) * scales.astype(np.float64)[:, g_idx]
            with torch.no_grad():
                linear.weight.copy_(torch.from_numpy(weight))
            del state[f"{prefix}.weight"]
            qweight, qzeros = pack_awq(codes, zeros) if method == "awq" else pack_gptq(codes, zeros, bits, v1)
            state.update({f"{prefix}.qweight": qweight, f"{prefix}.qzeros": qzeros,
                          f"{prefix}.scales": torch.from_numpy(scales.T.copy())})
            if method == "gptq":
                state[f"{prefix}.g_idx"] = torch.from_numpy(g_idx.astype(np.int32))
            expected[f"{prefix}.weight"] = (codes, scales.astype(np.float32), zeros, g_idx)
    from safetensors.torch import save_file

    save_file(state, os.path.join(directory, "model.safetensors"), metadata={"format": "pt"})
    if method == "awq":
        settings = {"quant_method": "awq", "bits": 4, "group_size": GROUP, "zero_point": True, "version": "gemm"}
    else:
        settings = {"quant_method": "gptq", "bits": bits, "group_size": GROUP, "sym": sym, "desc_act": desc_act,
                    "checkpoint_format": "gptq" if v1 else "gptq_v2"}
    _edit_config(directory, quantization_config=settings)
    model.generation_config.eos_token_id = None  # NEW_TOKENS new tokens in eager generation
    return model, expected


def _edit_config(directory: str, **changes: object) -> None:
    path = os.path.join(directory, "config.json")
    with open(path) as f:
        config = json.load(f)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    with open(path, "w") as f:
        json.dump(config, f)


# -- what the ONNX file holds -----------------------------------------------------------------------------------

def _unpack4(packed: np.ndarray, count: int) -> np.ndarray:
    """Rows of bytes, two 4-bit values each (low nibble first), as ``[rows, count]``."""
    rows = packed.reshape(packed.shape[0], -1)
    return np.stack([rows & 15, rows >> 4], axis=-1).reshape(rows.shape[0], -1)[:, :count]


def matmulnbits(folder: os.PathLike[str]) -> list[dict[str, np.ndarray]]:
    """Each ``MatMulNBits`` of the saved model, decoded: codes ``[N, K]``, scales, zeros ``[N, blocks]`` and
    g_idx ``[K]``, the group of each input (the defaults spelt out where an input is absent), in the order of
    the model's input: where the product reads it through a ``Gather`` of its last dim, the codes' inputs are
    put back in the order of the gathered ones."""
    model = onnx.load(os.path.join(folder, "model.onnx"))
    arrays = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    gathers = {n.output[0]: arrays[n.input[1]] for n in model.graph.node  # of the last dim: axis -1
               if n.op_type == "Gather" and n.input[1] in arrays
               and [a.i for a in n.attribute if a.name == "axis"] == [-1]}
    found = []
    for node in model.graph.node:
        if node.op_type != "MatMulNBits":
            continue
        attrs = {a.name: a.i for a in node.attribute}
        n, k, bits, block = attrs["N"], attrs["K"], attrs["bits"], attrs["block_size"]
        blocks = -(-k // block)
        inputs = [*node.input, "", ""]
        packed = arrays[inputs[1]]
        codes = (_unpack4(packed, blocks * block) if bits == 4 else packed.reshape(n, -1))[:, :k]
        zeros = np.full((n, blocks), 1 << (bits - 1))
        if inputs[3]:
            stored = arrays[inputs[3]]
            zeros = (stored.reshape(n, blocks).astype(np.float64) if stored.dtype.kind == "f" else
                     _unpack4(stored.reshape(n, -1), blocks) if bits == 4 else stored.reshape(n, blocks))
        g_idx = arrays[inputs[4]] if inputs[4] else np.arange(k) // block
        if inputs[0] in gathers:  # the product's input j is the model's order[j]
            order, read = gathers[inputs[0]], codes
            codes = np.empty_like(read)
            codes[:, order], g_idx = read, g_idx[np.argsort(order)]
        found.append({"codes": codes, "scales": arrays[inputs[2]].reshape(n, blocks), "zeros": zeros,
                      "g_idx": g_idx, "bits": bits, "block_size": block})
    return found


def assert_checkpoint_codes(folder: os.PathLike[str], prog: onnxport.OnnxProgram, expected: dict[str, tuple],
                            bits: int = 4) -> None:
    """Every MatMulNBits holds exactly the checkpoint's codes, scales, zeros and groups of some of its layers
    (several, concatenated, where layers reading the same input were fused), and every layer is in one."""
    groups = [[name if name in expected else name.rsplit(".", 1)[0] for name in group]  # a weight's, or its codes'
              for group in prog.report.quantization.fused]
    fused = {name for group in groups for name in group}
    candidates = groups + [[name] for name in expected if name not in fused]
    covered = []
    for node in matmulnbits(folder):
        assert (node["bits"], node["block_size"]) == (bits, GROUP)
        matches = [group for group in candidates
                   if np.array_equal(node["codes"], np.concatenate([expected[m][0] for m in group]))]
        assert len(matches) == 1, "a MatMulNBits whose codes are no layer's of the checkpoint"
        group = matches[0]
        np.testing.assert_array_equal(node["scales"], np.concatenate([expected[m][1] for m in group]))
        np.testing.assert_array_equal(node["zeros"], np.concatenate([expected[m][2] for m in group]))
        for member in group:
            np.testing.assert_array_equal(node["g_idx"], expected[member][3])
        covered += group
    assert sorted(covered) == sorted(expected)


# -- running it -------------------------------------------------------------------------------------------------

CHECKPOINTS = {
    "gptq-sym": dict(method="gptq", sym=True),
    "gptq-asym": dict(method="gptq", sym=False),
    "gptq_v2-asym": dict(method="gptq", sym=False, v1=False),
    "gptq-act-order": dict(method="gptq", sym=False, desc_act=True),
    "awq": dict(method="awq", sym=False),
}


@pytest.mark.parametrize("kind", list(CHECKPOINTS))
def test_checkpoint_codes_are_kept_and_the_folder_generates_as_eager(tmp_path, kind) -> None:
    directory = str(tmp_path / "checkpoint")
    model, expected = write_checkpoint(directory, **CHECKPOINTS[kind])
    out = tmp_path / "onnx"
    prog = export_hf(directory, "text-generation", out, quantize=EXACT)
    assert prog.report.verification.status == "passed"  # the float export of the dequantized model, against eager
    result = prog.report.quantization
    assert sorted(result.quantized) == sorted(expected) and list(result.left) == ["lm_head.weight"]
    assert_checkpoint_codes(out, prog, expected)
    # act-order: each input read in its order by one Gather (q, k and v share theirs, and are still fused)
    reorders = [n for n in prog.model.graph if n.op_type == "Gather" and n.name.endswith(".input_order")]
    assert len(reorders) == (4 * 2 if kind == "gptq-act-order" else 0)
    assert len(result.fused) == 2 * 2
    tokens, logits = genai(out)
    expected_tokens, eager_logits = eager(model)
    np.testing.assert_allclose(logits, eager_logits, rtol=0, atol=1e-4)
    assert tokens == expected_tokens
    ids = torch.tensor([PROMPT])
    generated = onnxport.generate(str(out / "model.onnx"), ids, max_new_tokens=4)
    assert generated.tolist() == [expected_tokens[:len(PROMPT) + 4]]


def test_without_quantize_only_the_checkpoint_layers_are_quantized(tmp_path) -> None:
    directory = str(tmp_path / "checkpoint")
    model, expected = write_checkpoint(directory, "awq", sym=False, seed=3)
    out = tmp_path / "onnx"
    prog = export_hf(directory, "text-generation", out)
    result = prog.report.quantization
    assert sorted(result.quantized) == sorted(expected)
    assert result.left == {"lm_head.weight": "float in the source: no codes given"}
    assert_checkpoint_codes(out, prog, expected)
    with open(out / "genai_config.json") as f:
        assert json.load(f)["model"]["decoder"]["filename"] == "model.onnx"
    logits = next(c for c in result.checks if c.name == "logits")  # int8 activations (accuracy_level 4)
    assert logits.cosine > 0.9999 and logits.top1 == 1.0
    tokens, first = genai(out)
    expected_tokens, eager_logits = eager(model)
    assert tokens[len(PROMPT)] == expected_tokens[len(PROMPT)] and int(first.argmax()) == int(eager_logits.argmax())


def test_gptq_int8_act_order_codes_are_kept(tmp_path) -> None:
    directory = str(tmp_path / "checkpoint")
    model, expected = write_checkpoint(directory, "gptq", bits=8, sym=False, desc_act=True, seed=1)
    out = tmp_path / "onnx"
    # onnxruntime>=1.18 has no 8-bit MatMulNBits; a genai folder's default target (the onnxruntime genai requires) has
    with pytest.raises(onnxport.InvalidInputError, match="matmulnbits of 8 bits: needs onnxruntime 1.23"):
        export_hf(directory, "text-generation", out, quantize=EXACT, target="onnxruntime>=1.18")
    prog = export_hf(directory, "text-generation", out, quantize=EXACT)
    assert_checkpoint_codes(out, prog, expected, bits=8)
    tokens, logits = genai(out)
    expected_tokens, eager_logits = eager(model)
    np.testing.assert_allclose(logits, eager_logits, rtol=0, atol=1e-4)
    assert tokens == expected_tokens


def test_cli_quantize_also_rounds_the_float_lm_head(tmp_path, capsys) -> None:
    directory = str(tmp_path / "checkpoint")
    _, expected = write_checkpoint(directory, "gptq", sym=True, seed=2)
    out = tmp_path / "onnx"
    assert main(["export-hf", directory, "-o", str(out), "--quantize", "int4"]) == 0
    printed = capsys.readouterr().out
    assert f"{LINEAR_LAYERS + 1} linear layer(s)" in printed and "blocks of 16" in printed
    nodes = matmulnbits(out)
    head = [n for n in nodes if n["codes"].shape == (99, 32)]  # the LM head: vocabulary 99, hidden 32
    assert len(head) == 1 and head[0]["block_size"] == GROUP
    proto = onnx.load(str(out / "model.onnx"), load_external_data=False)
    assert not any(n.op_type in ("MatMul", "Gemm") for n in proto.graph.node
                   if any(i.endswith("weight") for i in n.input))


@pytest.fixture(scope="module")
def gptq_dir(tmp_path_factory) -> str:
    directory = str(tmp_path_factory.mktemp("gptq"))
    write_checkpoint(directory, "gptq", sym=False, seed=4)
    return directory


@pytest.mark.parametrize(("config", "export", "message"), [
    ({"quantization_config": {"bits": 3}}, {}, "3-bit weights; onnxport keeps 4 and 8-bit GPTQ codes"),
    ({"quantization_config": {"checkpoint_format": "marlin"}}, {}, "'marlin' format"),
    ({"quantization_config": {"group_size": -1}}, {}, "groups of -1 inputs"),
    ({"quantization_config": {"group_size": 128}}, {}, "qweight|qzeros|scales"),
    ({"quantization_config": {"dynamic": {"mlp": {"bits": 8}}}}, {}, "their own settings"),
    ({"quantization_config": {"quant_method": "awq", "version": "gemv"}}, {}, "AWQ's 'gemv' kernels"),
    ({"quantization_config": {"quant_method": "awq", "bits": 8}}, {}, "8-bit weights; onnxport keeps 4-bit AWQ"),
    ({"quantization_config": {"quant_method": "bitsandbytes"}}, {}, "quantized with bitsandbytes"),
    ({}, {"quantize": "int8"}, r"bits=8, but the checkpoint's layers are GPTQ int4, groups of 16"),
    ({}, {"quantize": {"block_size": 32}}, "block_size=32"),
    ({}, {"quantize": {"activations": "dynamic", "bits": 4}}, "activations="),
    ({}, {"streaming": True}, "dequantized in memory, not streamed"),
    ({}, {"task": "text2text-generation"}, "text2text-generation"),
])
def test_unsupported_checkpoints_and_options_are_refused(gptq_dir, tmp_path, config, export, message) -> None:
    directory = str(tmp_path / "checkpoint")
    shutil.copytree(gptq_dir, directory)
    _edit_config(directory, **config)
    options = dict(export)
    task = options.pop("task", "text-generation")
    with pytest.raises(onnxport.InvalidInputError, match=message) as caught:
        export_hf(directory, task, tmp_path / "out", **options)
    assert caught.value.fix and not (tmp_path / "out").exists()


def test_tensors_the_model_does_not_have_are_refused(gptq_dir, tmp_path) -> None:
    from safetensors.torch import load_file, save_file

    directory = str(tmp_path / "checkpoint")
    shutil.copytree(gptq_dir, directory)
    path = os.path.join(directory, "model.safetensors")
    tensors = load_file(path)
    tensors["model.layers.0.mlp.act_fn.scales"] = torch.ones(64, dtype=torch.float16)  # AWQ's scaled activations
    save_file(tensors, path, metadata={"format": "pt"})
    with pytest.raises(onnxport.InvalidInputError, match="scales activations .model.layers.0.mlp.act_fn.scales.") as caught:
        export_hf(directory, "text-generation", tmp_path / "out")
    assert caught.value.fix and not (tmp_path / "out").exists()


def test_codes_for_no_layer_of_the_model_are_refused() -> None:
    from onnxport.quantize import QuantizeOptions, quantize_model

    layer = torch.nn.Linear(32, 16, bias=False)
    prog = onnxport.export(layer, (torch.randn(2, 32),))
    given = {"other.weight": (np.zeros((16, 2, 16), np.uint8), np.ones((16, 2), np.float32), None)}
    with pytest.raises(onnxport.InvalidInputError, match="no linear layer of the model has"):
        quantize_model(prog.model.clone(), QuantizeOptions(block_size=GROUP, codes=given))
    given = {"weight": (np.zeros((16, 1, 32), np.uint8), np.ones((16, 1), np.float32), None)}
    with pytest.raises(onnxport.InvalidInputError, match=r"not uint8 \[16, 2, 16\]"):
        quantize_model(prog.model.clone(), QuantizeOptions(block_size=GROUP, codes=given))
