"""The remote engine's requests by server in the metrics: the real daemon with the remote
engine against two of the project's OpenAI-compatible servers on 127.0.0.1, one of them
busy (HTTP 503) for its first requests, scraped over real HTTP."""

from __future__ import annotations

from pathlib import Path

from fake_openai import FakeServer
from helpers import wait_for
from test_metrics import free_port, scrape
from test_remote_daemon import all_done, check_each_read_once, config_for, drop

from ocrwatch.daemon import Daemon


def test_requests_retries_and_times_by_server(tmp_path: Path) -> None:
    with FakeServer(delay=0.05) as fine, FakeServer(mode="busy") as busy:
        busy.busy_left = 3  # refuses its first three pages, then answers
        config = config_for(tmp_path, fine.url, busy.url, concurrency=4, health_seconds=0.5)
        config.metrics_address = f"127.0.0.1:{free_port()}"
        with Daemon(config) as daemon:
            files = drop(config.inbox[0], n_png=6, n_tiff=2)
            wait_for(lambda: all_done(daemon, files), 90, "every file read")
            check_each_read_once(daemon, files)
            url = daemon.metrics_url
            assert url is not None
            m = scrape(url)
    pages = sum(len(colours) for colours in files.values())

    def figure(name: str, server: FakeServer, **labels: str) -> float:
        shown = ",".join(f'{k}="{v}"' for k, v in sorted({**labels,
                                                         "server": server.url}.items()))
        return m.get(f"ocrwatch_remote_{name}{{{shown}}}", -1.0)

    answered = [figure("requests_total", s, outcome="answered") for s in (fine, busy)]
    failed = [figure("requests_total", s, outcome="failed") for s in (fine, busy)]
    assert sum(answered) == pages  # each page answered once, whichever server
    assert failed == [0, 3]  # the three refusals, counted where they happened
    assert [figure("retries_total", s) for s in (fine, busy)] == [0, 3]
    for server, n in zip((fine, busy), answered, strict=True):
        assert figure("request_seconds_count", server) == n
        assert figure("request_seconds_bucket", server, le="+Inf") == n
        assert 0 <= figure("request_seconds_bucket", server, le="0.25") <= n
        assert figure("request_seconds_sum", server) >= 0.05 * n * (server is fine)
    assert answered[0] > 0
