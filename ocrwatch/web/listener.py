"""The search page's listening socket: a bounded number of connections, each on a thread,
and a quiet console.

Anyone on the machine can connect (the token is checked after the request is read), so
a local user could open thousands of connections and trickle bytes (slowloris) to use
up threads and file descriptors, which the daemon needs to read files. So:

- at most ``MAX_CONNECTIONS`` are served at once; one more is closed at once with a short
  503 answer;
- each request must arrive whole (request line, headers, body) within
  ``web_handler.REQUEST_SECONDS`` of the connection's last answer (see the handler);
- when ``accept`` fails for want of a resource (EMFILE, ENFILE, ENOBUFS, ENOMEM), the
  server pauses a moment instead of spinning on the same error, and goes on;
- a client that goes away mid-answer (BrokenPipe, ConnectionReset) or times out is a
  line at DEBUG in the log; any other error is logged with its traceback in the log,
  never printed on the daemon's console by ``socketserver``.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import socket
import threading
import time
from http.server import ThreadingHTTPServer
from typing import Any

from ocrwatch.core.errors import resource_shortage

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 32  # one user's browser opens a handful
RESOURCE_PAUSE = 0.2  # seconds without accepting after such an error
_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n"
         b"Retry-After: 1\r\n\r\n")


class BoundedServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64  # the listen backlog: a burst is answered (503), not dropped

    def __init__(self, address: tuple[str, int], handler: Any) -> None:
        super().__init__(address, handler)
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self.refused = 0  # connections closed at once because all slots were taken
        self.resource_errors = 0

    def get_request(self) -> tuple[socket.socket, Any]:
        try:
            return super().get_request()
        except OSError as exc:
            # EAGAIN from accept() means no connection waits: nothing has run out.
            if resource_shortage(exc) and exc.errno != errno.EAGAIN:
                self.resource_errors += 1
                if self.resource_errors == 1 or self.resource_errors % 1000 == 0:
                    log.warning("search page: cannot accept a connection (%s); pausing "
                                "%g s, then going on", exc.strerror, RESOURCE_PAUSE)
                time.sleep(RESOURCE_PAUSE)
            raise

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.refused += 1
            with contextlib.suppress(OSError):
                request.setblocking(False)
                request.send(_BUSY)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()  # the thread never started: its slot is free again
            self.shutdown_request(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            log.debug("search page: a client went away: %s", exc)
            return
        log.error("search page: a request failed", exc_info=True)
