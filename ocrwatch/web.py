"""The search page: a small HTTP server on 127.0.0.1, for this user only.

Built on the standard library's ``http.server``: the page needs five read-only routes
and one "open this file" action for one local user, which a framework would not make
shorter or safer, and ``ThreadingHTTPServer`` ships with Python (nothing to install,
nothing to keep up to date). The page itself (HTML, CSS, JavaScript) ships in
``ocrwatch/data/search/``; it fetches nothing from the internet.

Safety, as Jupyter does it: the server listens on 127.0.0.1 at a free port; every request
needs the secret token, which comes in the opened URL once and is then kept in a cookie
(HttpOnly, SameSite=Strict) for that port; the token is also written to a file only the
user can read. A request whose Host header is not 127.0.0.1 or localhost at our port is
refused (DNS rebinding). The index is opened read-only (``mode=ro`` and
``query_only``): no request writes anything. Thumbnails and files are served or opened
only for jobs in the index.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hmac
import html
import json
import logging
import os
import re
import secrets
import stat
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ocrwatch import paths
from ocrwatch.db import Database, decode_path
from ocrwatch.errors import OcrwatchError, SearchError
from ocrwatch.index import _CJK, HIGHLIGHT, Filters, Hit, search
from ocrwatch.opener import open_file
from ocrwatch.safeopen import LinkRefused, open_beneath, source_root
from ocrwatch.thumbs import Thumbnails

log = logging.getLogger(__name__)

PER_PAGE = 20
MAX_PER_PAGE = 100
TIME_LIMIT = 5.0  # seconds a page's query may take
# An idle or trickling connection holds a thread: it is closed after this long without a
# byte, so that no local user (no token needed to connect) can pile them up.
IDLE_TIMEOUT = 5.0
MAX_BODY = 4096  # bytes of a POST's body
MAX_ID = 2**63 - 1  # SQLite's largest integer: ids and pages past it name nothing
MAX_PAGE = 1_000_000  # pages of hits
STATIC = {"index.html": "text/html; charset=utf-8", "app.js": "text/javascript; charset=utf-8",
          "style.css": "text/css; charset=utf-8", "favicon.svg": "image/svg+xml"}
# File types offered by the page's filter, and the name endings each stands for.
TYPES: dict[str, tuple[str, ...]] = {
    "pdf": (".pdf",), "jpeg": (".jpg", ".jpeg"), "png": (".png",), "tiff": (".tif", ".tiff"),
    "webp": (".webp",), "bmp": (".bmp",),
}

Opener = Callable[[Path, "int | None"], None]


def token_file() -> Path:
    return paths.runtime_dir() / "search-url"


def whole(text: object, what: str, low: int = 0, high: int = MAX_ID) -> int:
    """``text`` as a whole number in [low, high]; SearchError with a plain message else."""
    try:
        value = int(str(text))  # not int(): 1.5 and true are no ids
    except (ValueError, TypeError):
        raise SearchError(f"{what} must be a whole number") from None
    if not low <= value <= high:
        raise SearchError(f"{what} must be between {low} and {high}")
    return value


def parse_day(text: str, *, end: bool = False) -> float | None:
    """``YYYY-MM-DD`` as local midnight (the next one with ``end``), or None."""
    if not text:
        return None
    try:
        day = _dt.date.fromisoformat(text)
    except ValueError:
        raise SearchError(f"{text!r} is not a date; use YYYY-MM-DD") from None
    if end:
        day += _dt.timedelta(days=1)
    return _dt.datetime.combine(day, _dt.time()).timestamp()


def as_typed(query: str) -> str:
    """The query with its last word taken as a prefix while it is being typed ("harb"
    finds "harbour"); from four letters on: shorter prefixes match so many words that
    ranking them all costs more than a keystroke's worth of time on a large index."""
    match = re.search(r"(?:^|\s)(\w{4,})$", query)
    if match is None or _CJK.search(match.group(1)) or match.group(1) in ("AND", "OR", "NOT"):
        return query
    return query + "*"


def snippet_html(snippet: str) -> str:
    """The snippet escaped for HTML, its matches in <mark>."""
    out = html.escape(" ".join(snippet.split()))
    return out.replace(HIGHLIGHT[0], "<mark>").replace(HIGHLIGHT[1], "</mark>")


