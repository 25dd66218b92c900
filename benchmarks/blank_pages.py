"""Blank or not, as the daemon decides it: the ink measure (:mod:`ocrwatch.scan.inkcover`),
then, on a page with too little ink but faint marks, the faint-print check
(:mod:`ocrwatch.scan.faint`), on every corpus page and on blank backs made from each, as
scanned, at low resolution and photographed.

Pages with text, as scanned, photographed, at 100 dpi, on noisy paper, filed (punch
holes and a staple) and faint (the print at half its darkness on blue-grey paper), must
never be recorded blank (they would not be read); the blank
backs (paper grain, sensor noise, dust and the front showing through, mirrored; filed:
with punch holes and a staple; ``benchmarks/cases.py``) should all be. Each
kind's ink share and densest square are printed as ranges, with the time of a measure.

    python benchmarks/blank_pages.py --corpus ../shared/corpus
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from PIL import Image

if TYPE_CHECKING:
    from ocrwatch.scan.faint import Judge

if __package__ in (None, ""):  # run as a file: the repository is the package root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _common, cases
from benchmarks.orientation import pages

# kind -> how it is made from the upright page, its blank back (both paths) and a scratch
# folder; each page's back is made once (benchmarks/cases.py's blank_back)
KINDS: dict[str, Callable[[Path, Path, Path, int], Path]] = {
    "page": lambda page, back, tmp, seed: page,
    "page, photo": lambda page, back, tmp, seed: cases.phone_photo(
        page, tmp / "photo.jpg", seed),
    "page, 100 dpi": lambda page, back, tmp, seed: cases.low_resolution(
        page, tmp / "low.png", 100),
    "page, noisy paper": lambda page, back, tmp, seed: cases.noisy(
        page, tmp / "noisy.jpg", seed),
    "page, filed": lambda page, back, tmp, seed: cases.filed(
        page, tmp / "filed.jpg", seed),
    "page, faint": lambda page, back, tmp, seed: cases.faint(
        page, tmp / "faint.png", seed),
    "back": lambda page, back, tmp, seed: back,
    "back, 150 dpi": lambda page, back, tmp, seed: cases.low_resolution(
        back, tmp / "back150.png", 150),
    "back, 100 dpi": lambda page, back, tmp, seed: cases.low_resolution(
        back, tmp / "back100.png", 100),
    "back, photo": lambda page, back, tmp, seed: cases.phone_photo(
        back, tmp / "backphoto.jpg", seed),
    "back, filed": lambda page, back, tmp, seed: cases.filed(
        back, tmp / "backfiled.jpg", seed),
    "back, filed, 150 dpi": lambda page, back, tmp, seed: cases.low_resolution(
        cases.filed(back, tmp / "backfiled.jpg", seed), tmp / "backfiled150.png", 150),
}


class Recorder:
    """The faint-print check's judge (:class:`ocrwatch.scan.faint.Judge`), passed
    through, with what it answered: OSD's turn and confidence for the stretched page and
    for its mirror image, then the confident level text read upright and mirrored."""

    def __init__(self, judge: Judge) -> None:
        self.judge = judge
        self.osd: list[tuple[int, float] | None] = []
        self.read: list[tuple[float, int] | None] = []

    def osd_only(self, image: Image.Image) -> tuple[int, float] | None:
        found = self.judge.osd_only(image)
        self.osd.append(found)
        return found

    def level_text(self, image: Image.Image) -> tuple[float, int] | None:
        found = self.judge.level_text(image)
        self.read.append(found)
        return found

    def verdict(self) -> str:
        """What the check saw, for the table: OSD as it is / mirrored, then the reading's
        confident level text (words) and the mirror image's best."""
        conf = [f"{found[1]:.1f}" if found else "-" for found in self.osd]
        out = "OSD " + " / ".join(conf)
        if self.read:
            upright, *mirrored = [found or (0.0, 0) for found in self.read]
            best = max((m[0] for m in mirrored), default=0.0)
            out += f"; read {upright[0]:.1f} ({upright[1]} words)"
            if mirrored:
                out += f", mirrored {best:.1f}"
        return out


