"""The remote engine's own cost, on the CPU: the daemon beside a plain httpx client.

    python3 benchmarks/remote_overhead.py [--delay 1.0] [--concurrency 8] [--runs 3]

A fake OpenAI-compatible server (tests/fake_openai.py, its own process, real HTTP on
127.0.0.1) answers every page after a fixed ``--delay``, however many are in flight, as
a GPU server with room to spare would. On the same drop as benchmarks/gpu_remote.py
(``--drop``, smaller by default), one after another and ``--runs`` times each:

- the real daemon: ``ocrwatch run`` with ``engine = "remote"`` and
  ``remote.concurrency = --concurrency`` (benchmarks/gpu_remote.py's ``run_daemon``);
- a plain httpx client with kept-alive connections and as many requests in flight, each
  page decoded, scaled to 1540 px and sent as a base64 PNG (``run_plain``).

Both are timed from the first request the server saw to the last answer it gave (the
server logs both), so the daemon's settle time and warm-up file are outside the ratio;
the daemon's drop-to-last-sidecar time is printed beside it. With the server's work
fixed, the ratio of rates is the client side's cost alone: 1.00 is a client that adds
nothing. The engine's per-page stages (from its own log line) and the daemon's
preparation and sidecar writing per page (timed here on the same pages, with the
daemon's functions) say where the time goes. Report: benchmarks/results/remote_overhead.txt.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import header, save  # noqa: E402
from benchmarks._drop import drop_counts, make_drop  # noqa: E402
from benchmarks.gpu_remote import run_daemon, run_plain  # noqa: E402
from ocrwatch.config import Config  # noqa: E402
from ocrwatch.engines import profiles  # noqa: E402
from ocrwatch.engines.lightonocr import page_text  # noqa: E402
from ocrwatch.pages.decode import iter_pages  # noqa: E402
from ocrwatch.results.sidecar import write_sidecars  # noqa: E402

MAX_SIDE = profiles.get(profiles.DEFAULT).max_side  # the model engines' longest side


class Server:
    """tests/fake_openai.py in its own process, logging each request's times."""

    def __init__(self, delay: float, times: Path) -> None:
        self.times = times
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "fake_openai.py"), "--port", "0",
             "--delay", str(delay), "--times", str(times)],
            stdout=subprocess.PIPE, text=True, cwd=ROOT,
            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
        assert self.proc.stdout is not None
        self.url = f"http://127.0.0.1:{int(self.proc.stdout.readline())}/v1"

    def lines(self) -> list[tuple[float, float]]:
        """(arrived, answered) of every request so far, in the order they were answered."""
        return [(float(a), float(b)) for a, b in (
            line.split() for line in self.times.read_text().splitlines() if line.strip())]

    def window(self, start: int) -> tuple[int, float]:
        """Requests answered from the ``start``-th on, and the time from the first of
        them to arrive to the last answer."""
        rows = self.lines()[start:]
        if not rows:
            return 0, float("nan")
        return len(rows), max(r[1] for r in rows) - min(r[0] for r in rows)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


