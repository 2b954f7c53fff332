"""A transformers model built from a local directory without loading its weights (``export_hf``'s default).

The model is built on the meta device in the dtype ``from_pretrained`` would choose, and its weights are
the directory's safetensors files, read by their headers (``onnxport.weights``): capture sees them
memory-mapped and never reads them, and ``OnnxProgram.save`` copies each one's bytes into
the model's data file. What ``from_pretrained`` does besides reading the files is done as it does it:
checkpoint names renamed as its loader renames them (base-model prefix, legacy names), tied weights taken
from the one the checkpoint holds, ``_keep_in_fp32_modules`` kept in float32, and the buffers a model
computes itself (rotary ``inv_freq``, ``position_ids``) computed by the model's own ``initialize_weights``, and
the weights transformers converts on load (a mixture of experts saved one tensor per expert, merged into one per
layer) computed by transformers' own conversion, one layer at a time, when the model is saved. A checkpoint that
lacks weights transformers would initialise at random is refused, naming them. The model runs on the meta device
(for the KV cache's shapes) with transformers' shortcuts that read a tensor's values turned off, as under
torch.export.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import os
import re
import sys
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils import _pytree as pytree

from onnxport.errors import InvalidInputError
from onnxport.hf.cache import registered
from onnxport.hf.signature import cache_of
from onnxport.weights import Derived, Weights

__all__ = ["loaded_size", "meta_cache", "meta_call", "meta_model"]

_IN_MEMORY = "export with the model loaded instead (export_hf(..., streaming=False), or --in-memory on the command line)"


def meta_model(directory: str, auto: str, config: Any, dtype: torch.dtype | None = None
               ) -> tuple[torch.nn.Module, Weights]:
    """The model of ``directory`` for the auto class (or model class) ``auto`` on the meta device (but for the buffers it
    computes itself), and its weights named as the model names them; in ``dtype`` when given (the files' weights are
    then converted as they are copied), else in the checkpoint's."""
    import transformers

    try:
        weights = Weights.open(directory)
    except InvalidInputError as exc:
        raise InvalidInputError(exc.message, fix=f"{_IN_MEMORY}; or {exc.fix}") from None
    dtype = dtype or _checkpoint_dtype(config, weights)
    cls = getattr(transformers, auto)  # an auto class, or a model class (a pipeline's CLIPTextModel)
    build = cls.from_config if hasattr(cls, "from_config") else cls._from_config
    with torch.device("meta"):
        model = build(config, dtype=dtype).eval()
    _keep_in_float32(model, dtype)
    names, derived = _checkpoint_names(model, weights)
    _compute_buffers(model, {**names, **dict.fromkeys(derived, "")})
    generation = os.path.join(directory, "generation_config.json")
    if os.path.isfile(generation) and getattr(model, "generation_config", None) is not None:
        model.generation_config = transformers.GenerationConfig.from_pretrained(directory)
    return model, weights.renamed(names).with_derived(derived)


def loaded_size(directory: str, dtype: torch.dtype | None) -> int | None:
    """Bytes the weights of ``directory``'s safetensors files take once loaded, their floating-point ones in
    ``dtype`` (None: as stored); None where the directory has no safetensors files to read."""
    try:
        weights = Weights.open(directory)
    except InvalidInputError:
        return None
    return weights.nbytes(dtype)


def _checkpoint_dtype(config: Any, weights: Weights) -> torch.dtype:
    """The dtype ``from_pretrained(dtype="auto")`` (its default) builds the model in."""
    dtype = getattr(config, "dtype", None)
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    if isinstance(dtype, torch.dtype):
        return dtype
    dtypes = [weights.dtype(k) for k in sorted(weights)]
    floating = [d for d in dtypes if d is not None and d.is_floating_point and d.itemsize > 1]
    return floating[0] if floating else torch.float32


def _keep_in_float32(model: torch.nn.Module, dtype: torch.dtype) -> None:
    """Modules transformers keeps in float32 when it loads the model in float16 (or bfloat16, "strict")."""
    patterns = set(getattr(model, "_keep_in_fp32_modules_strict", None) or ()) if dtype in (torch.float16, torch.bfloat16) else set()
    if dtype == torch.float16:
        patterns |= set(getattr(model, "_keep_in_fp32_modules", None) or ())
    if not patterns:
        return
    matches = re.compile("|".join(f"({p.replace('*', '.*')})" for p in sorted(patterns))).search
    for name, module in model.named_modules():
        for kind in ("_parameters", "_buffers"):
            slots = getattr(module, kind)
            for attr, tensor in list(slots.items()):
                if tensor is not None and tensor.is_floating_point() and matches(f"{name}.{attr}" if name else attr):
                    cast = tensor.to(torch.float32)
                    slots[attr] = torch.nn.Parameter(cast, tensor.requires_grad) if kind == "_parameters" else cast