def main(argv: list[str] | None = None) -> None:
    from ocrwatch.scan import faint, inkcover, orient

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, required=True, metavar="DIR")
    parser.add_argument("--out", type=Path, default=None, metavar="FILE")
    args = parser.parse_args(argv)
    found: dict[str, list[tuple[str, bool, float, float]]] = {kind: [] for kind in KINDS}
    times: list[float] = []
    checked: list[float] = []  # the faint-print check's time, on the pages it is made on
    verdicts: list[tuple[str, str, bool, str]] = []  # kind, page, blank, what the check saw
    detector = orient.Detector(None, ["eng"])  # OSD only: its languages do not matter
    with tempfile.TemporaryDirectory(prefix="ocrwatch-blank-") as scratch:
        tmp = Path(scratch)
        for seed, (name, path, _langs) in enumerate(pages(_common.corpus(args.corpus), tmp)):
            back = cases.blank_back(path, tmp / "back.jpg", seed)
            for kind, make in KINDS.items():
                with Image.open(make(path, back, tmp, seed)) as opened:
                    image = opened.convert("RGB")
                started = time.perf_counter()
                share, densest = inkcover.measure(image)  # what the daemon does
                blank = inkcover.looks_blank(share, densest)
                times.append(time.perf_counter() - started)
                if blank and faint.has_faint_marks(image):
                    started = time.perf_counter()
                    judge = Recorder(detector)
                    blank = not faint.is_faint_print(image, judge)
                    checked.append(time.perf_counter() - started)
                    verdicts.append((kind, name, blank, judge.verdict()))
                found[kind].append((name, blank, share, densest))
    detector.close()
    lines = _common.header("ocrwatch blank pages: the ink measure on corpus pages and on "
                           "blank backs made from them", [
                               f"blank: under {inkcover.BLANK_COVERAGE:.1%} ink and no "
                               f"{inkcover.TILE}-pixel square (at {inkcover.WORK_SIDE} "
                               f"pixels) over {inkcover.TILE_INK:.0%} ink, and no faint "
                               "print (faint marks that OSD reads as print, not mirrored)"])
    lines += ["", "| kind | pages | recorded blank | ink share | densest square | "
              "the wrong ones |", "|---|--:|--:|---|---|---|"]
    for kind, rows in found.items():
        want_blank = kind.startswith("back")
        wrong = [name for name, blank, _, _ in rows if blank != want_blank]
        shares = [share for _, _, share, _ in rows]
        squares = [densest for _, _, _, densest in rows]
        lines.append(f"| {kind} | {len(rows)} | {sum(b for _, b, _, _ in rows)} | "
                     f"{min(shares):.3%} to {max(shares):.3%} | {min(squares):.1%} to "
                     f"{max(squares):.1%} | {', '.join(wrong) or '-'} |")
    lines += ["", f"time of one measure: median {_common.median(times) * 1000:.0f} ms, "
              f"at most {max(times) * 1000:.0f} ms (one thread)"]
    if checked:
        lines += [f"faint marks on {len(checked)} of {len(times)} pages blank by their ink, "
                  "each then told faint print or show-through (ocrwatch/scan/faint.py): "
                  f"median {_common.median(checked) * 1000:.0f} ms, at most "
                  f"{max(checked) * 1000:.0f} ms"]
        lines += ["", "the faint-print check on each page it was made on: OSD's confidence "
                  f"for the stretched page / its mirror image (print: {faint.SURE} or more, "
                  f"and {faint.MIRROR_FACTOR} times the mirror's), then the confident level "
                  f"text read upright (print: {faint.FAINT_WORDS} words or more) and the "
                  f"mirror image's best (print: the upright {faint.READ_FACTOR} times it)",
                  "", "| kind | page | recorded | what the check saw |", "|---|---|---|---|"]
        lines += [f"| {kind} | {name} | {'blank' if blank else 'read'} | {seen} |"
                  for kind, name, blank, seen in sorted(verdicts)]
    print("\n".join(lines))
    print(f"written: {_common.save('blank_pages.txt', lines, args.out)}")


if __name__ == "__main__":
    main()
