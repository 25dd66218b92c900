"""Prometheus metrics (metrics_address): the daemon around the fake engine, files dropped
into a real inbox, scraped over real HTTP on 127.0.0.1, and once by a real Prometheus
server read back through its query API."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fake_nvml import FakeNvml, install
from helpers import make_config, save_pdf, text_page, wait_for
from prometheus_client.parser import text_string_to_metric_families

from ocrwatch.config import Config
from ocrwatch.config.check import validate
from ocrwatch.core.errors import ConfigError
from ocrwatch.core.status import EngineStatus, Status
from ocrwatch.daemon import Daemon
from ocrwatch.doctor.check import Check
from ocrwatch.doctor.checks import check_metrics
from ocrwatch.metrics.collector import DaemonCollector
from ocrwatch.metrics.kinds import KINDS, failure_kind
from ocrwatch.metrics.server import WORKERS
from ocrwatch.store.jobs import CRASHED_REASON
from ocrwatch.testing.fake import FakeEngine

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
FAIL = "fake-engine-fail"  # the fake engine fails every page of a file so named


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(url: str, timeout: float = 10.0) -> dict[str, float]:
    """Every sample of the page, ``name{label="v",...}`` -> value (labels sorted)."""
    with urllib.request.urlopen(url, timeout=timeout) as reply:
        assert reply.headers["Content-Type"].startswith("text/plain; version=")
        text = reply.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            out[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return out


def drop_files(inbox: Path, good: int, bad: int) -> list[Path]:
    """``good`` two-page PDFs and ``bad`` one-page images the fake engine fails."""
    inbox.mkdir(parents=True, exist_ok=True)
    files = [save_pdf(inbox / f"report-{n}.pdf", [[f"report {n}"], ["page two"]])
             for n in range(good)]
    for n in range(bad):
        path = inbox / f"{FAIL}-{n}.png"
        text_page([f"bad {n}"]).save(path)
        files.append(path)
    return files


def settled(d: Daemon, files: list[Path]) -> bool:
    jobs = [d.jobs.known(p) for p in files]
    return all(j is not None and j.state.value in ("done", "failed") for j in jobs)


@pytest.fixture
def metrics_daemon(tmp_path: Path) -> Iterator[Daemon]:
    config = make_config(tmp_path, metrics_address=f"127.0.0.1:{free_port()}")
    with Daemon(config, engine=FakeEngine()) as d:
        yield d


# -- what the daemon serves --------------------------------------------------------------
def test_the_daemon_counts_what_it_read_and_serves_it(metrics_daemon: Daemon,
                                                      tmp_path: Path) -> None:
    d = metrics_daemon
    url = d.metrics_url
    assert url is not None and url.startswith("http://127.0.0.1:")
    files = drop_files(d.config.inbox[0], good=3, bad=2)
    wait_for(lambda: settled(d, files), 60, "every file read")
    def drained() -> dict[str, float] | None:
        got = scrape(url)
        return got if got['ocrwatch_queue_files{state="queued"}'] == 0 else None

    m = wait_for(drained, 30, "an empty queue")
    assert m is not None
    assert m['ocrwatch_pages_read_total{engine="fake"}'] == 6
    assert m['ocrwatch_page_errors_total{engine="fake"}'] == 2
    assert m['ocrwatch_files_done_total{engine="fake"}'] == 3
    assert m['ocrwatch_files_failed_total{kind="engine"}'] == 2
    assert all(m[f'ocrwatch_files_failed_total{{kind="{k}"}}'] == 0
               for k in KINDS if k != "engine")
    assert m['ocrwatch_queue_files{state="running"}'] == 0
    assert m['ocrwatch_queue_files{state="retrying"}'] == 0
    assert m["ocrwatch_pages_left"] == 0
    assert m['ocrwatch_files{state="done"}'] == 3 and m['ocrwatch_files{state="failed"}'] == 2
    # Every page indexed once in the latency histogram; every page the engine read timed.
    assert m["ocrwatch_page_latency_seconds_count"] == 6
    assert 0 < m["ocrwatch_page_latency_seconds_sum"] < 60 * 6
    assert m['ocrwatch_page_engine_seconds_count{engine="fake"}'] == 8
    assert m['ocrwatch_engine_state{engine="fake",state="ready"}'] == 1
    assert m['ocrwatch_engine_state{engine="fake",state="stopped"}'] == 0
    assert m['ocrwatch_engine_starts_total{engine="fake"}'] == 1
    assert m["ocrwatch_paused"] == 0
    # No file name anywhere, and no GPU here: no GPU series, and no error.
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    assert "report" not in text and FAIL not in text and str(tmp_path) not in text
    assert "ocrwatch_gpu" not in text
    # Only /metrics is served.
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url.replace("/metrics", "/status"), timeout=10)
    assert refused.value.code == 404


def test_off_by_default_and_no_global_registry(tmp_path: Path) -> None:
    from prometheus_client import REGISTRY

    assert Config().metrics_address == ""
    with Daemon(make_config(tmp_path), engine=FakeEngine()) as d:
        assert d.metrics_url is None
        assert not any(t.name.startswith("ocrwatch-metrics") for t in threading.enumerate())
    assert "ocrwatch_pages_read_total" not in {s.name for f in REGISTRY.collect()
                                               for s in f.samples}


def test_gpu_memory_is_served_when_the_driver_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, FakeNvml(total_mib=16376, used_mib=6000))
    status = Status(engine=EngineStatus(name="vllm", state="asleep", gpu_memory_mb=900.0))
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry()
    registry.register(DaemonCollector(lambda: status))
    text = generate_latest(registry).decode()
    samples = {s.name + str(sorted(s.labels.items())): s.value
               for f in text_string_to_metric_families(text) for s in f.samples}
    assert samples["ocrwatch_gpu_memory_held_bytes[]"] == 900 * 1024 * 1024
    assert samples["ocrwatch_gpu_memory_free_bytes[]"] == (16376 - 6000) * 1024 * 1024
    assert samples["ocrwatch_engine_state[('engine', 'vllm'), ('state', 'asleep')]"] == 1


@pytest.mark.parametrize(("reason", "kind"), [
    ("the PDF is password-protected; save an unprotected copy into the inbox", "input"),
    ("the file is empty (0 bytes)", "input"),
    ("page 2 of 3 could not be read: the fake engine was told to fail this page", "engine"),
    ("the page could not be read: the OCR server timed out after 300 s", "timeout"),
    ("the disk is full (gave up after 5 tries)", "disk"),
    (CRASHED_REASON, "crash"),
    ("something nobody foresaw", "other"),
    ("", "other"),
])
def test_failure_reasons_map_to_a_few_kinds(reason: str, kind: str) -> None:
    assert failure_kind(reason) == kind


# -- the key -----------------------------------------------------------------------------
@pytest.mark.parametrize("bad", ["9464", "127.0.0.1", "127.0.0.1:0", "127.0.0.1:70000",
                                 "metrics.example.org:9464", ":9464"])
def test_a_bad_address_is_refused_with_an_example(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"metrics_address .*127\.0\.0\.1:9464"):
        validate(Config(metrics_address=bad))


@pytest.mark.parametrize("good", ["", "127.0.0.1:9464", "localhost:9464", "[::1]:9464",
                                  "0.0.0.0:9464"])
def test_good_addresses_pass(good: str) -> None:
    validate(Config(metrics_address=good))


def test_doctor_warns_about_an_address_other_machines_reach() -> None:
    def metrics(address: str) -> Check:
        (check,) = check_metrics(Config(metrics_address=address))
        return check

    assert metrics("").ok and metrics("127.0.0.1:9464").ok and metrics("[::1]:9464").ok
    wide = metrics("0.0.0.0:9464")
    assert not wide.ok and "no token" in wide.detail and "127.0.0.1:9464" in wide.fix


def test_reload_turns_metrics_on_and_off(tmp_path: Path) -> None:
    port = free_port()
    current = {"address": ""}

    def load() -> Config:
        return make_config(tmp_path, metrics_address=current["address"])

    with Daemon(load(), engine=FakeEngine(), reload_from=load) as d:
        assert d.metrics_url is None
        current["address"] = f"127.0.0.1:{port}"
        assert d.reload()["applied"] == ["metrics_address"]
        url = d.metrics_url
        assert url is not None and url == f"http://127.0.0.1:{port}/metrics"
        assert "ocrwatch_paused" in scrape(url)
        current["address"] = ""
        d.reload()
        assert d.metrics_url is None
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)


def test_a_port_in_use_is_logged_and_the_daemon_reads_on(tmp_path: Path,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        with Daemon(make_config(tmp_path, metrics_address=address), engine=FakeEngine()) as d:
            assert d.metrics_url is None
            assert f"cannot listen on {address}" in caplog.text
            assert "choose another metrics_address" in caplog.text
            files = drop_files(d.config.inbox[0], good=1, bad=0)
            wait_for(lambda: settled(d, files), 60, "the file read")


# -- bounded under many scrapers ---------------------------------------------------------
def test_many_slow_scrapers_neither_stop_reading_nor_the_owners_scrape(
        metrics_daemon: Daemon) -> None:
    d = metrics_daemon
    url = d.metrics_url or ""
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    slow: list[socket.socket] = []
    try:
        # Forty scrapers that connect, send half a request and say no more.
        for _ in range(40):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            slow.append(s)
        files = drop_files(d.config.inbox[0], good=4, bad=0)
        began = time.monotonic()
        # The owner's scrape answers (a retry is what Prometheus does at the next interval).
        got = wait_for(lambda: scrape(url, timeout=5), 30, "the owner's scrape",
                       ignore=(OSError,))
        assert time.monotonic() - began < 20
        assert "ocrwatch_pages_read_total" in "".join(got)
        wait_for(lambda: settled(d, files), 60, "the files read meanwhile")
        # A fixed pool: the threads serving scrapes never outnumber its workers.
        serving = [t for t in threading.enumerate() if t.name.startswith("ocrwatch-metrics_")]
        assert len(serving) <= WORKERS
    finally:
        for s in slow:
            s.close()


# -- a real Prometheus ---------------------------------------------------------------------
@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[str, Callable[[str], None]]]:
    """Starts /usr/bin/prometheus on 127.0.0.1; ``configure(target)`` writes its config
    (scraping ``target`` every second) and starts it. Killed at the end, whatever happens."""
    if not os.access(PROMETHEUS, os.X_OK):
        pytest.skip(f"no Prometheus server at {PROMETHEUS}: `apt-get install prometheus` "
                    "(listed in .ci/apt-packages.txt)")
    port = free_port()
    procs: list[subprocess.Popen[bytes]] = []
    log = tmp_path / "prometheus.log"

    def configure(target: str) -> None:
        conf = tmp_path / "prometheus.yml"
        conf.write_text("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                        "scrape_configs:\n  - job_name: ocrwatch\n    scrape_timeout: 1s\n"
                        f"    static_configs:\n      - targets: ['{target}']\n")
        with log.open("wb") as out:
            procs.append(subprocess.Popen(
                [PROMETHEUS, f"--config.file={conf}", f"--web.listen-address=127.0.0.1:{port}",
                 f"--storage.tsdb.path={tmp_path / 'tsdb'}", "--log.level=warn"],
                stdout=out, stderr=subprocess.STDOUT))

    try:
        yield f"http://127.0.0.1:{port}", configure
    finally:
        for proc in procs:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def query(base: str, promql: str) -> dict[str, float]:
    """The instant vector of ``promql`` from Prometheus' HTTP API, by series."""
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=10) as reply:
        answer = json.load(reply)
    assert answer["status"] == "success", answer
    skip = ("__name__", "instance", "job")
    return {json.dumps({k: v for k, v in r["metric"].items() if k not in skip},
                       sort_keys=True): float(r["value"][1])
            for r in answer["data"]["result"]}


