"""What the remote engine says to one OpenAI-compatible server, and what each answer means.

:func:`post_chat` and :func:`probe` turn HTTP outcomes into the engine's decisions: an
answer, :class:`Retry` (backpressure or a lost server), :class:`ServerError` (tried once
more), :class:`PageFailed` (this page only) or :class:`EngineUnavailable` (waiting will
not cure it: the key, the certificate, a wrong URL). They hold no state; the choice of
server and the backoff stay with :mod:`ocrwatch.engines.remote`.
"""

from __future__ import annotations

import base64
import io
import ipaddress
import json
import logging
import ssl
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx

from ocrwatch.core.errors import EngineError, EngineUnavailable, Kind
from ocrwatch.core.textutil import strip_controls
from ocrwatch.engines import http_deadline

if TYPE_CHECKING:
    from PIL import Image

    from ocrwatch.config import RemoteConfig
    from ocrwatch.engines.profiles import Profile

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 10.0  # a server that takes longer to accept a connection is down
PROBE_TIMEOUT = 10.0
RETRY_AFTER_CAP = 30.0  # the longest Retry-After honoured, in seconds
BUSY = (429, 502, 503, 504)  # overloaded, or a router in front with nothing behind it
# vllm-router's HTTP 500 when the server it chose is gone before the request reached it:
# no model saw the page, so it is tried again as after a lost connection, not counted as
# the page's failure (two of those fail a page).
UNSENT = "error sending request"
# An answer's size is bounded by max_tokens: a token is a few characters, at most a few
# dozen bytes once JSON-escaped (\uXXXX pairs); vLLM's own fields add a few hundred.
BYTES_PER_TOKEN = 64
ANSWER_OVERHEAD = 64 * 1024
ERROR_BODY_CAP = 64 * 1024  # what is read of an error answer, for its message
IDENTITY = {"Accept-Encoding": "identity"}  # answers uncompressed, so the cap holds


class PageFailed(EngineError):
    """The server answered, but not with a usable reading of this page."""


class Retry(EngineError, kind=Kind.TRANSIENT):
    """This request failed in a way another try may not: backpressure or a lost server."""

    def __init__(self, reason: str, *, down: bool, after: float = 0.0) -> None:
        super().__init__(reason)
        self.down = down  # the server itself is unfit: probe it before sending more
        self.after = after  # the server's Retry-After, in seconds


class ServerError(EngineError):
    """HTTP 500 and the like: the server failed on this request."""


@dataclass
class Timing:
    """Where one request's time went, in seconds (``time.monotonic()`` differences)."""

    send: float = 0.0  # the request written (headers and image)
    wait: float = 0.0  # from the request sent to the answer's headers: the server's work
    read: float = 0.0  # the answer's body received
    parse: float = 0.0  # JSON decoded and checked
    # The server's own count (the answer's ``usage``), when it gives one: what the page
    # cost it, so that two clients can be compared page for page.
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    marks: dict[str, float] = field(default_factory=dict)

    def trace(self, event: str, info: dict[str, Any]) -> None:
        """httpcore's trace hook: the time of each step of the exchange."""
        self.marks[event] = time.monotonic()


def answer_cap(max_tokens: int) -> int:
    """The most bytes an answer of ``max_tokens`` tokens can take."""
    return ANSWER_OVERHEAD + BYTES_PER_TOKEN * max_tokens


def make_client(cfg: RemoteConfig, urls: list[str]) -> httpx.Client:
    """One client for every server: the key, the trusted authorities, the timeouts, and a
    connection for each page in flight plus one probe per server."""
    headers = {"User-Agent": "ocrwatch"}
    if cfg.api_key:
        headers["Authorization"] = f"Bearer {cfg.api_key}"
        plain = [u for u in urls if _sends_in_clear(u)]
        if plain:
            log.warning("remote.api_key goes in clear text over http:// to %s; use "
                    "https:// for servers on other machines.", ", ".join(plain))
    if cfg.ca_file is not None:
        try:
            verify = ssl.create_default_context(cafile=str(cfg.ca_file))
        except (OSError, ssl.SSLError) as exc:
            raise EngineUnavailable(
                f"remote.ca_file {cfg.ca_file} cannot be used: {exc}. Point it to the "
                "PEM file of the authority that signed the servers' certificates.") from exc
    else:
        # The system's authorities, where a company's own is installed; httpx alone
        # would trust only certifi's bundle, which is the fallback where the system
        # has none (Python from python.org on macOS).
        verify = ssl.create_default_context()
        if not verify.cert_store_stats().get("x509_ca"):
            import certifi

            verify.load_verify_locations(cafile=certifi.where())
    connections = cfg.concurrency + len(urls)  # pages, plus one probe each
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    # HTTP/1.1 with keep-alive: vLLM's server (uvicorn) speaks no HTTP/2.
    return httpx.Client(
        headers=headers,
        transport=http_deadline.transport(verify=verify, limits=limits),
        timeout=httpx.Timeout(cfg.timeout_seconds, connect=CONNECT_TIMEOUT),
        follow_redirects=False,
    )


