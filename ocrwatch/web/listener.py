"""The search page's listening socket: a bounded number of connections, each on a thread,
and a quiet console.

Anyone on the machine can connect (the token is checked after the request is read), so
a local user could open thousands of connections and trickle bytes (slowloris) to use
up threads and file descriptors, which the daemon needs to read files, or hold every
connection the page serves and keep its owner out. So:

- a new connection waits for its request head at the door (``ocrwatch/web/doorman.py``:
  no thread, a short deadline, the oldest waiting one goes when too many wait);
- a head that shows the token is served on a thread of its own, at most
  ``MAX_CONNECTIONS`` at once; one that does not (a one-time code, a refusal to write)
  gets one of ``MAX_UNVERIFIED`` threads and its connection is closed after the answer.
  Neither budget can be spent by the other's connections; past one, a short 503;
- each later request on a connection must arrive whole (request line, headers, body)
  within ``web_handler.REQUEST_SECONDS`` of the connection's last answer (see the handler);
- when ``accept`` fails for want of a resource (EMFILE, ENFILE, ENOBUFS, ENOMEM), the
  server pauses a moment instead of spinning on the same error, and goes on;
- a client that goes away mid-answer (BrokenPipe, ConnectionReset) or times out is a
  line at DEBUG in the log; any other error is logged with its traceback in the log,
  never printed on the daemon's console by ``socketserver``.
"""

from __future__ import annotations

import errno
import logging
import socket
import threading
import time
from http.server import ThreadingHTTPServer
from typing import Any

from ocrwatch.core.errors import resource_shortage
from ocrwatch.web.doorman import BUSY, Doorman, refuse
from ocrwatch.web.handler import shows_token

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 32  # with the token: one user's browser opens a handful
MAX_UNVERIFIED = 4  # without it: each is answered at once (a cookie, or a refusal)
RESOURCE_PAUSE = 0.2  # seconds without accepting after such an error


class BoundedServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64  # the listen backlog: a burst is answered (503), not dropped

    def __init__(self, address: tuple[str, int], handler: Any) -> None:
        super().__init__(address, handler)
        self._token: str = handler.app.token
        self._slots = {True: threading.BoundedSemaphore(MAX_CONNECTIONS),
                       False: threading.BoundedSemaphore(MAX_UNVERIFIED)}
        self._heads: dict[socket.socket, tuple[bytes, bool]] = {}  # read at the door
        self._heads_lock = threading.Lock()
        self.refused = 0  # connections closed at once because all slots were taken
        self.resource_errors = 0
        self.door = Doorman(self._dispatch)
        self.door.start()

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
        self.door.admit(request, client_address)

    def _dispatch(self, sock: socket.socket, address: Any, head: bytes) -> None:
        """A head has arrived (on the door's thread): a thread from its budget."""
        verified = shows_token(head, self._token, int(self.server_address[1]))
        slots = self._slots[verified]
        if not slots.acquire(blocking=False):
            self.refused += 1
            refuse(sock, BUSY)
            return
        with self._heads_lock:
            self._heads[sock] = (head, verified)
        try:
            threading.Thread(target=self._serve, args=(sock, address, slots),
                             name="ocrwatch-search-request", daemon=True).start()
        except BaseException:
            slots.release()  # the thread never started: its slot is free again
            with self._heads_lock:
                self._heads.pop(sock, None)
            sock.close()
            raise

    def _serve(self, sock: socket.socket, address: Any,
               slots: threading.BoundedSemaphore) -> None:
        try:
            self.process_request_thread(sock, address)
        finally:
            with self._heads_lock:
                self._heads.pop(sock, None)
            slots.release()

    def taken_at_door(self, sock: socket.socket) -> tuple[bytes, bool]:
        """The bytes the door read from ``sock``, and whether they showed the token."""
        with self._heads_lock:
            return self._heads.pop(sock, (b"", False))

    def server_close(self) -> None:
        self.door.close(timeout=10)
        super().server_close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            log.debug("search page: a client went away: %s", exc)
            return
        log.error("search page: a request failed", exc_info=True)
