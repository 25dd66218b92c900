"""The search page: a small HTTP server on 127.0.0.1, for this user only.

Built on the standard library's ``http.server``: the page needs five read-only routes
and one "open this file" action for one local user, which a framework would not make
shorter or safer, and ``ThreadingHTTPServer`` ships with Python (nothing to install,
nothing to keep up to date). The page itself (HTML, CSS, JavaScript) ships in
``ocrwatch/data/search/``; it fetches nothing from the internet.

Safety, as Jupyter does it: the server listens on 127.0.0.1 at a free port; every request
needs the secret token, kept in a cookie (HttpOnly, SameSite=Strict) for that port. The
browser is never given the token on its command line (which every local user can read in
/proc/PID/cmdline): it opens a 0600 file (:meth:`SearchServer.launch_url`) that sends it
on with a one-time code, exchanged for the cookie on first use and void after that or
after ``CODE_SECONDS``. The token is also written to a file only the user can read, for
scripts. No token or code is ever logged. A request whose Host header is not 127.0.0.1
or localhost at our port is refused (DNS rebinding). The index is opened read-only (``mode=ro`` and
``query_only``): no request writes anything. Thumbnails and files are served or opened
only for jobs in the index.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hmac
import html
import logging
import os
import secrets
import stat
import threading
import time
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

from ocrwatch.config import Config
from ocrwatch.core.errors import SearchError, StateError
from ocrwatch.core.threads import Service
from ocrwatch.fs.private import private_dir
from ocrwatch.fs.safeopen import LinkRefused, open_beneath, source_root
from ocrwatch.pages.thumbs import Thumbnails
from ocrwatch.store.db import Database, file_identity
from ocrwatch.store.index import Filters, Hit, search
from ocrwatch.store.jobs import JobQueue
from ocrwatch.web.handler import App, _Handler
from ocrwatch.web.listener import BoundedServer
from ocrwatch.web.opener import open_file
from ocrwatch.web.params import (
    MAX_ID,
    MAX_PAGE,
    TYPES,
    as_typed,
    launch_folder,
    parse_day,
    snippet_html,
    token_file,
    whole,
)

log = logging.getLogger(__name__)

PER_PAGE = 20
MAX_PER_PAGE = 100
RECENT = 12  # files shown on the empty page
TIME_LIMIT = 5.0  # seconds a page's query may take
CODE_SECONDS = 300.0  # a one-time code not used by then is void (a browser may start slowly)
LAUNCH_PAGE = """<!doctype html>
<meta charset="utf-8"><meta name="referrer" content="no-referrer">
<meta http-equiv="refresh" content="0;url={address}">
<title>ocrwatch search</title>
<p><a href="{address}">Open ocrwatch's search page</a> (this link works once).</p>
"""
Opener = Callable[[Path, "int | None"], None]


class _Serving(Service):
    """The thread that accepts the page's requests (each is then answered on its own)."""

    def __init__(self, httpd: ThreadingHTTPServer) -> None:
        super().__init__("ocrwatch-search-page")
        self.httpd = httpd

    def run(self) -> None:
        self.httpd.serve_forever(poll_interval=0.2)

    def wake(self) -> None:
        self.httpd.shutdown()  # returns once serve_forever has


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
        self._retired: list[Database] = []
        self._httpd: ThreadingHTTPServer | None = None
        self._serving: _Serving | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._codes: dict[str, tuple[float, Path]] = {}  # one-time code: (expiry, page)

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        with self._lock:
            if self._closed:
                raise StateError("the search page's server was closed; start a new one")
            if self._httpd is not None:
                return
            db = Database(self.database, readonly=True, origin="the search page")
            db.query_only()  # no request can write, whatever it does
            self._db = db
            app: App = self  # checked: the server is what the handler asks for
            handler = type("Handler", (_Handler,), {"app": app})
            self._httpd = BoundedServer(("127.0.0.1", self._port), handler)
            self._serving = _Serving(self._httpd)
            self._serving.start()
            if self._write_token_file:
                self._save_url()
        log.info("search page at http://127.0.0.1:%d/", self.port)

    # -- opening the page in a browser ---------------------------------------------------
    def launch_url(self) -> str:
        """A ``file://`` address for the browser's command line: a 0600 page in the
        private runtime folder that forwards to the page with a fresh one-time code.
        Another user sees only the file's name, which they cannot open."""
        code = secrets.token_urlsafe(24)
        folder = private_dir(launch_folder(), ours=True)
        _remove_old_pages(folder)
        target = folder / f"search-{secrets.token_hex(8)}.html"
        address = f"http://127.0.0.1:{self.port}/?code={code}"
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(LAUNCH_PAGE.format(address=html.escape(address, quote=True)))
        with self._lock:
            self._sweep_codes()
            self._codes[code] = (time.monotonic() + CODE_SECONDS, target)
        return target.as_uri()

    def redeem(self, code: str) -> bool:
        """True once for a code handed out and not yet used or expired."""
        with self._lock:
            self._sweep_codes()
            found = next((k for k in self._codes if hmac.compare_digest(k, code)), None)
            if found is None:
                return False
            _deadline, page = self._codes.pop(found)
        with contextlib.suppress(OSError):
            page.unlink()  # it has done its work; the code in it is spent
        return True

    def _sweep_codes(self) -> None:
        now = time.monotonic()
        for code, (deadline, page) in list(self._codes.items()):
            if deadline < now:
                del self._codes[code]
                with contextlib.suppress(OSError):
                    page.unlink()

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
            httpd, serving, db = self._httpd, self._serving, self._db
        if serving is not None:
            serving.close(timeout=10)
        if httpd is not None:
            httpd.server_close()
        for old in [*self._retired, *([db] if db is not None else [])]:
            old.close()
        with self._lock:
            pages = [page for _deadline, page in self._codes.values()]
            self._codes.clear()
        for page in pages:
            with contextlib.suppress(OSError):
                page.unlink()
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
            raise StateError("the search page's server is not started")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """The page's address with the token, to open in a browser."""
        return f"http://127.0.0.1:{self.port}/?token={self.token}"

    # -- answers -------------------------------------------------------------------------
    @property
    def db(self) -> Database:
        assert self._db is not None
        if file_identity(self.database) not in (None, self._db.identity):
            self._reopen()
        return self._db

    def _reopen(self) -> None:
        """The index was written back under a new inode (ocrwatch/indexhealth.py): read
        that one, not the lost file this connection still holds."""
        with self._lock:
            old = self._db
            if self._closed or old is None or file_identity(self.database) == old.identity:
                return
            db = Database(self.database, readonly=True, origin="the search page")
            db.query_only()
            self._db = db
            self._retired.append(old)  # a request may be reading it: closed with the server

    def relative(self, path: Path) -> str:
        for root in self.inbox:
            with contextlib.suppress(ValueError):
                return str(Path(root.name) / path.relative_to(root))
        return str(path)

    def hit_json(self, hit: Hit) -> dict[str, Any]:
        path = Path(hit.path)
        has_thumb = False
        if hit.sha256:  # in the hit's row: no query per hit
            with contextlib.suppress(ValueError):
                has_thumb = self.thumbs.path(hit.sha256, hit.page).exists()
        return {
            "job_id": hit.job_id, "page": hit.page, "pages": hit.pages,
            "name": path.name, "folder": self.relative(path.parent), "path": hit.path,
            "date": (_dt.datetime.fromtimestamp(hit.mtime).strftime("%Y-%m-%d %H:%M")
                     if hit.mtime is not None else None),
            "snippet": snippet_html(hit.snippet),
            "thumb": (thumb_url(hit.job_id, hit.page, hit.sha256) if has_thumb and hit.sha256
                      else None),
            "sidecar": bool(hit.md_path or hit.txt_path),  # its text: the .md, else the .txt
            "doubt": hit.doubt,  # read with doubts: its original kept, its text to check
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

    def api_recent(self, params: dict[str, str]) -> dict[str, Any]:
        """The files read last, newest first (the page before anything is typed)."""
        started = time.perf_counter()
        per = whole(params.get("per", "") or str(RECENT), "per", 1, MAX_PER_PAGE)
        hits = JobQueue(self.db).recent_done(per)
        return {"hits": [self.hit_json(h) for h in hits], "page": 1, "per": per,
                "more": False, "recent": True,
                "ms": round((time.perf_counter() - started) * 1000, 2)}

    def api_folders(self) -> list[dict[str, str | int]]:
        """The watched folders' tree: each inbox, and each folder in it that holds an
        indexed file with the folders between, in tree order, named from the inbox
        (``inbox/letters``); ``depth`` is its level below its inbox. Files read from
        elsewhere (``ocrwatch read`` of another folder) add nothing."""
        found: set[Path] = set(self.inbox)
        # Each folder once: many files share one.
        for folder in {path.parent for path in JobQueue(self.db).done_paths()}:
            root = next((r for r in self.inbox if folder.is_relative_to(r)), None)
            if root is None:
                continue
            while folder not in found and folder.is_relative_to(root):
                found.add(folder)
                folder = folder.parent

        def owner(folder: Path) -> Path:  # an inbox inside another one owns its own
            return max((r for r in self.inbox if folder.is_relative_to(r)),
                       key=lambda r: len(r.parts))

        tree: list[dict[str, str | int]] = []
        for root in self.inbox:
            below = sorted((f for f in found if owner(f) == root),
                           key=lambda f: [p.casefold() for p in f.relative_to(root).parts])
            tree += [{"path": str(f), "label": str(root.name / f.relative_to(root)),
                      "depth": len(f.relative_to(root).parts)} for f in below]
        return tree

    def job_file(self, job_id: int, what: str) -> Path | None:
        if not 0 <= job_id <= MAX_ID:
            return None
        files = JobQueue(self.db).done_files(job_id)
        if files is None:
            return None
        if what == "md" and files.get("md") is None:  # the page's "text" link: .md, else .txt
            return files.get("txt")
        return files.get(what)

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

    def thumbnail(self, job_id: int, page: int) -> tuple[bytes, str] | None:
        if not (0 <= job_id <= MAX_ID and 0 <= page <= MAX_ID):
            return None
        sha256 = JobQueue(self.db).done_content(job_id)
        if sha256 is None:
            return None
        try:
            return self.thumbs.path(sha256, page).read_bytes(), thumb_version(sha256)
        except (OSError, ValueError):
            return None




def thumb_version(sha256: str) -> str:
    """What names a thumbnail's content in its address and ETag: the file's content
    decides the picture, so a file written anew gets a new address."""
    return sha256[:16]


def thumb_url(job_id: int, page: int, sha256: str) -> str:
    return f"/thumb/{job_id}/{page}?v={thumb_version(sha256)}"


def _remove_old_pages(folder: Path) -> None:
    """Pages left by a server that stopped without removing them (a crash): their codes
    died with it; those older than CODE_SECONDS are removed (younger ones may be another
    server's, still to be opened)."""
    now = time.time()
    with contextlib.suppress(OSError):
        for page in folder.glob("search-*.html"):
            with contextlib.suppress(OSError):
                if now - page.lstat().st_mtime > CODE_SECONDS:
                    page.unlink()


def for_daemon(config: Config, thumbs: Thumbnails) -> SearchServer:
    """The daemon's search page, for its settings (``Daemon(search_page=for_daemon)``)."""
    return SearchServer(config.database, thumbs, inbox=config.inbox,
                        follow_symlinks=config.follow_symlinks)
