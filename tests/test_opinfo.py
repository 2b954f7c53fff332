"""torch's OpInfo database, run through the real pipeline for the ops onnxport claims.

Each claimed OpInfo runs its first samples (float32, or int64 for integer-only ops): the sample is
wrapped in a module, exported, run in onnxruntime and compared with eager. The coverage line at the
end of the session counts the samples that passed.
"""

from __future__ import annotations

import collections

import pytest
import torch

import onnxport

pytest.importorskip("expecttest")
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402

SAMPLES_PER_OP = 4

# OpInfo names (``name`` or ``name.variant``) whose samples onnxport is expected to translate.
CLAIMED = """
add sub rsub mul div.no_rounding_mode div.trunc_rounding div.floor_rounding floor_divide remainder fmod
pow neg abs sign reciprocal sqrt rsqrt exp exp2 log log2 log10 log1p expm1 sin cos tan asin acos atan atan2
sinh cosh tanh floor ceil round trunc frac erf clamp clamp_min clamp_max maximum minimum where masked_fill
lerp addcmul addcdiv logical_and logical_or logical_xor logical_not bitwise_and bitwise_or bitwise_xor
bitwise_not isnan isinf eq ne lt le gt ge
nn.functional.relu nn.functional.relu6 nn.functional.hardtanh nn.functional.gelu nn.functional.silu sigmoid
nn.functional.softplus nn.functional.hardswish nn.functional.hardsigmoid nn.functional.leaky_relu
nn.functional.elu nn.functional.selu nn.functional.celu nn.functional.mish nn.functional.logsigmoid
nn.functional.prelu nn.functional.glu
view reshape permute transpose t expand cat stack split chunk unbind squeeze unsqueeze flatten unflatten
narrow repeat tile flip roll movedim nn.functional.pad.constant
gather index_select take_along_dim nn.functional.embedding
full_like zeros_like ones_like arange tril triu
mm bmm addmm baddbmm matmul linalg.vecdot einsum nn.functional.linear
sum mean prod amax amin argmax argmin var std any all logsumexp softmax log_softmax cumsum topk sort argsort
nn.functional.conv1d nn.functional.conv2d nn.functional.conv3d nn.functional.conv_transpose1d
nn.functional.conv_transpose2d nn.functional.max_pool1d nn.functional.max_pool2d nn.functional.avg_pool1d
nn.functional.avg_pool2d nn.functional.adaptive_avg_pool1d nn.functional.adaptive_avg_pool2d
nn.functional.batch_norm nn.functional.layer_norm nn.functional.group_norm
nn.functional.scaled_dot_product_attention
""".split()

RESULTS: dict[str, collections.Counter[str]] = {}


def _key(info) -> str:
    return f"{info.name}.{info.variant_test_name}" if info.variant_test_name else info.name


INFOS = [info for info in op_db if _key(info) in CLAIMED or (info.name in CLAIMED and not info.variant_test_name)]


class _Call(torch.nn.Module):
    def __init__(self, op, tensor_slots, template):
        super().__init__()
        self.op, self.slots, self.template = op, tensor_slots, template

    def forward(self, *tensors):
        leaves, spec = self.template
        leaves = list(leaves)
        for slot, tensor in zip(self.slots, tensors):
            leaves[slot] = tensor
        args, kwargs = torch.utils._pytree.tree_unflatten(leaves, spec)
        return self.op(*args, **kwargs)


def sample_model(info, sample) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """The sample as a module whose inputs are its tensors (other arguments are baked in), and those tensors."""
    structure = ((sample.input, *sample.args), dict(sample.kwargs))
    leaves, spec = torch.utils._pytree.tree_flatten(structure)
    slots = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    return _Call(info.op, slots, (leaves, spec)), tuple(leaves[i] for i in slots)


def _run_sample(info, sample) -> None:
    model, tensors = sample_model(info, sample)
    expected = model(*tensors)
    prog = onnxport.export(model, tensors, verify=False)
    actual = prog(*tensors)
    exp = [t for t in torch.utils._pytree.tree_leaves(expected) if isinstance(t, torch.Tensor)]
    act = [t for t in torch.utils._pytree.tree_leaves(actual) if isinstance(t, torch.Tensor)]
    assert len(exp) == len(act)
    for e, a in zip(exp, act):
        torch.testing.assert_close(a, e, atol=1e-4, rtol=1e-4, equal_nan=True)


def _dtype(info) -> torch.dtype:
    supported = info.supported_dtypes("cpu")
    return torch.float32 if torch.float32 in supported else torch.int64


@pytest.mark.parametrize("info", INFOS, ids=_key)
def test_opinfo(info) -> None:
    counter = RESULTS.setdefault(_key(info), collections.Counter())
    samples = list(info.sample_inputs("cpu", _dtype(info), requires_grad=False))[:SAMPLES_PER_OP]
    failures = []
    for i, sample in enumerate(samples):
        if sample.kwargs.get("dropout_p", 0) or sample.kwargs.get("p", 0) and "dropout" in info.name:
            counter["random"] += 1  # random outputs: eager and onnxruntime draw different masks
            continue
        try:
            _run_sample(info, sample)
        except onnxport.CaptureError:
            counter["not capturable"] += 1  # torch.export itself refuses the sample: not ours to translate
            continue
        except Exception as exc:  # noqa: BLE001 - every failure is collected, then reported together
            counter["failed"] += 1
            failures.append(f"sample {i} ({sample.summary() if hasattr(sample, 'summary') else sample}): "
                            f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
            continue
        counter["passed"] += 1
    assert samples, "no samples"
    assert not failures, "\n".join(failures)


def coverage_line() -> str:
    total = collections.Counter()
    for counter in RESULTS.values():
        total.update(counter)
    ops_ok = sum(1 for c in RESULTS.values() if c["failed"] == 0 and c["passed"] > 0)
    return (
        f"OpInfo coverage: {ops_ok}/{len(RESULTS)} ops with every sample passing; samples passed "
        f"{total['passed']}/{sum(total.values())} (not capturable by torch.export: {total['not capturable']}; "
        f"random, not compared: {total['random']})"
    )