class SearchServer:
    """The page's server. Created, ``start()`` once, ``close()`` (safe twice)."""

    def __init__(self, database: Path, thumbs: Thumbnails, *, inbox: list[Path] | None = None,
                 opener: Opener = open_file, port: int = 0,
                 write_token_file: bool = True, follow_symlinks: bool = False) -> None:
        self.database = database
        self.thumbs = thumbs
        self.inbox = [p.absolute() for p in (inbox or [])]
        self.follow_symlinks = follow_symlinks
        self.opener = opener
        self.token = secrets.token_urlsafe(32)
        self._port = port
        self._write_token_file = write_token_file
        self._db: Database | None = None
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = False

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        with self._lock:
            if self._closed:
                raise OcrwatchError("the search page's server was closed; start a new one")
            if self._httpd is not None:
                return
            db = Database(self.database, readonly=True, origin="the search page")
            db.conn.execute("PRAGMA query_only = ON")  # no request can write, whatever it does
            self._db = db
            handler = type("Handler", (_Handler,), {"app": self})
            self._httpd = ThreadingHTTPServer(("127.0.0.1", self._port), handler)
            self._httpd.daemon_threads = True
            self._thread = threading.Thread(target=self._httpd.serve_forever,
                                            kwargs={"poll_interval": 0.2},
                                            name="ocrwatch-search-page", daemon=True)
            self._thread.start()
            if self._write_token_file:
                self._save_url()
        log.info("search page at http://127.0.0.1:%d/", self.port)

    def _save_url(self) -> None:
        target = token_file()
        tmp = target.with_name(f".{target.name}.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(self.url + "\n")
        os.replace(tmp, target)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            httpd, thread, db = self._httpd, self._thread, self._db
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if thread is not None:
            thread.join(timeout=10)
        if db is not None:
            db.close()
        if self._write_token_file and httpd is not None:
            with contextlib.suppress(OSError):
                if token_file().read_text().strip() == self.url:
                    token_file().unlink()

    def __enter__(self) -> SearchServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise OcrwatchError("the search page's server is not started")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """The page's address with the token, to open in a browser."""
        return f"http://127.0.0.1:{self.port}/?token={self.token}"

    # -- answers -------------------------------------------------------------------------
    @property
    def db(self) -> Database:
        assert self._db is not None
        return self._db

    def relative(self, path: Path) -> str:
        for root in self.inbox:
            with contextlib.suppress(ValueError):
                return str(Path(root.name) / path.relative_to(root))
        return str(path)

    def hit_json(self, hit: Hit) -> dict[str, Any]:
        path = Path(hit.path)
        has_thumb = False
        rows = self.db.query("SELECT sha256 FROM jobs WHERE id = ?", (hit.job_id,))
        if rows and rows[0]["sha256"]:
            with contextlib.suppress(ValueError):
                has_thumb = self.thumbs.path(rows[0]["sha256"], hit.page).exists()
        return {
            "job_id": hit.job_id, "page": hit.page, "pages": hit.pages,
            "name": path.name, "folder": self.relative(path.parent), "path": hit.path,
            "date": (_dt.datetime.fromtimestamp(hit.mtime).strftime("%Y-%m-%d %H:%M")
                     if hit.mtime is not None else None),
            "snippet": snippet_html(hit.snippet),
            "thumb": f"/thumb/{hit.job_id}/{hit.page}" if has_thumb else None,
            "sidecar": bool(hit.md_path),
        }

    def api_search(self, params: dict[str, str]) -> dict[str, Any]:
        started = time.perf_counter()
        query = params.get("q", "").strip()
        if params.get("prefix") == "1":
            query = as_typed(query)
        page = whole(params.get("page", "") or "1", "page", 1, MAX_PAGE)
        per = whole(params.get("per", "") or str(PER_PAGE), "per", 1, MAX_PER_PAGE)
        kind = params.get("type", "")
        if kind and kind not in TYPES:
            raise SearchError(f"unknown file type {kind!r}; use one of {', '.join(TYPES)}")
        folder = params.get("folder", "")
        filters = Filters(
            folder=Path(folder) if folder else None,
            name=params.get("name", "").strip() or None,
            after=parse_day(params.get("from", "")),
            before=parse_day(params.get("to", ""), end=True),
            types=TYPES.get(kind, ()),
        )
        if not query and not filters.name:
            return {"hits": [], "page": page, "per": per, "more": False, "ms": 0.0}
        # One more than shown tells whether there is a next page.
        hits = search(self.db, query, limit=per + 1, offset=(page - 1) * per, filters=filters,
                      time_limit=TIME_LIMIT)
        return {"hits": [self.hit_json(h) for h in hits[:per]], "page": page, "per": per,
                "more": len(hits) > per, "ms": round((time.perf_counter() - started) * 1000, 2)}

    def api_folders(self) -> list[dict[str, str]]:
        """Every folder holding an indexed file, and the folders above it in the inbox."""
        found: set[Path] = set()
        for r in self.db.query("SELECT path FROM jobs WHERE state = 'done'"):
            folder = decode_path(r["path"]).parent
            while folder not in found:
                found.add(folder)
                if folder in self.inbox or folder.parent == folder:
                    break
                folder = folder.parent
        return [{"path": str(f), "label": self.relative(f)} for f in sorted(found)]

    def job_file(self, job_id: int, what: str) -> Path | None:
        if not 0 <= job_id <= MAX_ID:
            return None
        rows = self.db.query("SELECT path, md_path, txt_path FROM jobs WHERE id = ? "
                             "AND state = 'done'", (job_id,))
        if not rows:
            return None
        column = {"original": "path", "md": "md_path", "txt": "txt_path"}.get(what)
        if column is None or rows[0][column] is None:
            return None
        return decode_path(rows[0][column])

    def openable(self, path: Path) -> str | None:
        """Why ``path`` must not be opened now, or None. The file in the index may have
        been replaced by a link since (to a script, to someone else's file), or a folder
        above it: the opener would follow it. As when reading, no link below the inbox is
        followed (unless follow_symlinks), and only a regular file is opened."""
        root = source_root(path, self.inbox, self.follow_symlinks)
        try:
            if root is not None:
                fd = open_beneath(root, path, os.O_PATH | os.O_NOFOLLOW)
                try:
                    mode = os.fstat(fd).st_mode
                finally:
                    os.close(fd)
            else:
                mode = (os.stat(path) if self.follow_symlinks else os.lstat(path)).st_mode
        except LinkRefused as exc:
            return str(exc)
        except OSError:
            return "that file is gone"
        if stat.S_ISLNK(mode):
            return (f"{path} is a symbolic link now, not the file that was indexed: not "
                    "opened (set follow_symlinks = true to open links)")
        if not stat.S_ISREG(mode):
            return f"{path} is not a regular file now: not opened"
        return None

    def thumbnail(self, job_id: int, page: int) -> bytes | None:
        if not (0 <= job_id <= MAX_ID and 0 <= page <= MAX_ID):
            return None
        rows = self.db.query("SELECT sha256 FROM jobs WHERE id = ? AND state = 'done'",
                             (job_id,))
        if not rows or not rows[0]["sha256"]:
            return None
        try:
            return self.thumbs.path(rows[0]["sha256"], page).read_bytes()
        except (OSError, ValueError):
            return None


class _Handler(BaseHTTPRequestHandler):
    app: SearchServer
    server_version = "ocrwatch"
    sys_version = ""
    protocol_version = "HTTP/1.1"
    timeout = IDLE_TIMEOUT  # per read and write on the connection (StreamRequestHandler)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("search page: " + format, *args)

    # -- checks --------------------------------------------------------------------------
    def _host_ok(self) -> bool:
        port = self.app.port
        return self.headers.get("Host", "") in (f"127.0.0.1:{port}", f"localhost:{port}")

    def _cookie_name(self) -> str:
        return f"ocrwatch_token_{self.app.port}"

    def _token(self, query: dict[str, list[str]]) -> str | None:
        given = query.get("token", [None])[0] or self.headers.get("X-Ocrwatch-Token")
        if given:
            return given
        cookies = SimpleCookie()
        with contextlib.suppress(Exception):
            cookies.load(self.headers.get("Cookie", ""))
        morsel = cookies.get(self._cookie_name())
        return morsel.value if morsel is not None else None

    def _allowed(self, query: dict[str, list[str]]) -> bool:
        if not self._host_ok():
            self._send_text(HTTPStatus.FORBIDDEN, "refused: this page answers only to "
                            "127.0.0.1 and localhost (the Host header named another name)")
            return False
        token = self._token(query)
        if not token or not hmac.compare_digest(token.encode(), self.app.token.encode()):
            self._send_text(HTTPStatus.FORBIDDEN, "refused: the address needs ocrwatch's "
                            "token; open the page from the tray's Search… or with "
                            "`ocrwatch search --web`")
            return False
        return True

    # -- replies -------------------------------------------------------------------------
    def _send(self, status: HTTPStatus, body: bytes, ctype: str,
              extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Content-Security-Policy",
                         "default-src 'self'; img-src 'self'; frame-ancestors 'none'")
        for key, value in (extra or {}).items():
            self.send_header(key, value)
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
        if not self._allowed(query):
            return
        try:
            self._get(url.path, query)
        except SearchError as exc:
            self._send_json({"error": str(exc)}, HTTPStatus.BAD_REQUEST)
        except OcrwatchError as exc:
            self._send_json({"error": str(exc)}, HTTPStatus.SERVICE_UNAVAILABLE)
        except Exception:
            log.exception("search page: %s failed", url.path)
            self._send_json({"error": "the search failed inside ocrwatch; see its log"},
                            HTTPStatus.INTERNAL_SERVER_ERROR)

    def _get(self, path: str, query: dict[str, list[str]]) -> None:
        if path == "/" and "token" in query:
            # Keep the token in a cookie and out of the address bar and history.
            cookie = (f"{self._cookie_name()}={self.app.token}; HttpOnly; SameSite=Strict; "
                      "Path=/")
            self._send(HTTPStatus.SEE_OTHER, b"", "text/plain",
                       {"Location": "/", "Set-Cookie": cookie})
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
        if path == "/api/folders":
            self._send_json({"folders": self.app.api_folders(), "types": list(TYPES)})
            return
        if path.startswith("/thumb/"):
            parts = path.split("/")
            if len(parts) == 4 and parts[2].isdecimal() and parts[3].isdecimal():
                data = self.app.thumbnail(int(parts[2]), int(parts[3]))
                if data is not None:
                    self._send(HTTPStatus.OK, data, "image/webp")
                    return
            self._send_text(HTTPStatus.NOT_FOUND, "no thumbnail for that page")
            return
        self._send_text(HTTPStatus.NOT_FOUND, "no such page")

    def do_POST(self) -> None:
        url = urlsplit(self.path)
        if not self._allowed(parse_qs(url.query)):
            return
        try:
            self._post(url.path)
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
