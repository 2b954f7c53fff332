"""What the parts of ``export_hf_census.py`` share: where rows go, the prompt and sentences, the tasks and their
model types, and how an error or a traceback is cut down to a line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import warnings
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
JSONL = os.path.join(HERE, "export_hf_census.jsonl")
MD = os.path.join(HERE, "export_hf_census.md")
LOGS = os.path.join(tempfile.gettempdir(), "export-hf-census-logs")
MAX_PARAMS = 150_000_000

PROMPT = [1, 5, 17, 33, 8]
NEW_TOKENS = 8
SENTENCES = ["w5 w17 w33 w8 w42 w7 w12", "w9 w3 w11 w64"]  # words of the tokenizer below, batched with padding
TOLERANCE = (1e-4, 1e-3)  # absolute, and relative to the eager output's largest magnitude
# A text-generation folder with no genai_config.json (a model that returns no cache: onnxruntime-genai cannot run
# it) is judged by the onnxruntime loop; its rows say so in "client".
NO_CACHE = "no cache: onnxruntime loop (no genai_config.json)"

# task -> the modeling_auto mapping its auto class reads, in the order the census runs them.
TASKS = {
    "text-generation": "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "text-classification": "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
    "fill-mask": "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
    "token-classification": "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES",
    "question-answering": "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES",
    "feature-extraction": "MODEL_MAPPING_NAMES",
    "image-classification": "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
    "object-detection": "MODEL_FOR_OBJECT_DETECTION_MAPPING_NAMES",
    "image-segmentation": "MODEL_FOR_SEMANTIC_SEGMENTATION_MAPPING_NAMES",
    "depth-estimation": "MODEL_FOR_DEPTH_ESTIMATION_MAPPING_NAMES",
}
IMAGE_TASKS = ("image-classification", "object-detection", "image-segmentation", "depth-estimation")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: " + (text.splitlines()[0] if text else "")[:300]


def error_lines(exc: BaseException, n: int = 3) -> str:
    """The first ``n`` lines of an error, joined: onnxruntime says which index of a shape is wrong on line 2."""
    text = " / ".join(line.strip() for line in str(exc).strip().splitlines()[:n] if line.strip())
    return f"{type(exc).__name__}: {text[:400]}"


def onnxport_commit() -> str:
    """The onnxport checkout the CLI runs: its commit, and "+changes" when src/ differs from it."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "src"], cwd=ROOT, capture_output=True, text=True,
                               timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"
    return head + ("+changes" if dirty else "")



# -- the model types of a task ------------------------------------------------------------------------


def task_types(task: str) -> dict[str, str]:
    """model type -> the class name the task's auto class builds for it."""
    from transformers.models.auto import modeling_auto

    out = {}
    for model_type, names in getattr(modeling_auto, TASKS[task]).items():
        out[model_type] = names[0] if isinstance(names, (list, tuple)) else names
    if task == "feature-extraction":
        out = {t: c for t, c in out.items() if _is_text_model(t)}
    return dict(sorted(out.items()))


def _is_text_model(model_type: str) -> bool:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            config = CONFIG_MAPPING[model_type]()
    except Exception:  # noqa: BLE001 - a config class that cannot be made with its defaults: not in the census
        return False
    subs = ("text_config", "vision_config", "audio_config", "encoder_config", "decoder_config", "backbone_config")
    return isinstance(getattr(config, "vocab_size", None), int) and not any(
        getattr(config, s, None) is not None for s in subs) and not getattr(config, "is_encoder_decoder", False)


def noise(line: str) -> bool:
    return bool(re.match(r"^[WI]\d{4} .*(_pytree|warnings)", line)) or "Writing model shards" in line \
        or "it/s]" in line or not line.strip()


def tail(stderr: str, n: int = 15) -> list[str]:
    return [line[:400] for line in stderr.splitlines() if not noise(line)][-n:]


def with_detail(reason: str, detail: list[str]) -> str:
    """A refusal's first line with what names its cause: torch.export's words for a capture failure ("tried:"),
    the fix line for a message that ends with a colon (a verification mismatch lists outputs, then says why)."""
    tried = next((line for line in detail if line.startswith("tried:")), None)
    if tried:
        return f"{reason} {tried}"
    if reason.rstrip().endswith(":"):
        fix = next((line for line in detail if line.startswith("fix:")), None)
        if fix:
            return f"{reason} {fix}"
    return reason


FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (.+)$')


def short_path(path: str) -> str:
    for marker in ("/site-packages/", "/src/", "/bench/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def short_trace(text: str) -> list[str]:
    frames = [line.strip() for line in text.splitlines() if FRAME.match(line)]
    return [short_path(f) for f in frames[-3:]] + [text.strip().splitlines()[-1][:300]]


def json_default(value: Any) -> Any:
    import numpy as np

    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return str(value)


def load_rows(path: str = JSONL) -> dict[tuple[str, str], dict[str, Any]]:
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                if line.strip():
                    row = json.loads(line)
                    rows[(row["task"], row["type"])] = row
    return rows


