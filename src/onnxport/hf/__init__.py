"""Everything onnxport knows about transformers, in one place.

- ``cache``: its KV caches (``DynamicCache``, ``EncoderDecoderCache``, ``StaticCache``) as pytree nodes
  while onnxport exports, verifies or runs a model, with the ONNX names onnxruntime-genai and optimum use;
- ``patches``: what changes in its models around each capture, and only then, and the one-token decode
  step widened; ``signature``: the name a model takes its cache by (``cache`` from 5.24, else
  ``past_key_values``), read from its ``forward``; ``blocks``: the cache handed to repeated layers by slots;
- ``integration``: those hooked into capture (``onnxport.capture.integrations``), registered here, so the
  core stages never import this package;
- ``export`` (``export_hf`` and its tasks; ``tasks``: the task of a directory, ``--task auto``; ``sentence``:
  a sentence-transformers directory's pooling in the graph), ``runner`` (``pipeline``: an exported folder run
  in onnxruntime behind transformers' pipeline; ``question_answering``: the one transformers 5 lacks),
  ``stream`` (a model built without loading its weights), ``prequantized`` (the codes of GPTQ and AWQ
  checkpoints, kept by ``export_hf``), ``seq2seq`` (encoder-decoder models split as optimum splits them),
  ``generate`` (greedy generation in onnxruntime) and ``demo`` (``onnxport demo``'s Llama).

Written for transformers 5.x, through its public API where it has one (the cache classes' layers and
tensors, ``config``, the models' signatures); tested in CI on the oldest and the newest release supported
(pyproject.toml and ``requirements-transformers-*.txt``). transformers is imported only when a function
here needs it, never by importing ``onnxport``.
"""

from onnxport.capture.integrations import register
from onnxport.hf.examples import TASKS, Task
from onnxport.hf.export import export_hf
from onnxport.hf.genai import genai_config
from onnxport.hf.generate import generate, generate_seq2seq
from onnxport.hf.integration import TransformersIntegration
from onnxport.hf.runner import OnnxRuntimeModel, SentenceSimilarityPipeline, pipeline
from onnxport.hf.seq2seq import Seq2SeqPrograms, export_seq2seq
from onnxport.hf.signature import cache_argument, cache_of
from onnxport.hf.tasks import pick_task

register(TransformersIntegration())

__all__ = [
    "TASKS",
    "OnnxRuntimeModel",
    "Seq2SeqPrograms",
    "SentenceSimilarityPipeline",
    "Task",
    "TransformersIntegration",
    "cache_argument",
    "cache_of",
    "export_hf",
    "export_seq2seq",
    "generate",
    "generate_seq2seq",
    "genai_config",
    "pick_task",
    "pipeline",
]
