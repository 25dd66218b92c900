"""One HTTP request to the search page: the token and Host checks, the routes, the static
files, and a bounded body; the answers come from :class:`ocrwatch.web.server.SearchServer`.
"""

from __future__ import annotations

import contextlib
import hmac
import io
import json
import logging
import re
import socket
import time
from email.message import Message
from http import HTTPStatus
from http.client import HTTPException, parse_headers
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler
from importlib import resources
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qs, urlsplit

from ocrwatch.core.errors import OcrwatchError, SearchError
from ocrwatch.web.params import (
    TYPES,
    whole,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

log = logging.getLogger(__name__)


# An idle or trickling connection holds a thread: it is closed after this long without a
# byte, so that no local user (no token needed to connect) can pile them up...
IDLE_TIMEOUT = 5.0
# ... and a whole request (its line, headers and body; on a kept-alive connection, from
# the last answer on) must arrive within this, however slowly its bytes come.
REQUEST_SECONDS = 10.0
_SECRET = re.compile(r"((?:token|code)=)[^&\s]+", re.IGNORECASE)
THUMB_MAX_AGE = 365 * 24 * 3600  # seconds: a versioned thumbnail never changes
MAX_BODY = 4096  # bytes of a POST's body
STATIC = {"index.html": "text/html; charset=utf-8", "app.js": "text/javascript; charset=utf-8",
          "style.css": "text/css; charset=utf-8", "favicon.svg": "image/svg+xml"}


def presented(target: str, headers: Message, port: int) -> str | None:
    """The token a request shows: in its address, its X-Ocrwatch-Token header or the
    port's cookie."""
    given = parse_qs(urlsplit(target).query).get("token", [None])[0] or headers.get(
        "X-Ocrwatch-Token")
    if given:
        return str(given)
    cookies: SimpleCookie = SimpleCookie()
    with contextlib.suppress(Exception):
        cookies.load(headers.get("Cookie", ""))
    morsel = cookies.get(f"ocrwatch_token_{port}")
    return morsel.value if morsel is not None else None


def token_ok(given: str | None, token: str) -> bool:
    return bool(given) and hmac.compare_digest(str(given).encode(), token.encode())


def shows_token(head: bytes, token: str, port: int) -> bool:
    """Whether a request head, as read at the door, shows the right token."""
    line, _, rest = head.partition(b"\n")
    words = line.decode("iso-8859-1").split()
    if len(words) != 3:
        return False
    try:
        headers = parse_headers(io.BytesIO(rest))
    except (HTTPException, ValueError):
        return False
    return token_ok(presented(words[1], headers, port), token)


class App(Protocol):
    """What the handler asks of the page's server (:class:`ocrwatch.web.server.SearchServer`
    is one): named here so that the handler does not import the server that imports it."""

    token: str
    opener: Callable[[Path, int | None], None]  # opens a file for the user

    @property
    def port(self) -> int: ...

    def redeem(self, code: str) -> bool: ...

    def api_search(self, params: dict[str, str]) -> dict[str, Any]: ...

    def api_recent(self, params: dict[str, str]) -> dict[str, Any]: ...

    def api_folders(self) -> list[dict[str, str | int]]: ...

    def thumbnail(self, job_id: int, page: int) -> tuple[bytes, str] | None:
        """The page's thumbnail and its version (a prefix of its content's SHA-256)."""
        ...

    def job_file(self, job_id: int, what: str) -> Path | None: ...

    def openable(self, path: Path) -> str | None: ...



class _Handler(BaseHTTPRequestHandler):
    app: App
    server_version = "ocrwatch"
    sys_version = ""
    protocol_version = "HTTP/1.1"
    timeout = IDLE_TIMEOUT  # per read and write on the connection (StreamRequestHandler)

    def setup(self) -> None:
        super().setup()
        taken = getattr(self.server, "taken_at_door", None)
        early, verified = taken(self.connection) if taken else (b"", True)
        self.verified: bool = verified  # the token shown at the door
        self.deadline = time.monotonic() + REQUEST_SECONDS
        # Reads go through a deadline: a byte every few seconds no longer keeps a
        # connection (and its thread and descriptor) for ever.
        plain, self.rfile = self.rfile, io.BufferedReader(
            _DeadlineReader(self.connection, self, early))
        plain.close()  # the socket's own reader: its reference to the socket goes

    def handle_one_request(self) -> None:
        super().handle_one_request()
        if not self.verified:
            # Its thread is one of a few shared by all who have no token: not kept idle.
            self.close_connection = True
        self.deadline = time.monotonic() + REQUEST_SECONDS  # the next request's time

    def log_message(self, format: str, *args: Any) -> None:
        # The request line holds ?token=... or ?code=...: never in the log.
        log.debug("search page: %s", _SECRET.sub(r"\1…", format % args))

    # -- checks --------------------------------------------------------------------------
    def _host_ok(self) -> bool:
        port = self.app.port
        return self.headers.get("Host", "") in (f"127.0.0.1:{port}", f"localhost:{port}")

    def _cookie_name(self) -> str:
        return f"ocrwatch_token_{self.app.port}"

    def _allowed(self, query: dict[str, list[str]]) -> bool:
        if not self._host_ok():
            self._send_text(HTTPStatus.FORBIDDEN, "refused: this page answers only to "
                            "127.0.0.1 and localhost (the Host header named another name)")
            return False
        if not token_ok(presented(self.path, self.headers, self.app.port), self.app.token):
            self._send_text(HTTPStatus.FORBIDDEN, "refused: the address needs ocrwatch's "
                            "token; open the page from the tray's Search… or with "
                            "`ocrwatch search --web`")
            return False
        return True

    def _gone(self, exc: BaseException) -> None:
        """The client closed mid-answer (a query typed further, a tab closed): nothing
        to answer, nothing to print."""
        self.close_connection = True
        log.debug("search page: the client went away mid-answer (%s)", exc)

    # -- replies -------------------------------------------------------------------------
    def _send(self, status: HTTPStatus, body: bytes, ctype: str,
              extra: dict[str, str] | None = None, cache: str = "no-store") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", cache)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Content-Security-Policy",
                         "default-src 'self'; img-src 'self'; frame-ancestors 'none'")
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        if not self.verified:
            self.send_header("Connection", "close")  # see handle_one_request
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _send_text(self, status: HTTPStatus, text: str) -> None:
        self._send(status, (text + "\n").encode(), "text/plain; charset=utf-8")

    def _send_json(self, obj: Any, status: HTTPStatus = HTTPStatus.OK) -> None:
        self._send(status, json.dumps(obj, ensure_ascii=False).encode(),
                   "application/json; charset=utf-8")

    # -- routes --------------------------------------------------------------------------
    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        if url.path == "/" and "code" in query and self._host_ok():
            self._redeem(query["code"][0])
            return
        if not self._allowed(query):
            return
        try:
            self._get(url.path, query)
        except (ConnectionError, TimeoutError) as exc:
            self._gone(exc)
        except SearchError as exc:
            self._send_json({"error": str(exc)}, HTTPStatus.BAD_REQUEST)
        except OcrwatchError as exc:
            self._send_json({"error": str(exc)}, HTTPStatus.SERVICE_UNAVAILABLE)
        except Exception:
            log.exception("search page: %s failed", url.path)
            self._send_json({"error": "the search failed inside ocrwatch; see its log"},
                            HTTPStatus.INTERNAL_SERVER_ERROR)

    def _redeem(self, code: str) -> None:
        """A one-time code from the launch page: the token's cookie, once."""
        if not self.app.redeem(code):
            self._send_text(HTTPStatus.FORBIDDEN, "refused: this link has been used "
                            "already or is too old; open the page again from the tray's "
                            "Search… or with `ocrwatch search --web`")
            return
        self._set_cookie()

    def _set_cookie(self) -> None:
        # Keep the token in a cookie and out of the address bar and history.
        cookie = (f"{self._cookie_name()}={self.app.token}; HttpOnly; SameSite=Strict; "
                  "Path=/")
        self._send(HTTPStatus.SEE_OTHER, b"", "text/plain",
                   {"Location": "/", "Set-Cookie": cookie})

    def _get(self, path: str, query: dict[str, list[str]]) -> None:
        if path == "/" and "token" in query:
            self._set_cookie()
            return
        if path in ("/", "/index.html"):
            path = "/static/index.html"
        if path.startswith("/static/"):
            name = path[len("/static/"):]
            if name not in STATIC:
                self._send_text(HTTPStatus.NOT_FOUND, "no such file")
                return
            body = resources.files("ocrwatch").joinpath("data", "search", name).read_bytes()
            self._send(HTTPStatus.OK, body, STATIC[name])
            return
        if path == "/api/search":
            params = {k: v[0] for k, v in query.items() if k != "token"}
            self._send_json(self.app.api_search(params))
            return
        if path == "/api/recent":
            self._send_json(self.app.api_recent({k: v[0] for k, v in query.items()
                                                 if k != "token"}))
            return
        if path == "/api/folders":
            self._send_json({"folders": self.app.api_folders(), "types": list(TYPES)})
            return
        if path.startswith("/thumb/"):
            parts = path.split("/")
            if len(parts) == 4 and parts[2].isdecimal() and parts[3].isdecimal():
                found = self.app.thumbnail(int(parts[2]), int(parts[3]))
                if found is not None:
                    self._send_thumb(*found, query.get("v", [""])[0])
                    return
            self._send_text(HTTPStatus.NOT_FOUND, "no thumbnail for that page")
            return
        self._send_text(HTTPStatus.NOT_FOUND, "no such page")

    def _send_thumb(self, data: bytes, version: str, asked: str) -> None:
        """A thumbnail, kept by the browser: for good when its address names the content
        it shows (``?v=``, as the hits give it: new content gets a new address), else
        checked again each time. Either way its ETag spares sending it again."""
        etag = f'"{version}"'
        cache = (f"private, max-age={THUMB_MAX_AGE}, immutable" if asked == version
                 else "private, no-cache")
        tags = [t.strip() for t in self.headers.get("If-None-Match", "").split(",")]
        if etag in tags or f"W/{etag}" in tags or "*" in tags:
            self._send(HTTPStatus.NOT_MODIFIED, b"", "image/webp", {"ETag": etag}, cache)
            return
        self._send(HTTPStatus.OK, data, "image/webp", {"ETag": etag}, cache)

    def do_POST(self) -> None:
        url = urlsplit(self.path)
        if not self._allowed(parse_qs(url.query)):
            return
        try:
            self._post(url.path)
        except (ConnectionError, TimeoutError) as exc:
            self._gone(exc)
        except Exception:
            log.exception("search page: %s failed", url.path)
            self._send_json({"error": "the action failed inside ocrwatch; see its log"},
                            HTTPStatus.INTERNAL_SERVER_ERROR)

    def _post(self, path: str) -> None:
        if path != "/api/open":
            self._send_text(HTTPStatus.NOT_FOUND, "no such action")
            return
        # JSON only: a form on another site cannot send it without a CORS preflight,
        # which this server never grants.
        if self.headers.get("Content-Type", "").split(";")[0] != "application/json":
            self._send_json({"error": "send JSON"}, HTTPStatus.UNSUPPORTED_MEDIA_TYPE)
            return
        try:
            length = whole(self.headers.get("Content-Length", "0"), "Content-Length", 0,
                           MAX_BODY)
        except SearchError as exc:
            # The body is not read: the connection cannot be used again.
            self.close_connection = True
            self._send_json({"error": str(exc)}, HTTPStatus.BAD_REQUEST)
            return
        try:
            req = json.loads(self.rfile.read(length) or b"{}")
            job_id = whole(req["job_id"], "job_id")
            page = whole(req.get("page") or 1, "page", 1)
            what = str(req.get("what", "original"))
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError,
                SearchError):
            self._send_json({"error": "expected {job_id, page, what}"}, HTTPStatus.BAD_REQUEST)
            return
        target = self.app.job_file(job_id, what)
        if target is None:
            self._send_json({"error": "that file is not in the index"}, HTTPStatus.NOT_FOUND)
            return
        refused = self.app.openable(target)
        if refused is not None:
            self._send_json({"error": refused}, HTTPStatus.NOT_FOUND)
            return
        self.app.opener(target, page if what == "original" else None)
        self._send_json({"opened": str(target)})

    def do_HEAD(self) -> None:
        self.do_GET()

    def _refuse_method(self) -> None:
        self._send_text(HTTPStatus.METHOD_NOT_ALLOWED, "only GET and POST /api/open")

    do_PUT = do_DELETE = do_PATCH = _refuse_method


class _DeadlineReader(io.RawIOBase):
    """The connection's bytes, each read bounded by the idle timeout and all of them by
    the handler's ``deadline``; past it, TimeoutError (the handler closes the
    connection, as for any read timeout)."""

    def __init__(self, sock: socket.socket, handler: _Handler, early: bytes = b"") -> None:
        self.sock = sock
        self.handler = handler
        self.early = early  # read at the door already

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.early:
            n = min(len(buffer), len(self.early))
            buffer[:n] = self.early[:n]
            self.early = self.early[n:]
            return n
        left = self.handler.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request did not arrive in time")
        self.sock.settimeout(min(left, IDLE_TIMEOUT))
        try:
            return self.sock.recv_into(buffer)
        finally:
            self.sock.settimeout(IDLE_TIMEOUT)  # answers get the idle timeout per write
