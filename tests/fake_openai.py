"""A small OpenAI-compatible server on 127.0.0.1 that reads no text, for the remote engine.

It speaks real HTTP/1.1 with keep-alive (``ThreadingHTTPServer``), like ``vllm serve``:
``GET /v1/models`` and ``POST /v1/chat/completions`` with one image as a data URL. Its
answer names the image's size and the colour of its top-left pixel, so a test can tell
which page an answer belongs to. How it misbehaves is scripted:

- ``mode = "ok"``: answer (after ``delay`` seconds; with ``slots``, at most that many
  requests spend their delay at once and the rest wait their turn, as a GPU server with
  ``--max-num-seqs`` queues what does not fit);
- ``"busy"``: HTTP 503 (``busy_left`` times, then "ok"; -1: always);
- ``"unsent"``: HTTP 500 as vllm-router answers when the server it chose is gone
  ("error sending request for url"), ``busy_left`` times, then "ok";
- ``"hang"``: take the request and never answer until ``release()``;
- ``"drop"``: take the request and close the connection without a word;
- ``"content"``: answer 200 with ``content`` as the message's content (any JSON value);
- ``"huge"``: a valid answer of ``huge_bytes`` bytes (counted in ``bytes_sent`` as sent);
- ``"trickle"``: a valid answer, one byte every ``delay`` seconds (``trickle_headers``:
  the status line and headers too);
- ``scripted``: in mode "ok", a page whose top-left colour is named gets the content and
  finish reason given for it (answers that are not a whole reading);
- ``"gzip"``: a valid answer of ``huge_bytes`` bytes, gzip-compressed whatever was asked.

The colour of the top-left pixel scripts a page whatever the mode (see the constants).
Run as a program (``python fake_openai.py --port 0``) it prints its port and serves until
killed, so a test can kill it with requests in flight.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import gzip
import io
import json
import socket
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from PIL import Image

from ocrwatch.engines.faults import Fault

MODEL = "lightonai/LightOnOCR-2-1B"
# The fault colours, one table for every stand-in.
LOOPS_WHEN_COLD = Fault.LOOPS_WHEN_COLD
LOOPS_ALWAYS = Fault.LOOPS_ALWAYS
FAILS_ONCE = Fault.FAILS_ONCE
FAILS_ALWAYS = Fault.FAILS_ALWAYS
BAD_REQUEST = Fault.BAD_REQUEST


def page_text(width: int, height: int, colour: tuple[int, ...], temperature: float) -> str:
    """What the fake server reads on a page: its size and colour, and the temperature."""
    hexa = "".join(f"{c:02x}" for c in colour[:3])
    return f"# Page {width}x{height} colour {hexa}\n\n*t={temperature}*"


# A LightOnOCR-3 grounding answer, shaped on the example in LightOn's README (a running
# header, a title, a paragraph continued in a second block, an HTML table, escaped math
# delimiters, a footnote, a page number), its words telling which page it belongs to.
HEADER_WORD = "Zebrafinch"  # only in the running header: the index must not find it
FOOTER_WORD = "Quetzalcoatl"  # only in the running footer


def grounding_text(width: int, height: int, colour: tuple[int, ...], temperature: float) -> str:
    hexa = "".join(f"{c:02x}" for c in colour[:3])
    return (
        f"![header](80,20,920,45) Journal of {HEADER_WORD} Studies · Vol. 3\n"
        "![title](113,108,600,140) ## 2.2 LightOnOCR-1\n"
        f"![text](112,160,882,260) The first version of LightOnOCR established the core "
        f"architecture of page {width}x{height} colour {hexa}\n"
        f"![text+](112,270,882,330) and its training recipe at t={temperature}\n"
        "![table](112,350,882,520) <table><tr><th>Model</th><th>Score</th></tr>"
        "<tr><td>Pipeline</td><td>84.0</td></tr></table>\n"
        "![formula](300,560,700,600) \\$E = mc^2\\$\n"
        "![footnote](112,860,882,890) 1 Measured without headers.\n"
        f"![footer](112,900,700,925) {FOOTER_WORD} Press\n"
        "![page_number](491,935,505,950) 3"
    )


class FakeServer:
    """One fake server, in a thread of this process. Use as a context manager."""

    def __init__(self, *, mode: str = "ok", delay: float = 0.0, busy_left: int = -1,
                 models: list[str] | None = None, api_key: str | None = None,
                 ssl_context: Any = None, port: int = 0, retry_after: str = "0",
                 slots: int = 0) -> None:
        self.mode = mode
        # 0: every request spends its delay at once; else that many at a time.
        self.slots = threading.BoundedSemaphore(slots) if slots > 0 else None
        self.retry_after = retry_after  # what a busy answer's Retry-After header says
        self.delay = delay
        self.busy_left = busy_left
        self.models = [MODEL] if models is None else models
        self.api_key = api_key
        self.content: Any = ""  # mode "content": the message's content, as JSON
        self.finish = "stop"  # ... and the answer's finish_reason
        # Any mode: (content, finish_reason) for a page whose top-left colour (hex) is named.
        self.scripted: dict[str, tuple[Any, str]] = {}
        self.huge_bytes = 50 * 1024 * 1024
        self.trickle_headers = False
        self.bytes_sent = 0  # of the "huge" and "trickle" answers
        self.times_file: Any = None  # open text file: "arrived answered" per chat request
        self.metrics: str | None = None  # GET /metrics answers this text, as vLLM's does
        self.lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []
        self.times: list[float] = []  # when each chat request arrived
        self.headers: list[dict[str, str]] = []
        self.answered: Counter[str] = Counter()  # page colour -> answers with text
        self.probes = 0
        self.active = 0
        self.most_active = 0
        self.connections: set[tuple[str, int]] = set()
        self.failed_once: set[tuple[int, ...]] = set()
        self.hold = threading.Event()  # cleared: every request waits until it is set
        self.hold.set()
        self.released = threading.Event()  # set: hanging requests end (no answer)
        self.arrived = threading.Condition(self.lock)
        self._server = ThreadingHTTPServer(("127.0.0.1", port), _handler(self))
        self._server.daemon_threads = False  # joined at close: no thread outlives a test
        if ssl_context is not None:
            self._server.socket = ssl_context.wrap_socket(self._server.socket,
                                                          server_side=True)
        self.port = self._server.server_address[1]
        scheme = "https" if ssl_context is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{self.port}/v1"
        self._thread: threading.Thread | None = None
        self._open: set[socket.socket] = set()  # kept-alive connections, ended at close

    def start(self) -> FakeServer:
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name=f"fake-openai-{self.port}")
        self._thread.start()
        return self

    def serve(self) -> None:
        """Serve in this thread until killed (the program's way)."""
        self._server.serve_forever()

    def release(self) -> None:
        """Let every held or hanging request end."""
        self.hold.set()
        self.released.set()

    def close(self) -> None:
        self.release()
        self._server.shutdown()
        # A client that keeps its connection busy (a router's health checks every second)
        # would hold its thread past the idle timeout: end those connections first.
        with self.lock:
            for sock in self._open:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        self._server.server_close()  # joins the request threads too
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> FakeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def wait_active(self, n: int, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        with self.arrived:
            while self.active < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.arrived.wait(left)
        return True

    @property
    def chat_requests(self) -> int:
        with self.lock:
            return len(self.requests)


def _handler(server: FakeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as vLLM's server
        timeout = 20  # an idle kept-alive connection ends at last, and its thread with it

        def setup(self) -> None:
            super().setup()
            # Headers and body go in separate writes: without this, Nagle's algorithm holds
            # the body back for the client's delayed ACK (40 ms a request on Linux).
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with server.lock:
                server._open.add(self.connection)

        def finish(self) -> None:
            with server.lock:
                server._open.discard(self.connection)
            with contextlib.suppress(OSError):
                super().finish()

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def reply(self, status: int, body: dict[str, Any],
                  headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        def authorised(self) -> bool:
            if server.api_key is None:
                return True
            if self.headers.get("Authorization") == f"Bearer {server.api_key}":
                return True
            self.reply(401, {"error": {"message": "Unauthorized"}})
            return False

        def do_GET(self) -> None:
            if self.path == "/v1/models":  # a health check (a router's /workers is not)
                with server.lock:
                    server.probes += 1
            if not self.authorised():
                return
            if self.path == "/metrics" and server.metrics is not None:
                data = server.metrics.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            if self.path == "/health":  # vllm serve's liveness route, which routers ask
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if self.path != "/v1/models":
                self.reply(404, {"detail": "Not Found"})
                return
            self.reply(200, {"object": "list", "data": [
                {"id": m, "object": "model", "owned_by": "vllm"} for m in server.models]})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with server.lock:
                arrived = time.monotonic()
                server.times.append(arrived)
                server.requests.append(body)
                server.headers.append(dict(self.headers))
                server.active += 1
                server.most_active = max(server.most_active, server.active)
                server.arrived.notify_all()
                mode = server.mode
                if mode in ("busy", "unsent"):
                    if server.busy_left == 0:
                        mode = "ok"
                    elif server.busy_left > 0:
                        server.busy_left -= 1
            try:
                server.hold.wait(30)
                if mode == "hang":
                    server.released.wait(30)
                    self.close_connection = True
                    return
                if mode == "drop":
                    # Gone mid-request: the connection ends with no answer at all.
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                if not self.authorised():
                    return
                if mode == "unsent":
                    self.reply(500, {"error": {"message": "Request failed: error sending "
                                               "request for url (http://127.0.0.1:9/v1/chat/"
                                               "completions)"}})
                    return
                if mode == "busy":
                    self.reply(503, {"error": {"message": "the engine is overloaded"}},
                               {"Retry-After": server.retry_after})
                    return
                if mode in ("huge", "trickle", "content", "gzip"):
                    self.hostile(mode, body)
                    return
                if server.delay:
                    with server.slots or contextlib.nullcontext():
                        time.sleep(server.delay)
                self.answer(body)
            finally:
                with server.lock:
                    server.active -= 1
                    if server.times_file is not None:  # monotonic: the same clock machine-wide
                        server.times_file.write(f"{arrived:.6f} "
                                                f"{time.monotonic():.6f}\n")
                        server.times_file.flush()

        def hostile(self, mode: str, body: dict[str, Any]) -> None:
            """A 200 answer that is too large, too slow or of the wrong shape."""
            def completion(content: Any) -> bytes:
                return json.dumps({"id": "x", "object": "chat.completion",
                                   "model": body["model"], "choices": [{
                                       "index": 0, "finish_reason": server.finish,
                                       "message": {"role": "assistant",
                                                   "content": content}}]}).encode()

            self.close_connection = True
            with contextlib.suppress(OSError):  # the client hanging up is the point
                if mode == "content":
                    data = completion(server.content)
                elif mode == "gzip":  # a bomb: a few hundred KiB that expand a thousandfold
                    packed = gzip.compress(completion(" " * server.huge_bytes), 1)
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Encoding", "gzip")
                    self.send_header("Content-Length", str(len(packed)))
                    self.end_headers()
                    self.wfile.write(packed)
                    return
                elif mode == "huge":
                    head, tail = completion("@@").split(b"@@")
                    size = server.huge_bytes
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(head) + size + len(tail)))
                    self.end_headers()
                    self.wfile.write(head)
                    block = b"x" * 65536
                    while size > 0 and not server.released.is_set():
                        n = min(size, len(block))
                        self.wfile.write(block[:n])
                        size -= n
                        with server.lock:
                            server.bytes_sent += n
                    self.wfile.write(tail)
                    return
                else:  # trickle
                    data = completion("# A page sent slowly")
                    head = (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                            f"Content-Length: {len(data)}\r\n\r\n").encode()
                    if not server.trickle_headers:
                        self.wfile.write(head)
                        head = b""
                    for i in range(len(head + data)):
                        if server.released.wait(server.delay):
                            return
                        self.wfile.write((head + data)[i:i + 1])
                        self.wfile.flush()
                        with server.lock:
                            server.bytes_sent += 1
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        def answer(self, body: dict[str, Any]) -> None:
            if self.path != "/v1/chat/completions":
                self.reply(404, {"error": {"message": "no such route"}})
                return
            if body.get("model") not in server.models:
                self.reply(404, {"error": {"message": f"The model `{body.get('model')}` "
                                                      "does not exist."}})
                return
            url = body["messages"][0]["content"][0]["image_url"]["url"]
            png = base64.b64decode(url.split(",", 1)[1])
            image = Image.open(io.BytesIO(png)).convert("RGB")
            mark = image.getpixel((0, 0))
            assert isinstance(mark, tuple)
            scripted = server.scripted.get("".join(f"{c:02x}" for c in mark[:3]))
            if scripted is not None:
                self.reply(200, {"id": "x", "object": "chat.completion", "model": body["model"],
                                 "choices": [{"index": 0, "finish_reason": scripted[1],
                                              "message": {"role": "assistant",
                                                          "content": scripted[0]}}]})
                return
            with server.lock:
                first_failure = mark == FAILS_ONCE and mark not in server.failed_once
                server.failed_once.add(mark)
            if first_failure:
                self.reply(503, {"error": {"message": "busy"}})
                return
            if mark == FAILS_ALWAYS:
                self.reply(500, {"error": {"message": "engine died"}})
                return
            if mark == BAD_REQUEST:
                self.reply(400, {"error": {"message": "image too large"}})
                return
            loops = mark == LOOPS_ALWAYS or (mark == LOOPS_WHEN_COLD and
                                             body["temperature"] <= 0.2)
            # LightOnOCR-3 asked for its layout: the text "grounding" after the image.
            grounding = any(part.get("type") == "text" and part.get("text") == "grounding"
                            for part in body["messages"][0]["content"])
            if loops:
                text, finish = "row\n" * 200, "length"
            else:
                read = grounding_text if grounding else page_text
                text = read(image.width, image.height, mark, body["temperature"])
                # As vLLM: with ignore_eos a page always runs out of tokens.
                finish = "length" if body.get("ignore_eos") else "stop"
            with server.lock:
                server.answered["".join(f"{c:02x}" for c in mark)] += 1
            self.reply(200, {"id": "x", "object": "chat.completion", "model": body["model"],
                             "choices": [{"index": 0, "finish_reason": finish,
                                          "message": {"role": "assistant", "content": text}}],
                             # Counted as a vision model would: image patches, and
                             # every token up to max_tokens when told to ignore its end.
                             "usage": {"prompt_tokens": (image.width // 28) *
                                       (image.height // 28) + 16,
                                       "completion_tokens": body["max_tokens"]
                                       if body.get("ignore_eos") else len(text) // 4 + 1}})

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--mode", default="ok", choices=("ok", "busy", "hang", "drop"))
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--slots", type=int, default=0,
                        help="requests that spend their delay at once (0: all)")
    parser.add_argument("--times", help="append each chat request's arrival and answer "
                                        "times (time.monotonic) to this file")
    args = parser.parse_args()
    server = FakeServer(mode=args.mode, delay=args.delay, port=args.port, slots=args.slots)
    if args.times:
        server.times_file = open(args.times, "a")  # noqa: SIM115 (open until killed)
    print(server.port, flush=True)
    with contextlib.suppress(KeyboardInterrupt):  # killed with SIGKILL in tests anyway
        server.serve()
    sys.exit(0)


if __name__ == "__main__":
    main()