def _checkpoint_names(model: torch.nn.Module, weights: Weights) -> tuple[dict[str, str], dict[str, Derived]]:
    """Each state-dict key of the model found in the checkpoint -> the checkpoint's name for it, renamed as
    transformers' loader renames (prefix added or removed, legacy names); and the weights transformers converts
    on load (experts merged into one tensor, a projection split), computed from the checkpoint's as it would
    compute them, when they are read."""
    expected = model.state_dict()
    renamings, converters = _conversions(model)
    prefix = getattr(model, "base_model_prefix", None) or None
    found: dict[str, str] = {}
    groups: dict[str, _Conversion] = {}
    for key in sorted(weights, key=_natural):  # experts in their order: 2 before 10, as transformers sorts them
        name, pattern = _rename(key, renamings, converters, prefix, expected)
        if name not in expected and key in expected:
            name, pattern = _rename(key, [], [], prefix, expected)
        if name not in expected:
            continue
        if pattern is None:
            found.setdefault(name, key)
            continue
        converter = next((c for c in converters if pattern in c.source_patterns), None)
        if converter is None:  # a rule without transformers' converter objects: nothing onnxport can follow
            raise InvalidInputError(f"transformers converts the checkpoint's weight {key} into {name} when it loads "
                                    "it, which onnxport cannot follow without loading it", fix=_IN_MEMORY)
        groups.setdefault(name, _Conversion(model, converter, weights)).add(pattern, key)
    derived = {}
    for name, conversion in groups.items():
        for target in conversion.targets(name, expected):
            like = expected[target]
            derived[target] = Derived(tuple(like.shape), conversion.dtype, functools.partial(conversion.value, name,
                                                                                              target))
    return found, derived


class _Conversion:
    """The checkpoint's tensors one of transformers' ``WeightConverter``s turns into a model's weights (one layer's
    experts into ``gate_up_proj`` and ``down_proj``, say), and the conversion run when a weight is read: by
    transformers' own operations, on a fresh copy of the converter, the last layer's results kept for the other
    weights it gives."""

    def __init__(self, model: torch.nn.Module, converter: Any, weights: Weights) -> None:
        self.model, self.converter, self.weights = model, converter, weights
        self.sources: list[tuple[str, str]] = []  # (source pattern, checkpoint key), in transformers' order
        self._last: tuple[str, dict[str, torch.Tensor]] | None = None

    def add(self, pattern: str, key: str) -> None:
        self.sources.append((pattern, key))

    @property
    def dtype(self) -> torch.dtype:
        return self.weights.dtype(self.sources[0][1])

    def targets(self, name: str, expected: Any) -> list[str]:
        """The model's weights this conversion gives: ``name``, and the others of a one-to-many converter."""
        first = self.converter.target_patterns[0]
        names = [name.replace(first, pattern, 1) for pattern in self.converter.target_patterns]
        return [n for n in dict.fromkeys(names) if n in expected]

    def value(self, name: str, target: str) -> torch.Tensor:
        if self._last is None or self._last[0] != name:
            self._last = None  # the previous layer's tensors go before this one's are read
            self._last = (name, self._convert(name))
        value = self._last[1].get(target)
        if value is None:
            raise InvalidInputError(f"transformers' conversion of the checkpoint gave no {target}",
                                    fix=_IN_MEMORY)
        return value[0] if isinstance(value, list) else value

    def _convert(self, name: str) -> dict[str, Any]:
        converter = copy.deepcopy(self.converter)
        for pattern, key in self.sources:
            converter.add_tensor(name, key, pattern, functools.partial(self.weights.load, key))
        with torch.no_grad():
            return converter.convert(name, model=self.model, config=self.model.config)


def _natural(key: str) -> list[Any]:
    return [int(part) if part.isdigit() else part for part in key.split(".")]


def _conversions(model: torch.nn.Module) -> tuple[list[Any], list[Any]]:
    """transformers' renamings and conversions of checkpoint names for this model (none where it has no such API)."""
    try:
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import WeightConverter, WeightRenaming
    except ImportError:
        return [], []
    mapping = get_model_conversion_mapping(model)
    return ([m for m in mapping if isinstance(m, WeightRenaming)], [m for m in mapping if isinstance(m, WeightConverter)])


def _rename(key: str, renamings: list[Any], converters: list[Any], prefix: str | None, expected: Any
            ) -> tuple[str, str | None]:
    """The model's name for checkpoint ``key`` and the source pattern of the conversion (not a renaming) that
    produced it, if one did: transformers' own rule where it has one, else the base-model prefix added or removed."""
    try:
        from transformers.core_model_loading import rename_source_key
    except ImportError:
        rename_source_key = None
    if rename_source_key is not None:
        return rename_source_key(key, renamings, converters, prefix, expected)
    if prefix and key.startswith(f"{prefix}.") and key[len(prefix) + 1:] in expected:
        return key[len(prefix) + 1:], None
    if prefix and f"{prefix}.{key}" in expected:
        return f"{prefix}.{key}", None
    return key, None


