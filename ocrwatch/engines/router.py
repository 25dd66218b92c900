"""What a router in front of OCR servers says about the servers behind it.

vLLM's router (``vllm-router``) puts several ``vllm serve`` servers behind one URL: it
balances, retries a request whose server died on another, and opens a circuit breaker
on a failing one, so the remote engine sees one server that never fails a page. What it
hides is how many servers are behind it and which are down; it says so at its root,
``GET /workers``::

    {"workers": [{"url": "http://gpu1:8000", "is_healthy": true, ...}, ...], "total": 2}

The remote engine asks at every health round (:func:`backends`), to log a server that
went down or came back behind the router, to list them in ``ocrwatch status``, and, with
``remote.per_server``, to keep as many pages in flight as the healthy servers take. A
server that is no router answers 404 (or anything else): it counts as one server.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from ocrwatch.core.textutil import strip_controls
from ocrwatch.engines import http_deadline
from ocrwatch.engines.openai_http import _read_capped

TIMEOUT = 5.0  # a router answers this from memory
CAP = 256 * 1024  # bytes of the listing read at most: a few thousand servers
MAX_BACKENDS = 1024


@dataclass(frozen=True)
class Backend:
    """One server behind a router, as the router sees it."""

    url: str
    healthy: bool


def root_of(base: str) -> str:
    """The router's own root for an OpenAI base URL (``http://r:30000/v1`` →
    ``http://r:30000``): its management routes are not under ``/v1``."""
    parts = urlsplit(base)
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def backends(client: httpx.Client, base: str) -> list[Backend] | None:
    """The servers behind the router at ``base``, or None when it is not a router (or
    does not say). Never raises: the page requests are what decide a server's health."""
    try:
        with http_deadline.deadline(time.monotonic() + TIMEOUT), client.stream(
                "GET", f"{root_of(base)}/workers", timeout=TIMEOUT,
                headers={"Accept-Encoding": "identity"}) as response:
            if response.status_code != 200:
                return None
            body = _read_capped(response, CAP)
    except httpx.HTTPError:
        return None
    return None if body is None else parse_workers(body)


def parse_workers(body: bytes) -> list[Backend] | None:
    """The ``/workers`` listing of vllm-router, or None for any other shape."""
    try:
        data: Any = json.loads(body)
    except ValueError:
        return None
    workers = data.get("workers") if isinstance(data, dict) else None
    if not isinstance(workers, list):
        return None
    found: list[Backend] = []
    for worker in workers[:MAX_BACKENDS]:
        if not isinstance(worker, dict) or not isinstance(worker.get("url"), str):
            return None
        found.append(Backend(strip_controls(worker["url"])[:300],
                             worker.get("is_healthy") is True))
    return found
