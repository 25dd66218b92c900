"""Where the CPU of ocrwatch's Tesseract engine path goes, stage by stage, per page.

Each page of a set in the corpus's layout (``benchmarks/heldout_set.py`` makes one) goes
the daemon's way with every default on: decoded (:func:`ocrwatch.pages.decode.iter_pages`),
prepared (:class:`ocrwatch.scan.prepare.ScanPrep`: blank check, faint print, skew,
orientation), read by the Tesseract engine, finished, its thumbnail made and its
sidecars (the default outputs) written to a scratch folder. The functions of each stage
are wrapped with a CPU clock (``time.process_time``); a stage's time is its own, without
the stages it calls (OSD inside the orientation, a reading check's readings inside it).
Plain ``tesseract FILE stdout`` is timed on the same page for comparison.
``--no-read-first`` runs OSD before the reading on pages their lines do not turn, as
before ``orient.READ_FIRST``.

    python benchmarks/cpu_stages.py --set /tmp/heldout [--classes receipt] [--out FILE]
"""

from __future__ import annotations

import argparse
import functools
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: the repository is the package root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _common

os.environ.setdefault("OMP_THREAD_LIMIT", "1")

# Stage names in the order they are printed.
STAGES = ("decode", "blank check", "faint checks", "deskew", "OSD", "orientation other",
          "reading check: band", "reading check: four-way", "turn", "layout / enlargement",
          "first reading", "second: local threshold", "second: stretched", "second: rows",
          "after reading: orientation", "after reading: read again, turned",
          "engine other", "finish", "thumbnail", "outputs")


class Clock:
    """CPU seconds per stage of the page being timed, each stage's own (exclusive)."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._stack: list[str] = []
        self._mark = time.process_time()

    def _charge(self) -> None:
        now = time.process_time()
        if self._stack:
            self.spent[self._stack[-1]] += now - self._mark
        self._mark = now

    def enter(self, stage: str) -> None:
        self._charge()
        self._stack.append(stage)
        self.calls[stage] += 1

    def leave(self) -> None:
        self._charge()
        self._stack.pop()

    def reset(self) -> None:
        self.spent.clear()
        self.calls.clear()
        self._stack.clear()
        self._mark = time.process_time()


CLOCK = Clock()


def _timed(stage: str | Callable[..., str], function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        CLOCK.enter(stage(*args) if callable(stage) else stage)
        try:
            return function(*args, **kwargs)
        finally:
            CLOCK.leave()
    return wrapper


def _reading_stage(engine: Any, api: Any) -> str:
    """Which of the engine's readings this is, from the settings it is read with."""
    from tesserocr import PSM

    if "after reading: orientation" in CLOCK._stack:
        return "after reading: read again, turned"  # a page read as it lay, then turned
    if api.GetVariableAsString("thresholding_method") == "2":
        return "second: local threshold"
    if api.GetPageSegMode() == PSM.SINGLE_BLOCK:
        return "second: rows"
    return "second: stretched" if CLOCK.calls["first reading"] else "first reading"


def instrument() -> None:
    """Wrap each stage's functions with the clock (where its callers look them up)."""
    from ocrwatch import pipeline
    from ocrwatch.engines import tesseract
    from ocrwatch.scan import deskew, faint, inkcover, orient, osd

    for module, name, stage in (
            (inkcover, "measure_depths", "blank check"),
            (faint, "is_faint_print", "faint checks"), (faint, "stretched", "faint checks"),
            (faint, "mostly_faint", "faint checks"),
            (deskew, "skew_angle", "deskew"), (deskew, "straighten", "deskew"),
            (orient, "turn", "turn"), (tesseract, "line_height", "layout / enlargement"),
            (pipeline, "finish", "finish"),
            (pipeline, "_read_first", "after reading: orientation")):
        setattr(module, name, _timed(stage, getattr(module, name)))
    for cls, name, stage in (
            (osd.OsdApi, "found", "OSD"),
            (orient.Detector, "detect", "orientation other"),
            (orient.Detector, "script", "orientation other"),
            (orient.Detector, "_band_best", "reading check: band"),
            (orient.Detector, "_page_best", "reading check: four-way"),
            (tesseract.TesseractEngine, "_read", "engine other")):
        setattr(cls, name, _timed(stage, getattr(cls, name)))
    tesseract.TesseractEngine._reading = _timed(  # type: ignore[method-assign]
        _reading_stage, tesseract.TesseractEngine._reading)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def plain(path: Path, langs: str) -> float:
    before = _children_cpu()
    subprocess.run(["tesseract", str(path), "stdout", "-l", langs], capture_output=True,
                   check=False, timeout=600)
    return _children_cpu() - before


