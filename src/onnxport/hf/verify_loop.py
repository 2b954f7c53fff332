"""A decoder verified as its consumers run it: a prompt, then steps fed back through the cache.

export_hf's verification checks one call of the exported graph per input set. A state carried wrong across steps
(a cache written one position off, a recurrent state not fed back, a rotary offset right for one step only) passes
that and generates wrong tokens. :func:`check_decoder` runs the file the way ``onnxport.generate``,
onnxruntime-genai and transformers.js do, with :func:`onnxport.hf.generate.decoder_step` (the step ``generate``
takes): a batch of :data:`BATCH` prompts, the second left-padded by :data:`PADDED` tokens, on the empty cache
(a merged decoder's no-cache branch), then :data:`STEPS` tokens one at a time, each step fed the ``present.*`` of
the step before (the merged decoder's cache branch). Both sides see the same tokens: eager PyTorch's
``generate`` picks them (greedy, its own cache and processors) and the file is fed them (teacher forcing), so the
two never diverge; what is compared is forward against forward, the file's last-position logits at each step
against the raw logits transformers' ``output_logits`` gives for that step (not the processed scores), with the
float32 tolerance of ``onnxport.verify.compare``.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from typing import Any

import numpy as np
import onnx_ir as ir
import torch

from onnxport.errors import VerificationError
from onnxport.hf.generate import BRANCH, cache_layout, decoder_step, first_past, open_session
from onnxport.verify.compare import OutputCheck, compare

__all__ = ["BATCH", "PADDED", "PROMPT", "STEPS", "LoopCheck", "check_decoder", "judge", "why_not"]

BATCH = 2  # prompts in the batch
PROMPT = 6  # tokens of the longer prompt
PADDED = 2  # left padding of the shorter one
STEPS = 4  # decode steps after the prompt's


@dataclasses.dataclass
class LoopCheck:
    """The generation loop run on one file: per step (the prompt's first) its logits compared with eager
    PyTorch's; ``seconds`` what the loop took, ``export_seconds`` the export before it."""

    file: str
    branches: str  # how the steps ran: one file on an empty cache, or a merged decoder's two branches
    steps: list[OutputCheck]
    seconds: float = 0.0
    export_seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.steps)

    @property
    def failed_step(self) -> int | None:
        """The first step whose logits differ (0: the prompt's), or None."""
        return next((i for i, check in enumerate(self.steps) if not check.ok), None)

    def step_name(self, i: int) -> str:
        return "the prompt (step 0)" if i == 0 else f"decode step {i}"

    def __str__(self) -> str:
        status = "passed" if self.ok else f"FAILED at {self.step_name(self.failed_step)}"
        ratio = f", {self.seconds / self.export_seconds:.2f}x the export" if self.export_seconds > 0 else ""
        worst = ", ".join(f"{c.max_abs:.2g}" + ("" if c.ok else " MISMATCH") for c in self.steps)
        lines = [f"generation loop ({self.file}): {status}",
                 f"  batch {BATCH} (prompts of {PROMPT} and {PROMPT - PADDED} tokens, left-padded), the prompt then "
                 f"{len(self.steps) - 1} decode steps fed back through the cache ({self.branches}), teacher-forced "
                 f"with eager PyTorch's greedy tokens; took {self.seconds:.2f} s{ratio}",
                 f"  logits max_abs per step (prompt first): {worst}"]
        lines += [f"  step {i}:{check}" for i, check in enumerate(self.steps) if not check.ok]
        return "\n".join(lines)


