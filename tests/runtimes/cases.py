"""The models tests/runtimes runs in every runtime, as data, and the writer of their case directories.

Each ``ModelCase`` builds a model, the example it is exported from and its input sets; ``write_case`` exports
it with onnxport (``opset=``, ``target=``, ``dtype=`` as given) and writes a directory that
``run_ort.py`` and ``run_node.mjs`` read: ``model.onnx``, ``case.json`` and the raw little-endian inputs and
expected outputs of each set. The expected outputs are eager PyTorch's, computed here in float32 (for a
float16 export too, held to float16's tolerance), so the side runtimes need no torch.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

import onnxport
from onnxport.demo import DEMOS

F16_TOL = (1e-2, 1e-2)  # (atol, rtol), as onnxport's own float16 verification


@dataclasses.dataclass(frozen=True)
class InputSet:
    """User-level inputs (as the model is called) and the output positions not compared: ``ignore(outputs)``
    gives a bool mask per ONNX output (True: skip), e.g. the logits of padding tokens, which no caller reads."""

    name: str
    args: tuple = ()
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    ignore: Callable[[list[torch.Tensor]], list[torch.Tensor | None]] | None = None


@dataclasses.dataclass(frozen=True)
class Built:
    """A model, the example it is exported from (with ``dynamic_shapes``), and the sets it is run on."""

    model: torch.nn.Module
    args: tuple
    kwargs: dict[str, Any]
    dynamic_shapes: Any
    sets: list[InputSet]
    reference: torch.nn.Module | None = None  # what the outputs are compared with, when not ``model`` itself
    half_reference: torch.nn.Module | None = None  # what a float16 export's are compared with, when not ``reference``


@dataclasses.dataclass(frozen=True)
class ModelCase:
    """One model of the set; ``tol`` is float32's (atol, rtol), float16 exports get ``F16_TOL``; ``quantize``
    (``prog.quantize``'s options) quantizes the export."""

    name: str
    build: Callable[[], Built]
    tol: tuple[float, float] = (1e-4, 1e-4)
    quantize: dict[str, Any] | None = None


def _cnn() -> Built:
    model, [example] = DEMOS["small_cnn"]()
    return Built(model, example, {}, None, [InputSet("batch2", example)])


def _control_flow() -> Built:
    """The README's ``if x.sum():`` model, run on an input for each branch."""
    model, [taken, other] = DEMOS["control_flow"]()
    return Built(model, taken, {}, None, [InputSet("true_branch", taken), InputSet("false_branch", other)])


def _left_padded(ids: torch.Tensor, pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``ids`` with the first ``pad`` tokens of its last row replaced by padding, and the attention mask."""
    ids, mask = ids.clone(), torch.ones_like(ids)
    ids[-1, :pad], mask[-1, :pad] = 0, 0
    return ids, mask


def _positions(mask: torch.Tensor) -> torch.Tensor:
    """transformers' (and ``onnxport.generate``'s) positions for a padded batch: cumsum - 1, 1 at padding."""
    return torch.where(mask == 0, 1, mask.cumsum(-1) - 1)


def _padding_rows(mask: torch.Tensor) -> Callable[[list[torch.Tensor]], list[torch.Tensor | None]]:
    """Skip the positions of padding tokens: in the logits (the first output) and in a cache's present keys
    and values (B, H, S, E), which every later step masks out. A runtime may put other numbers there (a fully
    masked query row has no defined attention result) but not NaN, which a masked key still spreads
    (0 * NaN), so the runners fail NaN everywhere."""
    skip = mask == 0

    def ignore(outputs: list[torch.Tensor]) -> list[torch.Tensor | None]:
        cache = [skip[:, None, :, None].expand_as(t) if t.dim() == 4 and t.shape[2] == skip.shape[1] else None
                 for t in outputs[1:]]
        return [skip[..., None].expand_as(outputs[0]), *cache]

    return ignore


def _llama() -> Built:
    """The zoo's Llama without a cache (4 query heads over 2 KV heads), on a left-padded batch: its attention
    becomes the 3-D (batch, seq, heads * embed) form of ``Attention`` where fused, unlike the cached one."""
    from tests.zoo.cases import TEXT_DYNAMIC, ZOO, ids

    torch.manual_seed(0)
    model = next(c for c in ZOO if c.name == "llama").build().eval()
    example = {"input_ids": ids(2, 8), "attention_mask": torch.ones(2, 8, dtype=torch.int64), "use_cache": False}
    padded_ids, mask = _left_padded(ids(2, 8, seed=1), 3)
    padded = {"input_ids": padded_ids, "attention_mask": mask, "use_cache": False}
    plain = {"input_ids": ids(2, 8, seed=2), "attention_mask": torch.ones(2, 8, dtype=torch.int64), "use_cache": False}
    return Built(model, (), example, TEXT_DYNAMIC, [InputSet("unpadded", (), plain),
                                                    InputSet("left_padded", (), padded, _padding_rows(mask))])


INT4 = {"bits": 4, "block_size": 32, "accuracy_level": 0}  # float products: every release computes the same


def _llama_int4() -> Built:
    """The Llama with int4 weights (MatMulNBits), against eager PyTorch with each linear layer's weight
    replaced by its dequantized codes: the same model quantized, in eager. A float16 export quantizes its weights
    as float16 holds them, with float16 scales: its reference is made so (the codes of the float32 weights differ
    from them by up to 0.017 in the logits, past float16's bound)."""
    built = _llama()
    return dataclasses.replace(built, reference=_int4_reference(built.model, half=False),
                               half_reference=_int4_reference(built.model, half=True))


def _int4_reference(model: torch.nn.Module, half: bool) -> torch.nn.Module:
    """``model`` with each linear layer's weight replaced by its int4 codes dequantized (from the weight as float16
    holds it, with float16 scales, where ``half``; else with the float32 scales the file keeps)."""
    from onnxport.quantize.kernels import dequantized, quantize_blocks

    reference = copy.deepcopy(model)
    scale_dtype = np.float16 if half else np.float32
    with torch.no_grad():
        for module in reference.modules():
            if isinstance(module, torch.nn.Linear):
                w = (module.weight.detach().half() if half else module.weight.detach()).double().numpy()
                codes, scales, zeros = quantize_blocks(w, 4, INT4["block_size"], True)
                scales = scales.astype(scale_dtype).astype(np.float64)
                module.weight.copy_(torch.from_numpy(dequantized(codes, scales, zeros, 4, w.shape[1])))
    return reference


def _gpt2() -> Built:
    """GPT-2 from the zoo, on a left-padded batch (the zoo pads on the right)."""
    from tests.zoo.cases import TEXT_DYNAMIC, ZOO, ids

    torch.manual_seed(0)
    model = next(c for c in ZOO if c.name == "gpt2").build().eval()
    example = {"input_ids": ids(2, 8), "attention_mask": torch.ones(2, 8, dtype=torch.int64), "use_cache": False}
    padded_ids, mask = _left_padded(ids(2, 8, seed=1), 3)
    padded = {"input_ids": padded_ids, "attention_mask": mask, "use_cache": False}
    return Built(model, (), example, TEXT_DYNAMIC, [InputSet("left_padded", (), padded, _padding_rows(mask))])


def _empty_cache(model: torch.nn.Module, batch: int) -> Any:
    """A ``DynamicCache`` with every layer present and 0 tokens long: the ONNX model's prefill input."""
    from transformers import DynamicCache

    config = model.config
    heads = config.num_key_value_heads
    size = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    empty = torch.zeros(batch, heads, 0, size)
    return DynamicCache([(empty, empty)] * config.num_hidden_layers)


def _llama_kv() -> Built:
    """The tiny Llama of tests/test_llm_cache.py (4 query heads over 2 KV heads), exported from a decode step
    with its ``DynamicCache``; run on a prefill from an empty cache, a left-padded prefill, and a decode step."""
    from tests.test_llm_cache import CASES, _build, _decode_inputs

    model = _build(CASES[0])
    example = _decode_inputs(model)
    gen = torch.Generator().manual_seed(5)
    prompt = torch.randint(3, 99, (2, 6), generator=gen)
    padded, mask = _left_padded(prompt, 2)

    def prefill(ids: torch.Tensor, mask: torch.Tensor) -> dict[str, Any]:
        return {"input_ids": ids, "attention_mask": mask, "position_ids": _positions(mask),
                "past_key_values": _empty_cache(model, ids.shape[0])}

    with torch.no_grad():
        past = model(**prefill(padded, mask), use_cache=True).past_key_values
    new_mask = torch.cat([mask, torch.ones(2, 1, dtype=mask.dtype)], dim=1)
    decode = {"input_ids": torch.randint(3, 99, (2, 1), generator=gen), "attention_mask": new_mask,
              "position_ids": _positions(new_mask)[:, -1:], "past_key_values": past}
    sets = [InputSet("prefill_empty_cache", (), prefill(prompt, torch.ones_like(prompt))),
            InputSet("prefill_left_padded", (), prefill(padded, mask), _padding_rows(mask)),
            InputSet("decode_after_left_padded", (), decode)]
    return Built(model, (), example, "auto", sets)


def zoo_case(zoo: Any) -> ModelCase:
    """A model of tests/zoo/cases.py's ``ZOO`` as a case, built as tests/zoo/test_zoo.py builds it: exported from
    its example (batch, size) with its ``dynamic_shapes``, run at that size and at its other one (where the
    dynamic dims must hold), at the zoo's tolerance."""

    def build() -> Built:
        torch.manual_seed(0)  # the random weights test_zoo.py verifies
        model = zoo.build().eval()
        example = zoo.inputs(*zoo.example)
        sets = [InputSet("example", (), example), InputSet("other", (), zoo.inputs(*zoo.other))]
        return Built(model, (), example, zoo.dynamic, sets)

    return ModelCase(zoo.name, build, tol=(zoo.tol, zoo.tol))


def _zoo() -> list[Any]:
    from tests.zoo.cases import ZOO

    return ZOO


def zoo_cases() -> list[ModelCase]:
    """Every zoo model as a case (not in ``CASES``: 49 exports are too slow for every test run)."""
    return [zoo_case(z) for z in _zoo()]


CASES = [
    ModelCase("cnn", _cnn),
    ModelCase("control_flow", _control_flow),
    ModelCase("gpt2", _gpt2, tol=(1e-4, 1e-3)),
    ModelCase("llama", _llama, tol=(1e-4, 1e-3)),
    ModelCase("llama_kv", _llama_kv, tol=(1e-4, 1e-3)),
    ModelCase("llama_int4", _llama_int4, tol=(1e-4, 1e-3), quantize=INT4),
    # layer norms without bias: onnxruntime 1.18 aborts at load on a LayerNormalization without its bias input
    *(zoo_case(z) for z in _zoo() if z.name == "modernbert"),
]

_NAMES = {torch.float32: "float32", torch.float16: "float16", torch.float64: "float64", torch.int64: "int64",
          torch.int32: "int32", torch.bool: "bool", torch.uint8: "uint8", torch.int8: "int8"}


def export(case: ModelCase, built: Built, *, dtype: torch.dtype = torch.float32, **options: Any) -> Any:
    """``onnxport.export`` of the case at ``options`` (``opset=``, ``target=``); verification is left to the
    runtimes (onnxport's own check in the main environment's onnxruntime changes nothing in the file)."""
    return export_each(case, built, [options], dtype=dtype)[0]


def export_each(case: ModelCase, built: Built, variants: list[dict[str, Any]], *,
                dtype: torch.dtype = torch.float32) -> list[Any]:
    """``export`` at each of ``variants`` (dicts of ``opset=``, ``target=``), from one capture."""
    half = {"dtype": torch.float16} if dtype == torch.float16 else {}
    progs = onnxport.export_each(built.model, built.args, built.kwargs, variants=variants,
                                 dynamic_shapes=built.dynamic_shapes, verify=False, **half)
    return [prog.quantize(**case.quantize) if case.quantize else prog for prog in progs]


def write_case(case: ModelCase, built: Built, prog: Any, directory: str, *, dtype: torch.dtype = torch.float32) -> str:
    """Write ``prog`` and every input set of ``built`` (with eager float32's outputs) to ``directory``."""
    os.makedirs(directory, exist_ok=True)
    prog.save(os.path.join(directory, "model.onnx"))
    atol, rtol = F16_TOL if dtype == torch.float16 else case.tol
    sets = []
    for s in built.sets:
        flat = prog.flatten_inputs(*copy.deepcopy((s.args, s.kwargs)))
        with torch.no_grad():
            reference = (built.half_reference if dtype == torch.float16 else None) or built.reference or built.model
            outputs = [t for t in prog.onnx_leaves(reference(*copy.deepcopy(s.args), **copy.deepcopy(s.kwargs)))]
        skip = s.ignore(outputs) if s.ignore else [None] * len(outputs)
        inputs = []
        for value, tensor in zip(prog.model.graph.inputs, flat):
            if tensor.is_floating_point() and value.dtype is not None:
                tensor = tensor.to(_torch_dtype(value.dtype.numpy()))  # float16 inputs of a float16 export
            inputs.append(_write(directory, f"{s.name}.in{len(inputs)}", value.name, tensor))
        expected = []
        for value, tensor, mask in zip(prog.model.graph.outputs, outputs, skip):
            tensor = tensor.detach().float() if tensor.is_floating_point() else tensor.detach()
            if mask is not None:
                tensor = tensor.masked_fill(mask, float("nan"))  # NaN expected: not compared
            spec = _write(directory, f"{s.name}.out{len(expected)}", value.name, tensor)
            expected.append({**spec, "atol": atol, "rtol": rtol})
        sets.append({"name": s.name, "inputs": inputs, "outputs": expected})
    with open(os.path.join(directory, "case.json"), "w") as f:
        json.dump({"model": case.name, "dtype": _NAMES[dtype], "sets": sets}, f, indent=1)
    return directory


def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    return torch.from_numpy(np.zeros(0, dtype=dtype)).dtype


def _write(directory: str, stem: str, name: str, tensor: torch.Tensor) -> dict[str, Any]:
    """Write ``tensor``'s raw bytes to ``<stem>.bin``; returns its spec for case.json."""
    array = tensor.detach().cpu().contiguous().numpy()
    file = f"{stem}.bin"
    array.astype(array.dtype.newbyteorder("<")).tofile(os.path.join(directory, file))
    return {"name": name, "dtype": _NAMES[tensor.dtype], "shape": list(array.shape), "file": file}
