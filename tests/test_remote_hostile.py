"""The remote engine against a hostile server on 127.0.0.1: answers too large, too slow,
of the wrong shape or holding control characters. Each ends with a clear reason, in
bounded time and memory, and writes nothing the server smuggled in."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeServer
from PIL import Image

from ocrwatch.config import Config
from ocrwatch.core.domain import Page, PageText
from ocrwatch.core.errors import EngineUnavailable
from ocrwatch.engines.openai_http import PageFailed, parse_answer
from ocrwatch.engines.remote import RemoteEngine


def engine_for(url: str, **remote: Any) -> RemoteEngine:
    config = Config()
    config.remote.url = url
    for key, value in remote.items():
        setattr(config.remote, key, value)
    return RemoteEngine(config)


def a_page() -> Page:
    return Page(Path("scan.png"), 0, Image.new("RGB", (60, 80), (10, 0, 1)))


def bounded(call: Callable[[], Any], seconds: float) -> tuple[Any, float]:
    """``call()`` in a thread, given ``seconds``: its result (or exception) and the time."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(call())
        except BaseException as exc:
            out.append(exc)

    started = time.monotonic()
    thread = threading.Thread(target=run, name="hostile-read")
    thread.start()
    thread.join(seconds)
    took = time.monotonic() - started
    assert not thread.is_alive(), f"the read did not end within {seconds} s"
    return out[0], took


def read_one(server: FakeServer, **remote: Any) -> PageText:
    engine = engine_for(server.url, **remote)
    try:
        (result,) = engine.recognize([a_page()])
        return result
    finally:
        engine.close()


def test_an_answer_larger_than_max_tokens_can_be_is_cut_off_and_fails_the_page() -> None:
    with FakeServer(mode="huge") as server:
        server.huge_bytes = 200 * 1024 * 1024
        result, took = bounded(lambda: read_one(server, max_tokens=1000), 60)
        sent = server.bytes_sent
        requests = server.chat_requests
    assert isinstance(result, PageText)
    assert result.error is not None and "larger than" in result.error, result
    assert "remote.max_tokens (1000)" in result.error
    assert result.markdown == ""
    # Read no further than the cap (64 KiB + 64 bytes a token) plus what the socket
    # buffers held: the rest of the 200 MB was never sent.
    assert sent < 16 * 1024 * 1024, sent
    assert requests == 1  # a bad answer is not asked again
    assert took < 30, took


def test_a_compressed_answer_is_not_expanded() -> None:
    """Asked for no compression, a server that gzips 20 MB anyway sends a few dozen KiB
    that would expand several hundredfold; the page fails without expanding them."""
    with FakeServer(mode="gzip") as server:
        server.huge_bytes = 20 * 1024 * 1024
        result, _ = bounded(lambda: read_one(server, max_tokens=1000), 90)
        headers = server.headers
    assert isinstance(result, PageText)
    assert result.error is not None and "compressed its answer (gzip)" in result.error
    assert all(h.get("Accept-Encoding") == "identity" for h in headers)


def test_an_answer_trickled_byte_by_byte_ends_at_the_total_deadline() -> None:
    # 0.2 s a byte: each read is far inside the 1 s timeout, the whole answer 40 s.
    with FakeServer(mode="trickle", delay=0.2) as server:
        result, took = bounded(
            lambda: read_one(server, timeout_seconds=1.0, retry_seconds=0.5), 20)
    assert isinstance(result, EngineUnavailable), result
    assert "none whole within 1 s" in str(result)
    assert took < 8, took


def test_headers_trickled_byte_by_byte_end_at_the_total_deadline() -> None:
    with FakeServer(mode="trickle", delay=0.2) as server:
        server.trickle_headers = True
        result, took = bounded(
            lambda: read_one(server, timeout_seconds=1.0, retry_seconds=0.5), 20)
    assert isinstance(result, EngineUnavailable), result
    assert took < 8, took


@pytest.mark.parametrize(("content", "kind"), [
    (None, "null"), ({"text": "hello"}, "dict"), (["a"], "list"), (42, "int")])
def test_content_that_is_not_a_string_fails_the_page_with_a_reason(content: Any,
                                                                   kind: str) -> None:
    with FakeServer(mode="content") as server:
        server.content = content
        result = read_one(server)
    assert result.error is not None
    assert f"message.content is {kind}, not a string" in result.error
    assert result.markdown == "" and result.text == ""


def test_an_answer_without_choices_fails_the_page() -> None:
    with FakeServer(mode="content") as server:
        server.content = "x"
        result = read_one(server)  # the right shape: read
    assert result.error is None and result.markdown == "x\n"
    with pytest.raises(PageFailed, match="no choices"):
        parse_answer(b'{"choices": []}')
    with pytest.raises(PageFailed, match="not JSON"):
        parse_answer(b"<html>")


