"""The search page's door: every new connection waits here, on one thread and without a
thread of its own, until its request head (request line and headers) has arrived.

Anyone on the machine can connect, and whether a connection holds the token is known only
once its head is read. Were each connection given a thread (and one of the page's slots)
at once, another local user could hold every slot with idle or trickling connections and
keep the owner at 503. Here a waiting connection costs a descriptor and a small buffer:

- at most ``MAX_WAITING`` wait at once; one more makes the oldest waiting one go (a
  browser sends its head at once, so the oldest is the one that has shown least);
- a head must arrive whole within ``HEAD_SECONDS`` of the connection, and within
  ``MAX_HEAD`` bytes; past either the connection is closed (slowloris).

A head that has arrived whole goes to ``dispatch`` with the bytes read so far.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from ocrwatch.core.threads import Service

log = logging.getLogger(__name__)

MAX_WAITING = 64  # connections whose head has not arrived yet
HEAD_SECONDS = 3.0  # from connection to the end of its head
MAX_HEAD = 64 * 1024  # bytes of a head, as http.server's longest line
_END = (b"\r\n\r\n", b"\n\n")
BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n"
        b"Retry-After: 1\r\n\r\n")
Dispatch = Callable[[socket.socket, Any, bytes], None]


def refuse(sock: socket.socket, answer: bytes = BUSY) -> None:
    """A short answer if the socket takes it at once, then closed."""
    with contextlib.suppress(OSError):
        sock.setblocking(False)
        sock.send(answer)
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


class _Waiting:
    __slots__ = ("address", "deadline", "head")

    def __init__(self, address: Any) -> None:
        self.address = address
        self.deadline = time.monotonic() + HEAD_SECONDS
        self.head = b""


class Doorman(Service):
    def __init__(self, dispatch: Dispatch) -> None:
        super().__init__("ocrwatch-search-door")
        self._dispatch = dispatch
        self._arrived: collections.deque[tuple[socket.socket, Any]] = collections.deque()
        self._lock = threading.Lock()
        self._bell, self._ring = socket.socketpair()
        self._bell.setblocking(False)
        self._ring.setblocking(False)
        self._waiting: dict[socket.socket, _Waiting] = {}  # oldest first
        self.cut = 0  # connections closed before their head had arrived

    def admit(self, sock: socket.socket, address: Any) -> None:
        """A new connection (called on the accepting thread)."""
        with self._lock:
            if len(self._arrived) >= MAX_WAITING:  # the door is stalled: no pile-up
                full = True
            else:
                full = False
                self._arrived.append((sock, address))
        if full:
            refuse(sock)
            return
        with contextlib.suppress(OSError):
            self._ring.send(b".")

    def wake(self) -> None:
        with contextlib.suppress(OSError):
            self._ring.send(b".")

    def run(self) -> None:
        with selectors.DefaultSelector() as sel:
            sel.register(self._bell, selectors.EVENT_READ)
            try:
                while not self.stopping:
                    soonest = min((w.deadline for w in self._waiting.values()),
                                  default=time.monotonic() + 1.0)
                    for key, _ in sel.select(max(0.0, soonest - time.monotonic())):
                        if key.fileobj is self._bell:
                            with contextlib.suppress(OSError):
                                self._bell.recv(4096)
                        elif isinstance(key.fileobj, socket.socket):
                            self._read(sel, key.fileobj)
                    self._take_arrived(sel)
                    self._sweep(sel)
            finally:
                for sock in list(self._waiting):
                    self._drop(sel, sock)
                with self._lock:
                    arrived = list(self._arrived)
                    self._arrived.clear()
                for sock, _ in arrived:
                    sock.close()
                self._bell.close()
                self._ring.close()

    def _take_arrived(self, sel: selectors.BaseSelector) -> None:
        with self._lock:
            arrived = list(self._arrived)
            self._arrived.clear()
        for sock, address in arrived:
            sock.setblocking(False)
            self._waiting[sock] = _Waiting(address)
            sel.register(sock, selectors.EVENT_READ)
            self._read(sel, sock)  # a browser's head is often there already
        while len(self._waiting) > MAX_WAITING:
            self.cut += 1
            self._drop(sel, next(iter(self._waiting)), BUSY)

    def _read(self, sel: selectors.BaseSelector, sock: socket.socket) -> None:
        waiting = self._waiting.get(sock)
        if waiting is None:
            return
        try:
            data = sock.recv(MAX_HEAD + 1 - len(waiting.head))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(sel, sock)
            return
        waiting.head += data
        if not any(end in waiting.head for end in _END) and len(waiting.head) <= MAX_HEAD:
            return
        # Whole, or too long (the handler answers 431 or 414 from the bytes): handed on.
        sel.unregister(sock)
        del self._waiting[sock]
        sock.setblocking(True)
        try:
            self._dispatch(sock, waiting.address, waiting.head)
        except Exception:
            log.exception("search page: a connection could not be handed on")
            sock.close()

    def _sweep(self, sel: selectors.BaseSelector) -> None:
        now = time.monotonic()
        for sock, waiting in list(self._waiting.items()):
            if waiting.deadline <= now:
                self.cut += 1
                self._drop(sel, sock)

    def _drop(self, sel: selectors.BaseSelector, sock: socket.socket,
              answer: bytes | None = None) -> None:
        del self._waiting[sock]
        with contextlib.suppress(KeyError, ValueError):
            sel.unregister(sock)
        if answer is not None:
            refuse(sock, answer)
        else:
            sock.close()
