"""The ``/metrics`` HTTP server: prometheus_client's text format on the daemon's own
registry, bounded whatever comes: a few worker threads, a deadline per connection, and a
connection beyond what they and a short wait list can hold closed at once, so that many
slow or stuck scrapers cost the daemon a few threads and never its reading.

No token: a scraper carries none. What it serves holds no file name (labels come from
fixed sets), and the address is loopback unless the user names another.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from ocrwatch.config.check import metrics_endpoint
from ocrwatch.core.errors import ConfigError

log = logging.getLogger(__name__)

WORKERS = 4  # scrapes answered at once
WAITING = 8  # connections accepted and waiting for a worker; more are closed at once
DEADLINE_SECONDS = 2.0  # for a connection's whole request; a scrape answers in ms


class _Deadline:
    """The request's reader, with the connection's deadline on every read: a client
    sending a byte a second cannot hold a worker longer than the deadline."""

    def __init__(self, rfile: Any, sock: socket.socket, deadline: float) -> None:
        self._rfile, self._sock, self._deadline = rfile, sock, deadline

    def readline(self, limit: int = -1) -> bytes:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request took too long")
        self._sock.settimeout(left)
        return bytes(self._rfile.readline(limit))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._rfile, name)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = DEADLINE_SECONDS  # per write of the answer (StreamRequestHandler)
    protocol_version = "HTTP/1.0"  # one request a connection: no idle keep-alive held

    def setup(self) -> None:
        super().setup()
        self.rfile = _Deadline(self.rfile, self.connection,  # type: ignore[assignment]
                               time.monotonic() + DEADLINE_SECONDS)

    def do_GET(self) -> None:  # http.server names it
        if self.path.split("?", 1)[0] != "/metrics":
            self.send_error(404, "only /metrics is served here")
            return
        # The format the scraper asks for (Prometheus' text, or OpenMetrics), by the library.
        encode, content_type = choose_encoder(self.headers.get("Accept", ""))
        body = encode(self.server.registry)
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("metrics: " + format, *args)


class _Server(HTTPServer):
    """Each accepted connection is handed to a fixed pool; one that finds the pool and
    its wait list full is closed unanswered (the scraper tries again next interval)."""

    def __init__(self, address: tuple[str, int], registry: CollectorRegistry) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.registry = registry
        self._pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="ocrwatch-metrics")
        self._slots = threading.BoundedSemaphore(WORKERS + WAITING)
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            self._pool.submit(self._serve, request, client_address)
        except RuntimeError:  # closing: the pool takes nothing more
            self._slots.release()
            self.shutdown_request(request)

    def _serve(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:  # a scraper's broken connection is its own affair
            log.debug("metrics connection from %s ended badly", client_address, exc_info=True)
        finally:
            self.shutdown_request(request)
            self._slots.release()

    def server_close(self) -> None:
        super().server_close()
        self._pool.shutdown(wait=True, cancel_futures=True)


class MetricsServer:
    """Serves ``registry`` at ``http://ADDRESS/metrics``. Start once, close once."""

    def __init__(self, address: str, registry: CollectorRegistry) -> None:
        self.address = address
        host, port = metrics_endpoint(address)
        try:
            self._httpd = _Server((host, port), registry)
        except OSError as exc:
            raise ConfigError(
                f"metrics not served: cannot listen on {address} ({exc.strerror or exc}); "
                "another program may use that port: choose another metrics_address, or "
                "leave it empty to turn metrics off") from exc
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        kwargs={"poll_interval": 0.5},
                                        name="ocrwatch-metrics-listen", daemon=True)
        self._closed = False

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        host = str(self._httpd.server_address[0])
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}/metrics"

    def start(self) -> None:
        self._thread.start()
        log.info("metrics served at %s", self.url)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._thread.is_alive():
            self._httpd.shutdown()
            self._thread.join()
        self._httpd.server_close()