def daemon_stages(folder: Path, files: dict[str, int], work: Path) -> dict[str, float]:
    """Per page, in ms: the daemon's preparation (decode, rotate, scale: ``iter_pages``)
    and its sidecar writing (``write_sidecars``), on the drop's own files."""
    config = Config()
    prepare: list[float] = []
    write: list[float] = []
    out = work / "sidecars"
    out.mkdir(parents=True, exist_ok=True)
    for name, count in files.items():
        t = time.perf_counter()
        pages = list(iter_pages(folder / name, config, MAX_SIDE))
        prepare.append((time.perf_counter() - t) / max(1, len(pages)) * 1000)
        texts = [page_text(f"# Page {i}\n\nsome words on it") for i in range(count)]
        t = time.perf_counter()
        write_sidecars(out / Path(name).stem, texts)
        write.append((time.perf_counter() - t) / count * 1000)
    return {"prepare": statistics.median(prepare), "write": statistics.median(write)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay", type=float, default=1.0, help="the server's seconds a page")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--drop", default="8,8,2",
                        help="A4 pages, card photos, four-page PDFs (default 8,8,2)")
    parser.add_argument("--settle", type=float, default=1.0)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--work", type=Path)
    args = parser.parse_args()

    work = args.work or Path(tempfile.mkdtemp(prefix="ocrwatch-remote-overhead-"))
    work.mkdir(parents=True, exist_ok=True)
    a4, cards, pdfs = drop_counts(args.drop)
    folder = work / "drop"
    shutil.rmtree(folder, ignore_errors=True)
    files = make_drop(folder, a4, cards, pdfs)
    n_pages = sum(files.values())
    server = Server(args.delay, work / "times.txt")
    daemon: list[dict[str, Any]] = []
    plain: list[dict[str, Any]] = []

    def rate(r: dict[str, Any]) -> float:
        return float(r["answered"]) / float(r["window"])

    try:
        for run in range(args.runs):
            d_work = work / f"daemon_{run}"
            shutil.rmtree(d_work, ignore_errors=True)
            start = len(server.lines())
            result = run_daemon([server.url], folder, files, args.concurrency, 500,
                                args.settle, d_work, None, 600.0)
            # The warm-up file's page is answered before the drop: the rest are the drop's.
            result["answered"], result["window"] = server.window(start + 1)
            daemon.append(result)
            start = len(server.lines())
            result = run_plain([server.url], folder, files, args.concurrency, 500, None,
                               keep_alive=True)
            result["answered"], result["window"] = server.window(start)
            plain.append(result)
            print(f"run {run + 1}: daemon {rate(daemon[-1]):.2f} pages/s "
                  f"({daemon[-1]['failed']} failed), plain {rate(plain[-1]):.2f} pages/s "
                  f"({plain[-1]['failed']} failed)", flush=True)
    finally:
        server.stop()
    stages = daemon_stages(folder, files, work)

    d_rate = statistics.median(rate(r) for r in daemon)
    p_rate = statistics.median(rate(r) for r in plain)
    ideal = args.concurrency / args.delay
    lines = [*header("The remote engine's client-side cost on the CPU "
                     "(benchmarks/remote_overhead.py)", [
        f"server:  tests/fake_openai.py in its own process on 127.0.0.1, answering every "
        f"page after {args.delay:g} s (at most {ideal:.2f} pages/s at {args.concurrency} "
        "in flight)",
        f"drop:    {a4} A4 JPEGs at 300 dpi, {cards} card photos, {pdfs} PDFs of 4 pages "
        f"({n_pages} pages); {args.runs} runs each, daemon and plain client in turn",
        "timed:   from the first request the server saw to the last answer it gave",
    ]), "",
        "| run | in flight | pages/s (median) | each run | failed | daemon: drop to last "
        "sidecar |",
        "|---|---|---|---|---|---|",
        f"| ocrwatch daemon, remote engine | {args.concurrency} | {d_rate:.2f} | "
        f"{', '.join(f'{rate(r):.2f}' for r in daemon)} | "
        f"{', '.join(str(r['failed']) for r in daemon)} | "
        f"{', '.join(str(r['seconds']) + ' s' for r in daemon)} |",
        f"| plain httpx client, kept-alive, base64 PNG | {args.concurrency} | {p_rate:.2f} | "
        f"{', '.join(f'{rate(r):.2f}' for r in plain)} | "
        f"{', '.join(str(r['failed']) for r in plain)} | - |",
        "",
        f"daemon / plain client at the same concurrency: {d_rate / p_rate:.3f} "
        f"(medians of {args.runs} runs)",
        f"plain client / the server's bound ({ideal:.2f} pages/s): {p_rate / ideal:.3f}",
    ]
    engine = [r["stage_ms"] for r in daemon if r.get("stage_ms")]
    if engine:
        keys = list(engine[-1])
        lines.append("engine stages, median ms a page (its log line at close; the median "
                     "of the runs): " + ", ".join(
                         f"{k} {statistics.median(float(e[k]) for e in engine if k in e):.2f}"
                         for k in keys))
    lines.append(f"daemon stages outside the engine, median ms a page (timed here on the "
                 f"drop): prepare {stages['prepare']:.1f}, write {stages['write']:.2f}")
    lines.append("encode runs in the preparer threads, beside prepare; queue is a page's "
                 "wait for a fit server; wait is the server's delay plus its decoding.")
    target = save("remote_overhead.txt", lines, args.out)
    print("\n".join(lines))
    print(f"written to {target}")


if __name__ == "__main__":
    main()
