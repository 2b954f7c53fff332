"""A Hugging Face Hub model id where ``export_hf`` takes a directory: the checkpoint's files fetched into the Hub's own
cache by ``huggingface_hub``, which reads its settings as the Hub's tools do (``HF_TOKEN`` or a ``hf auth login``,
``HF_HOME``/``HF_HUB_CACHE``, ``HF_HUB_OFFLINE``), and exported from there.

Only what ``export_hf`` reads is fetched: configs, safetensors weights and their index, tokenizer, processor and
chat-template files (a repository's ``.bin``, ``.onnx`` or ``.gguf`` copies of the weights are not).
"""

from __future__ import annotations

import os
import re

from onnxport.errors import InvalidInputError

__all__ = ["PATTERNS", "is_model_id", "resolve"]

PATTERNS = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken"]
_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def is_model_id(name: str) -> bool:
    """Whether ``name`` reads as a Hub id (``owner/name``) rather than a path."""
    return bool(_ID.match(name)) and not name.startswith((".", "/")) and ".." not in name


def resolve(directory: str, revision: str | None = None) -> str:
    """``directory`` when it exists (or is no Hub id); else the local folder of the Hub model it names, at
    ``revision`` (a branch, tag or commit; default ``main``), fetched into the Hub's cache if it is not there."""
    if os.path.exists(directory) or not is_model_id(directory):
        if revision is not None:
            raise InvalidInputError(f"revision={revision!r} applies to a Hub model id, and {directory} is a path",
                                    fix="leave revision out for a local directory")
        return directory
    try:
        import huggingface_hub
        from huggingface_hub import errors
    except ImportError:
        raise InvalidInputError(f"{directory} is not a local folder, and huggingface_hub (to fetch it as a Hub id) is "
                                "not installed", fix='pip install "onnxport[hf]", or give a local directory') from None
    where = f"{directory}" + (f" at revision {revision}" if revision else "")
    try:
        return huggingface_hub.snapshot_download(directory, revision=revision, allow_patterns=PATTERNS)
    except errors.RevisionNotFoundError:
        raise InvalidInputError(f"the Hub model {directory} has no revision {revision!r}",
                                fix="give a branch, tag or commit it has, or leave revision out (main)") from None
    except (errors.RepositoryNotFoundError, errors.GatedRepoError):
        raise InvalidInputError(f"{directory} is not a local folder, and the Hub has no model by that id that this "
                                "token may read", fix="check the id; for a private or gated model, log in (hf auth "
                                "login) or set HF_TOKEN; or give a local directory") from None
    except errors.LocalEntryNotFoundError:
        raise InvalidInputError(f"{where} is not a local folder, not in the Hub cache ({_cache()}), and the Hub "
                                "cannot be reached (offline, or HF_HUB_OFFLINE set)",
                                fix=f"fetch it where the Hub is reachable (hf download {directory}), or give a local "
                                "directory") from None
    except Exception as exc:  # noqa: BLE001 - network and server errors, each library's own type
        raise InvalidInputError(f"cannot fetch {where} from the Hub: {type(exc).__name__}: {exc}",
                                fix="check the network and the id, or give a local directory") from None


def _cache() -> str:
    from huggingface_hub import constants

    return str(constants.HF_HUB_CACHE)
