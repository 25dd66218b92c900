"""What serving the Prometheus metrics costs the reading: pages per second with metrics
off, on but not scraped, and scraped every second, in one run.

    python3 benchmarks/metrics_cost.py [--files 24] [--pages 5] [--delay 0.02] [--repeat 3]
                                       [--out benchmarks/results/metrics_cost.txt]

A daemon in this process (a real inbox watched with inotify, real PDFs decoded page by
page, a real SQLite index, sidecars written) around the fake engine, which waits
``--delay`` seconds a page instead of reading it: what is measured is what surrounds the
engine, where the metrics live. Each run drops ``--files`` PDFs of ``--pages`` pages at
once and is timed from the drop to the last file done. The scraper is a separate process
(as Prometheus is) fetching ``/metrics`` every second over HTTP on 127.0.0.1. The three
modes take turns, ``--repeat`` rounds each, every run on a fresh index; medians, and each
mode's ratio to metrics off.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import header  # noqa: E402
from ocrwatch.config import Config  # noqa: E402
from ocrwatch.daemon import Daemon  # noqa: E402
from ocrwatch.testing.fake import FakeEngine  # noqa: E402

MODES = ("off", "on, not scraped", "scraped every 1 s")

# The scraper: another process, as Prometheus is; prints each scrape's milliseconds.
SCRAPER = """
import sys, time, urllib.request
url = sys.argv[1]
while True:
    began = time.monotonic()
    try:
        urllib.request.urlopen(url, timeout=5).read()
        print(round((time.monotonic() - began) * 1000, 2), flush=True)
    except OSError as exc:
        print("error", exc, flush=True)
    time.sleep(max(0.0, 1.0 - (time.monotonic() - began)))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_pdfs(folder: Path, files: int, pages: int) -> list[Path]:
    from fpdf import FPDF

    folder.mkdir(parents=True, exist_ok=True)
    made = []
    for n in range(files):
        pdf = FPDF()
        pdf.set_font("helvetica", size=12)
        for p in range(pages):
            pdf.add_page()
            pdf.multi_cell(0, 6, f"File {n}, page {p + 1}. " + "A line of scanned text. " * 40)
        path = folder / f"doc-{n:03d}.pdf"
        pdf.output(str(path))
        made.append(path)
    return made


def one_run(sources: list[Path], mode: str, delay: float) -> tuple[float, list[float]]:
    """(pages per second, each scrape's milliseconds) for one drop."""
    with tempfile.TemporaryDirectory(prefix="ocrwatch-metrics-bench-") as tmp:
        root = Path(tmp)
        inbox = root / "inbox"
        address = "" if mode == "off" else f"127.0.0.1:{free_port()}"
        # pdf_text = "ocr": every page goes to the engine (the PDFs have real text).
        config = Config(inbox=[inbox], database=root / "index.sqlite3", engine="fake",
                        settle_seconds=0.2, pdf_text="ocr", cache_dir=root / "cache",
                        metrics_address=address)
        scraper = None
        with Daemon(config, engine=FakeEngine(delay=delay)) as daemon:
            if mode == "scraped every 1 s":
                scraper = subprocess.Popen([sys.executable, "-c", SCRAPER, daemon.metrics_url
                                            or ""], stdout=subprocess.PIPE, text=True)
            staging = root / "staging"
            staging.mkdir()
            for src in sources:
                (staging / src.name).write_bytes(src.read_bytes())
            began = time.monotonic()
            for src in sources:  # a rename each: the files appear whole, at once
                os.rename(staging / src.name, inbox / src.name)
            total = len(sources)
            while True:
                counts = daemon.jobs.counts()
                if counts["done"] + counts["failed"] >= total:
                    break
                if time.monotonic() - began > 600:
                    raise SystemExit(f"timed out: {counts}")
                time.sleep(0.05)
            seconds = time.monotonic() - began
            assert counts["failed"] == 0, counts
            pages = sum(int(r["pages"]) for r in daemon.db.query(
                "SELECT pages FROM jobs WHERE state = 'done'"))
        scrapes: list[float] = []
        if scraper is not None:
            scraper.terminate()
            out, _ = scraper.communicate(timeout=10)
            scrapes = [float(line) for line in out.split() if line.replace(".", "").isdigit()]
        return pages / seconds, scrapes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=24)
    ap.add_argument("--pages", type=int, default=5)
    ap.add_argument("--delay", type=float, default=0.02, help="the fake engine's seconds a page")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/metrics_cost.txt")
    args = ap.parse_args()
    rates: dict[str, list[float]] = {m: [] for m in MODES}
    scrapes: list[float] = []
    with tempfile.TemporaryDirectory(prefix="ocrwatch-metrics-src-") as src:
        sources = make_pdfs(Path(src), args.files, args.pages)
        one_run(sources[:2], "off", args.delay)  # warm-up: imports, fonts, caches
        for _ in range(args.repeat):
            for mode in MODES:  # in turns, so that the machine's load falls on all alike
                rate, times = one_run(sources, mode, args.delay)
                rates[mode].append(rate)
                scrapes.extend(times)
                print(f"{mode:>20}: {rate:6.2f} pages/s", flush=True)
    base = statistics.median(rates["off"])
    lines = [
        *header("benchmarks/metrics_cost.py: what serving the Prometheus metrics costs"),
        f"# a drop of {args.files} PDFs x {args.pages} pages = {args.files * args.pages} "
        f"pages, the fake engine waiting {args.delay} s a page; the daemon in-process, the "
        "scraper another process; modes in turns; medians",
        "",
        f"{'mode':>20}  {'pages/s (median)':>16}  {'ratio to off':>12}  runs",
    ]
    for mode in MODES:
        med = statistics.median(rates[mode])
        runs = " ".join(f"{r:.2f}" for r in rates[mode])
        lines.append(f"{mode:>20}  {med:16.2f}  {med / base:12.3f}  {runs}")
    if scrapes:
        lines += ["", f"scrapes: {len(scrapes)}, each {statistics.median(scrapes):.1f} ms "
                      f"(median), {max(scrapes):.1f} ms at most (from the scraper's side)"]
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.write_text(text)


if __name__ == "__main__":
    main()
