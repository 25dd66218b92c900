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

from PIL import Image

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


def main(argv: list[str] | None = None) -> None:
    from ocrwatch.scan import faint, inkcover, orient

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, required=True, metavar="DIR")
    parser.add_argument("--out", type=Path, default=None, metavar="FILE")
    args = parser.parse_args(argv)
    found: dict[str, list[tuple[str, bool, float, float]]] = {kind: [] for kind in KINDS}
    times: list[float] = []
    checked: list[float] = []  # the faint-print check's time, on the pages it is made on
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
                    blank = not faint.is_faint_print(image, detector)
                    checked.append(time.perf_counter() - started)
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
    print("\n".join(lines))
    print(f"written: {_common.save('blank_pages.txt', lines, args.out)}")


if __name__ == "__main__":
    main()
