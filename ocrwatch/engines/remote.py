"""The remote engine: the same requests as the embedded one, sent to an OpenAI-compatible
server such as ``vllm serve lightonai/LightOnOCR-2-1B``.

For pages that outgrow one card: many daemons can share one served model that vLLM
scales out. Standard library only (urllib); each page goes as a base64 PNG data URL,
alone in a user turn, since a text prompt makes the model echo it.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import threading
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from ocrwatch.domain import Page, PageText
from ocrwatch.engines.base import BatchPolicy
from ocrwatch.errors import EngineError, EngineUnavailable
from ocrwatch.textutil import markdown_to_text, repeats_itself

if TYPE_CHECKING:
    from PIL import Image

    from ocrwatch.config import Config

log = logging.getLogger(__name__)

MAX_SIDE = 1540
RETRY_TEMPERATURE = 0.6


class _PageFailed(Exception):
    """The server answered, but not with a usable reading of this page."""


class RemoteEngine:
    """The ``remote`` engine. ``concurrency`` pages are in flight at once."""

    name = "remote"

    def __init__(self, config: Config) -> None:
        self._cfg = config.remote
        self._url = self._cfg.url.rstrip("/") + "/chat/completions"
        self._policy = BatchPolicy(max_pages=1, concurrency=self._cfg.concurrency)
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False
        self._pages = 0
        self._last_error: str | None = None

    @property
    def max_side(self) -> int | None:
        return MAX_SIDE

    @property
    def policy(self) -> BatchPolicy:
        return self._policy

    def recognize(self, pages: Sequence[Page]) -> list[PageText]:
        """Read pages, ``concurrency`` requests at a time; a failed page gets ``error`` set."""
        with self._lock:
            if self._closed:
                raise EngineError("the remote engine was closed; start the daemon again.")
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._cfg.concurrency,
                                                thread_name_prefix="ocrwatch-remote")
            pool = self._pool
        if len(pages) == 1:
            return [self._read(pages[0])]
        return list(pool.map(self._read, pages))

    def release(self) -> None:
        """Nothing is held here: the server owns the GPU."""

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    def describe(self) -> dict[str, object]:
        facts: dict[str, object] = {"engine": self.name, "state": "remote", "url": self._cfg.url,
                                    "model": self._cfg.model, "pages": self._pages}
        if self._last_error:
            facts["last_error"] = self._last_error
        return facts

    # -- one page ---------------------------------------------------------------------------

    def _read(self, page: Page) -> PageText:
        url = _data_url(page.image)
        try:
            text, finish = self._ask(url, self._cfg.temperature)
            warnings: list[str] = []
            if _looped(text, finish):
                log.info("Page %d of %s did not finish cleanly; trying again at temperature %.1f.",
                         page.index + 1, page.source.name, RETRY_TEMPERATURE)
                try:
                    text2, finish2 = self._ask(url, RETRY_TEMPERATURE)
                except _PageFailed:
                    text2, finish2 = text, finish
                text, finish = text2, finish2
                if _looped(text, finish):
                    warnings.append(
                        "the model ran out of tokens before the page ended; the text may be "
                        "incomplete" if finish == "length" else
                        "the model repeated itself on this page; the text may hold repeated lines")
        except _PageFailed as exc:
            self._last_error = str(exc)
            return PageText(markdown="", text="", error=f"the page could not be read: {exc}")
        self._pages += 1
        markdown = text.strip()
        return PageText(markdown=markdown + "\n" if markdown else "",
                        text=markdown_to_text(markdown), warnings=warnings)

    def _ask(self, image_url: str, temperature: float) -> tuple[str, str]:
        """One chat completion; retried once on a server error or a dropped connection."""
        body = json.dumps({
            "model": self._cfg.model,
            "messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": image_url}}]}],
            "max_tokens": self._cfg.max_tokens,
            "temperature": temperature,
            "top_p": self._cfg.top_p,
        }).encode()
        headers = {"Content-Type": "application/json"}
        if self._cfg.api_key:
            headers["Authorization"] = f"Bearer {self._cfg.api_key}"
        last = ""
        for _ in range(2):
            request = urllib.request.Request(self._url, data=body, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self._cfg.timeout_seconds) as resp:
                    answer = json.loads(resp.read())
            except urllib.error.HTTPError as exc:
                detail = _error_detail(exc)
                if exc.code in (401, 403):
                    raise EngineUnavailable(
                        f"the OCR server at {self._cfg.url} refused the key (HTTP {exc.code}). "
                        "Set remote.api_key to the server's key.") from exc
                if exc.code == 404:
                    raise EngineUnavailable(
                        f"the OCR server at {self._cfg.url} has no chat completions endpoint or "
                        f"no model {self._cfg.model!r} ({detail}). Check remote.url (it ends "
                        "in /v1) and remote.model.") from exc
                last = f"the server answered HTTP {exc.code}: {detail}"
                if exc.code < 500:
                    raise _PageFailed(last) from exc
                continue
            except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
                reason = getattr(exc, "reason", exc)
                if isinstance(reason, ConnectionRefusedError):
                    raise EngineUnavailable(
                        f"nothing answers at {self._cfg.url}. Start the server (vllm serve "
                        f"{self._cfg.model}) or fix remote.url.") from exc
                last = f"no answer from {self._cfg.url}: {reason}"
                continue
            except (ValueError, OSError) as exc:
                last = f"unreadable answer from {self._cfg.url}: {exc}"
                continue
            try:
                choice = answer["choices"][0]
                return str(choice["message"]["content"] or ""), str(
                    choice.get("finish_reason") or "stop")
            except (KeyError, IndexError, TypeError) as exc:
                raise _PageFailed(f"the server's answer has no text ({exc!r})") from exc
        raise _PageFailed(last)


def _looped(text: str, finish: str) -> bool:
    return finish == "length" or repeats_itself(text)


def _error_detail(exc: urllib.error.HTTPError) -> str:
    try:
        raw = exc.read().decode("utf-8", "replace")
    except OSError:
        return exc.reason or ""
    try:
        data: Any = json.loads(raw)
        message = data.get("error", {}).get("message") or data.get("message") or raw
        return str(message)[:300]
    except (ValueError, AttributeError):
        return raw[:300]


def _data_url(image: Image.Image) -> str:
    buffer = io.BytesIO()
    rgb = image if image.mode in ("RGB", "L") else image.convert("RGB")
    rgb.save(buffer, format="PNG", compress_level=1)  # speed over size on a local link
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
