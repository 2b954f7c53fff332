"""The ``transformers.exporters`` column of ``image_text_census.py``: transformers 5.23's own ONNX exporter on the same
tiny model, as its source intends a generative model to be exported.

``OnnxExporter().export_for_generation(model, inputs, OnnxConfig(dynamic=True))`` (``exporters/base.py``) runs
``generate`` on the inputs to capture a prefill and a decode call (``utils.decompose_for_generation``); a model it
finds multimodal (an image encoder from ``get_encoder("image")`` and a language model from ``get_decoder()``) has its
prefill split further, one component per submodule (``image_encoder``, ``multi_modal_projector``,
``language_model``, ``lm_head``) beside ``decode``, the merge of image rows into the token embeddings "left outside
the exported graphs", and each component exported with ``torch.onnx.export``. It needs onnxscript
(``requirements-bench.txt``).

In transformers 5.23 ``generate`` encodes the images before its first forward (``mm_encoder_outputs``), so the
prefill call it captures never runs the image encoder or the projector: a multimodal split holds ``language_model``,
``lm_head`` and ``decode`` alone, with no image path (the row says so).

An encoder-decoder whose encoder reads the images (a VisionEncoderDecoder) gets ``prefill`` and ``decode`` alike,
both taking ``encoder_outputs``: generate runs the encoder before the first forward, so the files hold no encoder
and the images never enter them (the row says so).

Run: only a ``prefill``/``decode`` split (a model it does not split by modality) is run, by a greedy loop here over
the components' onnxruntime sessions (``ExportedModel.from_pretrained``'s runners, fed the captured calls' kwargs);
a multimodal split is "exported, not run": its files hold no token embedding, and the merge (and what the model does
between its encoder and its projector) is the caller's, so no loop can be written for it from the files alone.
"""

from __future__ import annotations

import os
import time
import traceback
from typing import Any

from census import run_in_fork
from export_hf_census_common import LOGS, first_line, json_default

NOT_RUN = ("exported, not run: the files hold no token embedding and leave the merge of image rows into it (and the "
           "step between the image encoder and the projector) to the caller (decompose_multimodal)")


def check_exporters(model: Any, inputs: dict[str, Any], eager: dict[str, Any], model_type: str, work: str,
                    limit: float) -> dict[str, Any]:
    """The column's result: exported (its components, and whether its files generate eager's tokens) or not."""
    if limit < 10:
        return {"status": "timeout", "reason": "no time left in the row"}
    out = os.path.join(work, "hf-exporters")

    def job(result: dict[str, Any], save: Any) -> None:
        start = time.perf_counter()
        try:
            import transformers.exporters as ex

            exporter = ex.OnnxExporter()
            exported = exporter.export_for_generation(model, dict(inputs), ex.OnnxConfig(dynamic=True))
            exported.save_pretrained(out)
            result.update(status="exported", components=list(exported.components))
        except Exception as exc:  # noqa: BLE001
            cause = exc.__cause__ or exc.__context__
            result.update(status="fails", reason=first_line(exc)[:400],
                          cause=first_line(cause)[:400] if cause is not None else None,
                          trace=traceback.format_exc().strip().splitlines()[-1][:300])
        result["export_s"] = round(time.perf_counter() - start, 1)
        save()
        if result["status"] != "exported":
            return
        if "image_encoder" not in result["components"] and "prefill" not in result["components"]:
            result["run"] = "exported, not run: no image_encoder among its components (the image path was not " \
                            f"captured){_why_no_encoder(model, inputs)}"
            return
        if set(result["components"]) != {"prefill", "decode"}:
            result["run"] = NOT_RUN
            return
        try:
            result["run"] = run_loop(out, inputs, eager)
        except Exception as exc:  # noqa: BLE001
            result["run"] = f"client fails: {first_line(exc)[:300]}"

    saved, code, seconds = run_in_fork(job, {"status": "timeout"}, os.path.join(LOGS, "image-text-to-text",
                                                                                  model_type + ".exporters.log"),
                                       limit, prefix="image-text-census-", default=json_default)
    result = saved or {"status": "fails", "reason": "the child wrote nothing"}
    if code is None:
        result.update(status="timeout" if result.get("status") != "exported" else "exported",
                      reason=result.get("reason") or f"ran past {limit:.0f} s")
        if result.get("status") == "exported" and "run" not in result:
            result["run"] = f"timeout: the loop ran past the column's {limit:.0f} s"
    result["total_s"] = round(seconds, 1)
    return result


def _why_no_encoder(model: Any, inputs: dict[str, Any]) -> str:
    """Why the prefill's capture ran no image encoder: what ``generate`` passed the first forward."""
    try:
        from transformers.exporters.utils import decompose_prefill_decode

        keys = sorted(decompose_prefill_decode(model, dict(inputs))["prefill"][1])
    except Exception as exc:  # noqa: BLE001
        return f" (the prefill's inputs could not be read: {first_line(exc)[:100]})"
    if "mm_encoder_outputs" in keys and "pixel_values" not in keys:
        return (": generate encodes the images before its first forward and passes mm_encoder_outputs, so the "
                "prefill forward that decompose_multimodal replays never calls the image encoder")
    return f" (the prefill forward took {', '.join(keys)})"


def run_loop(out: str, inputs: dict[str, Any], eager: dict[str, Any]) -> str:
    """Greedy generation over the prefill and decode components' onnxruntime sessions; "right", or how it is not."""
    import torch
    from transformers.exporters import ExportedModel

    exported = ExportedModel.from_pretrained(out, device="cpu")
    prefill, decode = exported.runners["prefill"], exported.runners["decode"]
    encoded = next((name for name in ("encoder_outputs", "mm_encoder_outputs")
                    if name in prefill.metadata.kwargs and name not in inputs), None)
    if encoded is not None:
        return (f"exported, not run: no encoder among its files: its prefill takes {encoded} (generate runs the "
                "encoder before its first forward), so the images never enter them")
    taken = set(decode.metadata.kwargs)
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    first = prefill(**{k: v for k, v in inputs.items() if k in set(prefill.metadata.kwargs)})
    tokens, cache = ids, first.past_key_values
    logits = first.logits[:, -1]
    for _ in range(len(eager["tokens"][0]) - ids.shape[1]):
        nxt = logits.argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, nxt], dim=1)
        mask = torch.cat([mask, torch.ones_like(nxt)], dim=1)
        step = {"input_ids": nxt, "attention_mask": mask, "past_key_values": cache,
                "position_ids": (mask.cumsum(-1) - 1)[:, -1:], "cache_position": torch.tensor([mask.shape[1] - 1]),
                "use_cache": True}
        got = decode(**{k: v for k, v in step.items() if k in taken})
        logits, cache = got.logits[:, -1], got.past_key_values
    if tokens.tolist() == eager["tokens"]:
        return "right"
    return f"wrong: {tokens[0, ids.shape[1]:].tolist()} vs eager {eager['tokens'][0][ids.shape[1]:]}"