def _pages(iterator: Iterator[Any]) -> Iterator[Any]:
    """The decoder's pages, its own time charged to "decode"."""
    while True:
        CLOCK.enter("decode")
        try:
            page = next(iterator)
        except StopIteration:
            return
        finally:
            CLOCK.leave()
        yield page


def run(folder: Path, classes: list[str] | None,
        read_first: bool = True) -> list[dict[str, Any]]:
    instrument()
    from ocrwatch import pipeline
    from ocrwatch.config import Config
    from ocrwatch.engines.tesseract import TesseractEngine
    from ocrwatch.pages import thumbs
    from ocrwatch.pages.decode import iter_pages
    from ocrwatch.results.sidecar import write_sidecars
    from ocrwatch.scan import prepare

    rows: list[dict[str, Any]] = []
    engines: dict[str, tuple[Config, TesseractEngine, prepare.ScanPrep]] = {}
    with tempfile.TemporaryDirectory(prefix="ocrwatch-cpu-") as tmp:
        for item in _common.corpus(folder):
            if classes and item.kind not in classes:
                continue
            langs = item.languages or "eng"
            if langs not in engines:
                config = Config(languages=langs.split("+"))
                engine = TesseractEngine(config)
                prep = prepare.ScanPrep(config, scripts=True, read_first=read_first)
                engines[langs] = (config, engine, prep)
                # Instances started once per process, not per page: warmed on this page.
                for page in iter_pages(item.path, config, None):
                    engine.recognize([prep.prepare(page)])
            config, engine, prep = engines[langs]
            CLOCK.reset()
            started = time.process_time()
            results = []
            for page in _pages(iter_pages(item.path, config, None)):
                page = prep.prepare(page)
                CLOCK.enter("thumbnail")
                thumbs.encode(page.image)
                CLOCK.leave()
                if page.text is not None:
                    results.append(prepare.blank_result())
                    continue
                # The pipeline's reading: the engine, finish, and the script's OSD
                # asked after an unsure reading of a page OSD did not see.
                (result,), _ = pipeline.read(engine, "tesseract", [page], prep)
                results.append(result)
            CLOCK.enter("outputs")
            write_sidecars(Path(tmp) / item.path.stem, results)
            CLOCK.leave()
            total = time.process_time() - started
            row: dict[str, Any] = {"file": item.path.name, "kind": item.kind, "total": total,
                                   "plain": plain(item.path, langs),
                                   **{s: CLOCK.spent.get(s, 0.0) for s in STAGES}}
            rows.append(row)
            print(f"{row['file']:<18} {row['kind']:<13} total {total:6.2f}  plain "
                  f"{row['plain']:5.2f}  " + "  ".join(
                      f"{s}={row[s]:.2f}" for s in STAGES if row[s] >= 0.005), flush=True)
        for _, engine, prep in engines.values():
            prep.close()
            engine.close()
    return rows


def report(rows: list[dict[str, Any]]) -> list[str]:
    lines = _common.header(
        "CPU seconds per page of ocrwatch's Tesseract engine path, stage by stage "
        "(every default on)", [
            f"plain: {_common.tesseract_cli_version()} (tesseract FILE stdout -l LANGS)",
            "a stage's time is its own (process_time), without the stages it calls; "
            "ran: pages on which it took 5 ms or more"])
    n = len(rows)
    lines += ["", "| stage | median | mean | ran on |", "|---|--:|--:|--:|"]
    for stage in STAGES:
        values = [float(r[stage]) for r in rows]
        lines.append(f"| {stage} | {_common.median(values):.3f} | {sum(values) / n:.3f} | "
                     f"{sum(v >= 0.005 for v in values)}/{n} |")
    total = [float(r["total"]) for r in rows]
    cli = [float(r["plain"]) for r in rows]
    lines.append(f"| **total** | {_common.median(total):.3f} | {sum(total) / n:.3f} | {n} |")
    lines.append(f"| plain tesseract | {_common.median(cli):.3f} | {sum(cli) / n:.3f} | {n} |")
    lines += ["", f"ocrwatch / plain (medians): "
              f"{_common.median(total) / max(_common.median(cli), 1e-9):.2f}"]
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", type=Path, required=True, metavar="DIR")
    parser.add_argument("--classes", nargs="*", metavar="KIND")
    parser.add_argument("--out", type=Path, default=None, metavar="FILE")
    parser.add_argument("--no-read-first", dest="read_first", action="store_false",
                        help="OSD before the reading on every page its lines do not turn, "
                        "as before orient.READ_FIRST")
    args = parser.parse_args(argv)
    lines = report(run(args.set, args.classes, args.read_first))
    if not args.read_first:
        lines.insert(1, "# orient.READ_FIRST off (--no-read-first)")
    print("\n".join(lines))
    print(f"written: {_common.save('cpu_stages.txt', lines, args.out)}")


if __name__ == "__main__":
    main()
