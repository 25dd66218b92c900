"""The remote engine's client side, against a small OpenAI-compatible stub on 127.0.0.1.

The stub only answers the way an OpenAI-compatible server does; it reads no text. The
colour of a page tells it how to answer, so each test can script the server.
"""

from __future__ import annotations

import base64
import io
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from ocrwatch.config import Config
from ocrwatch.domain import Page
from ocrwatch.engines.remote import RemoteEngine
from ocrwatch.errors import EngineError, EngineUnavailable

WHITE = (255, 255, 255)
LOOPS_WHEN_COLD = (0, 255, 1)
LOOPS_ALWAYS = (0, 255, 2)
FAILS_ONCE = (255, 0, 1)
FAILS_ALWAYS = (255, 0, 2)
BAD_REQUEST = (255, 0, 3)


class Stub:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.lock = threading.Lock()
        self.active = 0
        self.most_active = 0
        self.failed_once: set[tuple[int, int, int]] = set()
        self.hold = threading.Event()  # set: answer at once
        self.hold.set()
        self.status_override: int | None = None


def make_handler(stub: Stub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def reply(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with stub.lock:
                stub.requests.append(body)
                stub.headers.append(dict(self.headers))
                stub.active += 1
                stub.most_active = max(stub.most_active, stub.active)
            try:
                stub.hold.wait(10)
                self.answer(body)
            finally:
                with stub.lock:
                    stub.active -= 1

        def answer(self, body: dict[str, Any]) -> None:
            if self.path != "/v1/chat/completions":
                self.reply(404, {"error": {"message": "no such route"}})
                return
            if stub.status_override is not None:
                self.reply(stub.status_override, {"error": {"message": "scripted"}})
                return
            url = body["messages"][0]["content"][0]["image_url"]["url"]
            png = base64.b64decode(url.split(",", 1)[1])
            image = Image.open(io.BytesIO(png)).convert("RGB")
            mark = image.getpixel((0, 0))
            if mark == FAILS_ONCE and mark not in stub.failed_once:
                stub.failed_once.add(mark)
                self.reply(503, {"error": {"message": "busy"}})
                return
            if mark == FAILS_ALWAYS:
                self.reply(500, {"error": {"message": "engine died"}})
                return
            if mark == BAD_REQUEST:
                self.reply(400, {"error": {"message": "image too large"}})
                return
            loops = mark == LOOPS_ALWAYS or (mark == LOOPS_WHEN_COLD and body["temperature"] <= 0.2)
            if loops:
                text, finish = "row\n" * 200, "length"
            else:
                size = f"{image.width}x{image.height}"
                text, finish = f"# Page {size}\n\n*t={body['temperature']}*", "stop"
            self.reply(200, {"id": "x", "object": "chat.completion", "model": body["model"],
                             "choices": [{"index": 0, "finish_reason": finish,
                                          "message": {"role": "assistant", "content": text}}]})

    return Handler


@pytest.fixture
def stub() -> Iterator[tuple[Stub, str]]:
    state = Stub()
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(state))
    thread = threading.Thread(target=server.serve_forever, name="stub-server")
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        state.hold.set()
        server.shutdown()
        server.server_close()
        thread.join(10)


def engine_for(url: str, **remote: Any) -> RemoteEngine:
    config = Config()
    config.remote.url = url
    for key, value in remote.items():
        setattr(config.remote, key, value)
    return RemoteEngine(config)


def page(i: int, mark: tuple[int, int, int] = WHITE, size: tuple[int, int] = (60, 80)) -> Page:
    return Page(Path(f"scan{i}.png"), i, Image.new("RGB", size, mark))


def test_sends_the_image_alone_with_the_model_settings(stub: tuple[Stub, str]) -> None:
    state, url = stub
    engine = engine_for(url, api_key="sekret")
    try:
        (result,) = engine.recognize([page(0)])
    finally:
        engine.close()
    assert result.error is None
    assert result.markdown == "# Page 60x80\n\n*t=0.2*\n"
    assert result.text == "Page 60x80\n\nt=0.2\n"
    (body,) = state.requests
    assert body["model"] == "lightonai/LightOnOCR-2-1B"
    assert (body["temperature"], body["top_p"], body["max_tokens"]) == (0.2, 0.9, 4096)
    (message,) = body["messages"]
    assert message["role"] == "user"
    (content,) = message["content"]  # no text prompt: the model would echo it
    assert content["type"] == "image_url"
    assert content["image_url"]["url"].startswith("data:image/png;base64,")
    assert state.headers[0]["Authorization"] == "Bearer sekret"


def test_keeps_concurrency_requests_in_flight(stub: tuple[Stub, str]) -> None:
    state, url = stub
    engine = engine_for(url, concurrency=3)
    assert engine.policy.concurrency == 3 and engine.policy.max_pages == 1
    state.hold.clear()
    try:
        result: list[Any] = []
        worker = threading.Thread(
            target=lambda: result.extend(engine.recognize([page(i) for i in range(7)])))
        worker.start()
        deadline_ok = _wait(lambda: state.active == 3, 10)
        state.hold.set()
        worker.join(30)
    finally:
        state.hold.set()
        engine.close()
    assert deadline_ok
    assert state.most_active == 3
    assert len(result) == 7 and all(r.error is None for r in result)


def _wait(condition: Any, timeout: float) -> bool:
    done = threading.Event()
    for _ in range(int(timeout / 0.02)):
        if condition():
            return True
        done.wait(0.02)
    return bool(condition())


def test_a_looping_page_is_asked_again_warmer(stub: tuple[Stub, str]) -> None:
    state, url = stub
    engine = engine_for(url)
    try:
        fixed, stuck = engine.recognize([page(0, LOOPS_WHEN_COLD), page(1, LOOPS_ALWAYS)])
    finally:
        engine.close()
    assert "t=0.6" in fixed.markdown and not fixed.warnings
    assert stuck.error is None and stuck.warnings
    assert sorted(r["temperature"] for r in state.requests) == [0.2, 0.2, 0.6, 0.6]


def test_server_errors_are_retried_once_then_fail_the_page(stub: tuple[Stub, str]) -> None:
    _, url = stub
    engine = engine_for(url)
    try:
        once, always, bad, fine = engine.recognize(
            [page(0, FAILS_ONCE), page(1, FAILS_ALWAYS), page(2, BAD_REQUEST), page(3)])
    finally:
        engine.close()
    assert once.error is None
    assert always.error is not None and "HTTP 500: engine died" in always.error
    assert bad.error is not None and "HTTP 400: image too large" in bad.error
    assert fine.error is None
    assert "last_error" in engine.describe()


def test_a_refused_key_stops_the_engine_with_advice(stub: tuple[Stub, str]) -> None:
    state, url = stub
    state.status_override = 401
    engine = engine_for(url)
    try:
        with pytest.raises(EngineUnavailable, match=r"remote\.api_key"):
            engine.recognize([page(0)])
    finally:
        engine.close()


def test_a_wrong_url_names_the_setting(stub: tuple[Stub, str]) -> None:
    _, url = stub
    engine = engine_for(url.replace("/v1", "/v2"))
    try:
        with pytest.raises(EngineUnavailable, match=r"remote\.url"):
            engine.recognize([page(0)])
    finally:
        engine.close()


def test_no_server_says_how_to_start_one() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    engine = engine_for(f"http://127.0.0.1:{port}/v1")
    try:
        with pytest.raises(EngineUnavailable, match="vllm serve"):
            engine.recognize([page(0)])
    finally:
        engine.close()


def test_close_twice_then_refuse(stub: tuple[Stub, str]) -> None:
    _, url = stub
    engine = engine_for(url)
    engine.recognize([page(0), page(1)])
    engine.release()
    engine.close()
    engine.close()
    with pytest.raises(EngineError, match="closed"):
        engine.recognize([page(0)])
    assert engine.describe()["engine"] == "remote"
