"""The remote engine's client side, against fake OpenAI-compatible servers on 127.0.0.1.

The servers (tests/fake_openai.py) speak real HTTP and read no text: each answer names
the page's colour, so a test can count how often every page was answered. In every fault
below, every page ends with exactly one answer and none is lost.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_openai import (
    BAD_REQUEST,
    FAILS_ALWAYS,
    FAILS_ONCE,
    LOOPS_ALWAYS,
    LOOPS_WHEN_COLD,
    FakeServer,
)
from helpers import wait_for
from PIL import Image

from ocrwatch.config import Config
from ocrwatch.core.domain import Page, PageText
from ocrwatch.core.errors import EngineError, EngineUnavailable
from ocrwatch.engines.base import gpu_preparers
from ocrwatch.engines.remote import RemoteEngine, backoff

WHITE = (255, 255, 255)


@pytest.fixture
def stub() -> Iterator[FakeServer]:
    with FakeServer() as server:
        yield server


def engine_for(*urls: str, **remote: Any) -> RemoteEngine:
    config = Config()
    if len(urls) == 1:
        config.remote.url = urls[0]
    else:
        config.remote.urls = list(urls)
    for key, value in remote.items():
        setattr(config.remote, key, value)
    return RemoteEngine(config)


def page(i: int, mark: tuple[int, int, int] | None = None,
         size: tuple[int, int] = (60, 80)) -> Page:
    """Page ``i``, coloured by its number unless ``mark`` scripts the server."""
    colour = mark or (10, i // 256, i % 256)
    return Page(Path(f"scan{i}.png"), i, Image.new("RGB", size, colour))


def colour_of(i: int) -> str:
    return f"0a{i // 256:02x}{i % 256:02x}"


def read_concurrently(engine: RemoteEngine, pages: list[Page]) -> dict[int, PageText]:
    """As the daemon does: one thread per request slot, one page per call."""
    results: dict[int, PageText] = {}
    todo = list(pages)
    lock = threading.Lock()
    errors: list[BaseException] = []

    def worker() -> None:
        while True:
            with lock:
                if not todo:
                    return
                p = todo.pop(0)
            try:
                (result,) = engine.recognize([p])
            except BaseException as exc:
                errors.append(exc)
                return
            with lock:
                results[p.index] = result

    threads = [threading.Thread(target=worker, name=f"reader-{n}")
               for n in range(engine.policy.concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    if errors:
        raise errors[0]
    return results


def each_read_once(results: dict[int, PageText], n: int, *servers: FakeServer) -> None:
    """Every page has its own text, and the servers answered each page exactly once."""
    assert sorted(results) == list(range(n))
    for i, result in results.items():
        assert result.error is None, result.error
        assert f"colour {colour_of(i)}" in result.markdown
    answered: Counter[str] = Counter()
    for server in servers:
        answered.update(server.answered)
    assert answered == Counter({colour_of(i): 1 for i in range(n)})


# -- requests ---------------------------------------------------------------------------

def test_sends_the_image_alone_with_the_model_settings(stub: FakeServer) -> None:
    engine = engine_for(stub.url, api_key="sekret")
    try:
        (result,) = engine.recognize([page(0, WHITE)])
    finally:
        engine.close()
    assert result.error is None
    assert result.markdown == "# Page 60x80 colour ffffff\n\n*t=0.2*\n"
    assert result.text == "Page 60x80 colour ffffff\n\nt=0.2\n"
    (body,) = stub.requests
    assert body["model"] == "lightonai/LightOnOCR-2-1B"
    assert (body["temperature"], body["top_p"], body["max_tokens"]) == (0.2, 0.9, 4096)
    assert "ignore_eos" not in body
    (message,) = body["messages"]
    assert message["role"] == "user"
    (content,) = message["content"]  # no text prompt: the model would echo it
    assert content["type"] == "image_url"
    assert content["image_url"]["url"].startswith("data:image/png;base64,")
    assert stub.headers[0]["Authorization"] == "Bearer sekret"
    assert stub.probes == 1  # the health check at start


def test_ignore_eos_is_passed_for_benchmarks_and_asks_no_retry(stub: FakeServer) -> None:
    engine = engine_for(stub.url, ignore_eos=True, max_tokens=500)
    try:
        (result,) = engine.recognize([page(0)])
    finally:
        engine.close()
    (body,) = stub.requests  # ran out of tokens on purpose: not read again warmer
    assert body["ignore_eos"] is True and body["max_tokens"] == 500
    assert result.error is None and not result.warnings


def test_the_servers_token_counts_are_kept_per_page(stub: FakeServer) -> None:
    """What each page cost the server (the answer's usage), so that a benchmark can show
    that two clients asked for the same work."""
    engine = engine_for(stub.url, ignore_eos=True, max_tokens=300)
    try:
        engine.recognize([page(0, size=(280, 560))])
        engine.recognize([page(1, size=(560, 560))])
        engine.recognize([page(2, size=(560, 560))])
        assert engine.stages.token_medians() == {"prompt": 416, "completion": 300}
    finally:
        engine.close()


def test_keeps_concurrency_requests_in_flight_over_kept_alive_connections(
        stub: FakeServer) -> None:
    engine = engine_for(stub.url, concurrency=3)
    assert engine.policy.concurrency == 3
    assert 1 <= engine.policy.preparers <= gpu_preparers(turning=True)
    stub.hold.clear()
    try:
        result: list[PageText] = []
        worker = threading.Thread(
            target=lambda: result.extend(engine.recognize([page(i) for i in range(7)])))
        worker.start()
        assert stub.wait_active(3)
        time.sleep(0.2)  # a fourth request would arrive now if the bound leaked
        assert stub.active == 3
        stub.hold.set()
        worker.join(30)
    finally:
        stub.hold.set()
        engine.close()
    assert stub.most_active == 3
    assert len(result) == 7 and all(r.error is None for r in result)
    ports = {h.get("Host") for h in stub.headers}
    assert len(ports) == 1


def test_a_looping_page_is_asked_again_warmer(stub: FakeServer) -> None:
    engine = engine_for(stub.url)
    try:
        fixed, stuck = engine.recognize([page(0, LOOPS_WHEN_COLD), page(1, LOOPS_ALWAYS)])
    finally:
        engine.close()
    assert "t=0.6" in fixed.markdown and not fixed.warnings
    assert stuck.error is None and stuck.keep_original  # a doubt: the original is kept
    assert sorted(r["temperature"] for r in stub.requests) == [0.2, 0.2, 0.6, 0.6]


def test_server_errors_fail_the_page_and_busy_is_retried(stub: FakeServer) -> None:
    engine = engine_for(stub.url)
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
    # The 500 is tried twice, the 400 once: a page that cannot be read is not hammered.
    colours = Counter(r["messages"][0]["content"][0]["image_url"]["url"][-20:]
                      for r in stub.requests)
    assert sum(colours.values()) == 2 + 2 + 1 + 1


# -- set-up mistakes --------------------------------------------------------------------

def test_a_refused_key_stops_the_engine_with_advice() -> None:
    with FakeServer(api_key="right") as server:
        engine = engine_for(server.url, api_key="wrong")
        try:
            with pytest.raises(EngineUnavailable, match=r"remote\.api_key"):
                engine.recognize([page(0)])
        finally:
            engine.close()


def test_a_wrong_url_names_the_setting(stub: FakeServer) -> None:
    engine = engine_for(stub.url.replace("/v1", "/v2"))
    try:
        with pytest.raises(EngineUnavailable, match=r"remote\.url"):
            engine.recognize([page(0)])
    finally:
        engine.close()


def test_a_server_with_another_model_says_which() -> None:
    with FakeServer(models=["someone/else"]) as server:
        engine = engine_for(server.url)
        try:
            with pytest.raises(EngineUnavailable, match=r"serves someone/else, not"):
                engine.recognize([page(0)])
        finally:
            engine.close()
        assert server.chat_requests == 0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again: nothing listens there


def test_no_server_says_how_to_start_one() -> None:
    engine = engine_for(f"http://127.0.0.1:{free_port()}/v1")
    try:
        with pytest.raises(EngineUnavailable, match="vllm serve"):
            engine.recognize([page(0)])
    finally:
        engine.close()


def test_close_twice_then_refuse(stub: FakeServer) -> None:
    engine = engine_for(stub.url)
    engine.recognize([page(0), page(1)])
    engine.release()
    engine.close()
    engine.close()
    with pytest.raises(EngineError, match="closed"):
        engine.recognize([page(0)])
    assert engine.describe()["engine"] == "remote"


# -- several servers --------------------------------------------------------------------

def test_requests_go_to_the_server_with_the_fewest_outstanding() -> None:
    with FakeServer() as a, FakeServer() as b:
        a.hold.clear()
        b.hold.clear()
        engine = engine_for(a.url, b.url, concurrency=4)
        try:
            reader = threading.Thread(
                target=lambda: results.update(read_concurrently(engine, pages)))
            pages = [page(i) for i in range(12)]
            results: dict[int, PageText] = {}
            reader.start()
            assert a.wait_active(2) and b.wait_active(2)
            assert (a.active, b.active) == (2, 2)
            a.hold.set()
            b.hold.set()
            reader.join(60)
            facts = engine.describe()
        finally:
            a.release()
            b.release()
            engine.close()
    each_read_once(results, 12, a, b)
    servers: Any = facts["servers"]
    assert [s["state"] for s in servers] == ["up", "up"]
    assert sum(s["answered"] for s in servers) == 12


def test_a_slow_server_gets_fewer_pages() -> None:
    with FakeServer(delay=2.0) as slow, FakeServer() as fast:
        engine = engine_for(slow.url, fast.url, concurrency=2)
        try:
            results = read_concurrently(engine, [page(i) for i in range(16)])
        finally:
            engine.close()
    each_read_once(results, 16, slow, fast)
    assert sum(fast.answered.values()) >= 3 * sum(slow.answered.values())


def beside_a_fine_server(mode: str, n: int, **remote: Any) -> tuple[FakeServer, Any]:
    """``n`` pages over a server in ``mode`` and a fine one: each page read exactly once.

    Returns the faulty server and what the engine said about it at the end.
    """
    with FakeServer(mode=mode) as faulty, FakeServer() as fine:
        engine = engine_for(faulty.url, fine.url, **remote)
        try:
            results = read_concurrently(engine, [page(i) for i in range(n)])
            facts: Any = engine.describe()
        finally:
            faulty.release()
            engine.close()
    each_read_once(results, n, faulty, fine)
    assert faulty.chat_requests >= 1  # it was given pages, and lost none of them
    return faulty, facts["servers"][0]


def test_a_busy_server_is_backed_off_and_the_pages_go_elsewhere() -> None:
    busy, facts = beside_a_fine_server("busy", 12, concurrency=3)
    assert busy.chat_requests < 12  # backed off, not asked for every page
    assert facts["state"] == "up"  # busy is not down
    assert "HTTP 503" in facts["last_error"]


def test_a_lone_server_answering_503_is_waited_for() -> None:
    with FakeServer(mode="busy", busy_left=3) as server:
        engine = engine_for(server.url, concurrency=2)
        try:
            results = read_concurrently(engine, [page(i) for i in range(4)])
        finally:
            engine.close()
    each_read_once(results, 4, server)
    assert server.chat_requests == 4 + 3


def test_retry_after_is_honoured() -> None:
    with FakeServer(mode="busy", busy_left=1, retry_after="1.5") as server:
        engine = engine_for(server.url)
        try:
            (result,) = engine.recognize([page(0)])
        finally:
            engine.close()
    assert result.error is None
    first, second = server.times
    assert second - first >= 1.5


def test_a_hanging_server_times_out_is_marked_down_and_the_pages_go_elsewhere() -> None:
    hung, facts = beside_a_fine_server("hang", 8, concurrency=2, timeout_seconds=1.0)
    assert hung.chat_requests <= 2  # down after its first silence, not tried per page
    assert facts["state"] == "down"
    assert "no answer in time" in facts["last_error"]


def test_a_server_dropping_connections_mid_request_loses_no_page() -> None:
    _, facts = beside_a_fine_server("drop", 9, concurrency=3)
    assert facts["state"] == "down"
    assert "dropped the connection" in facts["last_error"]


def test_a_down_server_is_probed_and_used_again_when_it_is_back() -> None:
    port = free_port()
    with FakeServer() as fine:
        engine = engine_for(f"http://127.0.0.1:{port}/v1", fine.url, concurrency=2,
                            health_seconds=0.2)
        try:
            engine.recognize([page(0)])
            facts: Any = engine.describe()
            assert facts["servers"][0]["state"] == "down"
            with FakeServer(port=port) as back:
                wait_for(lambda: engine.describe()["servers"][0]["state"] == "up",  # type: ignore[index]
                         20, "the server to be probed up again")
                results = read_concurrently(engine, [page(i) for i in range(1, 9)])
                engine.close()
        finally:
            engine.close()
        assert back.answered and fine.answered
        assert sum(back.answered.values()) + sum(fine.answered.values()) == 9
    assert len(results) == 8


def test_every_server_down_puts_the_page_back_after_retry_seconds() -> None:
    with FakeServer() as server:
        engine = engine_for(server.url, retry_seconds=1.0)
        try:
            engine.recognize([page(0)])
            server.mode = "drop"
            started = time.monotonic()
            with pytest.raises(EngineUnavailable, match="no OCR server could take a page"):
                engine.recognize([page(1)])
            assert time.monotonic() - started < 15
        finally:
            engine.close()
    assert server.answered == Counter({colour_of(0): 1})


def test_backoff_is_jittered_and_capped() -> None:
    values = [backoff(n, 0.5, 30.0) for n in range(12) for _ in range(20)]
    assert all(0 <= v < 30.0 for v in values)
    assert len(set(values)) > 100  # jitter: no two clients retry in step
    assert max(backoff(1, 0.5, 30.0) for _ in range(200)) < 1.0


# -- TLS --------------------------------------------------------------------------------

def test_tls_is_verified_and_a_private_authority_can_be_named(tmp_path: Path) -> None:
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    import ssl

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(context)
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    with FakeServer(ssl_context=context) as server:
        assert server.url.startswith("https://")
        untrusted = engine_for(server.url)
        try:
            with pytest.raises(EngineUnavailable, match=r"not trusted.*remote\.ca_file"):
                untrusted.recognize([page(0)])
        finally:
            untrusted.close()
        trusted = engine_for(server.url, ca_file=ca_file)
        try:
            (result,) = trusted.recognize([page(0)])
        finally:
            trusted.close()
    assert result.error is None and colour_of(0) in result.markdown


def test_a_router_that_could_not_reach_its_server_is_tried_again() -> None:
    """vllm-router answers HTTP 500 "error sending request for url" when the server it
    chose has died: no model saw the page, so it is asked again until a server answers,
    not failed after two such answers as a page a model fails on."""
    with FakeServer(mode="unsent", busy_left=3) as router:
        engine = engine_for(router.url)
        try:
            (result,) = engine.recognize([page(0)])
        finally:
            engine.close()
    assert result.error is None and result.markdown.strip()
    assert len(router.requests) == 4  # three unsent, then read
