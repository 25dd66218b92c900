"""Where the vision model's files come from: a local folder, or the Hugging Face cache.

A hub id such as ``lightonai/LightOnOCR-2-1B`` is fetched into the user's Hugging Face
cache on first use (about 2 GB, with progress shown), and read from there afterwards
without touching the network. A path to a folder holding ``config.json`` is used as is.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ocrwatch.core.errors import EngineUnavailable

log = logging.getLogger(__name__)

DEFAULT_MODEL = "lightonai/LightOnOCR-2-1B"
# Only what vLLM reads: weights, configs, tokenizer, processor, chat template.
ALLOW_PATTERNS = ["*.json", "*.safetensors", "*.jinja", "*.txt", "*.model", "*.tiktoken"]

Progress = Callable[[str], None]


def check_folder(folder: Path) -> Path:
    """``folder`` if it holds a model vLLM can load, else a clear error."""
    if not folder.is_dir():
        raise EngineUnavailable(
            f"model folder {folder} does not exist. Set vllm.model to a folder holding the "
            f"model's config.json, or to a Hugging Face id such as {DEFAULT_MODEL!r}."
        )
    if not (folder / "config.json").is_file():
        raise EngineUnavailable(
            f"model folder {folder} has no config.json, so it is not a model folder. "
            "Point vllm.model at the folder that holds config.json."
        )
    return folder


def resolve(name: str, *, offline: bool | None = None, progress: Progress | None = None,
            cache_dir: Path | None = None) -> Path:
    """The local folder of model ``name`` (a path, or a hub id fetched on first use).

    ``offline`` None follows ``HF_HUB_OFFLINE``. ``progress`` receives short messages
    while files are fetched (the daemon shows them in its status).
    """
    name = name.strip()
    if not name:
        raise EngineUnavailable(f"vllm.model is empty. Set it to {DEFAULT_MODEL!r} or a folder.")
    local = Path(name).expanduser()
    if local.is_absolute() or name.startswith((".", "~")) or local.exists():
        return check_folder(local.resolve())
    if name.count("/") != 1:
        raise EngineUnavailable(
            f"vllm.model = {name!r} is neither an existing folder nor a Hugging Face id "
            f"(owner/name, such as {DEFAULT_MODEL!r}). Fix the name or the path."
        )
    return _from_hub(name, offline=offline, progress=progress, cache_dir=cache_dir)


def _from_hub(repo_id: str, *, offline: bool | None, progress: Progress | None,
              cache_dir: Path | None) -> Path:
    try:
        import huggingface_hub
        from huggingface_hub import errors as hub_errors
    except ImportError as exc:
        raise EngineUnavailable(
            "huggingface_hub is not installed, so the model cannot be fetched. Install the "
            "'gpu' extra (`make run GPU=1` in the ocrwatch checkout) or set vllm.model to a "
            "local folder."
        ) from exc
    if offline is None:
        offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
    kwargs: dict[str, Any] = {"allow_patterns": ALLOW_PATTERNS}
    if cache_dir is not None:
        kwargs["cache_dir"] = str(cache_dir)
    # The cache first: no network once the model is there.
    try:
        path = huggingface_hub.snapshot_download(repo_id, local_files_only=True, **kwargs)
        return check_folder(Path(path))
    except (hub_errors.LocalEntryNotFoundError, hub_errors.OfflineModeIsEnabled, OSError,
            ValueError):
        pass
    if offline:
        raise EngineUnavailable(
            f"model {repo_id} is not in the Hugging Face cache and the hub is switched off "
            "(HF_HUB_OFFLINE). Connect once without HF_HUB_OFFLINE to fetch it (about 2 GB), "
            "or set vllm.model to a folder that holds the model."
        )
    log.info("Fetching model %s into the Hugging Face cache (about 2 GB, once).", repo_id)
    if progress:
        progress(f"downloading {repo_id}")
    try:
        path = huggingface_hub.snapshot_download(
            repo_id, tqdm_class=_progress_class(repo_id, progress), **kwargs)
    except hub_errors.RepositoryNotFoundError as exc:
        raise EngineUnavailable(
            f"model {repo_id} was not found on the Hugging Face hub. Check vllm.model."
        ) from exc
    except hub_errors.GatedRepoError as exc:
        raise EngineUnavailable(
            f"model {repo_id} needs you to accept its terms on huggingface.co and to log in "
            "(hf auth login) before it can be fetched."
        ) from exc
    except (hub_errors.HfHubHTTPError, hub_errors.LocalEntryNotFoundError, OSError) as exc:
        raise EngineUnavailable(
            f"model {repo_id} could not be fetched from the Hugging Face hub ({exc}). Check the "
            "network connection and try again, or set vllm.model to a local model folder."
        ) from exc
    log.info("Model %s is ready in %s.", repo_id, path)
    return check_folder(Path(path))


def _progress_class(repo_id: str, progress: Progress | None) -> Any:
    """A tqdm class that also reports the file count to ``progress`` (status display)."""
    from huggingface_hub.utils.tqdm import tqdm  # honours HF_HUB_DISABLE_PROGRESS_BARS

    class _Reporting(tqdm):  # type: ignore[misc]
        def update(self, n: float | None = 1) -> Any:
            shown = super().update(n)
            if progress and self.total:
                progress(f"downloading {repo_id}: {int(self.n)} of {int(self.total)} files")
            return shown

    return _Reporting
