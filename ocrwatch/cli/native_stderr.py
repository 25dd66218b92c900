"""Messages that native libraries write straight to file descriptor 2 go to the log.

Leptonica ("Error in boxClipToRectangle"), Tesseract, GLib/GTK ("Gdk-CRITICAL") and the
vLLM worker write to the process's stderr with C calls that Python's ``sys.stderr``
never sees. In the daemon they would land on the user's console with no time or
context. Here descriptor 2 becomes a pipe whose lines are logged (to the log file only:
they mean nothing to the user and are kept for whoever reads the log), while Python's
own ``sys.stderr``, and with it the log's console handler, keep the original stderr.

Why not wurlitzer (which redirects descriptors into a logger): it leaves Python's own
stderr on descriptor 2, so the console handler and tracebacks would be swallowed into
the pipe too, and keeping them on the console needs the duplicated descriptor below
anyway; what remains is a 20-line reading thread.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import threading
from typing import TextIO

log = logging.getLogger("ocrwatch.native")
MAX_LINE = 4096  # a line longer than this is logged in pieces


def is_native(record: logging.LogRecord) -> bool:
    """Whether ``record`` is a native library's stderr line (kept off the console)."""
    return bool(getattr(record, "native", False))


class NativeStderr:
    """Descriptor 2 redirected into the log while open; ``close`` puts it back."""

    def __init__(self) -> None:
        self._saved: int | None = None
        self._read: int | None = None
        self._python_stderr: TextIO | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> NativeStderr:
        if self._saved is not None:
            return self
        sys.stderr.flush()
        saved = os.dup(2)
        read, write = os.pipe()
        os.set_inheritable(read, False)
        # Python keeps writing to the real stderr through a copy of its descriptor.
        stream = io.TextIOWrapper(io.FileIO(saved, "w", closefd=False), encoding="utf-8",
                                  errors="backslashreplace", line_buffering=True)
        old = sys.stderr
        for handler in logging.getLogger().handlers:
            if isinstance(handler, logging.StreamHandler) and handler.stream is old:
                handler.setStream(stream)
        os.dup2(write, 2)
        os.close(write)
        self._saved, self._read, self._python_stderr = saved, read, old
        sys.stderr = stream
        self._thread = threading.Thread(target=self._pump, name="ocrwatch-native-stderr",
                                        daemon=True)
        self._thread.start()
        return self

    def _pump(self) -> None:
        assert self._read is not None
        with io.FileIO(self._read, "r", closefd=False) as raw:
            pending = b""
            while chunk := raw.read(65536):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    self._emit(line)
                while len(pending) > MAX_LINE:
                    self._emit(pending[:MAX_LINE])
                    pending = pending[MAX_LINE:]
            if pending:
                self._emit(pending)

    @staticmethod
    def _emit(line: bytes) -> None:
        text = line.decode("utf-8", errors="backslashreplace").rstrip()
        if text:
            log.info("%s", text, extra={"native": True})

    def close(self) -> None:
        """Give descriptor 2 back; safe twice. Lines already written are logged first."""
        saved, self._saved = self._saved, None
        if saved is None:
            return
        stream = sys.stderr
        with contextlib.suppress(OSError):
            stream.flush()
        os.dup2(saved, 2)  # drops this process's write end of the pipe
        if self._python_stderr is not None:
            for handler in logging.getLogger().handlers:
                if isinstance(handler, logging.StreamHandler) and handler.stream is stream:
                    handler.setStream(self._python_stderr)
            sys.stderr = self._python_stderr
        if self._thread is not None:
            # A child process may still hold the pipe; then the pump ends with the process.
            self._thread.join(timeout=2)
        if self._read is not None and (self._thread is None or not self._thread.is_alive()):
            os.close(self._read)
        os.close(saved)
