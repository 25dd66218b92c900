"""One long PDF's pages prepared in processes: one at a time, or several of it at once.

    python3 benchmarks/prep_ahead.py [--pages 24] [--runs 3] [--workers N] [--out FILE]

A GPU engine's daemon prepares each file's pages in processes of its own
(ocrwatch/scan/pool.py), a file a preparer thread. A drop of many files keeps every
process busy; one long PDF, the scanner's usual output, kept one busy while the rest
waited, so the engine got its pages at one core's pace. ``PooledScanPrep.prepare_all``
now sends up to ``AHEAD`` more of a file's pages to free processes while its preparer
waits for the first, handing them on in order.

Here the daemon's own loader does the work, without an engine: ``pipeline.open_pages``
over a PDF of ``--pages`` A4 pages at 300 dpi (benchmarks/_drop.py's pages), scaled to
the model's 1540 px, prepared in ``--workers`` processes (default: the daemon's
``gpu_preparers`` for this machine), with ``AHEAD`` as shipped and with 0 (one page at a
time, as before), alternately, ``--runs`` times each after a warm-up. Wall seconds from
the first page asked for to the last handed on; medians and their ratio.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import _common  # noqa: E402
from benchmarks._drop import make_drop  # noqa: E402


def one_pass(ctx: object, pdf: Path, expected: int, ahead: int) -> float:
    """Seconds to open and prepare every page of ``pdf`` the daemon's way."""
    from ocrwatch import pipeline
    from ocrwatch.engines import profiles
    from ocrwatch.scan import pool

    saved = pool.AHEAD
    pool.AHEAD = ahead
    try:
        started = time.monotonic()
        with contextlib.closing(pipeline.open_pages(
                ctx, _job(pdf), profiles.get(profiles.DEFAULT).max_side)) as pages:  # type: ignore[arg-type]
            count = sum(1 for _ in pages)
        seconds = time.monotonic() - started
        assert count == expected, f"{count} pages prepared of {expected}"
        return seconds
    finally:
        pool.AHEAD = saved


@contextlib.contextmanager
def _daemon_context(config: object, workers: int):  # type: ignore[no-untyped-def]
    """What open_pages needs of a Context, with the GPU path's pooled preparation."""
    from types import SimpleNamespace

    from ocrwatch.scan import deskew
    from ocrwatch.scan.pool import PooledScanPrep

    scan = PooledScanPrep(config, workers, least_skew=deskew.JUDGED_ANGLE)  # type: ignore[arg-type]

    class _NoThumbs:
        def save(self, *_args: object, **_kw: object) -> None:
            return None

    try:
        yield SimpleNamespace(config=config, scan=scan, thumbs=_NoThumbs(), jobs=None)
    finally:
        scan.close()


def _job(pdf: Path):  # type: ignore[no-untyped-def]
    from ocrwatch.core.domain import Job, State

    st = pdf.stat()
    return Job(1, pdf, None, st.st_size, st.st_mtime_ns, State.RUNNING, 1)


def main(argv: list[str] | None = None) -> None:
    from ocrwatch.config import Config
    from ocrwatch.engines.base import gpu_preparers
    from ocrwatch.scan import pool

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=24)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    workers = args.workers or gpu_preparers(Config().rotate_pages)
    shipped = pool.AHEAD
    with tempfile.TemporaryDirectory() as tmp, _daemon_context(Config(), workers) as ctx:
        files = make_drop(Path(tmp), 0, 0, 1, args.pages)
        pdf = Path(tmp) / next(iter(files))
        # Warm-up: the processes, the page cache, Tesseract's data.
        one_pass(ctx, pdf, args.pages, shipped)
        times: dict[int, list[float]] = {shipped: [], 0: []}
        for _ in range(args.runs):
            for ahead in (shipped, 0):
                times[ahead].append(one_pass(ctx, pdf, args.pages, ahead))
    ahead_s, alone_s = statistics.median(times[shipped]), statistics.median(times[0])
    lines = _common.header(
        "One long PDF prepared in processes: its pages several at once, or one at a time",
        [f"{args.pages} A4 pages at 300 dpi in one PDF (benchmarks/_drop.py), scaled to "
         f"1540 px, prepared by pipeline.open_pages in {workers} processes "
         "(scan/pool.PooledScanPrep, the daemon's count for this machine unless --workers); "
         f"median of {args.runs} runs each, alternating, after a warm-up"])
    lines += ["", "| preparation | runs (s) | median s | pages/s |", "|---|---|--:|--:|"]
    for ahead, label in ((shipped, f"up to {shipped} pages ahead (as shipped)"),
                         (0, "one page at a time (AHEAD = 0, as before)")):
        median = statistics.median(times[ahead])
        runs = ", ".join(f"{t:.2f}" for t in times[ahead])
        lines.append(f"| {label} | {runs} | {median:.2f} | {args.pages / median:.2f} |")
    lines += ["", f"ahead / one at a time, pages/s (medians): {alone_s / ahead_s:.2f}x"]
    print("\n".join(lines))
    if args.out:
        _common.save("prep_ahead.txt", lines, args.out)


if __name__ == "__main__":
    main()
