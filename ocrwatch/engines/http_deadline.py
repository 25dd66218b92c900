"""A total deadline for one HTTP request, however slowly the server trickles its answer.

httpx's timeouts are per network operation: a server that sends one byte every few
seconds never trips a 10 s read timeout, and its answer can take hours. Here every read
and write of a connection is also bounded by the deadline of the request the calling
thread is making (:func:`deadline`), so the whole exchange (headers included) ends by
then with ``httpx.ReadTimeout`` (or ``WriteTimeout``).

It works at httpcore's network layer because that is where httpx's sync client reads:
one request is read by the thread that sent it (HTTP/1.1, the only protocol vLLM's
server speaks), so a thread-local deadline applies to exactly that request.
"""

from __future__ import annotations

import contextlib
import ssl
import threading
import time
import typing
from collections.abc import Iterator

import httpcore
import httpx

_local = threading.local()


@contextlib.contextmanager
def deadline(at: float) -> Iterator[None]:
    """Bound every network operation of this thread by ``at`` (``time.monotonic()``)."""
    previous = getattr(_local, "at", None)
    _local.at = at
    try:
        yield
    finally:
        _local.at = previous


def _bounded(timeout: float | None, error: type[Exception]) -> float | None:
    at: float | None = getattr(_local, "at", None)
    if at is None:
        return timeout
    left = at - time.monotonic()
    if left <= 0:
        raise error("the request's total deadline passed")
    return left if timeout is None else min(timeout, left)


class _Stream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _bounded(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _bounded(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _Stream(self._inner.start_tls(ssl_context, server_hostname,
                                             _bounded(timeout, httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str) -> typing.Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    def __init__(self, inner: httpcore.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                    local_address: str | None = None,
                    socket_options: typing.Iterable[typing.Any] | None = None,
                    ) -> httpcore.NetworkStream:
        return _Stream(self._inner.connect_tcp(
            host, port, _bounded(timeout, httpcore.ConnectTimeout), local_address,
            socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: typing.Iterable[typing.Any] | None = None,
                            ) -> httpcore.NetworkStream:
        return _Stream(self._inner.connect_unix_socket(
            path, _bounded(timeout, httpcore.ConnectTimeout), socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def transport(**kwargs: typing.Any) -> httpx.HTTPTransport:
    """``httpx.HTTPTransport(**kwargs)`` whose connections honour :func:`deadline`."""
    made = httpx.HTTPTransport(**kwargs)
    # httpx exposes no network backend of its own; its pool (httpcore) takes one. The
    # test of a trickled answer (tests/test_remote_hostile.py) catches a change here.
    pool = made._pool
    pool._network_backend = _Backend(pool._network_backend)
    return made
