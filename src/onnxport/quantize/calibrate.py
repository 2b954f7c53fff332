"""Calibration: run an exported model over a set of inputs and reduce chosen intermediate values.

``collect(model, feeds, names, reduce)`` runs the model in onnxruntime once per feed (a dict of input
name to numpy array), with the values ``names`` added to the graph's outputs for the time of the runs,
and folds every array a value takes into one state per value: ``state = reduce(name, array, state)``,
``state`` being None at the first feed. The model is left as it was.

Two reductions come with it: ``MinMax`` (the range of a value, what static int8 quantization needs) and
``Sample`` (a bounded random sample of the values, for a percentile or a search over clipping ranges).
Anything else is a function; the inputs' Gram matrix ``X^T X`` of a linear layer (GPTQ's Hessian), say::

    def gram(name, x, total):
        x = x.reshape(-1, x.shape[-1]).astype(np.float64)
        return (0.0 if total is None else total) + x.T @ x

    grams = collect(model, feeds, [layer_input_name], gram)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from onnxport.errors import InvalidInputError

__all__ = ["MinMax", "Sample", "check_feeds", "collect", "ranges"]

Reduce = Callable[[str, np.ndarray, Any], Any]


def check_feeds(model: ir.Model, feeds: Sequence[Mapping[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """The feeds as dicts of numpy arrays, after checking that there is at least one and that each names
    exactly the model's inputs; else an ``InvalidInputError`` naming what is wrong."""
    if isinstance(feeds, Mapping):
        raise InvalidInputError("the calibration set is one dict, not a sequence of them",
                                fix="pass a list of feeds: [{input name: array}, ...], one dict per model run")
    feeds = list(feeds) if feeds is not None else []
    if not feeds:
        raise InvalidInputError("the calibration set is empty: ranges cannot be measured without running the model",
                                fix="pass at least one feed ({input name: numpy array}); a few dozen "
                                    "representative inputs give steadier ranges")
    expected = [v.name for v in model.graph.inputs if v.name not in model.graph.initializers]
    out = []
    for i, feed in enumerate(feeds):
        if not isinstance(feed, Mapping):
            raise InvalidInputError(f"calibration feed {i} is a {type(feed).__name__}, not a dict of input name "
                                    "to array", fix=f"pass feeds as dicts keyed by the model's inputs: {expected}")
        missing = [n for n in expected if n not in feed]
        unknown = [n for n in feed if n not in expected]
        if missing or unknown:
            parts = ([f"lacks {', '.join(map(repr, missing))}"] if missing else []) + (
                [f"names {', '.join(map(repr, unknown))}, not an input of the model"] if unknown else [])
            raise InvalidInputError(f"calibration feed {i} {' and '.join(parts)}",
                                    fix=f"key each feed by the model's inputs, exactly: {expected}")
        out.append({name: _array(feed[name]) for name in expected})
    return out


def collect(model: ir.Model, feeds: Sequence[Mapping[str, np.ndarray]], names: Sequence[str],
            reduce: Reduce | Mapping[str, Reduce], *, threads: int | None = None) -> dict[str, Any]:
    """Per name in ``names`` (values of the main graph: inputs, intermediate values, outputs), the fold of
    ``reduce`` over the arrays it takes when the model runs on each feed (see the module's docstring).
    ``reduce`` is one function for all names or a mapping of name to function."""
    feeds = check_feeds(model, feeds)
    graph = model.graph
    values = _values(graph)
    names = list(dict.fromkeys(names))
    unknown = [n for n in names if n not in values]
    if unknown:
        raise InvalidInputError(f"no value of the model is named {', '.join(map(repr, unknown[:5]))}"
                                + (f" (and {len(unknown) - 5} more)" if len(unknown) > 5 else ""),
                                fix="name values of the main graph (inputs of its nodes or graph inputs)")
    reducers = {n: (reduce[n] if isinstance(reduce, Mapping) else reduce) for n in names}
    constants = {n for n in names if values[n].const_value is not None and not values[n].is_graph_input()}
    fed = {n for n in names if values[n].is_graph_input()}
    fetched = [n for n in names if n not in constants and n not in fed]
    added = [values[n] for n in fetched if not values[n].is_graph_output()]
    for value in added:
        if value.type is None:
            raise InvalidInputError(f"the value {value.name!r} has no known type, so onnxruntime cannot return it",
                                    fix="collect values whose type the exported graph records (a layer's input)")
    states: dict[str, Any] = dict.fromkeys(names)
    for n in constants:
        states[n] = reducers[n](n, np.asarray(values[n].const_value.numpy()), None)
    if not fetched and not fed:
        return states
    graph.outputs.extend(added)
    try:
        session = _session(model, threads) if fetched else None
    finally:
        for value in added:
            graph.outputs.remove(value)
    for i, feed in enumerate(feeds):
        arrays = dict(zip(fetched, _run(session, fetched, feed, i))) if fetched else {}
        arrays.update({n: feed[n] for n in fed})
        for n in names:
            if n in arrays:
                states[n] = reducers[n](n, arrays[n], states[n])
    return states