def test_control_characters_never_reach_the_text() -> None:
    with FakeServer(mode="content") as server:
        server.content = "# Title\x1b[31m\n\nNUL\x00 here\x0cnext\tcell\r\nline\u2028end\x85"
        result = read_one(server)
    assert result.error is None
    assert result.markdown == "# Title[31m\n\nNUL herenext\tcell\nline\nend\n"
    for ch in "\x1b\x00\x0c\r\x85\u2028":
        assert ch not in result.markdown and ch not in result.text
    assert result.markdown.count("\n") == len(result.markdown.splitlines())
    assert any("control characters removed" in w for w in result.warnings)


def test_an_empty_answer_is_a_blank_page_that_keeps_the_original() -> None:
    with FakeServer(mode="content") as server:
        server.content = "  \n"
        result = read_one(server)
    assert result.error is None and result.markdown == ""
    assert result.keep_original == "the model's answer for this page was empty"


def test_a_good_answer_keeps_nothing_back() -> None:
    with FakeServer() as server:
        result = read_one(server)
    assert result.error is None and "colour 0a0001" in result.markdown
    assert result.keep_original is None


def test_a_form_feed_from_the_server_leaves_one_page_in_the_sidecars(tmp_path: Path) -> None:
    """The daemon, end to end: the .txt sidecar separates pages with form feeds, so one
    in a model's answer would make `reindex --from-sidecars` restore one page as two."""
    from helpers import wait_for
    from test_remote_daemon import config_for, drop

    from ocrwatch.daemon import Daemon
    from ocrwatch.reindex import split_pages

    with FakeServer(mode="content") as server:
        server.content = "Line one\x0cLine two \x1b[2J\x00end"
        config = config_for(tmp_path, server.url)
        daemon = Daemon(config)
        try:
            daemon.start()
            files = drop(config.inbox[0], n_png=1, n_tiff=0)
            (path,) = files

            def finished() -> bool:
                job = daemon.jobs.known(path)
                return job is not None and job.state.value in ("done", "failed")

            wait_for(finished, 30, "the file read")
            job = daemon.jobs.known(path)
            assert job is not None and job.state.value == "done", job
        finally:
            daemon.close()
    md = path.with_suffix(".md").read_text()
    txt = path.with_suffix(".txt").read_text()
    for sidecar in (md, txt):
        assert not any(ch in sidecar for ch in "\x0c\x1b\x00"), repr(sidecar)
        assert "Line oneLine two [2Jend" in sidecar
    assert len(split_pages(txt, md)) == 1


class _Redirecting:
    """A server whose model list is right and which redirects every page elsewhere."""

    def __init__(self, to: str) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _send(self, status: int, body: bytes, **headers: str) -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path == "/v1/models":
                    self._send(200, b'{"object": "list", "data": [{"id": '
                                    b'"lightonai/LightOnOCR-2-1B", "object": "model"}]}')
                else:
                    self._send(404, b"{}")

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                self._send(307, b"", Location=f"{to}/chat/completions")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = False
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, name="redirecting")
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


def test_a_redirect_to_another_server_is_not_followed_with_the_key() -> None:
    with FakeServer() as elsewhere:
        redirecting = _Redirecting(elsewhere.url)
        try:
            result, took = bounded(lambda: read_one_at(redirecting.url, api_key="sekret",
                                                       timeout_seconds=20.0), 60)
        finally:
            redirecting.close()
        assert isinstance(result, PageText), result
        assert result.error, "a redirected page must fail, not be read elsewhere"
        assert "redirects to http://127.0.0.1:" in result.error
        assert "set remote.url" in result.error
        assert elsewhere.requests == [] and elsewhere.headers == []  # nothing, no key
        assert took < 60


def read_one_at(url: str, **remote: Any) -> PageText:
    engine = engine_for(url, **remote)
    try:
        (result,) = engine.recognize([a_page()])
        return result
    finally:
        engine.close()


@pytest.mark.parametrize(("url", "warned"), [
    ("http://192.0.2.7:8000/v1", True),
    ("https://192.0.2.7:8000/v1", False),
    ("http://127.0.0.1:8000/v1", False),
    ("http://localhost:8000/v1", False),
])
def test_a_key_sent_in_clear_text_to_another_machine_is_warned_of(
        url: str, warned: bool, caplog: pytest.LogCaptureFixture) -> None:
    from ocrwatch.engines.openai_http import make_client

    config = Config()
    config.remote.api_key = "sekret"
    with caplog.at_level("WARNING", logger="ocrwatch.engines.openai_http"):
        make_client(config.remote, [url]).close()
    assert ("clear text" in caplog.text) is warned
    assert ("sekret" in caplog.text) is False  # the key itself is never logged
