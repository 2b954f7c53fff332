"""time-series-forecasting: the prediction heads of PatchTST and PatchTSMixer (``PatchTSTForPrediction``,
``PatchTSMixerForPrediction``), the classes transformers.js's MODEL_FOR_TIME_SERIES_PREDICTION_MAPPING_NAMES loads.

transformers has no pipeline for the task, and its ``AutoModelForTimeSeriesPrediction`` loads TimesFM alone, so the
model is loaded by the class of its type (:data:`CLASSES`). Its ``model.onnx`` takes ``past_values`` [batch,
context_length, num_input_channels]: batch dynamic, the context the config's (the models' patching refuses any other
length). The models scale each series by its own mean and standard deviation over the context (``loc``, ``scale``,
which they return beside ``prediction_outputs``), computed in the graph; no observed-values mask is taken (every value
is observed, as transformers assumes without one, and transformers.js feeds none). Their random masking is for
pretraining and is off in the prediction heads. A head that predicts a distribution's parameters (``loss`` other than
``"mse"``) is refused: its forecasts are samples, drawn by transformers' ``generate``.
A leaf of ``onnxport.hf``: ``examples`` builds its task on it.
"""

from __future__ import annotations

from typing import Any

import torch

from onnxport.errors import InvalidInputError

__all__ = ["CLASSES", "TASK", "forecaster_class", "series_dynamic", "series_inputs"]

TASK = "time-series-forecasting"
CLASSES = {"patchtst": "PatchTSTForPrediction", "patchtsmixer": "PatchTSMixerForPrediction"}
_BATCH = 2  # the example's series


def forecaster_class(config: Any) -> str:
    """The transformers class of ``config``'s forecaster (:data:`CLASSES`); an ``InvalidInputError`` for another
    type, or a head that predicts a distribution's parameters."""
    model_type = getattr(config, "model_type", None)
    if model_type not in CLASSES:
        raise InvalidInputError(
            f"onnxport exports {TASK} for {', '.join(CLASSES)} models (as transformers.js runs them), not "
            f"{model_type}", fix="export a PatchTST or PatchTSMixer checkpoint, or the model from Python with "
            "onnxport.export(model, (), {'past_values': ...})")
    if getattr(config, "loss", "mse") != "mse":
        raise InvalidInputError(
            f"this {model_type} head predicts the parameters of a {getattr(config, 'distribution_output', '?')} "
            f"distribution (loss={config.loss!r}), whose forecasts transformers draws as samples with generate",
            fix='export a checkpoint trained with loss "mse" (point forecasts)')
    return CLASSES[model_type]


def series_inputs(model: torch.nn.Module, config: Any) -> dict[str, Any]:
    """Two seeded random series of ``config.context_length`` steps and ``num_input_channels`` channels, each channel
    off zero and wider than one (so that the scaling the model does is exercised)."""
    generator = torch.Generator().manual_seed(0)
    shape = (_BATCH, config.context_length, config.num_input_channels)
    offsets = torch.randn(_BATCH, 1, config.num_input_channels, generator=generator) * 5
    return {"past_values": torch.randn(shape, generator=generator) * 3 + offsets}


def series_dynamic(model: torch.nn.Module, config: Any) -> dict[str, Any]:
    """Dynamic batch; the context length and channels are the config's."""
    return {"past_values": {0: torch.export.Dim.DYNAMIC}}