def chat_body(cfg: RemoteConfig, image_url: str, temperature: float, *,
              profile: Profile | None = None, model: str | None = None,
              top_p: float | None = None, max_tokens: int | None = None) -> dict[str, Any]:
    """One page's request: the image (and the profile's text after it, "grounding" for
    LightOnOCR-3), sampled as the profile or the section says."""
    image: dict[str, object] = {"type": "image_url", "image_url": {"url": image_url}}
    content = profile.chat_content(image) if profile is not None else [image]
    body: dict[str, Any] = {
        "model": model or cfg.model,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens or cfg.max_tokens,
        "temperature": temperature,
        "top_p": cfg.top_p if top_p is None else top_p,
    }
    if cfg.ignore_eos:
        body["ignore_eos"] = True  # vLLM's extension: benchmarks write max_tokens a page
    return body


def post_chat(client: httpx.Client, base: str, body: dict[str, Any], *, seconds: float,
              timing: Timing | None = None) -> tuple[str, str]:
    """One chat completion: its text and finish reason, or the exception that says what next.

    The whole exchange ends within ``seconds`` however the server sends its answer, and
    no more of the answer is read than ``max_tokens`` tokens can take.
    """
    url = f"{base}/chat/completions"
    timing = timing or Timing()
    cap = answer_cap(int(body["max_tokens"]))
    started = time.monotonic()
    try:
        with http_deadline.deadline(started + seconds), client.stream(
                "POST", url, json=body, headers=IDENTITY,
                extensions={"trace": timing.trace}) as response:
            status = response.status_code
            headed = time.monotonic()
            encoding = response.headers.get("Content-Encoding", "identity").lower()
            raw: bytes | None = None
            if encoding in ("", "identity"):
                raw = _read_capped(response, cap if status == 200 else ERROR_BODY_CAP)
            elif status == 200:
                # Asked for none: a compressed answer could expand a thousandfold in memory.
                raise PageFailed(f"the server compressed its answer ({encoding}) although "
                                 "asked not to; it was not read")
            timing.read = time.monotonic() - headed
    except httpx.TimeoutException as exc:
        raise Retry(f"{base} gave no answer in time (none whole within {seconds:g} s, "
                    f"remote.timeout_seconds; {_kind(exc)})", down=True) from exc
    except httpx.HTTPError as exc:
        if isinstance(exc, httpx.ConnectError) and _certificate_problem(exc):
            raise EngineUnavailable(_certificate_message(base, exc)) from exc
        raise Retry(_transport_reason(base, exc), down=True) from exc
    sent = timing.marks.get("http11.send_request_body.complete", started)
    timing.send = sent - started
    timing.wait = headed - sent
    if status == 200:
        if raw is None:
            raise PageFailed(
                f"the server's answer is larger than {cap:,} bytes, more than "
                f"remote.max_tokens ({body['max_tokens']}) tokens can take; it was not "
                "read. Check that remote.url points at the OCR model's server.")
        t = time.monotonic()
        try:
            return parse_answer(raw, timing)
        finally:
            timing.parse = time.monotonic() - t
    detail = _error_detail(raw or b"")
    if status in (401, 403):
        raise EngineUnavailable(_key_message(base, status))
    if status == 404:
        raise EngineUnavailable(
            f"the OCR server at {base} has no chat completions endpoint or no model "
            f"{body['model']!r} ({detail}). Check remote.url or remote.urls (each ends "
            "in /v1) and remote.model.")
    if status in BUSY:
        raise Retry(f"{base} is busy (HTTP {status}: {detail})", down=False,
                     after=_retry_after(response))
    if status >= 500 and UNSENT in detail:
        raise Retry(f"{base}: its router could not reach the server it chose (HTTP {status}: "
                    f"{detail})", down=False)
    if status >= 500:
        raise ServerError(f"the server answered HTTP {status}: {detail}")
    if response.is_redirect:
        # Not followed: the request carries the key, and the new address is the server's
        # word alone (another host, or plain http).
        where = safe_location(response.headers.get("Location", ""))
        raise PageFailed(f"the server at {base} redirects to {where} (HTTP {status}); "
                         "ocrwatch does not follow redirects, so that the key goes nowhere "
                         "else: set remote.url to the address of the server itself.")
    raise PageFailed(f"the server answered HTTP {status}: {detail}")


def safe_location(location: str) -> str:
    """A redirect's target for a message: printable, short, without any user or password."""
    parts = urlsplit(location.strip())
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    shown = f"{parts.scheme}://{host}{parts.path}" if parts.scheme else parts.path
    shown = "".join(c for c in shown if c.isprintable())[:200]
    return shown or "an unnamed address"