@dataclasses.dataclass
class MinMax:
    """The smallest and largest value seen (NaN and infinities left out)."""

    low: float
    high: float

    @staticmethod
    def reduce(name: str, array: np.ndarray, state: MinMax | None) -> MinMax:
        finite = array[np.isfinite(array)] if array.dtype.kind == "f" else array
        if finite.size == 0:
            return state if state is not None else MinMax(0.0, 0.0)
        low, high = float(finite.min()), float(finite.max())
        if state is None:
            return MinMax(low, high)
        return MinMax(min(state.low, low), max(state.high, high))


@dataclasses.dataclass
class Sample:
    """A random sample of at most ``limit`` finite values, every value seen having had the same chance to
    be in it (reservoir sampling in bulk), and the exact minimum and maximum."""

    limit: int = 1 << 18
    values: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.float32))
    seen: int = 0
    low: float = np.inf
    high: float = -np.inf

    def reducer(self) -> Reduce:
        """A ``reduce`` that starts every value from an empty sample of this one's limit."""
        limit = self.limit

        def reduce(name: str, array: np.ndarray, state: Sample | None) -> Sample:
            state = state if state is not None else Sample(limit)
            state.add(array)
            return state

        return reduce

    def add(self, array: np.ndarray) -> None:
        flat = np.asarray(array, dtype=np.float32).reshape(-1)
        flat = flat[np.isfinite(flat)]
        if flat.size == 0:
            return
        self.low, self.high = min(self.low, float(flat.min())), max(self.high, float(flat.max()))
        total = self.seen + flat.size
        size = min(self.limit, total)
        rng = np.random.default_rng(total)
        # A uniform sample of `size` of all values seen: how many come from the new array follows the
        # hypergeometric law; the old sample is itself uniform, so any subset of it is too.
        from_new = int(rng.hypergeometric(flat.size, self.seen, size)) if self.seen else size
        old = self.values[rng.choice(self.values.size, size - from_new, replace=False)]
        new = flat[rng.choice(flat.size, from_new, replace=False)]
        pooled = np.concatenate([old, new])
        self.values, self.seen = pooled, total

    def percentile_range(self, percentile: float) -> MinMax:
        """The range from the ``100 - percentile``-th to the ``percentile``-th percentile of the sample."""
        if self.values.size == 0:
            return MinMax(0.0, 0.0)
        low, high = np.percentile(self.values, [100.0 - percentile, percentile])
        return MinMax(float(low), float(high))


def ranges(model: ir.Model, feeds: Sequence[Mapping[str, np.ndarray]], names: Sequence[str], *,
           method: str = "minmax", percentile: float = 99.999) -> dict[str, MinMax]:
    """Per value, the range its quantization should cover: ``"minmax"`` the whole range seen,
    ``"percentile"`` the range between the ``100 - percentile`` and ``percentile`` percentiles (outliers
    clipped)."""
    if method == "minmax":
        return collect(model, feeds, names, MinMax.reduce)
    if method == "percentile":
        if not 50.0 < percentile <= 100.0:
            raise InvalidInputError(f"percentile must be above 50 and at most 100, not {percentile!r}",
                                    fix="pass percentile=99.999 (the usual choice) or another value in (50, 100]")
        samples = collect(model, feeds, names, Sample().reducer())
        return {n: s.percentile_range(percentile) for n, s in samples.items()}
    raise InvalidInputError(f"method must be 'minmax' or 'percentile', not {method!r}",
                            fix="pass method='minmax' (the full range seen) or 'percentile' (outliers clipped)")


def _array(value: object) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu().numpy()
    return np.asarray(value)


def _values(graph: ir.Graph) -> dict[str, ir.Value]:
    values: dict[str, ir.Value] = {v.name: v for v in graph.inputs if v.name}
    values.update({v.name: v for v in graph.initializers.values() if v.name})
    for node in graph:
        for v in (*node.inputs, *node.outputs):
            if v is not None and v.name:
                values.setdefault(v.name, v)
    return values


def _session(model: ir.Model, threads: int | None) -> Any:
    from onnxport.verify.session import OrtRunner

    return OrtRunner(model, threads=threads).session


def _run(session: Any, names: list[str], feed: dict[str, np.ndarray], index: int) -> list[np.ndarray]:
    try:
        return session.run(names, feed)
    except Exception as exc:  # onnxruntime raises its own types for wrong dtypes and shapes
        shapes = ", ".join(f"{k}: {v.dtype}{list(v.shape)}" for k, v in feed.items())
        raise InvalidInputError(f"calibration feed {index} ({shapes}) does not run: {str(exc).strip()}",
                                fix="give each input the dtype and rank of the model's input (see the "
                                    "model's graph inputs), as the example the model was exported with") from exc
