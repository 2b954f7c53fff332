"""Shape functions of older torch releases that fix a dynamic dim newer torch keeps dynamic, replaced during capture.

torch 2.10 guards on sizes in a few places where later releases compute the same result without a guard;
a guard on a dim the user declared dynamic fails the capture (``Not all values of h ... satisfy the generated
guard (h - 1) % 2 == 0``) or fixes the dim at the example's size. :func:`patched`, entered for each capture
attempt, puts the later releases' guard-free computation in their place, on the releases ``versions`` names,
and undoes it after. Each replacement gives what torch's own function gives at the example's sizes (the same
output sizes, the same ops), so the ONNX model computes what the newer release's does:

- pooling's output size (``div_rtn`` of ``_meta_registrations``): a floor division whose remainder test
  guards ``(h + 2*pad - kernel) % stride``; Python's ``//`` on ints is already that floor division, as later
  torch has it.
- the convolution backend a fake convolution asks for (``torch._C._select_conv_backend``, to pick the output's
  memory format): chosen on the symbolic sizes, it guards one sample's element count against ``2**31 - 1``
  (``4*l <= 2147483647``), a bound torch 2.10's solver for dynamic dims then fails on (``AssertionError:
  l <= 2147483647/4``); chosen on the example's sizes here. The backend decides only the fake output's
  strides, not the graph.
- the attention kernel ``scaled_dot_product_attention`` picks on the CPU (``sdp::select_sdp_backend_cpp``):
  its test of a 4-d mask's batch (``mask.size(0) == 1``) guards, and a batch-1 example fixes the batch at 1
  even in size-oblivious capture (the graph then fails at batch 2); with the math kernel alone there is no
  choice to make. The graph keeps ``aten.scaled_dot_product_attention`` whichever kernel the fake run
  picked (the kernel is chosen again when the ONNX model's runtime, or torch, runs it).
- ``repeat_interleave``'s ``output_size``, which torch 2.10 converts to an int (``2*batch == 4``) where later
  torch keeps it symbolic: left out when ``repeats`` is a number, the output's size being the same without it.
- ``torch._higher_order_ops.map``: tracing its body and its fake output from every row of the mapped inputs
  (iterating a dynamic dim fixes it); from the first row, the output broadcast to all rows, as later torch
  does.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.utils._pytree as pytree

from onnxport import versions

__all__ = ["patched"]


@contextlib.contextmanager
def patched() -> Iterator[None]:
    """The replacements this torch needs, for the duration of the block (none on a recent torch)."""
    with contextlib.ExitStack() as stack:
        if versions.pooling_size_guards_remainder():
            from torch import _meta_registrations

            stack.enter_context(_replaced(_meta_registrations, "div_rtn", lambda _: _floor_division))
        if versions.conv_backend_guards_sizes():
            stack.enter_context(_replaced(torch._C, "_select_conv_backend", _at_example_sizes))
        if versions.sdpa_choice_guards_mask_batch():
            from torch.nn.attention import SDPBackend, sdpa_kernel

            stack.enter_context(sdpa_kernel([SDPBackend.MATH]))
        if versions.repeat_interleave_guards_output_size():
            stack.enter_context(_replaced(torch.Tensor, "repeat_interleave", _without_output_size))
            stack.enter_context(_replaced(torch, "repeat_interleave", _without_output_size))
        if versions.map_traces_every_row():
            hop_map = importlib.import_module("torch._higher_order_ops.map")  # the package's `map` is the function
            stack.enter_context(_replaced(hop_map, "trace_map", lambda _: _trace_map_first_row))
            stack.enter_context(_replaced(hop_map, "map_dense", _fake_map_first_row))
        yield


@contextlib.contextmanager
def _replaced(owner: Any, name: str, replacement: Callable[[Any], Any]) -> Iterator[None]:
    """``owner.name`` set to ``replacement(original)`` inside the block; after it, as it was (a class's
    attribute inherited from a base, ``torch.Tensor``'s methods from ``TensorBase``, inherited again)."""
    if not hasattr(owner, name):  # a release without it: nothing to replace
        yield
        return
    inherited = isinstance(owner, type) and name not in vars(owner)
    original = getattr(owner, name)
    setattr(owner, name, replacement(original))
    try:
        yield
    finally:
        if inherited:
            delattr(owner, name)
        else:
            setattr(owner, name, original)


def _floor_division(x: Any, y: Any) -> Any:
    """``div_rtn``: division rounding toward negative infinity, which Python's ``//`` is (torch 2.10 adds a
    correction for a remainder of the divisor's other sign, which ``%`` never gives, and guards on it)."""
    return x // y


def _example_sized(value: Any) -> Any:
    """A tensor of symbolic sizes or strides as an empty one of the example's sizes and strides, on the same
    (fake) device and of the same dtype and layout; anything else as it is."""
    if not isinstance(value, torch.Tensor) or value.layout != torch.strided or value.is_mkldnn:
        return value
    sizes, strides = value.shape, value.stride()
    if not any(isinstance(n, torch.SymInt) for n in (*sizes, *strides)):
        return value
    return torch.empty_strided([_hint(n) for n in sizes], [_hint(n) for n in strides], dtype=value.dtype,
                               device=value.device)


def _hint(n: Any) -> int:
    return versions.symint_hint(n, 1) if isinstance(n, torch.SymInt) else int(n)


def _at_example_sizes(select: Any) -> Any:
    @functools.wraps(select)
    def select_conv_backend(*args: Any, **kwargs: Any) -> Any:
        return select(*[_example_sized(a) for a in args], **{k: _example_sized(v) for k, v in kwargs.items()})

    return select_conv_backend


def _without_output_size(repeat_interleave: Any) -> Any:
    """``repeat_interleave`` that leaves out ``output_size`` when ``repeats`` is a number: the output's size is
    then the input's times ``repeats`` whatever it says (a hint that saves a device sync), and torch 2.10 reads
    it as an int, fixing the size (diffusers passes ``output_size=mask.shape[0] * heads``). A tensor of repeats
    keeps it: without it, the size is data-dependent."""
    @functools.wraps(repeat_interleave)
    def without_output_size(*args: Any, **kwargs: Any) -> Any:
        repeats = args[1] if len(args) > 1 else kwargs.get("repeats")
        if kwargs.get("output_size") is not None and isinstance(repeats, (int, torch.SymInt)):
            kwargs = {k: v for k, v in kwargs.items() if k != "output_size"}
        return repeat_interleave(*args, **kwargs)

    return without_output_size


def _first_rows(xs: Any) -> Any:
    from torch._higher_order_ops.utils import first_slice_copy

    return pytree.tree_map(first_slice_copy, xs)


def _fake_map_first_row(original: Any) -> Any:
    """``map_dense`` as the fake map calls it: the body run on the first row, its outputs broadcast to every
    row (contiguous, as ``torch.stack`` gives them); on real tensors, torch's own."""
    @functools.wraps(original)
    def map_dense(f: Any, xs: Any, pos_args: Any, *rest: Any, **kwargs: Any) -> Any:
        leaves = pytree.tree_leaves(xs)
        if not leaves or not all(isinstance(t, torch._subclasses.FakeTensor) for t in leaves):
            return original(f, xs, pos_args, *rest, **kwargs)
        out = f(*_first_rows(xs), *pos_args)
        rows = leaves[0].shape[0]
        return pytree.tree_map_only(
            torch.Tensor, lambda t: t.unsqueeze(0).expand(rows, *t.shape).clone(memory_format=torch.contiguous_format),
            out,
        )

    return map_dense


def _trace_map_first_row(
    proxy_mode: Any, func_overload: Any, f: Any, xs: Any, pos_args: Any, *rest: Any, **kwargs: Any
) -> Any:
    """``trace_map``: the body traced on the first row of ``xs`` (torch 2.10 unstacks every row for it)."""
    from torch._higher_order_ops.utils import reenter_make_fx
    from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing, track_tensor_tree

    with disable_proxy_modes_tracing():
        body_graph = reenter_make_fx(f)(*_first_rows(xs), *pos_args)
    name = proxy_mode.tracer.get_fresh_qualname("body_graph_")
    proxy_mode.tracer.root.register_module(name, body_graph)
    fake_outs = func_overload(body_graph, xs, pos_args, *rest, **kwargs)
    proxy_args = pytree.tree_map(proxy_mode.tracer.unwrap_proxy, (body_graph, list(xs), list(pos_args), *rest))
    extra = {k: v for k, v in kwargs.items() if v}  # as later torch records them: only those set
    out_proxy = proxy_mode.tracer.create_proxy("call_function", func_overload, proxy_args, extra, name="map_impl")
    return track_tensor_tree(fake_outs, out_proxy, constant=None, tracer=proxy_mode.tracer)