def test_a_real_prometheus_reads_back_what_the_daemon_did(
        metrics_daemon: Daemon, prometheus: tuple[str, Callable[[str], None]]) -> None:
    d = metrics_daemon
    base, configure = prometheus
    configure(d.config.metrics_address)
    wait_for(lambda: query(base, 'up{job="ocrwatch"}') == {"{}": 1.0}, 60,
             "Prometheus scraping the daemon", ignore=(OSError,))
    files = drop_files(d.config.inbox[0], good=3, bad=2)
    wait_for(lambda: settled(d, files), 60, "every file read")

    def drained() -> bool:
        return (query(base, 'ocrwatch_files_done_total') == {'{"engine": "fake"}': 3.0}
                and query(base, 'sum(ocrwatch_queue_files)') == {"{}": 0.0})

    wait_for(drained, 60, "Prometheus seeing the queue drained", ignore=(OSError,))
    assert query(base, "ocrwatch_pages_read_total") == {'{"engine": "fake"}': 6.0}
    failed = query(base, "ocrwatch_files_failed_total")
    assert failed['{"kind": "engine"}'] == 2.0
    assert sum(failed.values()) == 2.0
    assert query(base, "ocrwatch_pages_left") == {"{}": 0.0}
    assert query(base, 'ocrwatch_engine_state{state="ready"}') == {
        '{"engine": "fake", "state": "ready"}': 1.0}
    assert query(base, "ocrwatch_page_latency_seconds_count") == {"{}": 6.0}
    # The dashboard's percentile query answers with a number.
    (p95,) = query(base, "histogram_quantile(0.95, sum by (le) "
                         "(rate(ocrwatch_page_latency_seconds_bucket[1m])))").values()
    assert p95 >= 0
    # Every query of the dashboard is PromQL this Prometheus takes, and answers.
    for promql in dashboard_queries():
        query(base, promql)