def _compute_buffers(model: torch.nn.Module, names: dict[str, str]) -> None:
    """Give the buffers the checkpoint lacks (rotary ``inv_freq``, ``position_ids``) the values transformers
    gives them after loading: real tensors, filled by the model's ``initialize_weights``."""
    groups: dict[int, list[str]] = {}
    for key, tensor in [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]:
        groups.setdefault(id(tensor), []).append(key)
    params = {id(p) for p in model.parameters()}
    missing = [keys[0] for ident, keys in groups.items() if ident in params and not any(k in names for k in keys)]
    if missing:
        raise InvalidInputError(
            f"the checkpoint lacks {len(missing)} weights of {type(model).__name__} "
            f"({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}): transformers would initialise them "
            "at random",
            fix=f"check that the directory holds this task's model (its head included); {_IN_MEMORY}",
        )
    for key, tensor in [*model.named_parameters(), *model.named_buffers()]:
        if key in names:
            tensor._is_hf_initialized = True  # transformers' mark of a loaded tensor: its init leaves it alone
    for key, buffer in list(model.named_buffers()):
        if key not in names:  # zeros, not transformers' empty_like, so that the same export gives the same file
            owner, _, attr = key.rpartition(".")
            model.get_submodule(owner)._buffers[attr] = torch.zeros_like(buffer, device="cpu")
    if hasattr(model, "initialize_weights"):
        model.initialize_weights()


def meta_cache(model: torch.nn.Module, **inputs: Any) -> Any:
    """The KV cache ``model(**inputs, use_cache=True)`` returns, from a run on the meta device (no weight is
    read): zeros of its shapes and dtypes. Without an attention mask: transformers reads a mask's values."""
    meta = {k: v.to("meta") if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
    with _all_meta(model), torch.no_grad():
        cache = cache_of(model(**meta, use_cache=True))
    with registered():
        leaves, spec = pytree.tree_flatten(cache)
        real = [torch.zeros(leaf.shape, dtype=leaf.dtype) if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves]
        return pytree.tree_unflatten(real, spec)


def meta_call(module: torch.nn.Module, **inputs: Any) -> Any:
    """What ``module(**inputs)`` returns, run on the meta device (shapes and dtypes; no weight is read)."""
    meta = {k: v.to("meta") if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
    with _all_meta(module), torch.no_grad():
        return module(**meta)


@contextlib.contextmanager
def _all_meta(model: torch.nn.Module) -> Iterator[None]:
    """The model's real buffers on the meta device for the block, so that a run on meta inputs stays there."""
    swapped = []
    silenced = []
    experts = []
    try:
        for module in model.modules():
            # Experts run as transformers' batched matmuls, which read no values: its plain loop iterates over the
            # experts hit, and older torch's meta kernel of grouped_mm takes bfloat16 only.
            config = getattr(module, "config", None)
            if getattr(config, "_experts_implementation", None) not in (None, "batched_mm") and _batched_experts():
                experts.append((config, config._experts_implementation))
                config._experts_implementation = "batched_mm"
            for attr, buffer in list(module._buffers.items()):
                if buffer is not None and not buffer.is_meta:
                    swapped.append((module, attr, buffer))
                    module._buffers[attr] = buffer.to("meta")
            # transformers' warning about padding without a mask reads input_ids' values (a pad id in the
            # config): on meta inputs there are none to read, and no warning to give.
            if callable(getattr(module, "warn_if_padding_and_no_attention_mask", None)):
                silenced.append(module)
                module.warn_if_padding_and_no_attention_mask = _no_warning
        with _meta_is_tracing():
            yield
    finally:
        for config, implementation in reversed(experts):
            config._experts_implementation = implementation
        for module, attr, buffer in swapped:
            module._buffers[attr] = buffer
        for module in silenced:
            del module.warn_if_padding_and_no_attention_mask


def _batched_experts() -> bool:
    """Whether transformers has its batched-matmul experts implementation."""
    try:
        from transformers.integrations.moe import ExpertsInterface
    except ImportError:
        return False
    return "batched_mm" in ExpertsInterface._global_mapping


@contextlib.contextmanager
def _meta_is_tracing() -> Iterator[None]:
    """transformers' ``is_tracing(tensor)`` true of meta tensors for the block: where it would read a tensor's
    values to take a shortcut (skip an all-ones mask, test a cache offset for 0), it takes the path that keeps
    them tensors, as it does under torch.export. A meta tensor has no values to read."""
    try:
        from transformers.utils import import_utils
    except ImportError:
        yield
        return
    original = import_utils.is_tracing

    def is_tracing(tensor: Any = None) -> bool:
        return original(tensor) or (isinstance(tensor, torch.Tensor) and tensor.is_meta)

    holders = [module for name, module in list(sys.modules.items())
               if name.startswith("transformers") and getattr(module, "is_tracing", None) is original]
    for module in holders:
        module.is_tracing = is_tracing
    try:
        yield
    finally:
        for module in holders:
            module.is_tracing = original


def _no_warning(*args: Any, **kwargs: Any) -> None:
    return None
