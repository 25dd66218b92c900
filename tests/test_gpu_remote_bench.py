"""benchmarks/gpu_remote.py's CPU side: the drop, the real daemon, the plain clients and
the report, against a fake OpenAI-compatible server (no GPU: the figures mean nothing)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from fake_openai import FakeServer

ROOT = Path(__file__).resolve().parent.parent


def test_the_remote_benchmark_runs_end_to_end_on_a_fake_server(tmp_path: Path) -> None:
    out = tmp_path / "remote.txt"
    with FakeServer(delay=0.02) as server:
        done = subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / "gpu_remote.py"), "--url", server.url,
             "--drop", "1,1,1", "--concurrency", "4", "--settle", "0.3",
             "--out", str(out), "--work", str(tmp_path / "work"), "--timeout", "120"],
            capture_output=True, text=True, timeout=240, cwd=ROOT)
        assert done.returncode == 0, done.stdout + done.stderr
        # The daemon's drop (a warm-up file, then 1 A4 page, 1 card, a 4-page PDF), then
        # the seeds' client and the plain client: each page asked for exactly once a run.
        assert server.chat_requests == 1 + 6 + 6 + 6
        assert sum(server.answered.values()) == 19
        bodies = server.requests
    assert all(b["max_tokens"] == 500 and b["ignore_eos"] is True for b in bodies)
    report = out.read_text()
    rows = [line for line in report.splitlines() if line.startswith("| ") and "pages/s" not in
            line]
    assert [r.split(" | ")[0] for r in rows] == [
        "| ocrwatch daemon, remote engine", "| seeds' client: plain HTTP, base64 PNG",
        "| plain httpx client, kept-alive, base64 PNG"]
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[2:4] == ["6", "0"], row  # pages read, pages failed
        assert float(cells[5]) > 0
    assert re.search(r"# command: .*gpu_remote\.py --url", report)
    inbox = tmp_path / "work" / "daemon_4" / "inbox"
    assert sorted(p.name for p in inbox.glob("*.md")) == [
        "a4_00.md", "card_00.md", "doc_0.md", "warmup.md"]
    assert (inbox / "doc_0.md").read_text().count("<!-- page") == 4
