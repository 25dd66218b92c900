"""Throughput of the daemon end to end on the CPU engine, ``workers`` 1 against 2.

Each run is a fresh daemon (``watch=False``) with a fresh database and output folder,
given every file of the corpus at once (as ``ocrwatch add`` does) and timed until the
last job is done: decoding, hashing, OCR, sidecars and index included. The fake engine,
shaped like the Tesseract one (full-size pages, one page a batch), runs the same
pipeline without OCR, to show what the pipeline itself costs.

    python benchmarks/pipeline.py --corpus ../shared/corpus
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

# Set before tesserocr loads Tesseract (the engine's module does it too).
os.environ.setdefault("OMP_THREAD_LIMIT", "1")

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import corpus, header, median, save
from ocrwatch.core.domain import Page, PageText
from ocrwatch.engines.base import Engine, ReadPolicy


class TimedEngine:
    """Wraps an engine to time each page it reads; the daemon sees the same engine."""

    def __init__(self, inner: Engine) -> None:
        self.inner = inner
        self.name = inner.name
        self.page_seconds: list[float] = []
        self._lock = threading.Lock()

    @property
    def max_side(self) -> int | None:
        return self.inner.max_side

    @property
    def policy(self) -> ReadPolicy:
        return self.inner.policy

    def recognize(self, pages: Sequence[Page]) -> list[PageText]:
        start = time.perf_counter()
        out = self.inner.recognize(pages)
        each = (time.perf_counter() - start) / max(1, len(pages))
        with self._lock:
            self.page_seconds.extend([each] * len(pages))
        return out

    def release(self) -> None:
        self.inner.release()

    def close(self) -> None:
        self.inner.close()

    def describe(self) -> dict[str, object]:
        return self.inner.describe()


@dataclass
class Run:
    engine: str
    workers: int
    files: int
    pages: int
    seconds: float
    page_seconds: list[float] = field(default_factory=list)

    @property
    def pages_per_s(self) -> float:
        return self.pages / self.seconds

    @property
    def files_per_s(self) -> float:
        return self.files / self.seconds


def one_run(files: list[Path], engine_name: str, workers: int, languages: str,
            root: Path, timeout: float) -> Run:
    from ocrwatch import config as config_mod
    from ocrwatch.daemon import Daemon
    from ocrwatch.engines.registry import create
    from ocrwatch.testing.fake import FakeEngine  # registers "fake" for the config

    root.mkdir(parents=True)
    config = config_mod.load(None, environ={}, overrides={
        "inbox": [str(root / "inbox")], "output_dir": str(root / "out"),
        "database": str(root / "index.sqlite3"), "engine": engine_name,
        "languages": languages.replace("+", ","), "workers": str(workers),
    })
    inner: Engine
    if engine_name == "fake":
        # The Tesseract engine's shape: full-size pages, one page per worker at a time.
        inner = FakeEngine(max_side=None, policy=ReadPolicy(concurrency=workers),
                           delay=0.0)
    else:
        inner = create(config, engine_name)
    engine = TimedEngine(inner)
    daemon = Daemon(config, engine=engine, watch=False)
    try:
        daemon.start()
        start = time.perf_counter()
        added = daemon.add(files)
        deadline = start + timeout
        done = threading.Event()
        while not done.wait(0.02):  # the daemon's threads do the work; this only watches
            counts = daemon.jobs.counts()
            if counts["queued"] == 0 and counts["running"] == 0:
                break
            if time.perf_counter() > deadline:
                raise SystemExit(f"run did not finish in {timeout:.0f} s: {counts}")
        seconds = time.perf_counter() - start
        bad = [(str(p), j.reason if j else "unknown") for p in added
               if (j := daemon.jobs.known(p)) is None or j.state != "done"]
        pages = int(daemon.db.query("SELECT COUNT(*) AS n FROM pages")[0]["n"])
    finally:
        daemon.close()
    if bad:
        raise SystemExit(f"files not read: {bad}")
    return Run(engine_name, workers, len(files), pages, seconds, engine.page_seconds)


def summary(runs: list[Run]) -> tuple[float, float, float]:
    """Medians over repeats: pages/s, seconds per page (engine), files/s."""
    per_page = [s for r in runs for s in r.page_seconds]
    return (median([r.pages_per_s for r in runs]), median(per_page),
            median([r.files_per_s for r in runs]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--corpus", type=Path, required=True, metavar="DIR")
    parser.add_argument("--languages", default="eng",
                        help="Tesseract languages for every file (default eng, the "
                             "shipped default; more languages read slower)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    parser.add_argument("--out", type=Path, default=None, metavar="FILE")
    args = parser.parse_args(argv)

    files = [item.path for item in corpus(args.corpus)]
    if not files:
        print(f"no X.ext + X.gt.txt pairs in {args.corpus}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="ocrwatch-pipeline-") as tmp:
        base = Path(tmp)
        # Whatever the engine keeps in the user's folders (merged tessdata) stays here.
        for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
            os.environ[var] = str(base / "home" / var.lower())
        results: dict[tuple[str, int], list[Run]] = {}
        n = 0
        for repeat in range(args.repeats):
            for engine in ("fake", "tesseract"):
                for workers in args.workers:
                    n += 1
                    run = one_run(files, engine, workers, args.languages, base / f"run{n}",
                                  args.timeout)
                    results.setdefault((engine, workers), []).append(run)
                    print(f"repeat {repeat + 1}: {engine} workers={workers}: "
                          f"{run.pages} pages in {run.seconds:.2f} s", file=sys.stderr,
                          flush=True)

    import tesserocr

    pages = results[("tesseract", args.workers[0])][0].pages
    lines = header(
        f"ocrwatch pipeline throughput: {len(files)} files, {pages} pages from {args.corpus}",
        [
            f"engine: {tesserocr.tesseract_version().splitlines()[0]} (tesserocr), languages "
            f"{args.languages}, OMP_THREAD_LIMIT={os.environ.get('OMP_THREAD_LIMIT')}",
            "each run: fresh daemon (watch=False), database and output folder; all files "
            "added at once; timed until the last job is done",
            f"figures: medians of {args.repeats} runs; ms/page: the engine's own time per page "
            "(wall time of its recognize call)",
            "fake: the shipped fake engine shaped like Tesseract's (full-size pages, one a "
            "batch): the pipeline's own cost (hash, decode, sidecars, index)",
        ],
    )
    lines += ["", "| engine | workers | pages/s | median ms/page (engine) | files/s "
              "| run seconds (median) |", "|---|--:|--:|--:|--:|--:|"]
    for (engine, workers), runs in results.items():
        pps, spp, fps = summary(runs)
        lines.append(f"| {engine} | {workers} | {pps:.2f} | {spp * 1000:.1f} | {fps:.2f} "
                     f"| {median([r.seconds for r in runs]):.2f} |")
    lines.append("")
    if len(args.workers) >= 2:
        a, b = args.workers[0], args.workers[1]
        for engine in ("tesseract", "fake"):
            pa, sa, _ = summary(results[(engine, a)])
            pb, sb, _ = summary(results[(engine, b)])
            lines.append(f"{engine}: workers {b} vs {a}: {pb / pa:.2f}x pages/s; "
                         f"engine s/page {sb / sa:.2f}x")
    tess, _, _ = summary(results[("tesseract", args.workers[-1])])
    fake, _, _ = summary(results[("fake", args.workers[-1])])
    lines.append(f"the pipeline's own time per page (fake engine, workers={args.workers[-1]}): "
                 f"{1000 / fake:.0f} ms, {tess / fake * 100:.1f}% of the {1000 / tess:.0f} ms "
                 "a page takes end to end with Tesseract")
    print("\n".join(lines))
    target = save("pipeline.txt", lines, args.out)
    print(f"saved to {target}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