# -- the examples in packaging/prometheus ------------------------------------------------
EXAMPLES = Path(__file__).resolve().parents[1] / "packaging" / "prometheus"


def dashboard_queries() -> list[str]:
    """Every PromQL query of the Grafana dashboard, Grafana's variables given values."""
    board = json.loads((EXAMPLES / "grafana-dashboard.json").read_text())
    return [t["expr"].replace("$__rate_interval", "1m").replace("$__range", "5m")
            for p in board["panels"] for t in p["targets"]]


def served_names() -> set[str]:
    """The metric names a daemon serves, GPU ones included (a stand-in driver)."""
    from ocrwatch.metrics import Recorder

    recorder = Recorder()
    status = Status(engine=EngineStatus(name="vllm", state="ready", gpu_memory_mb=1.0))
    recorder.registry.register(DaemonCollector(lambda: status, card=lambda: 1))
    from ocrwatch.engines.remote import REQUEST_BUCKETS, ServerFigures
    from ocrwatch.metrics.remote import RemoteCollector

    one = ServerFigures("http://s/v1", 1, 0, 0, 0.1, (1,) * len(REQUEST_BUCKETS))
    recorder.registry.register(RemoteCollector(lambda: [one]))
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}
    return {family.name + suffix for family in recorder.registry.collect()
            for suffix in suffixes.get(family.type, ("",))}


def test_the_dashboard_and_alerts_name_only_metrics_the_daemon_serves() -> None:
    import re

    served = served_names()
    for name in ("grafana-dashboard.json", "ocrwatch-alerts.yml"):
        named = set(re.findall(r"ocrwatch_[a-z_]+", (EXAMPLES / name).read_text()))
        assert named and named <= served, (name, named - served)


@pytest.mark.skipif(shutil.which("promtool") is None, reason="no promtool (Debian's "
                    "prometheus package has it: apt-get install prometheus)")
def test_promtool_accepts_the_scrape_config_and_the_alert_rules() -> None:
    done = subprocess.run(["promtool", "check", "config", str(EXAMPLES / "prometheus.yml")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "6 rules found" in done.stdout
