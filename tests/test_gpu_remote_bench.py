"""benchmarks/gpu_remote.py's CPU side: the drop, the real daemon, the plain clients and
the report, against a fake OpenAI-compatible server (no GPU: the figures mean nothing)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from fake_openai import FakeServer
from helpers import wait_for

ROOT = Path(__file__).resolve().parent.parent


def test_the_remote_benchmark_runs_end_to_end_on_a_fake_server(tmp_path: Path) -> None:
    out = tmp_path / "remote.txt"
    with FakeServer(delay=0.02) as server:
        done = subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / "gpu_remote.py"), "--url", server.url,
             "--drop", "1,1,1", "--concurrency", "4", "--settle", "0.3",
             "--out", str(out), "--work", str(tmp_path / "work"), "--timeout", "120",
             "--warm", "1,0,0"],
            capture_output=True, text=True, timeout=240, cwd=ROOT)
        assert done.returncode == 0, done.stdout + done.stderr
        # A warm-up pass and the plain client, the daemon's drop (a warm-up file, then 1 A4
        # page, 1 card, a 4-page PDF), the engine alone and the seeds' client: each page
        # asked for exactly once a run.
        assert server.chat_requests == 6 + 6 + 1 + 6 + 6 + 6
        assert sum(server.answered.values()) == 31
        bodies = server.requests
    assert all(b["max_tokens"] == 500 and b["ignore_eos"] is True for b in bodies)
    report = out.read_text()
    rows = [line for line in report.splitlines() if line.startswith("| ") and "pages/s" not in
            line]
    assert [r.split(" | ")[0] for r in rows] == [
        "| plain httpx client, kept-alive, base64 PNG", "| ocrwatch daemon, remote engine",
        "| the remote engine alone, pages prepared beforehand",
        "| seeds' client: plain HTTP, base64 PNG"]
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[2:4] == ["6", "0"], row  # pages read, pages failed
        assert float(cells[6]) > 0  # pages/s
    assert re.search(r"# command: .*gpu_remote\.py --url", report)
    daemon = [c.strip() for c in rows[1].strip("|").split("|")]
    assert float(daemon[7]) >= float(daemon[6])  # from the first file queued: no settle
    # The servers' own token counts: the same work on every side (the same pixels, 500
    # tokens each).
    tokens = [[c.strip() for c in r.strip("|").split("|")][10] for r in rows]
    assert tokens[0].endswith(" + 500") and tokens == [tokens[0]] * 4, tokens
    assert re.search(r"the remote engine alone / plain client at the same concurrency: "
                     r"\d\.\d{3}", report)
    assert re.search(r"from the first file queued: \d\.\d{3} \(goal at least 0\.97", report)
    stages = re.search(r"engine stages, median ms a page: (.*)", report)
    assert stages is not None
    assert [p.split()[0] for p in stages.group(1).split(", ")] == [
        "encode", "queue", "send", "wait", "read", "parse"]
    inbox = tmp_path / "work" / "daemon_4" / "inbox"
    assert sorted(p.name for p in inbox.glob("*.md")) == [
        "a4_00.md", "card_00.md", "doc_0.md", "warmup_a4_00.md"]
    assert (inbox / "doc_0.md").read_text().count("<!-- page") == 4


def test_an_empty_answer_is_a_page_read_and_only_errors_are_failures(tmp_path: Path) -> None:
    """Random weights often write nothing: each such answer is a page the model left empty
    (as the daemon writes it), not a failure, in every run."""
    out = tmp_path / "remote.txt"
    with FakeServer(mode="content") as server:
        server.content = ""
        done = subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / "gpu_remote.py"), "--url", server.url,
             "--drop", "1,1,0", "--concurrency", "2", "--settle", "0.3",
             "--out", str(out), "--work", str(tmp_path / "work"), "--timeout", "120",
             "--warm", "1,0,0"],
            capture_output=True, text=True, timeout=240, cwd=ROOT)
        assert done.returncode == 0, done.stdout + done.stderr
    rows = [[c.strip() for c in line.strip("|").split("|")]
            for line in out.read_text().splitlines()
            if line.startswith("| ") and "pages/s" not in line]
    assert [r[2:4] for r in rows] == [["2", "0"]] * 4, rows  # pages read, failed
    # The plain clients' and the engine's empty answers (the daemon counts none).
    assert [r[4] for r in rows] == ["2", "-", "2", "2"]
    assert "0 failed, 2 empty" in done.stdout


def test_the_overhead_benchmark_runs_the_daemon_beside_a_plain_client(tmp_path: Path) -> None:
    out = tmp_path / "remote_overhead.txt"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "remote_overhead.py"), "--runs", "1",
         "--drop", "1,0,1", "--delay", "0.2", "--concurrency", "2", "--settle", "0.3",
         "--out", str(out), "--work", str(tmp_path / "work")],
        capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    report = out.read_text()
    ratio = re.search(r"daemon / plain client at the same concurrency: (\d+\.\d+)", report)
    assert ratio is not None and float(ratio.group(1)) > 0
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in report.splitlines()
            if line.startswith("| ") and "pages/s" not in line]
    assert [(r[0], r[4]) for r in rows] == [
        ("ocrwatch daemon, remote engine", "0"),
        ("plain httpx client, kept-alive, base64 PNG", "0")]  # failures
    assert re.search(r"engine stages, .*: encode [\d.]+, queue [\d.]+, send [\d.]+, "
                     r"wait [\d.]+, read [\d.]+, parse [\d.]+", report)
    assert re.search(r"prepare [\d.]+, write [\d.]+", report)


def test_the_servers_occupancy_is_read_from_vllms_metrics() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpu_remote import Occupancy

    with FakeServer() as server:
        server.metrics = ("# HELP vllm:num_requests_running Running.\n"
                          'vllm:num_requests_running{engine="0",model_name="m"} 6.0\n'
                          'vllm:num_requests_waiting{engine="0",model_name="m"} 2.0\n')
        with Occupancy([server.url, server.url]) as occupancy:  # summed over servers
            wait_for(lambda: len(occupancy.samples) >= 2, 10, "two samples")
        assert occupancy.busy_means() == (12.0, 4.0)
        server.metrics = None  # a server without /metrics: no figure rather than zeros
        with Occupancy([server.url]) as occupancy:
            wait_for(lambda: not occupancy.sampling(), 10, "the sampler to give up")
        assert occupancy.busy_means() is None


def test_a_benchmark_daemon_keeps_out_of_the_users_folders_but_not_vllms_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from _drop import daemon_env

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    monkeypatch.delenv("VLLM_CACHE_ROOT", raising=False)
    env = daemon_env(tmp_path / "home", tmp_path / "work")
    for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
        assert Path(env[var]).is_relative_to(tmp_path / "home"), var  # thumbnails too
    assert env["VLLM_CACHE_ROOT"] == str(tmp_path / "user-cache" / "vllm")
    assert env["OCRWATCH_TESTING"] == "1"
