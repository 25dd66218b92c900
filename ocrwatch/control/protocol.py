"""The control protocol: one JSON object per line each way, and what the daemon
answers to each command (:class:`Commands`).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from ocrwatch.core.errors import DaemonError, OcrwatchError, UsageError
from ocrwatch.core.status import Status

log = logging.getLogger(__name__)

MAX_LINE = 64 * 1024  # a request is a short JSON line; anything longer is refused
COMMANDS = ("ping", "status", "pause", "resume", "stop", "rescan", "retry", "web", "reload",
            "reread", "outputs")


@runtime_checkable
class Controllable(Protocol):
    """What the tray and the control socket need from the daemon.

    The return values of the methods other than ``status`` and ``retry`` are ignored.
    """

    def status(self) -> Status: ...

    def pause(self) -> object: ...

    def resume(self) -> object: ...

    def request_stop(self) -> object: ...

    def rescan(self) -> object: ...

    def retry(self, paths: list[str] | None, all_failed: bool) -> int: ...


class Commands:
    """The daemon's side of the protocol: one request line in, one answer out."""

    def __init__(self, target: Controllable) -> None:
        self.target = target
        self._handlers: dict[str, Callable[[dict[str, Any]], Any]] = {
            "ping": lambda _req: {"pid": os.getpid()},
            "status": lambda _req: self.target.status().to_dict(),
            "pause": self._pause,
            "resume": self._resume,
            "stop": self._stop,
            "rescan": self._rescan,
            "retry": self._retry,
            "web": self._web,
            "reload": self._reload,
            "reread": self._reread,
            "outputs": self._outputs,
        }

    def handle_line(self, line: bytes) -> dict[str, Any]:
        """Answer one request line; never raises."""
        try:
            req = json.loads(line)
        except Exception:  # also RecursionError from a deeply nested line
            return {"ok": False, "error": "request is not valid JSON"}
        if not isinstance(req, dict) or not isinstance(req.get("cmd"), str):
            return {"ok": False, "error": 'request must be a JSON object like {"cmd": "status"}'}
        cmd = req["cmd"]
        handler = self._handlers.get(cmd)
        if handler is None:
            return {"ok": False,
                    "error": f"unknown command {short(cmd)!r}; known: {', '.join(COMMANDS)}"}
        try:
            return {"ok": True, "result": handler(req)}
        except OcrwatchError as exc:
            return {"ok": False, "error": str(exc)}
        except Exception as exc:
            log.exception("control command %r failed", cmd)
            return {"ok": False,
                    "error": f"{cmd} failed inside the daemon: {exc!r}; see the daemon's log"}

    def _pause(self, _req: dict[str, Any]) -> dict[str, Any]:
        self.target.pause()
        return self.target.status().to_dict()

    def _resume(self, _req: dict[str, Any]) -> dict[str, Any]:
        self.target.resume()
        return self.target.status().to_dict()

    def _stop(self, _req: dict[str, Any]) -> dict[str, Any]:
        log.info("stop requested over the control socket")
        self.target.request_stop()
        return {"pid": os.getpid()}

    def _rescan(self, _req: dict[str, Any]) -> None:
        self.target.rescan()

    def _web(self, _req: dict[str, Any]) -> dict[str, str]:
        web_url = getattr(self.target, "web_url", None)
        if web_url is None:
            raise DaemonError("this daemon has no search page")
        launch = getattr(self.target, "web_launch", None)
        # "url" (with the token) for scripts of this user; "open" for a browser's command
        # line, which other users can read: a private file with a one-time code.
        return {"url": str(web_url()), "open": str(launch() if launch else web_url())}

    def _reload(self, _req: dict[str, Any]) -> Any:
        reload = getattr(self.target, "reload", None)
        if reload is None:
            raise DaemonError("this daemon cannot reload its configuration")
        return reload("ocrwatch reload")

    def _reread(self, req: dict[str, Any]) -> int:
        reread = getattr(self.target, "reread", None)
        if reread is None:
            raise DaemonError("this daemon cannot read files again; stop it and run "
                                "`ocrwatch reread`")
        return int(reread(bool(req.get("all", False))))

    def _outputs(self, _req: dict[str, Any]) -> Any:
        write = getattr(self.target, "write_outputs", None)
        if write is None:
            raise DaemonError("this daemon cannot write outputs again; stop it and run "
                                "`ocrwatch reread --outputs`")
        return write()

    def _retry(self, req: dict[str, Any]) -> int:
        raw = req.get("paths")
        if raw is not None and (not isinstance(raw, list)
                                or not all(isinstance(p, str) for p in raw)):
            raise UsageError("retry: 'paths' must be a list of file paths")
        return self.target.retry(raw, bool(req.get("all_failed", False)))


def short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def encode(obj: dict[str, Any]) -> bytes:
    try:
        return json.dumps(obj, default=str).encode() + b"\n"
    except Exception as exc:  # a result that cannot be written as JSON
        log.exception("control socket: cannot encode an answer")
        return json.dumps({"ok": False, "error": f"cannot encode the answer: {exc!r}"}
                          ).encode() + b"\n"