def check_decoder(model: torch.nn.Module, program: Any, file: str) -> LoopCheck | None:
    """Run ``program`` (the exported decoder of ``model``, written as ``file``) through the generation loop of the
    module's docstring against eager ``model``; the result is recorded in the program's report
    (``report.generation``) and not judged here (:func:`judge` does). None where the loop cannot run (eager
    ``generate`` fails, a cache laid out otherwise than ``onnxport.generate`` feeds it): the report's notes say why."""
    start = time.perf_counter()
    session = open_session(program)
    inputs = {i.name: i for i in session.get_inputs()}
    prompt, mask = _prompts(model)
    try:
        layers = cache_layout(inputs)
        past = first_past(inputs, layers, BATCH, PROMPT + STEPS + 1)
        eager = _eager(model, prompt, mask)
    except Exception as exc:  # noqa: BLE001 - a model transformers' generate does not run, a cache of other names
        program.report.notes.append(f"generation loop not run: {type(exc).__name__}: {exc}"[:300])
        return None
    ids, mask = prompt.numpy().astype(np.int64), mask.numpy().astype(np.int64)
    checks, step_ids = [], ids
    for step, expected in enumerate(eager.logits):
        logits, past = decoder_step(session, inputs, step_ids, mask, past, first=step == 0)
        checks += compare(["logits"], [expected.float()], [torch.from_numpy(np.ascontiguousarray(logits))])
        chosen = eager.sequences[:, PROMPT + step].numpy()[:, None].astype(np.int64)
        mask = np.concatenate([mask, np.ones((BATCH, 1), dtype=np.int64)], axis=1)
        step_ids = chosen if layers else np.concatenate([ids, eager.sequences[:, PROMPT:PROMPT + step + 1].numpy()],
                                                       axis=1)
    branches = ("the merged decoder's use_cache_branch false for the prompt, true after" if BRANCH in inputs
                else "the prompt on an empty cache")
    report = program.report
    check = LoopCheck(file, branches, checks, time.perf_counter() - start, report.total_seconds)
    report.generation = check
    return check


def why_not(model: torch.nn.Module, program: Any) -> str:
    """Why eager ``model`` cannot be compared with ``program`` in the loop at float32's tolerance ("" where it can)."""
    logits = next((v for v in program.model.graph.outputs if v.name == "logits"), None)
    if not any(v.name.startswith("past_") for v in program.model.graph.inputs):
        return "the cache is not fed back (no past_key_values inputs)"
    if logits is None or logits.dtype != ir.DataType.FLOAT:
        return "the file's logits are not float32"
    if any(p.dtype != torch.float32 for p in model.parameters() if p.is_floating_point()):
        return "the model is not float32"
    return ""


def judge(check: LoopCheck, mode: str | bool = True) -> None:
    """Raise ``VerificationError`` naming the first step whose logits differ (only warn with ``mode="warn"``)."""
    if check.ok:
        return
    message = (f"the exported decoder {check.file} computes other logits than eager PyTorch at "
               f"{check.step_name(check.failed_step)} of a generation loop (a state carried wrong across steps: a "
               f"cache written at another position, a state not fed back)\n{check}")
    if mode == "warn":
        warnings.warn(f"onnxport: {message}", stacklevel=3)
        return
    raise VerificationError(message, verification=check,
                            fix="report the model to onnxport; pass verify_generation='warn' to keep the folder anyway")


def _prompts(model: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """Two prompts, random ids past the special tokens (seeded), the second left-padded; and their mask."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    vocab = int(config.vocab_size)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(min(3, vocab - 1), vocab, (BATCH, PROMPT), generator=generator)
    mask = torch.ones_like(ids)
    mask[1:, :PADDED] = 0
    ids[1:, :PADDED] = _pad_id(model)
    return ids, mask


def _pad_id(model: torch.nn.Module) -> int:
    for config in (getattr(model, "generation_config", None), model.config):
        for name in ("pad_token_id", "eos_token_id", "bos_token_id"):
            value = getattr(config, name, None)
            value = value[0] if isinstance(value, (list, tuple)) and value else value
            if isinstance(value, int):
                return value
    return 0


def _eager(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> Any:
    """transformers' greedy ``generate`` of ``STEPS + 1`` tokens (the prompt's and the decode steps'), with its raw
    logits per step; eos does not end it early (it still feeds the rows that chose it)."""
    new = STEPS + 1
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a generation config's sampling settings, unused with do_sample=False
        return model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new,
                              do_sample=False, num_beams=1, use_cache=True, output_logits=True,
                              return_dict_in_generate=True, pad_token_id=_pad_id(model))
