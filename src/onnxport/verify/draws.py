"""Random draws fed at verification, so that a model whose outputs depend on noise is checked value for value.

A model that draws noise in its forward (VITS's durations and latents, a sampler's step) gives other outputs at
each call, in eager PyTorch as in onnxruntime: compared as they are, only their shapes and dtypes could be
checked. But most such noise is torch's standard draws (``randn``, ``rand`` and their ``_like`` forms), and the
translation names the value each one becomes (metadata ``RANDOM_DRAWS``, in the order the program draws them).
Verification then checks a copy of the model in which those values are inputs, fed what eager PyTorch drew on
the same set: ``recording`` keeps each draw eager PyTorch makes (at the dispatcher, in the order it makes them),
and ``feed_draws`` (the session's ``prepare``) cuts each draw's producing nodes off the copy. The model as it
ships keeps its own noise.

Where that copy would still hold a random node the outputs read (a draw inside a subgraph, dropout in training
mode, ``bernoulli``, ``normal`` with its own mean), ``plan`` gives None and the outputs stay compared by shape and
dtype. A set on which eager PyTorch drew other counts or shapes than the graph reads is a difference of the
model's (``mismatch`` says which).
"""

from __future__ import annotations

from typing import Any

import onnx_ir as ir
import torch
from onnx_ir.passes import common as common_passes
from torch.utils._python_dispatch import TorchDispatchMode

from onnxport import metadata
from onnxport.translate.driver import DRAWS, is_random, subgraphs

__all__ = ["Recording", "feed_draws", "mismatch", "plan"]


def plan(model: ir.Model) -> list[ir.Value] | None:
    """The model's draws (values of its main graph, in the order the program draws them) when feeding them
    leaves no random node that an output reads; None otherwise (no draws, or noise of another kind)."""
    names = metadata.names(model, metadata.RANDOM_DRAWS)
    if not names:
        return None
    produced = {v.name: v for node in model.graph for v in node.outputs}
    draws = [produced.get(name) for name in names]
    if any(v is None for v in draws) or len(set(names)) != len(names):
        return None  # an optimization merged or replaced a draw: keep to shapes
    cut = {id(v) for v in draws}
    seen: set[int] = set()
    stack = [v for v in model.graph.outputs if id(v) not in cut]
    while stack:  # the nodes the outputs read, with the draws as inputs
        value = stack.pop()
        node = value.producer()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if _holds_random(node):
            return None
        stack.extend(v for v in _reads(node) if v is not None and id(v) not in cut)
    return draws


def _holds_random(node: ir.Node) -> bool:
    if is_random(node):
        return True
    return any(_holds_random(inner) for graph in subgraphs(node) for inner in graph)


def _reads(node: ir.Node) -> list[ir.Value | None]:
    """The node's inputs and the outer values its subgraphs read."""
    found = list(node.inputs)
    for graph in subgraphs(node):
        for inner in graph:
            found.extend(v for v in _reads(inner) if v is not None and v.graph is not graph)
    return found


def feed_draws(names: list[str]):  # noqa: ANN201 - a session's prepare callable
    """A session's ``prepare``: the model's draws named ``names`` become its last inputs, in that order, and the
    nodes that made them go."""

    def prepare(model: ir.Model) -> None:
        produced = {v.name: v for node in model.graph for v in node.outputs}
        for name in names:
            value = produced[name]
            fed = ir.Value(name=f"{name}__fed", type=value.type, shape=value.shape)
            model.graph.inputs.append(fed)
            passed = ir.node("Identity", [fed])  # in the draw's place, under its name (it may be a graph output)
            model.graph.insert_before(value.producer(), passed)
            value.replace_all_uses_with(passed.outputs[0], replace_graph_outputs=True)
            value.name, passed.outputs[0].name = f"{name}__drawn", name
            passed.outputs[0].type, passed.outputs[0].shape = value.type, value.shape
        common_passes.RemoveUnusedNodesPass()(model)

    return prepare


class Recording(TorchDispatchMode):
    """While active, keeps each standard draw eager PyTorch makes, in order, in ``draws``."""

    def __init__(self) -> None:
        super().__init__()
        self.draws: list[torch.Tensor] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if func in DRAWS:
            self.draws.append(out.detach().clone())
        return out


def mismatch(draws: list[ir.Value], drawn: list[torch.Tensor]) -> str | None:
    """Why eager PyTorch's draws ``drawn`` cannot be fed for ``draws`` (other counts, ranks or dtypes: the graph
    does not draw as the model does), or None."""
    if len(drawn) != len(draws):
        return f"eager PyTorch drew {len(drawn)} random tensors where the ONNX graph draws {len(draws)}"
    for i, (value, tensor) in enumerate(zip(draws, drawn, strict=True)):
        rank = len(value.shape) if value.shape is not None else tensor.dim()
        if rank != tensor.dim():
            return f"eager PyTorch's draw {i} has {tensor.dim()} dims, the ONNX graph's ({value.name}) {rank}"
    return None
