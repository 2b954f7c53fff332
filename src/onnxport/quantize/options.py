"""The options of quantization, in one object: ``export(quantize=...)``, the CLI's ``--quantize``,
``export_hf(quantize=...)`` and ``OnnxProgram.quantize`` all read them as a ``QuantizeOptions``, checked when
it is made, before any model is loaded or written."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from onnxport.errors import InvalidInputError
from onnxport.quantize.kernels import check_options

__all__ = ["METHODS", "MODES", "NAMES", "QuantizeOptions", "check_kinds"]

METHODS = ("rtn", "gptq")  # weight rounding: to nearest, or GPTQ on calibration inputs
MODES = ("dynamic", "static")  # activations=
NAMES = {"int4": 4, "int8": 8}  # quantize="int4" (CLI --quantize int4): QuantizeOptions(bits=4)


@dataclasses.dataclass(frozen=True)
class QuantizeOptions:
    """How to quantize an exported model.

    Weight-only (the default): each linear layer's weight in ``bits``-bit blocks of ``block_size``, rounded
    ``symmetric``-ally or not. ``form`` defaults to the export's target: ``"matmulnbits"`` for onnxruntime
    (and onnxruntime-web), ``"dequantize"`` (opset 21's blocked ``DequantizeLinear``) for the others.
    ``skip`` keeps in float the weights whose names hold one of its strings. ``accuracy_level`` is
    ``MatMulNBits``'s: 4 computes with int8 activations (fastest on CPU), 0 in float. ``lm_head``: the bits of
    the layers that write a model output (None: ``bits``; 0: float). ``embeddings``: the bits of the embedding
    tables (0: float). ``method="gptq"`` rounds each layer with GPTQ on ``calibration``, a few typical inputs
    (each a tuple of arguments or a dict of keyword arguments), lowering the error at the same size.

    ``activations="dynamic"`` instead quantizes activations too, int8 at run time (int8 weights, per channel
    unless ``per_channel=False``); ``"static"`` with fixed ranges measured on ``calibration``. Their codes lie
    in [-64, 64] so that x86 CPUs without VNNI compute the products exactly in onnxruntime;
    ``reduce_range=False`` keeps the full [-127, 127] for CPUs with VNNI, ARM or GPUs.

    ``codes`` gives layers codes made elsewhere, kept as they are (a GPTQ or AWQ checkpoint's, as
    ``export_hf`` reads them): ``{weight name: (codes, scales, zeros[, g_idx])}`` of ``bits`` bits in blocks
    of ``block_size`` (see ``onnxport.quantize.quantize_model``); ``codes_only`` leaves the other layers in
    float.
    """

    bits: int = 4
    block_size: int = 32
    symmetric: bool = True
    form: str | None = None
    skip: Sequence[str] = ()
    accuracy_level: int = 4
    lm_head: int | None = None
    embeddings: int = 0
    method: str = "rtn"
    calibration: Sequence[Any] | None = None
    activations: str | None = None
    per_channel: bool = True
    reduce_range: bool = True
    codes: Mapping[str, Any] | None = None
    codes_only: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.skip, str):  # one name, not its characters
            object.__setattr__(self, "skip", (self.skip,))
        object.__setattr__(self, "skip", tuple(self.skip))
        check_options(self.bits, self.block_size, self.form or "matmulnbits", self.accuracy_level)
        if self.calibration is not None and (isinstance(self.calibration, (str, bytes, Mapping))
                                             or not isinstance(self.calibration, Sequence) or not self.calibration):
            raise InvalidInputError("calibration must be a non-empty list of inputs",
                                    fix="pass calibration=[(x1,), (x2,), ...] (tuples of arguments) or "
                                    "[{'input_ids': ids}, ...] (keyword arguments)")
        check_kinds(self.lm_head, self.embeddings, self.method, self.calibration)
        if self.codes is not None and not isinstance(self.codes, Mapping):
            raise InvalidInputError(f"quantize's codes must map weight names to codes, not a "
                                    f"{type(self.codes).__name__}",
                                    fix="pass codes={weight name: (codes, scales, zeros)}, or leave it out")
        if self.activations is not None:
            if self.codes is not None:
                raise InvalidInputError("activations= quantizes the weights anew, which would drop the codes given",
                                        fix="leave activations out to keep the codes (weight-only quantization)")
            if self.activations not in MODES:
                raise InvalidInputError(f"activations must be one of {', '.join(MODES)}, not {self.activations!r}",
                                        fix="pass activations='dynamic' (no calibration) or 'static' with "
                                        "calibration=")
            if self.activations == "static" and not self.calibration:
                raise InvalidInputError("activations='static' needs calibration inputs",
                                        fix="pass calibration=[inputs, ...]: a few typical inputs of the model")

    @classmethod
    def of(cls, quantize: Any) -> QuantizeOptions | None:
        """``export``'s, ``export_hf``'s and the CLI's ``quantize=`` as options (None: no quantization): True
        (the defaults), a name in ``NAMES``, a dict of the fields, or options themselves."""
        if quantize is None or quantize is False:
            return None
        if isinstance(quantize, cls):
            return quantize
        if quantize is True:
            return cls()
        if isinstance(quantize, str):
            if quantize not in NAMES:
                raise InvalidInputError(
                    f"quantize must be {' or '.join(map(repr, NAMES))} (or True, or a dict of QuantizeOptions' "
                    f"fields), not {quantize!r}",
                    fix="pass 'int4' (int4 weights, blocks of 32) or 'int8'; on the command line --quantize int4 "
                    "or --quantize int8")
            return cls(bits=NAMES[quantize])
        if not isinstance(quantize, Mapping) or set(quantize) - set(cls.names()):
            raise InvalidInputError(
                f"quantize must be True or a dict of {', '.join(sorted(cls.names()))} (or the name "
                f"{' or '.join(map(repr, NAMES))}), not {quantize!r}",
                fix="pass quantize=True (int4, blocks of 32), quantize='int8', or a dict such as "
                "quantize={'bits': 8, 'block_size': 128}")
        return cls(**quantize)

    @classmethod
    def named(cls, quantize: Any) -> frozenset[str]:
        """The options ``quantize=`` (as ``of`` takes it) sets itself: a dict's keys, a name's ``bits``, an options
        object's fields that differ from the defaults; the rest are defaults."""
        if isinstance(quantize, Mapping):
            return frozenset(quantize)
        if isinstance(quantize, str):
            return frozenset({"bits"})
        if isinstance(quantize, cls):
            default = cls()
            return frozenset(name for name in cls.names() if getattr(quantize, name) is not getattr(default, name)
                             and getattr(quantize, name) != getattr(default, name))
        return frozenset()

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The options' names, in order."""
        return tuple(field.name for field in dataclasses.fields(cls))

    def changed(self, **changes: Any) -> QuantizeOptions:
        """These options with ``changes`` (checked again); a name that is not an option is refused."""
        unknown = sorted(set(changes) - set(self.names()))
        if unknown:
            raise InvalidInputError(f"{', '.join(unknown)} {'is not an option' if len(unknown) == 1 else 'are not options'}"
                                    f" of quantization; they are {', '.join(self.names())}",
                                    fix="see onnxport.QuantizeOptions for what each does")
        return dataclasses.replace(self, **changes) if changes else self

    def form_for(self, target: str | None) -> str:
        """The weight-only form: ``form``, or the target's (None: the default target, onnxruntime)."""
        if self.form is not None:
            return self.form
        return "matmulnbits" if target is None or target.startswith("onnxruntime") else "dequantize"


def check_kinds(lm_head: int | None, embeddings: int, method: str, calibration: object) -> None:
    if lm_head not in (None, 0, 4, 8) or isinstance(lm_head, bool):
        raise InvalidInputError(f"lm_head must be None (as bits), 0 (float), 4 or 8, not {lm_head!r}",
                                fix="pass lm_head=8 to keep the output layer more precise, or lm_head=0 for float")
    if embeddings not in (0, 4, 8) or isinstance(embeddings, bool):
        raise InvalidInputError(f"embeddings must be 0 (float), 4 or 8, not {embeddings!r}",
                                fix="pass embeddings=4 or 8 to quantize the embedding tables, or leave it out")
    if method not in METHODS:
        raise InvalidInputError(f"method must be one of {', '.join(METHODS)}, not {method!r}",
                                fix="pass method='rtn' (round to nearest) or method='gptq' with calibration=[...]")
    if method == "gptq" and not calibration:
        raise InvalidInputError("method='gptq' needs calibration inputs",
                                fix="pass calibration=[inputs, ...]: a few typical inputs of the model (tuples of "
                                "arguments, or dicts of keyword arguments)")
