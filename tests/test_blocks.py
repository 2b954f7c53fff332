"""Repeated blocks captured once (onnxport.blocks): the model is the same, the layers are traced once."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import torch
from torch import nn

import onnxport
from onnxport import blocks
from onnxport.blocks._groups import equal
from onnxport.blocks._kind import KINDS
from onnxport.translate.opset import newest_opset
from tests import tiny_models


class Block(nn.Module):
    def __init__(self, width: int = 16, scale: float = 1.0):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 2 * width)
        self.down = nn.Linear(2 * width, width)
        self.scale = scale

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        h = self.down(torch.relu(self.up(self.norm(x)))) * self.scale
        if mask is not None:
            h = h * mask[..., None]
        return x + h


class Stack(nn.Module):
    def __init__(self, depth: int = 4, scales: list[float] | None = None):
        super().__init__()
        self.embed = nn.Linear(8, 16)
        self.layers = nn.ModuleList(Block(scale=s) for s in (scales or [1.0] * depth))
        self.head = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for layer in self.layers:
            h = layer(h, mask)
        return self.head(h)


def _inputs(batch: int = 2, length: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    mask = torch.ones(batch, length)
    mask[0, -2:] = 0
    return torch.randn(batch, length, 8), mask


def _export(model: nn.Module, args: tuple, **kwargs) -> onnxport.OnnxProgram:
    return onnxport.export(model.eval(), args, dynamic_shapes="auto", **kwargs)


def _check(program: onnxport.OnnxProgram, model: nn.Module, args: tuple) -> None:
    with torch.no_grad():
        expected = model(*args)
    np.testing.assert_allclose(program(*args).numpy(), expected.numpy(), rtol=1e-4, atol=1e-5)


def _reused(program: onnxport.OnnxProgram) -> list[str]:
    return [line for line in program.report.blocks if "captured once" in line]


class NormBlock(nn.Module):
    def __init__(self, width: int = 16):
        super().__init__()
        self.norm = nn.RMSNorm(width)
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.proj(self.norm(x))


class NormStack(nn.Module):
    def __init__(self, depth: int = 4):
        super().__init__()
        self.embed = nn.Linear(8, 16)
        self.layers = nn.ModuleList(NormBlock() for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for layer in self.layers:
            h = layer(h)
        return h


def test_export_each_translates_the_blocks_again_per_target():
    """One capture, two opsets: the reused block's graph is translated per opset (the fused RMSNormalization
    from opset 23 on), as a separate export at each gives it."""
    model, args = NormStack().eval(), (torch.randn(2, 5, 8),)
    variants = [{}, {"opset": newest_opset()}]
    dims = ({0: torch.export.Dim("batch"), 1: torch.export.Dim("length")},)
    progs = onnxport.export_each(model, args, variants=variants, dynamic_shapes=dims)
    for prog, variant in zip(progs, variants):
        alone = onnxport.export(model, args, dynamic_shapes=dims, **variant)
        assert _reused(prog) == _reused(alone) == ["NormBlock captured once for 4 calls (layers.0 ... layers.3)"]
        assert sorted(n.op_type for n in prog.model.graph) == sorted(n.op_type for n in alone.model.graph)
        _check(prog, model, args)
    fused = [sum(n.op_type == "RMSNormalization" for n in p.model.graph) for p in progs]
    assert fused == [0, 4]


@pytest.mark.parametrize("grad", [True, False], ids=["autograd", "no_grad"])
def test_layers_captured_once_give_the_same_model(grad):
    model, args = Stack(), _inputs()
    with torch.set_grad_enabled(grad):
        program = _export(model, args)
        plain = _export(model, args, reuse_blocks=False)
    assert _reused(program) == ["Block captured once for 4 calls (layers.0 ... layers.3)"]
    assert plain.report.blocks == []
    for other in (args, _inputs(3, 7), _inputs(1, 2)):
        _check(program, model, other)
    ops = collections.Counter(n.op_type for n in program.model_proto.graph.node)
    assert ops == collections.Counter(n.op_type for n in plain.model_proto.graph.node)
    assert not program.model_proto.functions
    assert all(o.domain != blocks.DOMAIN for o in program.model_proto.opset_import)
    # every layer reads its own weights
    used = {i for n in program.model_proto.graph.node for i in n.input}
    assert {f"layers.{i}.up.weight" for i in range(4)} <= used | {i.name for i in program.model_proto.graph.initializer}


def test_repeated_exports_in_one_process_give_the_same_bytes():
    """The kinds' op names are the same in every export of a process, so the files are too."""
    model, args = Stack(), _inputs()
    files = [_export(model, args).model_proto.SerializeToString() for _ in range(2)]
    assert _reused(_export(model, args))
    assert files[0] == files[1]


def test_layers_with_different_attributes_are_kinds_of_their_own():
    model, args = Stack(scales=[1.0, 2.0, 1.0, 2.0, 3.0]), _inputs()
    program = _export(model, args)
    assert "Block layers.4 traced as usual: no other layer is the same" in program.report.blocks
    assert sorted(_reused(program)) == [
        "Block captured once for 2 calls (layers.0 ... layers.2)",
        "Block captured once for 2 calls (layers.1 ... layers.3)",
    ]
    _check(program, model, _inputs(3, 4))