def _read_capped(response: httpx.Response, cap: int) -> bytes | None:
    """The body, or None once it passes ``cap`` bytes (the rest is never read: leaving
    the stream unread closes the connection)."""
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_raw():  # as sent: nothing is decompressed
        size += len(chunk)
        if size > cap:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def parse_answer(raw: bytes, timing: Timing | None = None) -> tuple[str, str]:
    """A chat completion's text and finish reason; :class:`PageFailed` for any other shape.

    ``timing`` gets the answer's token counts, when the server gives them."""
    try:
        data: Any = json.loads(raw)
    except ValueError as exc:
        raise PageFailed(f"the server's answer is not JSON ({exc})") from exc
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise PageFailed("the server's answer holds no choices[0]: not a chat completion")
    message = choices[0].get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, str):
        kind = "null" if content is None else type(content).__name__
        raise PageFailed(f"the server's answer has no text: message.content is {kind}, "
                         "not a string")
    finish = choices[0].get("finish_reason")
    usage = data.get("usage")
    if timing is not None and isinstance(usage, dict):
        timing.prompt_tokens = _count(usage.get("prompt_tokens"))
        timing.completion_tokens = _count(usage.get("completion_tokens"))
    return content, finish if isinstance(finish, str) and finish else "stop"


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 \
        else None


def probe(client: httpx.Client, base: str,
          model: str) -> tuple[str | None, EngineUnavailable | None]:
    """``GET /models``: None when the server answers and serves ``model``, else the
    problem, and the error to raise when waiting will not cure it (key, certificate)."""
    problem: str | None = None
    fatal: EngineUnavailable | None = None
    try:
        with http_deadline.deadline(time.monotonic() + PROBE_TIMEOUT), client.stream(
                "GET", f"{base}/models", timeout=PROBE_TIMEOUT, headers=IDENTITY) as response:
            if response.headers.get("Content-Encoding", "identity").lower() not in (
                    "", "identity"):
                raise httpx.DecodingError("the server compressed its answer although "
                                          "asked not to")
            listing = _read_capped(response, ERROR_BODY_CAP * 16)
    except httpx.HTTPError as exc:
        problem = _transport_reason(base, exc)
        if isinstance(exc, httpx.ConnectError) and _certificate_problem(exc):
            fatal = EngineUnavailable(_certificate_message(base, exc))
    else:
        if response.status_code in (401, 403):
            problem = f"it refused the key (HTTP {response.status_code})"
            fatal = EngineUnavailable(_key_message(base, response.status_code))
        elif response.status_code != 200:
            problem = f"GET /models answered HTTP {response.status_code}: " \
                      f"{_error_detail(listing or b'')}"
        else:
            served = _served_models(listing or b"")
            if served is not None and model not in served:
                problem = (f"it serves {', '.join(served) or 'no model'}, not "
                           f"{model!r}")
    return problem, fatal


def _kind(exc: httpx.HTTPError) -> str:
    names: dict[type[Exception], str] = {
        httpx.ConnectTimeout: "connect timeout", httpx.ReadTimeout: "read timeout",
        httpx.WriteTimeout: "write timeout", httpx.PoolTimeout: "pool timeout"}
    return names.get(type(exc), type(exc).__name__)


def _transport_reason(url: str, exc: httpx.HTTPError) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return f"{url} gave no answer in time ({_kind(exc)})"
    if isinstance(exc, httpx.ConnectError):
        return f"nothing answers at {url} ({exc})"
    if isinstance(exc, httpx.RemoteProtocolError):
        return f"{url} dropped the connection ({exc})"
    return f"{url} failed: {type(exc).__name__}: {exc}"


def _certificate_problem(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return True
        seen = seen.__cause__ or seen.__context__
    return "CERTIFICATE_VERIFY_FAILED" in str(exc)


def _certificate_message(url: str, exc: BaseException) -> str:
    return (f"the certificate of {url} is not trusted ({exc}). Give the server a certificate "
            "from a known authority, or set remote.ca_file to the PEM file of the authority "
            "that signed it.")


def _key_message(url: str, status: int) -> str:
    return (f"the OCR server at {url} refused the key (HTTP {status}). Set remote.api_key "
            "(or OCRWATCH_REMOTE_API_KEY) to the server's key.")


def _sends_in_clear(url: str) -> bool:
    parts = urlsplit(url)
    if parts.scheme != "http":
        return False
    host = parts.hostname or ""
    if host == "localhost":
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return True


def _served_models(body: bytes) -> list[str] | None:
    """The model ids in a ``/models`` answer, or ``None`` when it does not list any."""
    try:
        data = json.loads(body)["data"]
        return [strip_controls(str(m["id"])) for m in data]
    except (ValueError, KeyError, TypeError):
        return None


def _retry_after(response: httpx.Response) -> float:
    try:
        return min(RETRY_AFTER_CAP, max(0.0, float(response.headers.get("Retry-After", 0))))
    except ValueError:
        return 0.0  # an HTTP date: rare from model servers; the backoff applies


def _error_detail(body: bytes) -> str:
    raw = body.decode("utf-8", errors="replace")
    try:
        data: Any = json.loads(raw)
        message = (data.get("error", {}).get("message") if isinstance(data.get("error"), dict)
                   else data.get("error")) or data.get("message") or data.get("detail") or raw
        return strip_controls(str(message)[:300])
    except (ValueError, AttributeError):
        return strip_controls(raw[:300])


def data_url(image: Image.Image) -> str:
    buffer = io.BytesIO()
    rgb = image if image.mode in ("RGB", "L") else image.convert("RGB")
    rgb.save(buffer, format="PNG", compress_level=1)  # speed over size on a local link
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
