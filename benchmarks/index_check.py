"""What the start-up check of the index costs: ``PRAGMA quick_check`` on indexes of
several sizes, beside ``PRAGMA integrity_check`` (SQLite's full check, the strongest plain
alternative: it also compares every index with its table).

Each index is built through the project's own queue and index code (``JobQueue.offer``,
``claim``, ``complete``): files of 1 to 4 pages, 250 words a page drawn from 5,000 made-up
words, every page in the word and name tables as the daemon stores them. Each check runs
five times on a fresh connection (the file in the page cache, as at a daemon's start right
after it stopped); medians are printed.

    python benchmarks/index_check.py                    # 2,000, 20,000 and 50,000 pages
    python benchmarks/index_check.py --pages 1000 5000 --out /tmp/c.txt
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import header, save
from ocrwatch.core.domain import PageText
from ocrwatch.store.db import Database
from ocrwatch.store.jobs import JobQueue

RUNS = 5


def build(path: Path, pages: int, rng: random.Random) -> None:
    words = ["".join(rng.choice("abcdefghijklmnoprstuvz") for _ in range(rng.randint(3, 9)))
             for _ in range(5000)]
    db = Database(path)
    queue = JobQueue(db)
    made = n = 0
    while made < pages:
        count = min(rng.randint(1, 4), pages - made)
        source = Path(f"/bench/inbox/{n // 100}/file {n}.pdf")
        queue.offer(source, 1000 + n, n, f"{n:064x}")
        job = queue.claim()
        assert job is not None
        texts = [" ".join(rng.choices(words, k=250)) for _ in range(count)]
        queue.complete(job.id, [PageText(t, t) for t in texts], engine="bench",
                       md_path=None, txt_path=None)
        made += count
        n += 1
    db.close()


def timed(path: Path, pragma: str) -> float:
    times = []
    for _ in range(RUNS):
        conn = sqlite3.connect(path)
        start = time.perf_counter()
        rows = conn.execute(f"PRAGMA {pragma}").fetchall()
        times.append(time.perf_counter() - start)
        conn.close()
        assert rows == [("ok",)], rows
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, nargs="+", default=[2000, 20000, 50000])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    lines = header("index check at start: PRAGMA quick_check beside integrity_check")
    lines.append(f"# {RUNS} runs each on a fresh connection, medians")
    lines.append(f"{'pages':>8} {'MB':>8} {'quick_check ms':>15} {'integrity_check ms':>19}"
                 f" {'ratio':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for pages in args.pages:
            path = Path(tmp) / f"index-{pages}.sqlite3"
            build(path, pages, random.Random(pages))
            quick = timed(path, "quick_check")
            full = timed(path, "integrity_check")
            mb = path.stat().st_size / 1e6
            line = (f"{pages:>8} {mb:>8.1f} {quick * 1e3:>15.1f} {full * 1e3:>19.1f}"
                    f" {full / quick:>6.2f}")
            lines.append(line)
            print(line, flush=True)
    target = save("index_check.txt", lines, args.out)
    print("\n".join(lines[:6]))
    print(f"written to {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