def test_a_call_with_other_constants_is_traced_as_usual():
    class Mixed(Stack):
        def forward(self, x, mask):
            h = self.embed(x)
            for i, layer in enumerate(self.layers):
                h = layer(h, mask if i % 2 else None)  # None: a constant where the first call had a tensor
            return self.head(h)

    model, args = Mixed(depth=4), _inputs()
    program = _export(model, args)
    assert any("traced as usual" in line for line in program.report.blocks)
    _check(program, model, _inputs(2, 6))


class Counting(Block):
    """Writes into its input: a mutation that a block captured alone cannot hold (a forward writing
    into its own buffers is refused outright, see test_state)."""

    def forward(self, x, mask=None):
        x.mul_(1.0)
        return super().forward(x, mask)


class Branching(Block):
    def forward(self, x, mask=None):
        if x.sum() > 0:  # data-dependent: rewritten into torch.cond in the whole-model capture
            return super().forward(x, mask)
        return x


@pytest.mark.parametrize("layer", [Counting, Branching])
def test_blocks_that_cannot_be_captured_alone_are_traced_layer_by_layer(layer):
    model, args = Stack(), _inputs()
    model.layers = nn.ModuleList(layer() for _ in range(4))
    program = _export(model, args)
    assert not _reused(program)
    assert any("traced layer by layer" in line for line in program.report.blocks)
    if layer is Branching:
        _check(program, model, args)


def test_layers_are_captured_once_after_an_if_before_them_is_rewritten():
    class Gated(Stack):
        def forward(self, x, mask):
            h = self.embed(x)
            if h.mean() > 0:  # data-dependent: the recording trace fails until this becomes torch.cond
                h = h * 2
            for layer in self.layers:
                h = layer(h, mask)
            return self.head(h)

    model, args = Gated(), _inputs()
    program = _export(model, args)
    assert program.report.rewrites
    assert _reused(program) == ["Block captured once for 4 calls (layers.0 ... layers.3)"]
    _check(program, model, _inputs(3, 6))
    _check(program, model, (-_inputs()[0], _inputs()[1]))


def test_hooks_keep_a_layer_out():
    model, args = Stack(depth=5), _inputs()
    model.layers[1].register_forward_hook(lambda m, i, o: o * 2)
    program = _export(model, args)
    assert _reused(program) == ["Block captured once for 4 calls (layers.0 ... layers.4)"]
    _check(program, model, _inputs(3, 4))


def test_groups_are_the_outermost_repeated_modules():
    groups = blocks.find_groups(Stack(depth=4))
    assert [[name for name, _ in g] for g in groups] == [[f"layers.{i}" for i in range(4)]]
    model = Stack(depth=4)
    model.layers[1].register_forward_pre_hook(lambda m, a: None)
    assert blocks.find_groups(model) == []  # three are not worth capturing apart
    assert blocks.find_groups(Stack(depth=2)) == []


def test_attribute_objects_compare_by_their_contents():
    import functools

    gelu = functools.partial(torch.nn.functional.gelu, approximate="tanh")
    assert equal(gelu, functools.partial(torch.nn.functional.gelu, approximate="tanh"))
    assert not equal(gelu, functools.partial(torch.nn.functional.gelu, approximate="none"))

    class Processor:
        def __init__(self, scale):
            self.scale = scale

    assert equal(Processor(1.0), Processor(1.0))
    assert not equal(Processor(1.0), Processor(2.0))
    assert not equal(lambda x: x, lambda x: x)


def test_a_batch_one_example_stays_dynamic():
    model, args = Stack(), _inputs(1, 5)
    program = _export(model, args)
    assert _reused(program)
    _check(program, model, _inputs(3, 5))


def test_the_kinds_are_forgotten_after_export():
    model, args = Stack(), _inputs()
    program = _export(model, args)
    assert _reused(program)
    assert KINDS == {}


# -- real architectures, deep enough for their layers to be captured once ---------------------------------

def _deep_cases() -> list:
    import dataclasses

    from tests.zoo.cases import TINY, VIS, ZOO, _t

    deep = {**TINY, "num_hidden_layers": 4}
    builds = {
        "llama": lambda: tiny_models.llama(**deep, num_key_value_heads=2),
        "gemma2": lambda: _t().Gemma2ForCausalLM(_t().Gemma2Config(**deep, head_dim=8, num_key_value_heads=2)),
        "qwen3": lambda: _t().Qwen3ForCausalLM(_t().Qwen3Config(**deep, num_key_value_heads=2)),
        "bert": lambda: _t().BertModel(_t().BertConfig(**deep)),
        "gpt2": lambda: _t().GPT2LMHeadModel(_t().GPT2Config(vocab_size=99, n_embd=32, n_layer=4, n_head=4,
                                                              n_positions=128)),
        "t5": lambda: _t().T5ForConditionalGeneration(_t().T5Config(
            vocab_size=99, d_model=32, d_kv=8, d_ff=64, num_layers=5, num_heads=4, decoder_start_token_id=0)),
        "vit": lambda: _t().ViTModel(_t().ViTConfig(**{**VIS, "num_hidden_layers": 4})),
    }
    cases = {case.name: case for case in ZOO}
    # T5 (an encoder-decoder's two stacks, each captured once) is the costliest: in the sweep
    return [pytest.param(dataclasses.replace(cases[name], build=build), id=name,
                         marks=pytest.mark.sweep if name == "t5" else ()) for name, build in builds.items()]


