"""How preparing pages scales with the daemon's preparer threads, without an engine.

    python3 benchmarks/prep_threads.py --corpus DIR [--threads 1 2 4 8] [--rotate on|off|both]
        [--out FILE]

On the GPU path the daemon's preparers (threads of one process, ``gpu_preparers``) open
each file and prepare its pages (``pipeline.open_pages``'s work without the index:
decode, scale to the engine's longest side, then ``ScanPrep.prepare``: ink, faint marks,
skew, orientation) while the engine reads. Here the same work runs on 1, 2, 4, ... threads
with no engine, on the drop ``gpu_scan.py`` reads (every corpus page fed four ways as a
JPEG), ``rotate_pages`` on and off. Each count runs twice: the preparation in the
threads themselves, and sent to as many processes (``vllm.prepare_processes``, the
default, ocrwatch/scan/pool.py). If pages/s grows with the threads up to the cores, the
preparers scale and what holds them back in the daemon is the engine's own Python (vLLM's
front end shares the process); if it stops early, something holds the interpreter lock.

The lock is watched by a ticker thread that sleeps 1 ms at a time: how late it wakes,
summed, as a share of the wall time, is how often it found the lock taken ("lock busy").
It is a sign, not a clock: threads running Python take turns every 5 ms.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import queue
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import _common  # noqa: E402
from benchmarks.gpu_scan import make_drop  # noqa: E402
from ocrwatch.config import Config  # noqa: E402
from ocrwatch.engines import profiles  # noqa: E402
from ocrwatch.pages.decode import iter_pages  # noqa: E402
from ocrwatch.scan import deskew  # noqa: E402
from ocrwatch.scan.pool import PooledScanPrep  # noqa: E402
from ocrwatch.scan.prepare import ScanPrep  # noqa: E402

MAX_SIDE = profiles.get(profiles.DEFAULT).max_side  # the model engines' longest side

TICK = 0.001


class Ticker:
    """A thread that sleeps ``TICK`` at a time and sums how late it wakes."""

    def __init__(self) -> None:
        self.late = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ticker", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            start = time.perf_counter()
            time.sleep(TICK)
            self.late += max(0.0, time.perf_counter() - start - TICK)

    def __enter__(self) -> Ticker:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def children_cpu() -> dict[int, float]:
    """CPU seconds each child process (the preparing processes) has used so far."""
    used = {}
    for child in psutil.Process().children():
        with contextlib.suppress(psutil.Error):
            times = child.cpu_times()
            used[child.pid] = times.user + times.system
    return used


def prepare_all(files: Sequence[Path], config: Config, threads: int,
                processes: bool = False) -> dict[str, float]:
    """Every file opened and its pages prepared on ``threads`` threads (with
    ``processes``, each sending its pages' preparation to one of as many processes, as
    the daemon does with vllm.prepare_processes); the figures."""
    scan = (PooledScanPrep(config, threads, least_skew=deskew.JUDGED_ANGLE) if processes
            else ScanPrep(config, least_skew=deskew.JUDGED_ANGLE))  # as for a model engine
    if processes:
        scan.prepare(next(iter_pages(files[0], config, MAX_SIDE)))  # its processes started
    todo: queue.SimpleQueue[Path] = queue.SimpleQueue()
    for path in files:
        todo.put(path)
    pages = [0] * threads
    failures: list[BaseException] = []

    def work(slot: int) -> None:
        try:
            while True:
                try:
                    path = todo.get_nowait()
                except queue.Empty:
                    return
                with path.open("rb") as fh:
                    for page in iter_pages(path, config, MAX_SIDE, fh, text_layer=True):
                        scan.prepare(page)
                        pages[slot] += 1
        except BaseException as exc:  # reported after the join: a broken run is no figure
            failures.append(exc)

    workers = [threading.Thread(target=work, args=(n,), name=f"prep-{n}") for n in range(threads)]
    before = children_cpu()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    with Ticker() as ticker:
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    after = children_cpu()  # the processes' CPU too, read before they end
    cpu += sum(t - before.get(pid, 0.0) for pid, t in after.items())
    scan.close()
    if failures:
        raise failures[0]
    done = sum(pages)
    return {"pages": done, "wall": wall, "rate": done / wall, "cpu_page": cpu / done,
            "busy": ticker.late / wall}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", type=Path, required=True, metavar="DIR")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--rotate", choices=("on", "off", "both"), default="both")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_THREAD_LIMIT", "1")
    with tempfile.TemporaryDirectory(prefix="ocrwatch-prep-drop-") as tmp:
        files = [Path(tmp) / name for name in make_drop(args.corpus, Path(tmp))]
        lines = _common.header("Preparing pages on the daemon's preparer threads, no engine", [
            f"drop: {len(files)} files, every corpus page fed turned 0, 90, 180 and 270 "
            f"degrees (JPEG 92); scaled to {MAX_SIDE} px (the model engines' longest side)",
            "per page: decode, scale, ScanPrep.prepare (ink, faint marks, skew, and with "
            "rotate_pages orientation); OMP_THREAD_LIMIT=1; cores: " + str(os.cpu_count()),
            "lock busy: how late a 1 ms sleeper wakes, summed, over the wall time"])
        lines += ["", "| rotate_pages | preparing in | threads | pages | wall s | pages/s "
                  "| x 1 thread | CPU s/page | lock busy |",
                  "|---|---|--:|--:|--:|--:|--:|--:|--:|"]
        rotations = {"on": (True,), "off": (False,), "both": (True, False)}[args.rotate]
        for rotate in rotations:
            config = Config(rotate_pages=rotate)
            prepare_all(files[:4], config, 1)  # Tesseract's data loaded, caches warm
            first = None
            # Each count both ways, one after the other: the same load on the machine.
            for threads in args.threads:
                for processes in (False, True):
                    got = prepare_all(files, config, threads, processes)
                    first = first or got["rate"]
                    lines.append(
                        f"| {'on' if rotate else 'off'} | "
                        f"{'processes' if processes else 'threads'} | {threads} "
                        f"| {got['pages']:.0f} | {got['wall']:.1f} | {got['rate']:.2f} "
                        f"| {got['rate'] / first:.2f} | {got['cpu_page']:.2f} "
                        f"| {got['busy']:.0%} |")
                    print(lines[-1], flush=True)
    print(f"saved {_common.save('prep_threads', lines, args.out)}")


if __name__ == "__main__":
    main()