@pytest.mark.transformers
@pytest.mark.parametrize("case", _deep_cases())
def test_real_models_with_layers_captured_once(case):
    pytest.importorskip("transformers")
    from tests.zoo.test_zoo import check_other_size, export_case

    model, program = export_case(case, grad=True)
    assert _reused(program), program.report.blocks
    assert program.report.verification.ok
    check_other_size(case, model, program)


# -- decoders with a KV cache: each layer's slot of the cache goes in and out of its call ----------------

def _cache_cases() -> list:
    import dataclasses

    pytest.importorskip("transformers")
    from tests.test_llm_cache import CASES

    deep = []
    for case in CASES:
        if case.name in ("llama", "gpt2", "falcon", "gemma2"):
            kwargs = {k: 4 if k in ("num_hidden_layers", "n_layer") else v for k, v in case.kwargs.items()}
            deep.append(pytest.param(dataclasses.replace(case, kwargs=kwargs), id=case.name))
    return deep


@pytest.mark.transformers
@pytest.mark.parametrize("case", _cache_cases())
def test_decoders_with_a_cache_capture_their_layers_once(case):
    from tests.test_llm_cache import _build, _decode_inputs

    model = _build(case)
    program = onnxport.export(model, (), _decode_inputs(model), dynamic_shapes="auto")
    if case.name == "gemma2":  # sliding-window cache layers: traced layer by layer, said so
        assert not _reused(program)
        assert any("sliding-window" in line for line in program.report.blocks)
    else:
        assert _reused(program) == [next(line for line in program.report.blocks if "for 4 calls" in line)]
    ids = torch.randint(3, 99, (2, 6), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids)
    mask[1, :2], ids[1, :2] = 0, 0
    tokens, logits = onnxport.generate(program, ids, mask, max_new_tokens=6, output_logits=True)
    expected = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=6, output_logits=True,
                              return_dict_in_generate=True)
    assert torch.equal(tokens, expected.sequences)
    for got, want in zip(logits, expected.logits):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-3)


@pytest.mark.transformers
def test_one_token_decode_step_at_batch_one_captures_its_layers_once():
    pytest.importorskip("transformers")
    import dataclasses

    from tests.test_llm_cache import CASES, _build, _decode_inputs

    case = dataclasses.replace(CASES[0], kwargs={**CASES[0].kwargs, "num_hidden_layers": 4})
    model = _build(case)
    inputs = _decode_inputs(model, batch=1, past=4, new=1)
    del inputs["position_ids"]
    program = onnxport.export(model, (), inputs, dynamic_shapes="auto")
    assert _reused(program)
    ids = torch.randint(3, 99, (2, 6), generator=torch.Generator().manual_seed(3))
    expected = model.generate(ids, do_sample=False, max_new_tokens=5)
    assert torch.equal(onnxport.generate(program, ids, max_new_tokens=5), expected)


def test_a_layer_computing_with_its_index_is_not_shared():
    class Indexed(Block):
        def __init__(self, index):
            super().__init__()
            self.layer_idx = index

        def forward(self, x, mask=None):
            return super().forward(x, mask) * (self.layer_idx + 1)

    model, args = Stack(), _inputs()
    model.layers = nn.ModuleList(Indexed(i) for i in range(4))
    program = _export(model, args)
    assert not _reused(program)  # layer_idx is read, and differs: four kinds of one
    _check(program, model, _inputs(3, 4))


@pytest.mark.transformers
def test_layer_copies_keep_the_fusions_of_the_whole_model_capture():
    """The copies carry the model's own dim names, so the optimizer's fusions and size sharing apply
    to them as to layers traced in place."""
    pytest.importorskip("transformers")
    import dataclasses

    from tests.test_llm_cache import CASES, _build, _decode_inputs

    case = dataclasses.replace(CASES[0], kwargs={**CASES[0].kwargs, "num_hidden_layers": 4})
    model = _build(case)
    fast = "onnxruntime>=1.26"  # a target with the fused ops
    reused = onnxport.export(model, (), _decode_inputs(model), dynamic_shapes="auto", verify=False, target=fast)
    plain = onnxport.export(model, (), _decode_inputs(model), dynamic_shapes="auto", verify=False,
                            reuse_blocks=False, target=fast)
    assert _reused(reused)
    ops = [collections.Counter(n.op_type for n in p.model_proto.graph.node) for p in (reused, plain)]
    for fused in ("Attention", "RMSNormalization", "RotaryEmbedding", "MatMul"):
        assert ops[0][fused] == ops[1][fused] > 0, fused
    assert sum(ops[0].values()) <= sum(ops[1].values()) + 8  # a few size ops the layers do not share
